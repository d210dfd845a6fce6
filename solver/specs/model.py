"""Transformer model shape. Parameter count follows the layer structure of
Narayanan et al. 2021 Eq. (2) generalised to GQA and gated MLPs."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from .base import Name, Spec
from .dsv4_shape import Dsv4Shape
from .hybrid import HybridShape
from .moe_shape import MoeShape
from .pipeline_units import PipelineUnits
from .rope import YarnRope

PositionEmbedding = Literal["learned_absolute", "rope", "alibi", "none"]
Normalization = Literal["LayerNorm", "RMSNorm"]
Activation = Literal["gelu", "relu", "squared_relu", "swiglu", "geglu", "quick_geglu"]
GATED_ACTIVATIONS = ("swiglu", "geglu", "quick_geglu")  # gated MLPs: 3 weight matrices
SoftmaxType = Literal["vanilla", "off-by-one", "learnable"]
ROPE_FIELDS = ("rotary_base", "rotary_percent", "rope_scaling_factor", "rope_yarn")
RouterScore = Literal["softmax", "sigmoid", "sqrtsoftplus"]  # sqrt(softplus(logits)): DeepSeek-V4
DEFAULT_ROTARY_BASE = 10000.0  # RoFormer's theta; Megatron-LM's --rotary-base default


class ModelSpec(PipelineUnits, Dsv4Shape, HybridShape, MoeShape, Spec):
    name: Name
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt | None = Field(None, description="KV heads (GQA); defaults to num_attention_heads (MHA)")
    kv_channels: PositiveInt | None = Field(
        None, description="head dimension (Megatron --kv-channels, HF head_dim); defaults to hidden_size / heads")
    ffn_hidden_size: PositiveInt
    vocab_size: PositiveInt
    gated_mlp: bool = Field(False, description="SwiGLU-style MLP with 3 weight matrices")
    tied_embeddings: bool = False
    # ---- what decides the architecture a framework builds (Megatron-LM TransformerConfig and GPTModel arguments,
    # megatron/core/transformer/transformer_config.py). Defaults are Megatron-LM's GPT defaults, so model files
    # written before these fields existed keep describing the model they were launched as.
    position_embedding: PositionEmbedding = Field(
        "learned_absolute", description="learned_absolute (GPT), rope, alibi (BLOOM) or none")
    rotary_base: PositiveFloat | None = Field(
        None, description="RoPE theta (HF rope_theta); 10000 when position_embedding is rope and it is not given")
    rotary_percent: float | None = Field(
        None, gt=0, le=1, description="fraction of the head dimension RoPE rotates (HF partial_rotary_factor); 1.0 if not given")
    rope_scaling_factor: PositiveFloat | None = Field(
        None, description="Llama 3.x RoPE frequency scaling factor (HF rope_scaling.factor with rope_type llama3)")
    rope_yarn: YarnRope | None = Field(None, description="YaRN RoPE (HF rope_scaling with rope_type yarn; specs/rope.py)")
    rotary_interleaved: bool = Field(False, description="RoPE rotates adjacent pairs, not the two halves (Llama 4; "
                                                        "Megatron --rotary-interleaved)")
    no_rope_freq: PositiveInt | None = Field(None, description="every n-th layer (from 1) has no RoPE (Llama 4: 4; "
                                                               "Megatron --no-rope-freq)")
    normalization: Normalization = "LayerNorm"
    norm_zero_centered_gamma: bool = Field(
        False, description="norm weight stored as gamma - 1 (Nemotron's layernorm1p, Gemma's RMSNorm (1 + w))")
    norm_epsilon: PositiveFloat = 1e-5
    add_bias_linear: bool = Field(True, description="biases on every linear layer (GPT-2/3, OPT, BLOOM, GPT-NeoX)")
    add_qkv_bias: bool | None = Field(
        None, description="bias on the QKV projection only (Qwen2); defaults to add_bias_linear")
    activation: Activation | None = Field(
        None, description="MLP activation; swiglu/geglu are gated (gated_mlp true); defaults to swiglu or gelu by gated_mlp")
    qk_norm: bool = Field(False, description="normalisation of queries and keys per head (Qwen3, Gemma 3)")
    softmax_type: SoftmaxType = Field(
        "vanilla", description="attention softmax (Megatron --softmax-type): learnable adds a learned logit per head to "
                               "every denominator (GPT-OSS's attention sinks); off-by-one adds 1")
    attention_output_gate: bool = Field(
        False, description="a sigmoid gate on each head's attention output, its logits a second Q-wide output of the "
                           "QKV projection (Megatron --attention-output-gate; Qwen3-Next and Qwen3.5's gated attention, "
                           "HF attn_output_gate)")
    glu_linear_offset: float = Field(
        0.0, ge=0, description="added to a quick_geglu MLP's linear half before the product (Megatron "
                               "--glu-linear-offset; GPT-OSS's (up + 1))")
    activation_clamp: PositiveFloat | None = Field(
        None, description="clamp of a gated MLP's inputs (Megatron --activation-func-clamp-value; GPT-OSS's 7)")
    dropout: float = Field(0.1, ge=0, lt=1, description="hidden dropout, and attention dropout unless attention_dropout "
                           "says otherwise (Megatron-LM default 0.1); modern decoders (Llama, Qwen, Nemotron) train with 0")
    attention_dropout: float = Field(0.1, ge=0, lt=1, description="Megatron-LM --attention-dropout (OPT, Phi-2: 0 "
                                     "beside dropout 0.1); not given: dropout's")
    # ---- what a Hugging Face config says beyond the shape, read by the eager transformers profile
    # (formulation/eager_layers.py prices the family's own modelling code); the sliding window is
    # read by every stack (Megatron's and torchtitan's kernels skip the blocks outside it).
    hf_model_type: str | None = Field(
        None, description="the transformers model_type the spec was converted from (whose modelling code "
                          "`--framework transformers` prices); unset: a Llama-style decoder of these fields")
    hidden_act: str | None = Field(
        None, description="the Hugging Face activation name (transformers activations.ACT2FN: silu, "
                          "gelu_pytorch_tanh, gelu_new, relu, relu2, ...); unset: the one `activation` implies")
    sliding_window: PositiveInt | None = Field(
        None, description="sliding-window attention span in tokens (HF sliding_window), on `sliding_window_layers`")
    sliding_window_layers: NonNegativeInt | None = Field(
        None, description="how many layers attend through the window (HF layer_types); unset with a window: all; "
                          "without sliding_window_pattern the last ones (Qwen's max_window_layers)")
    sliding_window_pattern: Annotated[int, Field(ge=2)] | tuple[int, ...] | None = Field(
        None, description="which layers attend through the window, as Megatron's --window-attn-skip-freq: n, every n-th "
                          "layer attends to the whole sequence (HF sliding_window_pattern; GPT-OSS 2, Gemma 3 6), or "
                          "1 (window) or 0 (full) for each layer (HF layer_types of another order)")
    # ---- mixture of experts (Megatron-LM --num-experts, --moe-*; megatron/core/transformer/
    # transformer_config.py). A model without num_experts is dense and ignores the rest.
    num_experts: PositiveInt | None = Field(
        None, description="routed experts per MoE layer (Megatron --num-experts, HF num_local_experts / "
                          "n_routed_experts / num_experts); unset for a dense model")
    moe_ffn_hidden_size: PositiveInt | None = Field(
        None, description="FFN hidden size of one routed expert (Megatron --moe-ffn-hidden-size, HF "
                          "moe_intermediate_size); ffn_hidden_size stays the size of the dense layers' MLP")
    moe_router_topk: PositiveInt | None = Field(None, description="experts each token is routed to (top-k)")
    moe_shared_expert_intermediate_size: PositiveInt | None = Field(
        None, description="FFN hidden size of all shared experts together (Megatron "
                          "--moe-shared-expert-intermediate-size; DeepSeek: n_shared_experts x moe_intermediate_size)")
    moe_latent_size: PositiveInt | None = Field(
        None, description="LatentMoE (Nemotron 3 Super/Ultra; Megatron --moe-latent-size, HF moe_latent_size): the "
                          "routed experts work in this width, a duplicated h x l projection before dispatch and "
                          "l x h after combine; unset: experts at the hidden width")
    moe_shared_expert_gate: bool = Field(False, description="a sigmoid gate on the shared expert's output (Qwen2-MoE)")
    moe_layer_freq: PositiveInt = Field(
        1, description="every n-th layer is MoE, counting from layer 0 (Megatron's integer --moe-layer-freq)")
    moe_layer_pattern: tuple[int, ...] | None = Field(
        None, description="1 (MoE) or 0 (dense) for each layer (Megatron's list --moe-layer-freq); overrides "
                          "moe_layer_freq, e.g. DeepSeek-V3's first 3 layers dense")
    moe_router_score_function: RouterScore = Field(
        "softmax", description="router scores: softmax (Mixtral, Qwen), sigmoid (DeepSeek-V3), sqrtsoftplus (DeepSeek-V4)")
    moe_router_enable_expert_bias: bool = Field(
        False, description="auxiliary-loss-free load balancing with a per-expert bias (DeepSeek-V3)")
    moe_router_pre_softmax: bool = Field(False, description="softmax over every expert before the top-k, not "
                                                            "renormalised (HF norm_topk_prob false; specs/hf_router.py)")
    moe_router_topk_scaling_factor: PositiveFloat | None = Field(
        None, le=1e3, description="the top-k probabilities times this (HF routed_scaling_factor; DeepSeek-V3: 2.5)")
    moe_router_num_groups: PositiveInt | None = Field(
        None, description="expert groups for group-limited routing (DeepSeek-V3: 8 groups, tokens see top-4)")
    moe_router_group_topk: PositiveInt | None = Field(None, description="groups each token may be routed to")
    moe_expert_capacity_factor: PositiveFloat | None = Field(
        None, description="token dropping at this capacity factor; unset: dropless (every routed token computed)")
    # ---- multi-latent attention (DeepSeek-V2/V3; Megatron --multi-latent-attention)
    multi_latent_attention: bool = False
    q_lora_rank: PositiveInt | None = Field(None, description="rank of the query compression; unset: full-rank Q")
    kv_lora_rank: PositiveInt | None = Field(None, description="rank of the joint KV compression (cached latent)")
    qk_head_dim: PositiveInt | None = Field(None, description="per-head Q/K dimension without RoPE (nope)")
    qk_pos_emb_head_dim: PositiveInt | None = Field(None, description="per-head Q/K dimension with RoPE")
    v_head_dim: PositiveInt | None = Field(None, description="per-head V dimension")
    # ---- DeepSeek Sparse Attention on MLA (DeepSeek-V3.2, GLM-5; Megatron --dsa-indexer-*, HF index_*): each query
    # attends to the top-k keys an indexer picks. Sizes set together; unset: dense. RoPE layout, Hadamard: no cost.
    dsa_indexer_n_heads: PositiveInt | None = Field(None, description="indexer heads (HF index_n_heads)")
    dsa_indexer_head_dim: PositiveInt | None = Field(None, description="indexer head dimension (HF index_head_dim)")
    dsa_indexer_topk: PositiveInt | None = Field(None, description="keys each query attends to (HF index_topk)")
    dsa_indexer_rope_interleaved: bool = Field(False, description="HF indexer_rope_interleave (GLM-5)")
    dsa_indexer_rotate_activation: bool = Field(True, description="Hadamard on the indexer's q, k (off for GLM-5)")
    dsa_indexer_topk_freq: PositiveInt = Field(1, description="every n-th layer computes the top-k, the others reuse it "
                                                              "(HF index_topk_freq; GLM-5.2: 4)")
    dsa_indexer_skip_topk_offset: NonNegativeInt = Field(0, description="layers 1..offset all compute (HF "
                                                                        "index_skip_topk_offset; GLM-5.2: 3)")
    # ---- DeepSeek-V4 (Megatron-LM dev --experimental-attention-variant dsv4_hybrid; specs/dsv4_shape.py)
    csa_compress_ratios: tuple[int, ...] | None = Field(None, description="0, 4 or 128 per layer and MTP layer "
                                                                          "(HF compress_ratios)")
    csa_window_size: PositiveInt = Field(128, description="every layer's sliding window (HF sliding_window)")
    o_groups: PositiveInt | None = Field(None, description="groups of the low-rank output projection (HF o_groups)")
    o_lora_rank: PositiveInt | None = Field(None, description="its rank per group (HF o_lora_rank)")
    num_residual_streams: PositiveInt = Field(1, description="mHC residual streams (HF hc_mult); 1: plain residual")
    mhc_sinkhorn_iterations: PositiveInt = Field(20, description="mHC Sinkhorn iterations (HF hc_sinkhorn_iters)")
    moe_n_hash_layers: NonNegativeInt = Field(0, description="leading MoE layers routed by token-id hash (HF "
                                                             "num_hash_layers)")
    csa_compress_rotary_base: PositiveFloat | None = Field(None, description="RoPE theta of the compressed layers, "
                                                                             "YaRN-scaled (HF compress_rope_theta)")
    mtp_num_layers: NonNegativeInt = Field(
        0, description="multi-token-prediction modules after the last layer (DeepSeek-V3: 1); each is one more "
                       "layer, a 2h x h projection and two norms, and a second LM head pass; a hybrid model's "
                       "each run mtp_hybrid_layer_pattern")
    mtp_hybrid_layer_pattern: str | None = Field(
        None, description="a hybrid model's layers of one MTP depth, symbols as hybrid_layer_pattern's (Megatron's "
                          "unified --hybrid-layer-pattern 'main/mtp/mtp', one '/' part per depth; HF "
                          "mtp_hybrid_override_pattern; Nemotron 3 Super: '*E')")
    mtp_use_repeated_layer: bool = Field(
        False, description="one set of MTP weights that every depth reuses (Megatron --mtp-use-repeated-layer; "
                           "Nemotron 3 Super's recipes: one checkpointed block run for 2 depths)")
    # ---- hybrid Mamba-Transformer models (Nemotron-H, Nemotron 3; Megatron-LM --hybrid-layer-pattern,
    # formerly --hybrid-override-pattern, and --mamba-*; megatron/core/ssm/mamba_mixer.py)
    hybrid_layer_pattern: str | None = Field(
        None, description="one symbol per layer: M Mamba-2, * attention, - MLP, E MoE (Megatron "
                          "--hybrid-layer-pattern, HF hybrid_override_pattern); unset: a Transformer")
    mamba_state_dim: PositiveInt | None = Field(None, description="SSM state size N (HF ssm_state_size)")
    mamba_head_dim: PositiveInt | None = Field(None, description="Mamba-2 head dimension P (HF mamba_head_dim)")
    mamba_num_heads: PositiveInt | None = Field(
        None, description="Mamba-2 heads H (HF mamba_num_heads); d_inner = H x P")
    mamba_num_groups: PositiveInt | None = Field(
        None, description="B/C groups G shared by the heads (HF n_groups, Megatron --mamba-num-groups)")
    mamba_conv_kernel: PositiveInt = Field(4, description="depthwise causal conv1d width (HF conv_kernel; Megatron d_conv 4)")
    mamba_chunk_size: PositiveInt = Field(128, description="SSD chunk length Q (HF chunk_size; Megatron chunk_size 128)")
    # ---- Gated DeltaNet layers of a hybrid model (G; Qwen3-Next, Qwen3.5; Megatron --linear-*,
    # megatron/core/ssm/gated_delta_net/gdn.py)
    gdn_num_key_heads: PositiveInt | None = Field(
        None, description="Gated DeltaNet query/key heads (HF and Megatron linear_num_key_heads)")
    gdn_num_value_heads: PositiveInt | None = Field(
        None, description="Gated DeltaNet value heads, a multiple of the key heads (linear_num_value_heads)")
    gdn_key_head_dim: PositiveInt | None = Field(None, description="Gated DeltaNet key head dimension (linear_key_head_dim)")
    gdn_value_head_dim: PositiveInt | None = Field(
        None, description="Gated DeltaNet value head dimension (linear_value_head_dim)")
    gdn_conv_kernel: PositiveInt = Field(4, description="Gated DeltaNet causal conv1d width (linear_conv_kernel_dim)")
    seq_length: PositiveInt = Field(2048, description="sequence length of the source's training recipe (job default)")
    global_batch_size: PositiveInt = Field(512, description="global batch (sequences) of the source's recipe (job default)")
    nominal_params_b: float | None = Field(None, gt=0, description="parameter count the source states, billions")
    source: str = "user supplied"
    notes: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data):
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("num_kv_heads") is None and "num_attention_heads" in data:
            data["num_kv_heads"] = data["num_attention_heads"]
        act, gated = data.get("activation"), data.get("gated_mlp")
        if act is None and isinstance(gated, bool):
            data["activation"] = "swiglu" if gated else "gelu"
        elif act is None and gated is None:
            data["activation"] = "gelu"
        elif gated is None and isinstance(act, str):
            data["gated_mlp"] = act in GATED_ACTIVATIONS
        if data.get("position_embedding") == "rope":
            data["rotary_base"] = DEFAULT_ROTARY_BASE if data.get("rotary_base") is None else data["rotary_base"]
            data["rotary_percent"] = 1.0 if data.get("rotary_percent") is None else data["rotary_percent"]
        if data.get("attention_dropout") is None:  # the attention's dropout is the model's unless it is stated apart
            data["attention_dropout"] = data.get("dropout", 0.1)
        if data.get("add_qkv_bias") is None and isinstance(data.get("add_bias_linear", True), bool):
            data["add_qkv_bias"] = data.get("add_bias_linear", True)
        return data

    @model_validator(mode="after")
    def _check_shapes(self):
        h, a, g = self.hidden_size, self.num_attention_heads, self.num_kv_heads
        if h % a and self.kv_channels is None:
            ok = max(a, round(h / a) * a)
            raise ValueError(
                f"num_attention_heads ({a}) must divide hidden_size ({h}); e.g. hidden_size {ok}, "
                f"or give kv_channels (the head dimension) explicitly"
            )
        assert g is not None  # `_defaults` fills num_kv_heads
        if a % g:
            raise ValueError(f"num_kv_heads ({g}) must divide num_attention_heads ({a}); use a divisor of {a}")
        if self.gated_mlp != (self.activation in GATED_ACTIVATIONS):
            raise ValueError(f"activation {self.activation} is {'' if self.activation in GATED_ACTIVATIONS else 'not '}"
                             f"gated but gated_mlp is {str(self.gated_mlp).lower()}; gated activations are "
                             f"{', '.join(GATED_ACTIVATIONS)}")
        self._check_activation()
        if self.position_embedding != "rope":
            given = [f for f in ROPE_FIELDS if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{given[0]} applies to rotary embeddings only; set position_embedding: rope or drop it")
        if self.no_rope_freq is not None and (self.position_embedding != "rope" or self.num_layers % self.no_rope_freq):
            raise ValueError(f"no_rope_freq ({self.no_rope_freq}) needs RoPE and must divide num_layers "
                             f"({self.num_layers}), as Megatron's --no-rope-freq does")
        if self.rotary_interleaved and (self.position_embedding != "rope" or self.multi_latent_attention):
            raise ValueError("rotary_interleaved applies to RoPE without multi-latent attention (Megatron: "
                             "'rotary_interleaved does not work with multi_latent_attention'); drop it")
        if self.rope_yarn is not None and self.rope_scaling_factor is not None:
            raise ValueError("rope_yarn and rope_scaling_factor (Llama 3's) are two RoPE scalings; give one")
        if self.sliding_window_layers is not None and (self.sliding_window is None
                                                        or self.sliding_window_layers > self.num_layers):
            raise ValueError(f"sliding_window_layers ({self.sliding_window_layers}) needs a sliding_window and at most "
                             f"num_layers ({self.num_layers}) layers")
        n, counted = self.sliding_window_pattern, self.sliding_window_layers
        if isinstance(n, tuple) and (len(n) != self.num_layers or any(v not in (0, 1) for v in n)):
            raise ValueError(f"sliding_window_pattern must list 0 or 1 for each of the {self.num_layers} layers; got "
                             f"{len(n)} values")
        if n is not None and (self.sliding_window is None or counted not in (None, sum(self.window_mask))):
            raise ValueError(f"sliding_window_pattern needs a sliding_window, and windows {sum(self.window_mask)} of "
                             f"{self.num_layers} layers, not sliding_window_layers {counted}")
        if self.add_bias_linear and self.add_qkv_bias is False:
            raise ValueError("add_qkv_bias false with add_bias_linear true: linear biases include the QKV projection")
        if self.attention_output_gate and self.multi_latent_attention:
            raise ValueError("attention_output_gate applies to standard (GQA) attention; multi-latent attention has "
                             "none in Megatron-LM: drop one")
        self._check_hybrid()
        self._check_moe()
        self._check_mla()
        self._check_dsa()
        self._check_dsv4()
        return self

    def _check_activation(self) -> None:
        """Megatron's rules for the gated MLP's offset and clamp (transformer_config.py `__post_init__` at
        d98e8a6): the offset is quick GeGLU's; a clamp takes a gated activation, and SwiGLU's is MoE-only."""
        if self.glu_linear_offset and self.activation != "quick_geglu":
            raise ValueError(f"glu_linear_offset applies to activation quick_geglu, not {self.activation}; drop it")
        if self.activation_clamp is not None and (self.activation not in ("swiglu", "quick_geglu")
                                                  or (self.activation == "swiglu" and not self.num_experts)):
            raise ValueError(f"activation_clamp applies to quick_geglu, or to swiglu in a mixture-of-experts model, "
                             f"not to {self.activation}{'' if self.num_experts else ' in a dense model'}; drop it")

    # ---- derived quantities (pure) ----
    @property
    def cp_all_to_all(self) -> bool:
        """Whether context parallelism must exchange by all-to-all: Transformer Engine runs a softmax with an
        offset (attention sinks) under CP only with cp_comm_type a2a (dot_product_attention/utils.py at d0067d0,
        "Disabling FusedAttention for context parallelism with softmax_type = ..."). The one rule the launch
        (`render.megatron.cp_comm_flags`), the price (`layer_terms.cp_a2a_s`) and the space
        (`space.experts.cp_a2a_violations`) read."""
        return self.softmax_type != "vanilla"

    @property
    def head_dim(self) -> int:
        return self.kv_channels if self.kv_channels is not None else self.hidden_size // self.num_attention_heads

    @property
    def q_hidden_size(self) -> int:
        """Width of Q (and of the attention output before the projection): heads * head_dim.
        Equals hidden_size unless the head dimension is set apart (Gemma, Mistral-NeMo)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_hidden_size(self) -> int:
        """Width of K (and of V): num_kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def kv_heads(self) -> int:
        """`num_kv_heads`, typed as set: `_defaults` fills it (num_attention_heads, MHA)."""
        assert self.num_kv_heads is not None
        return self.num_kv_heads

    @property
    def window_mask(self) -> tuple[bool, ...]:
        """Which layers attend through `sliding_window`: all but every `sliding_window_pattern`-th (layer i windowed
        when (i + 1) % n != 0: HF Gemma / GPT-OSS layer_types, Megatron-LM `is_layer_window_attention` layer_number % n
        != 0) or the pattern's 1s, else the last `sliding_window_layers` (Qwen's max_window_layers), else all."""
        L, n, counted = self.num_layers, self.sliding_window_pattern, self.sliding_window_layers
        if self.sliding_window is None:
            return (False,) * L
        if isinstance(n, tuple):
            return tuple(bool(v) for v in n)
        if n is not None:
            return tuple(bool((i + 1) % n) for i in range(L))
        full = 0 if counted is None else L - counted
        return tuple(i >= full for i in range(L))

    @property
    def windowed_layers(self) -> int:
        """Layers whose attention is limited to `sliding_window` tokens (0 without a window)."""
        return sum(self.window_mask)

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def attention_params(self) -> int:
        """Weights of one attention block. Standard (GQA) attention: QKV h*(h_q+2*h_kv) (with the output gate h*(2 h_q +
        2 h_kv)) and the projection h_q*h, h_q = heads*head_dim: the matrices the forward multiplies by
        (formulation/flops.py counts 2 FLOPs per token each). Multi-latent attention (DeepSeek-V2 paper Sec. 2.1,
        Megatron-LM `MLASelfAttention`): Q down h*r_q, its norm r_q and up r_q*a*(d_nope+d_rope) (or h*a*(d_nope+d_rope)
        without q_lora_rank); KV down h*(r_kv+d_rope), its norm r_kv and up r_kv*a*(d_nope+d_v); the projection a*d_v*h;
        a DSA model's indexer (`dsa_indexer_params`; with index sharing the average layer's share, rounded)."""
        h, a = self.hidden_size, self.num_attention_heads
        if self.is_dsv4:  # DeepSeek-V4's average layer (Dsv4Shape), rounded
            return round(self.dsv4_attention_params)
        if not self.multi_latent_attention:
            hq = self.q_hidden_size
            return h * (hq * (1 + self.attention_output_gate) + 2 * self.kv_hidden_size) + hq * h
        r_kv, d_nope, d_rope, d_v = self.mla_dims
        d_qk = d_nope + d_rope
        r_q = self.q_lora_rank
        q = h * a * d_qk if r_q is None else h * r_q + r_q + r_q * a * d_qk
        kv = h * (r_kv + d_rope) + r_kv + r_kv * a * (d_nope + d_v)
        return q + kv + a * d_v * h + round(self.dsa_indexer_params * self.dsa_index_share)

    @property
    def dense_layer_params(self) -> int:
        """Weights of one dense layer: attention and its norms (`attention_block_params`), MLP (2|3)*h*f."""
        return self.attention_block_params + self.mlp_matrices * self.hidden_size * self.ffn_hidden_size

    @property
    def attention_block_params(self) -> int:
        """Attention with its q/k/v biases (`qkv_bias_params`) and the layer's two norms (`norm_params`)."""
        return self.attention_params + self.qkv_bias_params + 2 * self.norm_params

    @property
    def qkv_bias_params(self) -> int:
        """Qwen2's q/k/v biases h_q + 2 h_kv where `add_qkv_bias` (other linear biases are left out: < 0.1%)."""
        plain = self.add_qkv_bias and not (self.multi_latent_attention or self.is_dsv4)
        return self.q_hidden_size + 2 * self.kv_hidden_size if plain else 0

    @property
    def params_per_layer(self) -> int:
        """Weights of one layer of a dense model (a MoE model's: `dense_layer_params` / `moe_layer_params`)."""
        return self.dense_layer_params

    def _moe_mlp_params(self, experts: int) -> int:
        """`experts` routed experts of (2|3)*w*f_e each (w = `moe_expert_width`: h, or LatentMoE's
        latent l), the shared experts (2|3)*h*f_s, their gate h, the router h*E (+E expert biases) and
        LatentMoE's projections (`moe_latent_proj_params`; Megatron-Bridge theoretical_memory_utils.py
        at 067f987df03b: 2*h*l latent projection parameters per layer)."""
        h, (E, _, f_e), w = self.hidden_size, self.moe_dims, self.moe_expert_width
        shared = self.mlp_matrices * h * (self.moe_shared_expert_intermediate_size or 0)
        gate = h if self.moe_shared_expert_gate else 0
        router = h * E + (E if self.moe_router_enable_expert_bias else 0)
        return experts * self.mlp_matrices * w * f_e + shared + gate + router + self.moe_latent_proj_params

    @property
    def moe_layer_params(self) -> int:
        """Weights of one MoE layer: attention, every routed expert, shared experts, router, norms;
        a hybrid model's MoE layer (E) holds no attention: the MoE block and its norm."""
        if self.is_hybrid:
            return self.hybrid_kind_params()["moe"]
        return self.attention_block_params + self._moe_mlp_params(self.moe_dims[0])

    @property
    def moe_layer_active_params(self) -> int:
        """Weights one token uses in an MoE layer: attention, top-k routed experts, shared experts,
        router, norms."""
        return self.attention_block_params + self._moe_mlp_params(self.moe_dims[1])

    @property
    def norm_params(self) -> int:
        """One norm's weights: h (RMSNorm), 2h (LayerNorm's weight and bias)."""
        return self.hidden_size * (1 if self.normalization == "RMSNorm" else 2)

    @property
    def mamba_layer_params(self) -> int:
        """Weights of one Mamba layer (Megatron `MambaLayer` + `MambaMixer`, mamba_mixer.py at d98e8a6): the pre-norm
        (fused into in_proj), in_proj h x (2 d_inner + 2GN + H) without bias, the conv1d's weight and bias (d_inner +
        2GN) x (kernel + 1), dt_bias, A_log and D (H each), the gated RMSNorm d_inner, out_proj d_inner x h."""
        H, _, _, _ = self.mamba_dims
        d_in, h = self.mamba_d_inner, self.hidden_size
        conv = self.mamba_conv_channels * (self.mamba_conv_kernel + 1)
        return self.norm_params + h * self.mamba_in_proj_width + conv + 3 * H + d_in + d_in * h

    @property
    def gdn_layer_params(self) -> int:
        """Weights of one Gated DeltaNet layer (Megatron `_GDNBase`, gated_delta_net/common.py and gdn.py at
        d98e8a6): the pre-norm (fused into in_proj), in_proj h x (2 Hk dk + 2 Hv dv + 2 Hv) without bias, the
        depthwise conv1d's weight (2 Hk dk + Hv dv) x kernel without bias, dt_bias and A_log (Hv each), the
        output RMSNorm over one value head (dv), out_proj Hv dv x h."""
        hv, dv, h = self.gdn_num_value_heads, self.gdn_value_head_dim, self.hidden_size
        assert hv is not None and dv is not None, f"{self.name} has no Gated DeltaNet layers"
        conv = self.gdn_conv_channels * self.gdn_conv_kernel
        return self.norm_params + h * self.gdn_in_proj_width + conv + 2 * hv + dv + self.gdn_value_width * h

    def hybrid_kind_params(self, active: bool = False) -> dict[str, int]:
        """Weights of one layer of each hybrid kind, its pre-norm included (Megatron builds each
        symbol as a layer with its own norm): attention, MLP, MoE (all experts, or the top-k with
        `active`), Mamba, Gated DeltaNet."""
        out = {"attention": self.attention_params + self.qkv_bias_params + self.norm_params,
               "mlp": self.mlp_matrices * self.hidden_size * self.ffn_hidden_size + self.norm_params}
        if self.is_moe:
            E, k, _ = self.moe_dims
            out["moe"] = self._moe_mlp_params(k if active else E) + self.norm_params
        if self.mamba_num_heads is not None:
            out["mamba"] = self.mamba_layer_params
        if self.gdn_num_key_heads is not None:
            out["gdn"] = self.gdn_layer_params
        return out

    @property
    def mtp_depth_params(self) -> int:
        """One hybrid MTP depth's weights (Megatron-LM d98e8a6 multi_token_prediction.py ~1157-1247: enorm,
        hnorm, final_layernorm, eh_proj 2h x h, the HybridStack of `mtp_hybrid_layer_pattern`, each layer
        with its pre-norm); the embedding and output head are the model's (shared)."""
        per, mtp = self.hybrid_kind_params(), self.mtp_hybrid_layer_pattern
        assert mtp is not None, f"{self.name} has no hybrid MTP"
        layers = sum(n * per[kind] for kind, n in self.hybrid_layer_counts(mtp).items() if n)
        return layers + 2 * self.hidden_size * self.hidden_size + 3 * self.norm_params

    @property
    def mtp_weight_copies(self) -> int:
        """How many depths hold their own MTP weights: 1 with mtp_use_repeated_layer (multi_token_prediction.py
        `MultiTokenPredictionBlock._build_layers` ~1960-1968 builds one shared layer), else mtp_num_layers."""
        return 1 if self.mtp_use_repeated_layer else self.mtp_num_layers

    @property
    def num_moe_layers(self) -> int:
        return sum(self.moe_layer_mask)

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def _layers_params(self, moe_params: int, active: bool = False) -> int:
        if self.is_hybrid:
            per = self.hybrid_kind_params(active)
            return sum(n * per[kind] for kind, n in self.hybrid_layer_counts().items() if n)
        return self.num_dense_layers * self.dense_layer_params + self.num_moe_layers * moe_params

    def _outside_layers_params(self) -> int:
        """Embedding, untied LM head, final norm; no MTP module (published sizes omit them: DeepSeek-V3's 671B)."""
        return self.embedding_params * (1 if self.tied_embeddings else 2) + self.norm_params

    @property
    def num_params(self) -> int:
        """Total parameters: the layers and what is outside them (`_outside_layers_params`)."""
        return self._layers_params(self.moe_layer_params if self.is_moe else 0) + self._outside_layers_params()

    @property
    def num_active_params(self) -> int:
        """Parameters one token uses (MoE: top-k routed experts); equals num_params for a dense model."""
        layers = self._layers_params(self.moe_layer_active_params if self.is_moe else 0, active=True)
        return layers + self._outside_layers_params()
