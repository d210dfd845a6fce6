"""Measure single-GPU training steps of Hugging Face transformers models (issue 26 item 4 and
the `--framework transformers` profile): step time and the memory PyTorch allocates and reserves.

    python benchmarks/hf_train_steps.py --out steps.json            # on a CUDA GPU
    python benchmarks/hf_train_steps.py --out tiny.json --tiny      # CPU check: shrunk configs

Needs only torch and transformers (it does not import solveplan, so it runs on a GPU machine
where the planner is not installed). What one step is, as people train with transformers' own
modelling code:
- the model built from the publisher's `config.json` (tests/data/hf/<dir>/config.json) with random
  weights in fp32 on the GPU (`AutoModelForCausalLM.from_config`, `attn_implementation="sdpa"`,
  `use_cache=False`), gradient checkpointing (`use_reentrant=False`) where the case says so;
- forward under `torch.autocast(bfloat16)` with `labels=input_ids` (transformers' own shifted
  cross-entropy over fp32-upcast logits), backward, `torch.optim.AdamW(fused=True)`,
  `zero_grad(set_to_none=True)`; input ids uniform over the vocabulary;
- `warmups` steps (the first allocates AdamW's state), then the allocator's peak counters are
  reset and `steps` steps are timed one by one with `torch.cuda.synchronize()` around each
  (`time.perf_counter`); the median step is kept, with the min and max;
- memory: `torch.cuda.max_memory_allocated` and `max_memory_reserved` over the timed steps (the
  reserve is what `nvidia-smi` sees of the process, less the CUDA context); a case that runs out
  of memory is recorded as `oom` with the bytes it asked for.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HF_DIR = ROOT / "tests" / "data" / "hf"

# (config directory, sequence length, micro-batch, gradient checkpointing): models of 0.1-8B
# parameters at 1k-32k tokens, the range one GPU trains with transformers.
CASES = (
    ("gpt2", 1024, 8, False), ("gpt2", 1024, 32, False),
    ("opt-1.3b", 2048, 4, False),
    ("gemma-3-1b-it", 4096, 2, False), ("gemma-3-1b-it", 16384, 1, True),
    ("Llama-3.2-3B", 2048, 4, False), ("Llama-3.2-3B", 4096, 2, False), ("Llama-3.2-3B", 8192, 1, False),
    ("Llama-3.2-3B", 16384, 1, True), ("Llama-3.2-3B", 32768, 1, True),
    ("Qwen3-4B", 2048, 2, False), ("Qwen3-4B", 8192, 1, False), ("Qwen3-4B", 16384, 1, True),
    ("Phi-3.5-mini-instruct", 4096, 1, False), ("Phi-3.5-mini-instruct", 4096, 2, True),
    ("Minitron-4B-Base", 4096, 2, False),
    ("Meta-Llama-3-8B-Instruct", 2048, 1, True),
    # a second set (measured in a second call on the same kind of GPU)
    ("gpt2", 1024, 16, True), ("opt-1.3b", 2048, 8, False), ("gemma-3-1b-it", 2048, 8, False),
    ("gemma-3-1b-it", 32768, 1, True), ("Llama-3.2-3B", 2048, 1, False), ("Qwen3-4B", 4096, 2, False),
    ("Qwen3-4B", 32768, 1, True), ("Phi-4-mini-instruct", 4096, 2, False), ("Phi-4-mini-instruct", 8192, 1, True),
    ("Minitron-4B-Base", 8192, 1, True), ("llama2-7b", 2048, 1, True), ("mistral-7b", 4096, 1, True),
    ("qwen2-7b", 2048, 1, True),
)
# Kept out of every fit (`--set heldout`, measured 2026-11-27 after the transformers profile was
# fitted on CASES): other lengths and micro-batches of the same families, OLMo 2 (a family no
# step was measured of), and three CASES rows again to show how far one machine differs from another.
HELDOUT = (
    ("llama3.1-8b", 4096, 1, True), ("OLMo-2-1124-7B", 4096, 1, True), ("mistral-7b", 2048, 1, True),
    ("mistral-7b", 8192, 1, True), ("qwen2-7b", 4096, 1, True), ("llama2-7b", 4096, 1, True),
    ("Llama-3.2-3B", 4096, 4, True), ("Llama-3.2-3B", 8192, 2, True), ("Qwen3-4B", 2048, 4, True),
    ("Qwen3-4B", 8192, 2, True), ("Qwen3-4B", 2048, 1, False), ("Phi-3.5-mini-instruct", 8192, 1, False),
    ("Phi-3.5-mini-instruct", 16384, 1, True), ("Phi-4-mini-instruct", 2048, 4, False),
    ("Minitron-4B-Base", 2048, 4, False), ("gemma-3-1b-it", 8192, 2, False), ("gemma-3-1b-it", 4096, 8, True),
    ("opt-1.3b", 2048, 16, True), ("OLMo-2-1124-7B", 2048, 1, True),
    ("Llama-3.2-3B", 4096, 2, False), ("Qwen3-4B", 2048, 2, False), ("mistral-7b", 4096, 1, True),
)
# Measured on an H100 (80 GB), a GPU no step had been measured on (`--set h100`): cases that fit it, the
# two that the plan puts closest to its memory last, and one predicted not to fit after them.
H100 = (
    ("gpt2", 1024, 8, False), ("opt-1.3b", 2048, 4, False), ("Llama-3.2-3B", 2048, 1, False),
    ("Llama-3.2-3B", 4096, 2, True), ("gemma-3-1b-it", 8192, 1, True), ("Phi-3.5-mini-instruct", 4096, 1, True),
    ("Phi-4-mini-instruct", 4096, 1, True), ("Qwen3-4B", 2048, 1, True), ("Minitron-4B-Base", 2048, 1, True),
    ("gemma-3-1b-it", 4096, 2, False), ("Qwen3-4B", 8192, 1, True), ("Llama-3.2-3B", 16384, 1, True),
)
# Tiny shapes keep a head of 96 (Phi-3.5's: its rope factors are per head dimension).
TINY = dict(hidden_size=384, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=96, vocab_size=512, n_embd=384, n_layer=2, n_head=4, ffn_dim=512, word_embed_proj_dim=384)


def load_config(directory: str, tiny: bool):
    """The publisher's config, shrunk where `tiny` (only the keys the config already has)."""
    from transformers import AutoConfig

    raw = json.loads((HF_DIR / directory / "config.json").read_text())
    if tiny:
        raw |= {key: value for key, value in TINY.items() if key in raw}
        raw |= {key: None for key in ("pad_token_id",) if key in raw}  # may lie outside the tiny vocabulary
        raw.pop("rope_scaling", None)  # long-context factors are per head dimension: the tiny heads differ
    raw.pop("_name_or_path", None)
    model_type = raw.pop("model_type")
    config = AutoConfig.for_model(model_type, **raw)
    config.use_cache = False
    return config


def one_case(torch, directory: str, seq: int, mbs: int, checkpointing: bool, *, device: str, warmups: int,
             steps: int, tiny: bool) -> dict:
    """Build, train `warmups + steps` steps, and measure one case (module docstring)."""
    from transformers import AutoModelForCausalLM

    row = dict(config=directory, seq_length=seq, micro_batch_size=mbs, gradient_checkpointing=checkpointing)
    config = load_config(directory, tiny)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=device.startswith("cuda"))
    ids = torch.randint(0, config.vocab_size, (mbs, seq), device=device)
    row |= dict(params=sum(p.numel() for p in model.parameters()), model_type=config.model_type)

    def step():
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    try:
        for _ in range(warmups):
            step()
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        row |= dict(step_s=statistics.median(times), step_min_s=min(times), step_max_s=max(times), steps=steps)
        if cuda:
            row |= dict(max_allocated_bytes=torch.cuda.max_memory_allocated(),
                        max_reserved_bytes=torch.cuda.max_memory_reserved())
    except torch.OutOfMemoryError as exc:
        row |= dict(oom=True, error=str(exc).splitlines()[0][:300])
    except Exception as exc:  # noqa: BLE001 -- one failing case must not lose the others' device time
        row |= dict(error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}")
    finally:
        del model, optimizer
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return row


def environment(torch, device: str) -> dict:
    import transformers

    env = dict(torch=torch.__version__, transformers=transformers.__version__, python=platform.python_version(),
               device=device, when=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        env |= dict(device=props.name, total_memory_bytes=props.total_memory, cuda=torch.version.cuda,
                    cudnn=torch.backends.cudnn.version())
        try:
            env["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            env["nvidia_smi"] = f"not read: {exc}"
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tiny", action="store_true", help="shrunk configs on the CPU (a check of this script)")
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated config directories to run (default: all)")
    parser.add_argument("--set", choices=("fit", "heldout", "h100"), default="fit",
                        help="CASES (what the transformers profile was fitted on), HELDOUT or H100")
    parser.add_argument("--from-case", type=int, default=0, help="skip the cases before this index of the set")
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    wanted = {name for name in args.only.split(",") if name}
    chosen = {"fit": CASES, "heldout": HELDOUT, "h100": H100}[args.set]
    cases = [case for case in chosen[args.from_case:] if not wanted or case[0] in wanted]
    if args.tiny:
        cases = [(name, min(seq, 64), min(mbs, 2), ckpt) for name, seq, mbs, ckpt in cases]
    result = dict(what="single-GPU training steps of transformers models (benchmarks/hf_train_steps.py)",
                  how=__doc__.split("modelling code:")[1].strip(), env=environment(torch, device), rows=[])
    for directory, seq, mbs, checkpointing in cases:
        row = one_case(torch, directory, seq, mbs, checkpointing, device=device, warmups=args.warmups,
                       steps=args.steps, tiny=args.tiny)
        result["rows"].append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")  # after every case: a timeout keeps the rest


if __name__ == "__main__":
    main()
