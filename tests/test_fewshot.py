"""Few-shot calibration (calibration/fewshot.py, fewshot_eval.py) and the pick inside published
sweeps (calibration/sweeps.py).

The structured fit on a synthetic step-time model (no formulation: fast, and the truth is
known): K = 2 frees the time scale alone; a knob the rows cannot tell from the time scale is
never freed; a knob the rows identify is found and recovered. On the released rows: the
draws follow their stated rule, the reported MAPE is what the calibrated cluster predicts
for the rows not drawn, recomputed here, and the sweep report's picks are recomputed from
the predictions.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import solveplan.catalog_published
from solveplan.calibration.crossval import Prediction, in_sample
from solveplan.calibration.fewshot import RowFacts, calibrated_fields, calibrated_job, fit_few_shot
from solveplan.calibration.fewshot_eval import draw_rows, few_shot, few_shot_sweeps, group_key
from solveplan.calibration.rows import published_rows
from solveplan.calibration.runs_fit import row_cases
from solveplan.calibration.sweeps import REGRET_OK, sweep_key, sweep_report

# the dense A100/H100/V100 files, as shipped (published/); the MoE / new-GPU file has few rows per group
DATA = [str(Path(solveplan.catalog_published.__file__).parent / name)
        for name in ("published_runs.json", "published_runs_more.json")]

# ------------------------------------------------------------------ the fit on a synthetic model
# step time of row i = gemm_i / (s * m) + attn_i / (s * a) + launches_i * o / s: s the time scale,
# m, a, o the GEMM, attention and overhead multipliers (the knobs' meaning in fewshot.calibrated_fields)
GEMM = np.array([1.0, 2.0, 4.0, 1.5, 3.0, 0.8])
ATTN = np.array([0.1, 0.9, 0.2, 1.2, 0.3, 0.05])
LAUNCH = np.array([0.2, 0.1, 0.4, 0.1, 0.3, 0.3])
FACTS = [RowFacts("bf16", "cudnn", 1, False)] * len(GEMM)


def synthetic(idx):
    def predict(f):
        s, m = f.get("time_scale", 1.0), f.get("matmul_efficiency", 1.0)
        a, o = f.get("attention_efficiency", 1.0), f.get("layer_overhead_us", 1.0)
        return GEMM[idx] / (s * m) + ATTN[idx] / (s * a) + LAUNCH[idx] * o / s
    return predict


def test_two_measurements_free_the_time_scale_alone():
    idx = [0, 1]
    predict = synthetic(idx)
    truth = {"time_scale": 0.8, "attention_efficiency": 0.6}
    meas = predict(truth)
    fit = fit_few_shot(predict, meas, FACTS[:2])
    assert fit.free == ["time_scale"]
    assert 0.6 < fit.factors["time_scale"] < 0.85
    assert fit.rms_after < fit.rms_before


def test_a_uniform_slowdown_is_the_time_scale_and_frees_nothing_else():
    idx = list(range(6))
    predict = synthetic(idx)
    meas = predict({"time_scale": 0.85}) * np.exp(0.004 * np.cos(np.arange(6)))  # 0.4% measurement ripple
    fit = fit_few_shot(predict, meas, FACTS)
    assert fit.free == ["time_scale"], fit.free
    assert fit.factors["time_scale"] == pytest.approx(0.85, rel=0.01)


def test_a_knob_the_rows_identify_is_found_and_recovered():
    idx = list(range(6))
    predict = synthetic(idx)
    truth = {"time_scale": 0.9, "attention_efficiency": 0.5}
    fit = fit_few_shot(predict, predict(truth), FACTS)
    assert "attention_efficiency" in fit.free
    assert fit.factors["attention_efficiency"] == pytest.approx(0.5, rel=0.05)
    assert fit.factors["time_scale"] == pytest.approx(0.9, rel=0.03)
    assert fit.rms_after < 0.01


def test_a_knob_no_row_uses_is_never_a_candidate():
    idx = list(range(6))
    predict = synthetic(idx)
    fit = fit_few_shot(predict, predict({"time_scale": 0.9, "attention_efficiency": 0.5}), FACTS,
                       candidates=("time_scale", "fp8_matmul_efficiency", "sharded_layer_overhead_us"))
    assert fit.free == ["time_scale"]  # bf16 rows, ZeRO-1: neither knob can be informed


def test_rows_whose_errors_differ_in_sign_leave_the_cluster_unchanged():
    # three rows off by +25%, -15%, +5%: the mean offset predicts none of them left out better than
    # the base does, so the fit is not applied (before the left-out check it moved the time scale to
    # their mean and every other prediction with it)
    idx = [0, 1, 2]
    predict = synthetic(idx)
    meas = predict({}) * np.exp([0.25, -0.15, 0.05])
    fit = fit_few_shot(predict, meas, FACTS[:3], candidates=("time_scale",))
    assert fit.factors == {} and fit.free == []
    assert fit.rms_after == pytest.approx(fit.rms_before)
    assert any(n.startswith("not calibrated") for n in fit.notes), fit.notes


def test_a_shared_offset_passes_the_left_out_check():
    idx = [0, 1, 2]
    predict = synthetic(idx)
    meas = predict({"time_scale": 0.8}) * np.exp([0.02, -0.02, 0.01])  # 2% scatter around a 25% slowdown
    fit = fit_few_shot(predict, meas, FACTS[:3], candidates=("time_scale",))
    assert fit.free == ["time_scale"]
    assert fit.factors["time_scale"] == pytest.approx(0.8, rel=0.03)


def test_the_time_scale_moves_every_gpu_local_term_and_caps_efficiencies_at_peak():
    from solveplan.catalog import load_cluster

    c = load_cluster("h100x16")
    gpu, net = calibrated_fields(c, {"time_scale": 2.0})
    assert gpu["matmul_efficiency"] == pytest.approx(min(1.0, 2 * c.gpu.matmul_efficiency))
    assert gpu["hbm_efficiency"] == 1.0  # 0.8 x 2 capped at the peak
    assert gpu["layer_overhead_us"] == pytest.approx(c.gpu.layer_overhead_us / 2)
    assert net == {}  # links are nccl-tests' to calibrate
    # the GEMM knob alone leaves an unset attention efficiency where it was (defaults made explicit)
    gpu, _ = calibrated_fields(c, {"matmul_efficiency": 0.5})
    assert gpu["attention_efficiency"] == pytest.approx(c.gpu.fused_attention_efficiency)


# ------------------------------------------------------------------ the draws
def test_draws_take_one_row_from_each_stratum_of_measured_times():
    meas = [5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0]
    ids = [f"r{i}" for i in range(7)]
    order = sorted(range(7), key=lambda i: meas[i])
    for d in range(6):
        picked = draw_rows(meas, ids, 3, d)
        assert picked == draw_rows(meas, ids, 3, d)  # deterministic
        strata = np.array_split(order, 3)
        assert sorted(int(next(s for s in strata if i in s)[0]) for i in picked) == sorted(int(s[0]) for s in strata)
    assert len({tuple(draw_rows(meas, ids, 3, d)) for d in range(6)}) > 1  # draws differ


# ------------------------------------------------------------------ on the released rows
@pytest.fixture(scope="module")
def cases():
    return row_cases(published_rows(DATA))


@pytest.fixture(scope="module")
def korthikanti(cases):
    group = [c for c in cases if c.row.source == "korthikanti2022"]
    return group, few_shot(group, 3, base="shipped", draws=2)


def test_reported_mape_is_what_the_calibrated_cluster_predicts_for_the_rows_not_drawn(korthikanti):
    group, res = korthikanti
    (line,) = res["groups"]
    runs = res["_runs"][group_key(group[0])]
    for d, draw in enumerate(runs[2]):
        trained = set(line["trained_on"][d])
        assert len(trained) == 3
        errs = [c.predict_job(calibrated_job(c.row.job, draw.fit.factors))[0] / c.row.measured_s - 1
                for c in group if c.row.id not in trained]
        assert line["mape_per_draw"][d] == pytest.approx(np.mean(np.abs(errs)), rel=1e-9)
        # the fit reduces the error of the rows it saw
        seen = [c for c in group if c.row.id in trained]
        after = [math.log(c.predict_job(calibrated_job(c.row.job, draw.fit.factors))[0] / c.row.measured_s) for c in seen]
        before = [math.log(c.predict(None)[0] / c.row.measured_s) for c in seen]
        assert np.sqrt(np.mean(np.square(after))) <= np.sqrt(np.mean(np.square(before))) + 1e-9
    assert line["mape_median"] == pytest.approx(np.median(line["mape_per_draw"]))
    assert res["sources"][0]["mape_median"] == pytest.approx(line["mape_median"])  # one group: pooled = group


def test_sweep_report_recomputed_from_the_in_sample_predictions(cases):
    preds = in_sample(cases)
    report = sweep_report(preds)
    groups = defaultdict(list)
    for p in preds:
        groups[sweep_key(p)].append(p)
    sweeps = {k: ps for k, ps in groups.items() if len(ps) >= 2}
    # korthikanti's recompute pairs and narayanan's ZeRO-3 / PTD-P pairs: one precision, one stack each
    assert report["sweeps"] == len(sweeps) >= 8
    for line in report["groups"]:
        ps = sweeps[(line["source"], line["model"], line["gpu"], line["num_gpus"], line["global_batch_size"],
                     line["seq_length"], line["precision"], line["release"])]
        assert len({p.row.job.precision for p in ps}) == 1  # a sweep ranks configurations, not precisions
        pick = min(ps, key=lambda p: p.predicted_s)
        best = min(ps, key=lambda p: p.row.measured_s)
        assert (line["picked"], line["best"]) == (pick.row.id, best.row.id)
        assert line["regret"] == pytest.approx(pick.row.measured_s / best.row.measured_s - 1)
    assert report["within_3pct"] == sum(x["regret"] <= REGRET_OK for x in report["groups"])
    # the state today: every miss is DeepSpeed's ZeRO-3 of 2021 picked over PTD-P (README, "Known limits")
    misses = [x for x in report["groups"] if not x["within_3pct"]]
    assert all("zero3" in x["picked"] and "ZeRO/FSDP sharding" in x["terms"] for x in misses), misses


def test_ranking_on_a_constructed_sweep(cases):
    """Three rows of one sweep, predictions chosen: the pick is the fastest predicted, the regret
    is its measured time over the measured best, and a pick within 3% counts as within."""
    ps = [c for c in cases if c.row.id.startswith("narayanan2021-t2-") and c.row.num_gpus == 768]
    assert len(ps) == 2
    meas = {c.row.id: c.row.measured_s for c in ps}
    slow, fast = sorted(meas, key=meas.get, reverse=True)
    row = {c.row.id: c.row for c in ps}
    wrong = sweep_report([Prediction(row[slow], 1.0, {}, True), Prediction(row[fast], 2.0, {}, True)])
    (line,) = wrong["groups"]
    assert line["picked"] == slow and line["best"] == fast
    assert line["regret"] == pytest.approx(meas[slow] / meas[fast] - 1) and not line["within_3pct"]
    right = sweep_report([Prediction(row[slow], 2.0, {}, True), Prediction(row[fast], 1.0, {}, True)])
    assert right["groups"][0]["regret"] == 0 and right["within_3pct"] == 1 and right["groups"][0]["terms"] == []


def test_few_shot_sweeps_rank_each_row_on_its_own_groups_calibration(korthikanti):
    group, res = korthikanti
    lines = few_shot_sweeps(res)
    assert {x["model"] for x in lines} == {c.row.job.model.name for c in group}  # 4 sweeps of 2 recompute modes
    assert all(x["draws"] == 2 and x["regret_worst"] >= x["regret_median"] >= 0 for x in lines)


@pytest.mark.parametrize("argv, field", [
    (("--few-shot", "1"), "--few-shot"),
    (("--few-shot", "3", "--cross-validate", "source"), "--few-shot"),
    (("--few-shot", "3", "--draws", "0"), "--draws"),
])
def test_validate_few_shot_bad_input_is_one_line_and_exit_2(cli, argv, field):
    code, out, err = cli("validate", *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], err


def test_a_flash2_stack_says_so_and_only_its_attention_knob_is_a_candidate():
    from solveplan.calibration.fewshot import KNOB_BY_NAME
    from solveplan.calibration.step_fit import build_step_rows
    from solveplan.catalog import load_cluster

    rows = build_step_rows([{"model": "llama2-7b", "tp": "1", "pp": "1", "dp": "16", "zero": "3",
                             "attention_kernel": "flash2", "step_time_s": "9.0"}], load_cluster("h100x16"), "s.csv")
    facts = [RowFacts.of(rows[0].job, rows[0].parallel.zero)]
    assert rows[0].job.attention_kernel == "flash2"
    used = {n for n, k in KNOB_BY_NAME.items() if k.used(facts)}
    assert {"flash2_attention_efficiency", "sharded_layer_overhead_us", "network_efficiency"} <= used
    assert not {"attention_efficiency", "fp8_matmul_efficiency"} & used


def test_moe_runs_are_their_own_calibration_group():
    """A source's MoE runs (Megatron-Core's dispatcher, grouped GEMMs, expert parallelism) are calibrated apart
    from its dense runs on the same GPU, one group per model family: (source, GPU, "moe:<family>")."""
    path = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"
    cases = row_cases([r for r in published_rows([str(path)]) if r.gpu == "gb200" and r.source == "mbridge_perf"],
                      max_shapes=1)
    stacks = {moe: {group_key(c) for c in cases if c.row.job_spec.model.is_moe == moe} for moe in (True, False)}
    families = {c.row.model_family for c in cases if c.row.job_spec.model.is_moe}
    assert len(families) > 2 and stacks[True] == {("mbridge_perf", "gb200", f"moe:{f}") for f in families}
    assert stacks[False] and all(key[2] != "moe" for key in stacks[False])


def test_the_table_says_how_many_draws_the_left_out_check_kept_as_given():
    from solveplan.render.validation import few_shot_table

    line = {"source": "s", "gpu": "h100-sxm", "stack": "megatron", "rows": 9, "groups": 1, "zero_shot_mape": 0.1,
            "mape_median": 0.1, "mape_worst": 0.12, "time_scale_median": 1.0}
    result = {"k": 3, "sources": [line], "all": None, "skipped": [],
              "groups": [{**line, "knobs_freed": {"time_scale": 2}, "kept_as_given": 3},
                         {**line, "gpu": "a100-80gb", "knobs_freed": {"time_scale": 5}, "kept_as_given": 0}]}
    rows = few_shot_table(result).splitlines()
    assert any("h100-sxm" in r and "kept as given 3" in r for r in rows)
    assert any("a100-80gb" in r and "time scale only" in r for r in rows)
