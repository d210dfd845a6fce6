"""Transformer model shape. Parameter count follows the layer structure of
Narayanan et al. 2021 Eq. (2) generalised to GQA and gated MLPs."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, PositiveInt, model_validator

from .base import Spec


class ModelSpec(Spec):
    name: str
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
    seq_length: PositiveInt = Field(2048, description="sequence length of the source's training recipe (job default)")
    global_batch_size: PositiveInt = Field(512, description="global batch (sequences) of the source's recipe (job default)")
    nominal_params_b: Optional[float] = Field(None, gt=0, description="parameter count the source states, billions")
    source: str = "user supplied"
    notes: Optional[str] = None

    @model_validator(mode="before")
    @classmethod
    def _default_kv_heads(cls, data):
        if isinstance(data, dict) and data.get("num_kv_heads") is None and "num_attention_heads" in data:
            data = {**data, "num_kv_heads": data["num_attention_heads"]}
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
