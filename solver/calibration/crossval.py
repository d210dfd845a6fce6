"""How well the formulation predicts published runs, in sample and on runs left out of the fit.

- `in_sample`: every row predicted with given GPU values (the shipped catalog by default).
- `cross_validate(by)`: for every group of rows (a source, a model family or a GPU chip),
  fit on all the other groups (`runs_fit.fit`) and predict that group: the error a user on
  another cluster, software stack or model will see. Only the parameters that move the group's
  chips are refitted (`coupled_params`: the fit is separable by chip), on those chips' rows.
- `summary` / `worst`: MAPE per group, the rows furthest off.
- `ranking`: the planner's choice inside measured sweeps (`sweeps.py`). For every set of a
  source's rows with the same model, GPU, GPU count, global batch and sequence length
  (several configurations of one job), how much slower the configuration the formulation
  ranks first measured than the measured best (0 when it picks the best), the spreads and
  the structural terms in which pick and best differ.
- `memory_points`: per-GPU memory of Korthikanti et al. 2022 Fig. 1 (first stage).
- `validation`: all of it for the published files, as data (what `solveplan validate` shows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..formulation.job import job_coefficients
from ..formulation.pipeline import evaluate_split
from ..formulation.splits import balanced_split
from ..space.shapes import Shapes
from .rows import Row
from .runs_fit import BORROWED, FIT_PARAMS, FitOutcome, RowCase, fit, gpu_updates

GIB = 1024**3
GROUPINGS = ("source", "model", "gpu")


@dataclass
class Prediction:
    row: Row
    predicted_s: float
    config: dict
    fits: bool
    held_out: str | None = None  # the group left out of the fit that predicted this row

    @property
    def error(self) -> float:
        return self.predicted_s / self.row.measured - 1.0


def group_of(row: Row, by: str) -> str:
    if by == "source":
        return row.source
    if by == "model":
        return row.model_family
    if by == "gpu":
        return row.gpu
    raise ValueError(f"unknown grouping {by!r}; use one of {', '.join(GROUPINGS)}")


def _predict(case: RowCase, update: dict | None, held_out: str | None = None) -> Prediction:
    step, k, fits = case.predict(update)
    return Prediction(case.row, step, case.shapes.row(k), fits, held_out)


def in_sample(cases: Sequence[RowCase], values: dict | None = None) -> list[Prediction]:
    upd = gpu_updates(values or {}, FIT_PARAMS)
    return [_predict(c, upd.get(c.chip)) for c in cases]


def cross_validate(cases: Sequence[RowCase], by: str = "source", progress=None,
                   only: str | None = None) -> tuple[list[Prediction], dict[str, FitOutcome]]:
    """Out-of-group predictions of every row, and the fit of each fold (`only`: that group's
    fold alone, so that folds can run in separate processes)."""
    groups = sorted({group_of(c.row, by) for c in cases} if only is None else {only})
    preds: list[Prediction] = []
    fits: dict[str, FitOutcome] = {}
    for g in groups:
        test = [c for c in cases if group_of(c.row, by) == g]
        params, chips = coupled_params({c.chip for c in test})
        train = [c for c in cases if group_of(c.row, by) != g and c.chip in chips]
        fits[g] = outcome = fit(train, params)
        upd = gpu_updates(outcome.values)
        preds.extend(_predict(c, upd.get(c.chip), g) for c in test)
        if progress is not None:
            progress(g, len(train), len(test))
    order = {id(c.row): i for i, c in enumerate(cases)}
    preds.sort(key=lambda p: order[id(p.row)])
    return preds, fits


def coupled_params(chips: set[str]) -> tuple[list, set[str]]:
    """The fit parameters that move the rows of `chips`, and every chip they couple (a parameter
    shared by chips, a value one chip borrows from another). Rows of other chips depend on none of
    these parameters and the priors are per parameter, so the fit splits into independent parts:
    fitting only this part gives these parameters the values of the full fit (and the held-out
    predictions of a fold the same), at the cost of its rows alone."""
    chips = set(chips)
    while True:
        borrowed = {key.split(".")[0] for chip in chips for key in BORROWED.get(chip, {}).values()}
        borrowed |= {c for c, keys in BORROWED.items() if any(k.split(".")[0] in chips for k in keys.values())}
        params = [p for p in FIT_PARAMS if set(p.chips) & (chips | borrowed)]
        wider = chips | borrowed | {ch for p in params for ch in p.chips}
        if wider == chips:
            return params, chips
        chips = wider


def summary(preds: Sequence[Prediction], by: str) -> list[dict]:
    """One line per group and one for all: rows, MAPE, median signed error, worst, within 10%; none without
    predictions (a file whose every row is skipped)."""
    groups: dict[str, list[float]] = defaultdict(list)
    for p in preds:
        groups[group_of(p.row, by)].append(p.error)
    lines: list[dict] = []
    if not preds:
        return lines
    for g, errs in sorted(groups.items()) + [("all", [p.error for p in preds])]:
        e = np.asarray(errs)
        a = np.abs(e)
        lines.append({"group": g, "rows": len(e), "mape": float(a.mean()), "median_error": float(np.median(e)),
                      "max_abs_error": float(a.max()), "within_10pct": int((a <= 0.10).sum())})
    return lines


def worst(preds: Sequence[Prediction], n: int = 10) -> list[Prediction]:
    return sorted(preds, key=lambda p: -abs(p.error))[:n]


def ranking(preds: Sequence[Prediction]) -> dict:
    """The planner's pick inside measured sweeps, per sweep (`sweeps.sweep_report`)."""
    from .sweeps import sweep_report

    return sweep_report(preds)


def memory_points(memory_datapoints: dict, rows: Sequence[Row], values: dict | None = None) -> list[dict]:
    """Korthikanti et al. 2022 Fig. 1 per-GPU memory (first stage): model state and activations."""
    by_model = {r.id.split("-")[2]: r for r in rows if r.id.startswith("korthikanti2022-t5-") and r.job}
    upd = gpu_updates(values or {}, FIT_PARAMS)
    out = []
    for pt in memory_datapoints.get("korthikanti_fig1", []):
        row = by_model.get(pt["model"])
        if row is None:
            continue
        cfg = pt["config"]
        sel = "selective" in pt["mode"]
        job = row.job_spec
        if upd.get("a100"):
            cl = job.cluster
            job = job.model_copy(update={"cluster": cl.model_copy(update={"gpu": cl.gpu.model_copy(update=upd["a100"])})})
        shapes = Shapes.single(tp=cfg["tp"], pp=cfg["pp"], dp=1, vp=cfg["vp"], micro_batch_size=cfg["mbs"],
                               recompute="selective" if sel else "none", sequence_parallel=sel, zero=0)
        ev = evaluate_split(job_coefficients(job, shapes), 0, balanced_split(job.model.num_pipeline_units, cfg["pp"]))
        mem = ev.stages[0]["memory_bytes"]
        state = (mem["params"] + mem["grads"] + mem["optimizer"]) / GIB
        act = mem["activations"] / GIB
        pub_state, pub_act = pt["params_and_optimizer_gib_per_gpu"], pt["activations_gib_per_gpu"]
        out.append({"model": pt["model"], "mode": pt["mode"], "state_gib": state, "state_published_gib": pub_state,
                    "act_gib": act, "act_published_gib": pub_act,
                    "total_error": (state + act) / (pub_state + pub_act) - 1, "act_error": act / pub_act - 1})
    return out


def row_json(p: Prediction) -> dict:
    r = p.row
    return {"id": r.id, "source": r.source, "gpu": r.gpu, "model_family": r.model_family, "num_gpus": r.num_gpus,
            "measured_s": r.measured_s, "predicted_s": p.predicted_s, "error": p.error, "basis": r.basis,
            "config": p.config, "fits": p.fits, "held_out": p.held_out, "assumed": r.assumed}


def validation(paths: list | None = None, by: str | None = None, progress=None) -> dict:
    """Every published row predicted in sample with the shipped GPU parameters (`by` None) or
    out of its group (`by` in GROUPINGS): per-group summaries, rows, the pick inside measured
    sweeps, the fit of each fold and the memory points, as plain data."""
    from .rows import load_rows, published_rows
    from .runs_fit import row_cases

    rows = published_rows(paths)
    cases = row_cases(rows, max_shapes=None if by is None else 300)
    fits: dict[str, FitOutcome]
    if by is None:
        preds, fits = in_sample(cases), {}
    else:
        preds, fits = cross_validate(cases, by, progress=progress)
    _, mem = load_rows(paths)
    return {
        "mode": f"cross-validated by {by}" if by else "in sample (shipped GPU parameters)",
        "groupings": [by] if by else ["source", "gpu", "model"],
        "summary": {g: summary(preds, g) for g in ([by] if by else ["source", "gpu", "model"])},
        "ranking": ranking(preds),
        "rows": [row_json(p) for p in preds],
        "worst": [row_json(p) for p in worst(preds, 12)],
        "skipped": [{"id": r.id, "reason": r.skipped} for r in rows if r.skipped],
        "folds": {g: {"values": f.values, "sd": f.sd, "rms": f.rms, "notes": f.notes} for g, f in fits.items()},
        "memory": memory_points(mem, rows),
    }
