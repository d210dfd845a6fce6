"""Few-shot calibration: what K = 2-5 measured steps of one stack on one cluster may move.

K points identify few parameters, so the fit is structured, not a free fit of every efficiency:

- Parameters are log-multipliers of the cluster's fields (`KNOBS`), each with the shipped
  value as its prior mean (log-multiplier 0) and a prior standard deviation stated with its
  reason. Residuals are `log(predicted / measured)`; the prior rows weigh `noise * x / sd`,
  so one prior standard deviation weighs as much as one measurement off by the noise: the
  data outweigh the prior as K grows (Gaussian MAP estimate). The noise is `NOISE_LOG` while
  knobs are chosen; the final estimate uses the rows' own noise pooled with `NOISE_LOG`
  (`pooled_noise`): many consistent rows earn a weaker prior, three rows do not.
- Of the candidates that pass, the one with the lowest posterior cost (robust data cost
  plus prior cost) joins: the smallest departure from the priors that explains the rows.
- `time_scale` is always free: one factor on every GPU-local term of the stack (all
  tensor-core efficiencies and the HBM efficiency times s, the per-layer overheads divided by
  s; links untouched: nccl-tests calibrate those). It is what the published sources differ by
  first (README "Accuracy against published runs": per-source median errors of -12% to +16%).
- One more knob at a time joins, the one the residuals point to, only if (a) the K rows
  identify it: moving it by its prior sd changes the rows' times *relative to each other*
  (the part the knobs already free cannot mimic) by more than the noise the rows show once
  it is fitted too (`residual_noise`): the data then pin it more tightly than its prior; (b) it improves the fit
  by Schwarz's criterion (BIC: `K ln(SS_before / SS_after) > ln K`, SS in the fit's robust
  loss and never counted below K measurement repeatabilities); and (c) at least one
  measurement stays beyond the parameter count (`K - 1` parameters at most), so that the
  residual still says whether the model holds. A knob the rows do not use (FP8 efficiency
  without FP8 rows) is never a candidate; a knob not identified is reported, not moved.
- Robust loss (soft_l1 at the noise scale): a measurement far off pulls with bounded force.
- From K = 3 rows, a time scale fitted alone is applied only if, refitted on K - 1 rows, it predicts each
  row left out in turn better (in total, in the robust loss) than the base parameters do (`passes_left_out`): rows whose
  errors differ in sign share no factor, and their mean would move every other prediction. Otherwise
  the cluster is left as it was, with a note.

`fit_few_shot(predict, measured, facts)` is used by `solveplan calibrate --steps` (step_fit)
and by `solveplan validate --few-shot K` (fewshot_eval) alike: one rule in one place.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..specs import ClusterSpec, JobSpec
from .fit import Param, fit_least_squares

# Typical error of the formulation on a run whose stack it was fitted to: the in-sample MAPE
# of the shipped parameters on the published runs is 5.6% (README); the residual noise a
# few-shot fit cannot go below.
NOISE_LOG = 0.05
# Repeatability of a measured step time averaged over 20+ steps on an idle cluster (~1%):
# the smallest noise an identification test assumes, however well the rows fit.
MEASUREMENT_NOISE_LOG = 0.01
# Weight of NOISE_LOG in the final noise estimate, in rows (`pooled_noise`): two, so that the
# rows' own noise counts for more as soon as they have more than two degrees of freedom left.
NOISE_PSEUDO_ROWS = 2
# Rows a time scale fitted alone must have for the left-out check (`passes_left_out`): with K - 1 = 2 rows
# left to fit, the factor it tests is a mean, not one row's error.
MIN_LEFT_OUT_ROWS = 3
EFFICIENCY_FIELDS = ("matmul_efficiency", "fp8_matmul_efficiency", "attention_efficiency",
                     "flash2_attention_efficiency", "flash1_attention_efficiency", "hbm_efficiency",
                     "nvfp4_matmul_efficiency")
OVERHEAD_FIELDS = ("layer_overhead_us", "sharded_layer_overhead_us")


@dataclass(frozen=True)
class Knob:
    """A parameter a few-shot fit may move: log-multiplier of `fields`, prior N(0, prior_sd_log)."""

    name: str
    prior_sd_log: float
    bound_log: float  # |log-multiplier| at most this
    why: str
    used: Callable[[Sequence[RowFacts]], bool] = lambda rows: True


@dataclass(frozen=True)
class RowFacts:
    """What of a measured row decides which knobs it can inform."""

    precision: str
    attention_kernel: str  # "cudnn", "flash2", "flash1", or "none" (no flash attention)
    zero: int
    multi_node: bool

    @classmethod
    def of(cls, job: JobSpec, zero: int) -> RowFacts:
        return cls(job.precision, job.attention_kernel if job.flash_attention else "none", int(zero),
                   job.cluster.num_nodes > 1)


KNOBS: tuple[Knob, ...] = (
    Knob("time_scale", 0.25, math.log(2.0),
         "stacks on one chip differ by up to 30% (issue 26; per-source median errors -12% to +16% in README)"),
    Knob("matmul_efficiency", 0.2, math.log(2.0),
         "cuBLAS large-GEMM efficiency: 70-80% of peak, the fitted 0.64-0.82 spread by chip"),
    Knob("fp8_matmul_efficiency", 0.2, math.log(2.0), "FP8 GEMMs: 1.3-1.6x BF16 (Transformer Engine)",
         lambda rows: any(r.precision == "fp8" for r in rows)),
    Knob("attention_efficiency", 0.4, math.log(3.0),
         "fused (cuDNN) attention: the H200 kernels measured 0.46 of peak against the catalog's GEMM value",
         lambda rows: any(r.attention_kernel == "cudnn" for r in rows)),
    Knob("flash2_attention_efficiency", 0.4, math.log(3.0),
         "FlashAttention-2: the catalog's 0.19 is 48% off the H200's measured kernels (kernel_fit.md)",
         lambda rows: any(r.attention_kernel == "flash2" for r in rows)),
    Knob("flash1_attention_efficiency", 0.4, math.log(3.0),
         "FlashAttention-1 / its Triton port: 25-40% of the A100's peak (Dao 2023), the stack's own kernel",
         lambda rows: any(r.attention_kernel == "flash1" for r in rows)),
    Knob("layer_overhead_us", 0.7, math.log(10.0),
         "launch overhead per layer: CUDA graphs, host speed and fusion change it by a factor of 2"),
    Knob("sharded_layer_overhead_us", 0.7, math.log(10.0),
         "FSDP hooks per layer: framework version and prefetch settings change it by a factor of 2",
         lambda rows: any(r.zero >= 2 for r in rows)),
    Knob("network_efficiency", 0.3, math.log(3.0),
         "NCCL's attained fraction of the NIC: 0.5-0.9 by fabric, congestion and NCCL version",
         lambda rows: any(r.multi_node for r in rows)),
)
KNOB_BY_NAME = {k.name: k for k in KNOBS}
KNOB_NAMES = tuple(KNOB_BY_NAME)  # in KNOBS order: the knobs fit_few_shot may free by default


def resolved_gpu_fields(cluster: ClusterSpec) -> dict[str, float]:
    """The GPU's fields a knob moves, with the spec's defaults made explicit (an unset FP8 or
    attention efficiency follows the GEMM one: moving the GEMM knob alone must not move them)."""
    g = cluster.gpu
    fused = g.fused_attention_efficiency
    return {"matmul_efficiency": g.matmul_efficiency, "fp8_matmul_efficiency": g.fp8_matmul_efficiency or g.matmul_efficiency,
            "attention_efficiency": fused, "flash2_attention_efficiency": g.flash2_attention_efficiency or fused,
            "flash1_attention_efficiency": g.flash1_attention_rate,
            "hbm_efficiency": g.hbm_efficiency, "layer_overhead_us": g.layer_overhead_us,
            "nvfp4_matmul_efficiency": g.fp4_efficiency(),  # the time scale moves NVFP4 GEMMs too
            "sharded_layer_overhead_us": g.sharded_layer_overhead_us}


def calibrated_fields(cluster: ClusterSpec, factors: dict[str, float]) -> tuple[dict, dict]:
    """(GPU update, cluster update) for multipliers `factors` (knob name -> factor): the time
    scale on every GPU-local field, each other knob on its own field; efficiencies capped at 1
    (a kernel cannot pass its peak). No factor, no update: the cluster stays as the user wrote it."""
    if not factors:
        return {}, {}
    s = factors.get("time_scale", 1.0)
    gpu = {}
    for name, value in resolved_gpu_fields(cluster).items():
        own = factors.get(name, 1.0)
        if name in EFFICIENCY_FIELDS:
            gpu[name] = min(1.0, value * s * own)
        else:
            gpu[name] = value * own / s
    net = {}
    if "network_efficiency" in factors:
        net["network_efficiency"] = min(1.0, cluster.network_efficiency * factors["network_efficiency"])
    return gpu, net


def calibrated_cluster(cluster: ClusterSpec, factors: dict[str, float]) -> ClusterSpec:
    gpu, net = calibrated_fields(cluster, factors)
    return cluster.model_copy(update={**net, "gpu": cluster.gpu.model_copy(update=gpu)})


def calibrated_job(job: JobSpec, factors: dict[str, float]) -> JobSpec:
    return job.model_copy(update={"cluster": calibrated_cluster(job.cluster, factors)})


@dataclass
class FewShotFit:
    factors: dict[str, float]  # knob -> multiplier (free knobs only)
    sd_log: dict[str, float]
    rms_before: float
    rms_after: float
    residuals: np.ndarray  # log(pred / measured) after
    notes: list[str] = field(default_factory=list)

    @property
    def free(self) -> list[str]:
        return list(self.factors)


Predict = Callable[[dict[str, float]], np.ndarray]  # factors -> predicted step times of the K rows


def _fit(predict: Predict, log_meas: np.ndarray, names: Sequence[str], noise: float = NOISE_LOG):
    params = [Param(n, 0.0, -KNOB_BY_NAME[n].bound_log, KNOB_BY_NAME[n].bound_log, 0.1) for n in names]

    def resid(v):
        return np.log(predict({n: math.exp(v[n]) for n in names})) - log_meas

    res = fit_least_squares(resid, params, diff_step=1e-3, prior_sd={n: KNOB_BY_NAME[n].prior_sd_log for n in names},
                            prior_weight=noise, loss="soft_l1", loss_scale=noise)
    return res


def _sensitivity(predict: Predict, factors: dict[str, float], name: str, h: float = 0.05) -> np.ndarray:
    """d log(step) / d log(knob) of each row at `factors` (forward difference)."""
    base = np.log(predict(factors))
    moved = np.log(predict({**factors, name: factors.get(name, 1.0) * math.exp(h)}))
    return (moved - base) / h


def robust_ss(residuals: np.ndarray) -> float:
    """Sum of squares in the fit's own robust loss (soft_l1 at scale NOISE_LOG): r^2 for a
    small residual, growing linearly beyond the noise, so one row the model cannot explain
    weighs in model choice as little as it pulls in the fit."""
    z = (np.asarray(residuals) / NOISE_LOG) ** 2
    return float(NOISE_LOG**2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))


def residual_noise(residuals: np.ndarray, n_free: int) -> float:
    """The noise the rows show once the free knobs are fitted (robust rms with K - p degrees
    of freedom), at least the repeatability of a measured step (`MEASUREMENT_NOISE_LOG`)."""
    dof = max(1, len(residuals) - n_free)
    return max(MEASUREMENT_NOISE_LOG, math.sqrt(robust_ss(residuals) / dof))


def pooled_noise(residuals: np.ndarray, n_free: int) -> float:
    """The noise the final estimate weighs the priors against: the rows' own (`residual_noise`)
    pooled with `NOISE_PSEUDO_ROWS` rows at `NOISE_LOG` (the conjugate scaled-inverse-chi^2
    prior of a Gaussian noise): with one degree of freedom left the rows cannot claim a noise
    of 1% and so free the knobs from their priors; with many they can."""
    dof = max(0, len(residuals) - n_free)
    s2 = residual_noise(residuals, n_free) ** 2
    return math.sqrt((NOISE_PSEUDO_ROWS * NOISE_LOG**2 + dof * s2) / (NOISE_PSEUDO_ROWS + dof))


def _posterior_cost(res, names: Sequence[str]) -> float:
    """Data (robust) plus prior cost of a fit at the model noise: of two knobs that fit the
    rows alike, the one that needs the smaller departure from its prior wins."""
    prior = sum((NOISE_LOG * res.values[n] / KNOB_BY_NAME[n].prior_sd_log) ** 2 for n in names)
    return robust_ss(res.residuals) + prior


def _explained_ss(residuals: np.ndarray) -> float:
    """Sum of squared residuals, never below K repeatabilities: a knob gains nothing for
    explaining residuals a repeated measurement would not reproduce."""
    return max(robust_ss(residuals), len(residuals) * MEASUREMENT_NOISE_LOG**2)


def identified(predict: Predict, factors: dict[str, float], name: str, noise: float) -> bool:
    """Whether the rows tell `name` apart from the knobs already free: its sensitivity, with
    the part the free knobs can mimic projected out, moves the rows relative to each other by
    more than `noise` when the knob moves by its prior sd."""
    col = _sensitivity(predict, factors, name)
    basis = np.column_stack([_sensitivity(predict, factors, n) for n in factors] or [np.zeros(len(col))])
    coef, *_ = np.linalg.lstsq(basis, col, rcond=None)
    rest = col - basis @ coef
    return KNOB_BY_NAME[name].prior_sd_log * float(np.linalg.norm(rest)) > noise


def fit_few_shot(predict: Predict, measured: Sequence[float] | np.ndarray, facts: Sequence[RowFacts],
                 candidates: Sequence[str] = KNOB_NAMES) -> FewShotFit:
    """The structured few-shot fit of the module docstring. `predict(factors)` gives the K
    rows' step times with the cluster calibrated by `factors`."""
    log_meas = np.log(np.asarray(measured, dtype=float))
    K = len(log_meas)
    names = ["time_scale"]
    res = _fit(predict, log_meas, names)
    notes: list[str] = []
    pool = [n for n in candidates if n != "time_scale" and KNOB_BY_NAME[n].used(facts)]
    while len(names) < K - 1 and pool:
        factors = {n: math.exp(res.values[n]) for n in names}
        ss = _explained_ss(res.residuals)
        best = None
        for n in pool:
            trial = _fit(predict, log_meas, names + [n])
            if not identified(predict, factors, n, residual_noise(trial.residuals, len(names) + 1)):
                continue
            gain = K * math.log(ss / _explained_ss(trial.residuals))
            cost = _posterior_cost(trial, names + [n])
            if gain > math.log(K) and (best is None or cost < best[2]):
                best = (n, trial, cost)
        if best is None:
            break
        names.append(best[0])
        pool.remove(best[0])
        res = best[1]
    if len(names) > 1:  # the final estimate weighs the priors against the noise these rows show
        res = _fit(predict, log_meas, names, pooled_noise(res.residuals, len(names)))
    left = [n for n in pool if n not in names]
    if left:
        notes.append(f"not moved (the {K} measurements do not identify them or they do not improve the fit): "
                     + ", ".join(left))
    before = np.log(predict({})) - log_meas
    rms_before = float(np.sqrt(np.mean(before**2)))
    if not passes_left_out(predict, log_meas, names, before):
        notes.append(_refused_note(names))
        return FewShotFit({}, {}, rms_before, rms_before, before, notes)
    return FewShotFit(factors={n: math.exp(res.values[n]) for n in names}, sd_log=dict(res.sd),
                      rms_before=rms_before, rms_after=res.rms, residuals=res.residuals, notes=notes)


def left_out_errors(predict: Predict, log_meas: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """log(predicted / measured) of each of the K rows by the fit of `names` on the other K - 1
    (leave-one-out cross-validation, Stone 1974): how the calibration predicts a configuration it
    has not seen, which is its use."""
    K = len(log_meas)
    out = np.empty(K)
    for i in range(K):
        keep = np.arange(K) != i

        def others(factors: dict[str, float], keep: np.ndarray = keep) -> np.ndarray:
            return predict(factors)[keep]

        res = _fit(others, log_meas[keep], names)
        out[i] = math.log(predict({n: math.exp(res.values[n]) for n in names})[i]) - log_meas[i]
    return out


def passes_left_out(predict: Predict, log_meas: np.ndarray, names: Sequence[str], zero_shot: np.ndarray) -> bool:
    """Whether the fit of `names` is applied: a time scale alone only if its fit predicts the K rows left out
    in turn (`left_out_errors`) better than the base parameters predict them (`zero_shot`), in the fit's
    robust loss. Rows whose errors one factor cannot share (a stack whose offset differs by model or
    version) would otherwise move every other prediction by their mean. A set with more knobs has passed
    the identification and Schwarz tests on all K rows, which a fit on K - 1 rows cannot repeat (with K = 3
    it is exactly determined): it is kept as chosen. Nor are two rows checked (`MIN_LEFT_OUT_ROWS`): each would
    be predicted from the other's error alone, which tests their scatter, not a shared factor."""
    if len(names) > 1 or len(log_meas) < MIN_LEFT_OUT_ROWS:
        return True
    return robust_ss(left_out_errors(predict, log_meas, names)) < robust_ss(zero_shot)


def _refused_note(names: Sequence[str]) -> str:
    return (f"not calibrated: fitted on all but one, {' + '.join(names)} predicted the measured steps, each left out in "
            "turn, worse than the base parameters do (their errors differ from row to row, not by one factor); the "
            "cluster is unchanged")
