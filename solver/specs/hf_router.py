"""What a mixture-of-experts router does with the top-k scores it picks, from a Hugging Face config: whether they are
renormalised (`norm_topk_prob`) and scaled (`routed_scaling_factor`), as Megatron-Core builds it
(megatron/core/transformer/moe/moe_utils.py `topk_routing_with_score_function` at d98e8a6):

- softmax scores: softmax over the k picked logits (renormalised, Megatron's default) or, with
  `--moe-router-pre-softmax`, over every expert before the pick (not renormalised): HF norm_topk_prob false, as
  Megatron-Bridge's qwen3_moe_bridge.py maps it (`moe_router_pre_softmax = not norm_topk_prob`);
- sigmoid and sqrt-softplus scores: always divided by their sum when k > 1; a config that does not renormalise them
  has no Megatron-LM switch (said in the notes);
- `--moe-router-topk-scaling-factor`: the probabilities times HF routed_scaling_factor (Megatron-Bridge's
  model_bridge.py CONFIG_MAPPING maps the one to the other).

The families differ in which keys their modelling code reads (`hf_families._Moe.norm_topk`, `.routed_scale`). No
priced term depends on either: they decide the model a checkpoint holds, which the launch must build."""

from __future__ import annotations

from .hf_read import read_bool, read_num


def router_probs_fields(data: dict, mt: str, score: str, topk: int, norm_default: bool | None,
                        scale_default: float | None, notes: list[str]) -> dict:
    """`moe_router_pre_softmax` and `moe_router_topk_scaling_factor` of a config (module docstring). `norm_default`:
    the family's norm_topk_prob when the config omits it, None where its code always renormalises; `scale_default`:
    its routed_scaling_factor, None where its code scales nothing."""
    out: dict = {}
    if norm_default is not None:
        if not read_bool(data, mt, "norm_topk_prob", norm_default) and topk > 1:
            if score == "softmax":
                out["moe_router_pre_softmax"] = True
            else:
                notes.append(f"norm_topk_prob false with {score} scores: Megatron-LM renormalises {score} top-k "
                             f"probabilities and has no switch for this; the launch builds renormalised ones")
    if scale_default is not None:
        scale = read_num(data, mt, "routed_scaling_factor", scale_default)
        if scale != 1.0:
            out["moe_router_topk_scaling_factor"] = scale
    return out
