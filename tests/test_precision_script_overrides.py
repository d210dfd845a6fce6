"""Where a model's Megatron-Bridge scripts override the precision config's primary-weight gather, the
published rows run what the scripts set (`precision_rows.PARAM_GATHER_OFF`):
Nemotron 3 Super's NVFP4 runs gather no NVFP4 weights ("Disabled until MCore PR 4358 lands", v0.4.2 to
v0.6.0) and run the per-module precision config their recipes load (te_quant.cfg, `precision_rows.NVFP4_TE_CONFIG`);
Kimi K2's MXFP8 runs, on Muon, gather no FP8 weights (the WAR in set_kimi_k2_common_configs)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import solveplan.calibration.precision_rows
import solveplan.catalog_published
from solveplan.calibration.moe_rows import moe_row_job
from solveplan.calibration.precision_rows import NVFP4_TE_CONFIG, precision_settings
from solveplan.specs.module_precision import rules_from_te_config

PATH = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"
RAW = {r["id"]: r for r in json.loads(PATH.read_text())["measurements"]}
FIXTURE = Path(__file__).parent / "data" / "megatron_bridge" / "te_quant.cfg"  # Megatron-Bridge's file, as written


@pytest.mark.parametrize("row_id", [i for i in RAW if "nemotron3-super" in i and "nvfp4" in i])
def test_nemotron_3_super_nvfp4_rows_gather_no_nvfp4_weights(row_id):
    row = moe_row_job(copy.deepcopy(RAW[row_id]))
    assert row.job is not None and row.job.fp8_param_gather is False
    assert any("NVFP4 weights gathered (False)" in a for a in row.assumed)
    assert row.job.bf16_layers_at_end == 14  # the model's own NVFP4 config, unchanged
    # the recipe's te_quant.cfg: attention, latent projections and MTP in BF16, the Mamba out_proj in MXFP8
    assert row.job.module_precision == rules_from_te_config(FIXTURE.read_text())
    assert dict(row.job.module_precision)["*mixer.out_proj"] == "mxfp8"
    assert any("per-module precision as the recipe loads it" in a for a in row.assumed)


def test_the_shipped_te_config_is_megatron_bridges_file_and_only_nvfp4_super_rows_load_it():
    for name in NVFP4_TE_CONFIG.values():
        shipped = Path(solveplan.calibration.precision_rows.__file__).with_name(name)
        assert shipped.read_bytes() == FIXTURE.read_bytes()
    mxfp8 = moe_row_job(copy.deepcopy(RAW["mbridge_perf-26.08-nemotron3-super-gb300-mxfp8-64"]))
    assert mxfp8.job is not None and mxfp8.job.module_precision == ()
    nano = next(i for i in RAW if "nemotron3-nano" in i)
    assert moe_row_job(copy.deepcopy(RAW[nano])).job.module_precision == ()


@pytest.mark.parametrize("row_id", [i for i in RAW if "kimi-k2" in i and "mxfp8" in i])
def test_kimi_k2_mxfp8_rows_on_muon_gather_no_fp8_weights(row_id):
    row = moe_row_job(copy.deepcopy(RAW[row_id]))
    assert row.job is not None and row.job.fp8_param_gather is False
    assert any("turn fp8_param_gather off for kimi-k2" in a for a in row.assumed)


def test_other_models_keep_their_sources_gather():
    deepseek = moe_row_job(copy.deepcopy(RAW["mbridge_perf-26.08-deepseek-v3-gb300-mxfp8-256"]))
    assert deepseek.job.fp8_param_gather is True
    llama = next(i for i in RAW if "llama3.1-405b" in i and "nvfp4" in i and i.startswith("mbridge_perf"))
    assert precision_settings(copy.deepcopy(RAW[llama]), "nvfp4", [], "llama3.1-405b")["fp8_param_gather"] is True
    # the Kimi override is MXFP8's: another precision of the same model keeps the source's rule
    muon = {"source": "mbridge_perf", "notes": ["page note: Muon optimizer was used"]}
    assert precision_settings(muon, "fp8-tensorwise", [], "kimi-k2")["fp8_param_gather"] is True
    # and it is Muon's: a row not saying it ran Muon keeps the source's FP8 weights
    assert precision_settings({"source": "mbridge_perf"}, "mxfp8", [], "kimi-k2")["fp8_param_gather"] is True
    assert precision_settings(muon, "mxfp8", [], "kimi-k2")["fp8_param_gather"] is False
