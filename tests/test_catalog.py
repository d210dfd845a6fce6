"""The shipped catalogs: every entry loads and validates, parameter counts match what the
sources state, `<family>x<N>` names resolve, and the catalog commands print what they list."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import DATA, llama4_vision_params
from solveplan.catalog import (_catalog_dir, catalog_clusters, catalog_families, catalog_gpus, catalog_models,
                               family_cluster, load_cluster, load_model)
from solveplan.errors import InputError
from solveplan.specs import ClusterSpec, GPUSpec, ModelSpec
from solveplan.specs.moe_shape import MLA_FIELDS, MOE_FIELDS
from solveplan.specs.model import GATED_ACTIVATIONS

# Models with learned absolute position embeddings (seq_length x hidden weights the spec does
# not count): GPT-3 and GPT-2 (Radford et al. 2019), Megatron-LM GPT (Narayanan et al. Eq. 2
# counts s*h), OPT. Their notes say so; the check adds those weights back before comparing.
LEARNED_POSITIONS = ("gpt3-", "megatron-", "gpt2", "opt-")
# Llama 4 is multimodal: Meta's totals (109B, 400B) include the vision encoder and projector, which
# the spec (the text decoder) leaves out; their notes say so and the check adds them back.
MULTIMODAL = ("llama4-",)
# Entries whose publisher states the size to one significant figure: the count must round to it.
# Kimi K2: Moonshot's README states 1T total (we count 1,026.4B); its technical report's 1.04T is
# 1.3% above our count, which adds every weight its config names (tests/test_hf_config.py)
ONE_FIGURE = {"kimi-k2": 1e12, "nemotron3.5-lightning": 10e9, "deepseek-v4-pro": 1e11}  # sizes stated to one figure (the name's "30B")


def _models():
    return catalog_models()


def test_at_least_30_models_and_required_families():
    names = set(_models())
    assert len(names) >= 30
    required = {f"gpt3-{s}" for s in ("125m", "350m", "760m", "1.3b", "2.7b", "6.7b", "13b", "175b")}
    required |= {f"megatron-{s}" for s in ("1.7b", "3.6b", "7.5b", "18b", "39b", "76b", "145b", "310b", "530b", "1t")}
    required |= {"llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.1-405b"}
    assert required <= names, required - names
    assert len(names - required) >= 6


@pytest.mark.parametrize("name", sorted(catalog_models()))
def test_model_entry(name):
    m = _models()[name]
    assert isinstance(m, ModelSpec) and m.name == name == name.lower()
    # keys are ModelSpec fields and include every field (name comes from the file stem): the architecture
    # is stated, not left to defaults. kv_channels is written only where the head dimension is not
    # hidden / heads, the rotary fields only for RoPE models (rope_scaling_factor only where scaled)
    raw = yaml.safe_load((_catalog_dir("models") / f"{name}.yaml").read_text())
    fields = set(ModelSpec.model_fields) - {"name"}
    optional = {"kv_channels", "rotary_base", "rotary_percent", "rope_scaling_factor", "rope_yarn",
                "csa_compress_rotary_base",  # their config.json's YaRN; DeepSeek-V4's compressed layers
                "moe_router_pre_softmax",  # a router's top-k not renormalised (DeepSeek-V2, Qwen2-MoE) only
                "rotary_interleaved", "no_rope_freq",  # Llama 4's RoPE pairs and layers without RoPE only
                "hf_model_type", "hidden_act", "sliding_window", "sliding_window_layers",
                "sliding_window_pattern",  # HF-family entries state them
                "softmax_type", "glu_linear_offset", "activation_clamp",  # GPT-OSS's sinks and clamped quick GeGLU
                "attention_output_gate",  # Qwen3.5's gated attention
                "attention_dropout"}  # the model's dropout unless a config states another (OPT, Phi-2)
    # a dense entry leaves the mixture-of-experts and multi-latent-attention fields out; an MoE
    # entry states them, except a layer pattern (when moe_layer_freq says it), group-limited
    # routing and token dropping (absent from most models)
    moe_and_mla = set(MOE_FIELDS) | set(MLA_FIELDS) | {
        "num_experts", "moe_shared_expert_gate", "moe_layer_freq", "moe_router_score_function",
        "moe_router_enable_expert_bias", "multi_latent_attention", "mtp_num_layers"}
    if "num_experts" in raw:
        moe_and_mla = {"moe_layer_pattern", "moe_router_num_groups", "moe_router_group_topk",
                       "moe_expert_capacity_factor", "moe_shared_expert_intermediate_size",
                       "moe_latent_size",  # LatentMoE: Nemotron 3 Super / Ultra only
                       "moe_router_topk_scaling_factor"}  # the routers that scale their top-k
        moe_and_mla |= set() if raw.get("multi_latent_attention") else set(MLA_FIELDS)
    optional |= moe_and_mla
    # a hybrid entry states its pattern and its Mamba mixer or Gated DeltaNet (its E layers are the MoE layers:
    # no moe_layer_freq); the others leave them out
    mamba = {"mamba_state_dim", "mamba_head_dim", "mamba_num_heads", "mamba_num_groups", "mamba_conv_kernel",
             "mamba_chunk_size"}
    gdn = {"gdn_num_key_heads", "gdn_num_value_heads", "gdn_key_head_dim", "gdn_value_head_dim", "gdn_conv_kernel"}
    pattern = raw.get("hybrid_layer_pattern", "")
    optional |= ({"moe_layer_freq"} | (set() if "M" in pattern else mamba) | (set() if "G" in pattern else gdn)
                 if pattern else {"hybrid_layer_pattern"} | mamba | gdn)
    optional |= {"mtp_hybrid_layer_pattern", "mtp_use_repeated_layer"}  # a hybrid model's MTP block (Nemotron 3 Super)
    # DeepSeek Sparse Attention: an entry with sparse attention states its indexer; the others leave it out
    dsa = {"dsa_indexer_n_heads", "dsa_indexer_head_dim", "dsa_indexer_topk", "dsa_indexer_rope_interleaved",
           "dsa_indexer_rotate_activation"}
    optional |= {"dsa_indexer_topk_freq", "dsa_indexer_skip_topk_offset"}  # index sharing: GLM-5.2 only
    dsv4 = {"csa_compress_ratios", "csa_window_size", "o_groups", "o_lora_rank", "num_residual_streams",
            "mhc_sinkhorn_iterations", "moe_n_hash_layers"}  # DeepSeek-V4's entries state them, the others not
    optional |= {"mhc_sinkhorn_iterations"} if "csa_compress_ratios" in raw else dsv4
    optional |= {"dsa_indexer_rope_interleaved"} if "dsa_indexer_topk" in raw else dsa
    assert set(raw) <= fields and fields - optional <= set(raw), set(raw) ^ fields
    assert m.q_hidden_size == m.hidden_size or raw.get("kv_channels") is not None
    rope = m.position_embedding == "rope"
    assert rope == ("rotary_base" in raw) == ("rotary_percent" in raw)
    assert "Architecture" in m.notes  # the config fields or paper section the architecture comes from
    assert m.num_attention_heads % m.num_kv_heads == 0
    assert m.source and m.source != "user supplied" and m.notes
    assert m.nominal_params_b is not None
    params = m.num_params
    if name.startswith(LEARNED_POSITIONS):
        assert "position embeddings" in m.notes
        params += m.seq_length * m.hidden_size
    if name.startswith(MULTIMODAL):
        assert "vision encoder" in m.notes
        params += llama4_vision_params()
    if name in ONE_FIGURE:
        assert round(params / ONE_FIGURE[name]) * ONE_FIGURE[name] == m.nominal_params_b * 1e9, params
    else:
        assert abs(params / 1e9 - m.nominal_params_b) <= 0.01 * m.nominal_params_b, (params / 1e9, m.nominal_params_b)
    assert load_model(name) is m and load_model(name.upper()) is m


def test_paper_shapes():
    """Spot checks against the source tables."""
    m = _models()
    # Narayanan et al. 2021 Table 1
    table1 = {"1.7b": (24, 2304, 24, 512), "3.6b": (30, 3072, 32, 512), "7.5b": (36, 4096, 32, 512),
              "18b": (40, 6144, 48, 1024), "39b": (48, 8192, 64, 1536), "76b": (60, 10240, 80, 1792),
              "145b": (80, 12288, 96, 2304), "310b": (96, 16384, 128, 2160), "530b": (105, 20480, 128, 2520),
              "1t": (128, 25600, 160, 3072)}
    for size, (L, h, a, b) in table1.items():
        s = m[f"megatron-{size}"]
        assert (s.num_layers, s.hidden_size, s.num_attention_heads, s.global_batch_size) == (L, h, a, b)
        assert (s.vocab_size, s.seq_length, s.ffn_hidden_size) == (51200, 2048, 4 * h)
    # GPT-3 Table 2.1 (13B: 5120, not the paper's 5140, and the notes say why)
    g = m["gpt3-13b"]
    assert (g.num_layers, g.hidden_size, g.num_attention_heads, g.vocab_size) == (40, 5120, 40, 50257)
    assert "5140" in g.notes
    assert m["gpt3-175b"].global_batch_size * 2048 == 3_145_728 and m["gpt3-125m"].global_batch_size == 256
    assert all(m[f"gpt3-{s}"].tied_embeddings for s in ("125m", "13b", "175b"))
    # Llama 3.1 405B (Llama 3 paper Table 3)
    s = m["llama3.1-405b"]
    assert (s.num_layers, s.hidden_size, s.num_attention_heads, s.num_kv_heads, s.ffn_hidden_size) == \
        (126, 16384, 128, 8, 53248)


def test_gpus():
    gpus = catalog_gpus()
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "v100-32gb", "mi300x"} <= set(gpus)
    for name, g in gpus.items():
        assert isinstance(g, GPUSpec) and g.source != "user supplied"
        raw = yaml.safe_load((_catalog_dir("gpus") / f"{name}.yaml").read_text())
        # datasheet peaks and memory, with their source; efficiency fields, where present, are the
        # formulation's fit and must say how they were obtained
        assert {"peak_bf16_tflops", "hbm_gib", "hbm_gbyte_per_s", "source"} <= set(raw) <= set(GPUSpec.model_fields)
        assert "datasheet" in raw["source"]
        fitted = set(raw) & {"matmul_efficiency", "attention_efficiency", "hbm_efficiency", "layer_overhead_us"}
        assert not fitted or raw.get("fit_notes"), (name, fitted)
    assert gpus["v100-32gb"].peak_fp8_tflops is None and gpus["a100-80gb"].peak_fp8_tflops is None
    assert gpus["h100-sxm"].peak_bf16_tflops == 989 and gpus["h100-sxm"].peak_fp8_tflops == 1979


def test_families_and_named_clusters():
    fams = catalog_families()
    assert {"a100", "a100-40gb", "h100", "h200", "b200", "v100", "mi300x"} <= set(fams)
    allowed = (set(ClusterSpec.model_fields) - {"name", "num_nodes"}) | {"description"}
    for name, tmpl in fams.items():
        assert set(tmpl) <= allowed, set(tmpl) - allowed
        assert tmpl["gpu"] in catalog_gpus() and tmpl.get("source")
    named = catalog_clusters()
    assert 3 <= len(named)
    for c in named.values():
        assert c.source != "user supplied"
        if c.is_mixed:  # a cluster of pools (issue #13): each pool a GPU of the catalog
            assert len(c.pool_specs()) >= 2 and all(p.gpu.name in catalog_gpus() for p in c.pool_specs())
            continue
        assert c.nodes_per_leaf and c.spine_oversubscription >= 1
    assert named["mixed-h100-a100"].num_nodes == 6
    c = named["a100-2rack-4to1"]
    assert (c.num_nodes, c.nodes_per_leaf, c.spine_oversubscription, c.num_gpus) == (16, 8, 4.0, 128)


@pytest.mark.parametrize("ref,gpu,nodes,per_node", [
    ("a100x64", "a100-80gb", 8, 8), ("A100X8", "a100-80gb", 1, 8), ("a100-40gbx16", "a100-40gb", 2, 8),
    ("h100x1024", "h100-sxm", 128, 8), ("h200x8", "h200", 1, 8), ("b200x72", "b200", 9, 8),
    ("v100x32", "v100-32gb", 2, 16), ("mi300xx16", "mi300x", 2, 8), ("h800x2048", "h800", 256, 8),
    ("a800x64", "a800-80gb", 8, 8), ("h20x16", "h20", 2, 8), ("gh200x64", "gh200", 16, 4),
])
def test_family_resolution(ref, gpu, nodes, per_node):
    c = load_cluster(ref)
    assert (c.gpu.name, c.num_nodes, c.gpus_per_node, c.num_gpus) == (gpu, nodes, per_node, nodes * per_node)
    assert c.name == ref.lower()


@pytest.mark.parametrize("ref,per_node", [("a100x12", 8), ("a100x0", 8), ("v100x24", 16), ("h100x9", 8)])
def test_family_gpu_count_must_fill_nodes(ref, per_node):
    with pytest.raises(InputError, match=f"not a multiple of {per_node} GPUs per node"):
        load_cluster(ref)


@pytest.mark.parametrize("ref,gpus,domain", [("h200x1", 1, 1), ("h100x4", 4, 4), ("v100x8", 8, 8), ("gb200x2", 2, 2)])
def test_a_family_cluster_may_be_part_of_one_node(ref, gpus, domain):
    """A single GPU (transformers fine-tuning on a workstation) or a scheduler's share of one node: one node of
    that many GPUs on the node's NVLink fabric, said in the source."""
    c = load_cluster(ref)
    assert (c.num_nodes, c.gpus_per_node, c.num_gpus, c.domain_gpus) == (1, gpus, gpus, domain)
    assert f"{gpus} of a node's" in c.source


def test_family_cluster_direct():
    assert family_cluster("h100", 16).num_nodes == 2
    with pytest.raises(InputError, match="did you mean h100"):
        family_cluster("h10", 16)


# ----------------------------------------------------------------- CLI
def test_models_json(cli):
    r = cli("models", "--json")
    assert r.code == 0 and r.err == ""
    rows = json.loads(r.out)
    assert len(rows) == len(catalog_models())
    row = {x["name"]: x for x in rows}["llama2-7b"]
    assert row["num_params"] == catalog_models()["llama2-7b"].num_params and row["num_layers"] == 32


def test_tables(cli):
    for cmd, names in (("models", ["gpt3-175b", "llama3.1-405b"]), ("gpus", ["h100-sxm", "mi300x"]),
                       ("clusters", ["selene-like", "a100x<N>"])):
        r = cli(cmd)
        assert r.code == 0 and r.err == ""
        for n in names:
            assert n in r.out


def test_tables_cut_no_cell(cli):
    """At the 120 columns a pipe gets, every catalog table keeps every cell whole: no name or number cut
    to an ellipsis, no column squeezed to nothing by a long rule (the rack families' rule for N is a
    note under the table)."""
    for cmd in ("models", "gpus", "clusters"):
        out = cli(cmd).out
        assert "\u2026" not in out, cmd
        assert max(len(line) for line in out.splitlines()) <= 120, cmd
    out = cli("clusters").out
    assert "N: rule 1" in out and any(line.startswith("rule ") and "multiple of 72, or of 4 up to 72" in line
                                      for line in out.splitlines())
    assert "mi355xx<N>" in out and "multiple of 16, or below 16 (part of one node)" in out


def test_gpus_and_clusters_json(cli):
    gpus = json.loads(cli("gpus", "--json").out)
    assert {g["name"] for g in gpus} == set(catalog_gpus())
    rows = json.loads(cli("clusters", "--json").out)
    kinds = {r["name"]: r["kind"] for r in rows}
    assert kinds["a100-2rack-4to1"] == "cluster" and kinds["h100x<N>"] == "family"


def test_show_model_json(cli):
    r = cli("show", "gpt3-175b", "--json")
    assert r.code == 0
    d = json.loads(r.out)
    m = catalog_models()["gpt3-175b"]
    assert d["kind"] == "model" and d["derived"]["num_params"] == m.num_params
    # Megatron-LM's count for GPT (MHA, f = 4h), causal attention: 72*l*h^2 + 6*l*h*s + 6*h*V per token
    assert d["derived"]["flops_per_token"] == pytest.approx(72 * 96 * 12288**2 + 6 * 96 * 12288 * 2048 + 6 * 12288 * 50257)
    assert d["derived"]["params_per_layer"] == m.params_per_layer
    assert "FLOPs/token" in cli("show", "gpt3-175b").out


def test_show_cluster_gpu_family(cli):
    d = json.loads(cli("show", "a100x64", "--json").out)
    assert d["kind"] == "cluster" and d["derived"]["num_gpus"] == 64 and d["derived"]["gpu"] == "a100-80gb"
    out = cli("show", "a100-2rack-4to1").out
    assert "128 = 16 nodes x 8" in out and "2 of 8 nodes, spine 4:1" in out
    assert json.loads(cli("show", "h100-sxm", "--json").out)["spec"]["peak_bf16_tflops"] == 989
    assert json.loads(cli("show", "v100", "--json").out)["template"]["gpus_per_node"] == 16


def test_show_files(cli, tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text("num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nffn_hidden_size: 256\nvocab_size: 100\n")
    d = json.loads(cli("show", str(p), "--json").out)
    assert d["name"] == "tiny" and d["spec"]["num_kv_heads"] == 4
    c = tmp_path / "two.yaml"
    c.write_text("gpu: h100-sxm\nnum_nodes: 2\nnvlink_gbyte_per_s: 450\nnic_gbit_per_s: 400\n")
    assert json.loads(cli("show", str(c), "--json").out)["derived"]["num_gpus"] == 16
    g = tmp_path / "mygpu.yaml"
    g.write_text("peak_bf16_tflops: 100\nhbm_gib: 24\nhbm_gbyte_per_s: 1000\n")
    assert json.loads(cli("show", str(g), "--json").out)["spec"]["name"] == "mygpu"


@pytest.mark.parametrize("kind", ["model", "gpu", "cluster", "job"])
def test_schema(cli, kind):
    r = cli("schema", kind)
    assert r.code == 0
    s = json.loads(r.out)
    assert s["type"] == "object" and s["properties"]
    if kind == "model":
        assert "num_layers" in s["properties"] and "num_layers" in s["required"]


def test_architectures():
    """The fields that decide what a framework builds, spot-checked against the models' configs."""
    m = _models()
    assert (m["llama3.1-70b"].rotary_base, m["llama3.1-70b"].rope_scaling_factor) == (500000, 8.0)
    assert m["llama2-7b"].normalization == "RMSNorm" and not m["llama2-7b"].add_bias_linear
    q = m["qwen2-7b"]
    assert q.add_qkv_bias and not q.add_bias_linear and q.rotary_base == 1e6 and q.norm_epsilon == 1e-6
    n = m["nemotron4-15b"]
    assert (n.activation, n.rotary_percent, n.norm_zero_centered_gamma) == ("squared_relu", 0.5, True)
    assert m["gpt-neox-20b"].rotary_percent == 0.25 and m["gpt-neox-20b"].add_bias_linear
    assert m["bloom-176b"].position_embedding == "alibi" and m["opt-175b"].activation == "relu"
    g = m["gpt3-175b"]
    assert (g.position_embedding, g.normalization, g.add_bias_linear, g.activation) == \
        ("learned_absolute", "LayerNorm", True, "gelu")
    for s in m.values():
        assert s.gated_mlp == (s.activation in GATED_ACTIVATIONS)


def test_architecture_fields_are_checked():
    base = dict(name="x", num_layers=2, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128, vocab_size=100)
    plain = ModelSpec(**base)  # a file without the architecture fields: Megatron-LM's GPT defaults
    assert (plain.position_embedding, plain.normalization, plain.activation, plain.add_qkv_bias) == \
        ("learned_absolute", "LayerNorm", "gelu", True)
    assert ModelSpec(**base, gated_mlp=True).activation == "swiglu"
    assert ModelSpec(**base, activation="geglu").gated_mlp is True
    rope = ModelSpec(**base, position_embedding="rope")
    assert (rope.rotary_base, rope.rotary_percent) == (10000.0, 1.0)
    for bad, match in ((dict(activation="swiglu", gated_mlp=False), "gated_mlp"),
                       (dict(rotary_base=5e5), "rotary embeddings only"),
                       (dict(add_qkv_bias=False), "add_qkv_bias"),
                       (dict(position_embedding="rope", rotary_percent=1.5), "rotary_percent")):
        with pytest.raises(ValueError, match=match):
            ModelSpec(**base, **bad)


def test_a_lookup_reads_only_its_files():
    """`optimize --model M --cluster C` reads M's file and C's family and GPU, not the catalog
    (parsing every file was ~0.2 s of each command)."""
    import subprocess
    import sys

    code = ("from solveplan.catalog import _catalog_entry, load_cluster, load_model\n"
            "load_model('gpt3-13b'); load_cluster('a100x64')\n"
            "print(_catalog_entry.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert int(out) == 3  # the model, the family, its GPU


def test_show_moe_model(cli):
    """`show` prints total and active parameters and the MoE structure, in the table and --json."""
    m = catalog_models()["deepseek-v3"]
    d = json.loads(cli("show", "deepseek-v3", "--json").out)["derived"]
    assert d["num_params"] == m.num_params and d["num_active_params"] == m.num_active_params < m.num_params
    # Megatron-LM's count by hand (formulation.flops): MLA projections at 2 FLOPs per weight,
    # causal core 2*s*a*(d_qk + d_v)/2 per token, 3 dense layers, 58 MoE (router, 8 routed +
    # 1 shared expert), the MTP module (a MoE layer, its 2h x h projection, a second head)
    h, s, V = 7168, m.seq_length, m.vocab_size
    proj = 2 * (h * 1536 + 1536 * 128 * 192 + h * 576 + 512 * 128 * 256 + 128 * 128 * h)
    core = 2 * s * 128 * (192 + 128) / 2
    dense, moe_ = proj + core + 2 * h * 18432 * 3, proj + core + 2 * h * 256 + 2 * h * 3 * 9 * 2048
    assert m.mtp_num_layers == 1
    assert d["flops_per_token"] == pytest.approx(3 * (3 * dense + 58 * moe_ + 2 * 2 * h * V + moe_ + 2 * 2 * h * h),
                                                 rel=1e-12)
    moe = d["moe"]
    assert (moe["num_experts"], moe["moe_router_topk"], moe["shared_expert_ffn"]) == (256, 8, 2048)
    assert (moe["num_moe_layers"], moe["num_dense_layers"], moe["layer_pattern"]) == (58, 3, "dense 0-2, MoE 3-60")
    assert moe["router"] == "sigmoid + expert bias, 4 of 8 groups, top-k x 2.5" and moe["mtp_num_layers"] == 1
    assert moe["mla"] == {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64,
                          "v_head_dim": 128}
    out = cli("show", "deepseek-v3").out
    for text in ("active per token", "37.55B", "256 routed of 2048, top-8; shared 2048", "dense 0-2, MoE 3-60",
                 "kv_lora_rank 512", "FLOPs/token"):
        assert text in out, text
    mav = json.loads(cli("show", "llama4-maverick", "--json").out)["derived"]["moe"]
    assert mav["layer_pattern"] == "MoE every 2 layers from layer 1" and mav["mla"] is None
    assert "moe" not in json.loads(cli("show", "gpt3-175b", "--json").out)["derived"]


def test_models_lists_moe_total_and_active(cli):
    rows = {r["name"]: r for r in json.loads(cli("models", "--json").out)}
    for name in ("mixtral-8x7b", "mixtral-8x22b", "deepseek-v2-lite", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b",
                 "gpt-oss-20b", "gpt-oss-120b", "llama4-scout", "llama4-maverick", "grok-1"):
        m = catalog_models()[name]
        assert rows[name]["num_active_params"] == m.num_active_params < rows[name]["num_params"] == m.num_params
        assert rows[name]["moe"]["num_experts"] == m.num_experts
    assert rows["llama2-7b"]["num_active_params"] == rows["llama2-7b"]["num_params"]
    out = cli("models").out
    assert "mixtral-8x7b" in out and "8/2" in out and "12.88B" in out


@pytest.mark.parametrize("args", [
    ("optimize", "--model", "mixtral-8x7b", "--cluster", "h100x64", "--json"),
    ("evaluate", "--model", "deepseek-v3", "--cluster", "h100x1024", "--tp", "2", "--pp", "16", "--ep", "64",
     "--etp", "1", "--recompute", "full", "--json"),
    ("optimize", "--model", "{hf}", "--cluster", "h100x64", "--json"),
])
def test_moe_jobs_are_planned_with_expert_parallelism(cli, args):
    """MoE models from the catalog and Hugging Face configs are priced and planned (issue 22):
    the JSON carries ep and etp."""
    r = cli(*(a.format(hf=DATA / "hf" / "Qwen3-30B-A3B" / "config.json") for a in args))
    assert r.code == 0, r.err
    d = json.loads(r.out)
    assert d["fits"] and d["parallel"]["ep"] >= 1 and "etp" in d["parallel"] and "ep_comm_s" in d["breakdown"]


def test_moe_job_through_the_api():
    from solveplan.api import as_job

    assert as_job({"model": "grok-1", "cluster": "h100x64"}).model.is_moe
