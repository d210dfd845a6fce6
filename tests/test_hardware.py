"""Issue #23: Blackwell / NVL72 / AMD hardware, NVLink domains larger than a node, precision
recipes, and plans that say what they assume."""

import json

import numpy as np
import pytest
import yaml

from solveplan.catalog import catalog_gpus, load_cluster, load_job, load_model
from solveplan.errors import InputError
from solveplan.formulation import comm
from solveplan.formulation.job import job_assumptions
from solveplan.formulation.memory import model_state_bytes_per_param
from solveplan.plan import ParallelConfig, make_plan, textbook_plan
from solveplan.render.megatron import megatron_args

FABRIC = dict(gpu="gb200", nvlink_gbyte_per_s=900, nic_gbit_per_s=400)


def _cluster(**kw):
    return load_cluster({**FABRIC, **kw})


# ------------------------------------------------------------------ NVLink domains
def test_groups_inside_a_72_gpu_domain_are_priced_on_nvlink_not_on_nics():
    rack = _cluster(gpus_per_node=4, num_nodes=36, nvlink_domain_gpus=72)
    trays = _cluster(gpus_per_node=4, num_nodes=36)  # the same trays without the NVLink switches
    one_node = _cluster(gpus_per_node=72, num_nodes=2)  # the old way of writing a rack
    for n, stride in ((8, 1), (16, 1), (4, 8), (72, 1)):
        bw, _, intra = comm.group_links(rack, n, stride)
        assert bool(intra) and float(bw) == pytest.approx(rack.nvlink_bytes_per_s)
        assert float(comm.collective_s("all_reduce", 1e9, rack, n, stride)) == pytest.approx(
            float(comm.collective_s("all_reduce", 1e9, one_node, n, stride)))
        _, _, intra_trays = comm.group_links(trays, n, stride)
        assert not bool(intra_trays)  # 4-GPU nodes on NICs: what the domain must not be priced as
        assert float(comm.collective_s("all_reduce", 1e9, trays, n, stride)) > \
            float(comm.collective_s("all_reduce", 1e9, rack, n, stride))
    # across domains: the NICs; a pipeline send inside the rack is NVLink, across racks a NIC
    bw, _, intra = comm.group_links(rack, 2, 72)
    assert not bool(intra) and float(bw) == pytest.approx(rack.nic_bytes_per_s)
    assert float(comm.p2p_link(rack, 8)[0]) == pytest.approx(rack.nvlink_bytes_per_s)
    assert float(comm.p2p_link(rack, 72)[0]) == pytest.approx(rack.nic_bytes_per_s)


@pytest.mark.parametrize("nodes,domain", [(36, 70), (36, 6), (20, 72)])
def test_a_domain_that_is_not_whole_nodes_or_does_not_divide_the_cluster_is_refused(nodes, domain):
    with pytest.raises(InputError, match="nvlink_domain_gpus"):
        _cluster(gpus_per_node=4, num_nodes=nodes, nvlink_domain_gpus=domain)


def test_evaluate_reads_nvlink_domain_gpus_from_a_cluster_file(cli, tmp_path):
    f = tmp_path / "nvl72.yaml"
    f.write_text(yaml.safe_dump({**FABRIC, "gpus_per_node": 4, "num_nodes": 36, "nvlink_domain_gpus": 72}))
    base = ["evaluate", "--model", "llama3.1-70b", "--cluster", str(f), "--tp", "8", "--pp", "2", "--global-batch-size", "144", "--json"]
    code, out, err = cli(*base)
    assert code == 0, err
    on_domain = json.loads(out)["breakdown"]
    f2 = tmp_path / "trays.yaml"
    f2.write_text(yaml.safe_dump({**FABRIC, "gpus_per_node": 4, "num_nodes": 36}))
    code, out, err = cli(*[str(f2) if a == str(f) else a for a in base])
    assert code == 0, err
    on_nics = json.loads(out)["breakdown"]
    tp_key = next(k for k in on_domain if k.startswith("tp"))
    assert on_domain[tp_key] < on_nics[tp_key]  # tp 8 over 2 trays: NVLink in the rack, NICs without it
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**FABRIC, "gpus_per_node": 4, "num_nodes": 36, "nvlink_domain_gpus": 50}))
    code, out, err = cli(*[str(bad) if a == str(f) else a for a in base])
    assert code == 2 and "nvlink_domain_gpus" in err and len(err.strip().splitlines()) == 1


def test_gb200_family_takes_whole_racks_or_part_of_one():
    assert load_cluster("gb200x576").domain_gpus == 72 and load_cluster("gb200x576").gpus_per_node == 4
    assert load_cluster("gb200x8").domain_gpus == 8
    assert load_cluster("gb300x144").domain_gpus == 72
    with pytest.raises(InputError, match="gb200x72 or gb200x144"):
        load_cluster("gb200x100")  # 5 racks of 20: less than half a rack each


def test_nvl72_family_spreads_a_power_of_two_evenly_over_racks():
    """256 GPUs on 72-GPU racks: 4 racks of 64 (16 of the 18 trays each), said in the cluster's
    source, as the published 256-GPU GB200 rows are read (`calibration.rows`: the same rule)."""
    for n, share in ((256, 64), (128, 64), (1024, 64), (576, 72), (40, 40)):
        cluster = load_cluster(f"gb200x{n}")
        assert (cluster.num_gpus, cluster.domain_gpus) == (n, share)
        assert (f"{share} per rack" in cluster.source) == (share not in (72, n))
    with pytest.raises(InputError, match="half a rack"):
        load_cluster("gb300x292")  # 292 = 73 x 4: only racks of 4 GPUs would split it
    assert load_cluster("gb200-superpod-576").num_gpus == 576


def test_textbook_tp_may_span_trays_inside_the_domain():
    from solveplan.space.rules import textbook_shapes

    shapes = textbook_shapes(load_job({"model": "llama3.1-405b", "cluster": "gb200x576"}))
    assert shapes.tp.max() == 8  # tp <= the 72-GPU domain (and divides the 8 KV heads), not <= the 4-GPU tray
    assert textbook_plan(load_job({"model": "llama3.1-8b", "cluster": "gb200x72"})) is not None


def test_405b_on_gb200x576_keeps_tp_and_cp_groups_inside_a_domain():
    from solveplan.optimize import optimize

    job = load_job({"model": "llama3.1-405b", "cluster": "gb200x576", "precision": "mxfp8"})
    res = optimize(job, time_limit_s=60)
    par = res.plan.parallel
    assert par.tp * par.cp > 1
    cl = job.cluster
    assert bool(comm.group_links(cl, par.tp, 1)[2]) and bool(comm.group_links(cl, par.cp, par.tp)[2])
    f = dict(megatron_args(job, res.plan).pairs())
    assert (f["--fp8-format"], f["--fp8-recipe"]) == ("e4m3", "mxfp8")


# ------------------------------------------------------------------ precision recipes
@pytest.mark.parametrize("precision,cluster", [("mxfp8", "h100x8"), ("mxfp8", "mi300xx8"), ("fp8", "a100x8"),
                                               ("fp8-blockwise", "v100x16"), ("fp8-blockwise", "mi300xx8")])
def test_a_recipe_the_gpu_cannot_run_is_bad_input(cli, precision, cluster):
    code, out, err = cli("optimize", "--model", "llama3.1-8b", "--cluster", cluster, "--precision", precision)
    assert code == 2 and precision in err and len(err.strip().splitlines()) == 1


RECIPE_FLAGS = {"fp8": ("hybrid", "delayed"), "fp8-tensorwise": ("hybrid", "tensorwise"),
                "fp8-blockwise": ("e4m3", "blockwise"), "mxfp8": ("e4m3", "mxfp8")}


def _plan(cluster, precision, **par):
    job = load_job({"model": "llama3.1-8b", "cluster": cluster, "precision": precision, "global_batch_size": 64})
    p = dict(tp=1, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="selective", sequence_parallel=False, zero=1)
    p.update(par)
    dp = job.cluster.num_gpus // (p["tp"] * p["pp"] * p["cp"])
    parallel = ParallelConfig(dp=dp, num_microbatches=64 // (dp * p["micro_batch_size"]), **p)
    return job, make_plan(job, parallel, [job.model.num_layers // p["pp"]] * p["pp"])


@pytest.mark.parametrize("precision", list(RECIPE_FLAGS))
def test_each_recipe_has_its_megatron_flags_rate_and_memory(precision):
    job, plan = _plan("gb200x8", precision)
    f = dict(megatron_args(job, plan).pairs())
    assert (f["--fp8-format"], f["--fp8-recipe"]) == RECIPE_FLAGS[precision]
    bf16_job, bf16 = _plan("gb200x8", "bf16")
    assert "--fp8-format" not in dict(megatron_args(bf16_job, bf16).pairs())
    assert plan.step_time_s < bf16.step_time_s  # FP8 GEMMs at twice the peak, casts included
    assert plan.stages[0].memory_bytes.params > bf16.stages[0].memory_bytes.params  # the FP8 weight copies


def test_recipes_differ_by_their_quantisation_traffic_and_scales():
    t = {p: _plan("gb200x8", p)[1].step_time_s for p in RECIPE_FLAGS}
    assert t["fp8-tensorwise"] > t["fp8"]  # current scaling reads every input once more for its amax
    w = {p: float(model_state_bytes_per_param(0, 1, p)[0]) for p in ("bf16", "fp8", "mxfp8")}
    assert w["bf16"] == 2 and w["fp8"] == 4 and w["mxfp8"] == pytest.approx(4 + 2 / 32)


# ------------------------------------------------------------------ assumptions and AMD
def test_a_gpu_without_fitted_rows_says_so_in_table_and_json(cli):
    borrowed = [n for n, g in catalog_gpus().items() if g.efficiencies_assumed_from]
    assert {"h200", "mi300x", "mi325x", "mi355x", "b300"} <= set(borrowed)
    code, out, err = cli("optimize", "--model", "llama3.1-8b", "--cluster", "mi300xx8", "--json")
    assert code == 0, err
    assert any("mi300x" in a and "calibrate" in a for a in json.loads(out)["assumptions"])
    code, out, err = cli("optimize", "--model", "llama3.1-8b", "--cluster", "mi300xx8")
    assert code == 0 and "ASSUMED: efficiencies of mi300x" in out
    code, out, err = cli("optimize", "--model", "llama3.1-8b", "--cluster", "h100x8", "--json")
    assert code == 0 and json.loads(out)["assumptions"] == []


def test_mi300x_plans_carry_no_cuda_only_variable():
    job, plan = _plan("mi300xx16", "fp8", tp=8, sequence_parallel=True)
    ma = megatron_args(job, plan)
    text = json.dumps({"args": ma.args, "env": ma.env, "notes": ma.notes})
    for word in ("CUDA_DEVICE_MAX_CONNECTIONS", "NVTE_", "cudnn", "cuDNN"):
        assert word not in text
    assert dict(ma.pairs())["--attention-backend"] == "auto"
    job, plan = _plan("h100x16", "fp8", tp=8, sequence_parallel=True)  # the control: CUDA keeps it
    assert megatron_args(job, plan).env == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def test_catalog_gpus_state_dense_peaks_and_sources():
    g = catalog_gpus()
    for name in ("b200", "b300", "gb200", "gb300", "h200", "mi300x", "mi325x", "mi355x"):
        assert g[name].architecture and g[name].peak_fp8_tflops and "datasheet" in g[name].source
    assert g["gb200"].peak_bf16_tflops == 2500 and g["b200"].peak_fp8_tflops == 4500
    assert g["gb300"].has_mx_formats and g["mi355x"].has_mx_formats and not g["h100-sxm"].has_mx_formats
    assert g["mi300x"].is_rocm and not g["gb200"].is_rocm
    assert np.isclose(g["mi325x"].peak_bf16_tflops, g["mi300x"].peak_bf16_tflops)


def test_pcie_boards_hold_their_datasheet_peaks_and_borrow_their_chips_fit():
    g = catalog_gpus()
    assert (g["h100-pcie"].peak_bf16_tflops, g["h100-pcie"].num_sms, g["h100-pcie"].hbm_gbyte_per_s) == (756, 114, 2000)
    assert (g["h100-nvl"].peak_fp8_tflops, g["h100-nvl"].num_sms) == (1671, 132)
    assert g["h100-nvl"].hbm_gib < 94  # 94 GB read as 10^9 bytes, not as GiB
    assert (g["a100-pcie-80gb"].peak_bf16_tflops, g["a100-pcie-80gb"].hbm_gbyte_per_s) == (312, 1935)
    for board, module in (("h100-pcie", "h100-sxm"), ("h100-nvl", "h100-sxm"), ("a100-pcie-80gb", "a100-80gb")):
        assert g[board].efficiencies_assumed_from == module
        for field in ("matmul_efficiency", "layer_overhead_us", "flash2_attention_efficiency", "fp8_matmul_efficiency"):
            assert getattr(g[board], field) == getattr(g[module], field), (board, field)
    for family, gpu in (("h100-pciex16", "h100-pcie"), ("h100-nvlx8", "h100-nvl"), ("a100-pciex8", "a100-pcie-80gb")):
        cluster = load_cluster(family)
        assert cluster.gpu.name == gpu and cluster.nvlink_gbyte_per_s <= 64  # the PCIe tier, not NVSwitch
