"""One decoder layer of a Hugging Face transformers model as its own modelling code runs it
eagerly (`--framework transformers`: fp32 weights under torch.autocast(bf16), SDPA): per family,
what autograd saves for backward, what the elementwise ops move in HBM, and how many aten ops
the layer dispatches. The counts follow the code of transformers 5.x
(`models/<family>/modeling_<family>.py`, `integrations/sdpa_attention.py`, `masking_utils.py`,
`activations.py`) and torch 2.x autograd (what each backward formula of
`tools/autograd/derivatives.yaml` keeps), op by op; tests/test_frameworks.py measures them with
PyTorch's `saved_tensors_hooks` on tiny models of each family on CPU, and the same measurement on
an H200 (CUDA, torch 2.11: benchmarks/measured/h200-2026-11-26/saved_per_layer.json) equals this
count to the byte for Llama, Qwen3, Gemma 3 (global and sliding layers), OPT (with and without
dropout), Nemotron, GPT-2 and Mistral, and bounds Phi-3's (its V, below). The whole models'
predicted peak allocations are within -2.2%..+2.3% of the 29 measured steps'
(benchmarks/results/transformers_steps.md).

A layer is described by its family's code (`CODE`: which norm implementation, extra norms,
fused projections, how rotary embeddings are assembled) and by the spec's fields (widths,
`qk_norm`, `gated_mlp`/`hidden_act`, biases, `dropout`, `sliding_window`). Per component, with
widths h (hidden), q (heads x head_dim), kv (kv heads x head_dim), f (FFN), a heads, g kv heads:

- **norms** on the fp32 residual stream (autocast leaves the residual adds in fp32):
  `LlamaRMSNorm` (`to(float32)`, `pow`, `mean`, `rsqrt`, `mul`, `weight *`) keeps its fp32 input
  (4h, saved by pow and mul), rsqrt (4 per row) and the fp32 normalised tensor (4h, saved by the
  weight's mul); `Gemma3RMSNorm` (`x.float()`, `* (1.0 + weight.float())`, `type_as`) the same,
  plus its (1 + w) per call; `nn.LayerNorm` (aten native_layer_norm, in fp32 under autocast) its
  input (4h), mean and rstd (8 per row); Nemotron's `NemotronLayerNorm1P` casts input, weight + 1
  and bias to the autocast dtype first (`_cast_if_autocast_enabled`: `torch.is_autocast_enabled()`,
  CUDA's flag) and keeps the bf16 copy (2h) and its statistics. On a bf16 input (Gemma's norms
  after attention and MLP; Qwen3's and Gemma 3's per-head q/k norms) the upcast is a new fp32
  tensor (4w); Llama's code then keeps the bf16 normalised tensor (2w, the weight's mul), Gemma's
  the fp32 one (4w);
- **linear inputs**: autocast casts an fp32 input to bf16 once per linear (the cache of
  autocast_mode.cpp `cached_cast` holds leaf weights only), each saved by its mm (2 per element):
  3 casts for separate q/k/v projections, 1 for a fused QKV (Phi-3 `qkv_proj`, GPT-2 `c_attn`),
  2 for gate/up, 1 for a fused `gate_up_proj` or a plain MLP; a bf16 input (Nemotron) is shared;
- **attention** (integrations/sdpa_attention.py): rotary `q * cos + rotate_half(q) * sin` keeps
  only cos/sin (shared by all layers) and returns fp32 (cos is fp32), which SDPA's autocast casts
  back (2q, 2kv saved); V is the projection's output. Where the QKV projection is fused, what
  SDPA keeps of its views depends on the shapes: with GPT-2's c_attn (no rotary) it keeps
  contiguous copies of the Q and V views and K as a view (measured, CPU and H200); for Phi-3's V
  the view of the whole fused output is counted (Phi-3.5-mini's and Phi-4-mini's measured peak
  allocations hold it; a tiny head_dim-32 config's V is copied instead, 2q + 2kv less). The
  kernel (cuDNN on Hopper under torch 2.11: benchmarks/measured/h200-2026-11-26) keeps
  q, k, v, its output (2q: o_proj's input too, unless the rotary code assembled q with
  `torch.cat` (Phi-3, Nemotron), whose (b, heads, s, d)-contiguous layout the output follows, so
  `transpose(1, 2).contiguous()` copies it: 2q more) and log-sum-exp (4 per head). A layer whose
  sliding window does not exceed the sequence gets an explicit boolean mask (masking_utils
  `_ignore_causal_mask_sdpa` returns False), so `use_gqa_in_sdpa` is False and `repeat_kv`
  expands K and V to all heads (2q each saved), and SDPA converts the mask to an additive bf16
  bias of (b, 1, s, s) that the kernel keeps (2 s per token, measured);
- **MLP**: gated `down(act(gate(x)) * up(x))`: the activation's input, its output, up's output
  and the product (down's input): 8f, fused or not; plain: ReLU keeps its output (2f, down's
  input), aten GELU its input and output 4f; CUDA's autocast runs `pow` in fp32 (autocast_mode.cpp's
  fp32 list; CPU's runs it in bf16), so relu2 `square(relu(x))` keeps relu's bf16 output, pow's
  fp32 input and down's bf16 input (8f), and GPT-2's `gelu_new` (`0.5 * x * (1 + tanh(...))` in
  Python, `torch.pow(x, 3.0)`) the fp32 upcast, tanh's and (1 + tanh)'s fp32 outputs, 0.5 x and
  c_proj's bf16 input (16f);
- **dropout** in training with p > 0 (OPT, GPT-2 residual dropout): native_dropout keeps a bool
  mask (1 per element) on CUDA (CPU saves the bf16 noise instead: 2).
Elementwise traffic (forward; the backward moves twice as much, the convention of
`kernels.elementwise_bytes_per_token`) counts each op's reads and writes; the ops per layer are
the component counts measured with TorchDispatchMode (tests/test_frameworks.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..specs import ModelSpec


@dataclass(frozen=True)
class Code:
    """How a family's modelling code builds a decoder layer (module docstring)."""

    norm: str  # rms (LlamaRMSNorm) | rms_1p (Gemma) | layernorm (nn.LayerNorm) | layernorm_1p (Nemotron)
    post_norms: bool = False  # Gemma 2/3: norms after attention and after the MLP too
    fused_qkv: bool = False  # one QKV projection (Phi-3 qkv_proj, GPT-2 c_attn)
    fused_gate_up: bool = False  # one gate/up projection (Phi-3 gate_up_proj)
    rope_concat: bool = False  # rotary output assembled with torch.cat (Phi-3, Nemotron, GPT-NeoX)
    query_scale: bool = False  # OPT: q_proj(x) * scaling before SDPA
    embed_scale: bool = False  # Gemma: embeddings times sqrt(hidden_size)
    resid_dropout: bool = False  # dropout on the attention and MLP outputs (OPT dropout, GPT-2/Phi-3 resid_pdrop)
    shared_norm: bool = False  # Phi: attention and MLP in parallel on one input_layernorm output


_LLAMA = Code("rms")
CODE: dict[str, Code] = {
    "llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "qwen3": _LLAMA, "mixtral": _LLAMA, "qwen2_moe": _LLAMA,
    "qwen3_moe": _LLAMA, "olmo2": _LLAMA, "deepseek": _LLAMA, "deepseek_v2": _LLAMA, "deepseek_v3": _LLAMA,
    "gemma": Code("rms_1p", embed_scale=True), "gemma2": Code("rms_1p", post_norms=True, embed_scale=True),
    "gemma3_text": Code("rms_1p", post_norms=True, embed_scale=True),
    "phi3": Code("rms", fused_qkv=True, fused_gate_up=True, rope_concat=True, resid_dropout=True),
    "nemotron": Code("layernorm_1p", rope_concat=True), "opt": Code("layernorm", query_scale=True, resid_dropout=True),
    "gpt2": Code("layernorm", fused_qkv=True, resid_dropout=True),
    "gpt_neox": Code("layernorm", fused_qkv=True, rope_concat=True, resid_dropout=True),
    "bloom": Code("layernorm", fused_qkv=True, resid_dropout=True), "olmo": Code("layernorm"),
    # modeling_phi.py PhiDecoderLayer: q_proj, k_proj, v_proj and fc1 read ONE nn.LayerNorm's fp32 output (four
    # autocast casts, one norm), the partial rotary's torch.cat, resid_dropout on both branches, then
    # `attn_outputs + feed_forward_hidden_states + residual`; composed from the components above, not measured (the
    # first stage's embedding dropout mask follows the spec's one dropout: phi-2's embd_pdrop 0 keeps none, h too many)
    "phi": Code("layernorm", rope_concat=True, resid_dropout=True, shared_norm=True),
}
# The activation a spec without `hidden_act` runs (transformers ACT2FN names).
DEFAULT_ACT = {"swiglu": "silu", "geglu": "gelu_pytorch_tanh", "quick_geglu": "silu", "gelu": "gelu", "relu": "relu",
               "squared_relu": "relu2"}


def layer_code(model: ModelSpec) -> Code:
    """The family's code (`CODE`); a spec of no known family is read as the Llama-style (or
    LayerNorm) decoder its normalisation fields describe."""
    if model.hf_model_type in CODE:
        return CODE[model.hf_model_type]
    if model.normalization == "RMSNorm":
        return Code("rms_1p") if model.norm_zero_centered_gamma else _LLAMA
    return Code("layernorm_1p") if model.norm_zero_centered_gamma else Code("layernorm")


@dataclass
class Tally:
    """Per-token sums of one layer: bytes saved, forward traffic (bytes read + written), aten ops."""

    saved: float = 0.0
    traffic: float = 0.0
    ops_fwd: float = 0.0
    ops_bwd: float = 0.0
    per_layer: float = 0.0  # bytes saved per layer whatever the tokens (norm weights made per call)

    def add(self, saved=0.0, traffic=0.0, ops=(0, 0), per_layer=0.0) -> None:
        self.saved += saved
        self.traffic += traffic
        self.ops_fwd += ops[0]
        self.ops_bwd += ops[1]
        self.per_layer += per_layer


# Aten ops per component (forward, backward), as TorchDispatchMode counts them in transformers'
# code on torch 2.x (tests/test_frameworks.py checks the sums per family).
OPS = dict(linear=(7, 12), cast=(1, 1), rms=(6, 13), rms_bf16=(7, 15), rms_1p=(8, 16), rms_1p_bf16=(9, 17),
           layernorm=(1, 2), layernorm_1p=(4, 6), rope=(12, 14), concat=(8, 14), sdpa=(5, 6), mask=(6, 6),
           gated=(2, 5), relu=(1, 1), relu2=(2, 4), gelu=(1, 1), gelu_new=(8, 16), dropout=(4, 1), residual=(1, 1),
           layer=(6, 14))


def norm(t: Tally, kind: str, width: float, rows: float, fp32_in: bool) -> bool:
    """A norm of `width` elements per token over `rows` rows; returns whether its output is fp32."""
    if kind == "layernorm":
        t.add(saved=4 * width + 8 * rows, traffic=8 * width, ops=OPS["layernorm"])
        return True
    if kind == "layernorm_1p":  # cast to bf16 (r4 w2), layer_norm in bf16 (r2 w2); weight + 1 and bias in bf16
        t.add(saved=2 * width + 8 * rows, traffic=10 * width, ops=OPS["layernorm_1p"], per_layer=4 * width / rows)
        return False
    gemma = kind == "rms_1p"
    if fp32_in:  # pow r4 w4, mean r4, mul r4 w4, weight mul r4 w4
        t.add(saved=8 * width + 4 * rows, traffic=28 * width, ops=OPS["rms_1p" if gemma else "rms"],
              per_layer=4 * width / rows if gemma else 0.0)
        return True
    # bf16 input: upcast r2 w4, pow, mean, mul, then Gemma mul (1+w) and type_as r4 w2 (output bf16), or
    # Llama `.to(bf16)` r4 w2 and the fp32 weight's mul r2 w4 (output fp32)
    t.add(saved=(8 if gemma else 6) * width + 4 * rows, traffic=(40 if gemma else 38) * width,
          ops=OPS["rms_1p_bf16" if gemma else "rms_bf16"], per_layer=4 * width / rows if gemma else 0.0)
    return not gemma


def linear_inputs(t: Tally, width: float, consumers: int, fp32_in: bool, linears: int) -> None:
    """The bf16 inputs the linears keep: one cast per consuming linear of an fp32 input (r4 w2)."""
    casts = consumers if fp32_in else 1
    t.add(saved=2 * width * casts, traffic=6 * width * consumers if fp32_in else 0.0,
          ops=tuple(OPS["cast"][i] * (consumers if fp32_in else 0) + OPS["linear"][i] * linears for i in (0, 1)))


def attention(t: Tally, model: ModelSpec, code: Code, fp32_in: bool, masked: bool, seq: float) -> None:
    """Projections, q/k norms, rotary, SDPA and the output projection (module docstring)."""
    h, q, kv, a, g = (float(x) for x in (model.hidden_size, model.q_hidden_size, model.kv_hidden_size,
                                         model.num_attention_heads, model.kv_heads))
    linear_inputs(t, h, 1 if code.fused_qkv else 3, fp32_in, 2 if code.fused_qkv else 4)
    if code.query_scale:
        t.add(traffic=4 * q, ops=(1, 1))
    if model.qk_norm:
        kind = code.norm if code.norm.startswith("rms") else "rms"
        norm(t, kind, q, a, False)
        norm(t, kind, kv, g, False)
    rope = model.position_embedding == "rope"
    if rope:  # on the rotated fraction p: 2 mul r2 w4, rotate_half's neg r1 w1 and cat r2 w2, add r8 w4 per
        # element; torch.cat of the fp32 rotated part and the bf16 rest into fp32 (r4p + r2(1 - p), w4)
        p = model.rotary_percent or 1.0
        t.add(traffic=(30 * p + (4 * p + 2 * (1 - p) + 4) * code.rope_concat) * (q + kv),
              ops=tuple(OPS["rope"][i] + OPS["concat"][i] * code.rope_concat for i in (0, 1)))
    # SDPA's inputs: q (and k) cast back to bf16 after rotary (r4 w2); V the projection's bf16 output
    t.add(saved=2 * q, traffic=6 * q * rope)
    if masked:  # repeat_kv: k in fp32 (r4kv w4q) then cast (r4q w2q), v (r2kv w2q); the bool mask -> bf16 bias
        t.add(saved=4 * q + 2 * seq, traffic=(4 * kv + 4 * q) + 6 * q + (2 * kv + 2 * q) + 3 * seq, ops=OPS["mask"])
    elif code.fused_qkv and not rope:  # SDPA copies the Q and V views of c_attn's output; K stays a view of it
        t.add(saved=2 * (q + 2 * kv) + 2 * kv, traffic=4 * q + 4 * kv)
    elif code.fused_qkv:  # V a view of qkv_proj's output, which it keeps whole (an upper bound: see above)
        t.add(saved=2 * kv + 2 * (q + 2 * kv), traffic=6 * kv)
    else:
        t.add(saved=4 * kv, traffic=6 * kv * rope)
    t.add(saved=2 * q + 4 * a, ops=OPS["sdpa"], per_layer=16.0)  # output, log-sum-exp; philox seed and offset
    if code.rope_concat:  # the output follows q's (b, heads, s, d) layout: transpose(1, 2).contiguous() copies
        t.add(saved=2 * q, traffic=4 * q, ops=(1, 1))


def mlp(t: Tally, model: ModelSpec, code: Code, fp32_in: bool) -> None:
    """The MLP's linear inputs and activation (module docstring)."""
    h, f = float(model.hidden_size), float(model.ffn_hidden_size)
    if model.gated_mlp:  # act r2 w2, mul r4 w2
        consumers = 1 if code.fused_gate_up else 2
        linear_inputs(t, h, consumers, fp32_in, consumers + 1)
        t.add(saved=8 * f, traffic=10 * f, ops=OPS["gated"])
        return
    linear_inputs(t, h, 1, fp32_in, 2)
    act = model.hidden_act or DEFAULT_ACT.get(model.activation or "gelu", "gelu")
    kind = act if act in ("relu", "relu2", "gelu_new") else "gelu"
    saved, traffic = dict(relu=(2, 4), relu2=(8, 24), gelu_new=(16, 76), gelu=(4, 4))[kind]
    t.add(saved=saved * f, traffic=traffic * f, ops=OPS[kind])


def block_end(t: Tally, model: ModelSpec, code: Code, bf16_sum: bool = False) -> None:
    """After attention and after the MLP: Gemma's extra norm (bf16 input), residual dropout, the
    residual add (fp32 + bf16 -> fp32: r6 w4; Phi's attention + MLP outputs first, bf16 + bf16: r4 w2)."""
    h = float(model.hidden_size)
    if code.post_norms:
        norm(t, code.norm, h, 1.0, False)
    if code.resid_dropout and model.dropout > 0:  # native_dropout: r2 w2 and the bool mask w1
        t.add(saved=h, traffic=5 * h, ops=OPS["dropout"])
    t.add(traffic=(6 if bf16_sum else 10) * h, ops=OPS["residual"])


def bias_traffic(model: ModelSpec) -> float:
    """Forward-equivalent traffic of the bias gradients (the backward reads each biased output's
    gradient once: 2 bytes, half of which the backward-is-twice convention already holds)."""
    q, kv, h, f = model.q_hidden_size, model.kv_hidden_size, model.hidden_size, model.ffn_hidden_size
    return float((q + 2 * kv) * bool(model.add_qkv_bias)
                 + (h + f * (2 if model.gated_mlp else 1) + h) * model.add_bias_linear)


def layer_tally(model: ModelSpec, masked: bool, seq: float) -> Tally:
    """One decoder layer (attention masked or not) of `model`'s family, per token."""
    code = layer_code(model)
    h = float(model.hidden_size)
    t = Tally()
    t.add(ops=OPS["layer"], traffic=bias_traffic(model))
    normed_fp32 = norm(t, code.norm, h, 1.0, True)
    attention(t, model, code, normed_fp32, masked, seq)
    block_end(t, model, code, bf16_sum=code.shared_norm)
    mlp(t, model, code, normed_fp32 if code.shared_norm else norm(t, code.norm, h, 1.0, True))
    block_end(t, model, code)
    return t


@dataclass(frozen=True)
class LayerCounts:
    """A model's eager layers at one sequence length, per token unless said (module docstring).
    Layers differ only in their attention's mask: `saved`, `traffic` and `ops` average them."""

    saved: float  # bytes autograd keeps for backward, per token of one layer
    per_layer: float  # bytes kept per layer whatever the tokens
    working: float  # per token, the largest layer's `saved` (full recompute rebuilds one layer at a time)
    input: float  # per token, what full recompute keeps of a layer: its fp32 input (checkpoint's saved args)
    traffic: float  # forward elementwise bytes per token (the backward moves twice)
    ops: tuple[float, float]  # aten ops of one layer (forward, backward)
    head: float  # last stage per token: final norm, the LM head's bf16 input, token ids and labels
    first: float  # first stage per token: learned positions' ids, the embedding's dropout mask
    mask: float  # bytes per micro-batch of the boolean (1, 1, s, s) mask masking_utils builds once per forward
    masked_layers: int  # layers whose window does not exceed the sequence: explicit mask, full s x s attention
    source: str


def counts(model: ModelSpec, seq_length: float) -> LayerCounts:
    """The eager layers of `model` at `seq_length` tokens per sequence."""
    s = float(seq_length)
    masked = model.windowed_layers if model.sliding_window is not None and s >= model.sliding_window else 0
    plain, windowed = layer_tally(model, False, s), layer_tally(model, True, s)
    w = masked / model.num_layers

    def avg(field: str) -> float:
        return (1 - w) * getattr(plain, field) + w * getattr(windowed, field)

    code, h = layer_code(model), float(model.hidden_size)
    head = Tally()
    norm(head, code.norm, h, 1.0, True)
    first = 8.0 * (model.position_embedding == "learned_absolute") + h * (code.resid_dropout and model.dropout > 0)
    return LayerCounts(
        saved=avg("saved"), per_layer=avg("per_layer"), working=windowed.saved if masked else plain.saved,
        input=4.0 * h, traffic=avg("traffic"), ops=(avg("ops_fwd"), avg("ops_bwd")),
        head=head.saved + 2.0 * h + 16.0, first=first, mask=s * s if masked else 0.0, masked_layers=masked,
        source=f"transformers {model.hf_model_type or 'Llama-style'} decoder layer (formulation/eager_layers.py)")
