"""Expert parallelism of a mixture-of-experts model: the rules on (ep, etp), written once for the
enumeration (`enumeration.enumerate_shapes`) and the check of one configuration
(`rules.config_violations`).

Megatron-Core's MoE parallel folding (Liu et al. 2025, arXiv:2504.14960; Megatron-LM
megatron/core/transformer/moe/README.md "MoE Parallel Folding"): attention runs on
tp x cp x dp x pp, the experts on etp x ep x edp x pp over the *same* GPUs of a pipeline stage,
so etp * ep must divide the stage's tp * cp * dp GPUs and the expert-data-parallel degree is
edp = tp * cp * dp / (etp * ep). Rules, as Megatron-LM d98e8a6 enforces them:

- ep > 1 only for a MoE model, and num_experts % ep == 0 (megatron/training/arguments.py,
  "Number of experts should be a multiple of expert model parallel_size");
- world % (etp * ep * pp) == 0 (megatron/core/parallel_state.py `initialize_model_parallel`,
  the expert rank generator "tp-ep-dp-pp"): with world = tp*cp*dp*pp, etp*ep divides tp*cp*dp;
- etp divides moe_ffn_hidden_size (the experts' column-parallel fc1 / row-parallel fc2 split
  their FFN width over etp: `divide()` in megatron/core/tensor_parallel/layers.py);
- linear biases with MoE need etp == 1 (transformer_config.py: "Bias in Moe is only supported
  when ETP==1");
- training a MoE model with tp > 1 needs sequence parallelism (moe_layer.py `MoELayer.forward`
  raises "MoE and tensor parallelism are enabled without also enabling sequence parallelism");
- the token dispatcher is `alltoall` for ep > 1 (what the formulation prices; `allgather`, the
  default, for ep = 1), which every (ep, etp) above accepts;
- with the job's `moe_a2a_overlap` (`--overlap-moe-expert-parallel-comm`), transformer_config.py
  asserts ep > 1, no full recomputation and a virtual pipeline size when pp > 1 (vp > 1 here);
  at most one MTP module (checked on the job).

Sharding: the distributed optimizer (ZeRO-1) shards the dense parameters' state over dp x cp and
the experts' over edp; Megatron-FSDP (ZeRO-2/3) shards them over the same two groups
(megatron/core/distributed/fsdp/mcore_fsdp_adapter.py: expert parameters over expt_dp), which
Megatron accepts with EP (arguments.py refuses only torch FSDP2 with EP, and Megatron-FSDP with
--moe-single-grouped-weight, which no plan sets).

Which etp the search tries (like the vp it tries, `enumeration.interleavings`): 1 (the Megatron
MoE README's recommendation for fine-grained experts) and tp (Megatron's default,
`args.expert_tensor_parallel_size = args.tensor_model_parallel_size`), or every legal value a
constraint names.
"""

from __future__ import annotations

import math

from ..specs import JobSpec, ModelSpec
from ..specs.frameworks import expert_conflicts


def tp_split_widths(model: ModelSpec) -> tuple[int, ...]:
    """The widths tp must divide: the dense layers' MLP (when the model has dense layers: a hybrid
    model's MLP layers, -), the shared experts (Megatron splits both over the attention's tp), and a
    hybrid model's Mamba heads and groups (megatron/core/ssm/mamba_mixer.py at d98e8a6: "nheads must
    be evenly divisble by tp_size", "ngroups must be evenly divisible by tp_size") and Gated DeltaNet key
    and value heads (transformer_config.py: "linear_num_key_heads must be a multiple of (tp * cp)", the
    same for the value heads; with cp, `hybrid_cp_violations`)."""
    has_mlp = model.hybrid_layer_counts()["mlp"] if model.is_hybrid else model.num_dense_layers
    dense = (model.ffn_hidden_size,) if has_mlp else ()
    shared = (model.moe_shared_expert_intermediate_size,) if model.moe_shared_expert_intermediate_size else ()
    mamba = model.mamba_dims[::2] if model.is_hybrid and model.mamba_num_heads is not None else ()
    keys, values = model.gdn_num_key_heads, model.gdn_num_value_heads
    gdn = (keys, values) if keys is not None and values is not None else ()
    return dense + shared + mamba + gdn


def cp_a2a_violations(model: ModelSpec, *, tp: int, cp: int) -> list[tuple[str, str]]:
    """Context parallelism of a softmax with sinks runs by all-to-all (`ModelSpec.cp_all_to_all`), which
    hands each CP rank whole heads: Transformer Engine asserts "cp_comm_type='a2a' requires num_heads %
    cp_size == 0 for Q, K, V" on a TP rank's heads (context_parallel.py AttnFuncWithCPAndQKVOA2A at d0067d0)."""
    if cp == 1 or not model.cp_all_to_all:
        return []
    q, kv = model.num_attention_heads // tp, model.kv_heads // tp
    if q % cp or kv % cp:
        return [("cp", f"{model.name}'s attention sinks need context parallelism by all-to-all, which splits the "
                       f"{q} query and {kv} KV heads of a TP rank over cp = {cp}; use a cp that divides {math.gcd(q, kv)}")]
    return []


def hybrid_cp_violations(model: ModelSpec, *, tp: int, cp: int) -> list[tuple[str, str]]:
    """Context parallelism of a hybrid model: not with Mamba layers (Megatron's Mamba CP,
    megatron/core/ssm/mamba_context_parallel.py, is not priced); Gated DeltaNet layers hand each CP rank whole
    heads by an all-to-all (gated_delta_net/common.py `a2a_cp_to_hp`, priced in formulation/gdn.py), so
    transformer_config.py asserts their key and value heads a multiple of tp x cp."""
    if cp == 1 or not model.is_hybrid:
        return []
    if "M" in (model.hybrid_layer_pattern or "") + (model.mtp_hybrid_layer_pattern or ""):
        return [("cp", "context parallelism of a hybrid model's Mamba layers is not modelled; use cp = 1")]
    keys, values = model.gdn_num_key_heads or 0, model.gdn_num_value_heads or 0
    if keys % (tp * cp) or values % (tp * cp):
        return [("cp", f"the Gated DeltaNet's {keys} key and {values} value heads must be a multiple of tp x cp = "
                       f"{tp} x {cp} (Megatron's head all-to-all); use a cp that divides {math.gcd(keys, values) // tp}")]
    return []


def hybrid_violations(model: ModelSpec, *, tp: int, cp: int, account: bool) -> list[tuple[str, str]]:
    """What a hybrid model's configuration may not use here: context parallelism where
    `hybrid_cp_violations` says so, and a split counting the embedding or the loss (Megatron-LM arguments.py:
    not with --hybrid-layer-pattern). ZeRO-2/3 (Megatron-FSDP) shards each sublayer as a Transformer layer
    (formulation/hybrid.py)."""
    if not model.is_hybrid:
        return []
    errs = hybrid_cp_violations(model, tp=tp, cp=cp)
    if account:
        errs.append(("account_for_embedding", "Megatron-LM does not count the embedding or loss as layers with "
                                              "--hybrid-layer-pattern; leave both out of the split"))
    return errs


def ep_violations(model: ModelSpec, *, tp: int, cp: int, dp: int, ep: int, etp: int, sequence_parallel: bool,
                  pp: int = 1, vp: int = 1, recompute: str = "none",
                  a2a_overlap: bool = False) -> list[tuple[str, str]]:
    """Every rule of the module docstring a configuration breaks, as (field, 'what; the fix')."""
    errs: list[tuple[str, str]] = []
    if not model.is_moe:
        if ep != 1:
            errs.append(("ep", f"expert parallelism ({ep}) needs a mixture-of-experts model; use ep = 1"))
        if etp != 1:
            errs.append(("etp", f"expert tensor parallelism ({etp}) needs a mixture-of-experts model; use etp = 1"))
        return errs
    (E, _, f_e), stage = model.moe_dims, tp * cp * dp
    if E % ep:
        errs.append(("ep", f"{ep} does not divide num_experts {E} (Megatron: experts must be a multiple of ep)"))
    if stage % (ep * etp):
        errs.append(("ep", f"etp*ep = {etp}*{ep} does not divide the {stage} GPUs of a pipeline stage "
                           f"(tp*cp*dp = {tp}*{cp}*{dp}); choose ep and etp whose product divides {stage}"))
    if f_e % etp:
        errs.append(("etp", f"{etp} does not divide moe_ffn_hidden_size {model.moe_ffn_hidden_size}"))
    if etp > 1 and model.add_bias_linear:
        errs.append(("etp", "linear biases in MoE layers need etp = 1 (Megatron: bias in MoE only with ETP == 1)"))
    if tp > 1 and not sequence_parallel:
        errs.append(("sequence_parallel", "a MoE model with tp > 1 needs sequence parallelism (Megatron MoELayer); "
                                          "turn it on"))
    if a2a_overlap:
        errs += a2a_overlap_violations(ep=ep, pp=pp, vp=vp, recompute=recompute)
    return errs


def hsdp_violations(job: JobSpec, *, tp: int, cp: int, dp: int, ep: int, etp: int) -> list[tuple[str, str]]:
    """What Megatron's parallel_state.py asserts of HSDP's r instances (--num-distributed-optimizer-instances,
    the job's distributed_optimizer_instances): r divides dp x cp ("Data parallel size should be divisible by
    partial DistOpt shard factor") and a MoE model's expert data parallelism ("Expert data parallel size should
    be divisible by partial DistOpt shard factor")."""
    r, edp = job.distributed_optimizer_instances, tp * cp * dp // (ep * etp)
    if (dp * cp) % r:
        return [("distributed_optimizer_instances", f"{r} instances do not divide dp*cp = {dp * cp} (Megatron: 'Data "
                                                    f"parallel size should be divisible by partial DistOpt shard "
                                                    f"factor'); choose a divisor of it")]
    if job.model.is_moe and edp % r:
        return [("distributed_optimizer_instances", f"{r} instances do not divide the expert data parallelism "
                                                    f"{edp} = tp*cp*dp/(ep*etp) (Megatron: 'Expert data parallel size "
                                                    f"should be divisible by partial DistOpt shard factor'); choose a "
                                                    f"divisor of it or a smaller ep")]
    return []


def dsv4_violations(model: ModelSpec, *, tp: int, cp: int) -> list[tuple[str, str]]:
    """What Megatron-LM dev (d48bd6be0a) asserts of DeepSeek-V4's attention: tensor parallelism 1 ("dsv4_hybrid ...
    tensor_model_parallel_size == 1", transformer_config.py ~1760-1762); context parallelism only on packed (THD)
    sequences with a contiguous partition (~1587-1616), which solveplan does not plan."""
    if not model.is_dsv4:
        return []
    errs = []
    if tp > 1:
        errs.append(("tp", "DeepSeek-V4's attention runs with tp = 1 only (Megatron-LM dev); use tp = 1"))
    if cp > 1:
        errs.append(("cp", "DeepSeek-V4's context parallelism needs packed (THD) sequences, not modelled; use cp = 1"))
    return errs


def a2a_overlap_violations(*, ep: int, pp: int, vp: int, recompute: str) -> list[tuple[str, str]]:
    """What Megatron's --overlap-moe-expert-parallel-comm asserts of a configuration
    (transformer_config.py `__post_init__`)."""
    errs = []
    if ep == 1:
        errs.append(("ep", "the all-to-all overlap (moe_a2a_overlap) needs ep > 1"))
    if recompute == "full":
        errs.append(("recompute", "the all-to-all overlap (moe_a2a_overlap) refuses full recomputation"))
    if pp > 1 and vp == 1:
        errs.append(("vp", "the all-to-all overlap (moe_a2a_overlap) needs interleaving (vp > 1) with pp > 1"))
    return errs


def expert_degrees(job: JobSpec, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
    """The (ep, etp) the search tries for the degrees (tp, cp, dp): every legal pair allowed by
    the constraints, etp among 1 and tp unless a constraint names etp values (module docstring).
    A dense model: [(1, 1)] when the constraints allow it."""
    model, cons = job.model, job.constraints
    if not model.is_moe:
        return [(1, 1)] if cons.allows("ep", 1) and cons.allows("etp", 1) else []
    stage = tp * cp * dp
    etps = cons.etp if cons.etp is not None else sorted({1, tp})
    g = math.gcd(stage, model.moe_dims[0])
    out = []
    for ep in range(1 + job.moe_a2a_overlap, g + 1):
        if g % ep or not cons.allows("ep", ep):
            continue
        for etp in etps:
            if expert_conflicts(job.framework, tp=tp, ep=ep, etp=etp):  # torchtitan: etp 1 with EP, tp without
                continue
            if (cons.allows("etp", etp) and not ep_violations(model, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp,
                                                              sequence_parallel=True)
                    and not hsdp_violations(job, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp)):
                out.append((ep, etp))
    return out


def default_etp(model: ModelSpec, tp: int) -> int:
    """etp when a configuration leaves it out: Megatron's default (= tp) where that is legal for
    the model (it divides the expert FFN, no linear biases), else 1."""
    if not model.is_moe or model.add_bias_linear or model.moe_dims[2] % tp:
        return 1
    return tp
