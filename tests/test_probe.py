"""The GPU probe and the kernel fit: the fit recovers efficiencies the formulation itself
generated, reads the real H200 measurements, and `solveplan probe` runs on a CPU (tiny shapes)
and writes a GPU file that a cluster file can name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from solveplan.calibration.kernel_fit import attention_fwd_bwd_s, fit_kernels, fit_masked_attention, ratios_at
from solveplan.calibration.probe import catalog_gpu_of_device, layer_gemm_shapes
from solveplan.catalog import load_cluster, load_gpu, load_model
from solveplan.formulation.kernels import gemm_s

H200_KERNELS = Path(__file__).resolve().parents[1] / "published" / "h200_kernels.json"


def _synthetic(gpu, matmul: float, cudnn: float, flash: float) -> dict:
    """Kernels timed by the formulation's own model at known efficiencies."""
    shapes = [r for tp in (1, 2, 8) for r in layer_gemm_shapes(load_model("llama3.1-70b"), tp, 4096)]
    gemms = [{**r, "s": float(gemm_s(r["m"], r["n"], r["k"], flop_per_s=gpu.peak_flop_per_s, efficiency=matmul,
                                     num_sms=gpu.num_sms, hbm_bytes_per_s=gpu.hbm_bytes_per_s))} for r in shapes]
    attention = []
    for backend, value in (("cudnn", cudnn), ("flash", flash)):
        for b, heads, seq in ((1, 32, 4096), (2, 8, 16384), (1, 64, 2048)):
            row = dict(backend=backend, b=b, heads=heads, seq=seq, head_dim=128)
            overlap = gpu.exp_overlaps_matmul and backend == "cudnn"
            attention.append({**row, "fwd_bwd_s": attention_fwd_bwd_s(row, gpu, value, overlap)})
    return {"gemm_bf16": gemms, "attention": attention}


def test_kernel_fit_recovers_the_efficiencies_the_model_generated():
    gpu = load_gpu("h100-sxm")
    fits = {f.field: f for f in fit_kernels(_synthetic(gpu, 0.71, 0.45, 0.27), gpu)}
    assert fits["matmul_efficiency"].value == pytest.approx(0.71, rel=1e-6)
    assert fits["attention_efficiency"].value == pytest.approx(0.45, rel=1e-6)
    assert fits["flash2_attention_efficiency"].value == pytest.approx(0.27, rel=1e-6)
    assert all(f.mape < 1e-6 for f in fits.values())


def test_layer_gemm_shapes_are_the_formulations_linears():
    model = load_model("llama3.1-8b")
    rows = layer_gemm_shapes(model, 2, 4096)
    fwd = {r["gemm"]: (r["m"], r["n"], r["k"]) for r in rows if r["pass_"] == "fwd"}
    assert fwd["qkv"] == (4096, (4096 + 2 * 1024) // 2, 4096)
    assert fwd["fc1"] == (4096, 14336, 4096)  # gated: 2 x 14336 / tp 2
    wgrad = {r["gemm"]: (r["m"], r["n"], r["k"]) for r in rows if r["pass_"] == "wgrad"}
    assert wgrad["fc2"] == (14336 // 2, 4096, 4096)


def test_h200_measurements_fit_the_gemm_model_within_ten_percent():
    """The GEMM model (waves, short K) follows the 288 bf16 GEMMs measured on an H200 to within
    10% MAPE at its fitted efficiency, and that efficiency is physical (0.5-0.9 of peak)."""
    data = json.loads(H200_KERNELS.read_text())
    gpu = load_gpu("h200")
    fits = {f.field: f for f in fit_kernels(data, gpu)}
    gemm = fits["matmul_efficiency"]
    assert gemm.count == len(data["gemm_bf16"]) and 0.5 < gemm.value < 0.9 and gemm.mape < 0.10
    assert len(ratios_at(data, gpu, "flash2_attention_efficiency", 0.2)) == 10


def test_fp8_gemm_ratios_on_a_gpu_without_an_fp8_peak_are_refused_by_name():
    """An A100 has no FP8 peak, so no FP8 GEMM identifies fp8_matmul_efficiency there: asking
    for the ratios says so (it multiplied the missing peak, None, and raised a TypeError)."""
    gpu = load_gpu("a100-80gb")
    assert gpu.peak_fp8_tflops is None
    data = {"gemm_fp8": [{"m": 8192, "n": 8192, "k": 8192, "s": 2e-3}]}
    with pytest.raises(ValueError, match="a100-80gb has no FP8 peak"):
        ratios_at(data, gpu, "fp8_matmul_efficiency", 0.7)
    with pytest.raises(ValueError, match="no FP8 peak"):
        ratios_at({}, gpu, "fp8_matmul_efficiency", 0.7)
    assert len(ratios_at(data, load_gpu("h100-sxm"), "fp8_matmul_efficiency", 0.7)) == 1


def test_probe_on_cpu_writes_a_gpu_file_a_cluster_can_name(tmp_path, cli):
    pytest.importorskip("torch")
    out = tmp_path / "my-gpu.yaml"
    res = cli("probe", "-o", str(out), "--device", "cpu", "--tiny", "--base-gpu", "h100-sxm", "--min-time", "0.001")
    assert res.code == 0, res.err
    kernels = json.loads((tmp_path / "my-gpu.kernels.json").read_text())
    assert len(kernels["gemm_bf16"]) == 2 * 12 and kernels["hbm"] and kernels["env"]["device"] == "cpu"
    assert all(r["s"] > 0 for r in kernels["gemm_bf16"])
    spec = yaml.safe_load(out.read_text())
    assert spec["peak_bf16_tflops"] == load_gpu("h100-sxm").peak_bf16_tflops  # the datasheet is kept
    assert spec["matmul_efficiency"] != load_gpu("h100-sxm").matmul_efficiency  # the fit replaced it
    masked = [r for r in kernels["attention"] if r.get("masked")]
    assert {r["head_dim"] for r in masked} == {16, 32} and all(r["fwd_bwd_s"] > 0 for r in masked)
    assert set(spec["masked_attention_efficiency_by_head_dim"]) == {16, 32}
    assert "masked_attention_efficiency_by_head_dim[32]" in spec["fit_notes"]
    cluster_file = tmp_path / "cluster.yaml"
    cluster_file.write_text(yaml.safe_dump({"name": "mine", "gpu": str(out), "num_nodes": 2, "gpus_per_node": 8,
                                            "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400}))
    cluster = load_cluster(str(cluster_file))
    assert cluster.gpu.name == "my-gpu" and np.isclose(cluster.gpu.matmul_efficiency, spec["matmul_efficiency"])
    assert cluster.gpu.masked_attention_rate(32) == spec["masked_attention_efficiency_by_head_dim"][32]


def test_a_gpu_file_written_from_the_h200_keeps_its_masked_rates_as_a_mapping(tmp_path):
    """probed_gpu on a base that states masked rates, from kernels without masked rows: the base's
    mapping is written as YAML reads it back (a GPU file, not Python tuples)."""
    from solveplan.calibration.probe import probed_gpu

    gpu = load_gpu("h200")
    data = probed_gpu(gpu, _synthetic(gpu, 0.7, 0.45, 0.27), "mine")
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    back = yaml.safe_load(path.read_text())
    assert back["masked_attention_efficiency_by_head_dim"] == dict(gpu.masked_attention_efficiency_by_head_dim)
    assert load_gpu(str(path)).masked_attention_rate(128) == gpu.masked_attention_rate(128)


def test_probe_without_a_gpu_says_so_in_one_line(tmp_path, cli):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible")
    res = cli("probe", "-o", str(tmp_path / "g.yaml"), "--device", "cuda")
    assert res.code == 2 and "--device cpu" in res.err and len(res.err.strip().splitlines()) == 1


def test_probe_without_torch_names_the_extra(tmp_path, cli, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    res = cli("probe", "-o", str(tmp_path / "g.yaml"), "--device", "cpu", "--tiny")
    assert res.code == 2 and "solveplan[probe]" in res.err and len(res.err.strip().splitlines()) == 1


SWEEP = Path(__file__).resolve().parents[1] / "benchmarks" / "measured" / "h200-2026-11-27" / "sdpa_masked_sweep.json"


def test_masked_kernel_rate_is_read_at_the_nearest_measured_head_dimension():
    gpu = load_gpu("h100-sxm").model_copy(update={"masked_attention_efficiency": 0.2,
                                                  "masked_attention_efficiency_by_head_dim": {64: 0.25, 128: 0.3}})
    assert gpu.masked_attention_rate(128) == 0.3
    assert gpu.masked_attention_rate(112) == 0.3 and gpu.masked_attention_rate(80) == 0.25
    assert gpu.masked_attention_rate(96) == 0.25  # a tie takes the smaller head dimension
    assert gpu.masked_attention_rate(512) == 0.3
    plain = gpu.model_copy(update={"masked_attention_efficiency_by_head_dim": None})
    assert plain.masked_attention_rate(128) == 0.2


def test_masked_fit_recovers_planted_rates_and_the_h200_catalog_is_the_sweeps_fit():
    gpu = load_gpu("h200")
    planted = {64: 0.24, 256: 0.21}
    rows = [{**row, "fwd_bwd_s": attention_fwd_bwd_s(row, gpu, planted[row["head_dim"]], gpu.exp_overlaps_matmul)}
            for row in (dict(heads=32, head_dim=d, seq=s, masked=True) for d in planted for s in (2048, 8192))]
    fits = fit_masked_attention(rows, gpu)
    assert {d: round(f.value, 6) for d, f in fits.items()} == planted and all(f.mape < 1e-6 for f in fits.values())
    measured = fit_masked_attention(json.loads(SWEEP.read_text())["rows"], gpu)
    assert {d: round(f.value, 4) for d, f in measured.items()} == dict(gpu.masked_attention_efficiency_by_head_dim)


def test_a_gpu_with_masked_rates_per_head_dimension_stays_hashable():
    """Specs are frozen and hashed (sweeps and caches key on them): the mapping is kept as sorted pairs."""
    gpu = load_gpu("h200")
    assert hash(gpu) == hash(load_gpu("h200"))
    assert dict(gpu.masked_attention_efficiency_by_head_dim)[128] == pytest.approx(0.3005)


# torch.cuda.get_device_name strings (nvidia-smi's names) and the catalog GPU each is; a board the catalog lacks is None
@pytest.mark.parametrize("device, gpu", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # the SXM module says no board: never the NVL card (same-length names)
    ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"), ("NVIDIA A100-PCIE-40GB", None),  # no 40 GB PCIe entry
    ("NVIDIA H200", "h200"), ("NVIDIA H200 NVL", None), ("NVIDIA H800 PCIe", None),
    ("Tesla V100-SXM2-32GB", "v100-32gb"), ("Tesla V100-SXM2-16GB", None), ("NVIDIA B300 SXM6 AC", "b300"),
    ("AMD Instinct MI300X", "mi300x"), ("NVIDIA L40S", None), ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA GH200 144G HBM3e", None)])
def test_a_device_name_is_its_own_board_and_memory(device, gpu):
    assert catalog_gpu_of_device(device) == gpu
