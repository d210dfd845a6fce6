"""Calibration: fit the formulation to measurements, and check it against published runs.
`nccl_tests` (the log reader), `fit` (bounded least squares on log ratios), `link_fit`
(latency and efficiency per link class), `step_fit` (GPU efficiencies from measured steps),
`calibrate` (both, and the calibrated cluster), `published` (predicted vs published runs)."""

from . import moe_rows  # noqa: E402,F401  registers the MoE file's row reader in rows.ROW_READERS
