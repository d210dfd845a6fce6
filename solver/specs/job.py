"""Training job: model, cluster, batch, sequence, and constraints on every planning knob."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, TypeAdapter, ValidationError, field_validator, model_validator

from .base import Spec
from .cluster import ClusterSpec
from .fp8_attention import fp8_attention_problem
from .frameworks import PRECISIONS_RUN, narrow_constraints
from .model import ModelSpec
from .module_precision import module_precision_problem
from .offloading import MIN_OFFLOADED_ELEMENTS, OffloadModule, fine_offload_problem, host_link_problem
from .peft import LORA_RANK, LORA_TARGETS, LoraTarget, Peft, peft_problem

# Megatron-LM transformer_config.py `recompute_modules` choices for transformer layers (formulation/recompute.py)
RecomputeModule = Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"]

# Megatron-LM --cuda-graph-impl and --cuda-graph-modules (transformer_config.py at d98e8a6, docs/user-guide/
# features/cuda_graph.md): per-layer graphs (`local`, `transformer_engine`) of the named modules, or the
# whole training iteration (`full_iteration`, no modules). The formulation prices the graphed parts of a
# MoE layer without their host time (formulation/host.py).
CudaGraphImpl = Literal["none", "local", "transformer_engine", "full_iteration"]
CudaGraphModule = Literal["attn", "mlp", "moe_router", "moe_preprocess", "mamba"]
# Adam's moment dtypes (Megatron --exp-avg-dtype / --exp-avg-sq-dtype; formulation/memory.MOMENT_BYTES) and how a
# stack gathers ZeRO-3 weights (formulation/layer_terms: sharded_layer_s, per_parameter_zero3_s)
MomentDtype = Literal["fp32", "bf16", "fp16", "fp8"]
Zero3Gathers = Literal["prefetched", "per_parameter"]

RECOMPUTE_MODES = ("none", "selective", "full")
# Training precisions (`--precision`). The FP8 recipes are Transformer Engine's, selected in
# Megatron-LM by `--fp8-format` and `--fp8-recipe` (megatron/core/transformer/transformer_config.py,
# fields fp8 / fp8_recipe): fp8 = per-tensor delayed scaling (TE DelayedScaling: `--fp8-recipe
# delayed`, Megatron's default), fp8-tensorwise = per-tensor current scaling (TE
# Float8CurrentScaling: `tensorwise`; the same GEMMs, one more pass over each input for its amax;
# NVIDIA's "fp8-cs" recipes), fp8-blockwise = 1x128 activation and
# 128x128 weight blocks (DeepSeek-V3's recipe; TE Float8BlockScaling: `blockwise`), mxfp8 = OCP
# microscaling, 32-element blocks with E8M0 scales in the tensor cores (TE MXFP8BlockScaling:
# `mxfp8`, Blackwell only in Megatron-LM's words). nvfp4 = Transformer Engine's NVFP4BlockScaling
# (transformer_engine/common/recipe/__init__.py:489 at d0067d0: E2M1 values, an E4M3 scale per 16
# elements and an FP32 per-tensor scale; 16x16 weight blocks, random Hadamard transforms on the wgrad
# inputs, stochastic rounding of gradients), selected in Megatron-LM by `--fp4-format e2m1`
# (`--fp4-recipe nvfp4`, the default; transformer_config.py fp4 / fp4_recipe at d98e8a6), Blackwell
# only ("NVFP4BlockScaling recipe for Blackwell+ architecture").
Precision = Literal["bf16", "fp16", "fp8", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4"]
PRECISIONS = ("bf16", "fp16", "fp8", "fp8-tensorwise", "fp8-blockwise", "mxfp8", "nvfp4")
FP8_RECIPES = ("fp8", "fp8-tensorwise", "fp8-blockwise", "mxfp8")
FP4_RECIPES = ("nvfp4",)
QUANTIZED_RECIPES = FP8_RECIPES + FP4_RECIPES  # Transformer Engine quantises the linear layers' GEMM inputs


def precision_problem(precision: str, gpu) -> str | None:
    """Why `gpu` cannot run `precision` (one line naming the fix), or None."""
    if precision in FP4_RECIPES and (gpu.peak_fp4_tflops is None or gpu.architecture != "blackwell"):
        return (f"precision {precision} needs NVIDIA FP4 tensor cores (Blackwell: GPUSpec.architecture blackwell and "
                f"peak_fp4_tflops); {gpu.name} ({gpu.architecture or 'architecture not stated'}) has none "
                f"(use {'mxfp8' if gpu.has_mx_formats else 'fp8' if gpu.peak_fp8_tflops else 'bf16'})")
    if precision in FP8_RECIPES and gpu.peak_fp8_tflops is None:
        return f"precision {precision} needs a GPU with FP8 tensor cores; {gpu.name} has none (use bf16)"
    if precision == "mxfp8" and not gpu.has_mx_formats:
        return (f"precision mxfp8 needs tensor cores with hardware block scaling (Blackwell, CDNA 4); {gpu.name} "
                f"({gpu.architecture or 'architecture not stated'}) has none (use fp8 or fp8-blockwise)")
    if precision == "fp8-blockwise" and gpu.architecture not in ("hopper", "blackwell"):
        return (f"precision fp8-blockwise is Transformer Engine's Float8BlockScaling recipe for NVIDIA Hopper and "
                f"Blackwell; {gpu.name} ({gpu.architecture or 'architecture not stated'}) cannot run it (use fp8)")
    return None
Recompute = Literal["none", "selective", "full"]


# A list of allowed values: at least one (an empty list would silently allow nothing).
NONEMPTY = Field(min_length=1)


class Constraints(Spec):
    """Fix or bound any planning knob. A list fixes the allowed values; *_max bounds."""

    tp: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = None
    pp: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = None
    dp: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = None
    cp: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = None
    vp: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = None
    micro_batch_size: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = None
    ep: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = Field(
        None, description="expert-parallel sizes (MoE models; Megatron --expert-model-parallel-size)")
    etp: Annotated[tuple[PositiveInt, ...], NONEMPTY] | None = Field(
        None, description="expert tensor-parallel sizes (MoE; Megatron --expert-tensor-parallel-size); "
                          "unset: the search tries 1 and tp")
    tp_max: PositiveInt | None = None
    pp_max: PositiveInt | None = None
    dp_max: PositiveInt | None = None
    cp_max: PositiveInt | None = None
    vp_max: PositiveInt | None = None
    micro_batch_size_max: PositiveInt | None = None
    ep_max: PositiveInt | None = None
    etp_max: PositiveInt | None = None
    recompute: Annotated[tuple[Recompute, ...], NONEMPTY] | None = None
    sequence_parallel: Annotated[tuple[bool, ...], NONEMPTY] | None = None
    zero: Annotated[tuple[Literal[0, 1, 2, 3], ...], NONEMPTY] | None = None
    account_for_embedding: Annotated[tuple[bool, ...], NONEMPTY] | None = Field(
        None, description="count the embedding as a layer of the pipeline split (Megatron "
                          "--account-for-embedding-in-pipeline-split; space/pipeline_split.py); unset: the search "
                          "uses it only where interleaving needs it (a stated vp with pp x vp above the layers, or "
                          "a pipeline depth whose layers make no equal chunks)")
    account_for_loss: Annotated[tuple[bool, ...], NONEMPTY] | None = Field(
        None, description="count the loss as a layer of the pipeline split (Megatron "
                          "--account-for-loss-in-pipeline-split); unset: as account_for_embedding")
    uneven_split: bool = Field(True, description="allow uneven layer splits over pipeline stages")

    def allows(self, knob: str, value) -> bool:
        fixed = getattr(self, knob, None)
        if fixed is not None and value not in fixed:
            return False
        bound = getattr(self, f"{knob}_max", None)
        return bound is None or value <= bound


class JobSpec(Spec):
    model: ModelSpec
    cluster: ClusterSpec
    global_batch_size: PositiveInt = Field(description="sequences per optimizer step")
    seq_length: PositiveInt
    precision: Precision = Field(
        "bf16", description="bf16 (fp32 main gradients, 18 B/param), fp16 (Megatron's fp16 optimizer: fp16 "
                            "gradients, 16 B/param), or an FP8 recipe of Transformer Engine (FP8 GEMMs, bf16 "
                            "elsewhere): fp8 (per-tensor delayed scaling), fp8-tensorwise (per-tensor current scaling), fp8-blockwise (1x128/128x128 blocks), "
                            "mxfp8 (32-element blocks, Blackwell), nvfp4 (Transformer Engine NVFP4BlockScaling: FP4 "
                            "GEMMs with 16-element blocks, Blackwell)")
    flash_attention: bool = True
    attention_kernel: Literal["cudnn", "flash2", "flash1"] = Field(
        "cudnn", description="flash-attention implementation: cudnn (Megatron --attention-backend fused; overlaps "
                             "the softmax with the matmuls on Hopper), flash2 (FlashAttention-2) or flash1 (the "
                             "FlashAttention-1 generation: the CUDA v1 kernel and its Triton port, llm-foundry's "
                             "attn_impl: triton of 2023)")
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(
        "fp32", description="dtype of the data-parallel gradient reduction (Megatron --grad-reduce-in-bf16; "
                            "FSDP MixedPrecision.reduce_dtype); fp16 training reduces fp16 gradients")
    overlap_grad_reduce: bool = Field(True, description="DP gradient reduction overlaps the last backward (Megatron --overlap-grad-reduce)")
    tp_comm_overlap: bool = Field(False, description="TP collectives pipelined with GEMMs (Megatron --tp-comm-overlap, Transformer Engine)")
    framework: Literal["megatron", "torchtitan", "transformers"] = Field(
        "megatron", description="the software stack that runs the plan (formulation/frameworks.py): megatron "
                                "(Megatron-LM/Core, fused kernels), torchtitan (FSDP2 + TP + PP + CP, eager) or "
                                "transformers (Hugging Face, fp32 weights under bf16 autocast, data parallel only)")
    moe_load_imbalance: float = Field(
        1.0, ge=1.0, le=64.0,
        description="MoE: tokens of the busiest expert rank over the balanced share (1.0: balanced routing, as "
                    "published benchmarks force it with --moe-router-force-load-balancing); scales the expert "
                    "GEMMs and the all-to-all of every MoE layer")
    moe_a2a_overlap: bool = Field(
        False, description="MoE: expert-parallel all-to-alls overlapped with the other micro-batch's compute "
                           "(Megatron --overlap-moe-expert-parallel-comm --delay-wgrad-compute); needs ep > 1, no full "
                           "recompute, interleaving with pp > 1, at most one MTP module")
    moe_token_dispatcher: Literal["alltoall", "flex"] = Field(
        "alltoall", description="MoE token dispatcher for ep > 1 (Megatron --moe-token-dispatcher-type): alltoall "
                                "(NCCL, every routed copy sent) or flex (DeepEP / HybridEP: each token once per node)")
    cuda_graph_impl: CudaGraphImpl = Field(
        "none", description="CUDA graphs (Megatron --cuda-graph-impl): none, per-layer graphs of cuda_graph_modules "
                            "(local or transformer_engine), or the whole iteration (full_iteration; a dropless MoE "
                            "needs the flex dispatcher's static per-rank budget for it)")
    cuda_graph_modules: tuple[CudaGraphModule, ...] = Field(
        (), description="modules of the per-layer graphs (Megatron --cuda-graph-modules): attn, mlp, moe_router, "
                        "moe_preprocess (with moe_router), mamba (a hybrid model's Mamba layers); a MoE layer's "
                        "dispatch and experts have dynamic shapes and stay outside per-layer graphs")
    fp8_dot_product_attention: bool = Field(
        False, description="attention in FP8: Transformer Engine's fused kernel at the FP8 tensor-core rate (Megatron-Core "
                           "TransformerConfig.fp8_dot_product_attention; specs/fp8_attention.py says which jobs run it)")
    fp8_param_gather: bool = Field(
        False, description="FP8 recipes: the weights are kept only in the recipe's FP8 form, cast from the fp32 "
                           "master weights, and the distributed optimizer gathers them in FP8 (Megatron "
                           "--fp8-param-gather; MXFP8 gathers BF16 into the gradient buffer, "
                           "--reuse-grad-buf-for-mxfp8-param-ag); under nvfp4 the NVFP4 weights, gathered in "
                           "NVFP4 (--fp4-param-gather)")
    bf16_layers_at_start: int = Field(
        0, ge=0, description="nvfp4 / FP8 current-scaling recipes: transformer layers at the start kept in BF16 "
                             "(Megatron --first-last-layers-bf16 --num-layers-at-start-in-bf16)")
    bf16_layers_at_end: int = Field(
        0, ge=0, description="the same at the end (--num-layers-at-end-in-bf16; Megatron-Bridge's "
                             "nemotron_3_super_bf16_with_nvfp4_mixed keeps 14)")
    module_precision: tuple[tuple[str, str], ...] = Field(
        (), description="per-module precision under a quantised recipe, Megatron's --te-precision-config-file as "
                        "ordered (glob over the module path, precision) rules, the first match wins (specs/"
                        "module_precision.py; Megatron-Bridge's Nemotron 3 Super NVFP4 recipes keep attention, "
                        "LatentMoE's projections and MTP in BF16, the Mamba out_proj in MXFP8)")
    cpu_offloading_num_layers: int = Field(
        0, ge=0, description="Megatron-LM layer-level CPU activation offloading (--cpu-offloading-num-layers N): the "
                             "saved activations of the first N transformer layers go to host memory during the "
                             "forward and come back for the backward (Transformer Engine cpu_offload.py; priced by "
                             "formulation/offload.py at the GPU's host_link_gbyte_per_s). Megatron needs N < the "
                             "model's layers, pp 1 and no recomputation (SETTING_RULES, cpu_offload_problem)")
    zero3_gathers: Zero3Gathers = Field(
        "prefetched", description="how the stack gathers ZeRO-3 weights: prefetched (Megatron-FSDP, PyTorch FSDP: one "
                                  "gather per layer behind the previous layer's compute) or per_parameter (DeepSpeed "
                                  "ZeRO-3 before v0.5.5: each weight tensor on its own after a device synchronisation, "
                                  "nothing overlapped; formulation/layer_terms.per_parameter_zero3_s)")
    min_offloaded_tensor_size: int = Field(
        MIN_OFFLOADED_ELEMENTS, ge=0, description="Megatron --min-offloaded-tensor-size: fine-grained offloading "
                                                  "skips every saved tensor of fewer elements (default 1M; Megatron-"
                                                  "Bridge's Nemotron 3 Ultra recipes raise it so that only fc1's "
                                                  "output leaves the fused grouped MLP)")
    distributed_optimizer_instances: PositiveInt = Field(
        1, description="Megatron-FSDP's hybrid sharding, HSDP (--num-distributed-optimizer-instances r with "
                       "--outer-dp-sharding-strategy optim): the DP x CP ranks form r instances of consecutive ranks "
                       "(megatron/core/parallel_state.py); weights and gradients are sharded inside an instance as "
                       "ZeRO-3, the optimizer state across all ranks (formulation/data_parallel.hsdp_step_s); r must "
                       "divide dp x cp and a MoE model's expert data parallelism; r > 1 needs zero 3 (SETTING_RULES)")
    offload_modules: tuple[OffloadModule, ...] = Field(
        (), description="Megatron-LM fine-grained activation offloading (--fine-grained-activation-offloading "
                        "--offload-modules): the modules whose saved inputs go to host memory after their forward "
                        "and come back before their backward (attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, "
                        "expert_fc1, moe_act, fused_group_mlp; empty: off); priced by formulation/fine_offload.py at "
                        "the GPU's host_link_gbyte_per_s, Megatron's rules in specs/offloading.py")
    precision_aware_optimizer: bool = Field(
        False, description="Megatron --use-precision-aware-optimizer: Transformer Engine's FusedAdam keeps the moments "
                           "in optimizer_moment_dtype and, under bf16 or delayed-scaling fp8, the master weight as its "
                           "16-bit remainder (formulation/memory.adam_state_bytes_per_param); needs the distributed "
                           "optimizer (zero 1)")
    optimizer_moment_dtype: MomentDtype = Field(
        "fp32", description="dtype of Adam's two moments (Megatron --exp-avg-dtype and --exp-avg-sq-dtype); other "
                            "than fp32 needs precision_aware_optimizer (DeepSeek-V3's recipes: bf16)")
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="the modules selective recomputation rebuilds (Megatron --recompute-modules: core_attn, "
                          "moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts; None: Megatron's default "
                          "core_attn); priced by formulation/recompute.py for plans with recompute selective")
    peft: Peft = Field(
        "none", description="parameter-efficient fine-tuning: none (every weight trained) or lora (Megatron-Bridge's "
                            "LoRA: the base weights frozen, low-rank adapters on lora_target_modules trained; "
                            "specs/peft.py, formulation/lora.py)")
    lora_rank: PositiveInt = Field(LORA_RANK, description="LoRA's rank (Megatron-Bridge LoRA `dim`, default 32)")
    lora_target_modules: tuple[LoraTarget, ...] = Field(
        LORA_TARGETS, description="the linears LoRA adapts (Megatron-Bridge `target_modules`; default all four)")
    constraints: Constraints = Constraints()
    prefer: Literal["fastest", "simple"] = Field(
        "fastest", description="fastest: the optimum; simple: among plans within tolerance_rel of the optimum, the "
                               "fewest departures from the textbook Megatron-LM plan (search/simple.py)")
    tolerance_rel: float | None = Field(
        None, ge=0, lt=1, description="with prefer simple: the relative tolerance (default: the half-width of the "
                                      "optimum's 80% interval, calibration/intervals.py)")

    @model_validator(mode="before")
    @classmethod
    def _narrow(cls, data):
        """The constraints narrowed to what the framework runs (specs/frameworks.py), however the
        job is built (catalog.load_job narrows first, naming the knob of a conflict)."""
        if not isinstance(data, dict) or data.get("framework", "megatron") == "megatron":
            return data
        return _constrained(data, lambda given: narrow_constraints(data["framework"], given, Constraints.model_fields))

    @field_validator("module_precision", mode="before")
    @classmethod
    def _rules(cls, value):
        """module_precision's rules as JSON and YAML give them (lists of [glob, precision]): tuples."""
        return tuple(tuple(rule) if isinstance(rule, list) else rule for rule in value) if isinstance(value, list) else value

    @model_validator(mode="before")
    @classmethod
    def _rule_knobs(cls, data):
        """The constraints narrowed by the Megatron rules the job's settings bring (`SETTING_RULES`)."""
        if not isinstance(data, dict) or not setting_rules(data):
            return data
        return _constrained(data, lambda given: rule_constraints(data, given))

    @model_validator(mode="after")
    def _check(self):
        for pool in self.cluster.pool_specs():
            problem = precision_problem(self.precision, pool.gpu)
            if problem:
                raise ValueError(problem)
        if self.precision not in PRECISIONS_RUN.get(self.framework, (self.precision,)):
            raise ValueError(f"framework {self.framework} trains {' or '.join(PRECISIONS_RUN[self.framework])} "
                             f"(torch.autocast), not {self.precision}: use framework megatron or torchtitan for FP8")
        if self.model.is_hybrid and self.framework != "megatron":
            raise ValueError(f"a hybrid model ({self.model.name}) is planned for framework megatron only "
                             f"(Megatron-Core's HybridModel): torchtitan has no Mamba-2 / Nemotron-H or Gated DeltaNet "
                             f"model (pytorch/torchtitan at b5bcd76) and transformers' NemotronH and Qwen3.5 modelling "
                             f"is not priced; use framework megatron")
        if self.model.attention_output_gate and self.framework != "megatron":
            raise ValueError(f"the gated attention of {self.model.name} (attention_output_gate) is priced as "
                             f"Megatron-Core runs it only; use framework megatron")
        if self.moe_a2a_overlap and not self.model.is_moe:
            raise ValueError("moe_a2a_overlap applies to mixture-of-experts models only; drop it")
        if self.recompute_modules and "moe_act" in self.recompute_modules and not self.model.is_moe:
            raise ValueError("recompute module moe_act needs a mixture-of-experts model (Megatron: only with "
                             "--moe-grouped-gemm); drop it")
        if self.recompute_modules and "mla_up_proj" in self.recompute_modules and not self.model.multi_latent_attention:
            raise ValueError("recompute module mla_up_proj needs multi-latent attention (Megatron: 'mla_up_proj in "
                             "recompute_modules is only supported with multi_latent_attention'); drop it")
        if self.moe_a2a_overlap and self.model.moe_n_hash_layers:  # Megatron-LM dev transformer_config.py ~2897-2899
            raise ValueError("moe_a2a_overlap is refused with hash-routed MoE layers (moe_n_hash_layers, DeepSeek-V4); "
                             "drop it")
        if self.moe_a2a_overlap and self.model.mtp_num_layers > 1:
            raise ValueError(f"moe_a2a_overlap supports at most one MTP module (Megatron); the model has "
                             f"{self.model.mtp_num_layers}: drop moe_a2a_overlap")
        for problem in (cpu_offload_problem(self), fine_offload_problem(self), optimizer_problem(self),
                        peft_problem(self), fp8_attention_problem(self), module_precision_problem(self),
                        *(f"module_precision: {problem}" for problem in (
                            precision_problem(p, pool.gpu) for _, p in self.module_precision
                            for pool in self.cluster.pool_specs()) if problem)):
            if problem:
                raise ValueError(problem)
        graph_problem = cuda_graph_problem(self)
        if graph_problem:
            raise ValueError(graph_problem)
        if self.distributed_optimizer_instances > 1 and (self.framework != "megatron"
                                                         or self.zero3_gathers == "per_parameter"):
            raise ValueError(f"distributed_optimizer_instances is Megatron-FSDP's HSDP (--num-distributed-optimizer-"
                             f"instances); framework {self.framework} with {self.zero3_gathers} ZeRO-3 gathers is "
                             f"priced without it: use framework megatron with prefetched gathers, or 1")
        if self.fp8_param_gather and (self.precision not in QUANTIZED_RECIPES or self.framework != "megatron"):
            raise ValueError("fp8_param_gather keeps FP8 (FP4) weights of an FP8 (NVFP4) recipe in Megatron "
                             "(--fp8-param-gather / --fp4-param-gather): it needs such a precision and framework "
                             "megatron; drop it")
        bf16_layers = self.bf16_layers_at_start + self.bf16_layers_at_end
        if bf16_layers and (self.precision not in QUANTIZED_RECIPES or self.precision == "fp8"
                            or bf16_layers > self.model.num_layers):
            raise ValueError(f"bf16_layers_at_start/end ({bf16_layers} layers) keep layers of an FP8/NVFP4 recipe in "
                             f"BF16: they need precision nvfp4 or an FP8 recipe other than delayed scaling (Megatron: "
                             f"'Delayed scaling does not support first / last layer in BF16') and at most "
                             f"{self.model.num_layers} layers; drop them")
        if self.precision == "fp8" and {"moe_act", "layernorm"} & set(self.recompute_modules or ()):
            raise ValueError("recompute_modules moe_act / layernorm under precision fp8 (delayed scaling): Megatron: "
                             "'Delayed scaling does not support moe_act and layernorm recompute for fp8'; use another "
                             "FP8 recipe (fp8-tensorwise, mxfp8, fp8-blockwise) or other modules")
        if self.attention_kernel in ("flash2", "flash1") and not self.flash_attention:
            raise ValueError(f"attention_kernel {self.attention_kernel} is a flash-attention kernel but flash_attention "
                             "is false: drop one of the two")
        return self

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length


def cuda_graph_problem(job: JobSpec) -> str | None:
    """Megatron-LM's rules on the CUDA-graph settings (transformer_config.py at d98e8a6), or None: modules
    only with a per-layer implementation, moe_preprocess with moe_router, no per-layer graph without
    modules on a MoE model (a whole dropless MoE layer has dynamic shapes: "default: capture whole layer,
    but not working for MoE dynamic shapes", docs cuda_graph.md), MoE modules only on MoE models; a
    whole-iteration graph of a dropless MoE model needs static shapes, which only the flex dispatcher's
    per-rank budget gives (--moe-expert-rank-capacity-factor, HybridEP; the alltoall dispatcher syncs the
    token counts to the host, token_dispatcher.py `_maybe_dtoh_and_synchronize`)."""
    impl, mods, moe = job.cuda_graph_impl, job.cuda_graph_modules, job.model.is_moe
    if job.framework != "megatron" and impl != "none":
        return "cuda_graph_impl is Megatron-LM's (--cuda-graph-impl): it needs framework megatron; drop it"
    if mods and impl in ("none", "full_iteration"):
        return f"cuda_graph_modules need a per-layer cuda_graph_impl (local or transformer_engine), not {impl}"
    if "moe_preprocess" in mods and "moe_router" not in mods:
        return "cuda_graph_modules: moe_preprocess is captured only with moe_router (Megatron)"
    if "mamba" in mods and "M" not in (job.model.hybrid_layer_pattern or ""):
        return "cuda_graph_modules mamba needs a hybrid model with Mamba layers (Megatron --cuda-graph-modules mamba)"
    if not moe and {"moe_router", "moe_preprocess"} & set(mods):
        return "cuda_graph_modules moe_router / moe_preprocess need a mixture-of-experts model"
    if moe and impl in ("local", "transformer_engine") and not mods:
        return ("a per-layer CUDA graph of a whole MoE layer does not capture dropless MoE (dynamic shapes): "
                "name cuda_graph_modules (attn, moe_router, moe_preprocess)")
    if moe and impl == "full_iteration" and job.moe_token_dispatcher != "flex":
        return ("a whole-iteration CUDA graph of a dropless MoE model needs the flex dispatcher's static per-rank "
                "budget (--moe-expert-rank-capacity-factor): set moe_token_dispatcher flex")
    return None


def _constrained(data: dict, narrow) -> dict:
    """`data` with its constraints passed through `narrow` (given constraints -> narrowed; ValueError(knob,
    message) when a rule excludes what they allow), the error naming `constraints.<knob>`."""
    cons = data.get("constraints") or {}
    given = cons.model_dump(exclude_defaults=True) if isinstance(cons, Constraints) else dict(cons)
    try:
        return {**data, "constraints": Constraints(**narrow(given))}
    except ValueError as e:
        raise ValueError(f"constraints.{e.args[0]}: {e.args[1]}") from None


_BOOL, _INT, _MODULES = TypeAdapter(bool), TypeAdapter(int), TypeAdapter(tuple[OffloadModule, ...])


def _given(get, name: str, adapter: TypeAdapter):
    """A field value (`get(name)`, raw in a job mapping) as pydantic will read it, or None when it will not
    validate (validation then reports it): the rules below apply before validation, to what it will hold."""
    try:
        return adapter.validate_python(get(name))
    except ValidationError:
        return None


def _layers_offloaded(get) -> bool:
    return (_given(get, "cpu_offloading_num_layers", _INT) or 0) > 0


def _fused_group_mlp_offloaded(get) -> bool:
    return "fused_group_mlp" in (_given(get, "offload_modules", _MODULES) or ())


def _hsdp(get) -> bool:
    return (_given(get, "distributed_optimizer_instances", _INT) or 1) > 1


def _precision_aware_on_megatron(get) -> bool:  # another stack is refused by `optimizer_problem`
    return get("framework", "megatron") == "megatron" and bool(_given(get, "precision_aware_optimizer", _BOOL))


# Megatron's rules a setting brings on the searched knobs: (setting, whether it is on -- a predicate of the field
# getter, raw values of a job mapping or a JobSpec's --, knob, the one value allowed, Megatron's words).
# Megatron-LM d98e8a6: megatron/core/transformer/transformer_config.py:1884-1899 (TransformerConfig.__post_init__:
# CPU offloading) and megatron/core/optimizer/__init__.py:1057-1060 (get_megatron_optimizer: the precision-aware
# optimizer; Megatron-FSDP has its own dtype options, not priced) and megatron/core/transformer/moe/experts.py:390-400
# (`_is_fused_impl_supported`: the op fuser that fused_group_mlp offloading needs runs without expert TP).
SETTING_RULES = (
    ("cpu_offloading_num_layers", _layers_offloaded, "pp", 1,
     "Megatron: 'Currently there is no support for Pipeline parallelism with CPU offloading'"),
    ("cpu_offloading_num_layers", _layers_offloaded, "recompute", "none",
     "Megatron: 'CPU offloading does not work when activation recomputation is enabled'"),
    ("precision_aware_optimizer", _precision_aware_on_megatron, "zero", 1,
     "Megatron: '--use-precision-aware-optimizer only supported with distributed optimizer'"),
    ("distributed_optimizer_instances", _hsdp, "zero", 3,
     "Megatron: '--outer-dp-sharding-strategy optim' is only supported with optim_grads_params (HSDP is priced "
     "with Megatron-FSDP's full sharding inside an instance)"),
    ("offload_modules", _fused_group_mlp_offloaded, "etp", 1,
     "Megatron: 'Fused GroupedMLP is not supported for this configuration' with expert tensor parallelism: "
     "fused_group_mlp offloading needs --use-transformer-engine-op-fuser"),
)


def setting_rules(data) -> list[tuple[str, str, object, str]]:
    """(setting, knob, value, Megatron's words) of each rule of `SETTING_RULES` whose setting is on in `data` (a
    job mapping with raw values, or a JobSpec)."""
    get = data.get if isinstance(data, dict) else lambda k, d=None: getattr(data, k, d)
    return [(setting, knob, value, why) for setting, on, knob, value, why in SETTING_RULES if on(get)]


def rule_constraints(data, given: dict) -> dict:
    """`given` constraints narrowed to each rule's one value; ValueError(knob, message) naming the constraint a rule
    excludes (catalog.load_job turns it into the error at constraints.<knob>)."""
    for setting, knob, value, why in setting_rules(data):
        allowed = given.get(knob)
        if allowed is not None and value not in tuple(allowed):
            raise ValueError(knob, f"allows {list(allowed)}, but {setting} needs {knob} {value} ({why}); allow "
                                   f"{knob} {value} or drop {setting}")
        given = {**given, knob: (value,)}
    return given


def rule_violations(job: JobSpec, config: dict) -> list[tuple[str, str]]:
    """(knob, message) for each knob of a configuration that a rule of the job's settings excludes."""
    def shown(value) -> str:
        return " ".join(value) if isinstance(value, tuple) else str(value).lower()

    return [(knob, f"{config[knob]} with {setting} {shown(getattr(job, setting))} ({why}); use {knob} {value}")
            for setting, knob, value, why in setting_rules(job) if knob in config and config[knob] != value]


def optimizer_problem(job: JobSpec) -> str | None:
    """Why the job's optimizer settings cannot run (one line naming the fix), or None: a moment dtype other than
    fp32 needs the precision-aware optimizer (Megatron-LM d98e8a6 optimizer_config.py:475-480: 'exp_avg_dtype can
    only be fp32 when not using precision-aware optimizer'), which is Megatron's (Transformer Engine's FusedAdam)."""
    if job.optimizer_moment_dtype != "fp32" and not job.precision_aware_optimizer:
        return (f"optimizer_moment_dtype {job.optimizer_moment_dtype} (--optimizer-moment-dtype) needs "
                f"precision_aware_optimizer true (--precision-aware-optimizer; Megatron: 'exp_avg_dtype can only be fp32 "
                f"when not using precision-aware optimizer'); set it or use fp32")
    if job.precision_aware_optimizer and job.framework != "megatron":
        return (f"precision_aware_optimizer is Megatron-LM's (--use-precision-aware-optimizer, Transformer Engine's "
                f"FusedAdam); framework {job.framework} is priced with AdamW's fp32 state: use framework megatron or "
                f"drop it")
    return None


def cpu_offload_problem(job: JobSpec) -> str | None:
    """Why `job`'s cpu_offloading_num_layers cannot run (one line naming the fix), or None. Megatron-LM d98e8a6:
    arguments.py:1950 (N > 0 turns cpu_offloading on), transformer_config.py:1884 ("CPU offloading can be done only
    for layers less than num_layers": 0 <= N < layers) and :2800 ("CUDA graphs not supported with CPU offloading"
    unless full_iteration); Transformer Engine's offload context is Megatron's only (framework megatron); the
    formulation prices it for dense transformer models (formulation/offload.py), on a GPU that states its host link."""
    n, model = job.cpu_offloading_num_layers, job.model
    if n == 0:
        return None
    if job.framework != "megatron":
        return (f"cpu_offloading_num_layers is Megatron-LM's (--cpu-offloading-num-layers, Transformer Engine's offload "
                f"context); framework {job.framework} has no layer-level activation offloading: use framework megatron "
                f"or set it to 0")
    if n >= model.num_layers:
        return (f"cpu_offloading_num_layers {n} must be less than the model's {model.num_layers} layers (Megatron: 'CPU "
                f"offloading can be done only for layers less than {model.num_layers}'); use at most {model.num_layers - 1}")
    if model.is_moe or model.is_hybrid or model.mtp_num_layers:
        return (f"cpu_offloading_num_layers is priced for dense transformer models only ({model.name} is "
                f"{'a hybrid Mamba' if model.is_hybrid else 'a mixture-of-experts' if model.is_moe else 'an MTP'} "
                f"model: its layers' saved activations differ by kind); set it to 0")
    if job.cuda_graph_impl not in ("none", "full_iteration"):
        return (f"cpu_offloading_num_layers with cuda_graph_impl {job.cuda_graph_impl}: Megatron: 'CUDA graphs not "
                f"supported with CPU offloading' (only full_iteration); set cuda_graph_impl none")
    return host_link_problem(job, "cpu_offloading_num_layers")
