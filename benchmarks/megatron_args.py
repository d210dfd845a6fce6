"""Do the launch arguments solveplan prints start Megatron-LM and build the planned model?

    python benchmarks/megatron_args.py --megatron-lm PATH [--catalog] [--out benchmarks/results/megatron_args.md]

For a spread of plans (ZeRO 0-3, context parallelism, interleaving, uneven splits, FP8, GPT-3 /
Llama / Qwen / Mistral / Nemotron / DeepSeek / GPT-NeoX and Hugging Face configs with a separate
head dimension) it runs `solveplan optimize`'s planner, renders the Megatron-LM arguments
(solveplan.render.megatron) and hands them, with the launch environment they come with, to
Megatron-LM's own code, on CPU:

1. `megatron.training.arguments.parse_args` (sys.argv = pretrain_gpt.py + the arguments + what
   a user adds: mock data, a null tokenizer with the model's vocabulary, train iterations, a
   learning rate), with WORLD_SIZE = the plan's GPUs;
2. `validate_args` (every assert there is a refusal at start-up);
3. `core_transformer_config_from_args` (TransformerConfig.__post_init__ validates the pipeline
   layout and uneven splits) and `gpt_config_from_args` (position embedding, rotary, tying);
4. the layer split Megatron derives (`get_num_layers_to_build`, or the layout's per-rank counts,
   per pipeline rank and virtual stage) against the plan's, and the architecture it builds
   (normalisation, biases, QKV bias, activation, gating, head dimension, query groups, RoPE base,
   fraction and scaling, tied embeddings) against the model spec.

What is stubbed, and why (nothing else is): `get_device_arch_version` reads the CUDA device;
there is none, so it returns the planned GPU's compute capability (A100 8, H100 9) - the value
validate_args' CUDA_DEVICE_MAX_CONNECTIONS rule depends on. Megatron-LM at HEAD imports
`typing.override` (Python 3.12); on Python 3.11 it is aliased from typing_extensions. Megatron
needs CPU torch and triton importable (pip install torch triton). Transformer Engine is CUDA-only
and absent, so `--no-rope-fusion` is added (TE provides the fused RoPE kernel; the flag changes a
kernel, not the model).

Without --megatron-lm, or when Megatron-LM cannot be imported, the script says so and exits 2
(1 when a plan is refused or a control accepted).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import time
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from solveplan.catalog import load_job  # noqa: E402
from solveplan.optimize import optimize  # noqa: E402
from solveplan.render.megatron import gpu_arch, megatron_args  # noqa: E402

HF = Path("tests") / "data" / "hf"  # relative to ROOT, the working directory while checking
# (label, model, cluster, constraints, job extras)
CASES = [
    ("README main job", "gpt3-13b", "a100x64", {}, {}),
    ("GPT-3 175B", "gpt3-175b", "a100x1024", {}, {}),
    ("ZeRO-3, no pipeline", "llama3.1-8b", "h100x64", {"zero": (3,), "pp": (1,)}, {}),
    ("ZeRO-2 with tp 2", "llama3.1-8b", "h100x64", {"zero": (2,), "tp": (2,)}, {}),
    ("ZeRO-1, tp 2, pp 2", "gpt3-13b", "a100x64", {"zero": (1,), "tp": (2,), "pp": (2,)}, {}),
    ("ZeRO-0, pp 4", "llama2-70b", "a100x128", {"zero": (0,), "pp": (4,)}, {}),
    ("context parallel 2", "llama3.1-8b", "h100x64", {"cp": (2,)}, {}),
    ("interleaved vp 2", "llama3.1-70b", "h100x512", {"vp": (2,)}, {}),
    ("Llama 3.1 405B", "llama3.1-405b", "h100x16384", {}, {}),
    ("FP8 Qwen2", "qwen2-7b", "h100x64", {}, {"precision": "fp8"}),
    ("Qwen2 72B", "qwen2-72b", "h100x256", {}, {}),
    ("Mistral 7B, ZeRO-0", "mistral-7b", "a100x64", {"zero": (0,)}, {}),
    ("Nemotron-4 15B", "nemotron4-15b", "h100x128", {}, {}),
    ("Nemotron-4 340B", "nemotron4-340b", "h100x1024", {}, {}),
    ("DeepSeek 67B (95 layers, uneven, vp 2)", "deepseek-llm-67b", "a100x256", {"pp": (4,), "vp": (2,)}, {}),
    ("GPT-NeoX 20B (rotary 25%, biases)", "gpt-neox-20b", "a100x64", {}, {}),
    ("Mistral-NeMo 12B (head_dim 128)", str(HF / "Mistral-Nemo-Base-2407" / "config.json"), "h100x64", {}, {}),
    ("Qwen3 32B (head_dim, QK norm), cp 2", str(HF / "Qwen3-32B" / "config.json"), "h100x128", {"cp": (2,)}, {}),
    ("Gemma 2 9B (GeGLU, head_dim 256)", str(HF / "gemma-2-9b-it" / "config.json"), "h100x32", {}, {}),
    ("Llama 3.1 70B FP8, uneven pp 3", "llama3.1-70b", "h100x192", {"pp": (3,)}, {"precision": "fp8"}),
    ("Llama 3.1 405B MXFP8 on 8 GB200 NVL72 racks", "llama3.1-405b", "gb200x576", {}, {"precision": "mxfp8"}),
    ("Llama 3.1 70B blockwise FP8", "llama3.1-70b", "h100x64", {}, {"precision": "fp8-blockwise"}),
    ("Llama 3.1 8B FP8 current scaling on GB300", "llama3.1-8b", "gb300x72", {}, {"precision": "fp8-tensorwise"}),
]
MXFP8_CASE = len(CASES) - 3
# what a user adds to the printed arguments (data, tokenizer, schedule), and --no-rope-fusion: the
# fused RoPE kernel is a Transformer Engine function, and TE (CUDA only) is not installed here
# Controls: the same plans with one rule broken must be refused (or build another model), so an
# "accepted" above is something the check could have denied. (case index, what is broken, edit)
CONTROLS = [
    (3, "ZeRO-2 without --ckpt-format fsdp_dtensor", lambda a, e: (_drop(a, "--ckpt-format", 1), e)),
    (4, "tp 2 without CUDA_DEVICE_MAX_CONNECTIONS=1", lambda a, e: (a, {})),
    (2, "ZeRO-3 with CUDA_DEVICE_MAX_CONNECTIONS=1", lambda a, e: (a, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})),
    (8, "Llama without --swiglu", lambda a, e: (_drop(a, "--swiglu", 0), e)),
    (10, "Qwen2 without --disable-bias-linear", lambda a, e: (_drop(a, "--disable-bias-linear", 0), e)),
    (14, "uneven split whose layout string loses one layer", lambda a, e: (_one_layer_less(a), e)),
    (MXFP8_CASE, "an FP8 recipe Megatron-LM does not know (mxfp8 misspelt)",
     lambda a, e: ([("mxfp8x" if x == "mxfp8" else x) for x in a], e)),
]
USER_ARGS = ["--mock-data", "--tokenizer-type", "NullTokenizer", "--train-iters", "10", "--lr", "1e-4",
             "--no-rope-fusion"]


def _drop(args: list[str], flag: str, nvalues: int) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 1 + nvalues:]


def _one_layer_less(args: list[str]) -> list[str]:
    i = args.index("--pipeline-model-parallel-layout") + 1
    n = int(re.search(r"t\*(\d+)", args[i]).group(1))
    return args[:i] + [args[i].replace(f"t*{n}", f"t*{n - 1}", 1)] + args[i + 1:]


def import_megatron(path: Path):
    if not (path / "megatron" / "training" / "arguments.py").is_file():
        raise RuntimeError(f"--megatron-lm {path}: no megatron/training/arguments.py there; give a Megatron-LM checkout")
    if not hasattr(typing, "override"):  # Megatron-LM HEAD is written for Python >= 3.12
        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, str(path))
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            import megatron.training.arguments as arguments
            from megatron.core import parallel_state
            from megatron.core.transformer import transformer_block
            from megatron.core.transformer.enums import LayerType
            from megatron.training.argument_utils import core_transformer_config_from_args, gpt_config_from_args
    except ImportError as exc:
        raise RuntimeError(f"cannot import Megatron-LM from {path}: {exc} (it needs CPU torch and triton: "
                           f"pip install torch triton)") from None
    return dict(arguments=arguments, parallel_state=parallel_state, block=transformer_block, LayerType=LayerType,
                core_cfg=core_transformer_config_from_args, gpt_cfg=gpt_config_from_args)


def megatron_split(M, cfg, pp: int, vp: int) -> list[int]:
    """Layers per pipeline rank as Megatron-LM builds them (summed over virtual stages)."""
    M["parallel_state"].set_virtual_pipeline_model_parallel_world_size(vp if vp > 1 else None)
    out = []
    for rank in range(pp):
        n = 0
        for v in range(vp):
            stage = v if vp > 1 else None
            if cfg.pipeline_model_parallel_layout is not None:
                n += cfg.pipeline_model_parallel_layout.get_num_layers_to_build(
                    M["LayerType"].decoder, vp_stage=stage, pp_rank=rank)
            else:
                n += M["block"].get_num_layers_to_build(cfg, vp_stage=stage, pp_rank=rank)
        out.append(n)
    return out


def built_architecture(args, cfg, gpt) -> dict:
    act = getattr(cfg.activation_func, "__name__", str(cfg.activation_func))
    act = {"silu": "swiglu", "squared_relu": "squared_relu", "quick_gelu": "geglu", "gelu": "gelu"}.get(act, act)
    return dict(normalization=cfg.normalization, norm_zero_centered_gamma=cfg.layernorm_zero_centered_gamma,
                add_bias_linear=cfg.add_bias_linear, add_qkv_bias=cfg.add_qkv_bias, activation=act,
                gated_mlp=cfg.gated_linear_unit, head_dim=cfg.kv_channels, num_kv_heads=cfg.num_query_groups
                or cfg.num_attention_heads, qk_norm=cfg.qk_layernorm, position_embedding=gpt.position_embedding_type,
                rotary_base=float(gpt.rotary_base) if gpt.position_embedding_type == "rope" else None,
                rotary_percent=gpt.rotary_percent if gpt.position_embedding_type == "rope" else None,
                rope_scaling_factor=args.rope_scaling_factor if args.use_rope_scaling else None,
                tied_embeddings=gpt.share_embeddings_and_output_weights, norm_epsilon=cfg.layernorm_epsilon)


def planned_architecture(model) -> dict:
    d = {k: getattr(model, k) for k in ("normalization", "norm_zero_centered_gamma", "add_bias_linear", "add_qkv_bias",
                                        "activation", "gated_mlp", "head_dim", "num_kv_heads", "qk_norm",
                                        "position_embedding", "rotary_base", "rotary_percent", "rope_scaling_factor",
                                        "tied_embeddings", "norm_epsilon")}
    d["activation"] = {"relu": "gelu"}.get(d["activation"], d["activation"])  # said in a note: no ReLU flag
    return d


def check(M, label, model_ref, cluster, constraints, extras, mutate=None):
    job = load_job({"model": model_ref, "cluster": cluster, **({"constraints": constraints} if constraints else {}), **extras})
    res = optimize(job, time_limit_s=60, textbook=False)
    if res.plan is None:
        return dict(label=label, error=f"no plan ({res.status})")
    plan, par = res.plan, res.plan.parallel
    ma = megatron_args(job, plan)
    if mutate is not None:
        ma.args, ma.env = mutate(list(ma.args), dict(ma.env))
    row = dict(label=label, model=job.model.name, cluster=cluster, par=par, layers=list(plan.layers_per_stage),
               env=ma.env, nargs=len(ma.args))
    arch = gpu_arch(job.cluster.gpu)
    M["arguments"].get_device_arch_version = lambda: arch
    saved_env = {k: os.environ.get(k) for k in ("WORLD_SIZE", "RANK", "CUDA_DEVICE_MAX_CONNECTIONS")}
    os.environ.update(WORLD_SIZE=str(job.cluster.num_gpus), RANK="0")
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update(ma.env)
    sys.argv = ["pretrain_gpt.py", *ma.args, *USER_ARGS, "--vocab-size", str(job.model.vocab_size)]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = M["arguments"].parse_args()
            M["arguments"].validate_args(args)
            cfg = M["core_cfg"](args)
            gpt = M["gpt_cfg"](args, cfg)
        row["megatron_split"] = megatron_split(M, cfg, par.pp, par.vp)
        row["megatron_vp"] = args.virtual_pipeline_model_parallel_size or 1
        row["dp"] = args.data_parallel_size
        got, want = built_architecture(args, cfg, gpt), planned_architecture(job.model)
        row["arch_diff"] = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
        row["ok"] = (row["megatron_split"] == row["layers"] and row["megatron_vp"] == par.vp and row["dp"] == par.dp
                     and not row["arch_diff"])
    except (AssertionError, ValueError, RuntimeError, TypeError, SystemExit) as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        row["ok"] = False
    finally:
        for k, v in saved_env.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return row


def catalog_cases():
    """Every catalog model's default plan: bf16 on A100, fp8 on H100, clusters sized to the model."""
    from solveplan.catalog import catalog_models

    for name, m in sorted(catalog_models().items()):
        if m.is_moe:  # MoE launch arguments are issue 22 item 5 (branch moelaunch)
            continue
        p = m.num_params / 1e9
        yield (name, name, "a100x64" if p < 20 else "a100x256" if p < 80 else "h100x1024", {}, {})
        yield (f"{name} fp8", name, "h100x64" if p < 20 else "h100x256" if p < 80 else "h100x2048", {},
               {"precision": "fp8"})


def report(rows, controls, commit, elapsed, catalog=None) -> str:
    ok = sum(1 for r in rows if r.get("ok"))
    lines = ["# Megatron-LM accepts the launch arguments", "",
             f"`python benchmarks/megatron_args.py --megatron-lm PATH` against NVIDIA/Megatron-LM at `{commit}`, CPU "
             f"torch: `parse_args`, `validate_args`, `core_transformer_config_from_args` and `gpt_config_from_args` "
             f"on the arguments solveplan prints for each plan (plus mock data, a null tokenizer with the model's "
             f"vocabulary, 10 iterations, a learning rate, and `--no-rope-fusion` because Transformer Engine, "
             f"which provides that kernel, is CUDA-only and absent), with WORLD_SIZE the plan's GPUs and the launch "
             f"environment solveplan prints. Stubbed: `get_device_arch_version` returns the planned GPU's compute "
             f"capability (no CUDA device here).", "",
             f"**{ok} of {len(rows)} plans accepted**, with the layer split and virtual stages Megatron derives "
             f"equal to the plan's and the architecture it builds equal to the model spec's "
             f"({elapsed:.0f} s).", "",
             "| plan | model | cluster | tp pp cp vp dp | zero | layers per stage (plan = Megatron) | env | result |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        par = r.get("par")
        deg = f"{par.tp} {par.pp} {par.cp} {par.vp} {par.dp}" if par else "-"
        split = ":".join(map(str, r.get("layers", [])))
        if r.get("megatron_split") not in (None, r.get("layers")):
            split += " vs " + ":".join(map(str, r["megatron_split"]))
        env = " ".join(f"{k}={v}" for k, v in (r.get("env") or {}).items()) or "-"
        res = "accepted" if r.get("ok") else (r.get("error") or f"differs: {r.get('arch_diff')}")
        lines.append(f"| {r['label']} | {r.get('model', '-')} | {r.get('cluster', '-')} | {deg} | "
                     f"{par.zero if par else '-'} | {split} | {env} | {res} |")
    denied = sum(1 for c in controls if not c.get("ok"))
    lines += ["", f"Controls: the same plans with one rule broken; **{denied} of {len(controls)} refused** (or built "
              f"another model), as they must be.", "", "| broken rule | Megatron-LM's answer |", "|---|---|"]
    for c in controls:
        answer = c.get("error") or (f"builds another model: {c['arch_diff']}" if c.get("arch_diff")
                                    else "ACCEPTED (the check did not bite)")
        lines.append(f"| {c['label']} | {answer} |")
    if catalog is not None:
        ok_c = [r for r in catalog if r.get("ok")]
        lines += ["", f"Every catalog model's default plan (`--catalog`; bf16 on A100 and fp8 on H100, "
                      f"{len(catalog)} plans): **{len(ok_c)} accepted** with the planned split and architecture; the "
                      f"others start but build what Megatron-LM can (their launch notes say so):"]
        for r in catalog:
            if not r.get("ok"):
                lines.append(f"- {r['label']} on {r.get('cluster')}: "
                             f"{r.get('error') or 'builds another model: ' + str(r.get('arch_diff'))}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron-lm", type=Path, help="path to a Megatron-LM checkout (git work tree or export)")
    ap.add_argument("--commit", default=None, help="the checkout's commit, for the report (default: git rev-parse)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "megatron_args.md")
    ap.add_argument("--catalog", action="store_true", help="also every catalog model's default plan (two each)")
    a = ap.parse_args(argv)
    if a.megatron_lm is None:
        print("give --megatron-lm PATH (a Megatron-LM checkout; it needs CPU torch and triton). Nothing was checked.",
              file=sys.stderr)
        return 2
    try:
        M = import_megatron(a.megatron_lm.resolve())
    except RuntimeError as exc:
        print(f"{exc}. Nothing was checked.", file=sys.stderr)
        return 2
    os.chdir(ROOT)
    commit = a.commit or subprocess.run(["git", "-C", str(a.megatron_lm), "rev-parse", "HEAD"], capture_output=True,
                                        text=True).stdout.strip() or "unknown commit"
    t0 = time.perf_counter()
    rows = []
    for case in CASES:
        r = check(M, *case)
        rows.append(r)
        print(f"{'ok ' if r.get('ok') else 'BAD'} {r['label']}: {r.get('error') or r.get('arch_diff') or ''}",
              file=sys.stderr)
    controls = []
    for index, what, edit in CONTROLS:
        _, *case = CASES[index]
        c = check(M, what, *case, mutate=edit)
        controls.append(c)
        print(f"{'BAD' if c.get('ok') else 'ok '} control {what}: {c.get('error') or c.get('arch_diff')}", file=sys.stderr)
    catalog = [check(M, *case) for case in catalog_cases()] if a.catalog else None
    text = report(rows, controls, commit, time.perf_counter() - t0, catalog)
    a.out.write_text(text)
    print(text)
    return 0 if all(r.get("ok") for r in rows) and not any(c.get("ok") for c in controls) else 1


if __name__ == "__main__":
    sys.exit(main())
