"""Megatron-LM's `--pipeline-model-parallel-layout` as an input (space/pipeline_layout.py): the
grammar of `parse_str_to_list`, the rules of `validate_layer_layout`, what the formulation prices
exactly, by a stated bound, or refuses, and the layout passed on unchanged to the launch. The
layout strings are others' (cited repo@commit:path:line)."""

from __future__ import annotations

import ast
import copy
import json
import re
import subprocess
from pathlib import Path

import pytest
import solveplan.catalog_published
from solveplan.calibration.moe_rows import moe_row_job
from solveplan.calibration.runs_fit import RowCase
from solveplan.catalog import load_cluster, load_model
from solveplan.errors import InputError
from solveplan.formulation.splits import default_layers
from solveplan.plan import plan_config
from solveplan.render.megatron import megatron_args
from solveplan.space.pipeline_layout import (
    MAX_LAYOUT_CHARS,
    Layout,
    layout_degrees,
    parse_layout,
    priced_split,
    read_layout,
)
from solveplan.specs import JobSpec

BRIDGE = "NVIDIA-NeMo/Megatron-Bridge@067f987df03b8355b03192d88d70f1709fedf51a"
MLM_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MLM = f"NVIDIA/Megatron-LM@{MLM_COMMIT}"
# Layout strings of Megatron-Bridge's recipes, at BRIDGE (NVIDIA-NeMo/Megatron-Bridge@067f987df0):
# DeepSeek-V3 on GB300 / B200, src/megatron/bridge/perf_recipes/deepseek/gb300/deepseek_v3.py:54 -- the
# published rows' recipe layout (published_runs_moe_newgpu.json `pp_layout`)
DSV3_GB300 = "Et*4|(t*4|)*14tmL"
DSV3_H100 = "Et|(tt|)*30mL"  # pp 8 x vp 4: BRIDGE:src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py:36-48
LLAMA3_70B_H100 = "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL"  # pp 8 x vp 5: BRIDGE:src/megatron/bridge/perf_recipes/llama/h100/llama3.py:167-170
GLM5_VPP2 = ("Et|t||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||tttt|tttt|tttt|tttt||tttt|"
             "tttt|ttttmL")  # pp 13 x vp 2: BRIDGE:src/megatron/bridge/recipes/glm/h100/glm5.py:33-35


def _dsv3(n_gpus: int = 256, **extra) -> JobSpec:
    return JobSpec(model=load_model("deepseek-v3"), cluster=load_cluster(f"b200x{n_gpus}"), global_batch_size=4096,
                   seq_length=4096, precision="mxfp8", **extra)


def _llama8b(**extra) -> JobSpec:
    return JobSpec(model=load_model("llama3.1-8b"), cluster=load_cluster("h100x64"), global_batch_size=256,
                   seq_length=4096, **extra)


# ----------------------------------------------------------------------------------------- grammar

def test_real_layouts_parse_to_their_stages():
    """Each recipe's stage sizes written out by hand (E, L, m not counted)."""
    cases = {
        DSV3_GB300: [4] + [4] * 14 + [1],
        DSV3_H100: [1] + [2] * 30 + [0],
        LLAMA3_70B_H100: [2] + [2] * 34 + [3] + [2] * 3 + [1],
        GLM5_VPP2: [1, 1, 0] + ([4] * 4 + [0]) * 4 + [4] * 3,
    }
    for text, sizes in cases.items():
        stages = parse_layout(text)
        assert [s.count("t") for s in stages] == sizes, text
        assert stages[0].startswith("E") and stages[-1].endswith("L")
    assert parse_layout(DSV3_GB300)[-1] == "tmL" and parse_layout(DSV3_H100)[-1] == "mL"


def test_grammar_edge_cases():
    assert parse_layout("E||t|L") == ["E", "", "t", "L"]  # empty stages are legal
    assert parse_layout("E(t*2|)*3L") == ["Ett", "tt", "tt", "L"]  # repetition inside a repeated group
    assert parse_layout("Et*12|L") == ["E" + "t" * 12, "L"]  # several digits
    assert parse_layout("E,t,t|t,L") == ["Ett", "tL"]  # commas are cosmetic
    assert parse_layout("E(tt)*0|t*0L") == ["E", "L"]  # zero repetitions
    assert parse_layout("(|t)*2,L") == ["", "t", "tL"]  # Megatron's docstring example shape: (|ab)*2,cd
    with pytest.raises(ValueError, match="invalid layer character '\\('"):
        parse_layout("E((t)*2)*3|L")  # Megatron's pattern does not nest: the outer '(' is left over
    with pytest.raises(ValueError, match="invalid layer character '\\*'"):
        parse_layout("Et*2*3|L")  # x*N*M is not a repetition of a repetition either
    with pytest.raises(ValueError, match="invalid layer character 'x'"):
        parse_layout("Ex|L")
    with pytest.raises(ValueError, match="invalid layer character ' '"):
        parse_layout("E t|L")
    with pytest.raises(ValueError, match="more than"):
        parse_layout("E(t*99999|)*99999L")  # refused before it is built
    assert len(parse_layout("E" + "t" * (MAX_LAYOUT_CHARS // 2) + "L")[0]) == MAX_LAYOUT_CHARS // 2 + 2


def _megatron_parser():
    """Megatron's own `parse_str_to_list`, its source read from the commit, run with its LayerType
    names; None when neither /tmp/mlm nor the mirror holds it."""
    rel = "megatron/core/transformer/pipeline_parallel_layer_layout.py"
    src = None
    if Path("/tmp/mlm", rel).exists():
        src = Path("/tmp/mlm", rel).read_text()
    else:
        mirror = Path("/work/.mirror/NVIDIA+Megatron-LM/repo")
        if mirror.exists():
            out = subprocess.run(["git", "-C", str(mirror), "show", f"{MLM_COMMIT}:{rel}"], capture_output=True, text=True)
            src = out.stdout if out.returncode == 0 else None
    if not src:
        return None
    tree = ast.parse(src)
    fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "parse_str_to_list")
    fn.decorator_list = []

    class LayerType:  # the names Megatron's enum gives the characters (megatron/core/transformer/enums.py)
        embedding, loss, decoder, mtp = "E", "L", "t", "m"

    scope = {"re": re, "LayerType": LayerType}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), "parse_str_to_list", "exec"), scope)
    return scope["parse_str_to_list"]


@pytest.mark.parametrize("text", [DSV3_GB300, DSV3_H100, LLAMA3_70B_H100, GLM5_VPP2, "E||t|L", "E(t*2|)*3L",
                                  "Et*12|L", "E,t,t|t,L", "E(tt)*0|t*0L", "(|t)*2,L", "E|t*3|(t|)*4tm|L",
                                  "E((t)*2)*3|L", "Et*2*3|L", "Ex|L"])
def test_same_stages_as_megatrons_own_parser(text):
    """Differential: Megatron's parse_str_to_list at d98e8a6 (executed from its source) and ours agree,
    refusals included."""
    megatron = _megatron_parser()
    if megatron is None:
        pytest.skip(f"{MLM} not on this machine")
    try:
        theirs = ["".join(stage) for stage in megatron(text)]
    except AssertionError:
        theirs = None
    try:
        ours = parse_layout(text)
    except ValueError:
        ours = None
    assert ours == theirs


# ------------------------------------------------------------------------------------- pp, vp, rules

def test_degrees_from_the_layout():
    assert layout_degrees(DSV3_GB300, 8, None) == (8, 2)
    assert layout_degrees(DSV3_GB300, 2, None) == (2, 8)
    assert layout_degrees(DSV3_GB300, None, 4) == (4, 4)
    assert layout_degrees(DSV3_GB300, 16, 1) == (16, 1)
    for pp, vp, match in ((3, None, "not divisible by pp = 3"), (8, 4, "conflicts"), (None, None, "give pp"),
                          (None, 3, "not divisible by vp = 3")):
        with pytest.raises(ValueError, match=match):
            layout_degrees(DSV3_GB300, pp, vp)


def test_chunks_follow_megatrons_rank_and_virtual_stage_order():
    """Stage i is virtual stage i // pp of rank i % pp; layer ids run in stage order (get_layer_offset),
    so a rank's layers are not contiguous with interleaving."""
    lay = read_layout(DSV3_H100, 8, load_model("deepseek-v3"))
    assert (lay.pp, lay.vp) == (8, 4)
    assert lay.chunk_layers[0] == [1, 2, 2, 2] and lay.chunk_layers[7] == [2, 2, 2, 0]
    assert lay.rank_layers == [7, 8, 8, 8, 8, 8, 8, 6]
    assert lay.layer_ranks()[:5] == [0, 1, 1, 2, 2]  # DeepSeek-V3's dense layers 1 and 2 on rank 1
    llama = read_layout(LLAMA3_70B_H100, 8, load_model("llama3.1-70b"))
    sizes = [2] + [2] * 34 + [3] + [2] * 3 + [1]
    assert llama.vp == 5 and llama.rank_layers == [sum(sizes[r::8]) for r in range(8)]


# (layout, pp, num_layers, mtp layers, what the one-line refusal says): every rule of validate_layer_layout;
# test_transformer_block.py is MLM:tests/unit_tests/transformer/test_transformer_block.py (list-form layouts there)
INVALID = [
    ("t*6|tL", 2, 7, 0, "first layer must be the embedding"),  # test_transformer_block.py:725 (no embedding)
    ("Et*6|t", 2, 7, 0, "last layer must be the loss"),  # test_transformer_block.py:727 (no loss)
    ("E|t*7|L", 2, 7, 0, None),  # 3 stages over pp 2: test_transformer_block.py:731 (read_layout's degrees)
    ("EtE|t*6L", 2, 7, 0, "embedding (E) must appear exactly once"),
    ("Et*7|LL", 2, 7, 0, "loss (L) must appear exactly once"),
    ("Et*5|tL", 2, 7, 0, "6 decoder layers"),
    ("Et*3|t*4L", 2, 7, 1, "0 MTP layers (m) but the model has mtp_num_layers 1"),
    ("Et*3|t*3mtL", 2, 7, 1, "decoder layers must be placed before MTP"),
    ("Et*3|t*4m|L|", 2, 7, 1, "before its last virtual stage"),
    ("Et*7m|mL", 2, 7, 2, "holds 1 of the 2 MTP layers"),
]


@pytest.mark.parametrize("text, pp, layers, mtp, match", INVALID)
def test_every_validation_rule_refuses_in_one_line(text, pp, layers, mtp, match):
    model = load_model("llama3.1-8b").model_copy(update={"num_layers": layers, "mtp_num_layers": mtp})
    with pytest.raises(ValueError) as exc:
        read_layout(text, pp, model)
    msg = str(exc.value)
    assert "\n" not in msg and (match is None or match in msg)
    assert match is None or ";" in msg  # the fix follows the rule


@pytest.mark.parametrize("text, pp, layers", [
    ("Et|t*4|t|tL", 2, 7),  # test_transformer_block.py:757-764 (accepted there)
    ("E|t*7||L", 2, 7),  # test_transformer_block.py:766, an empty stage
    ("E|t*6|t|L", 2, 7),  # test_transformer_block.py:768, standalone embedding and loss stages
])
def test_megatrons_accepted_layouts_are_read(text, pp, layers):
    model = load_model("llama3.1-8b").model_copy(update={"num_layers": layers})
    lay = read_layout(text, pp, model)
    assert sum(lay.rank_layers) == layers and lay.vp == 2


def test_hybrid_models_take_no_layout():
    with pytest.raises(ValueError, match="hybrid layer pattern"):
        read_layout("Et|tL", 2, load_model("nemotron3-nano"))


# ------------------------------------------------------------------------------------------ pricing

def test_a_layout_in_the_formulations_rules_is_priced_exactly():
    """A dense model's layout and a DeepSeek-V3 layout whose dense layers sit on rank 0 price exactly
    as the same split given as layers: no assumption beyond the layout's own line."""
    job = _llama8b()
    lay = plan_config(job, dict(tp=2, pp=4, pipeline_layout="Et*7|t*9|t*9|t*7L"))
    given = plan_config(job, dict(tp=2, pp=4, layers=[7, 9, 9, 7]))
    assert lay.layers_per_stage == [7, 9, 9, 7] and lay.parallel.vp == 1
    assert lay.step_time_s == given.step_time_s and lay.peak_memory_bytes == given.peak_memory_bytes
    inter = plan_config(job, dict(tp=2, pp=4, pipeline_layout="E(t*4|)*7t*4L"))
    assert inter.parallel.vp == 2 and inter.step_time_s == plan_config(job, dict(tp=2, pp=4, vp=2)).step_time_s
    units, notes = priced_split(load_model("deepseek-v3"), read_layout(DSV3_GB300, 2, load_model("deepseek-v3")))
    assert units == [29, 29] and not any("upper bound" in n for n in notes)


def test_dense_layers_off_rank_0_are_priced_by_a_stated_upper_bound():
    """Megatron-Bridge's H100 DeepSeek-V3 layout puts dense layers 1-2 on rank 1: priced there as MoE
    layers, rank 0 keeping the 3 dense layers the formulation prices; said in the assumptions."""
    job = _dsv3(1024)
    plan = plan_config(job, dict(tp=2, pp=8, ep=64, pipeline_layout=DSV3_H100))
    assert plan.layers_per_stage == [7, 8, 8, 8, 8, 8, 8, 6] and plan.parallel.vp == 4
    assert [s.layers for s in plan.stages] == plan.layers_per_stage  # what the layout holds, not what is priced
    bound = next(a for a in plan.assumptions if "upper bound" in a)
    assert "rank 0: 1 dense + 6 MoE, priced as 3 dense + 6 MoE" in bound
    assert "rank 1: 2 dense + 6 MoE, priced as 0 dense + 8 MoE" in bound
    assert any("[2, 2, 2, 0]" in a for a in plan.assumptions)  # uneven chunks, priced by the rank's total
    units, _ = priced_split(job.model, read_layout(DSV3_H100, 8, job.model))
    assert units == [6, 8, 8, 8, 8, 8, 8, 6]


@pytest.mark.parametrize("text, pp, match", [
    ("|Et|t|tL", 2, "embedding on pipeline rank 1"),
    ("Et|t|tL|", 2, "loss on pipeline rank 0"),
    ("E|t*3|(t|)*4tm|L", 4, "standalone MTP"),  # MLM:tests/unit_tests/pipeline_parallel/test_pipeline_layout.py:202
])
def test_what_the_formulation_does_not_model_is_refused_in_one_line(text, pp, match):
    model = load_model("llama3.1-8b").model_copy(update={"num_layers": 8 if "m" in text else 3,
                                                         "mtp_num_layers": int("m" in text)})
    lay = read_layout(text, pp, model)  # Megatron accepts each of them
    with pytest.raises(ValueError, match=match) as exc:
        priced_split(model, lay)
    assert "\n" not in str(exc.value) and "not modelled" in str(exc.value)


# ------------------------------------------------------------------------------------------- inputs

def test_config_key_errors_name_the_field():
    job = _dsv3()
    base = dict(tp=1, ep=32)
    for cfg, field, match in (
        (dict(pp=8, pipeline_layout="Et*4|(t*4|)*14tL"), "pipeline_layout", "MTP"),
        (dict(pp=8, vp=4, pipeline_layout=DSV3_GB300), "pipeline_layout", "conflicts"),
        (dict(pipeline_layout=DSV3_GB300), "pipeline_layout", "give pp"),
        (dict(pp=8, pipeline_layout=DSV3_GB300, layers=[8] * 7 + [5]), "layers", "cannot be given with"),
        (dict(pp=8, pipeline_layout=DSV3_GB300, account_for_loss=True), "account_for_loss", "cannot be given"),
        (dict(pp=8, pipeline_layout=["E", "L"]), "pipeline_layout", "must be a string"),
        (dict(pp=16, pipeline_layout="E|t*3|(t|)*4tm|L"), "pipeline_layout", None),
    ):
        with pytest.raises(InputError) as exc:
            plan_config(job, {**base, **cfg}, field="config")
        assert exc.value.field == f"config.{field}" and (match is None or match in exc.value.message)
    torch_job = _llama8b(framework="torchtitan")
    with pytest.raises(InputError, match="framework torchtitan"):
        plan_config(torch_job, dict(pp=2, pipeline_layout="Et*16|t*16L"))


def test_evaluate_takes_a_layout(cli):
    code, out, err = cli("evaluate", "--model", "deepseek-v3", "--cluster", "b200x256", "--global-batch-size", "4096",
                          "--precision", "mxfp8", "--tp", "1", "--pp", "8", "--ep", "32", "--pipeline-layout",
                          DSV3_GB300, "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["layers_per_stage"] == [8] * 7 + [5] and d["parallel"]["vp"] == 2
    assert d["parallel"]["pipeline_layout"] == DSV3_GB300
    code, out, err = cli("evaluate", "--model", "deepseek-v3", "--cluster", "b200x256", "--global-batch-size", "4096",
                          "--tp", "1", "--pp", "8", "--ep", "32", "--pipeline-layout", "Et*4|(t*4|)*14tL")
    assert code == 2 and "--pipeline-layout" in err and "mtp_num_layers 1" in err


# ------------------------------------------------------------------------------------ launch, rows

def test_the_launch_passes_the_layout_on_unchanged():
    """Round trip: the plan made from a layout renders that layout, which parses to the same stages;
    vp follows from it (no --num-virtual-stages-per-pipeline-rank) and the m is not added twice."""
    job = _dsv3()
    plan = plan_config(job, dict(tp=1, pp=8, ep=32, pipeline_layout=DSV3_GB300))
    ma = megatron_args(job, plan)
    flags = ma.flags()
    assert flags["--pipeline-model-parallel-layout"] == DSV3_GB300 == ma.layout
    assert "--num-virtual-stages-per-pipeline-rank" not in flags and flags["--mtp-num-layers"] == "1"
    again = read_layout(str(flags["--pipeline-model-parallel-layout"]), int(flags["--pipeline-model-parallel-size"]),
                        job.model)
    assert isinstance(again, Layout) and again.rank_layers == plan.layers_per_stage and again.vp == plan.parallel.vp
    assert "--account-for-embedding-in-pipeline-split" not in flags


def test_deepseek_v3_row_is_costed_with_its_layout():
    """The B200 row (pp 8 x vp 2) of the published MoE file: its recipe's layout puts 5 layers on the
    last rank and 8 on the first, where the balanced split of pipeline units put 7 and 10."""
    path = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"
    raw = next(r for r in json.loads(path.read_text())["measurements"]
               if r["id"] == "mbridge_perf-26.04.01-deepseek-v3-b200-mxfp8-256")
    row = moe_row_job(copy.deepcopy(raw))
    assert row.skipped is None and row.layout == DSV3_GB300
    assert any("layers per rank [8, 8, 8, 8, 8, 8, 8, 5]" in a for a in row.assumed)
    assert not any("balanced split" in a for a in row.assumed)
    case = RowCase(row)
    model = row.job_spec.model
    assert {tuple(model.units_to_layers(u)) for u in case.layers.tolist()} == {(8, 8, 8, 8, 8, 8, 8, 5)}
    balanced = default_layers(model, 8, 2)
    assert balanced == [10, 7, 7, 8, 8, 7, 7, 7]  # what the row was costed with before
    row.layout = None
    before = RowCase(row).predict()[0]
    row.layout = DSV3_GB300
    after = case.predict()[0]
    assert after != before  # the first rank's 10 layers were the bottleneck of the balanced split


def test_the_bounds_premise_holds_for_deepseek_v3():
    """The bound prices a dense layer off rank 0 as a MoE layer: in the formulation a DeepSeek-V3 MoE
    layer costs at least a dense one in time, model state and activations (a dense layer's terms are
    the first stage's extras of the real model less those of an all-MoE copy, over its 3 dense layers)."""
    from solveplan.formulation.job import job_coefficients
    from solveplan.space.shapes import Shapes

    model = load_model("deepseek-v3")
    shape = Shapes.single(tp=2, pp=8, dp=64, vp=4, ep=64, etp=1, recompute="selective", sequence_parallel=True, zero=1)
    co = [job_coefficients(JobSpec(model=m, cluster=load_cluster("h100x1024"), global_batch_size=8192,
                                   seq_length=4096), shape)
          for m in (model, model.model_copy(update={"moe_layer_pattern": (1,) * 61}))]
    for first, layer in (("first_s", "layer_s"), ("first_static_bytes", "layer_static_bytes"),
                         ("first_act_bytes", "layer_act_bytes")):
        dense = (getattr(co[0], first)[0] - getattr(co[1], first)[0]) / 3
        assert 0 < dense <= getattr(co[0], layer)[0], first
