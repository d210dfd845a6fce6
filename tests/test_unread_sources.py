"""Rows of a source whose launch scripts the project has not read (calibration/unread_sources.py): the
gradient dtype and FP8 primary weights their scripts would fix are unstated settings, the best that fits;
a source read keeps what its scripts say, and a row of an era before bf16 reduction keeps fp32."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

import solveplan.catalog_published
from solveplan.calibration.rows import DATA_FILES, published_rows, row_job
from solveplan.calibration.runs_fit import RowCase

DATA = [str(Path(solveplan.catalog_published.__file__).parent / name) for name in DATA_FILES]
BY_ID = {r.id: r for r in published_rows(DATA)}


def _restated(row_id: str) -> dict:
    raw = copy.deepcopy(BY_ID[row_id].raw)
    raw.update(id=f"{row_id}-restated", source="another_source")
    return raw


def test_an_fp8_row_of_an_unread_source_takes_the_bf16_reduction_and_fp8_weights_that_fit():
    """Llama 3.1 405B FP8-CS on 256 GB200 (tp4 pp16 vp4, recompute not stated): at Megatron-LM's defaults
    (fp32 reduction, no FP8 weights) its layout fits only with full recomputation, 45% slower than it ran."""
    ours = BY_ID["mbridge_perf-26.04.01-llama3.1-405b-gb200-fp8-cs-256"]
    row = row_job(_restated(ours.id))
    assert row.skipped is None
    assert (row.job.grad_reduce_dtype, row.job.fp8_param_gather) == ("bf16", True)
    assert any("scripts unread" in a for a in row.assumed)
    step_s, _, fits = RowCase(row).predict()
    assert fits and step_s == pytest.approx(RowCase(ours).predict()[0], rel=0.02)


def test_a_source_read_and_an_old_era_keep_what_their_scripts_and_time_say():
    core = BY_ID["megatron-core-h100-2024-16B"]  # Megatron-Core r0.8.0 as it comes
    assert core.job.grad_reduce_dtype == "fp32" and not any("scripts unread" in a for a in core.assumed)
    old = _restated(next(i for i in BY_ID if i.startswith("narayanan2021")))  # its title dates it 2021
    row = row_job(old)
    assert row.job.grad_reduce_dtype == "fp32" and not any("scripts unread" in a for a in row.assumed)


def test_a_pytorch_fsdp_row_of_an_unread_source_keeps_fp32_reduction():
    """torchtitan can reduce only in fp32 (`mixed_precision_reduce: Literal["float32"]`) and llm-foundry's DEFAULT
    mixed precision does too: a PyTorch FSDP row that states no mixed precision is not given bf16 reduction."""
    mosaic = BY_ID[next(i for i in BY_ID if BY_ID[i].source == "mosaic_llmfoundry")]
    raw = _restated(mosaic.id)
    raw["parallel"].pop("fsdp_mixed_precision_mode", None)
    assert raw["parallel"]["fsdp"] not in ("", None)
    row = row_job(raw)
    assert row.job.grad_reduce_dtype == "fp32" and not any("scripts unread" in a for a in row.assumed)
