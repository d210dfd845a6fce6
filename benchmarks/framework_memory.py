"""The stack's memory against what PyTorch keeps (issue 26 item 4): writes
benchmarks/results/framework_memory.md.

    python benchmarks/framework_memory.py        # CPU torch + transformers (pip install transformers)

Per case: the bytes autograd saves per layer (saved_tensors_hooks, unique storages; 4 layers
minus 2) for transformers' own models under bf16 autocast with fp32 weights, and for a replica of
torchtitan's Llama 3 block in bf16, against each profile's estimate; a real AdamW step's weights,
gradients, optimizer state, autocast copies and activations against the whole estimate; and the
estimates of a few single-H200 plans for each stack. The measuring code is the test's
(tests/test_frameworks.py), so the table and the tests cannot disagree."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402

import test_frameworks as T  # noqa: E402
from solveplan.catalog import load_job  # noqa: E402
from solveplan.plan import make_plan, parallel_from_row  # noqa: E402
from solveplan.space.rules import complete_config  # noqa: E402
from solveplan.specs import ModelSpec  # noqa: E402
from solveplan.specs.hf import model_from_hf_config  # noqa: E402

B, S = 2, 100
LLAMA32_3B = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=3072, intermediate_size=8192,
                  num_attention_heads=24, num_key_value_heads=8, num_hidden_layers=28, vocab_size=128256,
                  max_position_embeddings=131072, rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5,
                  hidden_act="silu", head_dim=128)  # meta-llama/Llama-3.2-3B config.json


def layer_rows() -> list[str]:
    import json
    cuda = json.loads((ROOT / "benchmarks" / "measured" / "h200-2026-11-26" / "saved_per_layer.json").read_text())
    out = ["| case | measured on CPU | CPU - CUDA (stated) | measured on an H200 | profile estimate | profile / H200 "
           "| Megatron's count | Megatron / H200 |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for case in T.HF_CASES:
        _, _, (two, _) = T._measure(case, 2, B, S)
        cfg, _, (four, _) = T._measure(case, 4, B, S)
        per = (four - two) / 2
        spec = model_from_hf_config(cfg.to_dict(), name=case)
        est = T.profile_layer_bytes(spec, B, S)
        meg = float(T.coefficients(spec, "megatron", B, S).layer_act_bytes[0])
        key = T.CUDA_KEYS.get(case)
        gpu = cuda["saved_per_layer_per_token"][key] * B * S if key else None
        ref = gpu if gpu else per
        out.append(f"| transformers {case} | {per:,.0f} | {T.cpu_minus_cuda(case, spec) * B * S:+,.0f} | "
                   f"{f'{gpu:,.0f}' if gpu else '(not measured)'} | {est:,.0f} | {est / ref:.3f} | {meg:,.0f} | "
                   f"{meg / ref:.3f} |")
    dim, heads, kv, ffn = 256, 8, 2, 704
    block = T._torchtitan_block(dim, heads, kv, ffn)
    hd = dim // heads
    freqs = torch.polar(torch.ones(S, hd // 2), torch.rand(S, hd // 2))[None, :, None, :]
    x = torch.randn(B, S, dim, dtype=torch.bfloat16, requires_grad=True)
    acts, _ = T._saved_bytes(block, lambda: block(x, freqs))
    spec = ModelSpec(name="tt", num_layers=2, hidden_size=dim, num_attention_heads=heads, num_kv_heads=kv,
                     ffn_hidden_size=ffn, vocab_size=1000, seq_length=S, gated_mlp=True, normalization="RMSNorm",
                     position_embedding="rope")
    est = float(T.coefficients(spec, "torchtitan", B, S).layer_act_bytes[0])
    meg = float(T.coefficients(spec, "megatron", B, S).layer_act_bytes[0])
    out.append(f"| torchtitan Llama 3 block replica (bf16, no autocast) | {acts:,} | | (not measured) | {est:,.0f} | "
               f"{est / acts:.3f} (of CPU) | {meg:,.0f} | {meg / acts:.3f} (of CPU) |")
    return out


def step_rows() -> list[str]:
    out = ["| case | weights | grads | AdamW | autocast copies | saved activations | peak (counted) | sum | "
           "estimate | / peak | / sum |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in ("llama-gqa", "qwen2", "gemma3-sliding", "phi3"):
        m = T._measure_step(case, B, S)
        w, g, st, copies, acts, est = (m[k] for k in ("weights", "grads", "state", "copies", "acts", "estimate"))
        peak, total = w + st + max(copies + acts, g), w + g + st + copies + acts
        out.append(f"| {case} | {w:,} | {g:,} | {st:,} | {copies:,} | {acts:,} | {peak:,} | {total:,} | {est:,.0f} | "
                   f"{est / peak:.3f} | {est / total:.3f} |")
    return out


def plan_rows() -> list[str]:
    cluster = {"name": "h200x1", "gpu": "h200", "gpus_per_node": 1, "num_nodes": 1, "nvlink_gbyte_per_s": 450,
               "nic_gbit_per_s": 400}
    out = ["| model (one H200, zero 0, no recompute) | tokens per micro-batch | micro-batches | megatron | torchtitan "
           "| transformers |", "|---|---:|---:|---|---|---|"]
    models = [("llama3.2-3b", model_from_hf_config(LLAMA32_3B, name="llama3.2-3b").model_dump()), ("gpt2", "gpt2"),
              ("gpt3-1.3b", "gpt3-1.3b")]
    for name, model in models:
        for seq, mbs, gbs in ((2048, 8, 8), (4096, 4, 8)):
            cells = []
            for fw in ("megatron", "torchtitan", "transformers"):
                job = load_job({"model": model, "cluster": cluster, "global_batch_size": gbs, "seq_length": seq,
                                "framework": fw})
                row, _ = complete_config(job, {"micro_batch_size": mbs, "recompute": "none", "zero": 0})
                p = make_plan(job, parallel_from_row(job, row), [job.model.num_layers])
                cells.append(f"{p.peak_memory_bytes / 2**30:.1f} GiB, {p.step_time_s:.3f} s")
            out.append(f"| {name} | {seq * mbs:,} | {gbs // mbs} | " + " | ".join(cells) + " |")
    return out


def main() -> None:
    import transformers
    lines = ["# The stack's memory against what PyTorch keeps", "",
             f"`python benchmarks/framework_memory.py` (CPU torch {torch.__version__}, transformers "
             f"{transformers.__version__}); shapes at {B} x {S} tokens, vocabulary 1,000. Measuring code: "
             "tests/test_frameworks.py.", "", "## Saved activations per layer", "", *layer_rows(), "",
             "Per layer, b x s = 2 x 100. The profile counts the CUDA path; on CPU, dropout keeps bf16 noise "
             "instead of a bool mask, `pow` runs in bf16 (CUDA's autocast upcasts it: relu2, gelu_new) and layer_norm "
             "keeps bf16 statistics for a bf16 input (`cpu_minus_cuda`); the H200 column is "
             "benchmarks/measured/h200-2026-11-26/saved_per_layer.json. Phi-3's profile counts V as the view of its "
             "fused QKV output that the real Phi-3.5/Phi-4 shapes keep; this tiny config's V is copied (2q + 2kv less).",
             "", "## One AdamW step (2 layers): tensors counted against the estimate before the allocator's reserve",
             "", "Peak: one micro-batch per step and `.grad` set to None before it, so the loss phase (autocast copies, "
             "saved tensors, logits) and the gradient phase (every gradient) never coexist "
             "(formulation/eager_memory.py); the estimate may exceed the sum by the loss's transient (8 bytes per "
             "logit).", "", *step_rows(), "", "## Estimates of single-H200 plans", "",
             *plan_rows(), ""]
    out = ROOT / "benchmarks" / "results" / "framework_memory.md"
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
