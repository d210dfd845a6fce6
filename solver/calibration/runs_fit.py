"""Fit the formulation's GPU parameters on published runs.

One parameter set per GPU chip, shared by every row of that chip (the A100 40 GB and 80 GB
are one chip; their HBM stays the datasheet's), fitted by bounded, regularised least squares
(scipy.optimize.least_squares, 'trf') on log-ratio residuals `log(predicted / measured)`:

- each row is predicted through the real formulation: the configuration it states, and for
  knobs it leaves unstated the best legal value (see `rows.py`);
- loss `soft_l1` with scale 0.1: a row more than ~10% off pulls with a bounded force, so a
  handful of runs the formulation cannot explain (DeepSpeed's ZeRO-3 of 2021) do not drag
  every parameter;
- every parameter has a prior (`FitParam.prior`, `prior_sd`, `why`: the datasheet or paper it
  comes from), added as a residual `PRIOR_WEIGHT * (x - prior) / sd`: data decide where they
  can, and a parameter the rows cannot identify (a chip or a kernel absent from a
  cross-validation fold) stays at its prior instead of drifting to a bound;
- uncertainties from the Jacobian at the solution (`s^2 (J^T J)^-1`, data rows only);
  parameters that end on a bound are reported with that fact.
The fitter is the calibration's own (`calibration.fit.fit_least_squares`), with its priors,
robust loss and a Jacobian that re-evaluates only the rows a parameter moves.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..formulation.job import job_coefficients
from ..formulation.pipeline import evaluate_split, step_time_batch
from .fit import Param, fit_least_squares
from .row_predict import candidate_shapes, fastest_fitting
from .rows import Row

# catalog GPU -> chip whose parameters it shares (no published rows of its own: borrowed, stated in its YAML)
# (Blackwell: B200 and GB200 are one die, B300 and GB300 another; each GPU keeps its own datasheet peaks.)
CHIP_OF_GPU = {"a100-80gb": "a100", "a100-40gb": "a100", "a800-80gb": "a100", "a100-pcie-80gb": "a100",
               "h100-sxm": "h100", "h100-pcie": "h100", "h100-nvl": "h100", "h200": "h100", "gh200": "h100",
               "h800": "h100", "h20": "h100", "b200": "b200",
               "gb200": "b200", "b300": "b300", "gb300": "b300", "mi300x": "h100", "mi325x": "h100", "mi355x": "h100",
               "v100-32gb": "v100"}
PRIOR_WEIGHT = 0.1  # one prior standard deviation weighs as much as one row 10% off
LOSS_SCALE = 0.1
MAX_SHAPES = 300  # rows with unstated tp/pp: the best-predicted shapes kept for fitting (speed)


@dataclass(frozen=True)
class FitParam:
    key: str
    chips: tuple[str, ...]
    field: str  # GPUSpec field
    prior: float
    prior_sd: float
    lower: float
    upper: float
    why: str


# FlashAttention-1's prior as a fraction of FlashAttention-2's on the same chip, one rule for every
# chip: "FlashAttention-2 ... around 2x faster than FlashAttention" (Dao 2023, abstract). Stated from
# the paper, not from the rows: the only FlashAttention-1 rows (llm-foundry's) are one source, so when
# that source is left out this prior alone prices them.
FLASH1_OF_FLASH2 = 0.5
# FlashAttention-2's priors (their reasons in FIT_PARAMS), which FlashAttention-1's follow
FLASH2_PRIOR = {"a100": 0.6, "h100": 0.27}

FIT_PARAMS: tuple[FitParam, ...] = (
    FitParam("a100.matmul_efficiency", ("a100",), "matmul_efficiency", 0.75, 0.15, 0.3, 1.0,
             "cuBLAS reaches 70-80% of the dense BF16 peak on large GEMMs (NVIDIA GEMM guide)"),
    FitParam("a100.flash2_attention_efficiency", ("a100",), "flash2_attention_efficiency", FLASH2_PRIOR["a100"], 0.2, 0.1, 1.0,
             "FlashAttention-2 on A100: 50-73% of peak (Dao 2023, Fig. 4-5), exponentials counted apart"),
    FitParam("a100.flash1_attention_efficiency", ("a100",), "flash1_attention_efficiency",
             FLASH2_PRIOR["a100"] * FLASH1_OF_FLASH2,
             0.08, 0.1, 1.0,
             "FlashAttention-1 and its Triton port on A100: half of FlashAttention-2's prior (FLASH1_OF_FLASH2; Dao "
             "2023 gives FlashAttention-1 25-40% of peak forward+backward, abstract and Fig. 4-5), exponentials "
             "counted apart"),
    FitParam("a100.layer_overhead_us", ("a100",), "layer_overhead_us", 50.0, 200.0, 0.0, 2000.0,
             "10-20 kernel launches per layer and pass at ~5 us"),
    FitParam("h100.matmul_efficiency", ("h100",), "matmul_efficiency", 0.75, 0.15, 0.3, 1.0,
             "cuBLAS reaches 70-80% of the dense BF16 peak on large GEMMs"),
    FitParam("h100.flash2_attention_efficiency", ("h100",), "flash2_attention_efficiency", FLASH2_PRIOR["h100"], 0.07, 0.1, 1.0,
             "FlashAttention-2 kernels measured on an H200 (the H100's die): 0.27 in this model "
             "(../shared/data/h200_kernels.json, benchmarks/results/kernel_fit.md); 35-40% of peak at best "
             "(Shah et al. 2024, FlashAttention-3, Fig. 5)"),
    FitParam("h100.flash1_attention_efficiency", ("h100",), "flash1_attention_efficiency",
             FLASH2_PRIOR["h100"] * FLASH1_OF_FLASH2,
             0.06, 0.05, 1.0,
             "FlashAttention-1 and its Triton port on H100: half of FlashAttention-2's prior (FLASH1_OF_FLASH2), the "
             "H200 kernels' 0.27; neither uses Hopper's asynchronous tensor cores"),
    FitParam("h100.layer_overhead_us", ("h100",), "layer_overhead_us", 50.0, 200.0, 0.0, 2000.0,
             "10-20 kernel launches per layer and pass at ~5 us"),
    FitParam("h100.fp8_matmul_efficiency", ("h100",), "fp8_matmul_efficiency", 0.6, 0.15, 0.2, 1.0,
             "Transformer Engine FP8 GEMMs: 1.3-1.6x BF16 (60% of the FP8 peak)"),
    FitParam("v100.matmul_efficiency", ("v100",), "matmul_efficiency", 0.75, 0.15, 0.3, 1.0,
             "cuBLAS on Volta tensor cores"),
    *(p for chip, name in (("b200", "B200/GB200"), ("b300", "B300/GB300")) for p in (
        FitParam(f"{chip}.matmul_efficiency", (chip,), "matmul_efficiency", 0.75, 0.15, 0.3, 1.0,
                 f"cuBLAS reaches 70-80% of the dense BF16 peak on large GEMMs ({name}: only the BF16 LM head "
                 f"in FP8 rows)"),
        FitParam(f"{chip}.attention_efficiency", (chip,), "attention_efficiency", 0.6, 0.15, 0.1, 1.0,
                 "fused (cuDNN) attention: about 60% of the BF16 peak, as fused attention on Hopper (FlashAttention-3, "
                 "Shah et al. 2024: 740 of 989 TFLOP/s forward)"),
        FitParam(f"{chip}.fp8_matmul_efficiency", (chip,), "fp8_matmul_efficiency", 0.6, 0.15, 0.2, 1.0,
                 "Transformer Engine per-tensor FP8 GEMMs: ~60% of the FP8 peak (H100's prior)"),
        FitParam(f"{chip}.mxfp8_matmul_efficiency", (chip,), "mxfp8_matmul_efficiency", 0.6, 0.15, 0.2, 1.0,
                 "MXFP8 GEMMs run at the FP8 tensor rate with scales in hardware: the per-tensor prior"),
        FitParam(f"{chip}.nvfp4_matmul_efficiency", (chip,), "nvfp4_matmul_efficiency", 0.6, 0.15, 0.2, 1.0,
                 "NVFP4 GEMMs are block-scaled MMAs at the FP4 datasheet rate, as MXFP8's at the FP8 rate: MXFP8's "
                 "prior (GPUSpec.fp4_efficiency, the unfitted default, is the chip's MXFP8 value)"),
        FitParam(f"{chip}.layer_overhead_us", (chip,), "layer_overhead_us", 50.0, 200.0, 0.0, 2000.0,
                 "10-20 kernel launches per layer and pass at ~5 us"),
    )),
    FitParam("sharded_layer_overhead_us", ("a100", "h100"), "sharded_layer_overhead_us", 0.0, 500.0, 0.0, 5000.0,
             "host-side FSDP hooks per layer and pass: unknown a priori, so centred on none"),
)
# a chip without a parameter of its own takes another chip's value (V100's launch overhead is A100's)
BORROWED = {"v100": {"layer_overhead_us": "a100.layer_overhead_us"}}


class RowCase:
    """A published row with its candidate shapes cached, re-evaluated under trial GPU values."""

    def __init__(self, row: Row, max_shapes: int | None = MAX_SHAPES):
        self.row = row
        self.chip = CHIP_OF_GPU.get(row.gpu, row.gpu)
        self.shapes, self.layers = candidate_shapes(row.job_spec, row.layout)
        if max_shapes and len(self.shapes) > max_shapes:
            step, _, fits = step_time_batch(job_coefficients(row.job_spec, self.shapes), self.layers)
            keep = np.argsort(np.where(fits, step, np.inf), kind="stable")[:max_shapes]
            self.shapes, self.layers = self.shapes.take(keep), self.layers[keep]

    def predict(self, gpu_update: dict | None = None) -> tuple[float, int, bool]:
        """(step time s, index of the shape chosen, whether it fits) with the GPU's fields updated."""
        job = self.row.job_spec
        if gpu_update:
            cl = job.cluster
            job = job.model_copy(update={"cluster": cl.model_copy(update={"gpu": cl.gpu.model_copy(update=gpu_update)})})
        return self.predict_job(job)

    def evaluate_chosen(self):
        """(the `pipeline.evaluate_split` of the shape `predict` chooses, with its split; that shape; whether it
        fits): the stages, breakdown and memory of the plan a row is predicted by (benchmarks' row reports)."""
        _, k, fits = self.predict()
        shape = self.shapes.take([k])
        ev = evaluate_split(job_coefficients(self.row.job_spec, shape), 0, self.layers[k][: int(shape.pp[0])])
        return ev, shape, fits

    def predict_job(self, job) -> tuple[float, int, bool]:
        """`predict` for the row's job on another cluster (a calibrated one): the fastest
        shape that fits, among the row's candidate shapes."""
        return fastest_fitting(job, self.shapes, self.layers)


def row_cases(rows: Iterable[Row], max_shapes: int | None = MAX_SHAPES) -> list[RowCase]:
    return [RowCase(r, max_shapes) for r in rows if not r.skipped]


def gpu_updates(values: dict[str, float], params: Sequence[FitParam] = FIT_PARAMS) -> dict[str, dict]:
    """chip -> {GPUSpec field: value} for the fitted values."""
    out: dict[str, dict] = defaultdict(dict)
    for p in params:
        if p.key in values:
            for chip in p.chips:
                out[chip][p.field] = float(values[p.key])
    for chip, fields in BORROWED.items():
        for fld, key in fields.items():
            if key in values:
                out[chip].setdefault(fld, float(values[key]))
    return out


def predictions(cases: Sequence[RowCase], values: dict | None = None,
                params: Sequence[FitParam] = FIT_PARAMS) -> np.ndarray:
    upd = gpu_updates(values or {}, params)
    return np.array([c.predict(upd.get(c.chip)) [0] for c in cases])


@dataclass
class FitOutcome:
    values: dict[str, float]
    sd: dict[str, float]
    rms: float
    nfev: int
    rows: int
    notes: list[str] = field(default_factory=list)


def fit(cases: Sequence[RowCase], params: Sequence[FitParam] = FIT_PARAMS, max_nfev: int = 60) -> FitOutcome:
    """Fit `params` on `cases` (see the module docstring) with the calibration's fitter."""
    meas = np.array([c.row.measured_s for c in cases])
    chips = np.array([c.chip for c in cases])
    affected = {p.key: np.flatnonzero(np.isin(chips, p.chips)) for p in params}
    free = [Param(p.key, p.prior, p.lower, p.upper, max(abs(p.prior), 1e-2)) for p in params]

    def log_pred(values: dict, idx=None) -> np.ndarray:
        upd = gpu_updates(values, params)
        sel = range(len(cases)) if idx is None else idx
        return np.log([cases[i].predict(upd.get(cases[i].chip))[0] for i in sel])

    def jacobian(values: dict) -> np.ndarray:
        """Finite differences, re-evaluating only the rows of the chip a parameter belongs to."""
        J = np.zeros((len(cases), len(params)))
        base = log_pred(values)
        for j, p in enumerate(params):
            rows = affected[p.key]
            if len(rows):
                h = 1e-4 * max(abs(values[p.key]), 1e-2)
                step = h if values[p.key] + h <= p.upper else -h
                J[rows, j] = (log_pred({**values, p.key: values[p.key] + step}, rows) - base[rows]) / step
        return J

    res = fit_least_squares(lambda v: log_pred(v) - np.log(meas), free, prior_sd={p.key: p.prior_sd for p in params},
                            prior_weight=PRIOR_WEIGHT, loss="soft_l1", loss_scale=LOSS_SCALE, jacobian=jacobian,
                            max_nfev=max_nfev)
    out = FitOutcome(values=res.values, sd=res.sd, rms=res.rms, nfev=res.nfev, rows=len(cases))
    for p, prm in zip(params, free):
        if not len(affected[p.key]):
            out.notes.append(f"{p.key}: no row informs it; it stays at its prior {p.prior:g} ({p.why})")
        elif prm.at_bound:
            out.notes.append(f"{p.key} = {prm.value:g} sits on its bound [{p.lower:g}, {p.upper:g}]")
        elif res.sd.get(p.key, 0.0) > 10 * p.prior_sd:
            out.notes.append(f"{p.key}: the rows hardly move it (sd {res.sd[p.key]:.3g} from the rows alone, its "
                             f"prior's {p.prior_sd:g}): it stays near its prior {p.prior:g}")
    return out
