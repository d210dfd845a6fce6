"""`solveplan probe`: measure this machine's GPU with PyTorch and write a GPU file
(`calibration/probe.py` measures, `calibration/kernel_fit.py` fits)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import yaml

from ..errors import InputError
from ..specs.writing import write_text
from .options import OUTPUT, parse_ints

# Layers whose GEMMs are timed by default: a small, a large and a very wide dense model.
DEFAULT_MODELS = ("llama3.1-8b", "llama3.1-70b", "gpt3-175b")
TINY_MODEL: dict[str, Any] = {"name": "tiny", "num_layers": 2, "hidden_size": 256, "num_attention_heads": 4,
                              "ffn_hidden_size": 1024, "vocab_size": 1024, "seq_length": 128}
# Causal attention cases (b, heads, seq, head_dim), the shapes of ../shared/data/h200_kernels.json's.
AttentionCases = tuple[tuple[int, int, int, int], ...]
DEFAULT_ATTENTION: AttentionCases = ((1, 32, 4096, 128), (2, 32, 8192, 128), (1, 8, 16384, 128), (4, 32, 2048, 128),
                                     (1, 16, 32768, 128))
TINY_ATTENTION: AttentionCases = ((1, 2, 128, 32), (2, 4, 64, 16))
# SDPA given a sliding-window layer's explicit mask, at the head dimensions transformers' families use
# (its rate depends on the head dimension: benchmarks/results/masked_kernel_fit.md).
DEFAULT_MASKED: AttentionCases = ((1, 32, 8192, 64), (1, 32, 8192, 96), (1, 32, 8192, 128), (1, 16, 8192, 256))
TINY_MASKED: AttentionCases = ((1, 2, 64, 16), (1, 2, 64, 32))


def _device(torch, wanted: str) -> str:
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise InputError("device", "no CUDA GPU is visible to torch; use --device cpu (tiny shapes) on this machine")
    return wanted


def _base_gpu(base: str | None, env: dict):
    """The catalog GPU whose datasheet the file keeps: --base-gpu, else the one the device's name
    matches (`calibration.probe.catalog_gpu_of_device`)."""
    from ..calibration.probe import catalog_gpu_of_device
    from ..catalog import load_gpu

    if base:
        return load_gpu(base, "base_gpu")
    name = catalog_gpu_of_device(str(env.get("device", "")))
    if name is None:
        raise InputError("base_gpu", f"no catalog GPU matches the device {env.get('device')!r}; name its datasheet "
                                     f"with --base-gpu (see `solveplan gpus`)")
    return load_gpu(name, "base_gpu")


@click.command()
@click.option("-o", "--output", required=True, type=OUTPUT, help="GPU file to write (YAML); the kernel "
              "measurements go beside it as <name>.kernels.json.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True)
@click.option("--base-gpu", default=None, help="Catalog GPU whose datasheet the file keeps (default: matched by name).")
@click.option("--models", default=",".join(DEFAULT_MODELS), show_default=True,
              help="Catalog models whose layer GEMMs are timed.")
@click.option("--tp", "tps", default="1,2,4,8", show_default=True, help="TP widths of the layer GEMMs.")
@click.option("--tokens", type=int, default=4096, show_default=True, help="Tokens per GEMM (M).")
@click.option("--tiny", is_flag=True, help="Tiny shapes (a CPU, or a quick check): a 256-wide model, short sequences.")
@click.option("--step/--no-step", default=False, help="Also time one training step of a small model.")
@click.option("--min-time", "min_time_s", type=float, default=0.1, show_default=True,
              help="Seconds of repetitions per measurement.")
def probe(output, device, base_gpu, models, tps, tokens, tiny, step, min_time_s):
    """Measure the local GPU (GEMMs of real layers, attention kernels, HBM, optionally a
    training step) and write a GPU file with fitted efficiencies.

    Needs the probe extra (PyTorch). A cluster file names the GPU file as its `gpu:`
    (`gpu: my-gpu.yaml`)."""
    from ..calibration.probe import import_torch, probed_gpu, run_probe
    from ..catalog import load_model
    from ..specs import ModelSpec

    torch = import_torch()
    device = _device(torch, device)
    if tiny:
        specs, tps_, tokens_ = [ModelSpec(**TINY_MODEL)], [1, 2], min(tokens, 256)
        cases, masked_cases, hbm_bytes = TINY_ATTENTION, TINY_MASKED, 1 << 20
    else:
        specs = [load_model(m.strip(), "models") for m in models.split(",") if m.strip()]
        tps_, tokens_, cases, hbm_bytes = parse_ints(tps, "tp"), tokens, DEFAULT_ATTENTION, 1 << 30
        masked_cases = DEFAULT_MASKED
    attention = [dict(b=b, heads=a, seq=s, head_dim=d) for b, a, s, d in cases]
    masked = [dict(b=b, heads=a, seq=s, head_dim=d) for b, a, s, d in masked_cases]
    step_model = ModelSpec(**TINY_MODEL) if step and tiny else (load_model("gpt3-125m") if step else None)
    measured = run_probe(models=specs, tps=tps_, tokens=tokens_, attention_cases=attention, masked_cases=masked,
                         device=device, min_time_s=min_time_s, hbm_bytes=hbm_bytes, tiny=tiny, step_model=step_model)
    base = _base_gpu(base_gpu, measured["env"])
    path = Path(output)
    gpu = probed_gpu(base, measured, path.stem)
    write_text(path.with_name(f"{path.stem}.kernels.json"), json.dumps(measured, indent=1, allow_nan=False) + "\n",
               "output")
    write_text(path, yaml.safe_dump(gpu, sort_keys=False), "output")
    click.echo(f"wrote {path} ({gpu['fit_notes']})")
    for what, why in measured["unavailable"].items():
        click.echo(f"  {what}: not measured ({why})", err=True)
