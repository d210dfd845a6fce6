"""Measure transformers' Trainer steps, the loop `--framework transformers` plans launch
(render/transformers.py), beside the plain loop that benchmarks/hf_train_steps.py times: what the
Trainer adds per step (gradient clipping at max_grad_norm 1.0, its bookkeeping, the data loader).

    python benchmarks/hf_trainer_steps.py --out trainer_steps.json          # on a CUDA GPU
    python benchmarks/hf_trainer_steps.py --out tiny.json --tiny            # CPU check: shrunk configs

Needs only torch, transformers and accelerate (no solveplan). Each case builds the model as
hf_train_steps.py does (the publisher's config.json, random fp32 weights on the GPU, SDPA, no KV
cache) and trains it with `Trainer` and `TrainingArguments` as the planned launch sets them:
`per_device_train_batch_size`, `gradient_accumulation_steps` 1, `bf16` (autocast), `optim
adamw_torch_fused`, activation checkpointing with `use_reentrant: false` where the case says so
(`activation_checkpointing` from transformers 5.23, `gradient_checkpointing` before), and
`max_grad_norm` as the case says (1.0 is the Trainer's default; 0 turns clipping off); no logging,
saving or evaluation (`report_to none`, `save_strategy no`). The data is a map-style dataset of
uniform random token ids with `labels = input_ids`. A callback synchronises the GPU at each
optimizer step's begin and end (`on_step_begin`, `on_step_end`) and keeps the wall time between
them; the first `warmups` steps are dropped and the median of the rest kept, with
`torch.cuda.max_memory_allocated` / `max_memory_reserved` since the first timed step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hf_train_steps import environment, load_config  # noqa: E402

# (config directory, sequence length, micro-batch, activation checkpointing, max_grad_norm): cases that
# hf_train_steps.py measured with the plain loop (both of its sets), the first also without clipping.
CASES = (
    ("Llama-3.2-3B", 4096, 2, False, 1.0), ("Llama-3.2-3B", 4096, 2, False, 0.0),
    ("Qwen3-4B", 2048, 2, False, 1.0), ("mistral-7b", 4096, 1, True, 1.0), ("Llama-3.2-3B", 16384, 1, True, 1.0),
)


def training_arguments(transformers, output_dir: str, *, mbs: int, checkpointing: bool, max_grad_norm: float,
                       steps: int, cuda: bool):
    """TrainingArguments as the planned launch sets them (module docstring)."""
    fields = transformers.TrainingArguments.__dataclass_fields__
    name = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    kwargs = {name: checkpointing, f"{name}_kwargs": {"use_reentrant": False}} if checkpointing else {}
    return transformers.TrainingArguments(
        output_dir=output_dir, per_device_train_batch_size=mbs, gradient_accumulation_steps=1, max_steps=steps,
        bf16=cuda, optim="adamw_torch_fused" if cuda else "adamw_torch", max_grad_norm=max_grad_norm,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        use_cpu=not cuda, learning_rate=1e-5, **kwargs)


def one_case(torch, transformers, case: tuple, *, warmups: int, steps: int, tiny: bool, out_dir: str) -> dict:
    """Train one case with the Trainer and time its optimizer steps (module docstring)."""
    directory, seq, mbs, checkpointing, max_grad_norm = case
    cuda = torch.cuda.is_available() and not tiny
    device = "cuda" if cuda else "cpu"
    row = dict(config=directory, seq_length=seq, micro_batch_size=mbs, gradient_checkpointing=checkpointing,
               max_grad_norm=max_grad_norm, transformers=transformers.__version__)
    config = load_config(directory, tiny)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    ids = torch.randint(0, config.vocab_size, (mbs * (warmups + steps), seq))
    data = [{"input_ids": row_ids, "labels": row_ids} for row_ids in ids]
    times: list[float] = []

    class Timer(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
                if state.global_step == warmups:
                    torch.cuda.reset_peak_memory_stats()
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - self.start)

    arguments = training_arguments(transformers, out_dir, mbs=mbs, checkpointing=checkpointing,
                                   max_grad_norm=max_grad_norm, steps=warmups + steps, cuda=cuda)
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data, callbacks=[Timer()])
    try:
        trainer.train()
        timed = times[warmups:]
        row |= dict(step_s=statistics.median(timed), step_min_s=min(timed), step_max_s=max(timed), steps=len(timed))
        if cuda:
            row |= dict(max_allocated_bytes=torch.cuda.max_memory_allocated(),
                        max_reserved_bytes=torch.cuda.max_memory_reserved())
    except torch.OutOfMemoryError as exc:
        row |= dict(oom=True, error=str(exc).splitlines()[0][:300])
    finally:
        del trainer, model
        if cuda:
            torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--tiny", action="store_true", help="shrunk configs on the CPU (a check of this script)")
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    import tempfile

    import torch
    import transformers

    cases = [(name, min(seq, 64), min(mbs, 2), ckpt, clip) for name, seq, mbs, ckpt, clip in CASES] if args.tiny else CASES
    device = "cuda" if torch.cuda.is_available() and not args.tiny else "cpu"
    result = dict(what="transformers Trainer steps (benchmarks/hf_trainer_steps.py)",
                  how=__doc__.split("no solveplan).")[1].strip(), env=environment(torch, device), rows=[])
    with tempfile.TemporaryDirectory() as out_dir:
        for case in cases:
            row = one_case(torch, transformers, case, warmups=args.warmups, steps=args.steps, tiny=args.tiny,
                           out_dir=out_dir)
            result["rows"].append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
