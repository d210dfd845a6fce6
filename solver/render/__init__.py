"""Renderers of plans and results: pure functions that return text, renderables, dicts or
files; nothing here prints. `table` (rich tables), `json` (optimize's JSON), `megatron`
(Megatron-LM launch arguments), `timeline` (matplotlib PNG of the pipeline schedule; the
`plot` extra), `hostfile` (rank order of a placement), `calibration_report` (the calibrated
cluster's YAML, report and plot). Import the submodule you need: this package imports
nothing heavy."""
