"""Megatron-LM's `dev` branch accepts the launch arguments of DeepSeek-V4 plans (Flash, Pro).

    python benchmarks/megatron_dsv4_args.py --megatron-lm PATH [--out benchmarks/results/megatron_dsv4_args.md]

DeepSeek-V4's attention (`--experimental-attention-variant dsv4_hybrid`), mHC and hash routing exist on
NVIDIA/Megatron-LM's `dev` branch only, so PATH is a checkout of it. The same calls as benchmarks/megatron_args.py
(Megatron-LM's own `parse_args`, `validate_args` and `core_transformer_config_from_args`, CPU torch, the planned
GPU's compute capability and the DSA kernels' CUDA check stubbed as there) on the arguments solveplan prints for
plans of the released config.json files (tests/data/hf/DeepSeek-V4-*). Compared with the plan: the GPT model's
architecture and experts (megatron_args.py's `planned_architecture` / `built_architecture`, `planned_moe` /
`built_moe`), and the fields that build DeepSeek-V4 (`DSV4_FIELDS`: the per-layer compression ratios, window,
indexer, grouped output projection, mHC streams and Sinkhorn iterations, hash-routed layers, router scores, the
compressed layers' RoPE base; their YaRN with the architecture's `rope_yarn`), the
layer split each pipeline rank and virtual stage builds, data parallelism, sharding and precision. With pp > 1
Megatron needs a pipeline layout holding the hash-routed layers on the embedding's stage (transformer_config.py
~2882-2896): the plans carry one. bf16 plans: Megatron's TransformerConfig refuses MoE FP8 without Transformer
Engine, which is CUDA-only (the recipes' MXFP8 is a precision flag away). The single KV head is built by the
attention itself (linear_kv_proj h -> v_head_dim), not by a query-group field, so the comparison takes it as built.
Controls break one rule each. Exits 2 when Megatron-LM cannot be imported.
"""

from __future__ import annotations

import sys

from _common import ROOT
from megatron_args import _drop, _set, check_moe, check_report, moe_rows_table, run_checks

HF = ROOT / "tests" / "data" / "hf"
FLASH, PRO = str(HF / "DeepSeek-V4-Flash" / "config.json"), str(HF / "DeepSeek-V4-Pro" / "config.json")

# (label, model, cluster, explicit configuration or None for optimize, job extras, model updates)
CASES = [
    ("DeepSeek-V4-Flash at Megatron's GB200 recipe's degrees: tp 1, pp 1, EP 64, 128 GPUs", FLASH, "gb200x128",
     dict(tp=1, pp=1, ep=64, etp=1, micro_batch_size=1), {"global_batch_size": 2048, "seq_length": 4096}, {}),
    ("optimize: DeepSeek-V4-Flash on 128 GB200", FLASH, "gb200x128", None,
     {"global_batch_size": 2048, "seq_length": 4096}, {}),
    ("DeepSeek-V4-Flash, pp 4 (layout: the 3 hash-routed layers on the embedding's stage), EP 32", FLASH, "h100x256",
     dict(tp=1, pp=4, ep=32, etp=1), {"global_batch_size": 1024, "seq_length": 4096}, {}),
    ("DeepSeek-V4-Pro, pp 4 x vp 2, EP 64, 256 GB300", PRO, "gb300x256",
     dict(tp=1, pp=4, vp=2, ep=64, etp=1), {"global_batch_size": 4096, "seq_length": 4096}, {}),
]
CONTROLS = [
    (0, "tp 2 (dsv4_hybrid runs with tensor parallelism 1 only)",
     lambda a, e: (_set(a, "--tensor-model-parallel-size", "2") + ["--sequence-parallel"], e)),
    (2, "the layout dropped with pp 4 (hash-routed layers need one)",
     lambda a, e: (_drop(a, "--pipeline-model-parallel-layout", 1), e)),
    (2, "a layout whose first stage holds 2 of the 3 hash-routed layers",
     lambda a, e: (_set(a, "--pipeline-model-parallel-layout", a[a.index("--pipeline-model-parallel-layout") + 1]
                        .replace("E,t*13|t*10|", "E,t*2|t*21|", 1)), e)),
    (0, "hash-routed layers with the EP all-to-all overlap",
     lambda a, e: (a + ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"], e)),
    (0, "the compressed layers' RoPE base dropped (--csa-compress-rotary-base: Megatron's 40000, the config's 160000)",
     lambda a, e: (_drop(a, "--csa-compress-rotary-base", 1), e)),
    (0, "their YaRN's original context dropped (--original-max-position-embeddings: 4096, the config's 65536)",
     lambda a, e: (_drop(a, "--original-max-position-embeddings", 1), e)),
]


def report(rows, controls, commit, elapsed) -> str:
    return check_report(
        "Megatron-LM (dev) accepts the launch arguments of DeepSeek-V4 plans", "megatron_dsv4_args.py",
        f"NVIDIA/Megatron-LM's dev branch at `{commit}`", elapsed, rows,
        "DeepSeek-V4 plans accepted** by `parse_args` / `validate_args` / `core_transformer_config_from_args`, with "
        "the architecture, experts, DeepSeek-V4 fields (compression ratios, window, indexer, grouped output, mHC, "
        "hash-routed layers, router scores, the compressed layers' RoPE base and YaRN), layer split, virtual stages, "
        "data parallelism, sharding and precision Megatron derives equal to the plan's.",
        ["EP group spans nodes", "layers per stage (plan = Megatron)", "--moe-layer-freq"], moe_rows_table(rows),
        controls)


def main(argv=None) -> int:
    return run_checks(argv, __doc__, "megatron_dsv4_args.md", CASES, CONTROLS, check_moe, report)


if __name__ == "__main__":
    sys.exit(main())
