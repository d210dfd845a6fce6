"""What torchtitan's own MoE block saves for backward and the aten ops it dispatches, measured on CPU: the evidence for
formulation/eager_moe.py's count (`--framework torchtitan` on a mixture-of-experts model).

Builds torchtitan's `MoE` (torchtitan/models/common/moe.py: `TokenChoiceTopKRouter` + `RoutedExperts` with the
`LocalTokenDispatcher`, EP 1) in bf16 with the qwen3 decoder's router (softmax, route_norm, expert bias) for a spread
of tiny shapes, runs one forward under `torch.autograd.graph.saved_tensors_hooks` (unique storages; the block's
weights and its input left out) and counts the aten ops of the forward and the backward with TorchDispatchMode.
Writes the measurement as JSON (default benchmarks/measured/torchtitan-moe-cpu/moe_block.json), which
tests/test_torchtitan_moe_pricing.py compares with the count.

    pip install torch --index-url https://download.pytorch.org/whl/cpu
    pip install spmd_types==0.2.3 tyro einops      # torchtitan's imports
    PYTHONPATH=/path/to/torchtitan python benchmarks/torchtitan_moe_saved.py [--out FILE] [--torchtitan-commit SHA]

torchtitan is taken from PYTHONPATH (a checkout of pytorch/torchtitan; the committed file was measured at b5bcd76,
the MoE of torchtitan 0.3.0).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import warnings
import weakref
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "measured" / "torchtitan-moe-cpu" / "moe_block.json"
# (hidden, expert FFN, experts, top-k) of the tiny blocks measured, T tokens each, with qwen3's router; then
# deepseek_v3's: (..., shared FFN, score function, route_norm, expert groups, groups kept)
CASES = [(256, 96, 16, 4), (192, 64, 8, 2), (256, 128, 64, 8), (320, 96, 32, 6)]
DEEPSEEK_CASES = [(256, 96, 16, 4, 192, "sigmoid", True, 4, 2), (192, 64, 8, 2, 128, "softmax", False, None, None),
                  (256, 64, 32, 6, 128, "sigmoid", True, 8, 4)]
GPT_OSS_CASES = [(256, 96, 16, 4, 0, "softmax", True, None, None, True), (192, 64, 8, 2, 0, "softmax", True, None, None, True)]
TOKENS = 200


def build(dim: int, ffn: int, experts: int, top_k: int, shared: int = 0, score: str = "softmax", norm: bool = True,
          groups: int | None = None, kept: int | None = None, gpt_oss: bool = False):
    """torchtitan's MoE block, bf16, with qwen3's router settings (models/qwen3/__init__.py) by default, or
    deepseek_v3's (models/deepseek_v3/__init__.py: shared experts, sigmoid scores, expert groups)."""
    import torch
    from torchtitan.models.common.feed_forward import FeedForward
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import MoE, GroupedExperts, RoutedExperts, TokenChoiceTopKRouter
    from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher

    ffw = (FeedForward.Config(w1=Linear.Config(in_features=dim, out_features=shared),
                              w2=Linear.Config(in_features=shared, out_features=dim),
                              w3=Linear.Config(in_features=dim, out_features=shared)) if shared else None)
    block_cls, experts_cls = MoE, GroupedExperts
    if gpt_oss:  # models/gpt_oss/__init__.py: biased experts with the clamped SwiGLU, a gate with a bias
        from torchtitan.models.gpt_oss.moe import GptOssGroupedExperts, GptOssMoE
        block_cls, experts_cls = GptOssMoE, GptOssGroupedExperts
    cfg = block_cls.Config(
        num_experts=experts, shared_experts=ffw,
        routed_experts=RoutedExperts.Config(
            inner_experts=experts_cls.Config(dim=dim, hidden_dim=ffn, num_experts=experts),
            token_dispatcher=LocalTokenDispatcher.Config(num_experts=experts, top_k=top_k)),
        router=TokenChoiceTopKRouter.Config(num_experts=experts,
                                            gate=Linear.Config(in_features=dim, out_features=experts, bias=gpt_oss),
                                            top_k=top_k, score_func=score, route_norm=norm, num_expert_groups=groups,
                                            num_limited_groups=kept))
    block = block_cls(cfg)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return block.to(torch.bfloat16)


def measure(dim: int, ffn: int, experts: int, top_k: int, shared: int = 0, score: str = "softmax", norm: bool = True,
            groups: int | None = None, kept: int | None = None, gpt_oss: bool = False) -> dict:
    import inspect

    import torch
    from torchtitan.models.common.moe import RoutedExperts

    torch.manual_seed(0)
    block = build(dim, ffn, experts, top_k, shared, score, norm, groups, kept, gpt_oss)
    # torchtitan 0.3.0's block takes (batch, sequence, hidden), later ones (tokens, hidden)
    batched = "x_BLD" in inspect.signature(RoutedExperts.forward).parameters
    x = torch.randn(*((1,) if batched else ()), TOKENS, dim, dtype=torch.bfloat16, requires_grad=True)
    saved, fwd_ops, bwd_ops = _saved_and_ops(block, x)
    return dict(hidden=dim, ffn=ffn, experts=experts, top_k=top_k, shared_ffn=shared, score=score, route_norm=norm,
                expert_groups=groups, groups_kept=kept, gpt_oss=gpt_oss, tokens=TOKENS, saved_bytes=saved,
                ops_forward=len(fwd_ops), ops_backward=len(bwd_ops), forward_ops=fwd_ops, backward_ops=bwd_ops)


# multi-latent attention shapes measured (hidden, heads, q_lora rank (0: none), kv_lora rank, d_nope, d_rope, d_v)
MLA_CASES = [(256, 4, 0, 128, 32, 32, 48), (256, 8, 64, 96, 48, 16, 32)]
# attention-sink shapes (hidden, heads, KV heads, head dimension)
SINK_CASES = [(256, 4, 2, 64), (192, 6, 2, 32)]


def _flash_core():
    """A stand-in for torchtitan's attention kernels (varlen, flex): a flash-style core that keeps q, k, v, the output
    and the fp32 log-sum-exp for backward (CPU has no kernel that takes MLA's unequal Q/K and V head widths)."""
    import torch

    class Core(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):  # two ops, as a kernel's output and log-sum-exp (the values do not matter here)
            out = q.new_zeros(q.shape[0], q.shape[1], v.shape[-1])
            lse = torch.zeros(q.shape[1], q.shape[0], dtype=torch.float32)
            ctx.save_for_backward(q, k, v, out, lse)
            return out, lse

        @staticmethod
        def backward(ctx, grad, grad_lse):
            q, k, v, *_ = ctx.saved_tensors
            return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)

    class Module(torch.nn.Module):  # torchtitan's varlen: the log-sum-exp goes to `out_transform` (GPT-OSS's sinks)
        def forward(self, q, k, v, attention_masks=None, scale=None, out_transform=None, **kw):
            out, lse = Core.apply(q, k, v)
            return out if out_transform is None else out_transform(out, lse.transpose(0, 1))

    return Module()


def _saved_and_ops(module, x, *args) -> tuple[int, list[str], list[str]]:
    """(bytes saved for backward that backward will read, the aten ops of the forward, of the backward) of one call,
    `x` and the module's weights left out: the tensors still held once the forward is done (a branch of the graph that
    does not reach the output -- the expert-group choice, a top-k whose values are dropped -- frees what it saved)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
    packed: list[weakref.ref] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: packed.append(weakref.ref(t)) or t, lambda t: t):
        y = module(x, *args)
    saved = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (r() for r in packed)
             if t is not None and t.untyped_storage().data_ptr() not in weights
             and t.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()}
    del y
    fwd, bwd = Count(), Count()
    with fwd:
        y = module(x, *args)
    grad = torch.randn_like(y)
    with bwd:
        y.backward(grad)
    return sum(saved.values()), fwd.ops, bwd.ops


def _measure_attention(dim: int, **modules) -> dict:
    """`<name>_saved_bytes`, `<name>_ops_forward`, `<name>_ops_backward` of each attention module (by keyword), in bf16
    with the flash-style core, on TOKENS tokens of width `dim` (`_saved_and_ops`)."""
    import torch

    out = {}
    for name, module in modules.items():
        module.inner_attention = _flash_core()
        for p in module.parameters():
            torch.nn.init.normal_(p, std=0.02)
        module = module.to(torch.bfloat16)
        x = torch.randn(TOKENS, dim, dtype=torch.bfloat16, requires_grad=True)
        saved, fwd, bwd = _saved_and_ops(module, x, None, torch.arange(TOKENS))
        out.update({f"{name}_saved_bytes": saved, f"{name}_ops_forward": len(fwd), f"{name}_ops_backward": len(bwd)})
    return out


def measure_mla(dim: int, heads: int, q_lora: int, kv_lora: int, nope: int, rope: int, v: int) -> dict:
    """torchtitan's deepseek_v3 `Attention` (multi-latent) in bf16 with the flash-style core, and for its op count
    torchtitan's GQA module of the same model dimension (common/config_utils.py `make_gqa_config`)."""
    import torch
    import torchtitan.models.deepseek_v3 as dsv3
    from torchtitan.models.common.config_utils import make_gqa_config
    from torchtitan.models.common.rope import ComplexRoPE

    torch.manual_seed(0)
    rotary = ComplexRoPE.Config(dim=rope, max_context_length=4096, theta=10000.0)
    mla = dsv3.make_mla_attention_config(
        layer_id=0, dim=dim, n_heads=heads, q_lora_rank=q_lora, kv_lora_rank=kv_lora, qk_nope_head_dim=nope,
        qk_rope_head_dim=rope, v_head_dim=v, attn_backend="flex", linear_init=dsv3._LINEAR_INIT,
        norm_init=dsv3._NORM_INIT, depth_init=lambda i: dsv3._LINEAR_INIT, rope=rotary).build()
    gqa = make_gqa_config(dim=dim, n_heads=heads, n_kv_heads=heads // 2, head_dim=dim // heads,
                          wqkv_param_init=dsv3._LINEAR_INIT, wo_param_init=dsv3._LINEAR_INIT,
                          inner_attention=dsv3.get_attention_config("flex"),
                          rope=ComplexRoPE.Config(dim=dim // heads, max_context_length=4096, theta=10000.0)).build()
    out = dict(hidden=dim, heads=heads, q_lora_rank=q_lora, kv_lora_rank=kv_lora, d_nope=nope, d_rope=rope, d_v=v,
               tokens=TOKENS)
    return out | _measure_attention(dim, mla=mla, gqa=gqa)


def measure_sinks(dim: int, heads: int, kv_heads: int, head_dim: int) -> dict:
    """torchtitan's gpt_oss `Attention` (attention sinks, biased fused QKV) and its fused-QKV GQA module of the same
    widths, both in bf16 with the flash-style core: bytes saved and ops."""
    import torch
    import torchtitan.models.gpt_oss as oss
    from torchtitan.models.common.config_utils import make_gqa_config
    from torchtitan.models.common.rope import ComplexRoPE

    torch.manual_seed(0)
    rope = ComplexRoPE.Config(dim=head_dim, max_context_length=4096, theta=150000.0)
    sinks = oss._make_gptoss_attn_config(dim=dim, layer_id=0, attn_backend="varlen", n_heads=heads,
                                         n_kv_heads=kv_heads, head_dim=head_dim, fuse_qkv=True, rope=rope).build()
    gqa = make_gqa_config(dim=dim, n_heads=heads, n_kv_heads=kv_heads, head_dim=head_dim, wqkv_param_init={},
                          wo_param_init={}, inner_attention=oss.get_attention_config("varlen"), rope=rope,
                          fuse_qkv=True).build()
    out = dict(hidden=dim, heads=heads, kv_heads=kv_heads, head_dim=head_dim, tokens=TOKENS)
    return out | _measure_attention(dim, sinks=sinks, gqa=gqa)


def torchtitan_commit(stated: str | None) -> str:
    """The torchtitan commit measured: `stated` (--torchtitan-commit, for a checkout without git metadata), else git's."""
    if stated:
        return stated
    import torchtitan
    where = Path(torchtitan.__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (a checkout without git metadata: give --torchtitan-commit)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--torchtitan-commit", help="the commit of the torchtitan on PYTHONPATH, when it has no .git")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # CPU autocast refuses float32 (the gate's): the count states it
    import torch
    cases = [measure(*c) for c in CASES + DEEPSEEK_CASES]
    try:
        cases += [measure(*c) for c in GPT_OSS_CASES]
    except ImportError as exc:
        print(f"gpt_oss's block not measured: {exc}")
    try:
        sink_cases = [measure_sinks(*c) for c in SINK_CASES]
    except (ImportError, AttributeError, TypeError) as exc:
        sink_cases = []
        print(f"attention sinks not measured: {exc}")
    try:
        mla_cases, mla_why = [measure_mla(*c) for c in MLA_CASES], None
    except (ImportError, AttributeError, TypeError) as exc:  # a release whose deepseek_v3 helpers differ (0.3.0)
        mla_cases, mla_why = [], f"not measured on this release: {type(exc).__name__}: {exc}"
        print(f"multi-latent attention {mla_why}")
    out = dict(what="bytes torchtitan's MoE block saves for backward (unique storages, weights and input left out) "
                    "and its aten ops forward and backward, one bf16 forward of `tokens` tokens on CPU, EP 1",
               how="python benchmarks/torchtitan_moe_saved.py (saved_tensors_hooks, TorchDispatchMode)",
               env=dict(torch=torch.__version__, torchtitan=torchtitan_commit(args.torchtitan_commit), device="cpu"), cases=cases,
               mla_cases=mla_cases, **({"mla_not_measured": mla_why} if mla_why else {}), sink_cases=sink_cases)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for c in cases:
        print(f"h {c['hidden']} f {c['ffn']} E {c['experts']} k {c['top_k']}: {c['saved_bytes'] / TOKENS:.2f} B/token, "
              f"ops {c['ops_forward']} / {c['ops_backward']}")


if __name__ == "__main__":
    main()
