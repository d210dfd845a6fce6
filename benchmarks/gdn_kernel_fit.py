"""The Gated DeltaNet rule's kernel efficiency, fitted on flash-linear-attention's published timings.

    python benchmarks/gdn_kernel_fit.py

Reads benchmarks/measured/fla-gdn-gb200/chunk_gdn.json (the chunk_gdn rows of FLA's README benchmark on one GB200,
copied with their source) and fits `calibration.gdn_fit.fit_rule`: the fraction of the HBM rate the rule's kernels
reach and the per-call floor. Reports each call's error at the fit, the fit with each shape left out (how stable the
efficiency is), and the value formulation/gdn.py ships (`RULE_HBM_EFFICIENCY`); and, as a check of the kernel
model on measurements it was not fitted to, the same table's FlashAttention-2 calls against the catalog's pricing
of that kernel on the GB200. Writes benchmarks/results/gdn_kernel_fit.md.
"""

from __future__ import annotations

import json

from _common import RESULTS, ROOT, code_state
from solveplan.calibration.gdn_fit import fit_rule
from solveplan.catalog import load_cluster
from solveplan.formulation.gdn import RULE_HBM_EFFICIENCY
from solveplan.formulation.layer_terms import attention_core_s

DATA = ROOT / "benchmarks" / "measured" / "fla-gdn-gb200" / "chunk_gdn.json"


def flash_check(rows: list[dict], gpu) -> list[str]:
    """The same table's FlashAttention-2 calls (causal) against the catalog's pricing of that kernel on the GPU
    (`layer_terms.attention_core_s`, kernel flash2, the catalog's efficiency): a check of the kernel model on
    measurements it was not fitted to."""
    if not rows:
        return []
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_efficiency
    lines = ["", f"The same table's FlashAttention-2 (`flash_attn_func`, causal) against the catalog's pricing of it on "
                 f"the {gpu.name} (flash2 efficiency {gpu.flash2_attention_efficiency}: the catalog file says where it "
                 f"comes from -- H100's fit, which the Blackwell files borrow; not fitted on these):", "", "| B | T | H | D | forward ms | priced / measured | forward + backward ms | "
                                    "priced / measured |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        f, b = attention_core_s(gpu, batch=r["B"], heads=r["H"], s_q=r["T"], s_k=r["T"], head_dim=r["D"], flash=True,
                                kernel="flash2", hbm_bytes_per_s=hbm)
        lines.append(f"| {r['B']} | {r['T']} | {r['H']} | {r['D']} | {r['fwd_ms']} | {1e3 * float(f) / r['fwd_ms']:.2f} | "
                     f"{r['fwdbwd_ms']} | {1e3 * float(f + b) / r['fwdbwd_ms']:.2f} |")
    return lines


def main() -> int:
    doc = json.loads(DATA.read_text())
    rows = doc["measurements"]
    gpu = load_cluster("gb200x4").gpu
    fit = fit_rule(rows, gpu)
    left = [fit_rule(rows[:i] + rows[i + 1:], gpu).efficiency for i in range(len(rows))]
    lines = ["# Gated DeltaNet: the chunked rule's kernel efficiency", "",
             f"`python benchmarks/gdn_kernel_fit.py` at {code_state()}, on {len(rows)} calls of FLA's chunk_gdn "
             f"({doc['source']}; {doc['how']}).", "",
             f"Fitted: the rule's kernels reach **{fit.efficiency:.2f}** of the GB200's HBM rate as the catalog prices "
             f"it ({gpu.hbm_gbyte_per_s:g} GB/s x {gpu.hbm_efficiency:g}), plus a per-call floor of "
             f"{1e3 * fit.floor_fwd_s:.2f} ms forward and {1e3 * fit.floor_fwdbwd_s:.2f} ms forward + backward (the "
             f"host; not priced in a training step). With each shape left out: {min(left):.2f} to {max(left):.2f}. "
             f"Shipped: formulation/gdn.py `RULE_HBM_EFFICIENCY` = {RULE_HBM_EFFICIENCY}.", "",
             "| B | T | H | D | forward ms | error at the fit | forward + backward ms | error at the fit |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(rows):
        lines.append(f"| {r['B']} | {r['T']} | {r['H']} | {r['D']} | {r['fwd_ms']} | {100 * fit.errors[2 * i]:+.1f}% | "
                     f"{r['fwdbwd_ms']} | {100 * fit.errors[2 * i + 1]:+.1f}% |")
    lines += flash_check(doc.get("flash_attn", []), gpu)
    text = "\n".join(lines) + "\n"
    (RESULTS / "gdn_kernel_fit.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
