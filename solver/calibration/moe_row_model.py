"""A mixture-of-experts row's model from the shape it states, for a model the catalog does not have
(read by `moe_rows.moe_row_job`): a published run of such a model is priced, not refused.

The row's fields (the MoE file's schema, ../shared/data/published_runs_moe_newgpu.json `model`):
layers, hidden, heads, kv_heads, head_dim, num_experts, top_k, moe_ffn_hidden (or ffn_hidden with
ffn_hidden_kind "per-expert"), ffn_hidden for the dense layers, shared_experts (a count, or "n (size)"),
moe_layer_freq (free text: "all layers MoE", "first 3 layers dense, 58 MoE", "every other layer"), mla
(q_lora_rank, kv_lora_rank, qk_head_dim, qk_rope_head_dim, v_head_dim), vocab, seq_len, and the
free-text `arch` (a sigmoid router with expert bias, stated or as "DeepSeek-V3-style", QK norm, biases
in linears).

What no row field states is Megatron-Core's MoE default and is said in the row's `assumed`: SwiGLU
experts (Mixtral, DeepSeek, Qwen, Llama 4, GPT-OSS alike), RMSNorm, RoPE, untied embeddings, no
dropout, dropless routing, no MTP. A shape it cannot build (no vocabulary, a layer pattern it cannot
read, a hybrid or windowed architecture whose extra dimensions the schema does not hold) is a reason
the row is skipped, naming the field and the fix (a catalog entry)."""

from __future__ import annotations

import ast
import re

from ..specs import ModelSpec

# architectures the schema cannot describe whole (their extra dimensions are in no row field)
UNBUILDABLE = ("mamba", "hybrid", "latentmoe", "sliding", "chunked", "deltanet", "linear attention")
V3_STYLE = "deepseek-v3-style"  # DeepSeek-V3's router: sigmoid scores with a per-expert bias (its report, Sec. 2.1.2)
DEFAULTS_SAID = ("SwiGLU experts, RMSNorm, RoPE, untied embeddings, no dropout, dropless routing and no MTP "
                 "(Megatron-Core's MoE defaults; the row states none of them)")


def stated_moe_model(m: dict, assumed: list[str]) -> ModelSpec | str:
    """The row's model (`m`: its `model` block) built from its stated shape, or why it cannot be."""
    arch = str(m.get("arch") or "").lower()
    missing = [k for k in ("layers", "hidden", "heads", "num_experts", "top_k", "vocab", "seq_len")
               if not isinstance(m.get(k), int)]
    expert_ffn = m.get("moe_ffn_hidden") or (m.get("ffn_hidden") if "per-expert" in str(m.get("ffn_hidden_kind")) else None)
    if missing or not isinstance(expert_ffn, int):
        field = (missing or ["moe_ffn_hidden"])[0]
        return f"model {m.get('name')!r} has no catalog entry and the row states no {field}: add models/<key>.yaml"
    if any(word in arch for word in UNBUILDABLE):
        return (f"model {m.get('name')!r} has no catalog entry and its architecture ({m.get('arch')}) has dimensions "
                f"the row cannot state: add models/<key>.yaml")
    pattern = moe_layer_pattern(m.get("moe_layer_freq"), m["layers"])
    if isinstance(pattern, str):
        return pattern
    assumed.append(f"model built from the row's stated shape (no catalog entry); {DEFAULTS_SAID}")
    dense_ffn = m.get("ffn_hidden") if "dense" in str(m.get("ffn_hidden_kind")) else None
    spec = dict(
        name=m.get("name") or m.get("key") or "row", num_layers=m["layers"], hidden_size=m["hidden"],
        num_attention_heads=m["heads"], kv_channels=m.get("head_dim"), ffn_hidden_size=dense_ffn or expert_ffn,
        vocab_size=m["vocab"], seq_length=m["seq_len"], gated_mlp=True, activation="swiglu", tied_embeddings=False,
        position_embedding="rope", normalization="RMSNorm", dropout=0.0, add_bias_linear="biases in linears" in arch,
        qk_norm="qk-layernorm" in arch or "qk norm" in arch, num_experts=m["num_experts"],
        moe_ffn_hidden_size=expert_ffn, moe_router_topk=m["top_k"], moe_layer_pattern=pattern,
        moe_shared_expert_intermediate_size=shared_expert_size(m.get("shared_experts"), expert_ffn),
        moe_router_score_function="sigmoid" if "sigmoid" in arch or V3_STYLE in arch else "softmax",
        moe_router_enable_expert_bias="expert bias" in arch or V3_STYLE in arch, mtp_num_layers=0)
    mla = m.get("mla") or {}
    if mla:
        spec.update(multi_latent_attention=True, q_lora_rank=mla.get("q_lora_rank"), kv_lora_rank=mla.get("kv_lora_rank"),
                    qk_head_dim=mla.get("qk_head_dim"), qk_pos_emb_head_dim=mla.get("qk_rope_head_dim"),
                    v_head_dim=mla.get("v_head_dim"))
    else:
        spec["num_kv_heads"] = m.get("kv_heads")
    try:
        return ModelSpec(**spec)
    except ValueError as exc:
        return f"model {m.get('name')!r} has no catalog entry and its stated shape is not one: {exc}"


NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10}


def moe_layer_pattern(text, layers: int) -> tuple[int, ...] | None | str:
    """1 (MoE) or 0 (dense) per layer from the row's `moe_layer_freq`; None when every layer is MoE (stated so, or
    not stated: Megatron's --moe-layer-freq default 1); a reason when it is not read. Read: "all layers MoE";
    "first 3 layers dense" (also "first three", "first_k_dense_replace 3"); Megatron's own forms -- an integer N
    (layer i is MoE when i % N == 0: "2", "every other layer", "every 4th layer") and the list expression its
    `moe_freq_type` evaluates ("[0]*3+[1]*58", `megatron_list_pattern`)."""
    t = re.sub(r"\b(" + "|".join(NUMBER_WORDS) + r")\b", lambda m: str(NUMBER_WORDS[m.group(1)]),
               str(text if text is not None else "").strip().lower())
    freq = _as_freq(text, t)
    if not t or "all layers" in t or "every layer" in t or freq == 1:
        return None
    if freq:
        return tuple(int(i % freq == 0) for i in range(layers))
    first = re.search(r"first[ _](\d+|layer)\b[^,]*dense", t) or re.search(r"first_k_dense(?:_replace)?\D*(\d+)", t)
    if first:
        k = 1 if first.group(1) == "layer" else int(first.group(1))
        return (0,) * k + (1,) * (layers - k)
    if t.startswith(("[", "(")):
        return megatron_list_pattern(str(text), layers)
    return f"the row's moe_layer_freq {text!r} is not a pattern this reader knows: add models/<key>.yaml"


def _as_freq(text, t: str) -> int | None:
    """Megatron's integer --moe-layer-freq a row states: the number itself, or "every other / every Nth layer"."""
    if isinstance(text, int) and not isinstance(text, bool) and text > 0:
        return text
    if re.fullmatch(r"\d+", t) and int(t) > 0:
        return int(t)
    if "every other" in t or "alternat" in t:
        return 2
    every = re.search(r"every (\d+)(?:st|nd|rd|th)? layers?\b", t)
    return int(every.group(1)) if every and int(every.group(1)) > 0 else None


def megatron_list_pattern(text: str, layers: int) -> tuple[int, ...] | str:
    """The list expression Megatron's `moe_freq_type` evaluates (megatron/training/arguments.py at d98e8a6: digits
    and `[]()+*,` only, e.g. "[0]*3+[1]*58", "([0]*1+[1]*1)*24"), evaluated here on its syntax tree -- lists of 0
    and 1, `+`, `*` by a whole number -- never by `eval`; it must give one entry per layer."""
    def value(node):
        if isinstance(node, ast.List):
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            return items if all(v in (0, 1) and not isinstance(v, bool) for v in items) else None
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and 0 <= node.value <= layers:
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = value(node.left), value(node.right)
            if a is None or b is None:
                return None
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                return a + b
            if isinstance(node.op, ast.Mult) and isinstance(a, list) != isinstance(b, list):
                items, times = (a, b) if isinstance(a, list) else (b, a)
                return items * times if len(items) * times <= layers else None  # never a list longer than the model
        return None

    try:
        mask = value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        mask = None
    if not isinstance(mask, list) or len(mask) != layers:
        return (f"the row's moe_layer_freq {text!r} is not Megatron's list of {layers} zeros and ones (one per layer): "
                f"state it as such or add models/<key>.yaml")
    return tuple(mask)


def shared_expert_size(text, expert_ffn: int) -> int | None:
    """The shared experts' total FFN width: "n (size)" is n x size, a bare count n is n experts of the
    routed experts' size; none (0 or unstated) is None."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:\((\d+)\))?\s*", str(text if text is not None else ""))
    if not match or int(match.group(1)) == 0:
        return None
    return int(match.group(1)) * int(match.group(2) or expert_ffn)
