"""The tables of `specs.hf`: per-family defaults of the dense decoders (`_FAMILIES`), the expert
layout of the mixture-of-experts families (`_MOE`) and the `architectures` names that stand for a
`model_type` (`_ARCHITECTURES`). Each row follows the transformers configuration class and modelling
file of its family; `specs/hf.py`'s docstring says which fields they map."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class _Family:
    gated: bool
    tied: bool  # tie_word_embeddings when the file does not say
    position: str = "rope"
    rope_theta: float = 10000.0
    rotary_percent: float = 1.0
    normalization: str = "RMSNorm"
    zero_centered: bool = False  # Gemma's RMSNorm (1 + w), Nemotron's LayerNorm1P
    eps: float = 1e-6
    bias: bool = False  # add_bias_linear
    qkv_bias: bool = False
    qk_norm: bool = False
    qk_norm_key: str | None = None  # the file's switch of the QK norm (default `qk_norm`)
    act: str = "silu"  # hidden_act default
    head_dim: int | None = None  # the class default when the file has none
    caveats: tuple[str, ...] = field(default_factory=tuple)  # what the spec (and Megatron-LM) does not model


_LLAMA = _Family(gated=True, tied=False)
_FAMILIES: dict[str, _Family] = {
    "llama": _LLAMA,  # Llama 1-3.x, DeepSeek LLM (dense), CodeLlama, Yi
    "mistral": _LLAMA,
    "qwen2": _Family(gated=True, tied=False, qkv_bias=True),
    "qwen3": _Family(gated=True, tied=False, qk_norm=True, head_dim=128),
    "gemma": _Family(gated=True, tied=True, zero_centered=True, act="gelu_pytorch_tanh", head_dim=256,
                     caveats=("embeddings scaled by sqrt(hidden_size)",)),
    "gemma2": _Family(gated=True, tied=True, zero_centered=True, act="gelu_pytorch_tanh", head_dim=256,
                      caveats=("embeddings scaled by sqrt(hidden_size)", "extra post-attention and post-MLP norms",
                               "logit soft-capping")),
    "gemma3_text": _Family(gated=True, tied=True, zero_centered=True, qk_norm=True, act="gelu_pytorch_tanh",
                           head_dim=256, rope_theta=1e6,
                           caveats=("embeddings scaled by sqrt(hidden_size)", "extra post-attention and post-MLP norms",
                                    "local layers use RoPE theta rope_local_base_freq (no cost)")),
    "phi3": _Family(gated=True, tied=False, eps=1e-5),
    "olmo": _Family(gated=True, tied=False, normalization="LayerNorm", eps=1e-5,
                    caveats=("non-parametric LayerNorm (no weights)",)),
    "olmo2": _Family(gated=True, tied=False, eps=1e-5, qk_norm=True,
                     caveats=("norms after attention and MLP (reordered), QK norm over the whole projection",)),
    # Nemotron-H / Nemotron 3 (hybrid Mamba-2; specs/hf_hybrid.py reads the pattern and the Mamba and
    # MoE keys): squared-ReLU MLPs, RMSNorm, no position embedding (Megatron-Bridge nemotron_h_bridge.py
    # sets position_embedding_type "none"), untied
    "nemotron_h": _Family(gated=False, tied=False, position="none", act="relu2", eps=1e-5),
    "nemotron": _Family(gated=False, tied=False, normalization="LayerNorm", zero_centered=True, eps=1e-5,
                        rotary_percent=0.5, act="relu2"),
    "gpt_neox": _Family(gated=False, tied=False, normalization="LayerNorm", eps=1e-5, bias=True, qkv_bias=True,
                        rotary_percent=0.25, act="gelu", caveats=("parallel attention and MLP residual",)),
    # Phi-1 / Phi-1.5 / Phi-2 (transformers PhiConfig / modeling_phi.py): each PhiDecoderLayer runs PhiAttention and
    # PhiMLP in parallel on ONE input_layernorm output (nn.LayerNorm with bias, eps layer_norm_eps) and adds both to
    # the residual (`attn_outputs + feed_forward_hidden_states + residual`, each through resid_dropout); q/k/v and
    # `dense` with biases; PhiMLP fc1 -> hidden_act (gelu_new) -> fc2 with biases, not gated; partial rotary
    # (PhiConfig sets partial_rotary_factor 0.5 when the file has none; the rotated slice torch.cat with the rest);
    # per-head q/k LayerNorm of head_dim when qk_layernorm (default false); untied, lm_head with a bias
    "phi": _Family(gated=False, tied=False, normalization="LayerNorm", eps=1e-5, bias=True, qkv_bias=True,
                   rotary_percent=0.5, act="gelu_new", qk_norm_key="qk_layernorm",
                   caveats=("parallel attention and MLP on ONE shared input LayerNorm (gpt_neox's parallel residual "
                            "has a norm per branch): Megatron-LM prices two pre-norm sublayers in sequence, the same "
                            "GEMM FLOPs plus one LayerNorm, whose input and output it keeps too (phi-2: 4 of the 34 "
                            "bytes per token and hidden unit it keeps per layer); --framework transformers counts "
                            "the one norm",
                            "the output layer's bias (PhiForCausalLM lm_head, bias=True; vocab_size parameters)")),
    "gpt2": _Family(gated=False, tied=True, position="learned_absolute", normalization="LayerNorm", eps=1e-5,
                    bias=True, qkv_bias=True, act="gelu_new"),
    "opt": _Family(gated=False, tied=True, position="learned_absolute", normalization="LayerNorm", eps=1e-5,
                   bias=True, qkv_bias=True, act="relu"),
    "bloom": _Family(gated=False, tied=True, position="alibi", normalization="LayerNorm", eps=1e-5, bias=True,
                     qkv_bias=True, act="gelu", caveats=("LayerNorm after the embedding",)),
    # Qwen3-Next and Qwen3.5 (transformers Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig and their
    # modelling files): Gated DeltaNet layers between gated attention ones (specs/hf_hybrid.py `gdn_fields`),
    # zero-centred RMSNorm (1 + w), per-head QK norm, a quarter of the 256-wide head rotated
    "qwen3_next": _Family(gated=True, tied=False, qk_norm=True, head_dim=256, rotary_percent=0.25, rope_theta=1e7,
                          zero_centered=True),
    "qwen3_5_text": _Family(gated=True, tied=False, qk_norm=True, head_dim=256, rotary_percent=0.25, rope_theta=1e7,
                            zero_centered=True, caveats=("multimodal rotary sections (mrope_section; no cost)",)),
    "qwen3_5_moe_text": _Family(gated=True, tied=False, qk_norm=True, head_dim=256, rotary_percent=0.25,
                                rope_theta=1e7, zero_centered=True,
                                caveats=("multimodal rotary sections (mrope_section; no cost)",)),
    # ---- mixture of experts (see _MOE for the expert part)
    "mixtral": _LLAMA,
    "qwen2_moe": _Family(gated=True, tied=False, qkv_bias=True),
    "qwen3_moe": _Family(gated=True, tied=False, qk_norm=True),
    "deepseek": _Family(gated=True, tied=False),
    "deepseek_v2": _Family(gated=True, tied=False),
    "deepseek_v3": _Family(gated=True, tied=False),
    # DeepSeek-V3.2 (transformers DeepseekV32Config): V3's layers with DeepSeek Sparse Attention (index_* keys)
    "deepseek_v32": _Family(gated=True, tied=False),
    # DeepSeek-V4 (transformers DeepseekV4Config; Megatron-LM dev's dsv4_hybrid attention): every layer MoE, the
    # attention, mHC and hash routing read by specs/hf_dsa.py `dsv4_fields`
    "deepseek_v4": _Family(gated=True, tied=False, caveats=("the attention sinks, the per-head Q norm and inverse RoPE "
                                                            "of the output (elementwise, not priced)",)),
    # GLM-5 / GLM-5.1 (transformers GlmMoeDsaConfig / modeling_glm_moe_dsa.py): DeepSeek-V3's layout (MLA, dense
    # first layers, sigmoid router with its correction bias, shared expert) with DeepSeek Sparse Attention
    "glm_moe_dsa": _Family(gated=True, tied=False, rope_theta=1e6, eps=1e-5),
    "gpt_oss": _Family(gated=True, tied=False, bias=True, qkv_bias=True, head_dim=64, rope_theta=150000.0, eps=1e-5,
                       caveats=("router bias (one per expert)",)),
    # its RoPE's interleaved pairs and layers without RoPE: specs/rope.py `llama4_rope_fields`
    "llama4_text": _Family(gated=True, tied=False, head_dim=128, rope_theta=500000.0, eps=1e-5,
                           caveats=("chunked attention (attention_chunk_size) on the RoPE layers, costed as full "
                                    "causal attention (the same up to the chunk size)",
                                    "weightless L2 norm of queries and keys on RoPE layers (use_qk_norm)",
                                    "attention temperature tuning")),
    # GLM-4.5 (transformers Glm4MoeConfig / modeling_glm4_moe.py): biases on Q, K, V only (attention_bias;
    # o_proj has none), per-head QK norm when use_qk_norm, half the head rotated (partial_rotary_factor 0.5)
    "glm4_moe": _Family(gated=True, tied=False, rotary_percent=0.5, rope_theta=1e6, eps=1e-5, qk_norm_key="use_qk_norm"),
    # MiniMax-M2 / M2.5 / M2.7 (transformers MiniMaxM2Config / modeling_minimax_m2.py): no biases, RMSNorm
    # over the whole Q and K projections (q_norm of num_heads x head_dim), partial RoPE by `rotary_dim`
    "minimax_m2": _Family(gated=True, tied=False, qk_norm=True, qk_norm_key="use_qk_norm", head_dim=128, rope_theta=5e6,
                          caveats=("QK norm over the whole Q and K projections (one RMSNorm per layer, not per head: "
                                   "Megatron-Bridge's minimax_m2 layer spec; costed as per-head QK norm)",
                                   "the MTP modules (use_mtp, num_mtp_modules): neither transformers' modelling "
                                   "code nor Megatron-Bridge's bridge builds them")),
    # OLMoE (transformers OlmoeConfig / modeling_olmoe.py): pre-norm RMSNorm layers, every MLP an
    # OlmoeSparseMoeBlock, RMSNorm over the whole Q and K projections (OlmoeAttention q_norm of hidden_size,
    # k_norm of head_dim x num_key_value_heads), attention_bias on q/k/v/o (false by default), untied
    "olmoe": _Family(gated=True, tied=False, eps=1e-5, qk_norm=True,
                     caveats=("QK norm over the whole Q and K projections (one RMSNorm per layer, not per head: "
                              "Megatron-Bridge's olmoe OLMoESelfAttention; costed as per-head QK norm)",)),
    # Phi-3.5-MoE (transformers PhimoeConfig / modeling_phimoe.py): LayerNorm with weight and bias (nn.LayerNorm,
    # elementwise_affine, eps rms_norm_eps), attention_bias on q/k/v/o, lm_head_bias on the output layer, Mixtral's
    # experts (w1, w3, w2) behind the sparsemixer router (specs/hf.py `_moe`), rope_theta 1e6 by default
    "phimoe": _Family(gated=True, tied=False, normalization="LayerNorm", eps=1e-5, rope_theta=1e6,
                      caveats=("SparseMixer routing (sparsemixer: two experts picked one after the other, each "
                               "weighted by a softmax over the logits within 2 x router_jitter_noise of the best, "
                               "Gumbel-sampled with Heun's third-order gradient in training): priced as top-2 softmax "
                               "routing, which is what Megatron-LM builds",)),
    # ERNIE 4.5 MoE (transformers Ernie4_5_MoeConfig / modeling_ernie4_5_moe.py; its expert layout, `use_bias`, the
    # interleaved RoPE and the absent dropout: specs/hf_ernie_ling.py): RMSNorm (eps 1e-5), tied embeddings and rope
    # theta 5e5 by default (default_theta)
    "ernie4_5_moe": _Family(gated=True, tied=True, eps=1e-5, rope_theta=500000.0,
                            caveats=("the router's e_score_correction_bias (moe_statics: one value per expert and MoE "
                                     "layer, not counted, added to the softmax scores to choose the top-k but not to "
                                     "weight it): Megatron-LM refuses an expert bias with softmax scores "
                                     "(transformer_config.py at d98e8a6) and Megatron-Bridge's ernie bridge builds "
                                     "sigmoid scores with one instead; the launch routes by the softmax scores alone, "
                                     "whose top-k probabilities are the checkpoint's",)),
    # Ling 1.x (inclusionAI/Ling's remote BailingMoeConfig / modeling_bailing_moe.py): RMSNorm (eps 1e-5 by default),
    # untied, rope theta 1e4 by default; its biases, dropout and experts: specs/hf_ernie_ling.py
    "bailing_moe": _Family(gated=True, tied=False, eps=1e-5),
}


@dataclass(frozen=True)
class _Moe:
    experts: tuple[str, ...]  # keys of the routed-expert count
    expert_ffn: str  # key of one expert's FFN hidden size
    dense_ffn: str | None  # key of the dense layers' MLP size (None: every layer is MoE)
    layers: str  # how the modelling code picks MoE layers: all | qwen | deepseek | llama4
    shared: str = "none"  # none | qwen2 (gated) | deepseek (n_shared_experts x expert) | llama4 (one expert)
    score: str = "softmax"  # default router score function
    mla: bool = False
    expert_bias: bool = False  # the router always adds a learned bias (e_score_correction_bias) to choose experts
    mtp: bool = False  # the file's num_nextn_predict_layers counts MTP layers
    # norm_topk_prob (None: the modelling code always renormalises the top-k) and routed_scaling_factor (None: it
    # scales nothing) read when the file omits them (specs/hf_router.py): the configuration class's defaults
    # (Qwen2MoeConfig / Qwen3MoeConfig / DeepseekV2Config norm_topk_prob false, DeepseekV3Config 2.5), else
    # renormalised and unscaled; the published configs state both
    norm_topk: bool | None = None
    routed_scale: float | None = None


_MOE: dict[str, _Moe] = {
    "mixtral": _Moe(("num_local_experts",), "intermediate_size", None, "all"),
    "qwen2_moe": _Moe(("num_experts",), "moe_intermediate_size", "intermediate_size", "qwen", shared="qwen2",
                      norm_topk=False),
    "qwen3_moe": _Moe(("num_experts",), "moe_intermediate_size", "intermediate_size", "qwen", norm_topk=False),
    "deepseek": _Moe(("n_routed_experts",), "moe_intermediate_size", "intermediate_size", "deepseek",
                     shared="deepseek", mtp=True, norm_topk=False),
    "deepseek_v2": _Moe(("n_routed_experts",), "moe_intermediate_size", "intermediate_size", "deepseek",
                        shared="deepseek", mla=True, mtp=True, norm_topk=False, routed_scale=1.0),
    "deepseek_v3": _Moe(("n_routed_experts",), "moe_intermediate_size", "intermediate_size", "deepseek",
                        shared="deepseek", score="sigmoid", mla=True, mtp=True, norm_topk=True, routed_scale=2.5),
    "deepseek_v32": _Moe(("n_routed_experts",), "moe_intermediate_size", "intermediate_size", "deepseek",
                         shared="deepseek", score="sigmoid", mla=True, mtp=True, norm_topk=True, routed_scale=2.5),
    "deepseek_v4": _Moe(("n_routed_experts",), "moe_intermediate_size", None, "all", shared="deepseek",
                        score="sigmoid", mtp=True, norm_topk=True, routed_scale=1.0),
    "glm_moe_dsa": _Moe(("n_routed_experts",), "moe_intermediate_size", "intermediate_size", "deepseek",
                        shared="deepseek", score="sigmoid", expert_bias=True, mla=True, mtp=True, norm_topk=True,
                        routed_scale=1.0),
    # Glm4MoeDecoderLayer: MoE from layer first_k_dense_replace on; shared experts n_shared_experts x
    # moe_intermediate_size; Glm4MoeTopkRouter: sigmoid scores plus e_score_correction_bias
    "glm4_moe": _Moe(("n_routed_experts",), "moe_intermediate_size", "intermediate_size", "deepseek",
                     shared="deepseek", score="sigmoid", expert_bias=True, mtp=True, norm_topk=True, routed_scale=1.0),
    # MiniMaxM2SparseMoeBlock on every layer: sigmoid scores plus e_score_correction_bias, no shared expert
    "minimax_m2": _Moe(("num_local_experts",), "intermediate_size", None, "all", score="sigmoid", expert_bias=True),
    "gpt_oss": _Moe(("num_local_experts", "num_experts"), "intermediate_size", None, "all"),
    "llama4_text": _Moe(("num_local_experts",), "intermediate_size", "intermediate_size_mlp", "llama4",
                        shared="llama4", score="sigmoid"),
    # Qwen3NextSparseMoeBlock / Qwen3_5MoeSparseMoeBlock: Qwen2-MoE's gated shared expert; Qwen3-Next picks
    # MoE layers as Qwen does (decoder_sparse_step, mlp_only_layers), Qwen3.5-MoE's are all MoE
    "qwen3_next": _Moe(("num_experts",), "moe_intermediate_size", "intermediate_size", "qwen", shared="qwen2",
                       norm_topk=True),
    "qwen3_5_moe_text": _Moe(("num_experts",), "moe_intermediate_size", None, "all", shared="qwen2", norm_topk=True),
    # OlmoeSparseMoeBlock on every layer: softmax over all experts, top-k, renormalised when norm_topk_prob
    # (OlmoeConfig default false); num_local_experts is OlmoeConfig's attribute_map alias of num_experts
    "olmoe": _Moe(("num_experts", "num_local_experts"), "intermediate_size", None, "all", norm_topk=False),
    # PhimoeSparseMoeBlock on every layer: num_local_experts experts of intermediate_size, no shared expert;
    # sparsemixer reads no norm_topk_prob and raises unless top_k == 2 (specs/hf.py `_moe`)
    "phimoe": _Moe(("num_local_experts",), "intermediate_size", None, "all"),
}
# the families whose layers alternate Gated DeltaNet and attention (specs/hf_hybrid.py `gdn_fields`)
GDN_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")

_ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "GemmaForCausalLM": "gemma", "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text", "Phi3ForCausalLM": "phi3", "OlmoForCausalLM": "olmo",
    "Olmo2ForCausalLM": "olmo2", "NemotronForCausalLM": "nemotron", "NemotronHForCausalLM": "nemotron_h", "GPTNeoXForCausalLM": "gpt_neox",
    "PhiForCausalLM": "phi",
    "GPT2LMHeadModel": "gpt2", "OPTForCausalLM": "opt", "BloomForCausalLM": "bloom",
    "MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekForCausalLM": "deepseek", "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss", "Llama4ForCausalLM": "llama4_text", "Llama4ForConditionalGeneration": "llama4",
    "Glm4MoeForCausalLM": "glm4_moe", "MiniMaxM2ForCausalLM": "minimax_m2", "Qwen3NextForCausalLM": "qwen3_next",
    "Qwen3_5ForCausalLM": "qwen3_5_text", "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
    "DeepseekV32ForCausalLM": "deepseek_v32", "GlmMoeDsaForCausalLM": "glm_moe_dsa", "DeepseekV4ForCausalLM": "deepseek_v4",
    # PhiMoEForCausalLM: the class Phi-3.5-MoE's config.json names (its remote modeling_phimoe.py); transformers'
    # own is PhimoeForCausalLM
    "OlmoeForCausalLM": "olmoe", "PhimoeForCausalLM": "phimoe", "PhiMoEForCausalLM": "phimoe",
    # Ling 2.0's class is read as bailing_moe only to be refused by name (specs/hf_ernie_ling.py)
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe", "BailingMoeForCausalLM": "bailing_moe",
    "BailingMoeV2ForCausalLM": "bailing_moe",
}
# DeepSeek Sparse Attention families (`specs.hf_dsa.dsa_fields`): the indexer's keys, and whether the indexer rotates q
# and k by a Hadamard transform (DeepSeek-V3.2's reference indexer does; Megatron-Bridge's GLM-5 bridge,
# glm_moe_dsa/glm5_bridge.py at 067f987, sets dsa_indexer_rotate_activation False)
DSA_FAMILIES = {"deepseek_v32": True, "glm_moe_dsa": False}

# text decoders of multimodal configs that are a family's decoder under another model_type (transformers
# 5.24 models/qwen3_vl*/configuration_qwen3_vl*.py: Qwen3VL(Moe)TextConfig, Qwen3(Moe)'s fields; the
# multimodal rotary sections (mrope_section) interleave the same rotation, no cost)
_TEXT_MODEL_TYPES = {"qwen3_vl_moe_text": "qwen3_moe", "qwen3_vl_text": "qwen3"}

# model types (a decoder's, or a multimodal config's text decoder's) whose architecture the formulation does not
# price, with what it lacks: said in their refusal, so the user knows which part is missing (the configuration keys
# that carry it in parentheses)
_PER_KIND = "an attention shape per layer kind, which Megatron-LM builds only through Megatron-Bridge's own layers"
NOT_MODELLED = {
    "kimi_linear": "Kimi Delta Attention layers (a linear-attention mixer Megatron-LM has no layer for)",
    # transformers Gemma4TextConfig; Megatron-Bridge gemma/gemma4_provider.py (its own layer spec, dual RoPE, K = V)
    "gemma4_text": f"global layers of their own head dimension and KV heads (global_head_dim, "
                   f"num_global_key_value_heads) with keys as values (attention_k_eq_v): {_PER_KIND}",
    # Megatron-Bridge mimo_v2_flash/modeling_mimo_v2_flash.py
    "mimo_v2_flash": f"sliding-window layers of their own KV heads (swa_num_key_value_heads), a V head narrower than "
                     f"Q and K (v_head_dim) and a sink bias on the window: {_PER_KIND}",
    # Megatron-Bridge stepfun/step35_provider.py `Step35DecoderLayer` (Step-3.7 reuses it)
    "step3p7": f"sliding layers of their own heads and shape (attention_other_setting) and a RoPE share per layer: "
               f"{_PER_KIND}",
    # Megatron-Bridge minimax_m3/minimax_m3_bridge.py
    "minimax_m3": "block-sparse attention (sparse_attention_config: the top-k key blocks its index heads pick), "
                  "which Megatron-LM has no layer for",
}
NOT_MODELLED["minimax_m3_vl"] = NOT_MODELLED["minimax_m3"]
