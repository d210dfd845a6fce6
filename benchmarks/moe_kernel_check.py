"""The MoE formulation's expert GEMMs against one MoE layer's kernels measured on an H200:
writes benchmarks/results/moe_kernel_check.md.

    python benchmarks/moe_kernel_check.py

Measured: benchmarks/measured/h200-2026-11-26/moe_kernels.json (benchmarks/moe_kernels.py: the
experts' SwiGLU MLP as `torch._grouped_mm`, forward and forward + backward under autograd, at the
widths of six MoE models) and moe_gemm_passes.json (benchmarks/moe_gemm_passes.py: each GEMM pass
alone, forward, data gradient, weight gradient, compared with `kernels.grouped_gemm_s`). Predicted: `kernels.grouped_linear_s` for fc1 (h -> 2f) and fc2 (f -> h) over the
local experts at the measured per-expert token count, plus the SwiGLU's memory traffic as
`moe.moe_mlp_compute_s` prices it (BF16_BYTES x 2f per routed copy forward, twice that backward),
on the catalog H200 (its efficiencies as shipped). The measured kernel is PyTorch's CUTLASS
grouped GEMM, not Transformer Engine's GroupedLinear that Megatron runs (one cuBLAS GEMM per
expert on four streams), so this bounds the grouped-GEMM terms rather than calibrating them.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import RESULTS, ROOT, code_state  # noqa: E402

from solveplan.catalog import load_gpu  # noqa: E402
from solveplan.formulation.kernels import BF16_BYTES, grouped_gemm_s, grouped_linear_s  # noqa: E402

MEASURED = ROOT / "benchmarks" / "measured" / "h200-2026-11-26" / "moe_kernels.json"
PASSES = MEASURED.with_name("moe_gemm_passes.json")


def predicted_s(row: dict, gpu) -> tuple[float, float]:
    """(forward, forward + backward) seconds of the experts' MLP of one measured case."""
    kw = kw_of(gpu)
    hbm = kw["hbm_bytes_per_s"]
    groups, tokens, hidden, ffn = row["local_experts"], row["tokens_per_expert"], row["hidden"], row["ffn"]
    fc1 = grouped_linear_s(groups, tokens, 2 * ffn, hidden, **kw)
    fc2 = grouped_linear_s(groups, tokens, hidden, ffn, **kw)
    swiglu_s = BF16_BYTES * 2 * ffn * groups * tokens / hbm
    forward = float(fc1[0] + fc2[0]) + swiglu_s
    return forward, forward + float(fc1[1] + fc2[1]) + 2 * swiglu_s


def kw_of(gpu) -> dict:
    return dict(flop_per_s=gpu.peak_bf16_tflops * 1e12, efficiency=gpu.matmul_efficiency, num_sms=gpu.num_sms,
                hbm_bytes_per_s=gpu.hbm_gbyte_per_s * 1e9 * gpu.hbm_efficiency)


def pass_lines(gpu) -> list[str]:
    """Measured / predicted per GEMM pass (moe_gemm_passes.json against `grouped_gemm_s`)."""
    rows = json.loads(PASSES.read_text())["rows"]
    out = ["", "## Each pass alone (measured / predicted)", "",
           "| model | local experts | tokens per expert | fc1 fwd | fc1 dgrad | fc1 wgrad | fc2 fwd | fc2 dgrad "
           "| fc2 wgrad |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    by_pass: dict[str, list[float]] = {"fwd": [], "dgrad": [], "wgrad": []}
    for row in rows:
        groups, tokens, hidden, ffn = row["local_experts"], row["tokens_per_expert"], row["hidden"], row["ffn"]
        cells = []
        for linear, (n, k) in (("fc1", (2 * ffn, hidden)), ("fc2", (hidden, ffn))):
            shapes = {"fwd": (tokens, n, k), "dgrad": (tokens, k, n), "wgrad": (k, n, tokens)}
            for name, (m_, n_, k_) in shapes.items():
                ratio = row[f"{linear}_grouped_{name}_s"] / float(grouped_gemm_s(groups, m_, n_, k_, **kw_of(gpu)))
                by_pass[name].append(ratio)
                cells.append(f"{ratio:.2f}")
        out.append(f"| {row['model']} | {groups} | {tokens} | " + " | ".join(cells) + " |")
    summary = ", ".join(f"{name} {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" for name, r in by_pass.items())
    return out[:3] + [f"Median (range) over {len(rows)} cases and both linears: {summary}.", ""] + out[3:]


def main() -> None:
    measured = json.loads(MEASURED.read_text())
    gpu = load_gpu("h200", "gpu")
    lines = ["# MoE expert GEMMs: formulation against kernels measured on an H200", "",
             f"`python benchmarks/moe_kernel_check.py` at {code_state()}; measured on {measured['env']['device']} "
             f"(torch {measured['env']['torch']}, `{MEASURED.relative_to(ROOT)}`); predicted on the catalog H200 "
             f"(matmul efficiency {gpu.matmul_efficiency}, HBM efficiency {gpu.hbm_efficiency}). The measured "
             "kernel is torch's CUTLASS grouped GEMM, not TE's GroupedLinear (module docstring).", "",
             "| model | tokens | EP | local experts | tokens per expert | forward measured | predicted | ratio "
             "| fwd + bwd measured | predicted | ratio |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ratios_f, ratios_fb = [], []
    for row in measured["rows"]:
        fwd, fwd_bwd = predicted_s(row, gpu)
        meas_f, meas_fb = row["experts_grouped_fwd_s"], row["experts_grouped_fwd_bwd_s"]
        ratios_f.append(meas_f / fwd)
        ratios_fb.append(meas_fb / fwd_bwd)
        lines.append(f"| {row['model']} | {row['tokens']:,} | {row['ep']} | {row['local_experts']} "
                     f"| {row['tokens_per_expert']} | {meas_f * 1e3:.3f} ms | {fwd * 1e3:.3f} ms | {meas_f / fwd:.2f} "
                     f"| {meas_fb * 1e3:.3f} ms | {fwd_bwd * 1e3:.3f} ms | {meas_fb / fwd_bwd:.2f} |")
    lines[4:4] = [f"Measured / predicted, median over {len(ratios_f)} cases: forward "
                  f"**{statistics.median(ratios_f):.2f}** (range {min(ratios_f):.2f}-{max(ratios_f):.2f}), forward + "
                  f"backward **{statistics.median(ratios_fb):.2f}** (range {min(ratios_fb):.2f}-{max(ratios_fb):.2f}).",
                  ""]
    lines += pass_lines(gpu)
    (RESULTS / "moe_kernel_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6]))


if __name__ == "__main__":
    main()
