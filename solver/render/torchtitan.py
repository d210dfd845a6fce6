"""torchtitan job configs that launch a plan (pure: returns strings), for two releases
(`--torchtitan-version`, default the current one, CURRENT):

- **0.3** (pytorch/torchtitan v0.3.0, PyPI `torchtitan==0.3.0`): no TOML. The job is a Python
  function returning a `Trainer.Config`, selected by `--module M --config F`
  (`torchtitan/config/manager.py:ConfigManager._load_config`); CLI flags `--section.field`
  (tyro, underscores or dashes) override it. `activation_checkpoint` is a subcommand
  (`activation_checkpoint:selective|full|none`, `distributed/activation_checkpoint.py`:
  ActivationCheckpointingConfig), which must come after the other flags. Float8 is a model
  converter on `model_spec` (`components/quantization/float8.py:Float8LinearConverter`, recipes
  rowwise / rowwise_with_gw_hp), and `model_spec` is not a CLI field: only a config function
  sets it. The output is therefore a Python module with one config function that starts from
  torchtitan's own config of the model (`models/llama3/config_registry.py`) and sets the plan;
  its docstring gives the launch line and the same plan as flags on the stock config (all but
  float8). The output module of the decoder is `lm_head`; `ParallelismConfig` gained
  `enable_sequence_parallel`, and refuses pipeline parallelism unless `training.disable_cuda_graphs`
  (`Trainer.Config._validate_cuda_graphs`), which a pipelined plan sets.
- **0.2** (v0.2.2, the last TOML release; `torchtitan/config/job_config.py`): `[training]`
  local_batch_size, global_batch_size, seq_len; `[parallelism]` data_parallel_replicate_degree,
  data_parallel_shard_degree, fsdp_reshard_after_forward, tensor_parallel_degree,
  context_parallel_degree, pipeline_parallel_degree, pipeline_parallel_schedule,
  pipeline_parallel_microbatch_size, module_fqns_per_model_part; `[activation_checkpoint]` mode,
  selective_ac_option; `[model] converters = ["quantize.linear.float8"]` with
  `[quantize.linear.float8]`; the output module is `output`. Loaded with `--job.config_file`.

How the plan maps (torchtitan's parallelisms are FSDP2-based, not Megatron's), both releases:
- dp: zero=0 -> DDP (`data_parallel_replicate_degree = dp`); zero>=1 -> FSDP over dp
  (`data_parallel_shard_degree = dp`); zero=3 reshards parameters after forward ("always"),
  zero 1/2 keep them ("never", ZeRO-2-like; torchtitan has no optimizer-only sharding).
- tp with sequence parallelism (0.2 always shards the sequence between TP regions; 0.3 follows
  the plan).
- pp: `1F1B`, or `Interleaved1F1B` with vp > 1; the planned split as `module_fqns_per_model_part`
  (torchtitan's decoder FQNs `tok_embeddings`, `layers.<i>`, `norm`, and the output module),
  one part per stage, stage k on rank k mod pp as looped schedules place them.
- recompute none/selective/full -> activation checkpointing none / selective (per-op) / full.
- precision fp8 / fp8-tensorwise -> the float8 linear converter (0.2: tensorwise scaling with
  float8 all-gather under FSDP; 0.3: rowwise, the recipes it has), the output projection left in
  bf16; fp8-blockwise and mxfp8 are said in a note, not configured; so is nvfp4: torchtitan's NVFP4
  path (torchtitan/components/quantization/nvfp4.py at b5bcd76) is a torchao prototype converter set
  in config functions (e.g. llama3_debugmodel_nvfp4), not Transformer Engine's NVFP4BlockScaling.
- AMD Instinct: torchtitan on ROCm takes the same sections; nothing CUDA-specific is emitted.
"""

from __future__ import annotations

from ..errors import InputError
from ..formulation.memory import adam_state_bytes_per_param
from ..plan import Plan
from ..specs import JobSpec
from ..specs.frameworks import expert_conflicts, torchtitan_moe_family, windows_skipped
from .megatron import _chunks

SOURCES = {
    "0.3": "pytorch/torchtitan v0.3.0: torchtitan/config/configs.py, manager.py, trainer.py",
    "0.2": "pytorch/torchtitan v0.2.2: torchtitan/config/job_config.py",
}
VERSIONS = tuple(SOURCES)
CURRENT = "0.3"
OUTPUT_FQN = {"0.3": "lm_head", "0.2": "output"}  # the decoder's output projection
# torchtitan 0.3's own config functions for the catalog's models (models/llama3/config_registry.py,
# flavors of models/llama3/__init__.py:llama3_configs); other models start from the 8B one
BASE_CONFIGS = {"llama3.1-8b": ("llama3_8b", "8B"), "llama3.1-70b": ("llama3_70b", "70B"),
                "llama3.1-405b": ("llama3_405b", "405B")}
MODULE_NAME = "solveplan_job"  # the module (file) and config function the 0.3 output defines

NVFP4_NOTE = ("the planned nvfp4 recipe (Transformer Engine NVFP4BlockScaling) is not expressed here: torchtitan's "
              "NVFP4 path is a torchao prototype converter set in config functions (torchtitan/components/"
              "quantization/nvfp4.py); launch with Megatron-LM's flags (--fp4-format e2m1), the flags here run bf16")

# pytorch/torchtitan b5bcd76: training.enable_cpu_offload (torchtitan/config/configs.py:70) is FSDP2's
# CPUOffloadPolicy for parameters, gradients and optimizer state; experiments/graph_trainer's "sac_and_offload" is a
# compiler memory policy under a byte budget. Neither offloads the activations of a number of layers.
OFFLOAD_NOTE = ("torchtitan has no layer-level activation offloading (training.enable_cpu_offload offloads FSDP2's "
                "parameters, gradients and optimizer state): the plan's cpu_offloading_num_layers is not expressed; "
                "launch with Megatron-LM's --cpu-offloading-num-layers")
MODULE_OFFLOAD_NOTE = ("torchtitan has no per-module activation offloading (its config at b5bcd76 offloads only FSDP2's "
                       "state, training.enable_cpu_offload): the plan's offload_modules ({mods}) are not expressed; "
                       "launch with Megatron-LM's --offload-modules")

# pytorch/torchtitan b5bcd76 torchtitan/components/optimizer/optimizer.py: AdamW over FSDP2's fp32 parameters;
# implementation "fused_opt_states_bf16" keeps bf16 moments (not set by the config written here); no master-weight
# remainder (the weights themselves are the fp32 master).
OPTIMIZER_NOTE = ("the plan's precision-aware optimizer (Megatron --use-precision-aware-optimizer, {state:g} bytes of "
                  "Adam state per parameter) is not expressed: torchtitan's AdamW keeps fp32 moments over fp32 weights "
                  "here; launch with Megatron-LM's flags for the planned memory")


def module_fqns_per_model_part(layers: list[int], vp: int, num_layers: int,
                               output_fqn: str = OUTPUT_FQN[CURRENT]) -> list[list[str]]:
    """One FQN list per pipeline stage, in stage order (stage k = chunk k // pp of rank k % pp)."""
    pp = len(layers)
    chunks = [_chunks(n, vp) for n in layers]  # per rank, per virtual stage
    parts, nxt = [], 0
    for k in range(pp * vp):
        rank, chunk = k % pp, k // pp
        n = chunks[rank][chunk]
        part = [f"layers.{i}" for i in range(nxt, nxt + n)]
        nxt += n
        if k == 0:
            part.insert(0, "tok_embeddings")
        if k == pp * vp - 1:
            part += ["norm", output_fqn]
        parts.append(part)
    assert nxt == num_layers, (nxt, num_layers)
    return parts


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def check_version(version: str) -> str:
    if version not in SOURCES:
        raise InputError("--torchtitan-version", f"{version!r} is not one of {', '.join(VERSIONS)} (torchtitan "
                                                 f"releases whose config format this knows)")
    return version


LORA_NOTE = ("peft lora is priced as Megatron-Bridge runs it; torchtitan's LoRA (torchtitan/components/lora.py) is not "
             "expressed here: this config trains every weight")


def _unexpressed_settings(job: JobSpec, par) -> list[str]:
    """Notes on the job's settings that torchtitan's config does not express (the plan was priced with them)."""
    notes: list[str] = []
    if par.recompute == "selective" and job.recompute_modules is not None:
        notes.append(f"Megatron's recompute modules ({', '.join(job.recompute_modules) or 'none'}) are not expressed: "
                     f"torchtitan's selective activation checkpointing is per op; the plan was priced with them")
    notes += [LORA_NOTE] if job.peft == "lora" else []
    if job.cpu_offloading_num_layers:
        notes.append(OFFLOAD_NOTE)
    if job.offload_modules:
        notes.append(MODULE_OFFLOAD_NOTE.format(mods=", ".join(job.offload_modules)))
    if job.model.windowed_layers and not windows_skipped("torchtitan", job.model):  # gpt_oss's decoder builds its own
        notes.append(f"torchtitan's Llama-style decoder has no sliding window: {job.model.name}'s "
                     f"{job.model.sliding_window}-token window is not built (full causal attention: "
                     f"--framework torchtitan prices it so)")
    if job.precision_aware_optimizer:
        notes.append(OPTIMIZER_NOTE.format(state=adam_state_bytes_per_param(
            job.precision, True, job.optimizer_moment_dtype)))
    return notes


def torchtitan_config(job: JobSpec, plan: Plan, version: str = CURRENT) -> tuple[dict[str, dict], list[str]]:
    """({section: {field: value}}, notes) for `plan` of `job` in torchtitan `version`'s fields."""
    check_version(version)
    par, model = plan.parallel, job.model
    notes = _unexpressed_settings(job, par)
    local = job.global_batch_size // par.dp  # per data-parallel rank
    training = {"seq_len": job.seq_length, "global_batch_size": job.global_batch_size}
    parallelism: dict = {"tensor_parallel_degree": par.tp, "context_parallel_degree": par.cp,
                         "pipeline_parallel_degree": par.pp}
    if par.zero == 0:
        parallelism.update(data_parallel_replicate_degree=par.dp, data_parallel_shard_degree=1)
    else:
        parallelism.update(data_parallel_replicate_degree=1, data_parallel_shard_degree=par.dp,
                           fsdp_reshard_after_forward="always" if par.zero == 3 else "never")
        if par.zero == 1:
            notes.append("torchtitan has no optimizer-only sharding: zero=1 runs as FSDP without resharding after "
                         "forward (gradients sharded too, ZeRO-2-like)")
    if par.pp > 1:
        training["local_batch_size"] = local  # micro-batches = local / microbatch size
        parallelism.update(pipeline_parallel_schedule="Interleaved1F1B" if par.vp > 1 else "1F1B",
                           pipeline_parallel_microbatch_size=par.micro_batch_size,
                           module_fqns_per_model_part=module_fqns_per_model_part(
                               list(plan.layers_per_stage), par.vp, model.num_layers, OUTPUT_FQN[version]))
    else:
        training["local_batch_size"] = par.micro_batch_size  # gradient accumulation makes up the rest
        if par.num_microbatches > 1:
            notes.append(f"global_batch_size / (local_batch_size x dp) = {par.num_microbatches} gradient-accumulation "
                         f"steps")
    if version == "0.3":
        if par.tp > 1:
            parallelism["enable_sequence_parallel"] = par.sequence_parallel
        if par.pp > 1:  # trainer.py Trainer.Config._validate_cuda_graphs: "CUDA graphs do not support pipeline parallelism"
            training["disable_cuda_graphs"] = True
        sections, notes = _sections_03(job, par, training, parallelism, notes)
        if model.is_moe:
            moe_sections_03(job, plan, sections, notes)
        return sections, notes
    if par.tp > 1 and not par.sequence_parallel:
        notes.append("torchtitan always shards the sequence between TP regions (sequence parallelism on)")
    ac = {"none": {"mode": "none"}, "selective": {"mode": "selective", "selective_ac_option": "op"},
          "full": {"mode": "full"}}[par.recompute]
    sections = {"training": training, "parallelism": parallelism, "activation_checkpoint": ac}
    if job.precision in ("fp8-blockwise", "mxfp8"):
        notes.append(f"the planned {job.precision} recipe is not expressed here: torchtitan's float8 converter scales "
                     f"per tensor or per row; launch with Megatron-LM's flags, or configure torchtitan's MX converter")
    if job.precision == "nvfp4":
        notes.append(NVFP4_NOTE)
    if job.precision in ("fp8", "fp8-tensorwise"):
        if job.precision == "fp8":
            notes.append("torchtitan's float8 tensorwise recipe scales per tensor from the current amax (current "
                         "scaling), not from an amax history (delayed): same GEMMs, one more pass per cast")
        sections["model"] = {"converters": ["quantize.linear.float8"]}
        fsdp = par.zero >= 1
        sections["quantize.linear.float8"] = {"recipe_name": "tensorwise", "enable_fsdp_float8_all_gather": fsdp,
                                              "precompute_float8_dynamic_scale_for_fsdp": fsdp,
                                              "filter_fqns": ["output"]}
    if model.is_moe:
        moe_model, moe_par, moe_notes = torchtitan_moe(job, plan)
        parallelism.update(moe_par)
        if moe_model:
            sections.setdefault("model", {}).update(moe_model)
        notes += moe_notes
    if model.position_embedding != "rope" or not model.gated_mlp or model.normalization != "RMSNorm":
        notes.append(f"torchtitan's decoders are Llama-style (RoPE, RMSNorm, SwiGLU); {model.name} is "
                     f"{model.position_embedding}/{model.normalization}/{model.activation}: pick a matching model")
    return sections, notes


def _sections_03(job: JobSpec, par, training: dict, parallelism: dict,
                 notes: list[str]) -> tuple[dict[str, dict], list[str]]:
    """torchtitan 0.3: the base config function, training, parallelism, the activation
    checkpointing subcommand and the float8 converter's fields."""
    model = job.model
    base, flavor = BASE_CONFIGS.get(model.name, ("llama3_8b", "8B"))
    if model.name not in BASE_CONFIGS:
        notes.append(f"torchtitan 0.3 has no config of {model.name}: the job starts from llama3_8b's; put your "
                     f"model's config function and model_spec in its place")
    sections: dict[str, dict] = {"base": {"module": "llama3", "config": base, "flavor": flavor},
                                 "training": training, "parallelism": parallelism,
                                 "activation_checkpoint": {"subcommand": par.recompute}}
    if base == "llama3_405b" and job.precision not in ("fp8", "fp8-tensorwise"):
        notes.append("torchtitan's llama3_405b config trains in float8: the flags on it do too (this module does not)")
    if job.precision in ("fp8-blockwise", "mxfp8"):
        notes.append(f"the planned {job.precision} recipe is not expressed here: torchtitan's float8 converter scales "
                     f"per tensor or per row; launch with Megatron-LM's flags, or configure torchtitan's MX converter")
    if job.precision == "nvfp4":
        notes.append(NVFP4_NOTE)
    if job.precision in ("fp8", "fp8-tensorwise"):
        sections["float8"] = {"recipe_name": "rowwise", "filter_fqns": [OUTPUT_FQN["0.3"]]}
        notes.append("torchtitan 0.3 sets float8 only in a config function (Float8LinearConverter on model_spec; "
                     "rowwise scaling, it has no tensorwise recipe): the flags on the stock config run in bf16")
    if model.position_embedding != "rope" or not model.gated_mlp or model.normalization != "RMSNorm":
        notes.append(f"torchtitan's decoders are Llama-style (RoPE, RMSNorm, SwiGLU); {model.name} is "
                     f"{model.position_embedding}/{model.normalization}/{model.activation}: pick a matching model")
    return sections, notes


def torchtitan_flags(job: JobSpec, plan: Plan, version: str = CURRENT) -> list[str]:
    """The command-line arguments of `torchtitan.train` that load the plan: 0.3 `--module/--config`
    of torchtitan's own config and the plan's fields as flags (float8 excepted, module docstring);
    0.2 the same `--section.field` flags over its defaults."""
    sections, _ = torchtitan_config(job, plan, version)
    out: list[str] = []
    if version == "0.3":
        out += ["--module", sections["base"]["module"], "--config", sections["base"]["config"]]
    for name, fields in sections.items():
        if name in ("base", "float8", "activation_checkpoint") and version == "0.3":
            continue
        for k, v in fields.items():
            flag = f"--{name}.{k}"
            if isinstance(v, bool):
                out.append(flag if v else f"--{name}.no_{k}")
            elif isinstance(v, list) and v and isinstance(v[0], list):  # list[list[str]]: one comma list per part
                out += [flag, *(",".join(part) for part in v)]
            elif isinstance(v, list):
                out += [flag, ",".join(v)]
            else:
                out += [flag, str(v)]
    if version == "0.3":
        # a list of lists takes every argument up to the next flag, the subcommand included: list
        # flags go before the others; the subcommand (tyro) after every other flag
        starts = [i for i, a in enumerate(out) if a.startswith("--")] + [len(out)]
        groups = [out[a:b] for a, b in zip(starts, starts[1:])]
        head, groups = groups[:2], groups[2:]  # --module, --config
        out = [a for g in head + [g for g in groups if len(g) > 2] + [g for g in groups if len(g) <= 2] for a in g]
        out.append(f"activation_checkpoint:{sections['activation_checkpoint']['subcommand']}")
    return out


def _render_03(job: JobSpec, plan: Plan, sections: dict, notes: list[str]) -> str:
    par = plan.parallel
    base = sections["base"]
    c = job.cluster
    launch = f"torchrun --nnodes {c.num_nodes} --nproc_per_node {c.gpus_per_node} -m torchtitan.train"
    ac = {"none": "None", "selective": "SelectiveAC.Config()", "full": "FullAC.Config()"}[par.recompute]
    flags = " ".join(shell_word(a) for a in torchtitan_flags(job, plan, "0.3"))
    out = [f'"""torchtitan 0.3 job config for {job.model.name} on {c.name}, written by solveplan',
           f"({SOURCES['0.3']}).", "",
           f"Save as {MODULE_NAME}.py and launch from its folder:",
           f"    PYTHONPATH=. {launch} --module {MODULE_NAME} --config {MODULE_NAME}",
           "The same plan as flags on torchtitan's own config"
           + (" (in bf16: float8 is set only here)" if "float8" in sections else "") + ":",
           f"    {launch} {flags}"]
    out += [""] + [f"Note: {n}" for n in notes] if notes else []
    out += ['"""', ""]
    if "float8" in sections:
        out.append("from torchtitan.components.quantization import Float8LinearConverter")
    out += ["from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401",
            f"from torchtitan.models.{base['module']} import model_registry"]
    out += [f"from torchtitan.models.{base['module']}.config_registry import {base['config']}", "", "",
            f"def {MODULE_NAME}():", f"    config = {base['config']}()"]
    for name in ("training", "parallelism"):
        out += [f"    config.{name}.{k} = {v!r}" for k, v in sections[name].items()]
    out.append(f"    config.activation_checkpoint = {ac}")
    if "float8" in sections:
        f8 = sections["float8"]
        out += ['    compiled = config.compile.enable and "model" in config.compile.components',
                f"    config.model_spec = model_registry({base['flavor']!r}, converters=[Float8LinearConverter.Config(",
                f"        recipe_name={f8['recipe_name']!r}, filter_fqns={f8['filter_fqns']!r}, "
                f"model_compile_enabled=compiled)])"]
    else:  # the plan's precision, whatever the stock config's (llama3_405b's is float8)
        out.append(f"    config.model_spec = model_registry({base['flavor']!r})")
    out.append("    return config")
    return "\n".join(out) + "\n"


def shell_word(arg: str) -> str:
    """`arg` as one shell word: as is when it holds only safe characters, else single-quoted."""
    return arg if arg and all(ch.isalnum() or ch in "-_.,:=/" for ch in arg) else f"'{arg}'"


def render_torchtitan(job: JobSpec, plan: Plan, version: str = CURRENT) -> str:
    """0.3: the Python config module; 0.2: the TOML sections (with the equivalent --section.field
    flags as a comment)."""
    sections, notes = torchtitan_config(job, plan, version)
    if version == "0.3":
        return _render_03(job, plan, sections, notes)
    out = [f"# torchtitan 0.2 job config for {job.model.name} on {job.cluster.name} ({SOURCES['0.2']}); "
           f"load with --job.config_file"]
    out += [f"# {n}" for n in notes]
    flags = []
    for name, fields in sections.items():
        out += ["", f"[{name}]"] + [f"{k} = {_toml(v)}" for k, v in fields.items()]
        flags += [f"--{name}.{k} {_toml(v)}" for k, v in fields.items() if not isinstance(v, list)]
    out += ["", "# as flags: " + " ".join(flags)]
    return "\n".join(out) + "\n"


# ---- mixture of experts ------------------------------------------------------------------------
# pytorch/torchtitan 0.3.0 (and HEAD b5bcd76, 2026-08-21, the same for MoE): the MoE decoders are torchtitan/models/qwen3 (flavors
# 30B-A3B, 235B-A22B), deepseek_v3 (MLA + MoE: 16B = DeepSeek-V2-Lite's dimensions, 236B, 671B) and
# gpt_oss (20b, 120b); Mixtral, Llama 4 and Qwen2-MoE have no torchtitan model. The one expert knob
# is `ParallelismConfig.expert_parallel_degree` (torchtitan/config/configs.py), and
# ParallelDims._validate (torchtitan/distributed/parallel_dims.py) requires it to divide
# dp_shard * cp * tp: "EP borrows ranks from FSDP and TP". Routed experts are sharded on EP alone
# when EP > 1 and TP-sharded like the dense MLP when EP = 1 (torchtitan/models/common/MOE_SHARDING.md):
# expert tensor parallelism is 1 with EP, the TP degree without it. (The TOML-era job_config.py at
# 9810191bb^ had expert_tensor_parallel_degree with the same two forms, etp 1 its default.)
TORCHTITAN_MOE_SOURCE = "pytorch/torchtitan 0.3.0: models/{qwen3,deepseek_v3,gpt_oss}, distributed/parallel_dims.py"
# family -> {flavor: (layers, hidden size, routed experts)} from each family's __init__.py
TORCHTITAN_MOE_FLAVORS = {
    "qwen3": {"30B-A3B": (48, 2048, 128), "235B-A22B": (94, 4096, 128)},
    "deepseek_v3": {"16B": (27, 2048, 64), "236B": (60, 5120, 160), "671B": (61, 7168, 256)},
    "gpt_oss": {"20b": (24, 2880, 32), "120b": (36, 2880, 128)},
}


# torchtitan 0.3.0's config functions of these flavors (models/<family>/config_registry.py); a flavor
# without one starts from its family's first (its model_spec then set to the flavor)
TORCHTITAN_MOE_CONFIGS = {
    "qwen3": {"30B-A3B": "qwen3_30b_a3b"},
    "deepseek_v3": {"16B": "deepseek_v3_16b", "671B": "deepseek_v3_671b"},
    "gpt_oss": {"20b": "gpt_oss_20b", "120b": "gpt_oss_120b"},
}


def moe_sections_03(job: JobSpec, plan: Plan, sections: dict, notes: list[str]) -> None:
    """torchtitan 0.3: an MoE plan starts from its torchtitan family's config function with the
    flavor's model_spec, and sets expert_parallel_degree (`torchtitan_moe`) and, with EP, disables
    CUDA graphs; `sections` and `notes` are updated in place."""
    out_model, par_fields, moe_notes = torchtitan_moe(job, plan)
    sections["parallelism"].update(par_fields)
    if par_fields.get("expert_parallel_degree", 1) > 1:
        # trainer.py Trainer.Config._validate_cuda_graphs: with EP, CUDA graphs only with a dispatcher
        # free of CPU synchronisation (MinimalAsyncEP, HybridEP with a capacity factor); the standard
        # all-to-all is not, so the graphs go (found by torchtitan's own ConfigManager, tested)
        sections["training"]["disable_cuda_graphs"] = True
    family, flavor = out_model.get("name"), out_model.get("flavor")
    if family is not None and flavor is not None:
        configs = TORCHTITAN_MOE_CONFIGS[family]
        sections["base"] = {"module": family, "config": configs.get(flavor, next(iter(configs.values()))),
                            "flavor": flavor}
        notes[:] = [n for n in notes if not n.startswith("torchtitan 0.3 has no config of")]
    notes += moe_notes


def torchtitan_moe(job: JobSpec, plan: Plan) -> tuple[dict, dict, list[str]]:
    """(model fields, parallelism fields, notes) for an MoE plan: the model family and flavor and
    `expert_parallel_degree` where torchtitan supports the model and the plan's EP/ETP form, else
    one line saying what it does not support."""
    model, par = job.model, plan.parallel
    ep, etp = int(getattr(par, "ep", 1) or 1), int(getattr(par, "etp", 1) or 1)
    family = torchtitan_moe_family(model)
    if family is None:
        return {}, {}, [f"torchtitan has no mixture-of-experts model for {model.name} (its MoE decoders: Qwen3-MoE, "
                        f"DeepSeek-V3/V2 with MLA, GPT-OSS; {TORCHTITAN_MOE_SOURCE})"]
    dims = (model.num_layers, model.hidden_size, model.num_experts)
    flavor = next((f for f, d in TORCHTITAN_MOE_FLAVORS[family].items() if d == dims), None)
    out_model = {"name": family} | ({"flavor": flavor} if flavor else {})
    notes = [] if flavor else [f"torchtitan's {family} decoder builds this architecture but has no flavor of "
                               f"{dims[0]} layers, hidden {dims[1]}, {dims[2]} experts: add one in "
                               f"torchtitan/models/{family}/__init__.py"]
    conflicts = expert_conflicts("torchtitan", tp=par.tp, ep=ep, etp=etp, cp=par.cp, dp=par.dp, zero=par.zero)
    if conflicts:  # the rules the torchtitan search runs with (specs/frameworks.py)
        return out_model, {}, notes + [f"this plan's experts (etp={etp} with tp={par.tp}, ep={ep}) are not expressible "
                                       f"in torchtitan: " + "; ".join(msg for _, msg in conflicts)]
    if getattr(job, "moe_token_dispatcher", "alltoall") == "flex" and ep > 1:
        notes.append(f"the flex dispatcher is torchtitan's moe_comm_backend (deepep or hybridep), an argument of "
                     f"{family}'s model_registry, not a job-config field")
    if model.mtp_num_layers and family == "deepseek_v3":
        notes.append(f"the plan prices {model.mtp_num_layers} multi-token-prediction layer(s): torchtitan builds them "
                     f"only when its model registry is asked, `model_registry({flavor or '...'!r}, "
                     f"num_mtp_layers={model.mtp_num_layers})` (models/deepseek_v3/__init__.py), not a job-config field")
    if getattr(job, "moe_a2a_overlap", False):
        notes.append("torchtitan has no job-config switch for Megatron's --overlap-moe-expert-parallel-comm "
                     "(its EP/compute overlap comes with the DualPipeV schedule): the plan's all-to-all overlap is "
                     "not expressed here")
    return out_model, {"expert_parallel_degree": ep}, notes
