"""Flags <-> spec paths, the only place that knows both.

Flags to specs: the options shared by the commands that take a training job (evaluate,
optimize, links place) become one job mapping (`job_request`: a `--job` file with the flags
applied over it), which `catalog.load_job` reads like any other (`specs.request.JobRequest`).

Specs to flags: the library names bad input by its spec path relative to what the CLI handed
in (`global_batch_size`, `tp/cp/pp`, `compare.tp`, `model.num_layers`, `bandwidth[3][5]`);
`flag_name` turns the paths that a flag sets into that flag (`--global-batch-size`,
`--tp/--cp/--pp`, `--compare: tp`) and leaves paths inside a file as they are.
"""

from __future__ import annotations

from typing import Any, get_args

import click

from ..catalog import load_job, read_mapping
from ..errors import InputError
from ..specs import PRECISIONS, JobSpec
from ..specs.job import MomentDtype, Zero3Gathers
from ..specs.module_precision import rules_from_te_config
from ..specs.peft import Peft
from ..specs.reading import read_text

# spec path -> the flag that sets it
FLAGS = {
    "job": "--job", "model": "--model", "cluster": "--cluster", "global_batch_size": "--global-batch-size",
    "seq_length": "--seq-len", "precision": "--precision", "flash_attention": "--flash-attention",
    "tp": "--tp", "pp": "--pp", "ep": "--ep", "etp": "--etp", "moe_load_imbalance": "--moe-load-imbalance",
    "moe_a2a_overlap": "--moe-a2a-overlap", "fp8_dot_product_attention": "--fp8-dot-product-attention", "module_precision": "--te-precision-config", "te_precision_config": "--te-precision-config", "moe_token_dispatcher": "--moe-token-dispatcher", "recompute_modules": "--recompute-modules",
    "offload_modules": "--offload-modules", "zero3_gathers": "--zero3-gathers", "distributed_optimizer_instances": "--distributed-optimizer-instances", "min_offloaded_tensor_size": "--min-offloaded-tensor-size", "cpu_offloading_num_layers": "--cpu-offloading-num-layers", "peft": "--peft", "lora_rank": "--lora-rank", "lora_target_modules": "--lora-target-modules", "dp": "--dp", "cp": "--cp", "vp": "--vp", "micro_batch_size": "--micro-batch-size",
    "recompute": "--recompute", "sequence_parallel": "--sequence-parallel", "zero": "--zero",
    "account_for_embedding": "--account-for-embedding", "account_for_loss": "--account-for-loss",
    "layers": "--layers-per-stage", "pipeline_layout": "--pipeline-layout", "compare": "--compare", "method": "--method", "time_limit_s": "--time-limit",
    "top_k": "--top-k", "workers": "--workers", "links": "--links", "hostfile": "--hostfile",
    "nccl_tests": "--nccl-tests", "steps": "--steps", "plot": "--plot", "data": "--data",
    "nodes": "--nodes", "nodes_per_leaf": "--nodes-per-leaf", "oversubscription": "--oversubscription",
    "nic_gbit_per_s": "--nic-gbit-per-s", "rack_order": "--rack-order", "degraded_nodes": "--degraded-node",
    "degraded_links": "--degraded-link", "attention_kernel": "--attention-kernel", "framework": "--framework",
    "grad_reduce_dtype": "--grad-reduce-dtype", "tp_comm_overlap": "--tp-comm-overlap",
    "precision_aware_optimizer": "--precision-aware-optimizer", "optimizer_moment_dtype": "--optimizer-moment-dtype",
    "overlap_grad_reduce": "--overlap-grad-reduce", "resume": "--resume", "output": "--output", "ray": "--ray",
    "batch_size": "--batch-size", "max_scenarios": "--max-scenarios", "target": "--tokens-per-s / --deadline with --token-budget",
    "token_file": "--token-file",
    "target.tokens_per_s": "--tokens-per-s", "target.deadline_s": "--deadline", "target.token_budget": "--token-budget",
}


def is_digits(text: str, max_len: int = 9) -> bool:
    """`text` is 1 to `max_len` ASCII digits: what `int` reads as a count (str.isdigit alone also passes '²',
    which `int` refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= max_len


def flag_name(field: str) -> str:
    """The flag a spec path names (`a/b` paths: each), `--compare: key` for a key of the
    configuration --compare gives; any other path (inside a file) as it is."""
    if field in FLAGS:
        return FLAGS[field]
    parts = field.split("/")
    if len(parts) > 1 and all(p in FLAGS for p in parts):
        return "/".join(FLAGS[p] for p in parts)
    head, _, rest = field.partition(".")
    if head == "compare" and rest:
        return f"{FLAGS['compare']}: {rest}"
    if head == "constraints" and rest in FLAGS:
        return FLAGS[rest]
    return field


class IntList(click.ParamType):
    """A comma-separated list of positive integers: `4` or `4,8`."""

    name = "INT[,INT...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = [x.strip() for x in str(value).split(",")]
        if not all(is_digits(x) for x in items):
            self.fail(f"{str(value)[:60]!r} is not a comma-separated list of positive integers (e.g. 4 or 4,8)", param, ctx)
        vals = tuple(int(x) for x in items)
        if not vals or any(v <= 0 for v in vals):
            self.fail(f"{value!r}: give positive integers (e.g. 4 or 4,8)", param, ctx)
        return vals


class ChoiceList(click.ParamType):
    name = "CHOICE[,CHOICE...]"

    def __init__(self, choices):
        self.choices = tuple(choices)

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        vals = tuple(x.strip() for x in str(value).split(",") if x.strip())
        bad = [v for v in vals if v not in self.choices]
        if bad or not vals:
            self.fail(f"{value!r}: choose from {', '.join(self.choices)} (comma-separated)", param, ctx)
        return vals


INT_LIST = IntList()


class Seconds(click.ParamType):
    """A finite positive number of seconds, at most MAX_SECONDS (click's FloatRange lets nan and
    inf through)."""

    name = "SECONDS"
    MAX_SECONDS = 1e6

    def convert(self, value, param, ctx):
        try:
            x = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not (0 < x <= self.MAX_SECONDS):
            self.fail(f"{value!r}: give a positive number of seconds up to {self.MAX_SECONDS:g}", param, ctx)
        return x


class OutputPath(click.ParamType):
    """A file to write: not a directory or a FIFO, in an existing writable directory (checked
    before any work, so an hour of planning is not lost to a typo)."""

    name = "FILE"

    def convert(self, value, param, ctx):
        import os
        import stat
        from pathlib import Path

        p = Path(str(value)).expanduser()
        parent = p.parent if str(p.parent) else Path(".")
        try:
            st = os.stat(p) if p.exists() else None
        except (OSError, ValueError):
            st = None
        if not str(value).strip():
            why = "empty; give a file name"
        elif st is not None and stat.S_ISDIR(st.st_mode):
            why = "is a directory; give a file name"
        elif st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
            why = "is a FIFO or another special file; give a regular file"
        elif not parent.is_dir():
            why = f"directory {str(parent)!r} does not exist"
        elif not os.access(p if st is not None else parent, os.W_OK):
            why = "is not writable here"
        else:
            return str(value)
        self.fail(f"{str(value)!r}: {why}", param, ctx)


SECONDS = Seconds()
OUTPUT = OutputPath()

_BASE = [
    click.option("--model", "model", default=None, help="Catalog name, model YAML/JSON, or a Hugging Face config.json."),
    click.option("--cluster", "cluster", default=None, help="Catalog name, <gpu>x<N> (e.g. a100x64), or a cluster YAML/JSON."),
    click.option("--job", "job_file", default=None, type=click.Path(dir_okay=False), help="Job file (YAML/JSON); flags override it."),
    click.option("--global-batch-size", type=int, default=None, help="Sequences per optimizer step (default: the model's recipe)."),
    click.option("--seq-len", "seq_len", type=int, default=None, help="Sequence length (default: the model's recipe)."),
    click.option("--precision", type=click.Choice(list(PRECISIONS)), default=None,
                 help="bf16 (default), fp16 (fp16 gradients), or a Transformer Engine FP8 recipe: fp8 (per-tensor "
                      "delayed scaling), fp8-tensorwise (per-tensor current scaling), fp8-blockwise (1x128/128x128 "
                      "blocks, Hopper/Blackwell), mxfp8 (Blackwell, CDNA 4); or nvfp4 (FP4 GEMMs, NVFP4BlockScaling, "
                      "Blackwell)."),
    click.option("--flash-attention/--no-flash-attention", default=None, help="Fused attention (default on)."),
    click.option("--attention-kernel", type=click.Choice(["cudnn", "flash2", "flash1"]), default=None,
                 help="cudnn (Megatron --attention-backend fused, default), flash2 (FlashAttention-2) or flash1 "
                      "(FlashAttention-1 / its Triton port, e.g. llm-foundry attn_impl: triton)."),
    click.option("--framework", type=click.Choice(["megatron", "torchtitan", "transformers"]), default=None,
                 help="The software stack that runs the plan: megatron (default; fused kernels, every parallelism), "
                      "torchtitan (FSDP2/TP/PP/CP, eager) or transformers (fp32 weights under bf16 autocast, "
                      "data parallel only); prices its memory and kernels."),
    click.option("--grad-reduce-dtype", type=click.Choice(["fp32", "bf16"]), default=None,
                 help="Gradient reduction dtype (default fp32; Megatron --grad-reduce-in-bf16)."),
    click.option("--tp-comm-overlap/--no-tp-comm-overlap", default=None,
                 help="TP collectives pipelined with the GEMMs (Megatron --tp-comm-overlap; default off)."),
    click.option("--overlap-grad-reduce/--no-overlap-grad-reduce", default=None,
                 help="Data-parallel reduction behind the backward (Megatron --overlap-grad-reduce; default on)."),
    click.option("--fp8-dot-product-attention/--no-fp8-dot-product-attention", "fp8_dot_product_attention", default=None,
                 help="Attention in FP8: Transformer Engine's fused kernel at the FP8 rate (Megatron-Core "
                      "fp8_dot_product_attention; precision fp8 on Hopper or Blackwell, fp8-tensorwise or mxfp8 on "
                      "Blackwell; default off)."),
    click.option("--te-precision-config", "te_precision_config", default=None, metavar="FILE",
                 help="Per-module precision under a quantised recipe: Megatron-Core's TE precision config (the YAML "
                      "Megatron-LM's --te-precision-config-file reads: configs and ordered glob matchers, e.g. "
                      "Megatron-Bridge's Nemotron 3 Super te_quant.cfg); priced per role (attention, MLP, LatentMoE "
                      "projections, Mamba in/out projections, MTP)."),
    click.option("--moe-load-imbalance", type=float, default=None,
                 help="MoE: busiest expert rank's tokens over the balanced share (default 1.0: balanced routing)."),
    click.option("--moe-a2a-overlap/--no-moe-a2a-overlap", default=None,
                 help="MoE: EP all-to-alls behind the other micro-batch's compute (Megatron "
                      "--overlap-moe-expert-parallel-comm; default off)."),
    click.option("--moe-token-dispatcher", type=click.Choice(["alltoall", "flex"]), default=None,
                 help="MoE dispatcher for ep > 1: alltoall (default) or flex (DeepEP/HybridEP, one send per node)."),
    click.option("--cpu-offloading-num-layers", type=click.IntRange(min=0), default=None,
                 help="Megatron's CPU activation offloading (--cpu-offloading-num-layers): the saved activations of "
                      "the first N layers go to host memory and back (pp 1, no recomputation, N < layers; priced at "
                      "the GPU's host link: NVLink-C2C on GB200/GB300, PCIe elsewhere). Default 0."),
    click.option("--peft", type=click.Choice(get_args(Peft)), default=None,
                 help="Parameter-efficient fine-tuning: none (default: every weight trained) or lora (Megatron-Bridge's "
                      "LoRA: base weights frozen, low-rank adapters trained; dense models, framework megatron)."),
    click.option("--lora-rank", type=click.IntRange(min=1), default=None,
                 help="With --peft lora: the adapters' rank (Megatron-Bridge LoRA dim; default 32)."),
    click.option("--lora-target-modules", default=None,
                 help="With --peft lora, comma-separated: the linears adapted, of linear_qkv, linear_proj, linear_fc1, "
                      "linear_fc2 (Megatron-Bridge target_modules; default all four)."),
    click.option("--zero3-gathers", type=click.Choice(get_args(Zero3Gathers)), default=None,
                 help="How the stack gathers ZeRO-3 weights: prefetched (Megatron-FSDP, PyTorch FSDP; default) or "
                      "per_parameter (DeepSpeed ZeRO-3 before v0.5.5: each weight alone, nothing overlapped)."),
    click.option("--min-offloaded-tensor-size", type=click.IntRange(min=0), default=None,
                 help="Fine-grained offloading skips every saved tensor of fewer elements (Megatron "
                      "--min-offloaded-tensor-size; default 1048576)."),
    click.option("--distributed-optimizer-instances", type=click.IntRange(min=1), default=None,
                 help="Megatron-FSDP's hybrid sharding, HSDP (--num-distributed-optimizer-instances): weights and "
                      "gradients sharded inside each of r instances of the DP x CP ranks, the optimizer state across "
                      "them; needs zero 3. Default 1."),
    click.option("--offload-modules", default=None,
                 help="Megatron's fine-grained activation offloading (--offload-modules), comma-separated: attn_norm, "
                      "qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, fused_group_mlp; their saved "
                      "inputs go to host memory and back, priced at the GPU's host link. Default none."),
    click.option("--recompute-modules", default=None,
                 help="With recompute selective: Megatron's --recompute-modules, comma-separated (core_attn, moe_act, "
                      "layernorm, mla_up_proj, mlp, moe, shared_experts; default core_attn)."),
    click.option("--precision-aware-optimizer/--no-precision-aware-optimizer", default=None,
                 help="Megatron's --use-precision-aware-optimizer: Adam's master weight kept as its 16-bit remainder "
                      "under bf16 / delayed fp8 (10 bytes of state per parameter, not 12); zero 1 only. Default off."),
    click.option("--optimizer-moment-dtype", type=click.Choice(get_args(MomentDtype)), default=None,
                 help="Adam's moments (Megatron --exp-avg-dtype / --exp-avg-sq-dtype; bf16 under a bf16 job: 6 bytes of "
                      "state per parameter); other than fp32 needs --precision-aware-optimizer. Default fp32."),
]

_CONSTRAINTS = [
    click.option("--tp", type=INT_LIST, default=None, help="Allowed tensor-parallel sizes, e.g. 4,8."),
    click.option("--pp", type=INT_LIST, default=None, help="Allowed pipeline-parallel sizes."),
    click.option("--dp", type=INT_LIST, default=None, help="Allowed data-parallel sizes."),
    click.option("--cp", type=INT_LIST, default=None, help="Allowed context-parallel sizes."),
    click.option("--vp", type=INT_LIST, default=None, help="Allowed virtual pipeline stages per rank."),
    click.option("--ep", type=INT_LIST, default=None, help="Allowed expert-parallel sizes (MoE models), e.g. 8,16."),
    click.option("--etp", type=INT_LIST, default=None,
                 help="Allowed expert tensor-parallel sizes (MoE; default: the search tries 1 and tp)."),
    click.option("--micro-batch-size", type=INT_LIST, default=None, help="Allowed micro-batch sizes."),
    click.option("--tp-max", type=click.IntRange(min=1), default=None),
    click.option("--pp-max", type=click.IntRange(min=1), default=None),
    click.option("--dp-max", type=click.IntRange(min=1), default=None),
    click.option("--cp-max", type=click.IntRange(min=1), default=None),
    click.option("--vp-max", type=click.IntRange(min=1), default=None),
    click.option("--micro-batch-size-max", type=click.IntRange(min=1), default=None),
    click.option("--ep-max", type=click.IntRange(min=1), default=None),
    click.option("--recompute", type=ChoiceList(("none", "selective", "full")), default=None, help="Allowed recomputation modes."),
    click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="Fix sequence parallelism on or off."),
    click.option("--zero", type=ChoiceList(("0", "1", "2", "3")), default=None, help="Allowed optimizer sharding: 0 plain DP, 1 distributed optimizer, 2, 3."),
    click.option("--even-split", is_flag=True, default=False, help="Only even (balanced) layer splits."),
    click.option("--account-for-embedding/--no-account-for-embedding", default=None,
                 help="Fix whether the embedding counts as a layer of the pipeline split (Megatron "
                      "--account-for-embedding-in-pipeline-split; default: only where it makes an interleaving legal)."),
    click.option("--account-for-loss/--no-account-for-loss", default=None,
                 help="Fix whether the loss counts as a layer of the pipeline split (Megatron "
                      "--account-for-loss-in-pipeline-split)."),
]

CONSTRAINT_KEYS = ("tp", "pp", "dp", "cp", "vp", "ep", "etp", "micro_batch_size", "tp_max", "pp_max", "dp_max",
                   "cp_max", "vp_max", "micro_batch_size_max", "ep_max", "recompute", "sequence_parallel", "zero",
                   "even_split", "account_for_embedding", "account_for_loss")


# One explicit configuration (evaluate, links place); the defaults are space.rules.complete_config's.
_CONFIG = [
    click.option("--tp", type=click.IntRange(min=1), default=None, help="Tensor-parallel size (default 1)."),
    click.option("--pp", type=click.IntRange(min=1), default=None, help="Pipeline-parallel size (default 1)."),
    click.option("--cp", type=click.IntRange(min=1), default=None, help="Context-parallel size (default 1)."),
    click.option("--vp", type=click.IntRange(min=1), default=None, help="Virtual pipeline stages per rank (default 1)."),
    click.option("--ep", type=click.IntRange(min=1), default=None, help="Expert-parallel size (MoE; default 1)."),
    click.option("--etp", type=click.IntRange(min=1), default=None,
                 help="Expert tensor-parallel size (MoE; default tp where legal, else 1)."),
    click.option("--micro-batch-size", type=click.IntRange(min=1), default=None, help="Default 1."),
    click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default=None, help="Default: selective."),
    click.option("--sequence-parallel/--no-sequence-parallel", default=None, help="Default: on when tp > 1."),
    click.option("--zero", type=click.IntRange(0, 3), default=None, help="Default: 1 (distributed optimizer) when dp*cp > 1, else 0."),
]


# How one configuration splits its layers (evaluate): Megatron's split with the embedding / loss counted
_SPLIT = [
    click.option("--account-for-embedding/--no-account-for-embedding", default=None,
                 help="Count the embedding as a layer of the pipeline split (Megatron "
                      "--account-for-embedding-in-pipeline-split; default off): the split is then Megatron's."),
    click.option("--account-for-loss/--no-account-for-loss", default=None,
                 help="Count the loss as a layer of the pipeline split (Megatron --account-for-loss-in-pipeline-split; "
                      "default off)."),
]


def _apply(options, f):
    for opt in reversed(options):
        f = opt(f)
    return f


def job_base_options(f):
    """--model, --cluster, --job, --global-batch-size, --seq-len, --precision, --flash-attention."""
    return _apply(_BASE, f)


def constraint_options(f):
    """--tp 4,8, --pp-max 4, --recompute selective, ... (constraints on the planning knobs)."""
    return _apply(_CONSTRAINTS, f)


def job_options(f):
    return job_base_options(constraint_options(f))


def config_options(f):
    """--tp, --pp, --cp, --vp, --micro-batch-size, --recompute, --sequence-parallel, --zero: one configuration."""
    return _apply(_CONFIG, f)


def split_options(f):
    """--account-for-embedding, --account-for-loss: one configuration's layer split."""
    return _apply(_SPLIT, f)


def _constraints(flags: dict, base: Any) -> Any:
    """The job file's constraints with the constraint flags applied over them."""
    if not isinstance(base, (dict, type(None))):
        return base  # not a mapping: the request schema names it (as it names an empty one)
    data: dict[str, Any] = dict(base or {})
    for key in CONSTRAINT_KEYS:
        val = flags.get(key)
        if val is None or (key == "even_split" and not val):
            continue
        if key == "even_split":
            data["uneven_split"] = False
        elif key in ("sequence_parallel", "account_for_embedding", "account_for_loss"):
            data[key] = (val,)
        elif key == "zero":
            data[key] = tuple(int(x) for x in val)
        else:
            data[key] = val
    return data if data or base is not None else None


def _names(value) -> list[str] | None:
    """A comma-separated list flag's names (None: not given)."""
    return None if value is None else [m.strip() for m in str(value).split(",") if m.strip()]


def job_request(model=None, cluster=None, job_file=None, global_batch_size=None, seq_len=None, precision=None,
                flash_attention=None, attention_kernel=None, grad_reduce_dtype=None, tp_comm_overlap=None,
                overlap_grad_reduce=None, prefer=None, tolerance_rel=None, moe_load_imbalance=None,
                moe_a2a_overlap=None, moe_token_dispatcher=None, framework=None, recompute_modules=None,
                cpu_offloading_num_layers=None, precision_aware_optimizer=None, optimizer_moment_dtype=None,
                offload_modules=None, zero3_gathers=None, distributed_optimizer_instances=None,
                min_offloaded_tensor_size=None, peft=None, lora_rank=None, lora_target_modules=None,
                fp8_dot_product_attention=None, te_precision_config=None, **constraint_flags) -> dict:
    """The job mapping the shared options describe: the `--job` file, flags applied over it."""
    data: dict[str, Any] = read_mapping(job_file, "job") if job_file else {}
    flags = {"model": model, "cluster": cluster, "global_batch_size": global_batch_size, "seq_length": seq_len,
             "precision": precision, "flash_attention": flash_attention, "attention_kernel": attention_kernel,
             "grad_reduce_dtype": grad_reduce_dtype, "tp_comm_overlap": tp_comm_overlap,
             "overlap_grad_reduce": overlap_grad_reduce, "prefer": prefer, "tolerance_rel": tolerance_rel,
             "moe_load_imbalance": moe_load_imbalance, "moe_a2a_overlap": moe_a2a_overlap,
             "moe_token_dispatcher": moe_token_dispatcher, "framework": framework,
             "cpu_offloading_num_layers": cpu_offloading_num_layers,
             "precision_aware_optimizer": precision_aware_optimizer, "optimizer_moment_dtype": optimizer_moment_dtype,
             "recompute_modules": _names(recompute_modules), "offload_modules": _names(offload_modules),
             "zero3_gathers": zero3_gathers, "distributed_optimizer_instances": distributed_optimizer_instances,
             "min_offloaded_tensor_size": min_offloaded_tensor_size, "peft": peft, "lora_rank": lora_rank,
             "lora_target_modules": _names(lora_target_modules), "fp8_dot_product_attention": fp8_dot_product_attention}
    if te_precision_config is not None:
        flags["module_precision"] = te_precision_rules(te_precision_config)
    data.update({k: v for k, v in flags.items() if v is not None})
    constraints = _constraints(constraint_flags, data.get("constraints"))
    if constraints is not None:
        data["constraints"] = constraints
    return data


def te_precision_rules(path: str) -> list[list[str]]:
    """The (glob, precision) rules of a Megatron TE precision config file (`specs.module_precision`), InputError
    naming --te-precision-config otherwise."""
    text = read_text(path, "te_precision_config")
    try:
        return [list(rule) for rule in rules_from_te_config(text)]
    except ValueError as err:
        raise InputError("te_precision_config", str(err)) from None


def build_job(**options) -> JobSpec:
    """The JobSpec of the shared options (errors name paths relative to the job: `flag_name`)."""
    return load_job(job_request(**options), field="")


def parse_ints(text: str, field: str) -> list[int]:
    """'5,7,7,5' -> [5, 7, 7, 5] (positive, of at most 9 digits); InputError naming `field` otherwise."""
    items = [x.strip() for x in text.split(",")]
    if not all(is_digits(x) and int(x) > 0 for x in items):
        raise InputError(field, f"{text[:60]!r} is not a comma-separated list of positive integers (e.g. 10,10,12)")
    return [int(x) for x in items]
