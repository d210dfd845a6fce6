"""Transformer model shape. Parameter count follows the layer structure of
Narayanan et al. 2021 Eq. (2) generalised to GQA and gated MLPs."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from .base import Name, Spec

PositionEmbedding = Literal["learned_absolute", "rope", "alibi", "none"]
Normalization = Literal["LayerNorm", "RMSNorm"]
Activation = Literal["gelu", "relu", "squared_relu", "swiglu", "geglu"]
GATED_ACTIVATIONS = ("swiglu", "geglu")  # gated MLPs: 3 weight matrices
ROPE_FIELDS = ("rotary_base", "rotary_percent", "rope_scaling_factor")
DEFAULT_ROTARY_BASE = 10000.0  # RoFormer's theta; Megatron-LM's --rotary-base default


class ModelSpec(Spec):
    name: Name
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: Optional[PositiveInt] = Field(None, description="KV heads (GQA); defaults to num_attention_heads (MHA)")
    kv_channels: Optional[PositiveInt] = Field(
        None, description="head dimension (Megatron --kv-channels, HF head_dim); defaults to hidden_size / heads")
    ffn_hidden_size: PositiveInt
    vocab_size: PositiveInt
    gated_mlp: bool = Field(False, description="SwiGLU-style MLP with 3 weight matrices")
    tied_embeddings: bool = False
    # ---- what decides the architecture a framework builds (Megatron-LM TransformerConfig and
    # GPTModel arguments, megatron/core/transformer/transformer_config.py). Defaults are
    # Megatron-LM's GPT defaults, so model files written before these fields existed keep
    # describing the model they were launched as.
    position_embedding: PositionEmbedding = Field(
        "learned_absolute", description="learned_absolute (GPT), rope, alibi (BLOOM) or none")
    rotary_base: Optional[PositiveFloat] = Field(
        None, description="RoPE theta (HF rope_theta); 10000 when position_embedding is rope and it is not given")
    rotary_percent: Optional[float] = Field(
        None, gt=0, le=1, description="fraction of the head dimension RoPE rotates (HF partial_rotary_factor); 1.0 if not given")
    rope_scaling_factor: Optional[PositiveFloat] = Field(
        None, description="Llama 3.x RoPE frequency scaling factor (HF rope_scaling.factor with rope_type llama3)")
    normalization: Normalization = "LayerNorm"
    norm_zero_centered_gamma: bool = Field(
        False, description="norm weight stored as gamma - 1 (Nemotron's layernorm1p, Gemma's RMSNorm (1 + w))")
    norm_epsilon: PositiveFloat = 1e-5
    add_bias_linear: bool = Field(True, description="biases on every linear layer (GPT-2/3, OPT, BLOOM, GPT-NeoX)")
    add_qkv_bias: Optional[bool] = Field(
        None, description="bias on the QKV projection only (Qwen2); defaults to add_bias_linear")
    activation: Optional[Activation] = Field(
        None, description="MLP activation; swiglu/geglu are gated (gated_mlp true); defaults to swiglu or gelu by gated_mlp")
    qk_norm: bool = Field(False, description="normalisation of queries and keys per head (Qwen3, Gemma 3)")
    dropout: float = Field(
        0.1, ge=0, lt=1, description="hidden and attention dropout (Megatron-LM --hidden-dropout/--attention-dropout, "
                                     "default 0.1); modern decoders (Llama, Mistral, Qwen, Nemotron, MPT) train with 0")
    seq_length: PositiveInt = Field(2048, description="sequence length of the source's training recipe (job default)")
    global_batch_size: PositiveInt = Field(512, description="global batch (sequences) of the source's recipe (job default)")
    nominal_params_b: Optional[float] = Field(None, gt=0, description="parameter count the source states, billions")
    source: str = "user supplied"
    notes: Optional[str] = None

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
            data.setdefault("rotary_base", DEFAULT_ROTARY_BASE)
            data.setdefault("rotary_percent", 1.0)
            data["rotary_base"] = DEFAULT_ROTARY_BASE if data["rotary_base"] is None else data["rotary_base"]
            data["rotary_percent"] = 1.0 if data["rotary_percent"] is None else data["rotary_percent"]
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
        if a % g:
            raise ValueError(f"num_kv_heads ({g}) must divide num_attention_heads ({a}); use a divisor of {a}")
        if self.gated_mlp != (self.activation in GATED_ACTIVATIONS):
            raise ValueError(f"activation {self.activation} is {'' if self.activation in GATED_ACTIVATIONS else 'not '}"
                             f"gated but gated_mlp is {str(self.gated_mlp).lower()}; gated activations are "
                             f"{', '.join(GATED_ACTIVATIONS)}")
        if self.position_embedding != "rope":
            given = [f for f in ROPE_FIELDS if getattr(self, f) is not None]
            if given:
                raise ValueError(f"{given[0]} applies to rotary embeddings only; set position_embedding: rope or drop it")
        if self.add_bias_linear and self.add_qkv_bias is False:
            raise ValueError("add_qkv_bias false with add_bias_linear true: linear biases include the QKV projection")
        return self

    # ---- derived quantities (pure) ----
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
        return self.num_kv_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def params_per_layer(self) -> int:
        """Weights of one transformer layer: QKV h*(h_q+2*h_kv), projection h_q*h, MLP (2|3)*h*f,
        two norms 2*2h (biases ignored: < 0.1%); h_q = heads*head_dim (= h unless kv_channels is set)."""
        h, f, hq = self.hidden_size, self.ffn_hidden_size, self.q_hidden_size
        return h * (hq + 2 * self.kv_hidden_size) + hq * h + self.mlp_matrices * h * f + 4 * h

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """Total parameters: layers + input embedding + (untied) LM head + final norm."""
        head = 0 if self.tied_embeddings else self.embedding_params
        return self.num_layers * self.params_per_layer + self.embedding_params + head + 2 * self.hidden_size
