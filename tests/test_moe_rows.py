"""The published MoE runs (published_runs_moe_newgpu.json, category A) as validation rows: what
each row states reaches the job, the model is the catalog entry the row names and agrees with
the dimensions the row states, and every row that cannot be predicted says why in one line."""

from __future__ import annotations

import copy
import json
import typing
from collections import Counter
from pathlib import Path

import pytest

import solveplan.catalog_published
from solveplan.calibration.moe_rows import moe_row_job, unpriced_reason
from solveplan.calibration.rows import published_rows
from solveplan.specs import JobSpec

PATH = Path(solveplan.catalog_published.__file__).parent / "published_runs_moe_newgpu.json"  # the shipped copy
RAW = json.loads(PATH.read_text())["measurements"]
ROWS = published_rows([str(PATH)])
BY_ID = {r.id: r for r in ROWS}
# every reason a row of this file may be skipped for, today
REASONS = ("is not in the catalog", "has no catalog entry", "architecture is not priced",
           "no legal configuration matches what the row states",
           # the file's dense rows (calibration.rows.skip_reason)
           "fine-tuning", "offloads activations to the Grace CPU, but neither the row")


def _raw(row_id):
    return copy.deepcopy(next(r for r in RAW if r["id"] == row_id))


def test_every_row_is_read_or_skipped_with_a_stated_reason():
    assert len(ROWS) == 169 and sum(r.raw["category"] == "A" for r in ROWS) == 105
    for r in ROWS:
        if r.skipped:
            assert any(why in r.skipped for why in REASONS), (r.id, r.skipped)
            assert "\n" not in r.skipped
    readable = [r for r in ROWS if r.job is not None and r.raw["category"] == "A"]
    counts = Counter(r.raw["model"]["key"] for r in readable)
    # every MoE model of the catalog the file measures is read (on H100, B200, GB200, GB300, B300)
    assert set(counts) == {"deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "mixtral-8x7b",
                           "mixtral-8x22b", "llama4-scout", "kimi-k2", "nemotron3-nano", "nemotron3-super",
                           "nemotron3-ultra", "deepseek-v4-flash"}, counts
    assert not [r.id for r in ROWS if r.skipped and "architecture is not priced" in r.skipped]  # DeepSeek-V4 read
    assert len(readable) >= 70


def test_the_row_states_reach_the_job():
    r = BY_ID["mbridge_perf-25.09-deepseek-v3-h100-sxm5-80gb-fp8-1024"]
    c, job = r.job.constraints, r.job
    assert (c.tp, c.pp, c.cp, c.ep, c.vp, c.micro_batch_size) == ((2,), (8,), (1,), (64,), (4,), (1,))
    assert job.global_batch_size == r.raw["parallel"]["gbs"] and job.seq_length == 4096
    assert job.cluster.num_gpus == 1024 and job.cluster.gpu.name.startswith("h100")
    assert job.model.num_experts == 256 and job.model.multi_latent_attention and job.model.num_moe_layers == 58
    # tokens/s per GPU -> step time: gbs x seq / (tokens/s/GPU x GPUs)
    me = r.raw["measured"]["tokens_per_s_per_gpu"]
    assert r.measured_s == pytest.approx(job.global_batch_size * 4096 / (me * 1024), rel=1e-4)  # derived, rounded
    # the row's FSDP column says "no (DDP)": the distributed optimizer or not, never Megatron-FSDP
    assert r.raw["parallel"]["fsdp"] == "no (DDP)" and c.zero == (0, 1)
    assert any("no FSDP (the source's column)" in a for a in r.assumed)


def test_a_recipe_matched_on_vp_that_sets_none_reads_as_no_interleaving():
    """Megatron-Bridge's table prints VP "n/a" (the file: null); the recipe matched on it sets no vp: vp 1, not the
    best legal 9 an unstated vp would take. Without a recipe, or under another source, vp stays free."""
    row_id = "mbridge_perf-26.04.01-gpt-oss-120b-h100-sxm5-80gb-bf16-64"
    raw = _raw(row_id)
    assert raw["parallel"]["pp"] == 4 and raw["parallel"]["vp"] is None and raw["parallel"]["other"]["recipe"]
    row = BY_ID[row_id]
    assert row.job.constraints.vp == (1,)
    assert any("matched recipe sets no virtual pipeline" in a for a in row.assumed)
    raw["parallel"]["other"].pop("recipe")
    assert moe_row_job(raw).job.constraints.vp is None
    other = _raw(row_id) | {"source": "another_source"}
    assert moe_row_job(other).job.constraints.vp is None
    dense = BY_ID["mbridge_perf-26.02.01-llama3-70b-gb300-mxfp8-64"]  # n/a in the table, no recipe attached
    assert dense.raw["parallel"]["vp"] is None and dense.job.constraints.vp is None


def test_recipe_knobs_and_labels_are_read():
    q = BY_ID["mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16"]
    assert q.job.constraints.etp == (1,) and q.job.constraints.recompute == ("none",)
    assert q.job.constraints.sequence_parallel == (False,)
    no_mtp = moe_row_job(_raw("mbridge_perf-25.11-deepseek-v3-gb200-bf16-256") | {
        "hardware": {"gpu": "B200"}})  # the row's GPU moved to a catalog one, to read its model
    assert no_mtp.job.model.mtp_num_layers == 0  # "without MTP (per model label)"
    drop = BY_ID["mbridge_perf-25.09-qwen3-235b-a22b-h100-sxm5-80gb-fp8-256"]
    assert drop.job.model.moe_expert_capacity_factor == 1.0 and any("capacity" in a for a in drop.assumed)


def test_precision_recipes():
    allowed = typing.get_args(JobSpec.model_fields["precision"].annotation)
    cs = BY_ID["mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16"].job.precision
    assert cs == ("fp8-tensorwise" if "fp8-tensorwise" in allowed else "fp8")
    raw = _raw("mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16")
    raw["precision"] = "nvfp4"
    raw["hardware"]["gpu"] = "NVIDIA GB200 NVL72"  # NVFP4 needs Blackwell's FP4 tensor cores
    fp4 = moe_row_job(raw)
    assert fp4.skipped is None and fp4.job.precision == "nvfp4"
    # Megatron-Bridge's bf16_with_nvfp4_mixed: NVFP4 weights gathered, no BF16 layers unless stated
    assert fp4.job.fp8_param_gather and (fp4.job.bf16_layers_at_start, fp4.job.bf16_layers_at_end) == (0, 0)
    raw["parallel"].setdefault("other", {}).setdefault("recipe", {}).update(
        first_last_layers_bf16=True, num_layers_at_start_in_bf16=1, num_layers_at_end_in_bf16=2)
    stated = moe_row_job(raw)
    assert (stated.job.bf16_layers_at_start, stated.job.bf16_layers_at_end) == (1, 2)
    assert any("1 / 2" in a for a in stated.assumed)


def test_no_nvfp4_row_is_refused_for_its_precision():
    """Every NVFP4 row of the file is read (the dense ones predicted), or skipped for a reason other
    than its precision (Nemotron 3 Super: no catalog entry, its hybrid MTP block)."""
    fp4 = [r for r in ROWS if "nvfp4" in str(r.raw.get("precision", "")).lower()]
    assert len(fp4) == 15
    assert all(r.skipped is None or "fp4" not in r.skipped.lower() for r in fp4)
    read = [r for r in fp4 if r.skipped is None]
    assert len(read) >= 8 and all(r.job.precision == "nvfp4" and r.measured_s > 0 for r in read)
    assert all(r.skipped.startswith("Nemotron 3 Super") for r in fp4 if r.skipped)


def test_a_row_disagreeing_with_the_catalog_is_skipped_with_the_difference():
    raw = _raw("mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16")
    raw["model"]["layers"] = 47
    assert "states layers 47" in moe_row_job(raw).skipped
    raw = _raw("mbridge_perf-25.09-deepseek-v3-h100-sxm5-80gb-fp8-1024")
    raw["model"]["mla"]["kv_lora_rank"] = 256
    assert "kv_lora_rank 256" in moe_row_job(raw).skipped


def test_a_stated_knob_no_configuration_can_run_is_taken_as_unstated_and_said():
    """The 25.09 DeepSeek-V3 GB200 row states ep 64 with pp 8 on 256 GPUs: 32 GPUs per stage, which an
    EP group of 64 cannot fit (Megatron carves EP out of a stage's tp*cp*dp; the table's "PP 4 (8)" gives
    the parenthesised run its own pp beside the one EP). The run ran: ep takes its best legal value, and
    the row says which rule the stated value broke. The other stated knobs stay as stated."""
    row = BY_ID["mbridge_perf-25.09-deepseek-v3-gb200-mxfp8-256"]
    assert row.skipped is None and row.job is not None
    cons = row.job.constraints
    assert cons.ep is None and cons.pp == (8,) and cons.tp == (1,)
    said = [a for a in row.assumed if a.startswith("ep as stated breaks Megatron's rules")]
    assert len(said) == 1 and "the 32 GPUs of a pipeline stage" in said[0]
    raw = _raw("mbridge_perf-25.09-deepseek-v3-gb200-mxfp8-256")
    raw["parallel"]["ep"] = 32
    read = moe_row_job(raw)
    assert read.skipped is None and read.job.constraints.ep == (32,)
    assert not any("breaks Megatron's rules" in a for a in read.assumed)


def test_a_row_no_configuration_can_run_says_which_rule_it_breaks():
    """A GPU count the stated tp*cp*pp does not divide blames no single knob of the row: skipped, naming the rule."""
    raw = _raw("mbridge_perf-25.09-deepseek-v3-gb200-mxfp8-256")
    raw["parallel"].update(num_gpus=250, ep=2)
    why = moe_row_job(raw).skipped
    assert why.startswith("no legal configuration") and "tp/cp/pp: tp*cp*pp = 1*1*8 = 8 does not divide" in why, why


def test_mixture_of_experts_rows_are_priced():
    """MoE is priced: no readable row waits for it (`unpriced_reason` is None for every model)."""
    readable = [r for r in ROWS if r.job is not None]
    assert readable and all(unpriced_reason(r.job.model) is None for r in readable)


def test_recipe_dispatcher_and_overlap_become_job_settings():
    """The matched recipe's flex dispatcher (a named backend) and all-to-all overlap are what the row
    runs; a row without a recipe leaves the dispatcher to the best legal value and runs without the overlap
    (Megatron-Core's default, as most released runs that settle it), both said in `assumed`."""
    if "moe_token_dispatcher" not in JobSpec.model_fields:
        pytest.skip("the job schema has no MoE dispatcher setting")
    ds = BY_ID["mbridge_perf-26.04.01-deepseek-v3-b200-mxfp8-256"]
    assert ds.job.moe_token_dispatcher == "flex" and ds.job.moe_a2a_overlap is True
    q = BY_ID["mbridge_perf-26.04.01-qwen3-235b-a22b-b200-mxfp8-256"]  # recipe: no backend, overlap off
    assert q.job.moe_token_dispatcher == "alltoall" and q.job.moe_a2a_overlap is False
    bare = BY_ID["mbridge_perf-25.11-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16"]  # no recipe, after the EP overlap
    assert any("moe_token_dispatcher" in a and "best legal" in a for a in bare.assumed)
    assert bare.job.moe_a2a_overlap is False and any("overlap not stated: off" in a for a in bare.assumed)
    old = BY_ID["nemo_docs_2502-mixtral-8x7b-b200-fp8-64"]  # no recipe, before it: the dispatcher alone is free
    assert any("moe_token_dispatcher" in a and "moe_a2a_overlap" not in a and "best legal" in a for a in old.assumed)


def test_a_preset_recipe_that_leaves_the_overlap_unset_runs_without_it():
    """Megatron-Bridge's WorkloadBaseConfig presets (tags before v0.6.0) default moe_a2a_overlap to False
    and only ever turn it on: a matched preset that does not set it states no overlap. A v0.6.0 recipe
    states it through the helper the file names (`moe_recipes.HELPER_SETTINGS`: the 26.08 Qwen3 recipes'
    `_enable_hybridep_full_iteration_mxfp8` turns it on; tests/test_moe_recipe_helpers.py)."""
    r = BY_ID["mbridge_perf-26.04.01-gpt-oss-120b-b300-bf16-64"]  # v0.4.2 preset: CUDA graphs, hybridep
    assert "moe_a2a_overlap" not in r.raw["parallel"]["other"]["recipe"] and r.job.moe_a2a_overlap is False
    assert BY_ID["mbridge_perf-26.04.01-gpt-oss-120b-gb200-bf16-64"].job.moe_a2a_overlap is True  # set there
    late = BY_ID["mbridge_perf-26.08-qwen3-30b-a3b-gb300-mxfp8-8"]  # v0.6.0, its helper sets it
    assert late.job.moe_a2a_overlap is True and not any("overlap not stated" in a for a in late.assumed)


def test_the_source_precision_settings_reach_the_job():
    """NVIDIA's performance scripts reduce gradients in bf16 (grad_reduce_in_fp32 = False) and
    Megatron-Bridge's FP8 precision configs keep FP8 primary weights (fp8_param_gather = True), except
    the blockwise recipe; BF16 runs have no FP8 weights."""
    mx = BY_ID["mbridge_perf-26.04.01-deepseek-v3-b200-mxfp8-256"].job
    assert mx.grad_reduce_dtype == "bf16" and mx.fp8_param_gather is True
    assert BY_ID["mbridge_perf-26.06-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16"].job.fp8_param_gather is True
    block = BY_ID["mbridge_perf-25.09-deepseek-v3-h100-sxm5-80gb-fp8-blockwise-1024"].job
    assert block.precision == "fp8-blockwise" and block.fp8_param_gather is False
    bf = BY_ID["mbridge_perf-26.04.01-gpt-oss-120b-b300-bf16-64"].job
    assert bf.grad_reduce_dtype == "bf16" and bf.fp8_param_gather is False
    # NeMo 2.0's performance scripts keep FP8 weights too, except under Megatron FSDP
    assert BY_ID["nemo_docs_2502-mixtral-8x7b-b200-fp8-64"].job.fp8_param_gather is True
    assert BY_ID["nemo_docs_2507-llama4-scout-gb200-fp8-cs-64"].job.fp8_param_gather is True
    assert BY_ID["nemo_docs_2507-llama3.1-405b-gb200-fp8-cs-128"].job.fp8_param_gather is False  # FSDP=1


def test_a_dense_row_of_the_same_source_runs_the_same_precision_config():
    """Megatron-Bridge's dense performance recipes take the same precision configs (_perf_precision), so a
    dense FP8 row keeps FP8 weights too: without them Llama 3.1 405B on 256 GB200 (tp4 pp16 vp4, as the
    recipe runs it, without recompute) would not fit and would be priced with full recompute."""
    cs = BY_ID["mbridge_perf-26.04.01-llama3.1-405b-gb200-fp8-cs-256"]
    assert not cs.job.model.is_moe and cs.job.fp8_param_gather is True
    assert any("fp8_param_gather" in a for a in cs.assumed)
    assert BY_ID["mbridge_perf-26.04.01-llama3-70b-gb300-mxfp8-64"].job.fp8_param_gather is True
    assert BY_ID["mbridge_perf-25.11-llama3.1-405b-b200-fp8-cs-128"].job.fp8_param_gather is True
    assert BY_ID["mbridge_perf-26.04.01-gpt-oss-120b-b300-bf16-64"].job.fp8_param_gather is False  # BF16


def test_a_family_recompute_fixed_by_the_source_scripts_is_read():
    """Megatron-Bridge runs every DeepSeek-V3 performance config with selective recomputation: a
    DeepSeek row stating no recompute is selective, its modules one of the presets' sets (the best
    legal one), said in `assumed`; a row stating its modules keeps them."""
    from solveplan.calibration.moe_recipes import FAMILY_RECOMPUTE

    sets = FAMILY_RECOMPUTE[("mbridge_perf", "deepseek-moe")][1]
    bare = BY_ID["mbridge_perf-25.11-deepseek-v3-gb200-bf16-256"]
    assert bare.raw["parallel"]["recompute"] == "not stated"
    assert bare.job.constraints.recompute == ("selective",) and bare.job.recompute_modules in sets
    assert any("recompute selective" in a for a in bare.assumed)
    stated = BY_ID["mbridge_perf-26.04.01-deepseek-v3-gb200-mxfp8-256"]
    assert stated.job.recompute_modules == ("mlp",)
    qwen = BY_ID["mbridge_perf-25.11-qwen3-235b-a22b-b200-mxfp8-64"]  # no family rule: best legal value
    assert qwen.job.constraints.recompute is None


def test_a_row_of_a_source_whose_scripts_are_unread_takes_the_gradient_dtype_and_fp8_weights_that_fit():
    """A MoE row of another source (one the project has read no launch scripts of) leaves the gradient dtype,
    the FP8 weights and selective recomputation's modules unstated: the best that fits, as its unstated
    knobs. Megatron-LM's defaults (fp32 reduction, no FP8 weights) would leave DeepSeek-V3 on 256 GB300 at its
    published layout no room without Megatron-FSDP's sharded gradients, 35% slower than the distributed
    optimizer it ran; with Megatron's default selective module (core_attn) alone, DeepSeek-V3 on 256 GB200
    fits only with full recomputation."""
    from solveplan.calibration.moe_recipes import MOE_RECOMPUTE_PRESETS
    from solveplan.calibration.rows import row_job
    from solveplan.calibration.runs_fit import RowCase

    raw = _raw("mbridge_perf-26.08-deepseek-v3-gb300-mxfp8-256")
    raw.update(id="another-source-deepseek-v3-gb300", source="another_source")
    raw["parallel"]["other"] = None  # no recipe: dispatcher, overlap and graphs unstated too
    row = row_job(raw)
    assert row.skipped is None
    assert row.job.grad_reduce_dtype == "bf16"
    case = RowCase(row)
    _, k, fits = case.predict()
    assert fits and case.shapes.row(k)["zero"] == 1  # the distributed optimizer, not sharded gradients
    assert any("gradient dtype and FP8 weights unknown" in a for a in row.assumed)
    bare = _raw("mbridge_perf-25.11-deepseek-v3-gb200-mxfp8-256")  # recompute not stated either
    bare.update(id="another-source-deepseek-v3-gb200", source="another_source")
    row = row_job(bare)
    assert row.job.constraints.recompute is None and row.job.recompute_modules in MOE_RECOMPUTE_PRESETS
    case = RowCase(row)
    _, k, fits = case.predict()
    assert fits and case.shapes.row(k)["recompute"] == "selective"  # not full: a preset's modules fit
    ours = BY_ID["mbridge_perf-26.08-deepseek-v3-gb300-mxfp8-256"]  # the source whose scripts say so
    assert ours.job.grad_reduce_dtype == "bf16" and not any("unknown" in a for a in ours.assumed)


def test_recipe_cuda_graphs_become_job_settings():
    """A recipe's --cuda-graph-impl and scope reach the job; a preset that sets none runs without (its base
    recipe: cuda_graph_impl "none"); a row without a recipe takes the most graphed setting its container
    could run (per-layer graphs of attention, router and preprocessing before 26.06, whose Megatron-Core
    first graphs a whole dropless MoE iteration), said in `assumed`."""
    te = BY_ID["mbridge_perf-26.04.01-qwen3-30b-a3b-gb300-mxfp8-8"].job
    assert (te.cuda_graph_impl, te.cuda_graph_modules) == ("transformer_engine", ("moe_router", "moe_preprocess"))
    full = BY_ID["mbridge_perf-26.08-qwen3-30b-a3b-gb300-mxfp8-8"].job
    assert full.cuda_graph_impl == "full_iteration" and full.moe_token_dispatcher == "flex"
    assert BY_ID["mbridge_perf-26.04.01-qwen3-235b-a22b-b200-mxfp8-256"].job.cuda_graph_impl == "none"
    bare = BY_ID["mbridge_perf-25.11-qwen3-235b-a22b-b200-mxfp8-64"]
    assert (bare.job.cuda_graph_impl, bare.job.cuda_graph_modules) == (
        "transformer_engine", ("attn", "moe_router", "moe_preprocess"))
    assert any("best legal" in a and "cuda_graph" in a for a in bare.assumed)


def test_an_unnamed_fp8_recipe_is_the_sources_current_scaling():
    """The 25.09 tables print FP8 without its recipe; Megatron-Bridge's 25.09 perf matrix lists per-tensor
    current scaling (fp8_cs) beside the parenthesized MXFP8 / blockwise entries: the row is fp8-tensorwise."""
    r = BY_ID["mbridge_perf-25.09-qwen3-30b-a3b-h100-sxm5-80gb-fp8-16"]
    assert "not stated" in r.raw["precision"] and r.job.precision == "fp8-tensorwise"
    assert any("perf matrix" in a for a in r.assumed)
    assert BY_ID["mbridge_perf-25.09-qwen3-30b-a3b-gb200-mxfp8-8"].job.precision == "mxfp8"


def test_kimi_k2_rows_read_from_the_catalog_entry_their_source_cites():
    """Kimi K2's rows cite Megatron-MoE-ModelZoo's Kimi-K2.yaml, which the catalog entry follows;
    the Muon optimizer the page notes is not priced, and the row says so."""
    r = BY_ID["mbridge_perf-26.06-kimi-k2-gb300-mxfp8-256"]
    assert r.skipped is None and r.job.model.name == "kimi-k2" and r.job.model.num_moe_layers == 60
    assert any("Muon optimizer" in a and "costed as Adam" in a for a in r.assumed)
    no_muon = _raw("mbridge_perf-26.06-kimi-k2-gb300-mxfp8-256")
    no_muon["notes"] = [n for n in no_muon["notes"] if "muon" not in n.lower()]
    assert not any("Muon" in a for a in moe_row_job(no_muon).assumed)


def test_a_row_key_names_its_catalog_entry():
    """Any catalog entry a row's key names is read (and checked against the row's dimensions); a key no entry
    has reads as the entry the row's name spells; naming none, and with a shape no entry has (and no
    vocabulary to build one from), it is skipped, saying so."""
    raw = _raw("mbridge_perf-26.06-kimi-k2-gb300-mxfp8-256")
    raw["model"]["key"] = "deepseek-v2"
    assert moe_row_job(raw).skipped == "the row states layers 61, the catalog's deepseek-v2 has 60"
    raw["model"]["key"] = "no-such-model"
    assert moe_row_job(raw).job.model.name == "kimi-k2"
    raw["model"].update(name="Model X", hidden=8192)
    assert "has no catalog entry" in moe_row_job(raw).skipped


@pytest.mark.parametrize("row_id, dispatcher, overlap", [
    ("mbridge_perf-25.09-qwen3-30b-a3b-h100-sxm5-80gb-fp8-16", "alltoall", False),
    ("mbridge_perf-25.09-qwen3-235b-a22b-gb200-fp8-64", "alltoall", False),
    ("mbridge_perf-25.09-deepseek-v3-b200-fp8-256", "alltoall", False),
    ("mbridge_perf-25.09-deepseek-v3-h100-sxm5-80gb-fp8-1024", "flex", True)])
def test_25_09_rows_take_the_settings_of_megatron_bridge_v0_1_0rc3_scripts(row_id, dispatcher, overlap):
    """The 25.09 rows carry no recipe; Megatron-Bridge v0.1.0rc3's run_script.py fixes the dispatcher and
    the EP overlap per model (moe_rows.SCRIPTS_2509): Qwen3 token-drop runs on alltoall without overlap,
    DeepSeek-V3 with DeepEP and the 1F1B overlap on H100, token-drop alltoall without it elsewhere. They are
    stated, not left to the best value; rows of later containers do not take them."""
    row = BY_ID[row_id]
    assert row.raw["container"] == "25.09" and not (row.raw["parallel"].get("other") or {}).get("recipe")
    job = row.job_spec
    assert (job.moe_token_dispatcher, job.moe_a2a_overlap) == (dispatcher, overlap)
    assert any("v0.1.0rc3" in a for a in row.assumed)
    assert not any(k in a for a in row.assumed if a.startswith("unstated") for k in ("dispatcher", "a2a_overlap"))


def test_25_09_deepseek_rows_take_the_scripts_recompute_modules():
    """v0.1.0rc3: selective recomputation of mla_up_proj + mlp on H100, + moe_act on GB200 -- stated, not
    the best of the family's presets; B200's (its script's entry is another layout) stays the presets' best,
    which fits: every 25.09 row is predicted to fit in memory, as it ran."""
    want = {"h100-sxm5-80gb-fp8-1024": ("mla_up_proj", "mlp"), "gb200-fp8-256": ("mla_up_proj", "mlp", "moe_act")}
    for tail, mods in want.items():
        job = BY_ID[f"mbridge_perf-25.09-deepseek-v3-{tail}"].job_spec
        assert job.constraints.recompute == ("selective",) and tuple(job.recompute_modules) == mods
    from solveplan.calibration.runs_fit import RowCase

    for r in ROWS:
        if r.raw.get("container") == "25.09" and r.raw.get("category") == "A" and not r.skipped:
            assert RowCase(r).predict()[2], r.id


def test_the_25_09_script_settings_reach_no_row_of_another_container():
    from solveplan.calibration.moe_recipes import scripts_2509_recipe

    raw = _raw("mbridge_perf-25.09-qwen3-30b-a3b-h100-sxm5-80gb-fp8-16")
    assert scripts_2509_recipe(raw, [])["moe_a2a_overlap"] is False
    raw["container"] = "25.11"
    assert scripts_2509_recipe(raw, []) == {}
    for r in ROWS:
        if r.raw.get("container") != "25.09" and not r.skipped:
            assert not any("v0.1.0rc3" in a for a in r.assumed), r.id


def test_containers_older_than_megatrons_ep_overlap_run_without_it():
    """--overlap-moe-expert-parallel-comm arrived in Megatron-Core on 2025-08-01 (moe_rows.EP_OVERLAP_FROM):
    NeMo 25.02 / 25.04 / 25.07 rows are priced without it because it did not exist; a later row that states
    nothing runs without it too, Megatron-Core's default (said differently)."""
    for row_id in ("nemo_docs_2502-mixtral-8x7b-b200-fp8-64", "nemo_docs_2504-mixtral-8x22b-gb200-fp8-cs-256",
                   "nemo_docs_2507-llama4-scout-gb200-fp8-cs-64"):
        row = BY_ID[row_id]
        assert row.job_spec.moe_a2a_overlap is False
        assert any("predates Megatron-Core" in a for a in row.assumed)
    later = BY_ID["mbridge_perf-25.11-qwen3-30b-a3b-h100-sxm5-80gb-fp8-cs-16"]
    assert any("overlap not stated: off" in a for a in later.assumed)
    assert not any("predates Megatron-Core" in a for a in later.assumed)


@pytest.mark.parametrize("key", ["deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "kimi-k2", "mixtral-8x7b",
                                 "mixtral-8x22b"])
def test_a_model_without_a_catalog_entry_is_built_from_the_shape_its_row_states(key):
    """A run of a model the catalog lacks (named nothing it has, of a shape none has) is priced from its stated
    shape, not refused: each catalog model's row rebuilds it to the parameter (total and active; the row's
    vocabulary given where the file leaves it to the catalog), and the defaults it takes are said."""
    from solveplan.calibration.moe_row_model import stated_moe_model
    from solveplan.catalog import catalog_models

    raw = copy.deepcopy(next(r for r in RAW if r["model"].get("key") == key and r["category"] == "A"))
    catalog = catalog_models()[key]
    m = {**raw["model"], "key": f"unknown-{key}", "vocab": raw["model"].get("vocab") or catalog.vocab_size}
    assumed: list[str] = []
    built = stated_moe_model(m, assumed)
    assert (built.num_params, built.num_active_params) == (catalog.num_params, catalog.num_active_params)
    assert any("stated shape" in a and "SwiGLU" in a for a in assumed)
    anon = copy.deepcopy(raw)
    anon["model"].update(m, name="Model X", layers=m["layers"] + 1)  # a shape no catalog entry has
    row = moe_row_job(anon)
    assert row.skipped is None and row.measured_s and any("stated shape" in a for a in row.assumed)


def test_a_stated_shape_that_cannot_be_built_names_the_field():
    ds = copy.deepcopy(next(r for r in RAW if r["model"].get("key") == "deepseek-v3"))
    ds["model"].update(key="unknown-v3", name="Model X", vocab=None, layers=62)
    assert "states no vocab: add models/<key>.yaml" in moe_row_job(ds).skipped
    oss = copy.deepcopy(next(r for r in RAW if r["model"].get("key") == "gpt-oss-120b"))
    oss["model"].update(key="unknown-oss", name="Model Y", layers=37)
    assert "sliding-window" in moe_row_job(oss).skipped  # the window's layers are in no row field


def test_the_stated_layer_pattern_and_shared_experts_are_read():
    from solveplan.calibration.moe_row_model import moe_layer_pattern, shared_expert_size

    assert moe_layer_pattern("all layers MoE", 4) is None and moe_layer_pattern(None, 4) is None
    assert moe_layer_pattern("first 3 layers dense, 58 MoE", 61) == (0, 0, 0) + (1,) * 58
    assert moe_layer_pattern("first layer dense, 60 MoE", 61) == (0,) + (1,) * 60
    assert moe_layer_pattern("every other layer", 4) == (1, 0, 1, 0)  # Megatron's --moe-layer-freq 2
    assert "not a pattern this reader knows" in moe_layer_pattern("layers 5-9 MoE", 10)
    # Megatron's own forms: the integer --moe-layer-freq and the list expression moe_freq_type evaluates
    assert moe_layer_pattern(2, 4) == moe_layer_pattern("2", 4) == (1, 0, 1, 0) and moe_layer_pattern("1", 4) is None
    assert moe_layer_pattern("every 4th layer", 8) == (1, 0, 0, 0, 1, 0, 0, 0)
    assert moe_layer_pattern("[0]*3+[1]*58", 61) == moe_layer_pattern("first three layers dense", 61) == \
        moe_layer_pattern("first_k_dense_replace: 3", 61) == (0, 0, 0) + (1,) * 58
    assert moe_layer_pattern("([0]*1+[1]*1)*24", 48) == (0, 1) * 24  # Llama 4 Maverick, as render/megatron_moe writes it
    for bad in ("[0]*3+[1]*58", "[2]*61", "[1]*10**9", "[1]*99999999999", "__import__('os')"):
        assert "moe_layer_freq" in moe_layer_pattern(bad, 60)  # wrong length, not 0/1, a power, a call: refused
    assert shared_expert_size("1 (2048)", 768) == 2048 and shared_expert_size("2 (1408)", 768) == 2816
    assert shared_expert_size(2, 768) == 1536 and shared_expert_size(0, 768) is None
    assert shared_expert_size(None, 768) is None


@pytest.mark.parametrize("row_id", ["mbridge_perf-25.09-qwen3-30b-a3b-gb200-fp8-8",
                                    "mbridge_perf-26.04.01-gpt-oss-120b-gb200-bf16-64",
                                    "mbridge_perf-26.08-nemotron3-super-gb300-mxfp8-64"])
def test_a_row_of_another_file_without_category_or_key_reads_as_the_named_catalog_entry(row_id):
    """A kept-aside file of another schema: a MoE row that carries no `category` is still the MoE reader's
    (not refused as "not registered"), and one that states no catalog key is read from its name, to the same job."""
    from solveplan.calibration.rows import row_job

    raw = _raw(row_id)
    other = copy.deepcopy(raw)
    other.pop("category")
    other["model"].pop("key")
    row = row_job(other)
    assert row.skipped is None and row.job == row_job(raw).job
    assert any("read as the catalog's" in a for a in row.assumed)


def test_a_row_naming_a_catalog_moe_model_but_stating_no_experts_or_ep_is_the_moe_readers():
    """Nemotron 3.5 Lightning is filed as dense (category B) and its only MoE mark is EP 8; restated by a source
    that leaves EP out, the dense reader refused it ("model architecture not stated"). The catalog entry its key
    (or, with no key, its name) names is MoE, so the MoE reader reads it, its EP the best legal value."""
    from solveplan.calibration.rows import row_job

    raw = _raw("mbridge_perf-26.08-nemotron3.5-lightning-gb200-mxfp8-8")
    raw.update(source="another_source")
    raw["parallel"].update(ep=None, other=None)
    raw["tags"] = [t for t in raw["tags"] if t != "ep>1"]
    for named in (raw, {**raw, "model": {**raw["model"], "key": None}}):
        row = row_job(named)
        assert row.skipped is None and row.job.model.is_moe and row.job.constraints.ep is None


@pytest.mark.parametrize("row_id", ["mbridge_perf-26.08-deepseek-v3-gb300-mxfp8-256",
                                    "mbridge_perf-26.04.01-gpt-oss-120b-gb200-bf16-64"])
def test_a_row_whose_key_the_catalog_lacks_reads_as_the_entry_its_name_spells(row_id):
    """A kept-aside row may state a key of its own ("deepseek-v3-671b"): DeepSeek-V3's rows state no vocabulary,
    so building the model from the row was refused; the catalog entry its name spells, whose dimensions the row
    confirms, gives the same job."""
    raw = _raw(row_id)
    other = copy.deepcopy(raw)
    other["model"]["key"] = "their-own-" + raw["model"]["key"]
    row = moe_row_job(other)
    assert row.skipped is None and row.job == moe_row_job(raw).job
    assert any("its name spells; the row's key 'their-own-" in a for a in row.assumed)


def test_an_unnamed_row_reads_as_the_one_entry_with_its_stated_shape_or_is_built_from_it():
    """Named nothing the catalog has, a row whose stated layers, widths, heads, experts and top-k only one catalog
    model has is that model (Qwen3-30B-A3B); a name spelling an entry the row's shape contradicts is not taken; a
    shape two entries share (DeepSeek-V3 and V3.2 differ only in DSA's indexer) names neither."""
    from solveplan.calibration.names import key_of_shape

    raw = _raw("mbridge_perf-26.04.01-qwen3-30b-a3b-b200-mxfp8-8")
    anon = copy.deepcopy(raw)
    anon["model"].update(key="model-x", name="Model X")
    row = moe_row_job(anon)
    assert row.skipped is None and row.job == moe_row_job(raw).job
    assert any("it has every dimension the row states" in a for a in row.assumed)
    wider = copy.deepcopy(anon)
    wider["model"].update(name="Qwen3-30B-A3B wide", hidden=4096)  # spells qwen3-30b-a3b, which is not 4096 wide
    row = moe_row_job(wider)
    assert row.job is None or row.job.model.hidden_size == 4096
    assert not any("read as the catalog's" in a for a in row.assumed)
    assert key_of_shape(_raw("mbridge_perf-26.08-deepseek-v3-gb300-mxfp8-256")["model"], moe=True) is None


def test_a_model_name_spells_the_longest_catalog_key_or_none():
    from solveplan.calibration.names import key_named

    moe = dict(moe=True)
    assert key_named("GPT-OSS 120B", **moe) == "gpt-oss-120b" and key_named("gpt-oss-20b") == "gpt-oss-20b"
    assert key_named("Llama 4 Scout (16 experts)", **moe) == "llama4-scout"
    assert key_named("DeepSeek-V3 671B", **moe) == "deepseek-v3"
    assert key_named("Llama 3 70B", **moe) is None and key_named("Llama 3 70B") == "llama3-70b"  # the alias
    assert key_named("DeepSeek-V4 Flash", **moe) == "deepseek-v4-flash" and key_named("") is None


def test_a_row_stating_only_model_tflops_is_read_by_the_model_flop_count():
    """A row of another file may state Megatron-Bridge's "Model TFLOP / sec / GPU" alone (no tokens/s, no
    derived step): it is read into a step time by the model FLOPs of the job, not skipped."""
    from solveplan.formulation.flops import model_flop_per_step

    raw = _raw("mbridge_perf-26.04.01-qwen3-30b-a3b-b200-mxfp8-8")
    tflops = raw["measured"]["model_tflops_per_gpu"]
    raw.pop("derived", None)
    raw["measured"] = {"model_tflops_per_gpu": tflops}
    row = moe_row_job(raw)
    assert row.skipped is None and row.basis == "TFLOP/s as model FLOPs"
    job = row.job
    expected = model_flop_per_step(job.model, job.global_batch_size, job.seq_length) / (8 * tflops * 1e12)
    assert row.measured_s == pytest.approx(expected)
    raw["measured"] = {}
    assert moe_row_job(raw).skipped.startswith("no time measure")


def test_the_row_reader_reads_back_every_moe_layer_freq_the_launch_writes():
    """render/megatron_moe writes --moe-layer-freq for Megatron; a row stating that value reads to the same layers."""
    from solveplan.calibration.moe_row_model import moe_layer_pattern
    from solveplan.catalog import catalog_models, load_model
    from solveplan.render.megatron_moe import moe_layer_freq_arg

    checked = 0
    for key in catalog_models():
        model = load_model(key)
        if not model.is_moe or model.hybrid_layer_pattern is not None:
            continue
        mask = tuple(int(v) for v in model.moe_layer_mask)
        read = moe_layer_pattern(moe_layer_freq_arg(model), model.num_layers)
        assert (read or (1,) * model.num_layers) == mask, key
        checked += 1
    assert checked >= 15
