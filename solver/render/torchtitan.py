"""torchtitan job-config sections that launch a plan (pure: returns strings).

Section and field names follow torchtitan's `torchtitan/config/job_config.py` as of its last
TOML-era revision (pytorch/torchtitan @ 9810191bb^, 2026-02): `[training]` local_batch_size,
global_batch_size, seq_len; `[parallelism]` data_parallel_replicate_degree,
data_parallel_shard_degree, fsdp_reshard_after_forward, tensor_parallel_degree,
context_parallel_degree, pipeline_parallel_degree, pipeline_parallel_schedule,
pipeline_parallel_microbatch_size, module_fqns_per_model_part; `[activation_checkpoint]` mode,
selective_ac_option; `[model] converters = ["quantize.linear.float8"]` with
`[quantize.linear.float8]` (components/quantization/float8.py registers that converter name).
Newer torchtitan builds the same `ParallelismConfig` fields from a Python configuration function
(torchtitan/config/configs.py) and still accepts them as `--parallelism.<field>` flags.

How the plan maps (torchtitan's parallelisms are FSDP2-based, not Megatron's):
- dp: zero=0 -> DDP (`data_parallel_replicate_degree = dp`); zero>=1 -> FSDP over dp
  (`data_parallel_shard_degree = dp`); zero=3 reshards parameters after forward ("always"),
  zero 1/2 keep them ("never", ZeRO-2-like; torchtitan has no optimizer-only sharding).
- tp with sequence parallelism (torchtitan always shards the sequence between TP regions).
- pp: `1F1B`, or `Interleaved1F1B` with vp > 1; the planned split as `module_fqns_per_model_part`
  (torchtitan's decoder FQNs `tok_embeddings`, `layers.<i>`, `norm`, `output`), one part per
  stage, stage k on rank k mod pp as looped schedules place them.
- recompute none/selective/full -> activation_checkpoint mode none / selective ("op") / full.
- precision fp8 -> the float8 linear converter, tensorwise scaling with float8 all-gather under FSDP.
"""

from __future__ import annotations

from ..plan import Plan
from ..specs import JobSpec
from .megatron import _chunks

SOURCE = "pytorch/torchtitan torchtitan/config/job_config.py (9810191bb^)"


def module_fqns_per_model_part(layers: list[int], vp: int, num_layers: int) -> list[list[str]]:
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
            part += ["norm", "output"]
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


def torchtitan_config(job: JobSpec, plan: Plan) -> tuple[dict[str, dict], list[str]]:
    """({section: {field: value}}, notes) for `plan` of `job`."""
    par, model = plan.parallel, job.model
    notes: list[str] = []
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
                               list(plan.layers_per_stage), par.vp, model.num_layers))
    else:
        training["local_batch_size"] = par.micro_batch_size  # gradient accumulation makes up the rest
        if par.num_microbatches > 1:
            notes.append(f"global_batch_size / (local_batch_size x dp) = {par.num_microbatches} gradient-accumulation "
                         f"steps")
    if par.tp > 1 and not par.sequence_parallel:
        notes.append("torchtitan always shards the sequence between TP regions (sequence parallelism on)")
    ac = {"none": {"mode": "none"}, "selective": {"mode": "selective", "selective_ac_option": "op"},
          "full": {"mode": "full"}}[par.recompute]
    sections: dict[str, dict] = {"training": training, "parallelism": parallelism, "activation_checkpoint": ac}
    if job.precision == "fp8":
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


def render_torchtitan(job: JobSpec, plan: Plan) -> str:
    """The TOML sections (with the equivalent --section.field flags as a comment)."""
    sections, notes = torchtitan_config(job, plan)
    out = [f"# torchtitan job config for {job.model.name} on {job.cluster.name} ({SOURCE})"]
    out += [f"# {n}" for n in notes]
    flags = []
    for name, fields in sections.items():
        out += ["", f"[{name}]"] + [f"{k} = {_toml(v)}" for k, v in fields.items()]
        flags += [f"--{name}.{k} {_toml(v)}" for k, v in fields.items() if not isinstance(v, list)]
    out += ["", "# as flags: " + " ".join(flags)]
    return "\n".join(out) + "\n"


# ---- mixture of experts ------------------------------------------------------------------------
# pytorch/torchtitan at b5bcd76 (2026-08-21): the MoE decoders are torchtitan/models/qwen3 (flavors
# 30B-A3B, 235B-A22B), deepseek_v3 (MLA + MoE: 16B = DeepSeek-V2-Lite's dimensions, 236B, 671B) and
# gpt_oss (20b, 120b); Mixtral, Llama 4 and Qwen2-MoE have no torchtitan model. The one expert knob
# is `ParallelismConfig.expert_parallel_degree` (torchtitan/config/configs.py), and
# ParallelDims._validate (torchtitan/distributed/parallel_dims.py) requires it to divide
# dp_shard * cp * tp: "EP borrows ranks from FSDP and TP". Routed experts are sharded on EP alone
# when EP > 1 and TP-sharded like the dense MLP when EP = 1 (torchtitan/models/common/MOE_SHARDING.md):
# expert tensor parallelism is 1 with EP, the TP degree without it. (The TOML-era job_config.py at
# 9810191bb^ had expert_tensor_parallel_degree with the same two forms, etp 1 its default.)
TORCHTITAN_MOE_SOURCE = "pytorch/torchtitan @ b5bcd76: models/{qwen3,deepseek_v3,gpt_oss}, distributed/parallel_dims.py"
# family -> {flavor: (layers, hidden size, routed experts)} from each family's __init__.py
TORCHTITAN_MOE_FLAVORS = {
    "qwen3": {"30B-A3B": (48, 2048, 128), "235B-A22B": (94, 4096, 128)},
    "deepseek_v3": {"16B": (27, 2048, 64), "236B": (60, 5120, 160), "671B": (61, 7168, 256)},
    "gpt_oss": {"20b": (24, 2880, 32), "120b": (36, 2880, 128)},
}


def torchtitan_moe_family(model) -> str | None:
    """Which torchtitan MoE decoder builds `model`'s architecture: deepseek_v3 (multi-latent
    attention, shared experts, dense first layers), qwen3 (GQA with QK norm, every layer routed, no
    shared expert), gpt_oss (linear biases, no shared expert); None when torchtitan has none."""
    shared = model.moe_shared_expert_intermediate_size is not None
    if model.multi_latent_attention:
        return "deepseek_v3"
    if shared or model.moe_router_score_function != "softmax" or model.num_dense_layers:
        return None
    if model.qk_norm and not model.add_bias_linear:
        return "qwen3"
    if model.add_bias_linear and not model.qk_norm:
        return "gpt_oss"
    return None


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
    dp_shard = par.dp if par.zero >= 1 else 1
    if ep > 1 and etp != 1:
        return out_model, {}, notes + [f"torchtitan does not support expert tensor parallelism with EP (etp={etp}, "
                                       f"ep={ep}): its routed experts are sharded on EP alone"]
    if ep == 1 and etp != par.tp:
        return out_model, {}, notes + [f"torchtitan shards experts with the dense TP degree when EP is 1; this plan's "
                                       f"etp={etp} with tp={par.tp} is not expressible there"]
    if (dp_shard * par.cp * par.tp) % ep:
        return out_model, {}, notes + [f"torchtitan needs expert_parallel_degree ({ep}) to divide dp_shard x cp x tp "
                                       f"({dp_shard} x {par.cp} x {par.tp}): this plan's EP is not expressible there"]
    if getattr(job, "moe_token_dispatcher", "alltoall") == "flex" and ep > 1:
        notes.append(f"the flex dispatcher is torchtitan's moe_comm_backend (deepep or hybridep), an argument of "
                     f"{family}'s model_registry, not a job-config field")
    if getattr(job, "moe_a2a_overlap", False):
        notes.append("torchtitan has no job-config switch for Megatron's --overlap-moe-expert-parallel-comm "
                     "(its EP/compute overlap comes with the DualPipeV schedule): the plan's all-to-all overlap is "
                     "not expressed here")
    return out_model, {"expert_parallel_degree": ep}, notes
