"""Megatron-LM command-line arguments that launch a plan (pure: returns strings).

Flag names follow Megatron-LM's `megatron/training/arguments.py` (core_r0.12+):
parallel degrees `--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
`--context-parallel-size`; interleaving `--num-virtual-stages-per-pipeline-rank` (the older
`--num-layers-per-virtual-pipeline-stage` cannot be combined with uneven splits); uneven
splits `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers` (the
stages in between must hold equal counts), or, for any other split,
`--pipeline-model-parallel-layout`: stages separated by `|`, listed virtual-stage 0 of every
pipeline rank first, then virtual-stage 1, ...; `E` the embedding, `t` a decoder layer, `L`
the loss, `t*3` repeats, commas are cosmetic (Megatron Core user guide, "Custom Pipeline Model
Parallel Layout"; experimental there).

Optimizer sharding: zero=1 is Megatron's distributed optimizer (`--use-distributed-optimizer`);
zero=2 and zero=3 map to Megatron-FSDP (`--use-megatron-fsdp --data-parallel-sharding-strategy
optim_grads` resp. `optim_grads_params`, with `--use-distributed-optimizer`; Megatron Core
"Megatron FSDP" guide).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..plan import Plan
from ..specs import JobSpec


@dataclass
class MegatronArgs:
    args: list[str]
    notes: list[str] = field(default_factory=list)
    layout: str | None = None  # the pipeline layout string when the split needs one

    def command(self, entry: str = "pretrain_gpt.py") -> str:
        """A copy-pasteable command (one flag per line), notes as comments above it."""
        lines = [f"# {n}" for n in self.notes]
        pairs: list[str] = []
        i = 0
        while i < len(self.args):
            a = self.args[i]
            if i + 1 < len(self.args) and not self.args[i + 1].startswith("--"):
                val = self.args[i + 1]
                pairs.append(f"{a} {_quote(val)}")
                i += 2
            else:
                pairs.append(a)
                i += 1
        body = " \\\n    ".join([f"torchrun ... {entry}"] + pairs)
        return "\n".join(lines + [body]) + "\n"


def _quote(val: str) -> str:
    return f"'{val}'" if any(ch in val for ch in "|*(), ") else val


def _chunks(n: int, v: int) -> list[int]:
    """n layers over v virtual stages, as even as possible (earlier chunks take the extra)."""
    base, extra = divmod(n, v)
    return [base + (1 if c < extra else 0) for c in range(v)]


def pipeline_layout(layers: list[int], vp: int) -> str:
    """Megatron's `--pipeline-model-parallel-layout` string for `layers` per pipeline rank with
    `vp` virtual stages per rank."""
    p = len(layers)
    per = [_chunks(n, vp) for n in layers]
    stages = []
    for c in range(vp):
        for i in range(p):
            parts = []
            if c == 0 and i == 0:
                parts.append("E")
            n = per[i][c]
            if n:
                parts.append("t" if n == 1 else f"t*{n}")
            if c == vp - 1 and i == p - 1:
                parts.append("L")
            stages.append(",".join(parts))
    return "|".join(stages)


def split_flags(layers: list[int], vp: int) -> tuple[list[str], list[str], str | None]:
    """(flags, notes, layout) expressing the layer split."""
    p = len(layers)
    if p == 1:
        return [], [], None
    first, last, mid = layers[0], layers[-1], layers[1:-1]
    even = len(set(layers)) == 1
    div = lambda n: n % vp == 0  # noqa: E731
    if even and div(layers[0]):
        return [], [], None
    if not even and (not mid or len(set(mid)) == 1) and all(div(n) for n in layers) and sum(layers) > 0:
        flags = []
        mid_n = mid[0] if mid else None
        if mid_n is None:  # pp = 2
            flags = ["--decoder-first-pipeline-num-layers", str(first), "--decoder-last-pipeline-num-layers", str(last)]
        else:
            if first != mid_n:
                flags += ["--decoder-first-pipeline-num-layers", str(first)]
            if last != mid_n:
                flags += ["--decoder-last-pipeline-num-layers", str(last)]
        return flags, [], None
    layout = pipeline_layout(layers, vp)
    why = ("the middle stages hold different layer counts" if mid and len(set(mid)) > 1
           else f"a stage's layer count is not divisible by vp={vp}")
    notes = [f"the split {layers} needs --pipeline-model-parallel-layout ({why}); first/last-stage flags cannot express it"]
    if vp > 1 and any(n % vp for n in layers):
        notes.append(f"stages whose layer count is not divisible by vp={vp} get chunks differing by one layer")
    return ["--pipeline-model-parallel-layout", layout], notes, layout


def megatron_args(job: JobSpec, plan: Plan) -> MegatronArgs:
    """Megatron-LM arguments for `plan` of `job`."""
    par, model = plan.parallel, job.model
    a: list[str] = []
    notes: list[str] = []
    a += ["--tensor-model-parallel-size", str(par.tp), "--pipeline-model-parallel-size", str(par.pp),
          "--context-parallel-size", str(par.cp)]
    flags, split_notes, layout = split_flags(list(plan.layers_per_stage), par.vp)
    if par.vp > 1 and layout is None:
        a += ["--num-virtual-stages-per-pipeline-rank", str(par.vp)]
    if layout is not None and par.vp > 1:
        split_notes.append(f"the layout lists {par.pp * par.vp} virtual stages: interleaving with vp={par.vp} follows from it")
    a += flags
    notes += split_notes
    a += ["--micro-batch-size", str(par.micro_batch_size), "--global-batch-size", str(job.global_batch_size)]
    if par.sequence_parallel:
        a.append("--sequence-parallel")
    if par.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    elif par.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if par.zero >= 1:
        a.append("--use-distributed-optimizer")
    if par.zero == 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"]
        notes.append("zero=2 (sharded gradients and optimizer state) is Megatron-FSDP's optim_grads strategy")
    elif par.zero == 3:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
        notes.append("zero=3 (sharded parameters too) is Megatron-FSDP's optim_grads_params strategy (FSDP)")
    if par.zero >= 2:
        a.append("--no-gradient-accumulation-fusion")
    if job.overlap_grad_reduce and par.dp * par.cp > 1:
        a.append("--overlap-grad-reduce")
        if par.zero >= 1:
            a.append("--overlap-param-gather")
    if job.tp_comm_overlap and par.tp > 1:
        a.append("--tp-comm-overlap")
    a += ["--seq-length", str(job.seq_length), "--max-position-embeddings", str(job.seq_length)]
    a += ["--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
          "--num-attention-heads", str(model.num_attention_heads), "--ffn-hidden-size", str(model.ffn_hidden_size)]
    if model.num_kv_heads != model.num_attention_heads:
        a += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.gated_mlp:
        a.append("--swiglu")
    if not model.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    a.append("--bf16")
    if job.precision == "fp8":
        a += ["--fp8-format", "hybrid"]
    if job.flash_attention:
        a += ["--attention-backend", "flash"]
        notes.append("older Megatron-LM releases spell the attention backend --use-flash-attn")
    else:
        a += ["--attention-backend", "unfused"]
    return MegatronArgs(a, notes, layout)


def render_megatron(job: JobSpec, plan: Plan) -> str:
    return megatron_args(job, plan).command()
