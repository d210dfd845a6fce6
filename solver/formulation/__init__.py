"""The formulation: step time and memory per pipeline stage, as pure numpy functions over
arrays of configurations (`space.shapes.Shapes`). The single source of truth for every cost: the CP-SAT
encoding, the exhaustive search and the Alpa-style DP all read `stage_coefficients`.

Sources: Narayanan et al. 2021 (SC21) Eq. (1)-(4) for FLOPs and the pipeline; Korthikanti
et al. 2022 Table 2 for activation memory; Rajbhandari et al. (ZeRO) and the Megatron-LM
distributed-optimizer docs for model-state bytes; Alpa (OSDI'22) for the stage objective;
Pipette (DATE'24) for the p2p term on the 1F1B critical path.
"""
