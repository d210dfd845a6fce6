"""The launch of a plan priced for the transformers stack (`--framework transformers`, pure: returns
strings and data): Hugging Face's own causal-LM training script, run_clm.py
(huggingface/transformers examples/pytorch/language-modeling), under torchrun, with the plan as
`TrainingArguments` flags (transformers/training_args.py, as `HfArgumentParser` parses them) and,
for ZeRO 1-3, a DeepSpeed config.

How the plan maps (the stack runs data parallelism only: `specs/frameworks.py`):
- micro-batch -> `--per_device_train_batch_size`, micro-batches per step ->
  `--gradient_accumulation_steps`; the data-parallel width -> torchrun's processes (the cluster's
  GPUs per node on each node);
- sequence length -> run_clm.py's `--block_size` (DataTrainingArguments);
- precision bf16 / fp16 -> `--bf16` / `--fp16` (torch.autocast over fp32 weights, as priced);
- full recompute -> `--activation_checkpointing` with `{"use_reentrant": false}` (the name since
  transformers 5.23; earlier releases spell it `--gradient_checkpointing`, `TRANSFORMERS_BEFORE_5_23`);
- the optimizer -> `--optim adamw_torch_fused` (torch's fused AdamW: the step priced,
  formulation/frameworks.py FUSED_ADAMW_STEP_BYTES);
- zero 0 -> DDP (the Trainer's default under torchrun); zero 1, 2, 3 -> DeepSpeed ZeRO stage 1, 2, 3
  (`--deepspeed ds_config.json`, its batch and precision fields "auto": the Trainer fills them from
  its flags, transformers/integrations/deepspeed.py `HfTrainerDeepSpeedConfig.trainer_config_process`).
The model is built from its config (`--config_name`): `AutoModelForCausalLM.from_config`, fp32 weights
and SDPA attention, which is what the profile prices; a catalog model's config is written by the launch
(`hf_config.py`) where its family's config can hold it.
"""

from __future__ import annotations

import json
import math

from ..plan import Plan
from ..specs import JobSpec
from .hf_config import expressible, hf_config
from .torchtitan import shell_word

CURRENT = "5.23"  # TrainingArguments' activation_checkpointing(_kwargs) since this release
TRANSFORMERS_BEFORE_5_23 = {"--activation_checkpointing": "--gradient_checkpointing",
                            "--activation_checkpointing_kwargs": "--gradient_checkpointing_kwargs"}
SCRIPT = "run_clm.py"
DS_CONFIG = "ds_config.json"


def config_name(job: JobSpec) -> str:
    """What `--config_name` is given: the Hugging Face config file the model was read from (AutoConfig.
    from_pretrained reads a file path as well as a directory or a hub id); for a catalog model, the file the
    launch writes from it (`hf_config`), else a placeholder naming the model."""
    name = job.model.name
    if name.endswith(".json"):
        return name
    return written_config_name(job) if expressible(job.model) else f"<Hugging Face config of {name}>"


def written_config_name(job: JobSpec) -> str:
    return f"{job.model.name}-config.json"


def written_model_config(job: JobSpec) -> dict | None:
    """The config.json the launch writes for a catalog model (`hf_config`); None for a model read from a
    Hugging Face config file (its own file is given) or one no family's config can hold."""
    return None if job.model.name.endswith(".json") else hf_config(job.model, job.seq_length)


def deepspeed_config(job: JobSpec, plan: Plan) -> dict | None:
    """DeepSpeed's config for zero 1-3 (None for zero 0: DDP): the ZeRO stage and Hugging Face's
    "auto" fields, which the Trainer fills from its own flags."""
    zero = plan.parallel.zero
    if zero == 0:
        return None
    stage: dict = {"stage": zero, "overlap_comm": True, "contiguous_gradients": True}
    if zero == 3:
        stage["stage3_gather_16bit_weights_on_model_save"] = True
    return {"bf16" if job.precision == "bf16" else "fp16": {"enabled": "auto"}, "zero_optimization": stage,
            "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
            "train_batch_size": "auto", "gradient_clipping": "auto"}


def trainer_flags(job: JobSpec, plan: Plan) -> list[str]:
    """run_clm.py's flags: the model and sequence length (its own arguments), then TrainingArguments'."""
    par = plan.parallel
    flags = ["--config_name", config_name(job), "--block_size", str(job.seq_length), "--do_train",
             "--output_dir", "out", "--per_device_train_batch_size", str(par.micro_batch_size),
             "--gradient_accumulation_steps", str(par.num_microbatches),
             "--bf16" if job.precision == "bf16" else "--fp16", "--optim", "adamw_torch_fused"]
    if par.recompute == "full":
        flags += ["--activation_checkpointing", "--activation_checkpointing_kwargs", '{"use_reentrant": false}']
    if par.zero:
        flags += ["--deepspeed", DS_CONFIG]
    return flags


def launcher(job: JobSpec, plan: Plan) -> list[str]:
    """torchrun over the plan's data-parallel GPUs: the cluster's GPUs per node on each node (or the
    largest count that divides both, so that nodes x processes is the plan's width)."""
    gpus = plan.parallel.dp
    per_node = gpus if gpus <= job.cluster.gpus_per_node else math.gcd(gpus, job.cluster.gpus_per_node)
    nodes = gpus // per_node
    out = ["torchrun", "--nnodes", str(nodes), "--nproc-per-node", str(per_node)]
    if nodes > 1:
        out += ["--rdzv-backend", "c10d", "--rdzv-endpoint", "$MASTER_ADDR:29500"]
    return out


def transformers_notes(job: JobSpec, plan: Plan) -> list[str]:
    """What the launch leaves to the user, and where the run differs from what the plan priced."""
    notes = [f"add --dataset_name or --train_file, --tokenizer_name, --learning_rate and --max_steps; {SCRIPT} "
             "is transformers' examples/pytorch/language-modeling/run_clm.py",
             "the plan prices the step of a plain loop (forward, backward, fused AdamW); the Trainer's step (one micro-batch) measured "
             "19-28 ms (2-7%) slower on an H200, its default gradient clipping under 1 ms of that "
             "(benchmarks/measured/h200-2026-11-27/hf_trainer_steps.json)"]
    if plan.parallel.recompute == "full":
        notes.append("transformers before 5.23 spell --activation_checkpointing(_kwargs) as "
                     "--gradient_checkpointing(_kwargs)")
    if plan.parallel.zero:
        notes.append(f"zero {plan.parallel.zero} runs as DeepSpeed ZeRO stage {plan.parallel.zero}; DeepSpeed's "
                     f"{job.precision} mode keeps {job.precision} weights with fp32 master weights in its optimizer "
                     "rather than fp32 weights under autocast, so the planned memory should bound it from above (not measured)")
    model_config = written_model_config(job)
    if model_config is not None:
        notes.append(f"{written_config_name(job)} is solveplan's catalog entry as transformers' "
                     f"{model_config['architectures'][0]} config (render/hf_config.py); where the model was "
                     "published, its own config.json builds the same weights (with learned positions, a table of "
                     "the planned length)")
    elif not job.model.name.endswith(".json"):
        notes.append(f"give --config_name the Hugging Face config of {job.model.name} (the plan was made from "
                     "solveplan's catalog entry, which no transformers config here can hold)")
    return notes


def render_transformers(job: JobSpec, plan: Plan) -> str:
    """The shell lines that launch the plan: a catalog model's config and the DeepSpeed config (zero > 0) written, then torchrun."""
    out = [f"# transformers {CURRENT}+ Trainer launch for {job.model.name} on {job.cluster.name}"]
    out += [f"# {note}" for note in transformers_notes(job, plan)]
    model_config = written_model_config(job)
    if model_config is not None:
        out += [f"cat > {shell_word(written_config_name(job))} <<'EOF'", json.dumps(model_config, indent=2), "EOF"]
    config = deepspeed_config(job, plan)
    if config is not None:
        out += [f"cat > {DS_CONFIG} <<'EOF'", json.dumps(config, indent=2), "EOF"]
    out.append(" ".join(launcher(job, plan)) + f" {SCRIPT} \\")  # words of ours: $MASTER_ADDR must expand
    out += [f"    {line} \\" for line in _flag_lines(trainer_flags(job, plan))]
    out[-1] = out[-1][:-2]
    return "\n".join(out) + "\n"


def _flag_lines(flags: list[str]) -> list[str]:
    """One flag per line, with its value when it takes one (the next item is not a flag)."""
    lines: list[str] = []
    for arg in flags:
        if arg.startswith("--") or not lines:
            lines.append(shell_word(arg))
        else:
            lines[-1] += f" {shell_word(arg)}"
    return lines
