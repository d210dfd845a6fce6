"""SDPA's kernel with and without transformers' explicit sliding-window mask, over head dimensions
and sequence lengths, on a CUDA GPU (the `masked_attention_efficiency` of a GPU file and its
dependence on the head dimension; formulation/layer_terms.py `attention_core_s`).

    python3 benchmarks/sdpa_masked_sweep.py --out masked_sweep.json      # on a CUDA GPU
    python3 benchmarks/sdpa_masked_sweep.py --out tiny.json --tiny       # CPU check of the script

Torch only. Each case is one attention layer's core as transformers' integrations/sdpa_attention.py
calls it (benchmarks/hf_sdpa_paths.py's `att`, the cases of sdpa_paths.json):
- masked: the boolean (b, 1, s, s) sliding-window mask masking_utils builds for a layer whose window
  does not exceed the sequence (here window = s, which keeps exactly the causal positions), K and V
  repeated to all heads (`repeat_kv`), `is_causal=False`;
- causal: no mask, `is_causal=True`, `enable_gqa` with the kv heads as they are.
bf16 tensors, scale d^-1/2; `torch._fused_sdp_choice` records the backend torch picks. Timed with
CUDA events: forward alone, and forward + backward (a fixed upstream gradient), each the median of
`--repeats` calls after two warm-ups.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from datetime import UTC, datetime
from pathlib import Path

# (heads, kv heads, head dim): the attention shapes of the families transformers trains, at a
# hidden width of 2-4k: GPT-2/OPT-like 64, Phi-3 96, Llama/Mistral 128, Gemma 3 256.
SHAPES = ((32, 8, 64), (32, 32, 96), (32, 8, 128), (16, 8, 256), (8, 1, 256))
SEQS = (2048, 4096, 8192, 16384)


def timed(torch, fn, repeats: int) -> float:
    """Median seconds of `fn` over `repeats` calls (CUDA events; wall clock on the CPU)."""
    import time

    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            begin = time.perf_counter()
            fn()
            times.append(time.perf_counter() - begin)
    return statistics.median(times)


def one_case(torch, *, heads: int, kv_heads: int, head_dim: int, seq: int, masked: bool, device: str,
             repeats: int) -> dict:
    """One SDPA call's forward and forward + backward time (module docstring)."""
    functional = torch.nn.functional
    dtype = torch.bfloat16
    kv = heads if masked else kv_heads
    query = torch.randn(1, heads, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    key = torch.randn(1, kv, seq, head_dim, device=device, dtype=dtype, requires_grad=True)
    value = torch.randn_like(key, requires_grad=True)
    mask = None
    if masked:
        index = torch.arange(seq, device=device)
        mask = ((index[None] <= index[:, None]) & (index[None] > index[:, None] - seq))[None, None]
    kwargs = dict(attn_mask=mask, is_causal=not masked, scale=head_dim**-0.5, enable_gqa=(not masked) and kv != heads)
    row = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, seq=seq, masked=masked)
    if device.startswith("cuda"):
        row["backend"] = int(torch._fused_sdp_choice(query, key, value, mask, 0.0, not masked, scale=head_dim**-0.5,
                                                     enable_gqa=kwargs["enable_gqa"]))
    upstream = torch.randn(1, heads, seq, head_dim, device=device, dtype=dtype)
    row["fwd_s"] = timed(torch, lambda: functional.scaled_dot_product_attention(query, key, value, **kwargs), repeats)
    row["fwd_bwd_s"] = timed(
        torch, lambda: functional.scaled_dot_product_attention(query, key, value, **kwargs).backward(upstream), repeats)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tiny", action="store_true", help="short sequences on the CPU (a check of this script)")
    parser.add_argument("--repeats", type=int, default=6)
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    seqs = (64, 128) if args.tiny else SEQS
    env = dict(torch=torch.__version__, python=platform.python_version(), device=device,
               when=datetime.now(UTC).isoformat(timespec="seconds"))
    if device == "cuda":
        env |= dict(device=torch.cuda.get_device_name(), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    result = dict(what="SDPA with and without an explicit sliding-window mask (benchmarks/sdpa_masked_sweep.py)",
                  how=__doc__.split("calls it")[1].strip(), env=env, rows=[])
    for heads, kv_heads, head_dim in SHAPES:
        for seq in seqs:
            for masked in (True, False):
                try:
                    row = one_case(torch, heads=heads, kv_heads=kv_heads, head_dim=head_dim, seq=seq, masked=masked,
                                   device=device, repeats=args.repeats)
                except Exception as exc:  # noqa: BLE001 -- one failing case must not lose the others' device time
                    row = dict(heads=heads, kv_heads=kv_heads, head_dim=head_dim, seq=seq, masked=masked,
                               error=f"{type(exc).__name__}: {str(exc)[:200]}")
                result["rows"].append(row)
                print(json.dumps(row), flush=True)
                args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
