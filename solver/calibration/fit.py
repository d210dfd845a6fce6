"""The fitter every calibration uses: bounded least squares (scipy.optimize.least_squares,
'trf') on log-ratio residuals `log(predicted / measured)`, so an 8-byte message and a 1 GiB
one, or a 1 s step and a 30 s one, weigh the same.

Uncertainty: covariance `s^2 (J^T J)^-1` from the Jacobian at the solution, `s^2` the
residual variance with m - p degrees of freedom (none for an exact fit: shown as n/a).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..specs.units import GIB

BAD_FIT_RMS = 0.20  # log-residual rms beyond which a parameter at a bound means the model cannot explain the points


@dataclass
class Param:
    name: str
    before: float  # the value in the cluster before calibration
    lower: float
    upper: float
    scale: float  # typical magnitude (least_squares x_scale)
    unit: str = ""
    value: float = math.nan
    sd: float = math.nan
    fixed: bool = False
    note: str = ""

    @property
    def at_bound(self) -> bool:
        if self.fixed:
            return False
        tol = 1e-6 * max(self.scale, abs(self.value))
        return self.value <= self.lower + tol or self.value >= self.upper - tol


@dataclass
class FitResult:
    values: dict[str, float]
    sd: dict[str, float]
    residuals: np.ndarray
    rms: float
    dof: int
    nfev: int
    message: str


def fit_least_squares(residuals: Callable[[dict], np.ndarray], params: Sequence[Param],
                      seeds: Sequence[dict] | None = None, diff_step: float | None = None, *,
                      prior_sd: dict[str, float] | None = None, prior_weight: float = 0.1,
                      loss: str = "linear", loss_scale: float = 1.0,
                      jacobian: Callable[[dict], np.ndarray] | None = None, max_nfev: int | None = None) -> FitResult:
    """Bounded least squares over the free `params` (fixed ones pass their `value`).
    `residuals(values)` returns log-ratio residuals. `seeds`: candidate starting points (a
    coarse grid); the fit starts from the best of them. Fills `value` and `sd` of each free
    parameter and returns the result.

    Options of the published-runs fit: `prior_sd` (name -> sd) adds a residual
    `prior_weight * (x - before) / sd` per named parameter, so a parameter the data cannot
    identify stays at its prior (`Param.before`); `loss`/`loss_scale` a robust loss of
    scipy's; `jacobian(values)` the data rows' Jacobian (columns: the free params) when the
    caller can compute it cheaper than finite differences. Uncertainties use the data rows."""
    try:
        from scipy.optimize import least_squares
    except ImportError:  # the `fit` extra: one line, not a traceback
        raise InputError("calibrate", "fitting needs scipy: pip install 'solveplan[fit]'") from None

    free = [p for p in params if not p.fixed]
    fixed = {p.name: p.value for p in params if p.fixed}
    priors = [(i, p.before, (prior_sd or {})[p.name]) for i, p in enumerate(free) if p.name in (prior_sd or {})]

    def values_of(x) -> dict:
        return {**fixed, **{p.name: float(v) for p, v in zip(free, x)}}

    def prior_rows(x) -> np.ndarray:
        return np.array([prior_weight * (x[i] - mu) / sd for i, mu, sd in priors])

    def fun(x):
        return np.concatenate([np.asarray(residuals(values_of(x)), dtype=np.float64), prior_rows(x)])

    lo = np.array([p.lower for p in free])
    hi = np.array([p.upper for p in free])
    starts = [np.clip([s.get(p.name, p.before) for p in free], lo, hi) for s in (seeds or [])]
    starts.append(np.clip([p.before for p in free], lo, hi))
    best_x, best_cost = None, np.inf
    for x in starts:
        r = fun(x)
        cost = float(np.sum(r**2)) if np.all(np.isfinite(r)) else np.inf
        if cost < best_cost:
            best_x, best_cost = np.asarray(x, dtype=np.float64), cost
    if best_x is None:  # every start gave non-finite residuals
        best_x = starts[-1]
    kw: dict[str, Any] = {"diff_step": diff_step} if diff_step else {}
    if jacobian is not None:
        prior_jac = np.zeros((len(priors), len(free)))
        for row, (i, _, sd_i) in enumerate(priors):
            prior_jac[row, i] = prior_weight / sd_i
        kw["jac"] = lambda x: np.vstack([np.asarray(jacobian(values_of(x)), dtype=np.float64), prior_jac])
    res = least_squares(fun, best_x, bounds=(lo, hi), x_scale=np.array([p.scale for p in free]), method="trf",
                        loss=loss, f_scale=loss_scale, xtol=1e-12, ftol=1e-12, gtol=1e-12,
                        max_nfev=max_nfev or 400 * max(1, len(free)), **kw)
    data = res.fun[:len(res.fun) - len(priors)]
    m, k = len(data), len(free)
    dof = m - k
    sd = np.full(k, np.nan)
    if dof > 0 and k:
        J = res.jac[:m]
        s2 = float(np.sum(data**2)) / dof
        try:
            cov = np.linalg.pinv(J.T @ J) * s2
            sd = np.sqrt(np.clip(np.diag(cov), 0, None))
        except np.linalg.LinAlgError:
            pass
        # a parameter the residuals do not depend on has no finite uncertainty
        sd = np.where(np.linalg.norm(J, axis=0) > 0, sd, np.inf)
    for p, v, s in zip(free, res.x, sd):
        p.value, p.sd = float(v), float(s)
    return FitResult(values=values_of(res.x), sd={p.name: p.sd for p in free}, residuals=data,
                     rms=float(np.sqrt(np.mean(data**2))) if m else 0.0, dof=dof, nfev=int(res.nfev),
                     message=str(res.message))


def significant(x: float, digits: int = 4) -> float:
    """`x` to `digits` significant digits (the YAML stays readable; far inside the fit's uncertainty)."""
    x = float(x)
    return x if x == 0 or not math.isfinite(x) else float(f"{x:.{digits}g}")


def rms_log(pred, meas) -> float:
    pred, meas = np.asarray(pred, dtype=float), np.asarray(meas, dtype=float)
    return float(np.sqrt(np.mean(np.log(pred / meas) ** 2))) if len(meas) else math.nan


def fmt_bytes(n: int) -> str:
    for unit, k in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n} B"
