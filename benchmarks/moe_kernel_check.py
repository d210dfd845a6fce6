"""The MoE formulation's expert GEMMs against one MoE layer's kernels measured on an H200:
writes benchmarks/results/moe_kernel_check.md.

    python benchmarks/moe_kernel_check.py

Measured: benchmarks/measured/h200-2026-11-26/moe_kernels.json (benchmarks/moe_kernels.py: the
experts' SwiGLU MLP as `torch._grouped_mm`, forward and forward + backward, at the widths of six
MoE models). Predicted: `kernels.grouped_linear_s` for fc1 (h -> 2f) and fc2 (f -> h) over the
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
from solveplan.formulation.kernels import BF16_BYTES, grouped_linear_s  # noqa: E402

MEASURED = ROOT / "benchmarks" / "measured" / "h200-2026-11-26" / "moe_kernels.json"


def predicted_s(row: dict, gpu) -> tuple[float, float]:
    """(forward, forward + backward) seconds of the experts' MLP of one measured case."""
    hbm = gpu.hbm_gbyte_per_s * 1e9 * gpu.hbm_efficiency
    kw = dict(flop_per_s=gpu.peak_bf16_tflops * 1e12, efficiency=gpu.matmul_efficiency, num_sms=gpu.num_sms,
              hbm_bytes_per_s=hbm)
    groups, tokens, hidden, ffn = row["local_experts"], row["tokens_per_expert"], row["hidden"], row["ffn"]
    fc1 = grouped_linear_s(groups, tokens, 2 * ffn, hidden, **kw)
    fc2 = grouped_linear_s(groups, tokens, hidden, ffn, **kw)
    swiglu_s = BF16_BYTES * 2 * ffn * groups * tokens / hbm
    forward = float(fc1[0] + fc2[0]) + swiglu_s
    return forward, forward + float(fc1[1] + fc2[1]) + 2 * swiglu_s


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
    (RESULTS / "moe_kernel_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6]))


if __name__ == "__main__":
    main()
