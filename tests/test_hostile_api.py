"""The Python API under hostile and careless input (issue #17): the file policy a service runs
under, sizing before work, strict types, history-independent answers, a client cluster priced
with its own GPUs, no abort at exit; and hypothesis-generated job mappings that may only ever
give an answer or an InputError. `SOLVEPLAN_FUZZ_EXAMPLES=N` runs N examples per fuzz test."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from solveplan import api
from solveplan.catalog import SpecFiles, file_policy
from solveplan.errors import InputError

FUZZ_EXAMPLES = int(os.environ.get("SOLVEPLAN_FUZZ_EXAMPLES", "60"))
SMALL = {"model": "gpt3-1.3b", "cluster": "a100x8"}
V100_NAMED_H100 = {"name": "h100x64", "gpu": "v100-32gb", "num_nodes": 8, "gpus_per_node": 8,
                   "nvlink_gbyte_per_s": 150, "nic_gbit_per_s": 100}


@pytest.fixture
def cache():
    return api.ResultCache(maxsize=64)


def _error(fn, *args, **kw) -> InputError:
    with pytest.raises(InputError) as err:
        fn(*args, **kw)
    return err.value


# ------------------------------------------------------------------ files
@pytest.mark.parametrize("ref", ["/etc/shadow", "/etc/passwd", "../../../../etc/passwd", "/proc/kmsg", "/no/such/file",
                                 "x.yaml", "/etc", "passwd.json"])
def test_a_service_opens_no_file_and_says_the_same_whether_it_exists(ref, cache):
    with file_policy(SpecFiles(None)):
        err = _error(api.check, {"model": ref, "cluster": "a100x8"}, time_limit_s=1, cache=cache)
        err2 = _error(api.check, {"model": "gpt3-1.3b", "cluster": ref}, time_limit_s=1, cache=cache)
    assert err.field == "job.model" and err2.field == "job.cluster"
    assert err.message == err2.message == "this service opens no files: give a catalog name or an inline spec mapping"


def test_a_spec_directory_allows_plain_names_inside_it_only(tmp_path, cache):
    (tmp_path / "mine.yaml").write_text("num_layers: 4\nhidden_size: 512\nnum_attention_heads: 8\n"
                                        "ffn_hidden_size: 2048\nvocab_size: 32000\n")
    (tmp_path / "escape.yaml").symlink_to("/etc/passwd")
    with file_policy(SpecFiles(tmp_path)):
        assert api.check({"model": "mine.yaml", "cluster": "a100x8"}, time_limit_s=10, cache=cache).status == "FEASIBLE"
        for ref in ("escape.yaml", "../mine.yaml", str(tmp_path / "mine.yaml"), "sub/mine.yaml", "none.yaml"):
            err = _error(api.check, {"model": ref, "cluster": "a100x8"}, time_limit_s=1, cache=cache)
            assert "passwd" not in err.message and "root:" not in err.message, err.message
    assert api.check({"model": "gpt3-1.3b", "cluster": "a100x8"}, time_limit_s=10, cache=cache).status == "FEASIBLE"


# ------------------------------------------------------------------ sizes, types, ranges
def test_a_job_spanning_too_many_shapes_is_refused_before_any_work(cache):
    model = {"num_layers": 4096, "hidden_size": 40320, "num_attention_heads": 5040, "ffn_hidden_size": 161280,
             "vocab_size": 50400, "global_batch_size": 30240, "seq_length": 4096}
    cluster = {"gpu": "h100-sxm", "num_nodes": 30, "gpus_per_node": 1008, "nvlink_gbyte_per_s": 450, "nic_gbit_per_s": 400}
    err = _error(api.check, {"model": model, "cluster": cluster}, time_limit_s=2, cache=cache)
    assert err.field == "job" and "over the limit" in err.message
    assert cache.stats()["misses"] == 0  # nothing was computed


@pytest.mark.parametrize("change, field", [
    ({"global_batch_size": 0}, "job.global_batch_size"), ({"global_batch_size": False}, "job.global_batch_size"),
    ({"global_batch_size": ""}, "job.global_batch_size"), ({"global_batch_size": []}, "job.global_batch_size"),
    ({"global_batch_size": 512.0}, "job.global_batch_size"), ({"global_batch_size": 1e35}, "job.global_batch_size"),
    ({"seq_length": 0}, "job.seq_length"), ({"seq_length": True}, "job.seq_length"),
    ({"constraints": {}}, "job.constraints"), ({"constraints": {"tp": []}}, "job.constraints.tp"),
    ({"constraints": {"tp": [True]}}, "job.constraints.tp"), ({"flash_attention": 1}, "job.flash_attention"),
    ({"model": {"num_layers": True, "hidden_size": 512, "num_attention_heads": 8, "ffn_hidden_size": 2048,
                "vocab_size": 32000}}, "job.model.num_layers"),
    ({"cluster": {**V100_NAMED_H100, "gpu": {"name": "g", "peak_bf16_tflops": 1e-20, "hbm_gib": 80,
                                             "hbm_gbyte_per_s": 2000}}}, "job.cluster.gpu.peak_bf16_tflops"),
    ({"cluster": {**V100_NAMED_H100, "nvlink_gbyte_per_s": float("inf")}}, "job.cluster.nvlink_gbyte_per_s"),
])
def test_nothing_given_is_silently_changed(change, field, cache):
    err = _error(api.check, {**SMALL, **change}, time_limit_s=1, cache=cache)
    assert err.field.startswith(field), (err.field, err.message)


@pytest.mark.parametrize("target", [{"tokens_per_s": 1e300}, {"deadline_s": 1e-300, "token_budget": 1e18},
                                    {"tokens_per_s": True}, {"tokens_per_s": "5"}])
def test_overflowing_targets_are_input_errors(target, cache):
    err = _error(api.fewest_gpus, {"model": "gpt3-1.3b"}, "a100x64", target, time_limit_s=1, cache=cache)
    assert err.field.startswith("target")
    record = api.admit([{"id": 1, "model": "gpt3-1.3b", "target": target}], "a100x64", time_limit_s=2, cache=cache)
    assert record.decisions[0].status == "INVALID" and record.decisions[0].field.startswith("jobs[0].target")


# ------------------------------------------------------------------ answers
def test_a_client_cluster_named_like_a_family_is_priced_with_its_own_gpus(cache):
    own = api.plan({"model": "gpt3-1.3b", "cluster": {**V100_NAMED_H100, "num_nodes": 1}}, time_limit_s=30, cache=cache)
    fg = api.fewest_gpus({"model": "gpt3-1.3b"}, V100_NAMED_H100, {"tokens_per_s": 1e4}, time_limit_s=30, cache=cache)
    ad = api.admit([{"id": 1, "model": "gpt3-1.3b", "num_gpus": 8}], V100_NAMED_H100, time_limit_s=30, cache=cache)
    assert fg.num_gpus == 8 and fg.result.plan.step_time_s == pytest.approx(own.plan.step_time_s)
    assert ad.decisions[0].plan.step_time_s == pytest.approx(own.plan.step_time_s)
    assert not fg.cluster.startswith("h100x8") and not ad.decisions[0].cluster.startswith("h100x8")


def test_a_short_limit_does_not_shape_a_later_answer():
    warm = api.ResultCache()
    api.plan({"model": "llama3.1-70b", "cluster": "h100x512"}, time_limit_s=0.35, cache=warm)
    later = api.plan({"model": "llama3.1-70b", "cluster": "h100x512"}, time_limit_s=30, cache=warm)
    cold = api.plan({"model": "llama3.1-70b", "cluster": "h100x512"}, time_limit_s=30, cache=api.ResultCache())
    assert later.status == cold.status == "OPTIMAL"
    assert later.plan == cold.plan and later.notes == cold.notes


def test_an_infeasible_answer_is_the_same_cached_or_cold():
    job = {"model": "llama3.1-405b", "cluster": "a100x16"}
    warm = api.ResultCache()
    first = api.plan(job, time_limit_s=0.5, cache=warm)
    again = api.plan(job, time_limit_s=30, cache=warm)
    cold = api.plan(job, time_limit_s=30, cache=api.ResultCache())
    assert again.status == cold.status == "INFEASIBLE"
    assert again.shortfall == cold.shortfall
    assert first.status in ("INFEASIBLE", "UNKNOWN")


def test_no_abort_at_exit_with_a_solve_still_running(tmp_path):
    """A CP-SAT solve left running in a worker when the interpreter exits aborted the process."""
    script = textwrap.dedent("""
        from solveplan import api
        jobs = [{"id": i, "model": m, "num_gpus": 512} for i, m in enumerate(["llama3.1-405b", "gpt3-175b", "llama3.1-70b"])]
        api.admit(jobs, "h100x2048", time_limit_s=0.3)
    """)
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


# ------------------------------------------------------------------ fuzz
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(), st.text(max_size=8))
_json = st.recursive(_scalar, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)),
                     max_leaves=8)
_nums = st.one_of(st.integers(-2, 70000), st.integers(-10**25, 10**25), st.floats(), st.booleans(), st.text(max_size=4))
_model = st.fixed_dictionaries({"num_layers": _nums, "hidden_size": _nums, "num_attention_heads": _nums,
                                "ffn_hidden_size": _nums, "vocab_size": _nums})
_gpu = st.fixed_dictionaries({"name": st.just("g"), "peak_bf16_tflops": _nums, "hbm_gib": _nums, "hbm_gbyte_per_s": _nums})
_cluster = st.fixed_dictionaries({"gpu": st.one_of(st.sampled_from(["a100-80gb", "h100-sxm", "nope"]), _gpu),
                                  "num_nodes": _nums, "nvlink_gbyte_per_s": _nums, "nic_gbit_per_s": _nums},
                                 optional={"gpus_per_node": _nums, "name": st.sampled_from(["h100x64", "a100x8", "c"])})
_job = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["gpt3-1.3b", "gpt2", "/etc/passwd", "../x.yaml", ""]), _model, _json),
     "cluster": st.one_of(st.sampled_from(["a100x8", "a100x16", "h100x" + "9" * 30, "a100x7"]), _cluster, _json)},
    optional={"global_batch_size": _nums, "seq_length": _nums, "constraints": st.one_of(_json, st.dictionaries(
        st.sampled_from(["tp", "pp", "zero", "pp_max", "bad"]), st.one_of(_nums, st.lists(_nums, max_size=3)), max_size=2)),
              "precision": _scalar, "flash_attention": _scalar})


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(job=_job)
def test_fuzzed_jobs_answer_or_name_the_field(job):
    cache = api.ResultCache(maxsize=8)
    try:
        with file_policy(SpecFiles(None)):
            res = api.check(job, time_limit_s=0.3, cache=cache)
    except InputError as exc:
        assert exc.field.startswith("job") and "\n" not in exc.message
    else:
        assert res.status in ("FEASIBLE", "INFEASIBLE", "UNKNOWN")


# ------------------------------------------------------------------ names (issue #27 item 4)
_texts = st.text(st.characters(codec="utf-8", exclude_categories=()), max_size=16) | st.sampled_from(
    ["evil\nslots=64", "a b", "", "-rf", "x\x1b[31m", "n\u202e", "[/]", "node-01.rack2", "a" * 254])


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(names=st.lists(_texts, min_size=2, max_size=2, unique=True))
def test_node_names_are_host_names_or_refused(names):
    from solveplan.catalog import load_cluster
    from solveplan.errors import HOST_NAME

    cluster = {"name": "c", "gpu": "a100-80gb", "num_nodes": 2, "nvlink_gbyte_per_s": 300, "nic_gbit_per_s": 200,
               "node_names": names}
    try:
        spec = load_cluster(cluster, "cluster")
    except InputError as exc:
        assert exc.field.startswith("cluster") and "\n" not in exc.message and "\x1b" not in exc.message
    else:
        assert all(HOST_NAME.fullmatch(n) for n in spec.node_names), spec.node_names


@settings(max_examples=FUZZ_EXAMPLES * 3, deadline=None)
@given(text=st.text(st.characters(codec=None, exclude_categories=()), max_size=40) | _texts)
@example(text="\\[")  # a backslash before a bracket that starts no tag: rich eats it unless escaped
@example(text="\\[1]\\\\[b]x:smile:")
def test_escaped_text_prints_as_written_and_acts_on_nothing(text):
    """`escape_text` leaves no control, format or surrogate character (nothing a terminal acts
    on, nothing that cannot be encoded); `escape_markup` renders in rich as exactly that text."""
    import io
    import unicodedata

    from rich.console import Console

    from solveplan.errors import escape_markup, escape_text

    shown = escape_text(text)
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in shown)
    shown.encode("utf-8")
    buf = io.StringIO()
    # emoji off, as the CLI's consoles are made (`render.table`, `cli.catalog_cmds`, `cli.plan_cmds`)
    Console(file=buf, width=10_000, color_system=None, highlight=False, emoji=False).print(escape_markup(text), end="")
    # rich.markup.escape doubles a final backslash (so that markup appended later stays markup)
    assert buf.getvalue() in (shown, shown + "\\" if shown.endswith("\\") else shown)
