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
- precision fp8 / fp8-tensorwise -> the float8 linear converter, tensorwise scaling with float8
  all-gather under FSDP; fp8-blockwise and mxfp8 are said in a note, not configured.
- AMD Instinct: torchtitan on ROCm takes the same sections; nothing CUDA-specific is emitted.
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
    if job.precision in ("fp8-blockwise", "mxfp8"):
        notes.append(f"the planned {job.precision} recipe is not expressed here: torchtitan's float8 converter scales "
                     f"per tensor or per row; launch with Megatron-LM's flags, or configure torchtitan's MX converter")
    if job.precision in ("fp8", "fp8-tensorwise"):
        if job.precision == "fp8":
            notes.append("torchtitan's float8 tensorwise recipe scales per tensor from the current amax (current "
                         "scaling), not from an amax history (delayed): same GEMMs, one more pass per cast")
        sections["model"] = {"converters": ["quantize.linear.float8"]}
        fsdp = par.zero >= 1
        sections["quantize.linear.float8"] = {"recipe_name": "tensorwise", "enable_fsdp_float8_all_gather": fsdp,
                                              "precompute_float8_dynamic_scale_for_fsdp": fsdp,
                                              "filter_fqns": ["output"]}
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
