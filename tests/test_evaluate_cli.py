"""`solveplan evaluate`: one explicit configuration, the JSON keys users script against,
the derived dp, and errors that name the flag."""

import json

import pytest

def test_json_keys_and_derived_dp(cli):
    code, out, err = cli("evaluate", "--model", "gpt3-175b", "--cluster", "a100x64", "--global-batch-size", "64",
                          "--tp", "8", "--pp", "8", "--vp", "3", "--recompute", "selective", "--json")
    assert code == 0, err
    d = json.loads(out)
    for key in ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu", "hardware_tflops_per_gpu",
                "breakdown", "stages", "peak_memory_bytes", "fits"):
        assert key in d
    assert d["parallel"]["dp"] == 1 and d["parallel"]["num_microbatches"] == 64
    assert len(d["stages"]) == 8 and sum(s["layers"] for s in d["stages"]) == 96
    for s in d["stages"]:
        mem = s["memory_bytes"]
        assert set(mem) == {"params", "grads", "optimizer", "activations", "other", "total", "host"}
        assert mem["host"] == 0.0  # no activation offloading: nothing in host memory (not part of the GPU total)
        assert mem["total"] == pytest.approx(sum(v for k, v in mem.items() if k not in ("total", "host")))
        assert isinstance(s["fits"], bool)
    assert d["tokens_per_s"] == pytest.approx(64 * 2048 / d["step_time_s"])
    assert d["peak_memory_bytes"] == pytest.approx(max(s["memory_bytes"]["total"] for s in d["stages"]))


def test_uneven_split_is_evaluated_as_given(cli):
    code, out, err = cli("evaluate", "--model", "gpt3-1.3b", "--cluster", "a100x32", "--tp", "8", "--pp", "4",
                          "--layers-per-stage", "5,7,7,5", "--json")
    assert code == 0, err
    assert [s["layers"] for s in json.loads(out)["stages"]] == [5, 7, 7, 5]


@pytest.mark.parametrize("args,field", [
    (["--tp", "3"], "--tp/--cp/--pp"),
    (["--tp", "8", "--pp", "4", "--layers-per-stage", "6,6,6"], "--layers-per-stage"),
    (["--tp", "8", "--pp", "4", "--layers-per-stage", "6,6,6,7"], "--layers-per-stage"),
    (["--tp", "8", "--pp", "4", "--layers-per-stage", "0,8,8,8"], "--layers-per-stage"),
    (["--global-batch-size", "102", "--tp", "8"], "--global-batch-size"),
    (["--tp", "8", "--micro-batch-size", "3"], "--micro-batch-size"),
    (["--sequence-parallel", "--tp", "1", "--pp", "2"], "--sequence-parallel"),
])
def test_illegal_configurations_name_the_flag(args, field, cli):
    code, out, err = cli("evaluate", "--model", "gpt3-1.3b", "--cluster", "a100x32", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and field in err, err


def test_table_output(cli):
    code, out, err = cli("evaluate", "--model", "llama2-7b", "--cluster", "h100x16", "--tp", "2", "--pp", "2")
    assert code == 0, err
    assert "MFU" in out and "stages" in out and "step time breakdown" in out

