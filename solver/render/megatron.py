"""Megatron-LM command-line arguments that launch a plan and build the planned model (pure: returns strings).

Names, types and the rules `validate_args` enforces follow Megatron-LM's
`megatron/training/arguments.py` (checked at commit d98e8a6 by benchmarks/megatron_args.py, which
runs Megatron's own `parse_args`, `validate_args` and `core_transformer_config_from_args`):

- parallel degrees `--tensor-model-parallel-size`, `--pipeline-model-parallel-size`,
  `--context-parallel-size`; interleaving `--num-virtual-stages-per-pipeline-rank`; uneven splits
  `--decoder-first-pipeline-num-layers` / `--decoder-last-pipeline-num-layers` (the stages in between
  equal), any other split `--pipeline-model-parallel-layout` (stages separated by `|`, virtual
  stage 0 of every rank first; `E` embedding, `t` a layer, `L` the loss; at most one of the three
  pipeline-layout flags: validate_args asserts it); a plan that counts the embedding / loss as
  layers: `--account-for-embedding-in-pipeline-split` / `--account-for-loss-in-pipeline-split`
  and Megatron's own split (TransformerConfig refuses them beside a layout or first/last counts).
- zero=1: `--use-distributed-optimizer` (with the job's precision-aware optimizer,
  `--use-precision-aware-optimizer` and the moments' `--exp-avg-dtype` / `--exp-avg-sq-dtype`).
  zero=2/3: Megatron-FSDP, `--use-megatron-fsdp
  --data-parallel-sharding-strategy optim_grads | optim_grads_params`, which validate_args
  refuses without `--ckpt-format fsdp_dtensor` and with CUDA_DEVICE_MAX_CONNECTIONS=1.
- tp > 1 or cp > 1 without Megatron-FSDP on a GPU older than Blackwell: validate_args asserts
  CUDA_DEVICE_MAX_CONNECTIONS=1, so it goes on the launch line (`MegatronArgs.env`).
- `--tp-comm-overlap` only with `--sequence-parallel` (asserted).
- precision: `--bf16` / `--fp16`, and an FP8 recipe as `--fp8-format` + `--fp8-recipe`
  (TransformerConfig.fp8 / fp8_recipe in megatron/core/transformer/transformer_config.py; built into
  Transformer Engine recipes by megatron/core/fp8_utils.py): fp8 -> hybrid + delayed (E4M3 forward,
  E5M2 gradients; Megatron's default recipe), fp8-tensorwise -> hybrid + tensorwise (current
  scaling), fp8-blockwise -> e4m3 + blockwise and mxfp8 -> e4m3 + mxfp8 (TE's own defaults for
  these two recipes, Float8BlockScaling / MXFP8BlockScaling: E4M3 for every tensor, as DeepSeek-V3
  and NVIDIA's MXFP8 pre-training recipe train); nvfp4 -> `--fp4-format e2m1 --fp4-recipe nvfp4`
  (TransformerConfig.fp4 / fp4_recipe; megatron/core/fp4_utils.py builds TE's NVFP4BlockScaling),
  `--fp4-param-gather` for NVFP4 primary weights, and `--first-last-layers-bf16
  --num-layers-at-start-in-bf16 N --num-layers-at-end-in-bf16 M` for layers the job keeps in BF16
  (the same flags under an FP8 recipe).
- fine-grained activation offloading: `--fine-grained-activation-offloading --offload-modules ...`
  (`--use-transformer-engine-op-fuser` with fused_group_mlp) and NVTE_CPU_OFFLOAD_V1=1 (`MegatronArgs.env`).
- CPU activation offloading: `--cpu-offloading-num-layers N` (arguments.py:1950 turns `cpu_offloading` on;
  activations only, Megatron's defaults); TransformerConfig refuses it with pp > 1 or recomputation
  (transformer_config.py:1884-1899), which the plan never has (specs.job.SETTING_RULES).
- AMD Instinct (ROCm): no CUDA-only environment (CUDA_DEVICE_MAX_CONNECTIONS has no effect under
  HIP) and `--attention-backend auto` (Transformer Engine's ROCm build has no cuDNN; it picks its
  CK / AOTriton fused attention); the notes say what differs.
- the model: TransformerConfig fields exposed as flags (megatron/core/transformer/transformer_config.py)
  and GPTModel's (`--position-embedding-type`, `--rotary-base` (int), `--rotary-percent`,
  `--use-rope-scaling --rope-scaling-factor`, `--normalization`, `--apply-layernorm-1p`,
  `--norm-epsilon`, `--disable-bias-linear`, `--add-qkv-bias`, `--swiglu`, `--squared-relu`,
  `--quick-geglu`, `--kv-channels`, `--qk-layernorm`, `--group-query-attention
  --num-query-groups`, `--untie-embeddings-and-output-weights`); what Megatron-LM cannot build
  (ALiBi, plain ReLU, tanh-GeLU GLU, a non-integer rotary base) is said in a note.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..plan import Plan
from ..space.pipeline_split import MEGATRON_FLAGS
from ..specs import JobSpec, ModelSpec
from ..specs.module_precision import TE_PRECISION_FILE, te_config_text
from ..specs.offloading import MIN_OFFLOADED_ELEMENTS
from .megatron_hybrid import ENTRY as HYBRID_ENTRY
from .megatron_hybrid import gdn_as_gpt, gdn_gpt_flags, gpt_view, hybrid_flags
from .megatron_moe import moe_launch, moe_layer_freq_arg  # noqa: F401  (MoE, MLA, MTP flags)
from .megatron_rope import num_arg as _num
from .megatron_rope import rope_flags

# GPU name prefix -> CUDA compute capability major (Megatron's get_device_arch_version); MI300X
# (gfx942) reports 9 under ROCm. Blackwell (10) no longer needs CUDA_DEVICE_MAX_CONNECTIONS=1.
_ARCH = (("v100", 7), ("a100", 8), ("h100", 9), ("h200", 9), ("mi3", 9), ("b200", 10), ("gb200", 10), ("b300", 10),
         ("gb300", 10))
_ARCH_OF_ARCHITECTURE = {"volta": 7, "ampere": 8, "hopper": 9, "blackwell": 10, "cdna3": 9, "cdna4": 9}
FSDP_STRATEGY = {2: "optim_grads", 3: "optim_grads_params"}
def _precision_flags(job, arch: int, oldest_gpu: str, notes: list[str]) -> list[str]:
    """--bf16 / --fp16 (fp16 where the oldest GPU has no bf16), the gradient reduction's dtype, the FP8 recipe
    and FP8 primary weights (see the module docstring)."""
    a = []
    if arch < 8:
        a.append("--fp16")
        notes.append(f"{oldest_gpu} has no bf16: launched in fp16 with dynamic loss scaling")
    else:
        a.append("--fp16" if job.precision == "fp16" else "--bf16")
    if job.grad_reduce_dtype == "bf16" and job.precision != "fp16":
        a.append("--grad-reduce-in-bf16")
    if job.precision in FP8_FLAGS:
        fmt, recipe = FP8_FLAGS[job.precision]
        a += ["--fp8-format", fmt, "--fp8-recipe", recipe]
        if recipe in ("mxfp8", "blockwise"):
            notes.append(f"--fp8-recipe {recipe} needs Transformer Engine >= "
                         f"{'2.1' if recipe == 'mxfp8' else '2.3'} (megatron/core/fp8_utils.py)")
        if job.fp8_param_gather:  # FP8 primary weights (formulation/precision.py); MXFP8 stages its gather
            a += ["--fp8-param-gather"] + (["--reuse-grad-buf-for-mxfp8-param-ag"] if recipe == "mxfp8" else [])
        if job.fp8_dot_product_attention:  # arguments.py at d98e8a6 lists it among the fields with no CLI argument
            notes.append("FP8 attention has no Megatron-LM flag (d98e8a6): set TransformerConfig."
                         "fp8_dot_product_attention = True in the model config (Megatron-Bridge: cfg.mixed_precision."
                         "fp8_dot_product_attention = True); launched without it, attention runs in BF16, slower than planned")
    if job.precision == "nvfp4":
        a += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"] + (["--fp4-param-gather"] if job.fp8_param_gather else [])
        notes.append("--fp4-format needs Transformer Engine >= 2.7.0.dev0 (NVFP4BlockScaling) and a Blackwell GPU")
    if job.module_precision:  # Megatron-Core's TE precision config (specs/module_precision.py); JSON is YAML
        a += ["--te-precision-config-file", TE_PRECISION_FILE]
        notes.append(f"write {TE_PRECISION_FILE} first (Megatron-Core's RecipeConfig; JSON is YAML): "
                     + te_config_text(job.module_precision))
    if job.bf16_layers_at_start or job.bf16_layers_at_end:
        a += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(job.bf16_layers_at_start),
              "--num-layers-at-end-in-bf16", str(job.bf16_layers_at_end)]
    return a


def _cuda_graph_flags(job, notes: list[str]) -> list[str]:
    """--cuda-graph-impl and --cuda-graph-modules of the job (formulation/host.py prices what they graph)."""
    if job.cuda_graph_impl == "none":
        return []
    if job.cuda_graph_impl == "full_iteration" and job.model.is_moe:
        notes.append("a whole-iteration CUDA graph of a dropless MoE needs HybridEP's static per-rank budget: add "
                     "--moe-expert-rank-capacity-factor (and --moe-paged-stash) for your routing")
    return ["--cuda-graph-impl", job.cuda_graph_impl] + (
        ["--cuda-graph-modules", *job.cuda_graph_modules] if job.cuda_graph_modules else [])


# precision recipe -> (--fp8-format, --fp8-recipe); see the module docstring
FP8_FLAGS = {"fp8": ("hybrid", "delayed"), "fp8-tensorwise": ("hybrid", "tensorwise"),
             "fp8-blockwise": ("e4m3", "blockwise"), "mxfp8": ("e4m3", "mxfp8")}


def gpu_arch(gpu) -> int:
    """CUDA compute capability major of a GPU (a GPUSpec, or a catalog name)."""
    arch = getattr(gpu, "architecture", None)
    if arch in _ARCH_OF_ARCHITECTURE:
        return _ARCH_OF_ARCHITECTURE[arch]
    name = str(getattr(gpu, "name", gpu)).lower()
    return next((a for prefix, a in _ARCH if name.startswith(prefix)), 9)


@dataclass
class MegatronArgs:
    args: list[str]
    notes: list[str] = field(default_factory=list)
    layout: str | None = None  # the pipeline layout string when the split needs one
    env: dict[str, str] = field(default_factory=dict)  # environment the launch needs
    entry: str = "pretrain_gpt.py"  # the training script (a hybrid model: pretrain_hybrid.py)

    def groups(self) -> list[tuple[str, list[str]]]:
        """(flag, its values) in order: none for a switch, several for a list flag
        (`--recompute-modules moe_act layernorm`)."""
        out: list[tuple[str, list[str]]] = []
        for arg in self.args:
            if arg.startswith("--") or not out:
                out.append((arg, []))
            else:
                out[-1][1].append(arg)
        return out

    def pairs(self) -> list[tuple[str, str | None]]:
        """(flag, value) in order; value None for a switch, a list flag's values joined by spaces."""
        return [(flag, " ".join(vals) if vals else None) for flag, vals in self.groups()]

    def flags(self) -> dict[str, str | bool]:
        """flag -> value (True for a switch)."""
        return {k: True if v is None else v for k, v in self.pairs()}

    def command(self, entry: str | None = None) -> str:
        """A copy-pasteable command (one flag per line), notes as comments above it."""
        entry = entry or self.entry
        lines = [f"# {n}" for n in self.notes]
        pairs = [" ".join([a] + [_quote(v) for v in vals]) for a, vals in self.groups()]
        env = "".join(f"{k}={v} " for k, v in self.env.items())
        body = " \\\n    ".join([f"{env}torchrun ... {entry}"] + pairs)
        return "\n".join(lines + [body]) + "\n"


def _quote(val: str) -> str:
    return f"'{val}'" if any(ch in val for ch in "|*(), ") else val


def _chunks(n: int, v: int, unit: int = 1, prefix: int = 0) -> list[int]:
    """n layers over v virtual stages, as even as possible (earlier chunks take the extra), in whole `unit`s of
    layers after a `prefix` the first chunk holds (sparse attention's index sharing: `ModelSpec.pipeline_units`)."""
    base, extra = divmod((n - prefix) // unit, v)
    return [(base + (1 if c < extra else 0)) * unit + (prefix if c == 0 else 0) for c in range(v)]


def pipeline_layout(layers: list[int], vp: int, units: tuple[int, int] = (0, 1)) -> str:
    """Megatron's `--pipeline-model-parallel-layout` string for `layers` per pipeline rank with
    `vp` virtual stages per rank; with `units` (prefix, unit size) every virtual stage holds whole units
    after the first rank's prefix, so each starts on a unit's first layer (`ModelSpec.stage_boundary_ok`)."""
    p = len(layers)
    prefix, unit = units
    per = [_chunks(n, vp, unit, prefix if i == 0 else 0) for i, n in enumerate(layers)]
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


def split_flags(layers: list[int], vp: int, units: tuple[int, int] | None = None,
                why: str = "") -> tuple[list[str], list[str], str | None]:
    """(flags, notes, layout) expressing the layer split; with `units` (prefix and unit size: index sharing,
    hash-routed layers; `why`, said in the note) and more than one (virtual) stage always a layout of whole units
    per virtual stage, the prefix in the embedding's, so each starts where Megatron allows."""
    p = len(layers)
    if units is not None and p * vp > 1:
        layout = pipeline_layout(layers, vp, units)
        return ["--pipeline-model-parallel-layout", layout], [f"the layout's virtual stages hold whole units: {why}"], layout
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


def pipeline_flags(plan: Plan, model: ModelSpec | None = None) -> tuple[list[str], list[str], str | None]:
    """(flags, notes, layout) of the plan's layer split: the layout the plan was given, as given
    (`ParallelConfig.pipeline_layout`); Megatron's own split when the plan
    counts the embedding / loss as layers (`--account-for-embedding-in-pipeline-split`,
    `--account-for-loss-in-pipeline-split`: validate_args refuses them with a layout or with
    first/last-stage counts, and the plan's split is the one get_num_layers_to_build derives,
    space/pipeline_split.py), else `split_flags` (its chunks on the boundaries `model`'s index sharing allows)."""
    par = plan.parallel
    given = getattr(par, "pipeline_layout", None)
    if given is not None:  # the user's layout, unchanged (space/pipeline_layout.py)
        return ["--pipeline-model-parallel-layout", given], [
            f"the pipeline layout as given ({par.pp} ranks x {par.vp} virtual stages: layers per rank "
            f"{list(plan.layers_per_stage)})"], given
    counted = [flag for knob, flag in MEGATRON_FLAGS.items() if getattr(par, knob)]
    if not counted:
        if model is not None and (model.dsa_index_sharing or model.moe_n_hash_layers):
            k, d, m, _ = model.pipeline_units
            why = ("the hash-routed layers on the embedding's" if model.moe_n_hash_layers
                   else "each starts on a layer that computes its top-k")
            return split_flags(list(plan.layers_per_stage), par.vp, (k, d + m), why)
        return split_flags(list(plan.layers_per_stage), par.vp)
    what = " and the ".join(k.removeprefix("account_for_") for k in MEGATRON_FLAGS if getattr(par, k))
    return counted, [f"the {what} count as a layer of the pipeline split: Megatron-LM builds the split "
                     f"{list(plan.layers_per_stage)} itself"], None


def window_flags(model: ModelSpec) -> list[str]:
    """Megatron-LM's sliding window (transformer_config.py window_size, window_attn_skip_freq; utils.py
    `is_layer_window_attention`: layer_number % n != 0, or the list's 1s): `--window-size (w - 1),0` (a query
    sees itself and the w - 1 keys before it, Megatron-Bridge's gpt_oss_bridge.py), every n-th layer full or
    the pattern's list (`moe_freq_type` evaluates it)."""
    if not model.windowed_layers:
        return []
    assert model.sliding_window is not None  # windowed_layers counts none without it
    a = ["--window-size", f"{model.sliding_window - 1},0"]
    n, mask = model.sliding_window_pattern, model.window_mask
    if isinstance(n, int):
        a += ["--window-attn-skip-freq", str(n)]
    elif not all(mask):  # the spec's layers as Megatron's list (`ModelSpec.window_mask`: one rule)
        a += ["--window-attn-skip-freq", "[" + ",".join(str(int(w)) for w in mask) + "]"]
    return a


def cp_comm_flags(model: ModelSpec, cp: int) -> list[str]:
    """Context parallelism's exchange where Megatron's default p2p ring cannot run: a softmax with a learned or
    unit offset runs only with a2a (`ModelSpec.cp_all_to_all`), priced as such (`layer_terms.cp_a2a_s`); a
    sliding window is refused with the p2p ring ("Context parallelism does not support sliding window attention
    with cp_comm_type=p2p", context_parallel.py `attn_forward_func_with_cp`), so a windowed model's windowed
    layers gather K and V (all_gather, the ring's volume), the others keep p2p (`--cp-comm-type`, one type per
    layer); DeepSeek Sparse Attention gathers its latent and indexer keys (transformer_config.py ~3162-3177
    accepts allgather only; priced in `dsa.cp_gather_s`)."""
    if cp > 1 and model.cp_all_to_all:
        return ["--cp-comm-type", "a2a"]
    if cp > 1 and model.is_dsa:  # "DSAttention context parallelism currently supports cp_comm_type=allgather only"
        return ["--cp-comm-type", "all_gather"]
    if cp == 1 or not model.windowed_layers:
        return []
    kinds = ["all_gather" if w else "p2p" for w in model.window_mask]
    return ["--cp-comm-type", *(kinds if len(set(kinds)) > 1 else kinds[:1])]


def model_flags(model: ModelSpec, seq_length: int) -> tuple[list[str], list[str]]:
    """(flags, notes) that make Megatron-LM build `model`'s architecture."""
    a = ["--seq-length", str(seq_length), "--max-position-embeddings", str(seq_length),
         "--num-layers", str(model.num_layers), "--hidden-size", str(model.hidden_size),
         "--num-attention-heads", str(model.num_attention_heads), "--ffn-hidden-size", str(model.ffn_hidden_size),
         "--kv-channels", str(model.head_dim)]
    notes: list[str] = []
    if model.num_kv_heads != model.num_attention_heads:
        a += ["--group-query-attention", "--num-query-groups", str(model.num_kv_heads)]
    if model.position_embedding == "rope":
        a += rope_flags(model, notes)
    else:
        a += ["--position-embedding-type", "learned_absolute"]
        if model.position_embedding == "alibi":
            notes.append("Megatron-LM has no ALiBi: it builds learned absolute positions instead")
        elif model.position_embedding == "none":
            notes.append("Megatron-LM has no position-free GPT flag in its CLI: it builds learned absolute positions")
    a += ["--normalization", model.normalization, "--norm-epsilon", repr(float(model.norm_epsilon))]
    if model.norm_zero_centered_gamma:
        a.append("--apply-layernorm-1p")
    if model.qk_norm:
        a.append("--qk-layernorm")
    if model.attention_output_gate:
        a.append("--attention-output-gate")
    if not model.add_bias_linear:
        a.append("--disable-bias-linear")
        if model.add_qkv_bias:
            a.append("--add-qkv-bias")
    act = model.activation
    if act == "swiglu":
        a.append("--swiglu")
    elif act == "squared_relu":
        a.append("--squared-relu")
    elif act == "quick_geglu":
        a.append("--quick-geglu")
    elif act == "geglu":
        a.append("--quick-geglu")
        notes.append("Megatron-LM's gated GeLU flag is --quick-geglu (x*sigmoid(1.702x)); the model's GeGLU uses "
                     "tanh GeLU: same shapes and cost, different numerics")
    elif act == "relu":
        notes.append("Megatron-LM has no plain ReLU flag: it builds GeLU (same shapes and cost)")
    if model.glu_linear_offset:
        a += ["--glu-linear-offset", _num(model.glu_linear_offset)]
    if model.activation_clamp is not None:
        a += ["--activation-func-clamp-value", _num(model.activation_clamp)]
    if model.softmax_type != "vanilla":
        a += ["--softmax-type", model.softmax_type]
    a += ["--hidden-dropout", _num(model.dropout), "--attention-dropout", _num(model.attention_dropout)]
    a += window_flags(model)
    if not model.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if "position_embedding" not in model.model_fields_set and "normalization" not in model.model_fields_set:
        notes.append(f"the model file states no architecture: Megatron-LM's GPT defaults are launched "
                     f"(learned absolute positions, LayerNorm, linear biases, {act})")
    return a, notes


def _sharding_flags(job, zero: int, notes: list[str]) -> list[str]:
    """The optimizer's sharding (zero 1: the distributed optimizer; 2/3: Megatron-FSDP) and the job's
    precision-aware optimizer (optimizer/__init__.py:564-588 at d98e8a6, TE's FusedAdam; priced in memory.py)."""
    a = ["--use-distributed-optimizer"] if zero >= 1 else []
    if job.precision_aware_optimizer:
        a.append("--use-precision-aware-optimizer")
        if job.optimizer_moment_dtype != "fp32":
            a += ["--exp-avg-dtype", job.optimizer_moment_dtype, "--exp-avg-sq-dtype", job.optimizer_moment_dtype]
    if zero == 3 and job.zero3_gathers == "per_parameter":
        notes.append("zero=3 was priced with DeepSpeed's per-parameter ZeRO-3 gathers (zero3_gathers per_parameter); "
                     "Megatron-FSDP prefetches one gather per layer behind the compute, faster than priced")
    if zero >= 2:
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", FSDP_STRATEGY[zero],
              "--ckpt-format", "fsdp_dtensor", "--no-gradient-accumulation-fusion"]
        notes.append(f"zero={zero} is Megatron-FSDP's {FSDP_STRATEGY[zero]} strategy; it needs the fsdp_dtensor "
                     f"checkpoint format and refuses CUDA_DEVICE_MAX_CONNECTIONS=1 (leave it unset)")
    if job.distributed_optimizer_instances > 1:  # HSDP (zero 3: SETTING_RULES), as Megatron-Bridge's Ultra recipes
        a += ["--num-distributed-optimizer-instances", str(job.distributed_optimizer_instances),
              "--outer-dp-sharding-strategy", "optim"]
    return a


def _offload_module_flags(job: JobSpec, env: dict[str, str], notes: list[str]) -> list[str]:
    """Fine-grained activation offloading (the job's offload_modules; specs/offloading.py): TransformerConfig's
    fine_grained_activation_offloading and offload_modules (transformer_config.py:1323-1342), the op fuser that
    fused_group_mlp needs (:2186-2188), and NVTE_CPU_OFFLOAD_V1=1, which validate_args asserts with Transformer
    Engine 2.10 and later (arguments.py:1935-1940)."""
    if not job.offload_modules:
        return []
    a = ["--fine-grained-activation-offloading", "--offload-modules", *job.offload_modules]
    if job.min_offloaded_tensor_size != MIN_OFFLOADED_ELEMENTS:  # Megatron's default otherwise (transformer_config.py)
        a += ["--min-offloaded-tensor-size", str(job.min_offloaded_tensor_size)]
    if "fused_group_mlp" in job.offload_modules:  # the fused grouped MLP (experts.py `_is_fused_impl_supported`)
        a.append("--use-transformer-engine-op-fuser")
        if job.model.activation == "squared_relu":
            a.append("--use-fused-weighted-squared-relu")
    env["NVTE_CPU_OFFLOAD_V1"] = "1"
    notes.append(f"--offload-modules {' '.join(job.offload_modules)}: those modules' saved inputs go to pinned host "
                 f"memory after their forward and come back before their backward (NVTE_CPU_OFFLOAD_V1=1 keeps "
                 f"Transformer Engine from offloading weights; validate_args asserts it from TE 2.10)")
    return a


def gdn_gpt_args(job: JobSpec, plan: Plan) -> MegatronArgs:
    """A Gated DeltaNet model of GPT layers (Qwen3-Next, Qwen3.5) as Megatron-Bridge builds it: the GPT model
    without its Gated DeltaNet (`megatron_hybrid.gpt_view`, the plan's split in GPT layers: two hybrid layers
    each), then the experimental attention variant's flags (`megatron_hybrid.gdn_gpt_flags`)."""
    view, layers = gpt_view(job.model), [n // 2 for n in plan.layers_per_stage]
    out = megatron_args(job.model_copy(update={"model": view}), plan.model_copy(update={"layers_per_stage": layers}))
    flags, notes = gdn_gpt_flags(job.model)
    return MegatronArgs(out.args + flags, notes + out.notes, out.layout, out.env, out.entry)


# LoRA is Megatron-Bridge's (src/megatron/bridge/peft/lora.py); Megatron-LM's pretrain_gpt.py has no adapters
LORA_NOTE = ("peft lora: pretrain_gpt.py trains every weight and has no LoRA; run this plan's parallelism and precision "
             "through Megatron-Bridge's finetune with cfg.peft = LoRA(target_modules={targets}, dim={rank}) "
             "(megatron.bridge.peft.lora), which freezes the base model")


def megatron_args(job: JobSpec, plan: Plan) -> MegatronArgs:
    """Megatron-LM arguments (and launch environment) for `plan` of `job`."""
    if gdn_as_gpt(job.model):  # a GPT model with the experimental attention variant
        return gdn_gpt_args(job, plan)
    par, model = plan.parallel, job.model
    a: list[str] = []
    notes: list[str] = []
    env: dict[str, str] = {}
    a += ["--tensor-model-parallel-size", str(par.tp), "--pipeline-model-parallel-size", str(par.pp),
          "--context-parallel-size", str(par.cp), *cp_comm_flags(model, par.cp)]
    flags, split_notes, layout = pipeline_flags(plan, model)
    if par.vp > 1 and layout is None:
        a += ["--num-virtual-stages-per-pipeline-rank", str(par.vp)]
    if layout is not None and par.vp > 1:
        split_notes.append(f"the layout lists {par.pp * par.vp} virtual stages: interleaving with vp={par.vp} follows from it")
    a += flags
    notes += split_notes
    a += ["--micro-batch-size", str(par.micro_batch_size), "--global-batch-size", str(job.global_batch_size)]
    if par.sequence_parallel:
        a.append("--sequence-parallel")
    if par.recompute == "selective" and job.recompute_modules != ():  # no module: nothing recomputed
        a += ["--recompute-granularity", "selective"]
        if job.recompute_modules is not None:  # Megatron's default is core_attn (transformer_config.py)
            a += ["--recompute-modules", *job.recompute_modules]
        if job.precision in FP8_FLAGS and {"moe_act", "layernorm"} & set(job.recompute_modules or ()):
            notes.append("recomputing moe_act or layernorm under FP8 needs Transformer Engine >= 2.6.0dev0 "
                         "(megatron/core/transformer/transformer_config.py)")
    elif par.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if job.peft == "lora":  # Megatron-LM's own scripts train every weight (specs/peft.py)
        notes.append(LORA_NOTE.format(targets=list(job.lora_target_modules), rank=job.lora_rank))
    if job.cpu_offloading_num_layers:  # arguments.py:1950 sets --cpu-offloading from it (activations, not weights)
        a += ["--cpu-offloading-num-layers", str(job.cpu_offloading_num_layers)]
        notes.append(f"--cpu-offloading-num-layers {job.cpu_offloading_num_layers}: Transformer Engine copies the first "
                     f"{job.cpu_offloading_num_layers} layers' saved activations to pinned host memory (leave the "
                     f"NVTE_CPU_OFFLOAD_V1 variable unset: the plan is priced with TE's default schedule)")
    a += _offload_module_flags(job, env, notes)
    fsdp = par.zero >= 2
    a += _sharding_flags(job, par.zero, notes)
    if job.overlap_grad_reduce and par.dp * par.cp > 1:
        a.append("--overlap-grad-reduce")
        if par.zero >= 1:
            a.append("--overlap-param-gather")
    if job.tp_comm_overlap and par.tp > 1:
        if par.sequence_parallel:
            a.append("--tp-comm-overlap")
        else:
            notes.append("--tp-comm-overlap needs --sequence-parallel (Megatron-LM asserts it): left out")
    gpus = [p.gpu for p in job.cluster.pool_specs()]  # a mixed cluster: its oldest GPU decides
    arch = min(gpu_arch(g) for g in gpus)
    rocm = any(g.is_rocm for g in gpus)
    if (par.tp > 1 or par.cp > 1) and not fsdp and arch < 10:
        if rocm:
            notes.append("ROCm: no stream-connection variable is set (HIP ignores it); upstream Megatron-LM's "
                         "validate_args asserts one with tp/cp > 1 on pre-Blackwell devices (ROCm reports CDNA 3/4 as "
                         "major 9): set the variable it names only if your build refuses to start")
        else:
            env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"  # asserted by validate_args before Blackwell
    mflags, mnotes = model_flags(model, job.seq_length)
    a += mflags
    notes += mnotes
    if model.is_moe or model.multi_latent_attention or model.mtp_num_layers:  # MTP: a dense model's too
        a, layout = moe_launch(job, plan, a, notes, layout, arch)
    if model.is_hybrid:  # Megatron-Core's HybridModel, the split as pattern segments (render/megatron_hybrid.py)
        a, layout = hybrid_flags(model, a, notes, list(plan.layers_per_stage), par.vp), None
    a += _precision_flags(job, arch, min(gpus, key=gpu_arch).name, notes) + _cuda_graph_flags(job, notes)
    # cuDNN's fused attention is Transformer Engine's `fused` backend; FlashAttention-2 is `flash`
    backend = ("fused" if job.attention_kernel == "cudnn" else "flash") if job.flash_attention else "unfused"
    if job.flash_attention and job.attention_kernel == "flash1":
        notes.append("Megatron has no FlashAttention-1 kernel: --attention-backend flash runs FlashAttention-2, "
                     "faster than the flash1 kernel the plan was priced with")
    if rocm and job.flash_attention:
        backend = "auto"
        notes.append("ROCm: --attention-backend auto lets Transformer Engine's ROCm build pick its CK / AOTriton "
                     "fused attention; collectives run on RCCL, priced like NCCL on the stated links")
    a += ["--attention-backend", backend]
    if job.flash_attention:
        notes.append("older Megatron-LM releases spell the attention backend --use-flash-attn")
    notes.append(f"add your data, tokenizer (vocabulary {model.vocab_size}), --train-iters, --lr and checkpoint flags")
    return MegatronArgs(a, notes, layout, env, HYBRID_ENTRY if model.is_hybrid else "pretrain_gpt.py")


def render_megatron(job: JobSpec, plan: Plan) -> str:
    return megatron_args(job, plan).command()
