"""Measure the three passes of the MoE experts' GEMMs separately on one GPU (issue 22: which
pass the grouped-GEMM terms miss): forward, data gradient and weight gradient of fc1 (h -> 2f)
and fc2 (f -> h) over the local experts, two ways:

- `grouped`: `torch._grouped_mm`, one CUTLASS kernel per linear and pass (the weight gradient
  as the 2-D x 2-D form with offsets along the token dimension, one (h x n) product per expert);
- `streams`: one `torch.mm` per expert, issued round-robin on four CUDA streams, as Transformer
  Engine's GroupedLinear runs Megatron's experts (`multi_stream_cublas_gemm`, four compute
  streams), with no autograd and no Python between the launches beyond the loop itself.

    python benchmarks/moe_gemm_passes.py --out passes.json        # on a CUDA GPU
    python benchmarks/moe_gemm_passes.py --out tiny.json --tiny   # CPU check

Needs only torch. Cases are benchmarks/moe_kernels.py's (the same models, tokens and EP).
Timing: CUDA events around each repetition after 3 warm-ups, until 50 ms have passed (at least
5 repetitions); the median is kept. bf16, random values.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from moe_kernels import MODELS, Timer, setup  # noqa: E402


def grouped_passes(torch, x, w, grad, offs) -> dict:
    """fwd (M x K)(K x N), dgrad (M x N)(N x K), wgrad (K x M)(M x N) per group, grouped."""
    return {"fwd": lambda: torch._grouped_mm(x, w, offs=offs),
            "dgrad": lambda: torch._grouped_mm(grad, w.transpose(-2, -1), offs=offs),
            "wgrad": lambda: torch._grouped_mm(x.t(), grad, offs=offs)}


def streamed_passes(torch, x, w, grad, groups: int, per_expert: int, streams) -> dict:
    """The same passes as one `mm` per expert on `streams` round-robin."""
    xs, gs = x.split(per_expert), grad.split(per_expert)

    def run(product):
        if streams:
            current = torch.cuda.current_stream()
            for stream in streams:
                stream.wait_stream(current)
            for expert in range(groups):
                with torch.cuda.stream(streams[expert % len(streams)]):
                    product(expert)
            for stream in streams:
                current.wait_stream(stream)
        else:
            for expert in range(groups):
                product(expert)

    return {"fwd": lambda: run(lambda e: torch.mm(xs[e], w[e])),
            "dgrad": lambda: run(lambda e: torch.mm(gs[e], w[e].t())),
            "wgrad": lambda: run(lambda e: torch.mm(xs[e].t(), gs[e]))}


def one_case(torch, timer, model: str, tokens: int, ep: int, device: str, streams) -> dict:
    hidden, ffn, experts, topk, _ = MODELS[model]
    groups, per_expert = max(experts // ep, 1), tokens * topk // experts
    row = dict(model=model, tokens=tokens, ep=ep, local_experts=groups, tokens_per_expert=per_expert, hidden=hidden,
               ffn=ffn)
    offs = torch.arange(1, groups + 1, device=device, dtype=torch.int32) * per_expert
    for linear, (n, k) in (("fc1", (2 * ffn, hidden)), ("fc2", (hidden, ffn))):
        x = torch.randn(groups * per_expert, k, device=device, dtype=torch.bfloat16)
        w = torch.randn(groups, n, k, device=device, dtype=torch.bfloat16).transpose(-2, -1)  # (G, K, N), nn.Linear's
        grad = torch.randn(groups * per_expert, n, device=device, dtype=torch.bfloat16)
        flops = 2.0 * groups * per_expert * n * k
        for way, passes in (("grouped", grouped_passes(torch, x, w, grad, offs)),
                            ("streams", streamed_passes(torch, x, w, grad, groups, per_expert, streams))):
            for name, fn in passes.items():
                try:
                    seconds = timer(fn)
                except (RuntimeError, TypeError, NotImplementedError) as exc:
                    row[f"{linear}_{way}_{name}_error"] = str(exc).splitlines()[0][:200]
                    continue
                row[f"{linear}_{way}_{name}_s"] = seconds
                row[f"{linear}_{way}_{name}_tflops"] = flops / seconds / 1e12
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    import torch

    cuda, device, cases, env = setup(torch, args.tiny, num_tiny_cases=3)
    streams = [torch.cuda.Stream() for _ in range(4)] if cuda else []
    result = dict(what="MoE expert GEMM passes (benchmarks/moe_gemm_passes.py)",
                  how=__doc__.split("Needs only torch.")[1].strip(), env=env, rows=[])
    timer = Timer(torch, cuda)
    for model, tokens, ep in cases:
        result["rows"].append(one_case(torch, timer, model, tokens, ep, device, streams))
        print(json.dumps({k: (round(v * 1e6, 1) if k.endswith("_s") else v) for k, v in result["rows"][-1].items()
                          if not k.endswith("tflops")}), flush=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
