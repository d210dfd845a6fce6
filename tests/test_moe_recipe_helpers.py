"""A perf-recipe helper the MoE data file names sets what its recipe block does not restate
(`moe_recipes.HELPER_SETTINGS`): Megatron-Bridge v0.6.0's `_enable_hybridep_full_iteration_mxfp8` turns
on the EP all-to-all overlap of the 26.08 Qwen3-MoE recipes (perf_recipes/qwen/common.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import solveplan.catalog_published
from solveplan.calibration.moe_recipes import HELPER_SETTINGS, resolved_recipe
from solveplan.calibration.moe_rows import moe_row_job

PATH = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"
RAW = {r["id"]: r for r in json.loads(PATH.read_text())["measurements"]}
HELPER = "_enable_hybridep_full_iteration_mxfp8"
QWEN3_2608 = ("mbridge_perf-26.08-qwen3-30b-a3b-gb300-mxfp8-8", "mbridge_perf-26.08-qwen3-30b-a3b-gb200-mxfp8-8",
              "mbridge_perf-26.08-qwen3-235b-a22b-gb300-mxfp8-256", "mbridge_perf-26.08-qwen3-235b-a22b-gb200-mxfp8-256")


def _row(row_id, **recipe_update):
    raw = copy.deepcopy(RAW[row_id])
    raw["parallel"]["other"]["recipe"].update(recipe_update)
    return moe_row_job(raw)


@pytest.mark.parametrize("row_id", QWEN3_2608)
def test_the_26_08_qwen3_rows_run_the_overlap_their_helper_sets(row_id):
    recipe = RAW[row_id]["parallel"]["other"]["recipe"]
    assert HELPER in recipe["helpers_applied_in_order"] and "overlap_moe_expert_parallel_comm" not in recipe
    row = moe_row_job(copy.deepcopy(RAW[row_id]))
    assert row.job.moe_a2a_overlap is True
    assert any(HELPER in a and "overlap_moe_expert_parallel_comm True" in a for a in row.assumed)
    assert not any("overlap not stated" in a for a in row.assumed)


def test_what_the_recipe_block_states_wins_over_the_helper():
    row = _row(QWEN3_2608[0], overlap_moe_expert_parallel_comm=False)
    assert row.job.moe_a2a_overlap is False and not any(HELPER in a for a in row.assumed)


def test_a_helper_of_another_tag_sets_nothing():
    row = _row(QWEN3_2608[0], recipe_tag="v0.5.0")  # a preset of that era leaves it off (moe_rows._job_settings)
    assert row.job.moe_a2a_overlap is False and not any(HELPER in a for a in row.assumed)


def test_the_helper_table_leaves_the_recipe_it_reads_as_it_was():
    recipe = {"recipe_tag": "v0.6.0", "helpers_applied_in_order": [HELPER]}
    before, assumed = copy.deepcopy(recipe), []
    out = resolved_recipe(recipe, assumed)
    assert recipe == before and out == {**recipe, **HELPER_SETTINGS[("v0.6.0", HELPER)]} and len(assumed) == 1
    assert resolved_recipe({}, assumed) == {} and len(assumed) == 1


def test_the_dsv4_flash_gb300_recipe_runs_the_gb200_recipes_settings():
    """Megatron-Bridge v0.6.0's GB300 DeepSeek-V4 Flash recipe is the GB200 one with other environment variables;
    the data file's block for it is empty, so the reader takes that function's settings (`RECIPE_SETTINGS`)."""
    gb300 = moe_row_job(copy.deepcopy(RAW["mbridge_perf-26.08-deepseek-v4-flash-gb300-mxfp8-128"]))
    gb200 = moe_row_job(copy.deepcopy(RAW["mbridge_perf-26.08-deepseek-v4-flash-gb200-mxfp8-128"]))
    for row in (gb300, gb200):
        job = row.job
        assert job.moe_token_dispatcher == "flex" and job.cuda_graph_impl == "full_iteration"
        assert job.moe_a2a_overlap is False and job.recompute_modules == ("mla_up_proj",)
        assert job.constraints.recompute == ("selective",) and job.constraints.sequence_parallel == (False,)
    assert any("as deepseek_v4_flash_pretrain_128gpu_gb300_fp8mx_config sets them" in a for a in gb300.assumed)
    # the GB200 block states all but the graphs, which come from the function's set_full_iteration_cuda_graph
    said = next(a for a in gb200.assumed if "sets them" in a)
    assert said.startswith("cuda_graph_impl, cuda_graph_scope:")


def test_a_malformed_recipe_block_of_another_file_is_read_not_refused():
    """A file of another source may write the recipe block or its helper list in another shape: the row is still
    read (no run rejected), the block as no recipe and said, the helper list as none."""
    listed = _row(QWEN3_2608[0], helpers_applied_in_order=5)
    assert listed.skipped is None and listed.job.moe_a2a_overlap is False
    raw = copy.deepcopy(RAW[QWEN3_2608[0]])
    raw["parallel"]["other"]["recipe"] = "see the recipe file"
    row = moe_row_job(raw)
    assert row.skipped is None and any("recipe block str, not an object" in a for a in row.assumed)
