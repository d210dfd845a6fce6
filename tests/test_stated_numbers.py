"""A kept-aside row is never refused for the way a number is written: the published files' conventions write an
unstated field as null or 'not stated', a table writes "n/a", and a number may come as a string or a float. Each is read into an integer or None and said in the row's notes
(`calibration.stated`); a row that states too little says which field in one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import solveplan.catalog_published
from solveplan.calibration.precision_rows import row_precision
from solveplan.calibration.rows import nic_gbit_per_gpu, published_rows, recompute_of
from solveplan.calibration.stated import first_yes_no, read_field, read_measured, with_stated_numbers

MOE_FILE = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"
ROW_ID = "mbridge_perf-26.04.01-qwen3-30b-a3b-gb200-mxfp8-8"


def _read(tmp_path, model=None, **parallel):
    """The released row `ROW_ID` with its parallel (and `model`) fields replaced, read as a kept-aside file would be."""
    data = json.loads(MOE_FILE.read_text())
    raw = copy.deepcopy(next(r for r in data["measurements"] if r["id"] == ROW_ID))
    raw["parallel"].update(parallel)
    raw["model"].update(model or {})
    path = tmp_path / "kept_aside.json"
    path.write_text(json.dumps({**data, "measurements": [raw]}))
    (row,) = published_rows([str(path)])
    return row


@pytest.mark.parametrize("block, name, value, read", [
    ("parallel", "tp", "4", 4), ("parallel", "pp", 2.0, 2), ("parallel", "vp", "n/a", None),
    ("parallel", "ep", "None", None), ("parallel", "tp", "not stated", None), ("parallel", "mbs", "n/a", None),
    ("parallel", "gbs", "n/a", None), ("parallel", "mbs", 0, None), ("parallel", "cp", -1, None),
    ("parallel", "pp", "x", None), ("parallel", "ep", True, None), ("parallel", "tp", 2.5, None),
    ("model", "layers", "48", 48), ("model", "hidden", 4096.0, 4096), ("model", "vocab", "n/a", None),
    ("model", "seq_len", 0, None),
])
def test_each_spelling_is_read_and_said(block, name, value, read):
    got, note = read_field(block, name, value)
    assert got == read and note is not None and f"{block}.{name}" in note


def test_integers_and_nulls_are_taken_as_written():
    assert read_field("parallel", "tp", 8) == (8, None) and read_field("parallel", "vp", None) == (None, None)
    raw = {"parallel": {"tp": 2, "pp": 1, "num_gpus": 8, "vp": None}, "model": {"layers": 4, "num_experts": None}}
    assert with_stated_numbers(raw) == (raw, [])


def test_a_released_row_with_strings_reads_to_the_same_job(tmp_path):
    as_released = next(r for r in published_rows([str(MOE_FILE)]) if r.id == ROW_ID)
    p = as_released.raw["parallel"]
    m = as_released.raw["model"]
    row = _read(tmp_path, tp=str(p["tp"]), ep=float(p["ep"]), mbs=str(p["mbs"]), num_gpus=str(p["num_gpus"]),
                vp="n/a", model={"layers": str(m["layers"]), "hidden": float(m["hidden"]), "seq_len": str(m["seq_len"])})
    assert row.skipped is None
    assert row.job.constraints == as_released.job.constraints and row.job.global_batch_size == p["gbs"]
    assert row.measured_s == pytest.approx(as_released.measured_s)
    assert any("parallel.tp '1' read as 1" in a for a in row.assumed)
    assert any("parallel.vp 'n/a': not stated, the best legal value" in a for a in row.assumed)
    assert any("model.layers '48' read as 48" in a for a in row.assumed)


def test_an_unstated_sequence_length_is_the_published_configs(tmp_path):
    row = _read(tmp_path, model={"seq_len": "not stated"})
    assert row.skipped is None and row.job.seq_length == row.job.model.seq_length
    assert any("sequence length not stated" in a for a in row.assumed)


def test_not_stated_degrees_are_free_and_the_row_is_predicted(tmp_path):
    row = _read(tmp_path, tp="not stated", ep="not stated", mbs="unknown")
    assert row.skipped is None
    c = row.job.constraints
    assert c.tp is None and c.ep is None and c.micro_batch_size is None
    assert any("parallel.ep 'not stated': not stated, the best legal value" in a for a in row.assumed)


def test_counts_the_stated_numbers_give_are_derived(tmp_path):
    row = _read(tmp_path, num_gpus=None, tp=1, pp=1, cp=1, dp=8, gbs=None, mbs=4, ga=16)
    assert row.skipped is None and row.num_gpus == 8 and row.job.global_batch_size == 4 * 16 * 8
    assert any("parallel.num_gpus not stated: 8 = tp x pp x cp x dp" in a for a in row.assumed)
    assert any("parallel.gbs not stated: 512 = mbs x ga x dp" in a for a in row.assumed)


def test_a_row_stating_too_little_says_which_field_in_one_line(tmp_path):
    no_gpus = _read(tmp_path, num_gpus="n/a", dp=None)
    assert "parallel.num_gpus" in no_gpus.skipped and "\n" not in no_gpus.skipped
    no_batch = _read(tmp_path, gbs="not stated")
    assert no_batch.skipped.startswith("global batch not stated")


@pytest.mark.parametrize("name, value, read", [
    ("mfu", 41, 0.41), ("mfu", "41%", 0.41), ("tokens_per_s_per_gpu", "26,112", 26112.0),
    ("iteration_time_s", "4.92", 4.92), ("iteration_time_s", -1, None), ("tflops_per_gpu", "n/a", None),
])
def test_measured_figures_are_read_and_said(name, value, read):
    got, note = read_measured(name, value)
    assert got == pytest.approx(read) if read else got is None
    assert note is not None and f"measured.{name}" in note
    assert read_measured("mfu", 0.41) == (0.41, None)


def test_a_throughput_written_with_a_thousands_separator_gives_the_same_step(tmp_path):
    as_released = next(r for r in published_rows([str(MOE_FILE)]) if r.id == ROW_ID)
    data = json.loads(MOE_FILE.read_text())
    raw = copy.deepcopy(as_released.raw)
    raw["measured"]["tokens_per_s_per_gpu"] = f"{raw['measured']['tokens_per_s_per_gpu']:,}"
    raw.pop("derived", None)
    path = tmp_path / "kept_aside.json"
    path.write_text(json.dumps({**data, "measurements": [raw]}))
    (row,) = published_rows([str(path)])
    assert row.skipped is None and row.measured_s == pytest.approx(as_released.measured_s, rel=1e-3)


@pytest.mark.parametrize("text, source, recipe, said", [
    ("fp8 (quantization recipe not stated)", "mbridge_perf", "fp8-tensorwise", "unnamed FP8 recipe"),
    ("fp8 (not stated)", "another_source", "fp8", "per-tensor delayed scaling"),
    ("FP8 blockwise", "x", "fp8-blockwise", None), ("fp8 current scaling", "x", "fp8-tensorwise", None),
    ("FP4", "x", "nvfp4", "NVFP4"), ("TF32", "x", "bf16", "names no recipe"), ("bf16 mixed precision", "x", "bf16", None),
    ("fp16", "x", "fp16", None), (None, "x", "bf16", None),
])
def test_one_precision_reader_for_dense_and_moe_rows(text, source, recipe, said):
    assumed: list = []
    assert row_precision(text, assumed, source) == recipe
    assert (said is None and not assumed) or any(said in a for a in assumed)


def test_a_moe_row_reads_a_spelled_out_recipe_as_the_dense_reader_does(tmp_path):
    data = json.loads(MOE_FILE.read_text())
    raw = copy.deepcopy(next(r for r in data["measurements"] if r["id"] == ROW_ID))
    raw["precision"] = "FP8 current scaling"
    path = tmp_path / "kept_aside.json"
    path.write_text(json.dumps({**data, "measurements": [raw]}))
    (row,) = published_rows([str(path)])
    assert row.skipped is None and row.job.precision == "fp8-tensorwise"


@pytest.mark.parametrize("text, per_gpu", [
    ("8x 200 Gb/s HDR InfiniBand per node", 200.0), ("3.2 Tbps per node", 400.0), ("EFA v2 3200 Gbps", 400.0),
    ("Spectrum-X 400G", 400.0), ("400 Gb/s NDR", 400.0), (400, None), ("not stated", None),
])
def test_fabric_texts_of_other_sources(text, per_gpu):
    """A bare rate above any NIC's (800 Gb/s) is the node's; Tb/s and '400G' are read; a number without a unit
    says nothing (GB/s or Gb/s?) and does not stop the row."""
    assert nic_gbit_per_gpu(text, 8) == per_gpu


def test_odd_hardware_fields_never_stop_the_file(tmp_path):
    data = json.loads(MOE_FILE.read_text())
    base = next(r for r in data["measurements"] if r["id"] == ROW_ID)
    raws = []
    for i, (field, value) in enumerate([("gpus_per_node", "8"), ("gpus_per_node", "not stated"), ("inter_node", 400),
                                        ("intra_node", ["NVLink"]), ("cluster", 7)]):
        raw = copy.deepcopy(base)
        raw["hardware"][field], raw["id"] = value, f"odd-{i}"
        raws.append(raw)
    path = tmp_path / "kept_aside.json"
    path.write_text(json.dumps({**data, "measurements": raws}))
    rows = published_rows([str(path)])
    assert [r.skipped for r in rows] == [None] * len(raws)
    assert any("hardware.gpus_per_node '8' read as 8" in a for a in rows[0].assumed)


def test_a_moe_row_reads_its_fsdp_column_and_yes_no_words(tmp_path):
    """The MoE reader read FSDP only from a recipe and booleans only as JSON booleans: a kept-aside row stating
    "Megatron-FSDP" was priced at the best ZeRO stage, "yes" for sequence parallelism as unstated."""
    data = json.loads(MOE_FILE.read_text())
    by_id = {r["id"]: r for r in data["measurements"]}
    flat = by_id["mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16"]  # pp 1: ZeRO-3 is legal
    tp2 = by_id["mbridge_perf-26.04.01-qwen3-235b-a22b-h100-sxm5-80gb-fp8-cs-256"]
    assert flat["parallel"]["pp"] == 1 and tp2["parallel"]["tp"] == 2
    raws = []
    for i, (base, cells) in enumerate([(flat, {"fsdp": "Megatron-FSDP"}), (flat, {"fsdp": "FSDP2 (torchtitan)"}),
                                       (tp2, {"sequence_parallel": "yes"}), (flat, {"sequence_parallel": "no"})]):
        raw = copy.deepcopy(base)
        raw["parallel"].update(cells)
        raw["parallel"]["other"], raw["id"], raw["source"] = {}, f"fsdp-{i}", "kept_aside"
        raws.append(raw)
    path = tmp_path / "kept_aside.json"
    path.write_text(json.dumps({**data, "measurements": raws}))
    rows = published_rows([str(path)])
    assert [r.job.constraints.zero for r in rows[:2]] == [(3,), (3,)]
    assert any("PyTorch FSDP (FSDP2 (torchtitan)) costed as ZeRO-3" in a for a in rows[1].assumed)
    assert [r.job.constraints.sequence_parallel for r in rows[2:]] == [(True,), (False,)]


def test_yes_no_words():
    assert [first_yes_no(v) for v in (True, "yes", "On", 1, "0", "no", False)] == [True, True, True, True, False,
                                                                                      False, False]
    assert first_yes_no("not stated", None, "yes") is True and first_yes_no("not stated") is None


def test_a_step_time_under_another_name_is_read(tmp_path):
    data = json.loads(MOE_FILE.read_text())
    base = next(r for r in data["measurements"] if r["id"] == ROW_ID)
    raws = []
    for i, measured in enumerate([{"step_time_s": 3.2}, {"iteration_time_ms": "3,200"}, {}]):
        raw = copy.deepcopy(base)
        raw["measured"], raw["id"] = measured, f"named-{i}"
        raw.pop("derived", None)
        raws.append(raw)
    path = tmp_path / "kept_aside.json"
    path.write_text(json.dumps({**data, "measurements": raws}))
    named_s, named_ms, nothing = published_rows([str(path)])
    assert named_s.measured_s == pytest.approx(3.2) and named_ms.measured_s == pytest.approx(3.2)
    assert any("measured.iteration_time_ms '3,200' read as iteration_time_s 3.2" in a for a in named_ms.assumed)
    assert nothing.skipped.startswith("no time measure")


@pytest.mark.parametrize("text, granularity", [
    ("full (activation checkpointing)", "full"), ("none (yaml activations_checkpoint_*: null)", "none"),
    ("selective (attention core only)", "selective"), ("not stated", None), (None, None),
    (True, "full"), (False, "none"), ("activation checkpointing", "full"), ("uniform (1 layer)", "full"),
    ("partial", "selective"), ("off", "none"), ("n/a", None), ("unknown", None),
])
def test_a_recompute_text_is_never_silently_none(text, granularity):
    """Every released spelling reads as before; a text naming no granularity is unstated (the best legal value),
    where it used to be read as no recomputation."""
    assert recompute_of(text) == granularity
