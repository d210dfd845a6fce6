"""The planner's pick inside published sweeps: is the configuration the formulation ranks first
within 3% of the measured best?

A sweep is a source's set of rows for one job (model, GPU, GPU count, global batch, sequence
length, precision recipe) on one software release (the row's container where it names one) that
differ in configuration (tp, pp, vp, micro-batch, recompute, ZeRO): the choices a plan makes.
Rows that differ in precision or in release are not ranked against each other: the precision is
the job's input, not the planner's choice, and two releases of one stack differ by up to 1.6x on
the same configuration (Megatron-Bridge's 26.06.01 GPT-OSS 120B row against 26.06's).
Per sweep (`sweep_lines`): the pick (fastest predicted), the measured best, the regret (how
much slower the pick measured than the best), the measured and the predicted spread of step
times (max / min - 1: a predicted spread far below the measured one means the terms that
separate configurations are too flat), Spearman's rank correlation, and the structural terms
in which the pick and the best differ (`differing_terms`): where a wrong pick must come from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

REGRET_OK = 0.03  # issue 26: the configuration ranked first within 3% of the measured best
CONFIG_KEYS = ("tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero")


def release_of(row) -> str:
    """The software release a row ran (its container, e.g. NeMo 25.11), "" where it names none."""
    raw = row.raw or {}
    return str(raw.get("container") or (raw.get("measured") or {}).get("container") or "")


def sweep_key(p) -> tuple:
    j = p.row.job
    return (p.row.source, j.model.name, p.row.gpu, p.row.num_gpus, j.global_batch_size, j.seq_length, j.precision,
            release_of(p.row))


def config_of(p) -> dict:
    """The row's configuration as predicted (the shape chosen for unstated knobs), its precision
    and its micro-batch count."""
    c = {k: p.config[k] for k in CONFIG_KEYS if k in p.config}
    c["precision"] = p.row.job.precision
    if c.get("dp") and c.get("micro_batch_size"):
        c["micro_batches"] = p.row.job.global_batch_size // (c["dp"] * c["micro_batch_size"])
    return c


def differing_terms(pick, best) -> list[str]:
    """The formulation's structural terms in which the picked and the best configuration differ."""
    a, b = config_of(pick), config_of(best)
    multi_node = pick.row.job.cluster.num_nodes > 1

    def differ(*keys):
        return any(a.get(k) != b.get(k) for k in keys)

    terms = []
    if differ("pp", "micro_batches", "vp"):
        terms.append("pipeline depth x micro-batches (bubble)")
    if differ("pp") and multi_node:
        terms.append("p2p between stages across nodes")
    if differ("micro_batch_size"):
        terms.append("micro-batch efficiency")
    if differ("tp", "sequence_parallel"):
        terms.append("tensor-parallel communication")
    if differ("recompute"):
        terms.append("recompute cost")
    if differ("zero"):
        terms.append("ZeRO/FSDP sharding")
    if differ("precision"):
        terms.append("FP8 vs BF16 rate")
    return terms


def _spread(x: np.ndarray) -> float:
    return float(x.max() / x.min() - 1.0)


def _spearman(x: np.ndarray, y: np.ndarray):
    """Rank correlation of predicted and measured times; None below 3 configurations (JSON-safe)."""
    if len(x) < 3:
        return None
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    c = np.corrcoef(rx, ry)[0, 1]
    return float(c) if np.isfinite(c) else None


def sweep_lines(preds: Sequence) -> list[dict]:
    """One line per sweep of two or more configurations (see the module docstring)."""
    groups: dict[tuple, list] = defaultdict(list)
    for p in preds:
        groups[sweep_key(p)].append(p)
    lines = []
    for key, ps in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        if len(ps) < 2:
            continue
        meas = np.array([p.row.measured_s for p in ps])
        pred = np.array([p.predicted_s for p in ps])
        pick, best = ps[int(np.argmin(pred))], ps[int(np.argmin(meas))]
        regret = pick.row.measured_s / best.row.measured_s - 1.0
        lines.append({"source": key[0], "model": key[1], "gpu": key[2], "num_gpus": key[3],
                      "global_batch_size": key[4], "seq_length": key[5], "precision": key[6],
                      "release": key[7], "configs": len(ps),
                      "picked": pick.row.id, "best": best.row.id, "regret": float(regret),
                      "within_3pct": bool(regret <= REGRET_OK), "measured_spread": _spread(meas),
                      "predicted_spread": _spread(pred), "spearman": _spearman(pred, meas),
                      "picked_error": float(pick.error), "best_error": float(best.error),
                      "terms": differing_terms(pick, best) if pick is not best else []})
    return lines


def sweep_report(preds: Sequence) -> dict:
    """Per-sweep lines, and over sweeps: the median and worst regret, how many are within 3%,
    and which structural terms the sweeps beyond 3% differ in (counted)."""
    lines = sweep_lines(preds)
    regrets = np.array([x["regret"] for x in lines])
    misses = [x for x in lines if not x["within_3pct"]]
    terms: dict[str, int] = defaultdict(int)
    for x in misses:
        for t in x["terms"]:
            terms[t] += 1
    return {"groups": lines, "sweeps": len(lines), "within_3pct": len(lines) - len(misses),
            "median_regret": float(np.median(regrets)) if len(lines) else None,
            "max_regret": float(regrets.max()) if len(lines) else None,
            "terms_of_misses": dict(sorted(terms.items(), key=lambda kv: -kv[1]))}
