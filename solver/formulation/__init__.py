"""The formulation: step time and memory per pipeline stage, as pure numpy functions over
arrays of configurations (`space.shapes.Shapes`); it imports no solver, CLI or file I/O. The
single source of truth for every cost, in the order it is built:

- `flops`: FLOPs; `kernels`: GEMM (by per-GPU shape), attention and elementwise kernel times;
  `comm`: NCCL collectives on each group's links; `memory`: model state, activations and the
  allocator's reserve; `coefficients`: per shape, every cost of a stage as a linear function
  of its layer count (from the four above); `job`: the same for a JobSpec, and MFU;
- `pipeline`: the one composition of stage time and memory (`stage_arrays`,
  `stage_memory_bytes`, `pipeline_s`) and the float evaluation of a split;
- `linear`: the step time in its linear form, per-stage memory limits on the layer count;
- `splits`: the balanced split and water-filling (heuristic and least-memory splits).

The CP-SAT encoding, the exhaustive search, the Alpa-style DP and placement pricing all read
these; none has a second copy of a cost.

Sources: Narayanan et al. 2021 (SC21) Eq. (1)-(4) for FLOPs and the pipeline; NVIDIA's
GEMM performance guide (tile and wave quantisation); Dao 2023 and Shah et al. 2024
(FlashAttention-2/3) for attention; Thakur et al. 2005 and NCCL for collectives; Korthikanti
et al. 2022 Table 2 for activation memory; Rajbhandari et al. (ZeRO) and the Megatron-LM
distributed-optimizer docs for model-state bytes; Alpa (OSDI'22) for the stage objective;
Pipette (DATE'24) for the p2p term on the 1F1B critical path.
"""
