"""Megatron-LM accepts the launch arguments of hybrid Mamba-Transformer plans (and Gated DeltaNet layers in a
hybrid pattern).

    python benchmarks/megatron_hybrid_args.py --megatron-lm PATH [--out benchmarks/results/megatron_hybrid_args.md]

The same calls as benchmarks/megatron_args.py (Megatron-LM's own `parse_args`, `validate_args` and
`core_transformer_config_from_args`, CPU torch, the planned GPU's compute capability stubbed, Transformer Engine's
version checks where the launch notes state the version) on the
arguments solveplan prints for hybrid plans (Nemotron 3 Nano, Nemotron-H 56B, a periodic pattern
pipelined over 2 ranks x 2 virtual stages): explicit configurations through `plan_config` and
`optimize`'s own plans. Compared with the plan: the layer pattern Megatron parses (pipe segments
removed) and its layer count, the layers each pipeline rank builds (Megatron's rule,
hybrid_layer_allocation.select_pipeline_segment: segment vp_stage * pp + pp_rank) and the virtual
stages validate_args derives, the Mamba-2 and Gated DeltaNet dimensions, the experts (count, top-k, FFN, shared,
router and its top-k scaling, LatentMoE's latent size), the MTP block (Megatron's unified pattern "main/mtp/mtp" as its own
`parse_hybrid_pattern` reads it: the depth's layers and count, and TransformerConfig's mtp_num_layers and
mtp_use_repeated_layer; Nemotron 3 Super's 2 repeated "*E" depths) and the parallel degrees (tp, ep,
etp, sequence parallelism). bf16 plans: Megatron's
TransformerConfig refuses MoE FP8 without Transformer Engine, which is CUDA-only. One control
breaks a rule validate_args enforces for hybrid models (a GPT virtual-stage flag next to the
pattern); two break the MTP pattern's rules (depths that differ, a '|' inside a depth); one drops
--te-precision-config-file from the Nemotron 3 Super NVFP4 plan with Megatron-Bridge's te_quant.cfg, whose
per-role precision Megatron then resolves differently (megatron_args.py `megatron_role_precisions`). Exits 2 when Megatron-LM cannot be imported.
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
    built_diff,
    check_report,
    megatron_configs,
    megatron_launch,
    plan_rows_table,
    refusal,
    run_checks,
)
from solveplan.calibration.precision_rows import NVFP4_TE_CONFIG, te_config_rules
from solveplan.catalog import load_cluster, load_model
from solveplan.optimize import optimize
from solveplan.plan import plan_config
from solveplan.render.megatron import megatron_args
from solveplan.specs import JobSpec

HF = ROOT / "tests" / "data" / "hf"
# Megatron-Bridge's te_quant.cfg as the package ships it for the published rows (a test holds it byte-equal to
# tests/data/megatron_bridge/te_quant.cfg, PROVENANCE.md)
TE_QUANT_RULES = te_config_rules(NVFP4_TE_CONFIG[("mbridge_perf", "nemotron3-super")])
NANO_HF, H56_HF = str(HF / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" / "config.json"), str(
    HF / "Nemotron-H-56B-Base-8K" / "config.json")
PERIODIC = dict(name="hybrid-periodic-24", num_layers=24, hidden_size=2048, num_attention_heads=16, num_kv_heads=8,
                kv_channels=128, ffn_hidden_size=8192, vocab_size=32000, activation="squared_relu",
                normalization="RMSNorm", add_bias_linear=False, position_embedding="none", dropout=0.0,
                hybrid_layer_pattern="M*M-" * 6, mamba_state_dim=128, mamba_head_dim=64, mamba_num_heads=64,
                mamba_num_groups=8, nominal_params_b=None, source="test pattern")
# a LatentMoE hybrid (Nemotron 3 Super's kind of MoE layer, small): experts in a 512 latent of the 2048 width
LATENT = {**PERIODIC, "name": "hybrid-latent-moe-24", "hybrid_layer_pattern": "M*ME" * 6, "num_experts": 16,
          "moe_ffn_hidden_size": 1024, "moe_router_topk": 4, "moe_shared_expert_intermediate_size": 2048,
          "moe_router_score_function": "sigmoid", "moe_router_enable_expert_bias": True, "moe_latent_size": 512}
# a hybrid model with MTP depths of their own weights (Megatron's unified pattern "main/M-/M-/M-")
MTP = {**PERIODIC, "name": "hybrid-mtp-24", "mtp_num_layers": 3, "mtp_hybrid_layer_pattern": "M-"}
# Gated DeltaNet layers in a pattern that is not a GPT model's layers (two mixers in a row, next to Mamba):
# pretrain_hybrid.py with its 'G' symbols and the --linear-* sizes
GDN = {**PERIODIC, "name": "hybrid-gdn-24", "hybrid_layer_pattern": "GM*-" * 6, "gdn_num_key_heads": 8,
       "gdn_num_value_heads": 16, "gdn_key_head_dim": 128, "gdn_value_head_dim": 128}
# (label, model, cluster, explicit configuration or None for optimize, job extras)
CASES = [
    ("Nemotron 3 Nano, EP 8 (the published H100 runs' shape)", "nemotron3-nano", "h100x16",
     dict(tp=1, pp=1, ep=8, etp=1), {"global_batch_size": 1024, "seq_length": 8192}),
    ("Nemotron 3 Nano config.json, tp 2 + SP, EP 8 over 4 nodes", NANO_HF, "h100x32",
     dict(tp=2, pp=1, ep=8, etp=1, sequence_parallel=True), {"global_batch_size": 512, "seq_length": 8192}),
    ("optimize: Nemotron 3 Nano config.json", NANO_HF, "h100x16", None, {"global_batch_size": 1024, "seq_length": 8192}),
    ("Nemotron-H 56B (Mamba, attention, MLP), tp 8", H56_HF, "h100x64", dict(tp=8, pp=1),
     {"global_batch_size": 512, "seq_length": 8192}),
    ("optimize: Nemotron-H 56B", H56_HF, "h100x64", None, {"global_batch_size": 512, "seq_length": 8192}),
    ("periodic pattern, pp 2 x vp 2 (pipe segments)", PERIODIC, "h100x8", dict(tp=1, pp=2, vp=2),
     {"global_batch_size": 64, "seq_length": 4096}),
    ("periodic pattern, uneven pp 4", PERIODIC, "h100x8", dict(tp=1, pp=4, layers=[4, 8, 8, 4]),
     {"global_batch_size": 64, "seq_length": 4096}),
    ("LatentMoE hybrid (--moe-latent-size), tp 2 + SP, EP 4", LATENT, "h100x8",
     dict(tp=2, pp=1, ep=4, etp=1, sequence_parallel=True), {"global_batch_size": 64, "seq_length": 4096}),
    ("Nemotron 3 Super with its MTP block (2 repeated *E depths), EP 64 (the published B200/GB300 runs' shape)",
     "nemotron3-super", "b200x64", dict(tp=1, pp=1, ep=64, etp=1), {"global_batch_size": 512, "seq_length": 8192}),
    ("Nemotron 3 Super, tp 2 + SP, EP 64 (the published GB200 runs' shape)", "nemotron3-super", "gb200x64",
     dict(tp=2, pp=1, ep=64, etp=1, sequence_parallel=True), {"global_batch_size": 512, "seq_length": 8192}),
    ("optimize: Nemotron 3 Super", "nemotron3-super", "b200x64", None, {"global_batch_size": 512, "seq_length": 8192}),
    ("hybrid MTP, 3 separate M- depths, pp 2 x vp 2", MTP, "h100x8", dict(tp=1, pp=2, vp=2),
     {"global_batch_size": 64, "seq_length": 4096}),
    # Megatron-Bridge's Nemotron-H GB200 recipe (perf_recipes/nemotronh/gb200/nemotronh.py:269-276 at 067f987):
    # the fused grouped MLP offloaded, its activation recomputed
    ("Nemotron 3 Nano on GB200, fused_group_mlp offloaded (TE op fuser, fused weighted squared ReLU), moe_act "
     "recomputed", "nemotron3-nano", "gb200x8", dict(tp=1, pp=1, ep=8, etp=1, recompute="selective"),
     {"global_batch_size": 512, "seq_length": 8192, "offload_modules": ("fused_group_mlp",),
      "recompute_modules": ("moe_act",)}),
    # Megatron-FSDP as Megatron-Bridge's Nemotron 3 Ultra recipes shard (perf_recipes/nemotronh/common.py
    # `_apply_nemotron_3_ultra_fsdp_hsdp` at 067f987: use_megatron_fsdp, optim_grads_params)
    ("Nemotron 3 Super, Megatron-FSDP (ZeRO-3) with EP 64 on 256 GB200s", "nemotron3-super", "gb200x256",
     dict(tp=1, pp=1, ep=64, etp=1, zero=3), {"global_batch_size": 1024, "seq_length": 8192}),
    # Megatron-Bridge's Nemotron 3 Ultra GB300 recipe (perf_recipes/nemotronh/gb300/nemotronh.py and common.py at
    # 067f987): HSDP with one instance per 64-GPU NVLink domain, EP 64, MXFP8, fused grouped MLP offloaded, moe_act
    # recomputed, its MTP block run twice
    ("Nemotron 3 Ultra on 256 GB300s as Megatron-Bridge's recipe: HSDP (4 instances), EP 64, fused_group_mlp "
     "offloaded", "nemotron3-ultra", "gb300x256", dict(tp=1, pp=1, ep=64, etp=1, zero=3, recompute="selective"),
     {"global_batch_size": 256, "seq_length": 8192, "precision": "mxfp8", "distributed_optimizer_instances": 4,
      "offload_modules": ("fused_group_mlp",), "recompute_modules": ("moe_act",), "moe_token_dispatcher": "flex",
      "min_offloaded_tensor_size": 500_000_000}),
    # Megatron-Bridge's Nemotron 3 Super NVFP4 recipe (perf_recipes/nemotronh/gb200/nemotronh.py at v0.6.0): its
    # te_quant.cfg as --te-precision-config-file (the file the launch note writes), the last 14 layers in BF16
    ("Nemotron 3 Super NVFP4 with Megatron-Bridge's te_quant.cfg (--te-precision-config-file), tp 2 + SP, EP 64",
     "nemotron3-super", "gb200x64", dict(tp=2, pp=1, ep=64, etp=1, sequence_parallel=True),
     {"global_batch_size": 512, "seq_length": 8192, "precision": "nvfp4", "bf16_layers_at_end": 14,
      "module_precision": TE_QUANT_RULES}),
    ("Gated DeltaNet beside Mamba (G and M symbols), tp 2 + SP, pp 2", GDN, "h100x8",
     dict(tp=2, pp=2, sequence_parallel=True), {"global_batch_size": 64, "seq_length": 4096}),
]


def _pattern_edit(edit):
    """The arguments with --hybrid-layer-pattern's value rewritten by `edit`."""
    def go(a):
        i = a.index("--hybrid-layer-pattern") + 1
        return a[:i] + [edit(a[i])] + a[i + 1:]
    return go


CONTROLS = [(5, "--num-virtual-stages-per-pipeline-rank beside the pattern's segments",
             lambda a: a + ["--num-virtual-stages-per-pipeline-rank", "2"]),
            (8, "MTP depths that differ (parse_hybrid_pattern: all MTP patterns identical)",
             _pattern_edit(lambda p: p[:-3] + "/E*")),
            (8, "a pipe inside an MTP depth (_validate_pattern allow_pipe False)",
             _pattern_edit(lambda p: p.replace("/*E", "/*|E"))),
            (15, "the te_quant.cfg plan launched without --te-precision-config-file (every module at NVFP4)",
             lambda a: [x for i, x in enumerate(a) if "--te-precision-config-file" not in a[max(i - 1, 0):i + 1]])]


def _plan(model_ref, cluster, cfg, extras):
    with contextlib.redirect_stderr(io.StringIO()):
        model = load_model(model_ref)
    job = JobSpec(model=model, cluster=load_cluster(cluster), **extras)
    if cfg is None:
        res = optimize(job, time_limit_s=60, textbook=False)
        return job, res.plan, str(res.status).split(".")[-1]
    return job, plan_config(job, cfg), "explicit"


def _built(M, args, cfg, pp: int) -> dict:
    """What Megatron derived: the main pattern's segments and layers, the MTP depths as
    `parse_hybrid_pattern` reads the unified pattern and TransformerConfig holds them."""
    parse = importlib.import_module("megatron.core.models.hybrid.hybrid_layer_allocation").parse_hybrid_pattern
    parsed = parse(args.hybrid_layer_pattern)
    segments = parsed.main_pattern.split("|")
    split = [sum(len(segments[v * pp + r]) for v in range(len(segments) // pp)) for r in range(pp)]
    d = dict(pattern=parsed.main_pattern.replace("|", ""), num_layers=cfg.num_layers, split=split,
             mtp=(parsed.mtp_pattern, parsed.mtp_num_depths, cfg.mtp_num_layers or 0, bool(cfg.mtp_use_repeated_layer)),
             vp=args.virtual_pipeline_model_parallel_size or 1, tp=cfg.tensor_model_parallel_size,
             sp=bool(cfg.sequence_parallel), mamba=(cfg.mamba_num_heads, cfg.mamba_head_dim, cfg.mamba_num_groups,
                                                   cfg.mamba_state_dim) if "M" in parsed.main_pattern else None,
             gdn=(cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_key_head_dim,
                  cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim) if "G" in parsed.main_pattern else None,
             hybrid=bool(cfg.is_hybrid_model))
    if cfg.num_moe_experts:
        d.update(experts=(cfg.num_moe_experts, cfg.moe_router_topk, cfg.moe_ffn_hidden_size,
                          cfg.moe_shared_expert_intermediate_size, cfg.moe_router_score_function,
                          cfg.moe_router_enable_expert_bias, getattr(cfg, "moe_latent_size", None),
                          cfg.moe_router_topk_scaling_factor),
                 ep=cfg.expert_model_parallel_size,
                 etp=cfg.expert_tensor_parallel_size)
    return d


def _planned(model, plan) -> dict:
    par = plan.parallel
    d = dict(pattern=model.hybrid_layer_pattern, num_layers=model.num_layers, split=list(plan.layers_per_stage),
             mtp=(model.mtp_hybrid_layer_pattern, model.mtp_num_layers, model.mtp_num_layers,
                  model.mtp_use_repeated_layer),
             vp=par.vp, tp=par.tp, sp=bool(par.sequence_parallel),
             mamba=model.mamba_dims if model.mamba_num_heads is not None else None,
             gdn=(model.gdn_num_key_heads, model.gdn_num_value_heads, model.gdn_key_head_dim, model.gdn_value_head_dim,
                  model.gdn_conv_kernel) if model.gdn_num_key_heads is not None else None, hybrid=True)
    if model.is_moe:
        d.update(experts=(model.num_experts, model.moe_router_topk, model.moe_ffn_hidden_size,
                          model.moe_shared_expert_intermediate_size, model.moe_router_score_function,
                          model.moe_router_enable_expert_bias, model.moe_latent_size,
                          model.moe_router_topk_scaling_factor), ep=par.ep, etp=par.etp)
    return d


def check(M, label, model_ref, cluster, cfg, extras, mutate=None) -> dict:
    try:
        job, plan, status = _plan(model_ref, cluster, cfg, extras)
    except Exception as exc:  # a configuration the planner refuses is a result, not a crash
        return dict(label=label, cluster=cluster, error=f"no plan: {type(exc).__name__}: {exc}", ok=False)
    ma = megatron_args(job, plan)
    if mutate is not None:
        ma.args = mutate(list(ma.args))
    name = Path(model_ref).parent.name if str(model_ref).endswith(".json") else job.model.name
    row = dict(label=label, model=name, cluster=cluster, par=plan.parallel, status=status,
               layers=list(plan.layers_per_stage), pattern=ma.flags().get("--hybrid-layer-pattern"),
               entry=ma.entry)
    try:
        with megatron_launch(M, job, ma):
            args, cfg_, _ = megatron_configs(M, gpt=False)
        got, want = _built(M, args, cfg_, plan.parallel.pp), _planned(job.model, plan)
        row["diff"] = built_diff(want, got, job, plan.parallel.zero, args, cfg_)
        row["megatron_split"] = got["split"]
        row["ok"] = not row["diff"] and ma.entry == "pretrain_hybrid.py"
    except CHECK_ERRORS as exc:
        row["error"], row["ok"] = refusal(exc), False
    return row


def report(rows, controls, commit, elapsed) -> str:
    return check_report(
        "Megatron-LM accepts the launch arguments of hybrid Mamba-Transformer plans", "megatron_hybrid_args.py",
        f"NVIDIA/Megatron-LM at `{commit}`", elapsed, rows,
        "hybrid plans accepted** by `parse_args` / `validate_args` / `core_transformer_config_from_args`, with the "
        "pattern, layer split, virtual stages, Mamba-2 and Gated DeltaNet dimensions, experts, parallel degrees, "
        "optimizer sharding (Megatron-FSDP strategy, HSDP instances) and the precision and offloading settings (as "
        "megatron_args.py's precision_diff) Megatron derives equal to the plan's; entry script `pretrain_hybrid.py`.",
        ["layers per rank (plan = Megatron)", "--hybrid-layer-pattern"], plan_rows_table(rows, "pattern"), controls)


def main(argv=None) -> int:
    return run_checks(argv, __doc__, "megatron_hybrid_args.md", CASES, CONTROLS, check, report)


if __name__ == "__main__":
    sys.exit(main())
