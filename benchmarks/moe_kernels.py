"""Measure the kernels of one mixture-of-experts layer on one GPU (issue 22: what the MoE
formulation prices): the router, token permutation and unpermutation, and the experts' MLP as
one grouped GEMM and as a loop of per-expert GEMMs.

    python benchmarks/moe_kernels.py --out moe_kernels.json          # on a CUDA GPU
    python benchmarks/moe_kernels.py --out tiny.json --tiny          # CPU check: tiny shapes

Needs only torch (it does not import solveplan). Per case -- a model's MoE widths (hidden H,
expert FFN F, E experts, top-k, gated SwiGLU experts) with T tokens on this rank and
E / EP experts held locally -- with balanced routing, as the published benchmarks force it:
- `router`: logits `x @ W_router` (T x H x E), softmax (sigmoid for DeepSeek-style routers),
  `topk`, in bf16, forward only;
- `permute`: the dispatched copies gathered expert by expert: a stable `argsort` of the T*k
  expert ids and an `index_select` of T*k rows of H (Megatron-Core `moe_utils.permute`);
- `unpermute`: the expert outputs weighted by their routing probabilities and summed back per
  token with `index_add_` (Megatron-Core `moe_utils.unpermute`);
- `experts_grouped`: fc1 (H -> 2F), SwiGLU, fc2 (F -> H) over the local experts' M = T*k/E
  tokens each, as `torch._grouped_mm` (one grouped GEMM per linear, as Megatron's
  `GroupedMLP` / TE's grouped linear), forward and forward + backward;
- `experts_loop`: the same as one `torch.matmul` per expert (Megatron's `SequentialMLP`).
Timing: CUDA events around each repetition after 3 warm-ups, repeated until 50 ms have passed
(at least 5 times); the median is kept. Tensors are bf16 with random values.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

# name: (hidden, expert ffn, experts, top-k, router) -- the models' config.json (tests/data/hf).
MODELS = {
    "qwen3-30b-a3b": (2048, 768, 128, 8, "softmax"),
    "qwen3-235b-a22b": (4096, 1536, 128, 8, "softmax"),
    "gpt-oss-120b": (2880, 2880, 128, 4, "softmax"),
    "deepseek-v3": (7168, 2048, 256, 8, "sigmoid"),
    "mixtral-8x7b": (4096, 14336, 8, 2, "softmax"),
    "llama4-maverick": (5120, 8192, 128, 1, "sigmoid"),
}
# (model, tokens on the rank, expert-parallel width)
CASES = (
    ("qwen3-30b-a3b", 8192, 1), ("qwen3-30b-a3b", 8192, 8), ("qwen3-30b-a3b", 4096, 8), ("qwen3-30b-a3b", 16384, 8),
    ("qwen3-235b-a22b", 4096, 8), ("qwen3-235b-a22b", 8192, 32),
    ("gpt-oss-120b", 8192, 8), ("gpt-oss-120b", 4096, 8), ("gpt-oss-120b", 8192, 32),
    ("deepseek-v3", 4096, 8), ("deepseek-v3", 4096, 32), ("deepseek-v3", 8192, 64), ("deepseek-v3", 16384, 64),
    ("mixtral-8x7b", 4096, 1), ("mixtral-8x7b", 4096, 8), ("mixtral-8x7b", 8192, 8),
    ("llama4-maverick", 8192, 8), ("llama4-maverick", 8192, 64),
)


class Timer:
    """Median seconds of a callable (module docstring: timing)."""

    def __init__(self, torch, cuda: bool, min_time_s: float = 0.05, min_reps: int = 5):
        self.torch, self.cuda, self.min_time_s, self.min_reps = torch, cuda, min_time_s, min_reps

    def once(self, fn) -> float:
        if not self.cuda:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        begin, end = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    def __call__(self, fn) -> float:
        for _ in range(3):
            self.once(fn)
        times: list[float] = []
        while len(times) < self.min_reps or sum(times) < self.min_time_s:
            times.append(self.once(fn))
        return statistics.median(times)


def expert_mlp(torch, x, w1, w2, offs, grouped: bool):
    """fc1 (gated, 2F), SwiGLU, fc2 over tokens already sorted by local expert."""
    if grouped:
        h = torch._grouped_mm(x, w1, offs=offs)
        gate, up = h.chunk(2, dim=-1)
        return torch._grouped_mm(torch.nn.functional.silu(gate) * up, w2, offs=offs)
    outs, start = [], 0
    for expert, end in enumerate(offs.tolist()):
        h = x[start:end] @ w1[expert]
        gate, up = h.chunk(2, dim=-1)
        outs.append((torch.nn.functional.silu(gate) * up) @ w2[expert])
        start = end
    return torch.cat(outs)


def one_case(torch, timer: Timer, model: str, tokens: int, ep: int, device: str) -> dict:
    """Every kernel of the module docstring for one (model, tokens, EP) case."""
    hidden, ffn, experts, topk, router = MODELS[model]
    local = max(experts // ep, 1)
    per_expert = tokens * topk // experts
    dtype = torch.bfloat16
    row = dict(model=model, hidden=hidden, ffn=ffn, experts=experts, topk=topk, tokens=tokens, ep=ep,
               local_experts=local, tokens_per_expert=per_expert)
    x = torch.randn(tokens, hidden, device=device, dtype=dtype)
    w_router = torch.randn(hidden, experts, device=device, dtype=dtype)

    def route():
        logits = x @ w_router
        scores = logits.float().sigmoid() if router == "sigmoid" else logits.float().softmax(-1)
        return scores.topk(topk, dim=-1)

    row["router_s"] = timer(route)
    probs, ids = route()
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    token_of = order // topk
    row["permute_s"] = timer(lambda: x.index_select(0, torch.argsort(flat, stable=True) // topk))
    dispatched = x.index_select(0, token_of)
    weights = probs.flatten()[order].to(dtype).unsqueeze(-1)
    row["unpermute_s"] = timer(
        lambda: torch.zeros(tokens, hidden, device=device, dtype=dtype).index_add_(0, token_of, dispatched * weights))
    local_tokens = torch.randn(local * per_expert, hidden, device=device, dtype=dtype, requires_grad=True)
    # weights stored as nn.Linear's (out, in) and used transposed, as a grouped linear holds them
    w1 = torch.randn(local, 2 * ffn, hidden, device=device, dtype=dtype).transpose(-2, -1).requires_grad_()
    w2 = torch.randn(local, hidden, ffn, device=device, dtype=dtype).transpose(-2, -1).requires_grad_()
    grad = torch.randn(local * per_expert, hidden, device=device, dtype=dtype)
    offs = torch.arange(1, local + 1, device=device, dtype=torch.int32) * per_expert
    flops = 2.0 * local * per_expert * hidden * 3 * ffn
    for name, grouped in (("grouped", True), ("loop", False)):
        try:
            fwd = timer(lambda g=grouped: expert_mlp(torch, local_tokens, w1, w2, offs, g))
            fwd_bwd = timer(lambda g=grouped: expert_mlp(torch, local_tokens, w1, w2, offs, g).backward(grad))
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            row[f"experts_{name}_error"] = str(exc).splitlines()[0][:200]
            continue
        row |= {f"experts_{name}_fwd_s": fwd, f"experts_{name}_fwd_bwd_s": fwd_bwd,
                f"experts_{name}_fwd_tflops": flops / fwd / 1e12, f"experts_{name}_fwd_bwd_tflops": 3 * flops / fwd_bwd / 1e12}
    row["permute_bytes"] = 2 * tokens * topk * hidden * 2  # bf16 rows read and written
    return row


def setup(torch, tiny: bool, num_tiny_cases: int) -> tuple[bool, str, tuple, dict]:
    """(cuda, device, cases, environment) of a run; `tiny` shrinks MODELS in place and keeps the
    first `num_tiny_cases` cases at 64 tokens (a CPU check of the script). Shared with
    benchmarks/moe_gemm_passes.py."""
    cuda = torch.cuda.is_available() and not tiny
    device = "cuda" if cuda else "cpu"
    cases = CASES
    if tiny:
        for name, (_, _, experts, topk, router) in list(MODELS.items()):
            MODELS[name] = (64, 32, min(experts, 16), min(topk, 4), router)
        cases = tuple((model, 64, min(ep, 4)) for model, _, ep in CASES[:num_tiny_cases])
    env = dict(torch=torch.__version__, python=platform.python_version(), device=device,
               when=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if cuda:
        env |= dict(device=torch.cuda.get_device_name(), cuda=torch.version.cuda)
    return cuda, device, cases, env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU (a check of this script)")
    args = parser.parse_args()
    import torch

    cuda, device, cases, env = setup(torch, args.tiny, num_tiny_cases=4)
    result = dict(what="one MoE layer's kernels (benchmarks/moe_kernels.py)", how=__doc__.split("Needs only torch")[1],
                  env=env, rows=[])
    timer = Timer(torch, cuda)
    for model, tokens, ep in cases:
        row = one_case(torch, timer, model, tokens, ep, device)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
