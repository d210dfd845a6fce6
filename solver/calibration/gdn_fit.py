"""The Gated DeltaNet rule's kernel efficiency from measured calls of FLA's `chunk_gated_delta_rule`.

Each measurement is one call on q, k, v of B x T tokens and H heads of dimension D (flash-linear-attention's
benchmark `chunk_gdn`), forward and forward + backward milliseconds. The formulation prices the call as the
roofline of `formulation.gdn.rule_s` at kernel efficiency 1 (`r`); a call takes r / e on the GPU plus a floor the
smallest calls show (the host's Python and kernel launches, a fixed cost per call): measured = r / e + c, one c
for the forward and one for forward + backward. The fit is linear in (1/e, c_fwd, c_fwdbwd), least squares on the
relative error (each call weighs alike whatever its size). The floor is not priced in a training step, whose
other layers' GPU work hides the host."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..formulation.gdn import rule_s
from ..specs import GPUSpec


@dataclass(frozen=True)
class RuleFit:
    efficiency: float  # the fraction of the HBM rate the rule's kernels reach
    floor_fwd_s: float
    floor_fwdbwd_s: float
    errors: np.ndarray  # (predicted - measured) / measured, forward and forward + backward per call


def _design(measurements: Sequence[dict], gpu: GPUSpec) -> tuple[np.ndarray, np.ndarray]:
    """Rows (roofline at efficiency 1, is-forward, is-forward+backward) and the measured seconds."""
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    rows, measured = [], []
    for m in measurements:
        f, b = rule_s(m["B"] * m["T"], m["H"], m["D"], m["D"], flop_per_s=gpu.peak_flop_per_s,
                      efficiency=gpu.matmul_efficiency, hbm_bytes_per_s=hbm, kernel_efficiency=1.0)
        rows += [(float(f), 1.0, 0.0), (float(f + b), 0.0, 1.0)]
        measured += [m["fwd_ms"] / 1e3, m["fwdbwd_ms"] / 1e3]
    return np.array(rows), np.array(measured)


def fit_rule(measurements: Sequence[dict], gpu: GPUSpec) -> RuleFit:
    """The module docstring's fit on `measurements` taken on `gpu` (its HBM rate and efficiency as the catalog
    states them)."""
    X, y = _design(measurements, gpu)
    w = 1.0 / y
    coef, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    return RuleFit(efficiency=float(1.0 / coef[0]), floor_fwd_s=float(coef[1]), floor_fwdbwd_s=float(coef[2]),
                   errors=X @ coef / y - 1.0)
