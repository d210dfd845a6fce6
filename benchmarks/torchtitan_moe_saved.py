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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "measured" / "torchtitan-moe-cpu" / "moe_block.json"
# (hidden, expert FFN, experts, top-k) of the tiny blocks measured, T tokens each
CASES = [(256, 96, 16, 4), (192, 64, 8, 2), (256, 128, 64, 8), (320, 96, 32, 6)]
TOKENS = 200


def build(dim: int, ffn: int, experts: int, top_k: int):
    """torchtitan's MoE block with qwen3's router settings (models/qwen3/__init__.py), bf16."""
    import torch
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.common.moe import MoE, GroupedExperts, RoutedExperts, TokenChoiceTopKRouter
    from torchtitan.models.common.token_dispatcher import LocalTokenDispatcher

    cfg = MoE.Config(
        num_experts=experts,
        routed_experts=RoutedExperts.Config(
            inner_experts=GroupedExperts.Config(dim=dim, hidden_dim=ffn, num_experts=experts),
            token_dispatcher=LocalTokenDispatcher.Config(num_experts=experts, top_k=top_k)),
        router=TokenChoiceTopKRouter.Config(num_experts=experts, gate=Linear.Config(in_features=dim, out_features=experts),
                                            top_k=top_k, score_func="softmax", route_norm=True))
    block = MoE(cfg)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02)
    return block.to(torch.bfloat16)


def measure(dim: int, ffn: int, experts: int, top_k: int) -> dict:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    import inspect

    from torchtitan.models.common.moe import RoutedExperts

    torch.manual_seed(0)
    block = build(dim, ffn, experts, top_k)
    # torchtitan 0.3.0's block takes (batch, sequence, hidden), later ones (tokens, hidden)
    batched = "x_BLD" in inspect.signature(RoutedExperts.forward).parameters
    x = torch.randn(*((1,) if batched else ()), TOKENS, dim, dtype=torch.bfloat16, requires_grad=True)
    weights = {p.untyped_storage().data_ptr() for p in block.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in weights and st.data_ptr() != x.untyped_storage().data_ptr():
            saved[st.data_ptr()] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        block(x)
    fwd, bwd = Count(), Count()
    with fwd:
        y = block(x)
    grad = torch.randn_like(y)
    with bwd:
        y.backward(grad)
    return dict(hidden=dim, ffn=ffn, experts=experts, top_k=top_k, tokens=TOKENS, saved_bytes=sum(saved.values()),
                ops_forward=len(fwd.ops), ops_backward=len(bwd.ops), forward_ops=fwd.ops, backward_ops=bwd.ops)


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
    cases = [measure(*c) for c in CASES]
    out = dict(what="bytes torchtitan's MoE block saves for backward (unique storages, weights and input left out) "
                    "and its aten ops forward and backward, one bf16 forward of `tokens` tokens on CPU, EP 1",
               how="python benchmarks/torchtitan_moe_saved.py (saved_tensors_hooks, TorchDispatchMode)",
               env=dict(torch=torch.__version__, torchtitan=torchtitan_commit(args.torchtitan_commit), device="cpu"), cases=cases)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for c in cases:
        print(f"h {c['hidden']} f {c['ffn']} E {c['experts']} k {c['top_k']}: {c['saved_bytes'] / TOKENS:.2f} B/token, "
              f"ops {c['ops_forward']} / {c['ops_backward']}")


if __name__ == "__main__":
    main()
