"""Counting the embedding and the loss as layers of the pipeline split (Megatron-LM's
--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split; issue #26 item 5):
the rule (`space.pipeline_split`) against Megatron's, the space and the searches holding a shape
with it to Megatron's split, the two NVIDIA Llama 3.1 405B recipe rows it makes predictable, the
launch flags and the evaluate command.

The expected splits below are written out from Megatron-LM d98e8a6's
megatron/core/transformer/transformer_block.py get_num_layers_to_build and
transformer_layer.py get_transformer_layer_offset, by hand. With SOLVEPLAN_MEGATRON_LM set to a
Megatron-LM checkout (and torch importable), `test_rule_equals_megatron_functions` also runs those
two functions themselves on every case.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from solveplan.catalog import load_job
from solveplan.errors import InputError
from solveplan.formulation.splits import default_layers
from solveplan.plan import plan_config
from solveplan.render.megatron import megatron_args
from solveplan.search.baselines import PREPARE_KWARGS, alpa_dp, branch_bound, exhaustive
from solveplan.search.candidates import prepare
from solveplan.space.enumeration import enumerate_shapes
from solveplan.space.pipeline_split import layer_offsets, rank_layers, split_problems, virtual_stage_layers
from solveplan.specs import ClusterSpec, Constraints, GPUSpec, JobSpec, ModelSpec

# (layers, pp, vp, embedding, loss) -> layers built per virtual stage, [virtual stage][rank]
CHUNKS = {
    (126, 16, 8, True, True): [[0] + [1] * 15] + [[1] * 16] * 6 + [[1] * 15 + [0]],  # NVIDIA's 405B recipe
    (126, 8, 2, True, True): [[7] + [8] * 7, [8] * 7 + [7]],  # Megatron-Bridge llama31_405b_pretrain_config
    (30, 4, 8, True, True): [[0, 1, 1, 1]] + [[1] * 4] * 6 + [[1, 1, 1, 0]],  # "pp * vp = 32 exceeds 30 layers"
    (30, 2, 4, True, True): [[3, 4], [4, 4], [4, 4], [4, 3]],
    (7, 4, 1, True, False): [[1, 2, 2, 2]],
    (7, 4, 1, False, True): [[2, 2, 2, 1]],
    (7, 2, 2, True, False): [[1, 2], [2, 2]],
    (95, 4, 3, True, False): [[7, 8, 8, 8], [8] * 4, [8] * 4],
    (10, 1, 1, True, True): [[10]],
}
# the first layer of each virtual stage (get_transformer_layer_offset), [virtual stage][rank]
OFFSETS = {
    (126, 8, 2, True, True): [[0, 7, 15, 23, 31, 39, 47, 55], [63, 71, 79, 87, 95, 103, 111, 119]],
    (7, 2, 2, True, False): [[0, 1], [3, 5]],
    (7, 4, 1, False, True): [[0, 2, 4, 6]],
}


@pytest.mark.parametrize("case", sorted(CHUNKS))
def test_layers_per_virtual_stage_are_megatrons(case):
    chunks = virtual_stage_layers(*case)
    assert chunks == CHUNKS[case]
    assert sum(map(sum, chunks)) == case[0]
    assert rank_layers(*case) == [sum(c[r] for c in chunks) for r in range(case[1])]


@pytest.mark.parametrize("case", sorted(OFFSETS))
def test_layer_offsets_are_megatrons(case):
    assert layer_offsets(*case) == OFFSETS[case]


def test_offsets_tile_the_layers():
    """Every layer is built once: the chunks, placed at their offsets, cover 0..L-1 exactly."""
    for case in CHUNKS:
        sizes, starts = virtual_stage_layers(*case), layer_offsets(*case)
        built = sorted(i for v, row in enumerate(sizes) for r, n in enumerate(row) for i in range(starts[v][r],
                                                                                                   starts[v][r] + n))
        assert built == list(range(case[0])), case


@pytest.mark.parametrize("case, field, says", [
    ((126, 16, 8, True, False), "account_for_embedding", "127 slots are not divisible by pp = 16"),
    ((126, 16, 3, True, True), "vp", "not divisible by vp = 3"),
    ((6, 8, 1, True, True), "account_for_embedding", "a rank of no layers is not priced"),
    ((6, 7, 1, True, False), "account_for_embedding", "first pipeline rank"),
])
def test_illegal_accountings_name_the_field_and_megatrons_rule(case, field, says):
    (got_field, msg), = split_problems(*case)
    assert got_field == field and says in msg
    with pytest.raises(ValueError):
        virtual_stage_layers(*case)


def test_nothing_counted_is_the_planners_split():
    assert split_problems(126, 16, 8, False, False) == []


MEGATRON = os.environ.get("SOLVEPLAN_MEGATRON_LM")


@pytest.mark.skipif(not MEGATRON, reason="set SOLVEPLAN_MEGATRON_LM to a Megatron-LM checkout to run its functions")
def test_rule_equals_megatron_functions():
    """Megatron-LM's own get_num_layers_to_build and get_transformer_layer_offset, on a stub config."""
    import typing

    import typing_extensions

    typing.override = getattr(typing, "override", typing_extensions.override)
    sys.path.insert(0, MEGATRON)
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    cases = list(CHUNKS) + [(L, p, v, e, loss) for L in (7, 30, 61, 94, 126) for p in (2, 3, 4, 8, 16)
                            for v in (1, 2, 4, 8) for e in (False, True) for loss in (False, True)
                            if (e or loss) and not split_problems(L, p, v, e, loss)]
    for L, p, v, e, loss in cases:
        cfg = SimpleNamespace(pipeline_model_parallel_layout=None, num_layers_in_first_pipeline_stage=None,
                              num_layers_in_last_pipeline_stage=None, account_for_embedding_in_pipeline_split=e,
                              account_for_loss_in_pipeline_split=loss, num_layers=L, pipeline_model_parallel_size=p,
                              virtual_pipeline_model_parallel_size=v if v > 1 else None)
        stage = (lambda c: c) if v > 1 else (lambda c: None)
        theirs = [[get_num_layers_to_build(cfg, vp_stage=stage(c), pp_rank=r) for r in range(p)] for c in range(v)]
        offsets = [[get_transformer_layer_offset(cfg, vp_stage=stage(c), pp_rank=r) for r in range(p)]
                   for c in range(v)]
        assert virtual_stage_layers(L, p, v, e, loss) == theirs, (L, p, v, e, loss)
        if p > 1:
            assert layer_offsets(L, p, v, e, loss) == offsets, (L, p, v, e, loss)


# --- the published rows it makes predictable -------------------------------------------------------

RECIPE_ROWS = ("mbridge_perf-26.04.01-llama3.1-405b-gb200-mxfp8-256", "mbridge_perf-26.06-llama3.1-405b-gb200-mxfp8-256",
               # the same recipe under NVFP4 (LLAMA31_405B_PRETRAIN_CONFIG_GB200_NVFP4_V2)
               "mbridge_perf-26.04.01-llama3.1-405b-gb200-nvfp4-256", "mbridge_perf-26.06-llama3.1-405b-gb200-nvfp4-256")


def test_nvidia_405b_recipe_rows_are_predicted_with_megatrons_split():
    """NVIDIA's Llama 3.1 405B GB200 MXFP8 recipe (pp 16 x vp 8 = 128 virtual stages for 126 layers)
    was refused; counting the embedding and the loss as layers, as the recipe does, it is predicted
    within 10% (measured 61.44 s and 62.77 s a step)."""
    from solveplan.calibration.crossval import in_sample
    from solveplan.calibration.rows import published_rows
    from solveplan.calibration.runs_fit import row_cases

    rows = {r.id: r for r in published_rows()}
    picked = [rows[i] for i in RECIPE_ROWS]
    assert all(r.skipped is None for r in picked), [r.skipped for r in picked]
    assert not [r for r in rows.values() if r.skipped and "virtual stages" in r.skipped]
    for p in in_sample(row_cases(picked)):
        cfg = p.config
        assert (cfg["tp"], cfg["pp"], cfg["vp"], cfg["account_for_embedding"], cfg["account_for_loss"]) == \
            (4, 16, 8, True, True)
        assert abs(p.error) < 0.10, (p.row.id, p.predicted_s, p.row.measured_s)
        assert any("count as layers" in a for a in p.row.assumed)


def test_other_rows_keep_the_planners_split():
    """Rows whose pp x vp fits their layers do not count the embedding or the loss (Megatron's
    default): their shapes, and so their predictions, are as before."""
    from solveplan.calibration.rows import published_rows

    for r in published_rows():
        if r.skipped is None and r.id not in RECIPE_ROWS:
            assert r.job.constraints.account_for_embedding == (False,) == r.job.constraints.account_for_loss, r.id


# --- plans, search, launch arguments, CLI ----------------------------------------------------------

def _405b():
    return load_job({"model": "llama3.1-405b", "cluster": "h100x512", "global_batch_size": 1536, "precision": "fp8"})


def test_plan_holds_megatrons_split_and_the_launch_flags():
    job = _405b()
    plan = plan_config(job, dict(tp=4, pp=16, vp=8, account_for_embedding=True, account_for_loss=True))
    assert plan.layers_per_stage == [7] + [8] * 14 + [7] == default_layers(job.model, 16, 8, True, True)
    assert plan.parallel.account_for_embedding and plan.parallel.account_for_loss
    ma = megatron_args(job, plan)
    f = ma.flags()
    assert f["--account-for-embedding-in-pipeline-split"] is True and f["--account-for-loss-in-pipeline-split"] is True
    assert f["--num-virtual-stages-per-pipeline-rank"] == "8" and ma.layout is None
    for flag in ("--pipeline-model-parallel-layout", "--decoder-first-pipeline-num-layers",
                 "--decoder-last-pipeline-num-layers"):
        assert flag not in f  # TransformerConfig refuses them beside the accounting flags
    plain = megatron_args(job, plan_config(job, dict(tp=4, pp=16, vp=2))).flags()
    assert not any(k.startswith("--account-for") for k in plain)


def test_only_the_loss_counted():
    job = load_job({"model": "deepseek-llm-67b", "cluster": "a100x256"})
    plan = plan_config(job, dict(tp=8, pp=4, vp=8, account_for_loss=True))
    assert plan.layers_per_stage == [24, 24, 24, 23]
    f = megatron_args(job, plan).flags()
    assert "--account-for-loss-in-pipeline-split" in f and "--account-for-embedding-in-pipeline-split" not in f


def test_a_stated_interleaving_above_the_layers_is_searched_with_the_accounting():
    """vp 8 over pp 16 for 126 layers: the space holds it only with embedding and loss counted,
    and every method returns Megatron's split for it."""
    job = _405b().model_copy(update={"constraints": Constraints(tp=(4,), pp=(16,), vp=(8,), recompute=("full",),
                                                                micro_batch_size=(1,), zero=(1,))})
    shapes = enumerate_shapes(job).shapes
    assert len(shapes) and shapes.accounted.all()
    assert set(zip(shapes.account_for_embedding.tolist(), shapes.account_for_loss.tolist())) == {(True, True)}
    cands = prepare(job, **PREPARE_KWARGS)
    want = [7] + [8] * 14 + [7]
    assert (cands.fixed_splits[:, :16] == want).all()
    for method in (exhaustive, alpa_dp, branch_bound):
        res = method.search(cands, time_limit_s=60)
        assert res.best is not None and res.best.layers == want, method.__name__


def test_unset_knobs_add_only_the_interleavings_the_planners_split_lacks():
    job = _405b().model_copy(update={"constraints": Constraints(tp=(8,), pp=(16,), micro_batch_size=(1,))})
    shapes = enumerate_shapes(job).shapes
    plain = set(shapes.vp[~shapes.accounted].tolist())
    counted = set(shapes.vp[shapes.accounted].tolist())
    assert plain == {1} and counted == {2, 4, 8}  # 126 is not a multiple of 16; 128 slots are
    off = job.model_copy(update={"constraints": job.constraints.model_copy(
        update={"account_for_embedding": (False,), "account_for_loss": (False,)})})
    assert not enumerate_shapes(off).shapes.accounted.any()


def test_a_depth_that_interleaves_already_is_left_alone():
    """40 layers over pp 2 interleave evenly (vp 2 to 20): unset knobs add no accounted shape there
    (vp 21 over 42 slots would gain 0.02% on gpt3-13b), so such plans stay as they were."""
    job = load_job({"model": "gpt3-13b", "cluster": "a100x64", "constraints": {"pp": [2]}})
    assert not enumerate_shapes(job).shapes.accounted.any()


def test_other_frameworks_do_not_count_them():
    job = load_job({"model": "llama3.1-405b", "cluster": "h100x512", "framework": "torchtitan"})
    assert job.constraints.account_for_embedding == (False,)
    with pytest.raises(InputError) as e:
        plan_config(job, dict(tp=4, pp=16, vp=8, account_for_embedding=True, account_for_loss=True, zero=2))
    assert e.value.field == "account_for_embedding"


def test_evaluate_cli_states_and_reports_the_knobs(cli):
    code, out, err = cli("evaluate", "--model", "llama3.1-405b", "--cluster", "h100x512", "--global-batch-size",
                         "1536", "--precision", "fp8", "--tp", "4", "--pp", "16", "--vp", "8",
                         "--account-for-embedding", "--account-for-loss", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["parallel"]["account_for_embedding"] is True and d["parallel"]["account_for_loss"] is True
    assert d["layers_per_stage"] == [7] + [8] * 14 + [7]
    code, out, err = cli("evaluate", "--model", "llama3.1-405b", "--cluster", "h100x512", "--tp", "4", "--pp", "16",
                         "--vp", "8", "--account-for-embedding", "--account-for-loss")
    assert code == 0 and "split counts" in out and "embedding+loss" in out, err


@pytest.mark.parametrize("args, flag, says", [
    (["--pp", "16", "--vp", "8"], "--vp", "count the embedding / loss as layers"),
    (["--pp", "16", "--vp", "8", "--account-for-embedding"], "--account-for-embedding", "127 slots"),
    (["--pp", "16", "--vp", "3", "--account-for-embedding", "--account-for-loss"], "--vp", "not divisible by vp = 3"),
    (["--pp", "16", "--vp", "8", "--account-for-embedding", "--account-for-loss", "--layers-per-stage",
      ",".join(["8"] * 15 + ["6"])], "--layers-per-stage", "Megatron-LM splits them"),
])
def test_evaluate_cli_refuses_illegal_accountings_in_one_line(cli, args, flag, says):
    code, out, err = cli("evaluate", "--model", "llama3.1-405b", "--cluster", "h100x512", "--tp", "4", *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err and says in err, err


def test_megatron_args_benchmark_has_an_accounted_case():
    """benchmarks/megatron_args.py checks such plans with Megatron's own parse_args / validate_args."""
    text = (Path(__file__).resolve().parents[1] / "benchmarks" / "megatron_args.py").read_text()
    assert "embedding and loss counted as layers" in text and "account_for_loss" in text
    report = (Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "megatron_args.md").read_text()
    assert "embedding and loss counted as layers" in report


def test_shapes_default_to_the_planners_split():
    from solveplan.space.shapes import Shapes

    s = Shapes(*(np.zeros(2, dtype=np.int64) for _ in range(11)))
    assert s.account_for_embedding.dtype == bool and not s.accounted.any()


def test_compare_takes_the_knobs():
    from solveplan.cli.plan_cmds import parse_compare

    assert parse_compare("tp=4,pp=16,vp=8,account-for-embedding=on,account_for_loss=yes") == dict(
        tp=4, pp=16, vp=8, account_for_embedding=True, account_for_loss=True)
    with pytest.raises(InputError):
        parse_compare("account_for_loss=2")


def test_joint_placement_refuses_a_job_that_requires_the_accounting():
    from solveplan.search.joint.space import base_shapes

    job = load_job({"model": "llama3.1-8b", "cluster": "h100x16", "constraints": {"account_for_loss": [True]}})
    with pytest.raises(InputError) as e:
        base_shapes(job)
    assert e.value.field == "constraints.account_for_loss" and "leave it unset" in e.value.message
    free = load_job({"model": "llama3.1-8b", "cluster": "h100x16"})
    assert not base_shapes(free)[0].shapes.accounted.any()
