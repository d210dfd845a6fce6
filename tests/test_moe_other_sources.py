"""The MoE runs kept aside come from other sources, which state less than Megatron-Bridge's page: the
released rows restated that way (benchmarks/other_sources.py) are all read, none refused. One row per
model family here; the benchmark reads every row."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from other_sources import VARIANTS  # noqa: E402
from moe_validation import is_moe  # noqa: E402

import solveplan.catalog_published  # noqa: E402
from solveplan.calibration.rows import published_rows, row_job  # noqa: E402

PATH = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"  # the shipped copy
ROWS = [r for r in published_rows([str(PATH)]) if is_moe(r)]
ONE_PER_FAMILY = list({r.model_family: r for r in ROWS}.values())


@pytest.mark.parametrize("variant", ["knobs unstated", "no expert parallelism stated"])
def test_a_released_moe_row_restated_by_another_source_is_read(variant):
    assert len(ONE_PER_FAMILY) >= 8
    for row in ONE_PER_FAMILY:
        restated = row_job(VARIANTS[variant](row.raw))
        assert restated.skipped is None, f"{row.id} ({variant}): {restated.skipped}"
        assert restated.job.model.is_moe and restated.measured_s == pytest.approx(row.measured_s)
