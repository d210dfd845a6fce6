"""Renderers of plans and results: pure functions that return text, renderables or files;
nothing here prints. `table` (rich tables), `megatron` (Megatron-LM launch arguments),
`timeline` (matplotlib PNG of the pipeline schedule; the `plot` extra), `hostfile` (rank
order of a placement). Import the submodule you need: this package imports nothing heavy."""
