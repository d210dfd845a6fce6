"""The scaling guard (docs/DESIGN.md section 4): ortools 9.15 answers wrongly with enforced rows
whose coefficients reach about 4e8, so every model is measured before it is solved and
refused beyond the safe limits."""

from __future__ import annotations

from .ortools_cp import cp_model

SAFE_COEFFICIENT = 10_000_000  # docs/DESIGN.md section 4: keep every coefficient below ~1e7
SAFE_ACTIVITY = 1 << 33  # |coef|*|bound| summed over a row: 6x below the smallest known failure (4.8e10)
OBJECTIVE_UNITS = 1 << 23  # the scaling incumbent's step time, in quanta


def time_quantum_s(reference_s: float) -> float:
    """Seconds per objective quantum: the reference plan's step time (the scaling incumbent, or a
    stand-in without one) maps to OBJECTIVE_UNITS quanta, shaved up by 1e-9 so that it lands just
    under them. The one rule of both CP-SAT models (search/cpsat and search/joint)."""
    return reference_s * (1 + 1e-9) / OBJECTIVE_UNITS


class ScalingError(RuntimeError):
    """A model would carry a coefficient or row activity beyond the safe limits."""


def model_scaling(model: cp_model.CpModel) -> dict:
    """Largest |coefficient| (rows and objective) and largest activity of an enforced row
    (sum of |coef| x largest |value| of its variable, plus its finite bound: what a big-M
    linearisation of the row would carry). Unenforced rows are sums over one-hot booleans or
    short chains; their coefficients are checked, their (pessimistic) activity only reported."""
    proto = model.proto
    mag = []
    for v in proto.variables:
        d = list(v.domain)
        mag.append(max(abs(int(d[0])), abs(int(d[-1]))))
    big = 1 << 62
    max_coef, row_act, enforced_act, n_enforced = 0, 0, 0, 0
    for ct in proto.constraints:
        if not ct.has_linear():
            continue
        lin = ct.linear
        act = 0
        for var, coef in zip(lin.vars, lin.coeffs):
            ref = var if var >= 0 else -var - 1
            max_coef = max(max_coef, abs(int(coef)))
            act += abs(int(coef)) * mag[ref]
        bounds = [abs(int(b)) for b in lin.domain if abs(int(b)) < big]
        act += max(bounds) if bounds else 0
        row_act = max(row_act, act)
        if len(ct.enforcement_literal):
            n_enforced += 1
            enforced_act = max(enforced_act, act)
    if proto.has_objective():
        for coef in proto.objective.coeffs:
            max_coef = max(max_coef, abs(int(coef)))
    return {"max_coefficient": max_coef, "max_enforced_activity": enforced_act, "max_row_activity": row_act,
            "enforced_rows": n_enforced}


def check_scaling(model: cp_model.CpModel) -> dict:
    """`model_scaling`, raising ScalingError beyond SAFE_COEFFICIENT / SAFE_ACTIVITY."""
    sc = model_scaling(model)
    if sc["max_coefficient"] > SAFE_COEFFICIENT:
        raise ScalingError(f"coefficient {sc['max_coefficient']} exceeds the safe limit {SAFE_COEFFICIENT}")
    if sc["max_enforced_activity"] > SAFE_ACTIVITY:
        raise ScalingError(f"enforced row activity {sc['max_enforced_activity']} exceeds the safe limit {SAFE_ACTIVITY}")
    return sc
