"""`solveplan calibrate`: logs and steps generated from known parameters fit back within 2%;
too few or contradictory points are refused with a one-line message; the written YAML is a
cluster that `evaluate` accepts.

The synthetic logs in tests/data/nccl/ come from `synthetic_logs()` below (the alpha-beta
model of formulation/comm.py with TRUE_LINKS on h100x16, plus a 1% deterministic ripple);
regenerate them with `python tests/test_calibrate.py`.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest
import yaml

from solveplan.errors import InputError
from solveplan.calibration.nccl_tests import format_nccl_log, synthetic_run

NCCL = Path(__file__).parent / "data" / "nccl"
CLUSTER = "h100x16"  # 2 nodes x 8 H100, NVLink 450 GB/s, NIC 400 Gbit/s per GPU
TRUE_LINKS = {"nvlink_latency_us": 2.2, "nvlink_efficiency": 0.74, "network_latency_us": 5.5, "network_efficiency": 0.78}
# The GPU the steps are generated on: the catalog H100 moved by the few-shot knobs a measured stack
# can move (calibration/fewshot.py): a stack 10% slower overall, launch overhead x0.6, fused attention x0.8
TRUE_FACTORS = {"time_scale": 0.9, "layer_overhead_us": 0.6, "attention_efficiency": 0.8}


def _true_gpu_fields() -> dict:
    from solveplan.calibration.fewshot import calibrated_fields
    from solveplan.catalog import load_cluster

    return calibrated_fields(load_cluster(CLUSTER), TRUE_FACTORS)[0]


TRUE_GPU_FIELDS = _true_gpu_fields()
TRUE_GPU = {k: TRUE_GPU_FIELDS[k] for k in ("matmul_efficiency", "layer_overhead_us", "attention_efficiency")}
NVLINK_BUS = 450 * TRUE_LINKS["nvlink_efficiency"]  # GB/s
NIC_GBS = 400 / 8


def alpha_beta_us(op, n, alpha_us, bus_gbs, sizes):
    ka, kb = {"all_reduce": (2 * (n - 1), 2 * (n - 1) / n), "all_gather": (n - 1, (n - 1) / n),
              "reduce_scatter": (n - 1, (n - 1) / n), "sendrecv": (1, 1)}[op]
    return [(ka * alpha_us + kb * s / (bus_gbs * 1e9) * 1e6) * (1 + 0.01 * math.sin(1.7 * i + 0.3))
            for i, s in enumerate(sizes)]


def synthetic_logs() -> dict[str, str]:
    nv, net = TRUE_LINKS["nvlink_latency_us"], TRUE_LINKS["network_latency_us"]
    e_net = TRUE_LINKS["network_efficiency"]
    small = [8 * 2**i for i in range(28)]  # 8 B .. 1 GiB
    gather = [256 * 2**i for i in range(23)]  # multiples of 8 ranks x 4 B
    one, two = ("node-a",), ("node-a", "node-b")
    specs = {
        "all_reduce_perf_8gpu.log": ("all_reduce", 8, one, nv, NVLINK_BUS, small),
        "all_gather_perf_8gpu.log": ("all_gather", 8, one, nv, NVLINK_BUS, gather),
        # 16 ranks over 2 nodes: 8 NICs per rank group -> nominal 8 x 50 GB/s
        "all_reduce_perf_16gpu_2nodes.log": ("all_reduce", 16, two, net, 8 * NIC_GBS * e_net, small),
        # one GPU on each of two nodes: one NIC
        "sendrecv_perf_2nodes.log": ("sendrecv", 2, two, net, NIC_GBS * e_net, small),
    }
    out = {}
    for name, (op, n, hosts, a, bus, sizes) in specs.items():
        run = synthetic_run(op, n, sizes, alpha_beta_us(op, n, a, bus, sizes), hosts=hosts, in_place_factor=1.004)
        out[name] = format_nccl_log(run)
    # two sizes only, and a non-monotone one, for the refusals
    run = synthetic_run("all_reduce", 8, [2**20, 2**24], alpha_beta_us("all_reduce", 8, nv, NVLINK_BUS, [2**20, 2**24]), hosts=one)
    out["too_few_sizes.log"] = format_nccl_log(run)
    t = alpha_beta_us("all_reduce", 8, nv, NVLINK_BUS, small)
    t[20] = t[19] * 0.5  # 8 MiB twice as fast as 4 MiB
    out["non_monotone.log"] = format_nccl_log(synthetic_run("all_reduce", 8, small, t, hosts=one, in_place_factor=1.004))
    return out


STEP_ROWS = [  # model, tp, pp, dp, cp, vp, mbs, recompute, sp, zero, gbs, seq
    ("llama2-7b", 2, 1, 8, 1, 1, 1, "selective", True, 1, 128, 4096),
    ("llama2-7b", 4, 2, 2, 1, 1, 2, "selective", True, 1, 128, 4096),
    ("llama3.1-8b", 4, 1, 4, 1, 1, 1, "selective", True, 1, 64, 8192),
    ("gpt3-1.3b", 1, 1, 16, 1, 1, 4, "none", False, 1, 256, 2048),
    ("gpt3-1.3b", 2, 2, 4, 1, 1, 2, "full", True, 1, 256, 2048),
    ("mistral-7b", 8, 2, 1, 1, 1, 1, "selective", True, 0, 64, 4096),
    ("gpt3-1.3b", 2, 1, 4, 1, 1, 2, "selective", True, 1, 128, 1024),  # 8 GPUs: one node
    ("llama2-13b", 4, 4, 1, 1, 2, 1, "selective", True, 0, 32, 4096),
    # 32k tokens: attention is a third of the step, so the rows tell its efficiency from the GEMMs'
    # (at 2k-8k alone it moves the rows relative to each other by less than a measurement's 1%)
    ("llama3.1-8b", 8, 1, 2, 1, 1, 1, "selective", True, 1, 16, 32768),
]
STEP_HEADER = ["model", "tp", "pp", "dp", "cp", "vp", "micro_batch_size", "recompute", "sequence_parallel", "zero",
               "global_batch_size", "seq_length", "step_time_s"]


def true_cluster():
    from solveplan.catalog import load_cluster

    c = load_cluster(CLUSTER)
    return c.model_copy(update={**TRUE_LINKS, "gpu": c.gpu.model_copy(update=TRUE_GPU_FIELDS)})


def write_steps(path: Path, rows=STEP_ROWS) -> Path:
    from solveplan.calibration.step_fit import row_cluster
    from solveplan.catalog import load_model
    from solveplan.plan import plan_config
    from solveplan.specs import JobSpec

    base = true_cluster()
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(STEP_HEADER)
        for (model, tp, pp, dp, cp, vp, mbs, rc, sp, zero, gbs, seq) in rows:
            m = load_model(model)
            job = JobSpec(model=m, cluster=row_cluster(base, tp * pp * cp * dp, "test"), global_batch_size=gbs, seq_length=seq)
            t = plan_config(job, dict(tp=tp, pp=pp, cp=cp, vp=vp, micro_batch_size=mbs, recompute=rc,
                                      sequence_parallel=sp, zero=zero)).step_time_s
            w.writerow([model, tp, pp, dp, cp, vp, mbs, rc, str(sp).lower(), zero, gbs, seq, f"{t:.6g}"])
    return path


def logs(*names):
    return [str(NCCL / n) for n in names]


GOOD_LOGS = ("all_reduce_perf_8gpu.log", "all_gather_perf_8gpu.log", "all_reduce_perf_16gpu_2nodes.log",
             "sendrecv_perf_2nodes.log")


def test_committed_logs_are_the_generator_output():
    for name, text in synthetic_logs().items():
        assert (NCCL / name).read_text() == text, f"{name} differs; run python tests/test_calibrate.py"


# ------------------------------------------------------------------------------ round trips
def test_links_fit_back_within_2_percent():
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    cal = calibrate(load_cluster(CLUSTER), logs(*GOOD_LOGS))
    for key, want in TRUE_LINKS.items():
        got = getattr(cal.cluster, key)
        assert got == pytest.approx(want, rel=0.02), key
    nv, net = cal.links["nvlink"], cal.links["network"]
    assert {lg.run.source for lg in nv.logs} == {"all_reduce_perf_8gpu.log", "all_gather_perf_8gpu.log"}
    assert {lg.link_class for lg in net.logs} == {"network"}
    # uncertainties are small and finite; the ripple leaves ~0.7% rms
    assert 0 < nv.latency.sd < 0.1 and 0 < net.efficiency.sd < 0.02
    assert nv.rms < 0.01 and net.rms < 0.01
    # after the fit the formulation reproduces every point within a few percent
    for lf in (nv, net):
        assert max(abs(p.after_us / p.measured_us - 1) for p in lf.points) < 0.03


@pytest.mark.slow
def test_steps_fit_back_within_2_percent(tmp_path):
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    steps = write_steps(tmp_path / "steps.csv")
    base = load_cluster(CLUSTER).model_copy(update=TRUE_LINKS)
    cal = calibrate(base, steps=str(steps))
    for key, want in TRUE_GPU.items():
        assert getattr(cal.cluster.gpu, key) == pytest.approx(want, rel=0.02), key
    assert cal.steps.rms_after < 0.005 < cal.steps.rms_before
    assert all(abs(r.after_s / r.measured_s - 1) < 0.01 for r in cal.steps.rows)


@pytest.mark.slow
def test_links_then_steps_together(tmp_path):
    """Logs fix the links, then the steps fix the GPU: both recovered in one call."""
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    steps = write_steps(tmp_path / "steps.csv")
    cal = calibrate(load_cluster(CLUSTER), logs(*GOOD_LOGS), str(steps))
    for key, want in {**TRUE_LINKS, **{f"gpu.{k}": v for k, v in TRUE_GPU.items()}}.items():
        obj, attr = (cal.cluster.gpu, key[4:]) if key.startswith("gpu.") else (cal.cluster, key)
        assert getattr(obj, attr) == pytest.approx(want, rel=0.02), key


def test_json_steps_and_aliases(tmp_path):
    import json

    from solveplan.calibration.step_fit import read_steps

    p = tmp_path / "s.json"
    p.write_text(json.dumps({"measurements": [{"model": "gpt2", "tp": 1, "pp": 1, "mbs": 2, "gbs": 64, "seq_len": 1024,
                                               "step_time": 0.5}]}))
    (row,) = read_steps(p)
    assert row == {"model": "gpt2", "tp": 1, "pp": 1, "micro_batch_size": 2, "global_batch_size": 64,
                   "seq_length": 1024, "step_time_s": 0.5}


# ------------------------------------------------------------------------------ refusals
def _refused(match, **kw):
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    with pytest.raises(InputError, match=match) as exc:
        calibrate(load_cluster(kw.pop("cluster", CLUSTER)), **kw)
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_refuses_too_few_sizes():
    msg = _refused(r"2 message size\(s\)", logs=logs("too_few_sizes.log"))
    assert "measure at least 3 sizes" in msg


def test_refuses_non_monotone_with_line():
    from solveplan.calibration.nccl_tests import parse_nccl_log

    run = parse_nccl_log(NCCL / "non_monotone.log")
    line = run.line_numbers[20]
    msg = _refused("time falls", logs=logs("non_monotone.log"))
    assert f"non_monotone.log: line {line}" in msg and "-n 100" in msg


def test_refuses_a_single_step_and_fits_two_with_the_time_scale_alone(tmp_path):
    msg = _refused("1 measured step", steps=str(write_steps(tmp_path / "one.csv", STEP_ROWS[:1])))
    assert "at least 2 configurations" in msg
    # two measurements: the stack's time scale only (K - 1 parameters at most), one row left to check it
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    cal = calibrate(load_cluster(CLUSTER).model_copy(update=TRUE_LINKS), steps=str(write_steps(tmp_path / "two.csv",
                                                                                             STEP_ROWS[:2])))
    assert [p.name for p in cal.steps.params] == ["time_scale"]
    assert cal.steps.params[0].value == pytest.approx(TRUE_FACTORS["time_scale"], rel=0.1)
    assert cal.steps.rms_after < cal.steps.rms_before


def test_steps_off_in_both_directions_leave_the_gpu_as_given(tmp_path):
    """Three steps measured 25% slower, 15% faster and 5% slower than the cluster predicts: fitted on two,
    no knob predicts the third better than the cluster as given, so nothing is moved and the notes say why."""
    from solveplan.calibration.calibrate import calibrate

    steps = write_steps(tmp_path / "mixed.csv", STEP_ROWS[:3])
    header, *lines = steps.read_text().splitlines()
    lines = [f"{row},{float(t) * f:.6g}" for (row, t), f in zip((x.rsplit(",", 1) for x in lines), (1.25, 0.85, 1.05))]
    steps.write_text("\n".join([header, *lines]) + "\n")
    base = true_cluster()
    cal = calibrate(base, steps=str(steps))
    assert cal.steps.params == [] and cal.steps.rms_after == pytest.approx(cal.steps.rms_before)
    assert cal.cluster.gpu == base.gpu
    assert any(n.startswith("not calibrated") for n in cal.steps.notes)


def test_refuses_contradictory_duplicate(tmp_path):
    steps = write_steps(tmp_path / "dup.csv", STEP_ROWS[:4])
    lines = steps.read_text().splitlines()
    dup = lines[1].rsplit(",", 1)
    lines.append(f"{dup[0]},{float(dup[1]) * 1.6:.6g}")
    steps.write_text("\n".join(lines) + "\n")
    _refused("rows 1 and 5 are the same configuration", steps=str(steps))


def test_refuses_latency_at_zero_with_large_residuals(tmp_path):
    """Time growing faster than linearly with size (t ~ S^1.5): no t = a + S/b line follows
    it, the best one has no latency at all and large residuals."""
    sizes = [2**k for k in range(10, 25)]
    t = [10.0 * (s / 1024) ** 1.5 for s in sizes]
    p = tmp_path / "all_reduce_perf_weird.log"
    p.write_text(format_nccl_log(synthetic_run("all_reduce", 8, sizes, t, hosts=("n0",))))
    msg = _refused("latency fits to 0", logs=[str(p)])
    assert "-b 8 -e 1G" in msg


def test_refuses_wrong_class_hint():
    _refused("marked nvlink but spans 2 hosts", logs=[str(NCCL / "all_reduce_perf_16gpu_2nodes.log") + ":nvlink"])


def test_refuses_unfittable_op(tmp_path):
    p = tmp_path / "alltoall_perf.log"
    sizes = [2**k for k in range(10, 20)]
    p.write_text(format_nccl_log(synthetic_run("alltoall", 8, sizes, [10 + s / 1e5 for s in sizes], hosts=("n0",))))
    _refused("not in the formulation", logs=[str(p)])


def test_class_hints(tmp_path):
    """Without device lines a send/receive cannot be placed: refused, then a :network hint
    places it (one rank per node assumed) and it fits the same network values."""
    from solveplan.calibration.calibrate import calibrate
    from solveplan.calibration.link_fit import parse_log_arg
    from solveplan.catalog import load_cluster

    text = (NCCL / "sendrecv_perf_2nodes.log").read_text()
    p = tmp_path / "sendrecv_perf_nodevices.log"
    p.write_text("\n".join(line for line in text.splitlines() if "Rank" not in line) + "\n")
    _refused("cannot tell whether this send/receive crossed nodes", logs=[str(p)])
    cal = calibrate(load_cluster(CLUSTER), [f"{p}:network"])
    lf = cal.links["network"]
    assert lf.logs[0].ranks_per_node == 1 and "one rank per node assumed" in lf.logs[0].how
    assert cal.cluster.network_efficiency == pytest.approx(TRUE_LINKS["network_efficiency"], rel=0.02)
    assert cal.cluster.network_latency_us == pytest.approx(TRUE_LINKS["network_latency_us"], rel=0.02)
    assert parse_log_arg("a.log:network:sendrecv").op == "sendrecv"
    assert parse_log_arg("C:/logs/a.log:nvlink").path == "C:/logs/a.log"
    with pytest.raises(InputError, match="unknown hint 'fast'"):
        parse_log_arg(f"{p}:fast")


def test_bad_step_row_names_row(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("model,tp,pp,step_time_s\nllama2-7b,3,1,1.0\nllama2-7b,2,1,1.0\nllama2-7b,4,1,1.0\n")
    msg = _refused("bad.csv row 1", steps=str(p))
    assert "--tp" in msg or "tp" in msg


def test_latency_kept_when_only_large_messages(tmp_path):
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    sizes = [2**k for k in range(26, 31)]
    p = tmp_path / "all_reduce_perf_big.log"
    p.write_text(format_nccl_log(synthetic_run("all_reduce", 8, sizes, alpha_beta_us("all_reduce", 8, 2.2, NVLINK_BUS, sizes),
                                               hosts=("n0",))))
    base = load_cluster(CLUSTER)
    cal = calibrate(base, [str(p)])
    assert cal.cluster.nvlink_latency_us == base.nvlink_latency_us
    assert cal.cluster.nvlink_efficiency == pytest.approx(TRUE_LINKS["nvlink_efficiency"], rel=0.02)
    assert any("Measure down to 8 B" in n for n in cal.notes)


def test_bandwidth_above_nominal_raises_nominal(tmp_path):
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    sizes = [8 * 4**k for k in range(14)]
    p = tmp_path / "all_reduce_perf_fast.log"
    p.write_text(format_nccl_log(synthetic_run("all_reduce", 8, sizes, alpha_beta_us("all_reduce", 8, 2.0, 540, sizes),
                                               hosts=("n0",))))
    cal = calibrate(load_cluster(CLUSTER), [str(p)])
    assert cal.cluster.nvlink_efficiency == 1.0
    assert cal.cluster.nvlink_gbyte_per_s == pytest.approx(540, rel=0.02)
    assert any("nvlink_gbyte_per_s" in n for n in cal.notes)


# ------------------------------------------------------------------------------ CLI end to end
@pytest.mark.slow
def test_cli_end_to_end(cli, tmp_path):
    steps = write_steps(tmp_path / "steps.csv")
    out, rep, png = tmp_path / "my-cluster.yaml", tmp_path / "report.md", tmp_path / "fit.png"
    res = cli("calibrate", "--cluster", CLUSTER, "--nccl-tests", str(NCCL / GOOD_LOGS[0]),
              *logs(*GOOD_LOGS[1:]), "--steps", str(steps), "-o", str(out), "--report", str(rep), "--plot", str(png))
    assert res.code == 0, res.err
    data = yaml.safe_load(out.read_text())
    assert isinstance(data["gpu"], dict) and data["name"] == "my-cluster"
    assert data["gpu"]["matmul_efficiency"] == pytest.approx(TRUE_GPU["matmul_efficiency"], rel=0.02)
    assert data["network_latency_us"] == pytest.approx(TRUE_LINKS["network_latency_us"], rel=0.02)
    text = rep.read_text()
    assert "## Links" in text and "## GPU efficiencies" in text and "+-" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ev = cli("evaluate", "--cluster", str(out), "--model", "llama2-7b", "--tp", "2", "--json")
    assert ev.code == 0, ev.err
    assert '"cluster": "my-cluster"' in ev.out
    # job files and API bodies take the file or its mapping inline
    from solveplan.catalog import load_job

    for ref in (str(out), data):
        job = load_job({"model": "llama2-7b", "cluster": ref})
        assert job.cluster.gpu.attention_efficiency == data["gpu"]["attention_efficiency"]


def test_cli_refusal_is_one_line_exit_2(cli, tmp_path):
    res = cli("calibrate", "--cluster", CLUSTER, "--nccl-tests", str(NCCL / "too_few_sizes.log"), "-o", str(tmp_path / "x.yaml"))
    assert res.code == 2
    assert res.err.count("\n") == 1 and "measure at least 3 sizes" in res.err
    assert not (tmp_path / "x.yaml").exists()


def test_cli_needs_something_to_fit(cli, tmp_path):
    res = cli("calibrate", "--cluster", CLUSTER, "-o", str(tmp_path / "x.yaml"))
    assert res.code == 2 and "nothing to fit" in res.err


def _all_reduce_16(tmp_path, name, sizes, times):
    p = tmp_path / name
    p.write_text(format_nccl_log(synthetic_run("all_reduce", 16, sizes, times, hosts=("node-a", "node-b"),
                                               in_place_factor=1.004)))
    return p


def test_bus_bandwidth_8x_below_the_prior_is_fitted_and_said(tmp_path):
    """Issue 24: a 16-rank all-reduce up to 1 GiB measuring 40 GB/s of bus bandwidth where the
    cluster file predicts 320 (8 NICs x 50 GB/s x 0.8). At the prior efficiency its largest
    messages look latency-bound; in the data their time grows with size. The fit uses the data
    and says the cluster file is contradicted."""
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    sizes = [8 * 2**i for i in range(28)]  # 8 B .. 1 GiB
    p = _all_reduce_16(tmp_path, "all_reduce_perf_slow.log", sizes, alpha_beta_us("all_reduce", 16, 5.5, 40, sizes))
    base = load_cluster(CLUSTER)
    cal = calibrate(base, [str(p)])
    assert cal.cluster.network_efficiency == pytest.approx(40 / (8 * NIC_GBS), rel=0.02)
    assert cal.links["network"].rms < 0.05
    assert not any("latency-bound" in n for n in cal.notes)
    note = next(n for n in cal.notes if "contradict" in n)
    assert "8.0x" in note and "network_efficiency" in note


def test_kept_prior_that_leaves_large_residuals_is_refused(tmp_path):
    """A log that stops at 16 KiB (latency-dominated at the top, so the efficiency cannot be
    fitted) whose times the kept prior cannot follow: refused with the reason, not a
    silent 'kept'."""
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    sizes = [2**k for k in range(3, 15)]
    p = _all_reduce_16(tmp_path, "all_reduce_perf_16k.log", sizes, [20.0 + 2e-3 * s for s in sizes])
    assert p.read_text().count("\n") > 12
    with pytest.raises(InputError, match="contradicts the data.*-e 1G"):
        calibrate(load_cluster(CLUSTER), [str(p)])


def test_cli_says_the_contradiction(cli, tmp_path):
    sizes = [8 * 2**i for i in range(28)]
    p = _all_reduce_16(tmp_path, "all_reduce_perf_slow.log", sizes, alpha_beta_us("all_reduce", 16, 5.5, 40, sizes))
    out = tmp_path / "c.yaml"
    res = cli("calibrate", "--cluster", CLUSTER, "--nccl-tests", str(p), "-o", str(out))
    assert res.code == 0, res.err
    assert "contradict" in res.out + res.err
    assert yaml.safe_load(out.read_text())["network_efficiency"] == pytest.approx(0.1, rel=0.02)

def test_cli_without_scipy_names_the_extra(cli, tmp_path, monkeypatch):
    for mod in ("scipy", "scipy.optimize"):
        monkeypatch.setitem(sys.modules, mod, None)  # import raises ImportError
    res = cli("calibrate", "--cluster", CLUSTER, "--nccl-tests", str(NCCL / GOOD_LOGS[0]), "-o", str(tmp_path / "x.yaml"))
    assert res.code == 2 and res.err.count("\n") == 1 and "solveplan[fit]" in res.err

if __name__ == "__main__":
    NCCL.mkdir(parents=True, exist_ok=True)
    for name, text in synthetic_logs().items():
        (NCCL / name).write_text(text)
        print("wrote", NCCL / name)


def test_latency_bound_log_keeps_the_efficiency_and_says_so(tmp_path):
    """An all-reduce across nodes stopped at 64 KiB whose time creeps up with size (LL protocol):
    a tiny efficiency explains it as well as latency does. The fit must not take it; it keeps
    the prior efficiency and says the log was latency-bound."""
    from solveplan.calibration.calibrate import calibrate
    from solveplan.catalog import load_cluster

    sizes = [2**k for k in range(3, 17)]
    p = tmp_path / "all_reduce_perf_64k.log"
    p.write_text(format_nccl_log(synthetic_run("all_reduce", 16, sizes, [24.0 + 3e-4 * s for s in sizes],
                                               hosts=("node-a", "node-b"))))
    base = load_cluster(CLUSTER)
    cal = calibrate(base, [str(p)])
    assert cal.cluster.network_efficiency == base.network_efficiency  # not a 1-2% "fit"
    note = next(n for n in cal.notes if "latency-bound" in n)
    assert "64 KiB" in note and "-e 1G" in note


def test_moe_steps_state_their_expert_parallelism_and_fit_back(tmp_path):
    """A MoE run's steps name ep / etp (and its dispatcher): read into the configuration, and three steps measured on
    a stack 25% slower than the cluster's shipped one give back that time scale."""
    from solveplan.calibration.calibrate import calibrate
    from solveplan.calibration.fewshot import calibrated_job
    from solveplan.calibration.step_fit import build_step_rows, read_steps
    from solveplan.catalog import load_cluster
    from solveplan.plan import make_plan

    cluster = load_cluster("h100x8")
    cells = [dict(ep=8, mbs=1), dict(ep=8, mbs=2), dict(ep=4, mbs=1)]
    header = "model,tp,pp,dp,micro_batch_size,recompute,zero,global_batch_size,seq_length,ep,etp,moe_token_dispatcher,step_time_s"
    lines = [f"qwen3-30b-a3b,1,1,8,{c['mbs']},full,1,64,4096,{c['ep']},1,alltoall,1.0" for c in cells]
    (tmp_path / "probe.csv").write_text("\n".join([header, *lines]) + "\n")
    rows = build_step_rows(read_steps(tmp_path / "probe.csv"), cluster, "probe.csv")
    assert [r.parallel.ep for r in rows] == [8, 8, 4] and all("ep" in r.label for r in rows)
    slower = {"time_scale": 0.8}
    measured = [make_plan(calibrated_job(r.job, slower), r.parallel, r.layers).step_time_s for r in rows]
    lines = [line.rsplit(",", 1)[0] + f",{t:.6f}" for line, t in zip(lines, measured)]
    (tmp_path / "moe.csv").write_text("\n".join([header, *lines]) + "\n")
    cal = calibrate(cluster, steps=str(tmp_path / "moe.csv"))
    assert cal.steps.params[0].name == "time_scale" and cal.steps.params[0].value == pytest.approx(0.8, rel=0.05)
    assert all(abs(r.after_s / r.measured_s - 1) < 0.02 for r in cal.steps.rows)
