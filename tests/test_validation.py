"""The formulation against the published runs (../shared/data/published_runs*.json, read from
the identical copy shipped in the package, published/, so that a clean clone or an installed
wheel without ../shared runs them too).

The generalisation numbers (fit on all sources but one, predict the one left out) take ~10
minutes and live in benchmarks/cross_validate.py and its committed result; here: every row is
read, the shipped parameters predict the rows in sample, the memory estimate is an upper
bound of the published memory points, and the fitter recovers known parameters.
"""

import hashlib
import json
from collections import Counter
import re
from pathlib import Path

import numpy as np
import pytest

from solveplan.calibration.moe_rows import is_moe_file_row

import solveplan.catalog_published
from solveplan.calibration.crossval import in_sample, memory_points, ranking, summary
from solveplan.calibration.rows import DATA_FILES, era_of, find_data, gpu_of, load_rows, nic_gbit_per_gpu, published_rows
from solveplan.errors import InputError
from conftest import run_subprocess
from solveplan.calibration.runs_fit import FitParam, fit, predictions, row_cases

DATA_DIR = Path(solveplan.catalog_published.__file__).parent  # the shipped copy (published/)
DATA = [str(DATA_DIR / name) for name in DATA_FILES]
ROWS = published_rows(DATA)
# the dense files' rows: the fit and its guards below (the MoE file's rows: tests/test_moe_rows.py and
# benchmarks/moe_validation.py)
DENSE = [r for r in ROWS if not is_moe_file_row(r.raw)]  # the MoE rows: tests/test_moe_rows.py
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"  # ../shared/data beside the checkout
SHIPPED = ("published_runs.json", "published_runs_more.json", "published_runs_moe_newgpu.json", "h200_kernels.json")


def test_the_shipped_copy_is_the_shared_data():
    if not SHARED.is_dir():
        pytest.skip("../shared/data is not beside this checkout")
    for name in SHIPPED:
        assert (DATA_DIR / name).read_bytes() == (SHARED / name).read_bytes(), name
    readme = (DATA_DIR / "README.md").read_text()
    for name in SHIPPED:  # provenance and checksum of every shipped file
        assert hashlib.sha256((DATA_DIR / name).read_bytes()).hexdigest() in readme, name


def test_default_data_is_the_shipped_copy_and_a_folder_is_accepted(tmp_path):
    assert find_data() == [DATA_DIR / name for name in DATA_FILES]
    for name in DATA_FILES:
        (tmp_path / name).write_bytes((DATA_DIR / name).read_bytes())
    assert find_data([str(tmp_path)]) == [tmp_path / name for name in DATA_FILES]
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no file of runs"):
        find_data([str(tmp_path / "empty")])


def test_a_folder_of_runs_named_otherwise_is_read(tmp_path):
    """A folder's other JSON files of runs are read after DATA_FILES (a kept-aside file need not take their
    names); a JSON file of something else (the H200 kernels) is not a file of runs."""
    (tmp_path / "published_runs.json").write_bytes((DATA_DIR / "published_runs.json").read_bytes())
    raw = json.loads((DATA_DIR / "published_runs_more.json").read_text())
    (tmp_path / "my_runs.json").write_text(json.dumps(raw))
    (tmp_path / "h200_kernels.json").write_bytes((DATA_DIR / "h200_kernels.json").read_bytes())
    (tmp_path / "broken.json").write_text("{not json")
    assert find_data([str(tmp_path)]) == [tmp_path / "published_runs.json", tmp_path / "my_runs.json"]
    ids = {r.id for r in published_rows([str(tmp_path)])}
    assert {m["id"] for m in raw["measurements"]} <= ids


def test_validate_runs_from_an_installed_copy_without_shared(tmp_path):
    """`solveplan validate` from a folder with no ../shared beside it, the package imported from
    the checkout as an installed wheel would be: it reads the shipped copy."""
    res = run_subprocess("validate", "--json", cwd=tmp_path)
    assert res.code == 0, res.err
    d = json.loads(res.out)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    rows, mape = re.search(r"\| \*\*all\*\* \| (\d+) \| \*\*([\d.]+)%\*\*", readme).groups()
    # README's first table is the dense rows, Blackwell's included (the MoE rows: its second
    # table, from benchmarks/results/moe_validation.json)
    moe_ids = {r.id for r in ROWS if is_moe_file_row(r.raw)}
    dense = [r for r in d["rows"] if r["id"] not in moe_ids]
    assert len(dense) == int(rows) and all(s["reason"] for s in d["skipped"])  # a skipped row says why
    assert round(100 * float(np.mean([abs(r["error"]) for r in dense])), 1) == float(mape)


@pytest.fixture(scope="module")
def shipped():
    return in_sample(row_cases(DENSE))


def test_every_row_is_read_and_only_the_rows_without_a_batch_are_skipped():
    assert len(ROWS) == 392
    skipped = [r for r in ROWS if r.skipped]
    dense_old = [r for r in skipped if r.source in ("korthikanti2022", "narayanan2021", "megatron_2020_readme",
                                                     "megatron_core_h100_2024", "dgxc_v24111", "mosaic_llmfoundry")]
    assert {r.id for r in dense_old} == {"korthikanti2022-abstract-530B-2240-sel+sp",
                                         "korthikanti2022-abstract-530B-2240-full"}
    assert all("global batch not stated" in r.skipped for r in dense_old)
    # the new-GPU file: its MoE rows (category A, and a "dense" row that runs with EP) go to
    # calibration.moe_rows, the dense rows are read here or skipped with their reason
    moe = [r for r in ROWS if r.raw.get("category") == "A" or (r.raw.get("parallel", {}).get("ep") or 1) > 1]
    assert len(moe) == 106 and all(r.skipped is None or "mixture-of-experts: read by" not in r.skipped for r in moe)
    dense_new = [r for r in skipped if "category" in r.raw and r not in moe]
    assert not dense_new, [(r.id, r.skipped) for r in dense_new]  # fine-tuning (SFT, LoRA) and Grace-offload rows read
    tasks = Counter((r.raw["task"], r.job.peft) for r in ROWS if not r.skipped and r.raw.get("task") not in (None, "pretrain"))
    assert tasks == {("sft", "none"): 4, ("lora", "lora"): 4}, tasks
    blackwell = [r for r in ROWS if not r.skipped and r.gpu in ("b200", "gb200", "b300", "gb300") and r not in moe]
    assert len(blackwell) == 63 and {r.job.precision for r in blackwell} == {"fp8", "fp8-tensorwise", "mxfp8", "nvfp4"}
    assert sum(r.job.precision == "nvfp4" for r in blackwell) == 8
    # vp 12 (one layer per virtual stage), FP8, CP with TP and GQA, FSDP: all evaluated
    ids = {r.id for r in ROWS if not r.skipped}
    assert "dgxc-v24.11.1-nemotron4-340b-fp8-128" in ids and "dgxc-v24.11.1-llama3.1-405b-bf16-576" in ids


def test_in_sample_errors_with_the_shipped_parameters(shipped):
    lines = {ln["group"]: ln for ln in summary(shipped, "source")}
    assert lines["all"]["rows"] == 284  # the 8 dense NVFP4 rows, the 4 CPU-offloading Megatron-FSDP rows and the 8
    # fine-tuning rows (SFT, LoRA) included
    assert lines["all"]["mape"] <= 0.07, lines["all"]
    for group, ln in lines.items():
        assert ln["mape"] <= 0.20, (group, ln)
    # the sources a user plans with today, within 10% on average
    for group in ("dgxc_v24111", "mosaic_llmfoundry", "megatron_2020_readme", "korthikanti2022"):
        assert lines[group]["mape"] <= 0.10, (group, lines[group])


def test_ranking_inside_measured_sweeps_is_right_where_the_formulation_is(shipped):
    rank = ranking(shipped)
    assert len(rank["groups"]) >= 8
    # a sweep ranks configurations of one job on one release and precision recipe (`sweeps.sweep_key`)
    by_id = {p.row.id: p for p in shipped}
    for g in rank["groups"]:
        assert by_id[g["picked"]].row.job.precision == by_id[g["best"]].row.job.precision == g["precision"]
    # the only wrong picks are DeepSpeed's ZeRO-3 of 2021 against PTD-P (a sharding implementation the
    # formulation does not model: README, "Known limits"); every other sweep's pick is within 3%
    wrong = [g for g in rank["groups"] if g["regret"] > 0.03]
    assert all("zero3" in g["picked"] for g in wrong), wrong
    assert len(wrong) < len(rank["groups"])


def test_memory_estimate_is_an_upper_bound_of_the_published_points():
    _, mem = load_rows(DATA)
    points = memory_points(mem, ROWS)
    assert len(points) == 8
    for p in points:
        assert 0.0 <= p["total_error"] <= 0.10, p


@pytest.mark.parametrize("text, per_node, want", [
    ("8x 200 Gb/s HDR InfiniBand per node", 8, 200.0),
    ("1600 Gb/s node-node RoCE", 8, 200.0),
    ("50 Gb/s per GPU", 8, 50.0),
    ("4x 100 Gb/s Omni-Path per node", 8, 50.0),
    ("400 Gb/s NDR InfiniBand", 8, 400.0),
    ("3.2 Tb/s", 8, 400.0),  # more than any NIC carries (800 Gb/s): the node's, as EFA's "3200 Gbps"
    ("not stated (DGX Cloud)", 8, None),
    (None, 8, None),
])
def test_fabric_text(text, per_node, want):
    assert nic_gbit_per_gpu(text, per_node) == want


def test_gpu_names_and_software_eras():
    assert gpu_of("A100-SXM4-40GB") == ("a100-40gb", "a100-40gb")
    assert gpu_of("NVIDIA A100 80GB") == ("a100-80gb", "a100")
    assert gpu_of("H100 SXM5 80GB HBM3") == ("h100-sxm", "h100")
    assert gpu_of("TPU v4") is None
    assert [gpu_of(g)[0] for g in ("GB200", "B200", "GB300", "B300")] == ["gb200", "b200", "gb300", "b300"]
    # every catalog GPU a published row may name: the export-market H800 / A800 (DeepSeek-V3's H800 cluster) and
    # AMD's MI325X / MI355X price on their own entries, not refused and not an H100 / A100
    assert [gpu_of(g) for g in ("NVIDIA H800 SXM5", "A800 80GB", "MI325X", "AMD Instinct MI355X", "NVIDIA H20 96GB")] == [
        ("h800", "h800"), ("a800-80gb", "a800"), ("mi325x", "mi325x"), ("mi355x", "mi355x"), ("h20", "h20")]
    assert gpu_of("H200") == ("h200", "h200") and gpu_of("H20") == ("h20", "h20")  # not one for the other
    # GH200's 96 GB HBM3 GPU is its own entry (its 4 TB/s, its Grace host), not an H200; the 144 GB HBM3e one is not held
    assert [gpu_of(g) for g in ("GH200", "NVIDIA GH200 480GB", "GH200 144GB HBM3e")] == [
        ("gh200", "gh200"), ("gh200", "gh200"), None]
    # a PCIe or NVL board is not the SXM module (fewer SMs, other memory, no NVSwitch): priced on its own entry,
    # and one the catalog does not hold (A100 40GB PCIe, a PCIe A100 of unstated memory) skipped, not mis-priced
    assert [gpu_of(g) for g in ("H100 PCIe 80GB", "NVIDIA H100 NVL", "A100 80GB PCIe", "A100-PCIE-80GB")] == [
        ("h100-pcie", "h100-pcie"), ("h100-nvl", "h100-nvl"), ("a100-pcie-80gb", "a100-pcie"),
        ("a100-pcie-80gb", "a100-pcie")]
    assert gpu_of("H100-NVL-94GB") == ("h100-nvl", "h100-nvl")
    assert [gpu_of(g) for g in ("A100-PCIE-40GB", "A100 PCIe")] == [None, None]
    assert gpu_of("GB200 NVL72") == ("gb200", "gb200")  # the rack is not the H100 NVL board
    from solveplan.calibration.rows import precision_of
    assert [precision_of(t) for t in ("fp8-cs", "mxfp8 (32x32 granularity per note)", "fp8-blockwise (128x128 w)",
                                      "fp8 (quantization recipe not stated)", "bf16")] == \
        ["fp8-tensorwise", "mxfp8", "fp8-blockwise", "fp8", "bf16"]
    assert era_of("x", "Megatron-DeepSpeed, 2022")["flash"] is False
    assert era_of("x", "Megatron-DeepSpeed, 2022")["overlap_grad_reduce"] is False
    assert era_of("x", "Megatron-DeepSpeed, 2022")["sequence_parallel"] == (False,)
    assert era_of("x", "NeMo 2.0 performance, 2025") == {}


def test_fit_recovers_known_parameters():
    """Rows whose 'measured' times are the formulation's own predictions under known values:
    the fit finds those values again (priors far off, so the data must move them)."""
    fresh = [r for r in published_rows(DATA) if r.source == "mosaic_llmfoundry" and r.gpu == "a100-40gb"][:20]
    cases = row_cases(fresh)
    truth = {"m": 0.66, "fa": 0.42}
    params = (FitParam("m", ("a100",), "matmul_efficiency", 0.8, 0.5, 0.3, 1.0, "test"),
              FitParam("fa", ("a100",), "flash1_attention_efficiency", 0.6, 0.5, 0.1, 1.0, "test"))  # their kernel
    meas = predictions(cases, truth, params)
    for c, t in zip(cases, meas):
        c.row.measured_s = float(t)
    out = fit(cases, params)
    assert out.values["m"] == pytest.approx(truth["m"], rel=0.03)
    assert out.values["fa"] == pytest.approx(truth["fa"], rel=0.05)
    assert np.isfinite(out.sd["m"]) and out.rms < 0.01


def test_rows_of_an_unseen_file(tmp_path):
    """A file of the same schema from elsewhere: GPU names and fabrics in its own words, a time
    given as tokens/s only, and a row too incomplete to read -- kept, skipped with the reason."""
    import json

    data = {"sources": {"x": {"title": "Megatron-DeepSpeed on Omni-Path, 2022"}}, "measurements": [
        {"id": "ds", "source": "x", "precision": "bf16",
         "model": {"name": "GPT 13B", "layers": 40, "hidden": 5120, "heads": 40, "vocab": 50257, "seq_len": 2048},
         "hardware": {"gpu": "A100 80GB SXM", "gpus_per_node": 8, "inter_node": "4x 100 Gb/s Omni-Path per node"},
         "parallel": {"num_gpus": 64, "tp": 2, "pp": 4, "mbs": 1, "gbs": 512, "recompute": "full"},
         "measured": {"tokens_per_s_total": 70000}},
        {"id": "broken", "source": "x", "model": {"layers": 2}, "hardware": {"gpu": "H100"},
         "parallel": {"num_gpus": 8, "gbs": 8}, "measured": {}},
    ]}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(data))
    ds, broken = published_rows([str(path)])
    assert ds.skipped is None and ds.basis == "tokens/s" and ds.measured_s == pytest.approx(512 * 2048 / 70000)
    assert ds.job.cluster.nic_gbit_per_s == 50 and ds.job.flash_attention is False
    assert ds.job.overlap_grad_reduce is False and ds.job.constraints.zero == (1,)
    assert broken.skipped.startswith("model None: the row states no seq_len")  # a reason, not a traceback
    preds = in_sample(row_cases([ds]))
    assert len(preds) == 1 and preds[0].predicted_s > 0


def test_validate_command_reports_the_in_sample_errors(cli):
    res = cli("validate", "--data", DATA[0], "--data", DATA[1], "--json")
    assert res.code == 0, res.err
    import json

    out = json.loads(res.out)
    assert len(out["rows"]) == 221 and len(out["skipped"]) == 2
    overall = [ln for ln in out["summary"]["source"] if ln["group"] == "all"][0]
    assert overall["mape"] <= 0.07


def test_validate_command_names_a_missing_data_file(cli, tmp_path):
    res = cli("validate", "--data", str(tmp_path / "nope.json"))
    assert res.code == 2 and "--data" in res.err and len(res.err.strip().splitlines()) == 1, res.err


def test_cross_validation_refits_only_the_parameters_a_fold_depends_on():
    from solveplan.calibration.crossval import coupled_params

    params, chips = coupled_params({"b200"})
    assert chips == {"b200"} and {p.key.split(".")[0] for p in params} == {"b200"}
    params, chips = coupled_params({"a100"})  # FSDP hooks shared with H100; V100 borrows A100's overhead
    assert chips == {"a100", "h100", "v100"} and "sharded_layer_overhead_us" in {p.key for p in params}


def test_rows_of_the_new_gpu_file_read_what_they_state():
    by_id = {r.id: r for r in ROWS}
    r = by_id["mbridge_perf-26.06-llama3.1-405b-gb300-fp8-cs-256"]
    assert r.job.precision == "fp8-tensorwise" and r.job.cluster.gpu.name == "gb300"
    assert r.job.cluster.gpus_per_node == 4 and r.job.cluster.domain_gpus == 64  # 256 GPUs: 64 per NVL72 rack
    assert r.job.constraints.zero is None  # "no (DDP)" is not FSDP: the optimizer sharding is left free
    assert r.job.constraints.sequence_parallel is None or r.job.constraints.sequence_parallel == (True,)
    assert r.job.grad_reduce_dtype == "bf16"  # Megatron-Bridge's performance scripts (cited in rows.py)
    fsdp = by_id["nemo_docs_2504-llama3-70b-gb200-fp8-cs-64"]
    assert fsdp.job.constraints.zero == (3,) and fsdp.job.attention_kernel == "cudnn"  # Megatron-FSDP, not PyTorch's
    offload = by_id["mbridge_perf-26.04.01-llama3-70b-gb200-fp8-cs-64"]  # the recipe's cpu_offloading_num_layers
    assert offload.skipped is None and offload.job.cpu_offloading_num_layers == 40
    fp4 = by_id["mbridge_perf-26.06-llama3.1-405b-gb300-nvfp4-256"]
    assert fp4.skipped is None and fp4.job.precision == "nvfp4" and fp4.job.fp8_param_gather


def test_dgx_cloud_rows_keep_bf16_gradients_as_their_yaml_says():
    """NVIDIA/dgxc-benchmarking@v24.11.1's yamls set optim.grad_sync_dtype: bf16 (Apex distributed_fused_adam):
    the row's gradient buffer is 2 bytes per parameter, and its assumptions say where that comes from."""
    dgxc = [r for r in ROWS if r.source == "dgxc_v24111" and not r.skipped]
    assert dgxc and all(r.job.grad_reduce_dtype == "bf16" for r in dgxc)
    assert all(any("optim.grad_sync_dtype bf16" in a for a in r.assumed) for r in dgxc)
    others = [r for r in ROWS if r.source in ("korthikanti2022", "megatron_core_h100_2024") and not r.skipped]
    assert others and all(r.job.grad_reduce_dtype == "fp32" for r in others)  # no such statement: fp32
    # runs that ran on 80 GB H100s come out fitting: Llama 3.1 8B FP8 on 8 GPUs was 97 GiB with fp32 gradients
    # and FP8 copies of the embedding and head (benchmarks/results/memory_fit.md)
    by_id = {c.row.id: c for c in row_cases(dgxc)}
    for rid in ("dgxc-v24.11.1-llama3.1-8b-fp8-8", "dgxc-v24.11.1-llama3.1-405b-fp8-576"):
        assert by_id[rid].predict()[2], rid


def test_the_nemotron4_340b_yaml_keeps_adam_state_in_bf16_and_its_128_gpu_runs_fit():
    """Of DGX Cloud's yamls only nemotron4-340b-synth.yaml sets optim.dtype bf16: NeMo's distributed Adam keeps bf16
    moments and no fp32 master, priced as Megatron's precision-aware optimizer with bf16 moments. Its runs on 128
    H100s (dp 2: the state is sharded over two ranks only) were predicted 12% and 16% over 80 GB although they ran."""
    dgxc = [r for r in ROWS if r.source == "dgxc_v24111" and not r.skipped]
    big = [r for r in dgxc if "nemotron4-340b" in r.id]
    assert big and all(r.job.precision_aware_optimizer and r.job.optimizer_moment_dtype == "bf16" for r in big)
    assert all(any("optim.dtype bf16" in a for a in r.assumed) for r in big)
    assert not any(r.job.precision_aware_optimizer for r in dgxc if r not in big)  # the other yamls: fp32 state
    by_id = {c.row.id: c for c in row_cases(big)}
    for rid in ("dgxc-v24.11.1-nemotron4-340b-bf16-128", "dgxc-v24.11.1-nemotron4-340b-fp8-128"):
        assert by_id[rid].predict()[2], rid


def test_gb200_rows_of_another_source_in_their_own_words(tmp_path):
    """A held-out file: an NVL72 rack written as a 72-GPU node, the recipe in words, the fabric per tray."""
    import json

    row = {"id": "x", "source": "other", "precision": "FP8 (MXFP8 recipe)", "task": "pretrain",
           "model": {"name": "Llama 3 70B", "key": "llama3-70b", "layers": 80, "hidden": 8192, "heads": 64,
                     "kv_heads": 8, "ffn_hidden": 28672, "vocab": None, "seq_len": 8192, "arch": "dense, GQA, SwiGLU"},
           "hardware": {"gpu": "NVIDIA GB200 NVL72", "gpus_per_node": 72,
                        "inter_node": "4x ConnectX-7 400 Gb/s per compute tray"},
           "parallel": {"num_gpus": 144, "tp": 2, "pp": 4, "cp": 1, "mbs": 1, "gbs": 144},
           "measured": {"tokens_per_s_per_gpu": 3000}}
    path = tmp_path / "gb200.json"
    path.write_text(json.dumps({"sources": {}, "measurements": [row, {**row, "id": "y", "precision": "NVFP4"},
                                                                {**row, "id": "z", "precision": "MXFP4"}]}))
    r, fp4, mx4 = published_rows([str(path)])
    assert r.skipped is None and mx4.skipped.startswith("mxfp4")
    assert fp4.skipped is None and fp4.job.precision == "nvfp4" and not fp4.job.fp8_param_gather  # source unknown
    cl = r.job.cluster
    assert r.job.precision == "mxfp8" and cl.gpu.name == "gb200" and cl.gpus_per_node == 4 and cl.domain_gpus == 72
    assert in_sample(row_cases([r]))[0].predicted_s > 0


def test_a_dense_row_of_another_file_without_a_key_is_read_from_its_name_or_skipped_saying_why():
    """A kept-aside file whose rows carry no catalog key: a row that states no vocabulary takes the catalog entry
    its name spells (the same job as with the key), and one whose name spells none is skipped naming the missing
    field -- never a traceback."""
    import copy

    from solveplan.calibration.rows import row_job

    raw = next(r.raw for r in ROWS if r.id == "mbridge_perf-26.06-llama3-70b-gb300-fp8-cs-8-lora")
    other = copy.deepcopy(raw)
    other["model"].pop("key")
    row = row_job(other)
    assert row.skipped is None and row.job == row_job(raw).job
    assert any("'Llama 3 70B' read as the catalog's llama3-70b" in a for a in row.assumed)
    other["model"]["name"] = "Some Model 70B"
    row = row_job(other)
    assert row.skipped and "names no catalog entry and the row states no vocab as an integer" in row.skipped


def _narayanan_76b(tmp_path, name: str, **parallel) -> str:
    """A released dense row (GPT 76.1B on 1,024 A100s, tp 8 pp 4) with its parallel knobs changed, as a file."""
    raw = json.loads(json.dumps(next(r for r in load_rows([DATA[0]])[0] if r["model"].get("name") == "GPT 76.1B")))
    raw["id"] = name
    raw["parallel"].update(parallel)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"measurements": [raw]}))
    return str(path)


def test_a_dense_row_whose_one_stated_knob_breaks_megatrons_rules_is_read_with_it_free(tmp_path):
    """A micro-batch of 5 cannot divide the 56 sequences per data-parallel rank: the run ran, so the source
    misstates it; the row is read with the micro-batch at its best legal value, and says why."""
    row = published_rows([_narayanan_76b(tmp_path, "mbs5", mbs=5)])[0]
    assert row.skipped is None and row.job.constraints.micro_batch_size is None
    assert row.job.constraints.tp == (8,) and row.job.constraints.pp == (4,)
    assert any(a.startswith("micro_batch_size as stated breaks Megatron's rules (5 does not divide") for a in row.assumed)


def test_a_row_no_single_knob_explains_is_skipped_naming_the_rule_and_validate_still_answers(tmp_path, cli):
    """tp 3 with pp 4 on 1,024 GPUs breaks a rule of their product (no single knob to blame): skipped with the
    rule in one line; `validate` on a file of such rows answers (no traceback, nothing predicted)."""
    path = _narayanan_76b(tmp_path, "tp3", tp=3)
    row = published_rows([path])[0]
    assert row.job is None and row.skipped.startswith("no legal configuration") and "tp*cp*pp = 3*1*4" in row.skipped
    res = cli("validate", "--data", path, "--json")
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["rows"] == [] and out["skipped"][0]["id"] == "tp3" and out["summary"]["source"] == []


def test_a_row_on_a_pcie_board_is_priced_on_its_own_entry_slower_than_the_sxm_module(tmp_path):
    """A run on H100 PCIe cards is priced (not skipped) on the PCIe card's peaks and its server's PCIe tier, which
    makes the same job slower than on SXM modules behind NVSwitch; an A100 40GB PCIe card (no entry) is skipped
    with the reason."""
    import json

    row = {"id": "pcie", "source": "x", "precision": "bf16",
           "model": {"name": "GPT 13B", "layers": 40, "hidden": 5120, "heads": 40, "vocab": 50257, "seq_len": 2048},
           "hardware": {"gpu": "H100 PCIe 80GB"},
           "parallel": {"num_gpus": 16, "tp": 4, "pp": 1, "mbs": 1, "gbs": 256, "recompute": "none"},
           "measured": {"iteration_time_s": 10.0}}
    data = {"sources": {}, "measurements": [row, {**row, "id": "sxm", "hardware": {"gpu": "H100 SXM5 80GB"}},
                                            {**row, "id": "a100-40-pcie", "hardware": {"gpu": "A100-PCIE-40GB"}}]}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps(data))
    pcie, sxm, a100 = published_rows([str(path)])
    assert pcie.skipped is None and pcie.gpu == "h100-pcie" and pcie.job.cluster.gpu.num_sms == 114
    assert pcie.job.cluster.nvlink_gbyte_per_s < sxm.job.cluster.nvlink_gbyte_per_s
    assert a100.skipped and "A100-PCIE-40GB" in a100.skipped
    t_pcie, t_sxm = (p.predicted_s for p in in_sample(row_cases([pcie, sxm])))
    assert t_pcie > t_sxm * 989 / 756 * 0.99  # at least the peaks' ratio: the slower intra-node tier adds to it


def test_a_dense_row_whose_recipe_block_is_not_an_object_is_read_and_says_so(tmp_path):
    """A file of another source may write `parallel.other.recipe` as text: the dense reader (CPU offloading, FP8
    weights and attention) reads it as no recipe and says so, instead of tracing back."""
    import json

    row = {"id": "d", "source": "x", "precision": "bf16",
           "model": {"name": "GPT 13B", "layers": 40, "hidden": 5120, "heads": 40, "vocab": 50257, "seq_len": 2048},
           "hardware": {"gpu": "H100 SXM5 80GB"},
           "parallel": {"num_gpus": 16, "tp": 4, "pp": 1, "mbs": 1, "gbs": 256, "other": {"recipe": "see the file"}},
           "measured": {"iteration_time_s": 10.0}}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"sources": {}, "measurements": [row]}))
    (read,) = published_rows([str(path)])
    assert read.skipped is None and any("recipe block str, not an object" in a for a in read.assumed)
