"""Megatron-LM's fine-grained activation offloading (`--fine-grained-activation-offloading --offload-modules
...`): the modules a job may name, and the rules Megatron enforces on them as one-line errors naming the fix
(priced by formulation/fine_offload.py).

Source, Megatron-LM d98e8a6: megatron/core/transformer/transformer_config.py `offload_modules` (:1328-1342,
the choices), `__post_init__` (:2127-2194: not with cpu_offloading; attn_proj only with core_attn; fused_group_mlp
only with use_transformer_engine_op_fuser and not with expert_fc1 / moe_act; no MoE module while the whole MoE
layer is recomputed) and its CUDA-graph block (:2929-2975: with cuda_graph_impl local only the MoE modules;
full_iteration needs --fine-grained-offloading-max-inflight-offloads, not priced here); megatron/training/
arguments.py:1935-1940 (Transformer Engine only; NVTE_CPU_OFFLOAD_V1=1 with TE >= 2.10); docs/user-guide/features/
fine_grained_activation_offloading.md ("attn_norm and mlp_norm cannot be offloaded" with CUDA graphs: they cross
the graphs' boundaries; a norm fused into the next linear, an IdentityOp, is skipped); megatron/core/transformer/
moe/experts.py:382-440 (`_is_fused_impl_supported`: the op fuser's grouped MLP runs without tensor parallelism
over the experts, so fused_group_mlp needs etp 1, `specs.job.SETTING_RULES`, and a SwiGLU, quick-GeGLU or weighted
squared-ReLU activation). Megatron's gdp_qkv (a
GatedDeltaProduct mixer) is not a layer the planner models.
"""

from __future__ import annotations

from typing import Literal

# Megatron's default min_offloaded_tensor_size, in elements (transformer_config.py:1343 at d98e8a6)
MIN_OFFLOADED_ELEMENTS = 1024 * 1024

OffloadModule = Literal["attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
                        "fused_group_mlp"]
MOE_OFFLOAD_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})
NORM_OFFLOAD_MODULES = frozenset({"attn_norm", "mlp_norm"})
FUSED_MLP_ACTIVATIONS = ("swiglu", "geglu", "quick_geglu", "squared_relu")  # the op fuser's grouped MLP (module docstring)


def _structure_problem(job, mods: set) -> str | None:
    """Modules the model has nothing behind, and Megatron's pairings of modules."""
    model, inside = job.model, mods & MOE_OFFLOAD_MODULES
    if inside and not model.is_moe:
        return (f"offload_modules {', '.join(sorted(inside))} offload the experts' activations: they need a "
                f"mixture-of-experts model ({model.name} is not); drop them")
    if "attn_norm" in mods and not model.multi_latent_attention:
        return ("offload_modules attn_norm: the attention norm of this model is fused into the QKV linear (an "
                "IdentityOp in Megatron's Transformer Engine spec, which skips it); offload qkv_linear or drop it")
    if "mlp_norm" in mods and not model.is_moe:
        return ("offload_modules mlp_norm: the pre-MLP norm of a dense layer is fused into fc1 (an IdentityOp in "
                "Megatron's Transformer Engine spec, which skips it); drop it")
    if "attn_proj" in mods and "core_attn" not in mods:
        return ("offload_modules attn_proj needs core_attn too (Megatron: 'the input of attn_proj is the output of "
                "core_attn, which is needed in core_attn.backward()'); add core_attn")
    if "fused_group_mlp" in mods and mods & {"expert_fc1", "moe_act"}:
        return ("offload_modules fused_group_mlp offloads the whole fused grouped MLP and cannot be combined with "
                "expert_fc1 or moe_act (Megatron); keep one of them")
    if "fused_group_mlp" in mods and model.activation not in FUSED_MLP_ACTIVATIONS:
        return (f"offload_modules fused_group_mlp needs Transformer Engine's fused grouped MLP, which runs SwiGLU, "
                f"quick GeGLU or weighted squared ReLU (Megatron experts.py `_is_fused_impl_supported`), not "
                f"{model.name}'s {model.activation}; offload expert_fc1 / moe_act instead")
    if inside and job.recompute_modules and "moe" in job.recompute_modules:
        return (f"offload_modules {', '.join(sorted(inside))} with recompute module moe: Megatron 'Cannot offload "
                f"... while recomputing the entire MoE layer'; drop one of them")
    return None


def _stack_problem(job, mods: set) -> str | None:
    """The framework, the other offloading and the CUDA graphs Megatron allows beside it."""
    impl = job.cuda_graph_impl
    if job.framework != "megatron":
        return (f"offload_modules is Megatron-LM's fine-grained activation offloading (--offload-modules); framework "
                f"{job.framework} has none: use framework megatron or drop it")
    if job.cpu_offloading_num_layers:
        return ("offload_modules with cpu_offloading_num_layers: Megatron: 'fine_grained_activation_offloading cannot "
                "be enabled with cpu_offloading'; keep one of them")
    if impl == "full_iteration":
        return ("offload_modules with cuda_graph_impl full_iteration needs Megatron's "
                "--fine-grained-offloading-max-inflight-offloads, whose joins are not priced; use cuda_graph_impl "
                "transformer_engine or none")
    if impl == "local" and mods - MOE_OFFLOAD_MODULES:
        return (f"offload_modules with cuda_graph_impl local: Megatron supports only expert_fc1, moe_act and "
                f"fused_group_mlp there (not {', '.join(sorted(mods - MOE_OFFLOAD_MODULES))}); use cuda_graph_impl "
                f"transformer_engine or those modules")
    if impl != "none" and mods & NORM_OFFLOAD_MODULES:
        return (f"offload_modules {', '.join(sorted(mods & NORM_OFFLOAD_MODULES))} with CUDA graphs: the norms cross "
                f"the graphs' boundaries and cannot be offloaded (Megatron's offloading guide); drop them or set "
                f"cuda_graph_impl none")
    return host_link_problem(job, "offload_modules")


def host_link_problem(job, setting: str) -> str | None:
    """Why an offloading `setting` cannot be priced on the job's GPUs: one states no host link (the copies' rate)."""
    for pool in job.cluster.pool_specs():
        if pool.gpu.host_link_gbyte_per_s is None:
            return (f"{setting} needs the GPU-to-host bandwidth: GPU {pool.gpu.name} states no host_link_gbyte_per_s; "
                    f"add it to the GPU file (GB/s per direction per GPU)")
    return None


def fine_offload_problem(job) -> str | None:
    """Why `job`'s offload_modules cannot run (one line naming the fix), or None (module docstring); `job` a
    `specs.job.JobSpec` (which imports this module: the rules read its fields)."""
    mods = set(job.offload_modules)
    if not mods:
        return None if job.min_offloaded_tensor_size == MIN_OFFLOADED_ELEMENTS else (
            "min_offloaded_tensor_size applies to fine-grained offloading: set offload_modules or drop it")
    return _stack_problem(job, mods) or _structure_problem(job, mods)
