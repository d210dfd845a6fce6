"""Error bars of a prediction: how far a measured step (and memory) may lie from the formulation's.

The bands are data (`intervals.json` beside this module), made once by `python
benchmarks/intervals.py` from the cross-validation residuals (`crossval.cross_validate`) of the
published runs and never recomputed here: the ratio measured / predicted step time of every row
predicted by GPU parameters fitted without its source, its QUANTILES per stack and GPU chip
(an 80% interval: 10th and 90th percentiles).

Which band a prediction gets (one rule, `band_for`):
1. its stack (`stack_of`: a mixture-of-experts model is its own, "moe", whatever its ZeRO stage:
   its rows are predicted far less well than the dense ones; else FSDP for ZeRO 2/3 and
   Megatron-style otherwise) and chip have at least MIN_ROWS rows: that cell;
2. its chip has published rows but the cell is thin: its stack pooled over chips;
3. its GPU has no published rows of its own (H200, B200, MI300X... borrow H100's fitted
   values: `runs_fit.CHIP_OF_GPU`): the stack's residuals when each chip is left out of the fit
   (`unfitted_gpu`), which are wider. Which GPUs have rows of their own is data too
   (`gpus_with_rows`).
A stack no published run states (torchtitan, transformers) takes the widest of its GPU's band and
the unfitted-GPU band of its ZeRO stage, except where this project measured it: `frameworks`
holds bands of measured steps (transformers on one H200), used for a plan on one GPU of that kind.
Memory: the range of measured / predicted over Korthikanti et al. 2022 Fig. 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

COVERAGE = 0.8  # the share of measured steps an interval claims to hold
QUANTILES = (0.1, 0.9)  # of measured / predicted: the 80% central interval
MIN_ROWS = 10  # a (stack, chip) cell with fewer rows uses its stack pooled over chips
DATA = Path(__file__).with_name("intervals.json")


def stack_of(zero: int, moe: bool = False) -> str:
    """The stack whose residuals bound a plan: "moe" for a mixture-of-experts model (its published
    rows, Megatron-Core with expert parallelism, are one group); else FSDP (Megatron-FSDP,
    PyTorch FSDP) for ZeRO 2/3, the Megatron-style data parallelism (DDP or the distributed
    optimizer) for ZeRO 0/1."""
    if moe:
        return "moe"
    return "fsdp" if int(zero) >= 2 else "megatron"


@dataclass(frozen=True)
class Band:
    """measured / predicted lies in [lo, hi] with probability `coverage` (on the published rows)."""

    lo: float
    hi: float
    rows: int
    basis: str  # which rule chose it, in words
    unit: str = "published rows"  # what `rows` counts

    @property
    def half_width_rel(self) -> float:
        """Half the interval's width relative to the prediction: (hi - lo) / 2."""
        return (self.hi - self.lo) / 2


@lru_cache(maxsize=1)
def bands() -> dict:
    return json.loads(DATA.read_text())


def band_for(gpu_name: str, zero: int, moe: bool = False) -> Band:
    """The step-time band of a plan on `gpu_name` (a catalog GPU name) with ZeRO stage `zero`, of a
    mixture-of-experts model when `moe` (the rule of the module docstring)."""
    from .runs_fit import CHIP_OF_GPU

    b, stack = bands(), stack_of(zero, moe)
    if stack not in b["stacks"]:  # bands made from data without rows of this stack: the widest band there is
        u = max(b["unfitted_gpu"].values(), key=lambda x: x["hi"] - x["lo"])
        return Band(u["lo"], u["hi"], u["rows"], f"{stack}: no published rows in the bands' data; the widest band")
    chip = CHIP_OF_GPU.get(gpu_name, gpu_name)
    has_rows = gpu_name in b["gpus_with_rows"]
    cell = b["cells"].get(f"{stack}/{chip}")
    if has_rows and cell is not None:  # the chip's rows: every GPU on its die (B200 and GB200 share theirs)
        gpus = " and ".join(sorted(g for g in b["gpus_with_rows"] if CHIP_OF_GPU.get(g, g) == chip))
        return Band(cell["lo"], cell["hi"], cell["rows"], f"{stack} on {gpus}, left out by source")
    if has_rows:
        s = b["stacks"][stack]
        return Band(s["lo"], s["hi"], s["rows"], f"{stack} on every chip, left out by source (few {chip} rows)")
    u = b["unfitted_gpu"][stack]
    return Band(u["lo"], u["hi"], u["rows"],
                f"{stack}, its GPU chip left out of the fit ({gpu_name} has no published rows)")


def _measured_stack(job) -> dict | None:
    """The band of measured steps of `job`'s stack on its GPU (`frameworks`), for a plan on one GPU."""
    framework = getattr(job, "framework", "megatron")
    if framework == "megatron" or job.cluster.is_mixed or job.cluster.num_gpus != 1:
        return None
    return bands().get("frameworks", {}).get(f"{framework}/{job.cluster.gpu.name}")


def memory_band(job=None) -> Band:
    """Measured / predicted peak memory: the measured steps' range where `job`'s stack was measured
    on its GPU (reserved memory), else Korthikanti et al.'s."""
    measured = _measured_stack(job) if job is not None else None
    if measured is not None:
        m = measured["memory"]
        return Band(m["lo"], m["hi"], m["rows"], measured["source"], unit="measured steps")
    m = bands()["memory"]
    return Band(m["lo"], m["hi"], m["rows"], m["source"])


def plan_band(job, zero: int) -> Band:
    """The band of a plan of `job`: its GPU's; on a cluster of pools, the widest of its pools'."""
    views = job.cluster.pool_views() if job.cluster.is_mixed else [job.cluster]
    moe = bool(job.model.is_moe)
    band = max((band_for(v.gpu.name, zero, moe) for v in views), key=lambda b: b.hi - b.lo)
    framework = getattr(job, "framework", "megatron")
    if framework == "megatron":
        return band
    measured = _measured_stack(job)
    if measured is not None:
        return Band(measured["lo"], measured["hi"], measured["rows"],
                    f"{framework} on one {job.cluster.gpu.name}: {measured['source']}", unit="measured steps")
    # no published run states a torchtitan or transformers stack: the stack's band as for a
    # GPU without rows of its own (the widest rule), said in the basis
    stack = stack_of(zero, moe)
    u = bands()["unfitted_gpu"][stack]
    wide = Band(u["lo"], u["hi"], u["rows"], f"{stack} rows, framework {framework} has no published rows")
    return max((band, wide), key=lambda b: b.hi - b.lo)


def with_interval(job, plan):
    """`plan` (plan.Plan) with its step-time and peak-memory intervals attached."""
    if plan is None:
        return None
    b, m = plan_band(job, plan.parallel.zero), memory_band(job)
    return plan.model_copy(update={
        "step_time_interval_s": [plan.step_time_s * b.lo, plan.step_time_s * b.hi],
        "peak_memory_interval_bytes": [plan.peak_memory_bytes * m.lo, plan.peak_memory_bytes * m.hi],
        "interval_coverage": bands()["coverage"],
        "interval_basis": f"{b.basis}: measured / predicted in [{b.lo:.3f}, {b.hi:.3f}] on {b.rows} {b.unit}",
    })


def margin(label: str, other_s: float, plan_s: float, band: Band):
    """`plan.Margin` of the plan (step `plan_s`) over another plan (step `other_s`)."""
    from ..plan import Margin

    rel = other_s / plan_s - 1.0
    inside = abs(rel) <= band.half_width_rel
    side = "faster" if rel >= 0 else "slower"
    verdict = ("inside the error: the model cannot tell them apart" if inside
               else "beyond the error")
    return Margin(label=label, step_time_s=other_s, margin_rel=rel, half_width_rel=band.half_width_rel, inside=inside,
                  statement=f"{abs(rel):.1%} {side} than the {label} ({other_s:.4g} s); the interval's half-width is "
                            f"{band.half_width_rel:.1%}: {verdict}")
