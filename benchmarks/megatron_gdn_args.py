"""Megatron-LM accepts the launch arguments of Gated DeltaNet plans (Qwen3.5, Qwen3-Next).

    python benchmarks/megatron_gdn_args.py --megatron-lm PATH [--out benchmarks/results/megatron_gdn_args.md]

The same calls as benchmarks/megatron_args.py (Megatron-LM's own `parse_args`, `validate_args` and
`core_transformer_config_from_args`, CPU torch, the planned GPU's compute capability stubbed) on the arguments
solveplan prints for plans of Qwen3.5's released config.json files (tests/data/hf/Qwen3.5-*), which solveplan
launches as Megatron-Bridge builds them: pretrain_gpt.py with `--experimental-attention-variant gdn`
(render/megatron_hybrid.py `gdn_as_gpt`). Compared with the plan: the GPT model's architecture and experts
(megatron_args.py's `planned_architecture` / `built_architecture` and `planned_moe` / `built_moe` on the GPT
view of the model), which layers are Gated DeltaNet (Megatron's own `get_linear_attention_pattern` of the
config it built) against the model's pattern, the Gated DeltaNet's heads, head dimensions and conv width, the
attention output gate, the layer split each pipeline rank builds (half the plan's hybrid layers: each GPT layer
is a token mixer and its MLP) and the virtual stages, data parallelism, optimizer sharding and precision. A
pattern that is not a GPT model's layers (Gated DeltaNet next to Mamba, two mixers in a row) goes to
pretrain_hybrid.py instead (its 'G' symbol; megatron_hybrid_args.py's comparison). Controls break one rule
each. bf16 plans: Megatron's TransformerConfig refuses MoE FP8 without Transformer Engine, which is CUDA-only.
Exits 2 when Megatron-LM cannot be imported.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
from pathlib import Path

from _common import ROOT
from megatron_args import (
    CHECK_ERRORS,
    built_architecture,
    built_diff,
    built_moe,
    check_report,
    megatron_configs,
    megatron_launch,
    megatron_split,
    plan_rows_table,
    planned_architecture,
    planned_moe,
    refusal,
    run_checks,
)
from solveplan.catalog import load_cluster, load_model
from solveplan.optimize import optimize
from solveplan.plan import plan_config
from solveplan.render.megatron import megatron_args
from solveplan.render.megatron_hybrid import gdn_as_gpt, gpt_view
from solveplan.specs import JobSpec

HF = ROOT / "tests" / "data" / "hf"


def qwen(size: str) -> str:
    return str(HF / f"Qwen3.5-{size}" / "config.json")


# (label, model, cluster, explicit configuration or None for optimize, job extras)
CASES = [
    ("optimize: Qwen3.5-35B-A3B", qwen("35B-A3B"), "h100x64", None, {"global_batch_size": 512, "seq_length": 8192}),
    ("Qwen3.5-35B-A3B, tp 2 + SP, EP 8, pp 2 x vp 2", qwen("35B-A3B"), "h100x64",
     dict(tp=2, pp=2, vp=2, ep=8, etp=1, sequence_parallel=True), {"global_batch_size": 512, "seq_length": 8192}),
    ("Qwen3.5-397B-A17B, EP 32 across nodes, pp 4 uneven", qwen("397B-A17B"), "h100x512",
     dict(tp=2, pp=4, ep=32, etp=1, sequence_parallel=True, layers=[24, 32, 32, 32]),
     {"global_batch_size": 1024, "seq_length": 4096}),
    ("optimize: Qwen3.5-397B-A17B on GB200", qwen("397B-A17B"), "gb200x144", None,
     {"global_batch_size": 1024, "seq_length": 8192}),
    ("Qwen3.5-122B-A10B on B200, EP 16, pp 2", qwen("122B-A10B"), "b200x64",
     dict(tp=1, pp=2, ep=16, etp=1), {"global_batch_size": 512, "seq_length": 8192}),
    ("optimize: Qwen3.5-27B (dense MLPs)", qwen("27B"), "h100x64", None, {"global_batch_size": 512,
                                                                          "seq_length": 8192}),
    ("Qwen3.5-35B-A3B at 32k tokens, tp 2 x cp 4 (the heads' all-to-all), EP 8", qwen("35B-A3B"), "h100x16",
     dict(tp=2, cp=4, pp=2, ep=8, etp=1, sequence_parallel=True), {"global_batch_size": 64, "seq_length": 32768}),
    ("optimize: Qwen3.5-35B-A3B at 128k tokens", qwen("35B-A3B"), "h100x64", None,
     {"global_batch_size": 64, "seq_length": 131072}),
]
CONTROLS = [(1, "--linear-attention-freq dropped (TransformerConfig: must be set for gdn)",
             lambda a: _drop(a, "--linear-attention-freq", 1)),
            (1, "linear value heads 30, not a multiple of the 16 key heads",
             lambda a: _set(a, "--linear-num-value-heads", "30")),
            (2, "--attention-output-gate dropped (the ungated attention built)",
             lambda a: [x for x in a if x != "--attention-output-gate"]),
            (6, "4 linear key heads over tp 2 x cp 4 (TransformerConfig: a multiple of tp x cp)",
             lambda a: _set(a, "--linear-num-key-heads", "4"))]


def _drop(args: list[str], flag: str, nvalues: int) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 1 + nvalues:]


def _set(args: list[str], flag: str, value: str) -> list[str]:
    i = args.index(flag) + 1
    return args[:i] + [value] + args[i + 1:]


def _plan(model_ref, cluster, cfg, extras):
    with contextlib.redirect_stderr(io.StringIO()):
        model = load_model(model_ref)
    job = JobSpec(model=model, cluster=load_cluster(cluster), **extras)
    if cfg is None:
        res = optimize(job, time_limit_s=60, textbook=False)
        return job, res.plan, str(res.status).split(".")[-1]
    return job, plan_config(job, cfg), "explicit"


def built_gdn(M, cfg) -> dict:
    """The Gated DeltaNet Megatron built: the variant, its layers (Megatron's own pattern: 1 linear attention),
    the kernel's dimensions and the attention output gate."""
    specs = importlib.import_module("megatron.core.models.gpt.experimental_attention_variant_module_specs")
    return dict(variant=cfg.experimental_attention_variant, linear=tuple(specs.get_linear_attention_pattern(cfg)),
                heads=(cfg.linear_num_key_heads, cfg.linear_num_value_heads),
                dims=(cfg.linear_key_head_dim, cfg.linear_value_head_dim), conv=cfg.linear_conv_kernel_dim,
                gate=bool(cfg.attention_output_gate))


def planned_gdn(model) -> dict:
    p = model.hybrid_layer_pattern
    return dict(variant="gdn", linear=tuple(int(c == "G") for c in p[0::2]),
                heads=(model.gdn_num_key_heads, model.gdn_num_value_heads),
                dims=(model.gdn_key_head_dim, model.gdn_value_head_dim), conv=model.gdn_conv_kernel,
                gate=model.attention_output_gate)


def check(M, label, model_ref, cluster, cfg, extras, mutate=None) -> dict:
    try:
        job, plan, status = _plan(model_ref, cluster, cfg, extras)
    except Exception as exc:  # a configuration the planner refuses is a result, not a crash
        return dict(label=label, cluster=cluster, error=f"no plan: {type(exc).__name__}: {exc}", ok=False)
    ma = megatron_args(job, plan)
    if mutate is not None:
        ma.args = mutate(list(ma.args))
    par, gpt_layers = plan.parallel, [n // 2 for n in plan.layers_per_stage]
    row = dict(label=label, model=Path(model_ref).parent.name, cluster=cluster, par=par, status=status,
               layers=gpt_layers, entry=ma.entry, freq=ma.flags().get("--linear-attention-freq"))
    try:
        assert gdn_as_gpt(job.model), "not a GPT model's layers"
        with megatron_launch(M, job, ma):
            args, cfg_, gpt = megatron_configs(M)
        view = gpt_view(job.model)
        want = planned_architecture(view, par.cp) | planned_gdn(job.model) | {"mtp": view.mtp_num_layers}
        got = built_architecture(args, cfg_, gpt) | built_gdn(M, cfg_) | {"mtp": cfg_.mtp_num_layers or 0}
        if view.is_moe:
            # the GPT view plans its MoE part; the attention variant it builds is the Gated DeltaNet (planned_gdn)
            want, got = want | planned_moe(view, plan) | {"attention_variant": "gdn"}, got | built_moe(args, cfg_)
        row["megatron_split"] = megatron_split(M, cfg_, par.pp, par.vp)
        row["diff"] = built_diff(want, got, job, par.zero, args, cfg_)
        row["ok"] = (not row["diff"] and row["megatron_split"] == gpt_layers and ma.entry == "pretrain_gpt.py"
                     and (args.virtual_pipeline_model_parallel_size or 1) == par.vp and args.data_parallel_size == par.dp)
    except CHECK_ERRORS as exc:
        row["error"], row["ok"] = refusal(exc), False
    return row


def report(rows, controls, commit, elapsed) -> str:
    return check_report(
        "Megatron-LM accepts the launch arguments of Gated DeltaNet plans", "megatron_gdn_args.py",
        f"NVIDIA/Megatron-LM at `{commit}`", elapsed, rows,
        "Gated DeltaNet plans accepted** by `parse_args` / `validate_args` / `core_transformer_config_from_args` "
        "(entry `pretrain_gpt.py`, `--experimental-attention-variant gdn`), with the architecture, experts, Gated "
        "DeltaNet layers and dimensions, output gate, layer split, virtual stages, data parallelism, sharding and "
        "precision Megatron derives equal to the plan's.",
        ["GPT layers per rank (plan = Megatron)", "--linear-attention-freq"], plan_rows_table(rows, "freq"), controls)


def main(argv=None) -> int:
    return run_checks(argv, __doc__, "megatron_gdn_args.md", CASES, CONTROLS, check, report)


if __name__ == "__main__":
    sys.exit(main())
