"""Check the formulation against published training runs (../shared/data/published_runs.json).

Every row is mapped to a job and an explicit configuration, honouring what the source
states; the measured step time is taken as the source gives it:
- `iteration_time_s` as is;
- `tflops_per_gpu` converted with the row's own convention: Narayanan et al. Eq. (3)
  (counts the recompute forward) or model FLOPs (MFU convention) -> time = FLOPs/(N * TFLOP/s);
- `mfu` alone -> time = model FLOPs / (N * peak * MFU).
Knobs a source does not state (micro-batch size, interleaving, recompute, SP) are filled with
the choice the formulation finds best among legal settings with the even split the sources
used (published runs were tuned); rows without tp/pp or without a global batch are skipped
with the reason. Settings we infer, not read: flash attention only for 2023+ software
(Megatron-Core 2024 rows); FFN = 4h and MHA where a row leaves them null; GPT rows tie the
embeddings (Megatron's default). fp16 rows use the same tensor-core peak as bf16.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..catalog import catalog_families, load_gpu
from ..formulation.splits import balanced_layers_matrix
from ..formulation.pipeline import step_time_batch
from ..formulation.flops import megatron_eq3_flop, model_flop_per_step
from ..formulation.job import job_coefficients
from ..specs import ClusterSpec, Constraints, JobSpec, ModelSpec
from ..specs.units import GIB
from ..space.enumeration import enumerate_shapes

DEFAULT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "published_runs.json"

GPU_FAMILY = {
    "A100-SXM4-80GB": "a100",
    "A100-SXM4-40GB": "a100-40gb",
    "A100 (DGX-A100, memory size not stated)": "a100-40gb",
    "V100-SXM3-32GB (DGX-2H)": "v100",
    "H100-SXM5-80GB": "h100",
}
FLASH_SOURCES = {"megatron_core_h100_2024"}
# What the software of a source's time could do, for knobs the row leaves unstated:
# Megatron-LM 2020 had neither sequence parallelism nor selective recompute (Korthikanti
# et al. 2022) nor a distributed optimizer, and its reported TFLOP/s count the recomputed
# forward (its README's scripts use --checkpoint-activations), so full recompute.
ERA = {
    "megatron_2020_readme": {"sequence_parallel": (False,), "recompute": ("full",), "zero": (0,)},
    "narayanan2021": {"sequence_parallel": (False,), "zero": (0,)},
}


def find_data(path: Optional[str] = None) -> Path:
    for cand in ([Path(path)] if path else []) + [DEFAULT_DATA, Path.cwd() / "../shared/data/published_runs.json",
                                                   Path.cwd() / "shared/data/published_runs.json"]:
        if cand.is_file():
            return cand
    from ..errors import InputError

    raise InputError("data", "published_runs.json not found; give its path (it lives in ../shared/data/)")


def row_model(m: dict) -> ModelSpec:
    h = m["hidden"]
    return ModelSpec(
        name=m.get("name") or "row", num_layers=m["layers"], hidden_size=h, num_attention_heads=m["heads"],
        num_kv_heads=m.get("kv_heads"), ffn_hidden_size=m.get("ffn_hidden") or 4 * h, vocab_size=m["vocab"],
        seq_length=m["seq_len"], tied_embeddings=True, gated_mlp=False,
    )


def row_cluster(hw: dict, num_gpus: int, overrides: Optional[dict] = None) -> ClusterSpec:
    fam = dict(catalog_families()[GPU_FAMILY[hw["gpu"]]])
    fam.pop("description", None)
    per_node = int(hw.get("gpus_per_node") or fam.get("gpus_per_node", 8))
    per_node = min(per_node, num_gpus)
    fam.update(gpus_per_node=per_node, num_nodes=max(1, num_gpus // per_node), name=f"{GPU_FAMILY[hw['gpu']]}-row")
    gpu = load_gpu(fam.pop("gpu"))
    if overrides and overrides.get("gpu"):
        gpu = gpu.model_copy(update=overrides["gpu"])
    if overrides and overrides.get("cluster"):
        fam.update(overrides["cluster"])
    return ClusterSpec(gpu=gpu, **fam)


def _recompute(text) -> Optional[tuple]:
    if not text or "not stated" in str(text):
        return None
    t = str(text).lower()
    return ("full",) if t.startswith("full") else ("selective",) if t.startswith("selective") else ("none",)


@dataclass
class RowResult:
    id: str
    source: str
    gpu: str
    num_gpus: int
    measured_s: Optional[float] = None
    predicted_s: Optional[float] = None
    config: dict = field(default_factory=dict)
    fits: Optional[bool] = None
    skipped: Optional[str] = None
    measure_basis: str = ""

    @property
    def error(self) -> Optional[float]:
        if self.measured_s is None or self.predicted_s is None:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s


def row_job(row: dict, overrides: Optional[dict] = None) -> tuple[Optional[JobSpec], Optional[str]]:
    p = row["parallel"]
    if p.get("tp") is None or p.get("pp") is None:
        return None, "tp/pp not stated"
    if p.get("gbs") is None:
        return None, "global batch not stated"
    model = row_model(row["model"])
    cluster = row_cluster(row["hardware"], p["num_gpus"], overrides)
    zero = p.get("zero_stage")
    if zero is None and "implied" in str(p.get("distributed_optimizer", "")):
        zero = 1
    sp = p.get("sequence_parallel")
    cons = Constraints(
        tp=(p["tp"],), pp=(p["pp"],), cp=(p.get("cp") or 1,),
        micro_batch_size=(p["mbs"],) if p.get("mbs") else None,
        vp=(p["vp"],) if p.get("vp") else None,
        recompute=_recompute(p.get("recompute")),
        sequence_parallel=(bool(sp),) if sp is not None else None,
        zero=(zero,) if zero is not None else None,
        uneven_split=False,
    )
    era = ERA.get(row["source"], {})
    fill = {k: v for k, v in era.items() if getattr(cons, k) is None}
    if fill:
        cons = cons.model_copy(update=fill)
    overlap = str(p.get("overlap", ""))
    flash = row["source"] in FLASH_SOURCES
    return JobSpec(model=model, cluster=cluster, global_batch_size=p["gbs"], seq_length=row["model"]["seq_len"],
                   flash_attention=flash, tp_comm_overlap="--tp-comm-overlap" in overlap,
                   constraints=cons), None


def measured_step_s(row: dict, job: JobSpec) -> tuple[Optional[float], str]:
    me, n = row["measured"], row["parallel"]["num_gpus"]
    if me.get("iteration_time_s"):
        return me["iteration_time_s"], "iteration time"
    conv = str(me.get("tflops_convention", ""))
    B, s = job.global_batch_size, job.seq_length
    if me.get("tflops_per_gpu"):
        if "Eq" in conv or "counts recompute" in conv:
            return megatron_eq3_flop(job.model, B, s) / (n * me["tflops_per_gpu"] * 1e12), "TFLOP/s by Eq. (3)"
        return model_flop_per_step(job.model, B, s) / (n * me["tflops_per_gpu"] * 1e12), "TFLOP/s as model FLOPs"
    if me.get("mfu"):
        return model_flop_per_step(job.model, B, s) / (n * job.cluster.gpu.peak_flop_per_s * me["mfu"]), "MFU"
    return None, "no time measure"


def best_config(job: JobSpec) -> tuple[Optional[float], dict, Optional[bool]]:
    """Best even-split step time over the knobs the row leaves free (fitting if any fits)."""
    space = enumerate_shapes(job, apply_dominance=False)
    if len(space.shapes) == 0:
        return None, {}, None
    co = job_coefficients(job, space.shapes)
    step, _, fits = step_time_batch(co, balanced_layers_matrix(job.model.num_layers, space.shapes.pp))
    pool = np.where(fits, step, np.inf) if fits.any() else step
    k = int(np.argmin(pool))
    return float(step[k]), space.shapes.row(k), bool(fits[k])


def validate_rows(data: dict, overrides: Optional[dict] = None, only_gpu: Optional[str] = None,
                  ids: Optional[set] = None) -> list[RowResult]:
    out = []
    for row in data["measurements"]:
        if ids is not None and row["id"] not in ids:
            continue
        gpu = row["hardware"]["gpu"]
        if only_gpu and GPU_FAMILY.get(gpu) != only_gpu:
            continue
        res = RowResult(id=row["id"], source=row["source"], gpu=GPU_FAMILY.get(gpu, gpu), num_gpus=row["parallel"]["num_gpus"])
        job, why = row_job(row, overrides)
        if job is None:
            res.skipped = why
            out.append(res)
            continue
        res.measured_s, res.measure_basis = measured_step_s(row, job)
        res.predicted_s, res.config, res.fits = best_config(job)
        if res.predicted_s is None:
            res.skipped = "no legal configuration"
        out.append(res)
    return out


def summary(results: list[RowResult]) -> dict:
    errs = [r.error for r in results if r.error is not None]
    if not errs:
        return {"rows": 0}
    a = np.abs(errs)
    worst = sorted((r for r in results if r.error is not None), key=lambda r: -abs(r.error))[:5]
    return {
        "rows": len(errs),
        "skipped": sum(1 for r in results if r.skipped),
        "mape": float(a.mean()),
        "max_abs_error": float(a.max()),
        "within_10pct": int((a <= 0.10).sum()),
        "worst": [(r.id, r.error) for r in worst],
    }


def memory_points(data: dict, overrides: Optional[dict] = None) -> list[dict]:
    """Korthikanti Fig. 1 per-GPU memory (first stage) vs the formulation."""
    from ..formulation.pipeline import evaluate_split
    from ..formulation.splits import balanced_split
    from ..space.shapes import Shapes

    by_model = {}
    for row in data["measurements"]:
        if row["source"] == "korthikanti2022" and row["id"].startswith("korthikanti2022-t5-"):
            by_model[row["id"].split("-")[2]] = row
    out = []
    for pt in data["memory_datapoints"]["korthikanti_fig1"]:
        row = by_model[pt["model"]]
        cfg = pt["config"]
        sel = "selective" in pt["mode"]
        job, _ = row_job(row, overrides)
        shapes = Shapes.single(tp=cfg["tp"], pp=cfg["pp"], dp=1, vp=cfg["vp"], micro_batch_size=cfg["mbs"],
                               recompute="selective" if sel else "none", sequence_parallel=sel, zero=0)
        co = job_coefficients(job, shapes)
        ev = evaluate_split(co, 0, balanced_split(job.model.num_layers, cfg["pp"]))
        mem = ev.stages[0]["memory_bytes"]
        state = (mem["params"] + mem["grads"] + mem["optimizer"]) / GIB
        act = mem["activations"] / GIB
        out.append({
            "model": pt["model"], "mode": pt["mode"],
            "state_gib": state, "state_published_gib": pt["params_and_optimizer_gib_per_gpu"],
            "act_gib": act, "act_published_gib": pt["activations_gib_per_gpu"],
            "total_error": (state + act) / (pt["params_and_optimizer_gib_per_gpu"] + pt["activations_gib_per_gpu"]) - 1,
            "act_error": act / pt["activations_gib_per_gpu"] - 1,
        })
    return out


def load(path: Optional[str] = None) -> dict:
    return json.loads(find_data(path).read_text())
