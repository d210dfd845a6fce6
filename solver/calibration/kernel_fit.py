"""Kernel measurements -> the formulation's kernel efficiencies (pure numpy).

A kernel file is what `solveplan probe` writes and what `../shared/data/h200_kernels.json`
holds (the same format, so either can be read): `gemm_bf16` and `gemm_fp8` rows with the GEMM
shape (`m`, `n`, `k`) and the measured seconds `s`; `attention` rows with the backend
(`flash` = FlashAttention-2, `cudnn` = cuDNN's fused kernel, `efficient` = the
memory-efficient kernel), `b`, `heads`, `seq`, `head_dim` and the measured causal
forward + backward seconds `fwd_bwd_s`; `hbm` rows with a copy's bytes moved and seconds.
benchmarks/sdpa_masked_sweep.py's rows are attention rows too: `masked` ones timed SDPA's kernel
given an explicit mask, over the whole s x s (`fit_masked_attention`, per head dimension).

Each efficiency is fitted through the formulation's own kernel model, so a fitted value means
the same thing the formulation means by it:
- GEMMs: `kernels.gemm_s` is `2MNK / (peak * e * u_wave * u_k)` where compute-bound; each
  compute-bound measurement gives `e_i = 2MNK / (peak * u_wave * u_k * s_i)`, and the fit is
  their median (robust to a few odd shapes);
- attention: `kernels.flash_attention_s` (tensor-core matmuls at `e` plus the exponentials on
  the special-function units, overlapped by cuDNN on Hopper, serial in FlashAttention-2); each
  measurement's `e_i` solves predicted = measured by bisection (the prediction falls
  monotonically in `e`), the fit is their median;
- HBM: the attained fraction of the datasheet bandwidth of large copies (median).
The report keeps every measurement's ratio predicted/measured at the fitted value, so a user
sees how well the model's shape terms (waves, short K, causal blocks) follow the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formulation.kernels import flash_attention_s, gemm_s, gemm_shape_factor
from ..specs import GPUSpec

# attention backends of torch.nn.functional.scaled_dot_product_attention -> (GPUSpec field,
# whether the exponentials overlap the matmuls: cuDNN's fused kernel on Hopper+, module docstring)
ATTENTION_FIELDS = {"cudnn": "attention_efficiency", "flash": "flash2_attention_efficiency"}


@dataclass(frozen=True)
class KernelFit:
    """One fitted efficiency: the value, the measurements it rests on, and the ratios
    predicted/measured at that value (1.0 = the model follows the kernel exactly)."""

    field: str
    value: float | None
    count: int
    ratios: tuple[float, ...]

    @property
    def mape(self) -> float | None:
        return float(np.mean(np.abs(np.asarray(self.ratios) - 1.0))) if self.ratios else None


def _gemm_rows(measurements: dict, fp8: bool) -> list[dict]:
    return measurements.get("gemm_fp8" if fp8 else "gemm_bf16") or []


def gemm_ratios(rows: list[dict], gpu: GPUSpec, value: float, *, fp8: bool = False) -> np.ndarray:
    """predicted/measured of each GEMM at efficiency `value` (`kernels.gemm_s`); a ValueError for
    FP8 GEMMs on a GPU without an FP8 peak (none of them identifies its FP8 efficiency)."""
    peak = gpu.peak_fp8_tflops if fp8 else gpu.peak_bf16_tflops
    if peak is None:
        raise ValueError(f"{gpu.name} has no FP8 peak (peak_fp8_tflops): no FP8 GEMM can be predicted on it")
    m, n, k, s = (np.array([float(r[key]) for r in rows]) for key in ("m", "n", "k", "s"))
    predicted = gemm_s(m, n, k, flop_per_s=peak * 1e12, efficiency=value, num_sms=gpu.num_sms,
                       hbm_bytes_per_s=gpu.hbm_bytes_per_s, in_bytes=1 if fp8 else 2)
    return predicted / s


def fit_gemm_efficiency(rows: list[dict], gpu: GPUSpec, *, fp8: bool = False) -> KernelFit:
    """Median efficiency of the compute-bound GEMMs of `rows` (module docstring)."""
    field = "fp8_matmul_efficiency" if fp8 else "matmul_efficiency"
    peak = (gpu.peak_fp8_tflops if fp8 else gpu.peak_bf16_tflops)
    if not rows or peak is None:
        return KernelFit(field, None, 0, ())
    m, n, k, s = (np.array([float(r[key]) for r in rows]) for key in ("m", "n", "k", "s"))
    traffic_s = ((1 if fp8 else 2) * (m * k + k * n) + 2 * m * n) / gpu.hbm_bytes_per_s
    per_row = 2.0 * m * n * k / (peak * 1e12 * gemm_shape_factor(m, n, k, gpu.num_sms)) / s
    compute_bound = s > traffic_s  # the measured time exceeds the operand traffic at datasheet bandwidth
    if not compute_bound.any():
        return KernelFit(field, None, 0, ())
    value = float(np.clip(np.median(per_row[compute_bound]), 1e-3, 1.0))
    return KernelFit(field, value, int(compute_bound.sum()), tuple(gemm_ratios(rows, gpu, value, fp8=fp8).tolist()))


def attention_fwd_bwd_s(row: dict, gpu: GPUSpec, efficiency: float, overlap: bool) -> float:
    """Forward + backward of one row: causal, or over the whole s x s where the row is `masked`."""
    fwd, bwd = flash_attention_s(batch=row.get("b", 1), heads=row["heads"], s_q=row["seq"], s_k=row["seq"],
                                 head_dim=row["head_dim"], causal=not row.get("masked", False),
                                 flop_per_s=gpu.peak_flop_per_s,
                                 efficiency=efficiency, exp_per_s=gpu.sfu_tops * 1e12, overlap_exp=overlap)
    return float(fwd + bwd)


def solve_attention_efficiency(row: dict, gpu: GPUSpec, overlap: bool) -> float | None:
    """The efficiency at which the model's forward + backward equals the measurement (bisection
    on a log scale); None when even e = 1 is slower (the exponentials alone exceed it)."""
    measured = float(row["fwd_bwd_s"])
    lo, hi = 1e-4, 1.0
    if attention_fwd_bwd_s(row, gpu, hi, overlap) > measured:
        return None
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if attention_fwd_bwd_s(row, gpu, mid, overlap) > measured else (lo, mid)
    return hi


def _backend_rows(rows: list[dict], backend: str) -> list[dict]:
    return [r for r in rows if r.get("backend") == backend]


def attention_ratios(rows: list[dict], gpu: GPUSpec, value: float, backend: str) -> np.ndarray:
    """predicted/measured of each causal forward + backward of `backend` at efficiency `value`."""
    overlap = gpu.exp_overlaps_matmul and backend == "cudnn"
    mine = _backend_rows(rows, backend)
    return np.array([attention_fwd_bwd_s(r, gpu, value, overlap) / float(r["fwd_bwd_s"]) for r in mine])


def fit_attention_efficiency(rows: list[dict], gpu: GPUSpec, backend: str) -> KernelFit:
    """Median efficiency of one attention backend's causal forward + backward (docstring)."""
    field = ATTENTION_FIELDS[backend]
    overlap = gpu.exp_overlaps_matmul and backend == "cudnn"
    values = [e for e in (solve_attention_efficiency(r, gpu, overlap) for r in _backend_rows(rows, backend)) if e is not None]
    if not values:
        return KernelFit(field, None, 0, ())
    value = float(np.median(values))
    return KernelFit(field, value, len(values), tuple(attention_ratios(rows, gpu, value, backend).tolist()))


def fit_masked_attention(rows: list[dict], gpu: GPUSpec) -> dict[int, KernelFit]:
    """Per head dimension, the median efficiency of SDPA's kernel given an explicit mask (rows with
    `masked` true, as benchmarks/sdpa_masked_sweep.py writes them: the whole s x s, the exponentials
    overlapped as `layer_terms.attention_core_s` prices kernel "masked")."""
    overlap = gpu.exp_overlaps_matmul
    fits = {}
    for head_dim in sorted({int(r["head_dim"]) for r in rows if r.get("masked") and "fwd_bwd_s" in r}):
        mine = [r for r in rows if r.get("masked") and "fwd_bwd_s" in r and int(r["head_dim"]) == head_dim]
        values = [e for e in (solve_attention_efficiency(r, gpu, overlap) for r in mine) if e is not None]
        if values:
            value = float(np.median(values))
            ratios = tuple(attention_fwd_bwd_s(r, gpu, value, overlap) / float(r["fwd_bwd_s"]) for r in mine)
            fits[head_dim] = KernelFit(f"masked_attention_efficiency_by_head_dim[{head_dim}]", value, len(values), ratios)
    return fits


def fit_hbm_efficiency(rows: list[dict], gpu: GPUSpec) -> KernelFit:
    """Median attained fraction of the datasheet HBM bandwidth over the copies of `rows`."""
    if not rows:
        return KernelFit("hbm_efficiency", None, 0, ())
    fractions = np.array([float(r["bytes"]) / float(r["s"]) / gpu.hbm_bytes_per_s for r in rows])
    value = float(np.clip(np.median(fractions), 1e-3, 1.0))
    return KernelFit("hbm_efficiency", value, len(rows), tuple((fractions / value).tolist()))


def fit_kernels(measurements: dict, gpu: GPUSpec) -> list[KernelFit]:
    """Every efficiency a kernel file identifies, in GPUSpec field order."""
    attention = measurements.get("attention") or []
    fits = [fit_gemm_efficiency(_gemm_rows(measurements, False), gpu),
            fit_gemm_efficiency(_gemm_rows(measurements, True), gpu, fp8=True),
            fit_attention_efficiency(attention, gpu, "cudnn"),
            fit_attention_efficiency(attention, gpu, "flash"),
            fit_hbm_efficiency(measurements.get("hbm") or [], gpu)]
    return [f for f in fits if f.value is not None]


def ratios_at(measurements: dict, gpu: GPUSpec, field: str, value: float) -> np.ndarray:
    """predicted/measured of every kernel that identifies `field`, at `value` (e.g. a catalog
    GPU's end-to-end fitted efficiency, to see what it implies for the kernels)."""
    attention = measurements.get("attention") or []
    backend = {v: k for k, v in ATTENTION_FIELDS.items()}.get(field)
    if backend is not None:
        return attention_ratios(attention, gpu, value, backend)
    if field in ("matmul_efficiency", "fp8_matmul_efficiency"):
        fp8 = field == "fp8_matmul_efficiency"
        return gemm_ratios(_gemm_rows(measurements, fp8), gpu, value, fp8=fp8)
    raise ValueError(f"no kernel identifies {field}")
