"""The one schema of a job as a mapping -- a `--job` file with the CLI's flags applied, a
line of `solveplan admit`, an API call's mapping, an HTTP body -- and of an admission
request (a job plus the allocation it asks for). `catalog.load_job` turns a `JobRequest`
into a `JobSpec` (names and files resolved, the model's recipe as defaults)."""

from __future__ import annotations

import copy
import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    StringConstraints,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from .cluster import ClusterSpec
from .job import Constraints, CudaGraphImpl, CudaGraphModule, MomentDtype, Precision, RecomputeModule, Zero3Gathers
from .model import ModelSpec
from .offloading import OffloadModule
from .peft import LoraTarget, Peft


def _ref(kind: str, forms: str):
    def check(value: Any):
        if value is not None and not isinstance(value, (str, dict)):
            raise ValueError(f"give {forms} or a mapping of {kind} fields")
        return value
    return BeforeValidator(check)


def _inlined(cls, optional: tuple[str, ...] = ()) -> dict:
    """The JSON schema of spec `cls` with its $defs inlined (a self-contained schema that a
    field's OpenAPI entry can carry), `optional` keys not required, and every `gpu` a catalog
    GPU name or a GPU spec (as `catalog.load_gpu` reads it)."""
    schema = cls.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node):
        if isinstance(node, list):
            return [inline(x) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            return inline(copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]]))
        out = {k: inline(v) for k, v in node.items()}
        props = out.get("properties")
        if isinstance(props, dict) and isinstance(props.get("gpu"), dict) and props["gpu"].get("type") == "object":
            props["gpu"] = {"anyOf": [{"type": "string", "description": "a GPU of `solveplan gpus`"}, props["gpu"]]}
        return out

    schema = inline(schema)
    schema["required"] = [k for k in schema.get("required", []) if k not in optional]
    return schema


def _ref_schema(kind: str, names: str, *specs: dict) -> WithJsonSchema:
    return WithJsonSchema({"anyOf": [{"type": "string", "description": names}, *specs],
                           "description": f"the {kind}: {names}, or an inline mapping"})


HF_CONFIG_SCHEMA = {
    "type": "object", "title": "HuggingFaceConfig", "required": ["model_type"], "additionalProperties": True,
    "description": "a Hugging Face config.json of a dense decoder, as the file holds it (Llama, Mistral, Qwen2/3, "
                   "Gemma, Phi-3/4, OLMo, Nemotron, GPT-NeoX, GPT-2, OPT, BLOOM)"}
ModelRef = Annotated[str | dict, _ref("model", "a catalog name, a file path"),
                     _ref_schema("model", "a catalog model (`solveplan models`)", _inlined(ModelSpec, ("name",)),
                                 HF_CONFIG_SCHEMA)]
ClusterRef = Annotated[str | dict, _ref("cluster", "a catalog name, <gpu>x<N>, a file path"),
                       _ref_schema("cluster", "a catalog cluster or <gpu>x<N> (`solveplan clusters`)",
                                   _inlined(ClusterSpec, ("name",)))]
ConstraintsMapping = Annotated[dict, WithJsonSchema(_inlined(Constraints))]


class Request(BaseModel):
    """Strict: a boolean is not a number, a float not an integer, a string neither (what the
    service's bodies and the API's mappings hold is never coerced)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class JobRequest(Request):
    """A training job: catalog names, files or inline mappings for the model and the cluster;
    the global batch and the sequence default to the model's recipe."""

    id: int | str | None = None
    name: str | None = None
    model: ModelRef | None = Field(None, description="catalog name (see `solveplan models`), a file, or a ModelSpec mapping")
    cluster: ClusterRef | None = Field(None, description="catalog name, <gpu>x<N>, a file, or a ClusterSpec mapping")
    global_batch_size: PositiveInt | None = None
    seq_length: PositiveInt | None = None
    precision: Precision | None = None
    flash_attention: bool | None = None
    attention_kernel: Literal["cudnn", "flash2", "flash1"] | None = None
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = None
    tp_comm_overlap: bool | None = None
    overlap_grad_reduce: bool | None = None
    framework: Literal["megatron", "torchtitan", "transformers"] | None = Field(
        None, description="the software stack: megatron (default), torchtitan or transformers")
    moe_load_imbalance: float | None = Field(None, ge=1.0, le=64.0, allow_inf_nan=False,
                                                description="MoE: busiest expert rank's tokens over the balanced share")
    moe_a2a_overlap: bool | None = None
    moe_token_dispatcher: Literal["alltoall", "flex"] | None = None
    fp8_dot_product_attention: bool | None = Field(None, description="FP8 recipes: attention in FP8 (Transformer "
                                                                    "Engine's fused kernel; Megatron-Core config)")
    fp8_param_gather: bool | None = Field(None, description="FP8 recipes: FP8 primary weights (--fp8-param-gather); "
                                                           "nvfp4: NVFP4 primary weights (--fp4-param-gather)")
    module_precision: list[Annotated[list[Annotated[str, StringConstraints(max_length=200)]],
                                     Field(min_length=2, max_length=2)]] | None = Field(
        None, max_length=64, description="per-module precision under a quantised recipe: ordered [glob over the Megatron "
                                         "module path, precision] rules, the first match wins (Megatron "
                                         "--te-precision-config-file; specs/module_precision.py)")
    bf16_layers_at_start: int | None = Field(None, ge=0, description="nvfp4 / FP8: first layers kept in BF16 "
                                                                     "(--num-layers-at-start-in-bf16)")
    bf16_layers_at_end: int | None = Field(None, ge=0, description="nvfp4 / FP8: last layers kept in BF16 "
                                                                   "(--num-layers-at-end-in-bf16)")
    precision_aware_optimizer: bool | None = Field(
        None, description="Megatron --use-precision-aware-optimizer (Transformer Engine FusedAdam; needs zero 1)")
    optimizer_moment_dtype: MomentDtype | None = Field(
        None, description="Adam's moments (--exp-avg-dtype / --exp-avg-sq-dtype); not fp32 needs the precision-aware "
                          "optimizer")
    cpu_offloading_num_layers: int | None = Field(
        None, ge=0, description="Megatron's CPU activation offloading of the first N layers (--cpu-offloading-num-layers; "
                                "needs pp 1, no recomputation, N < layers)")
    peft: Peft | None = Field(None, description="none (default) or lora: Megatron-Bridge's LoRA, base weights frozen")
    lora_rank: int | None = Field(None, ge=1, le=65536, description="with peft lora: the adapters' rank (default 32)")
    lora_target_modules: list[LoraTarget] | None = Field(
        None, description="with peft lora: linear_qkv, linear_proj, linear_fc1, linear_fc2 (default all four)")
    zero3_gathers: Zero3Gathers | None = Field(
        None, description="ZeRO-3 gathers: prefetched (FSDP, Megatron-FSDP; default) or per_parameter (DeepSpeed "
                          "ZeRO-3 before v0.5.5)")
    min_offloaded_tensor_size: int | None = Field(
        None, ge=0, description="fine-grained offloading skips smaller saved tensors, in elements "
                                "(--min-offloaded-tensor-size; default 1048576)")
    distributed_optimizer_instances: int | None = Field(
        None, ge=1, description="Megatron-FSDP's HSDP (--num-distributed-optimizer-instances): weights and gradients "
                                "sharded inside each of r instances, the optimizer state across them; needs zero 3")
    offload_modules: list[OffloadModule] | None = Field(
        None, description="Megatron's fine-grained activation offloading (--offload-modules): attn_norm, qkv_linear, "
                          "core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, fused_group_mlp")
    cuda_graph_impl: CudaGraphImpl | None = Field(
        None, description="CUDA graphs (Megatron --cuda-graph-impl): none, local, transformer_engine, full_iteration")
    cuda_graph_modules: list[CudaGraphModule] | None = Field(
        None, description="modules of per-layer CUDA graphs (--cuda-graph-modules): attn, mlp, moe_router, "
                          "moe_preprocess")
    recompute_modules: list[RecomputeModule] | None = Field(
        None, description="with recompute selective: Megatron's --recompute-modules (default core_attn)")
    constraints: ConstraintsMapping | None = Field(
        None, description="allowed values or bounds of the planning knobs (tp, pp_max, ...)")
    prefer: Literal["fastest", "simple"] | None = Field(None, description="fastest (default) or simple: the "
                                                           "simplest plan within the error")
    tolerance_rel: float | None = Field(None, ge=0, lt=1, allow_inf_nan=False,
                                           description="with prefer simple: the relative tolerance (default: the interval)")

    @field_validator("constraints")
    @classmethod
    def _not_empty(cls, value):
        if value is not None and not value:
            raise ValueError("empty: give the constraints (e.g. {\"tp\": [4, 8]}) or leave the key out")
        return value

    def job_fields(self) -> dict:
        """The fields that describe the job (what `catalog.load_job` reads)."""
        return self.model_dump(exclude_none=True, include=set(JobRequest.model_fields) - {"id", "name"})


# Bounds of a throughput target: far beyond any cluster (10^12 tokens/s is a million GPUs at a
# million tokens/s each), and small enough that every derived number stays finite.
MAX_TOKENS_PER_S = 1e12
MAX_DEADLINE_S = 1e10  # ~300 years
MAX_TOKEN_BUDGET = 1e18


class Target(BaseModel):
    """A throughput target: exactly one of `tokens_per_s`, or `deadline_s` with `token_budget`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    tokens_per_s: float | None = Field(None, gt=0, le=MAX_TOKENS_PER_S, allow_inf_nan=False)
    deadline_s: float | None = Field(None, gt=0, le=MAX_DEADLINE_S, allow_inf_nan=False,
                                        description="wall-clock seconds to train `token_budget` tokens")
    token_budget: float | None = Field(None, gt=0, le=MAX_TOKEN_BUDGET, allow_inf_nan=False,
                                          description="tokens to train by the deadline")

    @model_validator(mode="after")
    def _exactly_one(self):
        has_rate = self.tokens_per_s is not None
        has_deadline = self.deadline_s is not None or self.token_budget is not None
        if has_rate and has_deadline:
            raise ValueError("give either tokens_per_s, or deadline_s with token_budget, not both")
        if not has_rate and not has_deadline:
            raise ValueError("give tokens_per_s, or deadline_s with token_budget")
        if has_deadline and (self.deadline_s is None or self.token_budget is None):
            missing = "deadline_s" if self.deadline_s is None else "token_budget"
            raise ValueError(f"{missing} is missing: a deadline needs both deadline_s and token_budget")
        rate = self.required_tokens_per_s
        if not math.isfinite(rate) or rate > MAX_TOKENS_PER_S:
            raise ValueError(f"token_budget / deadline_s is {rate:.3g} tokens/s, over {MAX_TOKENS_PER_S:g}; "
                             f"give a later deadline or a smaller budget")
        return self

    @property
    def required_tokens_per_s(self) -> float:
        if self.tokens_per_s is not None:
            return float(self.tokens_per_s)
        # `_exactly_one` refused a target without a rate unless it has both (the model is frozen)
        assert self.token_budget is not None and self.deadline_s is not None
        return float(self.token_budget) / float(self.deadline_s)


class AdmitJob(JobRequest):
    """One job of an admission batch: the job, and the allocation it asks for -- `num_gpus`,
    or a `cluster` of the free cluster's GPU type, or a throughput `target` (then the fewest
    GPUs that meet it)."""

    num_gpus: PositiveInt | None = None
    target: Target | None = None
