"""`solveplan validate --few-shot K`: calibrate on K published rows of one stack and cluster,
predict the others, as a user with K measured steps would (`fewshot.fit_few_shot`, the fit
`solveplan calibrate --steps` runs).

- Group: the rows of one source on one GPU with one framework (`stack_of`; MoE runs apart from dense
  ones, and per model family: a user calibrates on runs of the model they plan, and one time scale cannot serve
  families whose errors differ in sign): one stack on one cluster type, what one calibrated cluster file covers.
  A group needs K + 2 rows (K to fit, 2 or more to predict).
- Which K rows (`draw_rows`): the group's rows sorted by measured step time, cut into K
  strata of equal count, one row drawn from each stratum (numpy default_rng([seed, draw])):
  the K measurements spread from the group's fastest to its slowest runs, as a user measures
  a few candidates of different size. `draws` such draws; per group the median and the worst
  MAPE over draws of the rows not drawn.
- Base: the GPU parameters the calibration starts from: `shipped` (clusters/gpus, fitted on
  every published row, this source's included) or `left-out` (fitted on every other source:
  `runs_fit.fit`, the cross-validation fold; the honest start for a stack the shipped fit
  never saw).
- Zero-shot: the base's error on the same held-out rows, for comparison.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..specs import JobSpec
from .crossval import Prediction
from .fewshot import RowFacts, calibrated_job, fit_few_shot
from .intervals import stack_of as intervals_stack_of
from .runs_fit import RowCase, fit, gpu_updates

BASES = ("shipped", "left-out")
DEFAULT_DRAWS = 5
DEFAULT_SEED = 0


def stack_of(case: RowCase) -> str:
    """The row's stack inside its source, by the error bars' rule (`intervals.stack_of`): "moe" for a
    mixture-of-experts model, "fsdp" for a stated ZeRO-2/3 or FSDP mode (DeepSpeed, PyTorch FSDP),
    "megatron" otherwise. Narayanan et al. 2021 report both of the last two (Table 2), Megatron-Bridge
    dense and MoE runs: each stack its own calibration."""
    zero = case.row.job_spec.constraints.zero
    return intervals_stack_of(2 if zero and min(zero) >= 2 else 0, case.row.job_spec.model.is_moe)


def group_key(case: RowCase) -> tuple[str, str, str]:
    """(source, GPU, stack), an MoE stack per model family ("moe:qwen3-moe"; module docstring)."""
    stack = stack_of(case)
    return case.row.source, case.row.gpu, f"{stack}:{case.row.model_family}" if stack == "moe" else stack


def draw_rows(measured: Sequence[float], ids: Sequence[str], k: int, draw: int, seed: int = DEFAULT_SEED) -> list[int]:
    """Indices of the K rows of one draw (see the module docstring)."""
    order = sorted(range(len(measured)), key=lambda i: (measured[i], ids[i]))
    rng = np.random.default_rng([seed, draw])
    return sorted(int(stratum[rng.integers(len(stratum))]) for stratum in np.array_split(order, k))


def left_out_values(cases: Sequence[RowCase], progress=None) -> dict[str, dict]:
    """Per source, the GPU parameters fitted on every other source (`runs_fit.fit`)."""
    out = {}
    for src in sorted({c.row.source for c in cases}):
        train = [c for c in cases if c.row.source != src]
        out[src] = fit(train).values
        if progress is not None:
            progress(src, len(train))
    return out


def base_jobs(cases: Sequence[RowCase], base: str, progress=None, folds: dict | None = None) -> list[JobSpec]:
    """Each row's job on the GPU parameters the calibration starts from (`folds`: the
    `left_out_values` when already computed)."""
    if base not in BASES:
        raise ValueError(f"unknown base {base!r}; use one of {', '.join(BASES)}")
    if base == "shipped":
        return [c.row.job_spec for c in cases]
    folds = folds if folds is not None else left_out_values(cases, progress)
    return [_with_gpu(c.row.job_spec, gpu_updates(folds[c.row.source]).get(c.chip, {})) for c in cases]


def _with_gpu(job: JobSpec, update: dict) -> JobSpec:
    if not update:
        return job
    cl = job.cluster
    return job.model_copy(update={"cluster": cl.model_copy(update={"gpu": cl.gpu.model_copy(update=update)})})


def predict_rows(cases: Sequence[RowCase], jobs: Sequence[JobSpec], factors: dict) -> np.ndarray:
    return np.array([c.predict_job(calibrated_job(j, factors) if factors else j)[0] for c, j in zip(cases, jobs)])


@dataclass
class Calibrated:
    """What a fit on K rows gives: the knobs it moved and how it maps a job onto the calibrated cluster."""

    free: list[str]
    factors: dict[str, float]
    apply: Callable[[JobSpec], JobSpec]


Fitter = Callable[[Sequence[RowCase], Sequence[JobSpec]], Calibrated]


def calibrate_on(cases: Sequence[RowCase], jobs: Sequence[JobSpec]) -> Calibrated:
    """The few-shot fit (`fewshot.fit_few_shot`, as `calibrate --steps` runs it) on these rows."""
    facts = []
    for c, j in zip(cases, jobs):
        _, k, _ = c.predict_job(j)
        facts.append(RowFacts.of(j, c.shapes.row(k)["zero"]))
    f = fit_few_shot(lambda fs: predict_rows(cases, jobs, fs), [c.row.measured for c in cases], facts)
    return Calibrated(f.free, f.factors, lambda job: calibrated_job(job, f.factors))


@dataclass
class Draw:
    train: list[int]  # indices into the group
    fit: Calibrated
    predicted_s: np.ndarray  # every row of the group, calibrated
    zero_shot_s: np.ndarray

    def errors(self, measured: np.ndarray, zero_shot: bool = False) -> np.ndarray:
        test = np.setdiff1d(np.arange(len(measured)), self.train)
        pred = self.zero_shot_s if zero_shot else self.predicted_s
        return pred[test] / measured[test] - 1.0


def run_group(cases: Sequence[RowCase], jobs: Sequence[JobSpec], k: int, draws: int, seed: int,
              fitter: Fitter = calibrate_on) -> list[Draw]:
    meas = [c.row.measured for c in cases]
    ids = [c.row.id for c in cases]
    zero = predict_rows(cases, jobs, {})
    out = []
    for d in range(draws):
        train = draw_rows(meas, ids, k, d, seed)
        cal = fitter([cases[i] for i in train], [jobs[i] for i in train])
        pred = np.array([c.predict_job(cal.apply(j))[0] for c, j in zip(cases, jobs)])
        out.append(Draw(train, cal, pred, zero))
    return out


def _mape(errors: np.ndarray) -> float:
    return float(np.mean(np.abs(errors)))


def group_line(key: tuple[str, str, str], cases: Sequence[RowCase], draws: Sequence[Draw]) -> dict:
    meas = np.array([c.row.measured_s for c in cases])
    per_draw = [_mape(d.errors(meas)) for d in draws]
    zero = [_mape(d.errors(meas, zero_shot=True)) for d in draws]
    knobs = Counter(n for d in draws for n in d.fit.free)
    scales = [d.fit.factors.get("time_scale", 1.0) for d in draws]
    return {"source": key[0], "gpu": key[1], "stack": key[2], "rows": len(cases), "draws": len(draws),
            "zero_shot_mape": float(np.median(zero)), "mape_median": float(np.median(per_draw)),
            "mape_worst": float(max(per_draw)), "mape_per_draw": per_draw,
            "max_abs_error": float(max(np.max(np.abs(d.errors(meas))) for d in draws)),
            "time_scale_median": float(np.median(scales)), "knobs_freed": dict(sorted(knobs.items())),
            "kept_as_given": sum(1 for d in draws if not d.fit.free),  # draws the left-out check refused
            "trained_on": [[cases[i].row.id for i in d.train] for d in draws]}


def pooled_line(name: str, parts: Sequence[tuple[Sequence[RowCase], Sequence[Draw]]]) -> dict:
    """MAPE over every held-out row of `parts` (groups), per draw; median and worst over draws."""
    n_draws = min(len(ds) for _, ds in parts)
    per_draw, zero = [], []
    for d in range(n_draws):
        errs = [ds[d].errors(np.array([c.row.measured_s for c in cs])) for cs, ds in parts]
        zs = [ds[d].errors(np.array([c.row.measured_s for c in cs]), zero_shot=True) for cs, ds in parts]
        per_draw.append(_mape(np.concatenate(errs)))
        zero.append(_mape(np.concatenate(zs)))
    return {"source": name, "groups": len(parts), "rows": sum(len(cs) for cs, _ in parts),
            "zero_shot_mape": float(np.median(zero)), "mape_median": float(np.median(per_draw)),
            "mape_worst": float(max(per_draw))}


def calibrated_predictions(cases: Sequence[RowCase], jobs: Sequence[JobSpec], draw: Draw) -> list[Prediction]:
    """Every row of a group on the cluster one draw calibrated (with the shape chosen)."""
    out = []
    for c, j in zip(cases, jobs):
        t, k, fits = c.predict_job(draw.fit.apply(j))
        out.append(Prediction(c.row, t, c.shapes.row(k), fits))
    return out


def few_shot_sweeps(result: dict) -> list[dict]:
    """The pick inside each published sweep after few-shot calibration of its group(s): per
    sweep, the regret of every draw, its median and worst (`sweeps.sweep_lines`). Rows of
    groups too small to calibrate are left out."""
    from .sweeps import sweep_lines

    by_sweep: dict[tuple, list[dict]] = defaultdict(list)
    for d in range(result["draws"]):  # a sweep may span two stacks (Narayanan's ZeRO-3 vs PTD-P): each row on its own
        preds = [p for cases, jobs, draws in result["_runs"].values() for p in calibrated_predictions(cases, jobs, draws[d])]
        for line in sweep_lines(preds):
            by_sweep[(line["source"], line["model"], line["gpu"], line["num_gpus"], line["global_batch_size"],
                      line["seq_length"])].append(line)
    out = []
    for _key, lines in sorted(by_sweep.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        regrets = [x["regret"] for x in lines]
        out.append({**{k: lines[0][k] for k in ("source", "model", "gpu", "num_gpus", "global_batch_size",
                                                  "seq_length", "configs", "best")},
                    "regret_median": float(np.median(regrets)), "regret_worst": float(max(regrets)),
                    "within_3pct": bool(np.median(regrets) <= 0.03), "draws": len(lines)})
    return out


def few_shot(cases: Sequence[RowCase], k: int, base: str = "left-out", draws: int = DEFAULT_DRAWS,
             seed: int = DEFAULT_SEED, jobs: Sequence[JobSpec] | None = None, progress=None,
             fitter: Fitter = calibrate_on) -> dict:
    """Few-shot validation on every (source, GPU) group with at least K + 2 rows: per group,
    per source (its groups pooled) and overall, median and worst MAPE over draws, the
    zero-shot MAPE on the same rows, and the draws themselves (for the sweep ranking)."""
    jobs = list(jobs) if jobs is not None else base_jobs(cases, base)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, c in enumerate(cases):
        groups[group_key(c)].append(i)
    lines, skipped, runs = [], [], {}
    for key in sorted(groups):
        idx = groups[key]
        if len(idx) < k + 2:
            skipped.append({"source": key[0], "gpu": key[1], "stack": key[2], "rows": len(idx),
                            "reason": f"fewer than K + 2 = {k + 2} rows"})
            continue
        gc = [cases[i] for i in idx]
        ds = run_group(gc, [jobs[i] for i in idx], k, draws, seed, fitter)
        gj = [jobs[i] for i in idx]
        runs[key] = (gc, gj, ds)
        lines.append(group_line(key, gc, ds))
        if progress is not None:
            progress(key, len(idx))
    by_source: dict[str, list] = defaultdict(list)
    for (src, _, _), (gc, _, ds) in runs.items():
        by_source[src].append((gc, ds))
    sources = [pooled_line(src, parts) for src, parts in sorted(by_source.items())]
    overall = pooled_line("all", [(gc, ds) for gc, _, ds in runs.values()]) if runs else None
    return {"k": k, "base": base, "draws": draws, "seed": seed, "groups": lines, "sources": sources, "all": overall,
            "skipped": skipped, "_runs": runs}
