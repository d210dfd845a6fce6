"""Data-parallel terms shared by the stage coefficients and the search's dominance rule: bytes
per gradient element reduced, the parameters a stage reduces, ZeRO-2/3's gradient copies, and
where the distributed optimizer (zero=1) is no slower than plain data parallelism (zero=0)."""

from __future__ import annotations

import numpy as np

from ..specs import ClusterSpec, ModelSpec
from . import comm
from .memory import BF16_BYTES, FP32_BYTES
from .moe import moe_layer_params_per_gpu
from .precision import gathered_param_bytes


# ZeRO-2/3 (FSDP) per micro-batch: the layer's unsharded bf16 gradient is cast into the
# reduce-dtype buffer (read 2, write g) and pre-divided by the group size (read g, write g)
# before the reduce-scatter (PyTorch FSDP `_reduce_grad` / `_div_if_needed`): 2 + 3g bytes per
# parameter of the whole layer. Megatron's data-parallel paths accumulate into fp32 main
# gradients inside the weight-gradient GEMM and pay nothing extra.
def zero_grad_copy_bytes(grad_bytes: float) -> float:
    return 2.0 + 3.0 * grad_bytes


def hsdp_step_s(cluster: ClusterSpec, params_gpu, *, group, stride, instances: int, zero, grad_bytes: float):
    """(gradient reduction, weight all-gather) per step of HSDP across its instances (Megatron-FSDP with
    --num-distributed-optimizer-instances r and --outer-dp-sharding-strategy optim: parallel_state.py builds r
    instances of consecutive DP x CP ranks -- of expert-data-parallel ranks for the experts --, each sharding the
    weights and gradients as ZeRO-3 over its `group` ranks, the optimizer state sharded across them): the shard's
    gradients (`params_gpu / group` parameters) reduce-scattered over the r ranks `stride` apart that hold the
    same shard, and after the optimizer step its BF16 weights all-gathered back. 0 under another ZeRO stage or r 1
    (without instances, every job but HSDP's, nothing is computed)."""
    if instances == 1:
        return 0.0, 0.0
    shard = params_gpu / group
    on = np.asarray(zero) == 3
    red = comm.collective_s("reduce_scatter", shard * grad_bytes, cluster, instances, stride)
    gather = comm.collective_s("all_gather", shard * BF16_BYTES, cluster, instances, stride)
    return np.where(on, red, 0.0), np.where(on, gather, 0.0)


def grad_reduce_bytes(precision: str, grad_reduce_dtype: str) -> float:
    """Bytes per gradient element in the data-parallel reduction."""
    return 2.0 if precision == "fp16" or grad_reduce_dtype == "bf16" else FP32_BYTES


def embedding_group_allreduce_s(cluster: ClusterSpec, emb_params_gpu, grad_bytes: float, tp, cp, dp, pp):
    """The all-reduce of the word embedding's gradient between the first and the last pipeline stage,
    which both keep a copy of the table with pp > 1 (Megatron-LM d98e8a6 finalize_model_grads.py:146-250
    `_allreduce_word_embedding_grads`: tied embeddings, or an MTP block on the last stage): two ranks
    tp x cp x dp x (pp - 1) apart, over their one link (`comm.p2p_link`)."""
    bw, lat = comm.p2p_link(cluster, tp * cp * dp * np.maximum(pp - 1, 1))
    return comm.allreduce_s(emb_params_gpu * grad_bytes, 2, bw, lat)


def reduced_params_per_gpu(model: ModelSpec, tp, pp):
    """(per layer, embedding, head) parameters one GPU reduces over data parallelism: the
    three parts of a stage's step-level gradient reduction."""
    h, t = model.hidden_size, np.asarray(tp, dtype=np.float64)
    emb = model.embedding_params / t
    head = np.where((not model.tied_embeddings) | (np.asarray(pp) > 1), emb + 2 * h / t, 2 * h / t)
    return model.params_per_layer / t, emb, head


def distributed_optimizer_dominates(model: ModelSpec, cluster: ClusterSpec, tp, cp, dp, pp, *,
                                    precision: str = "bf16", grad_reduce_dtype: str = "fp32", ep=1,
                                    etp=1, fp8_param_gather: bool = False) -> np.ndarray:
    """Where zero=1 is no slower than zero=0 with every other knob the same, exactly under this
    formulation: its reduce-scatter + all-gather (each a ring) take no longer than zero=0's
    all-reduce for each of the three parts a stage reduces (`reduced_params_per_gpu`), its
    overlap window is a superset (the all-gather also hides behind the next forward), its
    optimizer step is sharded and its memory smaller. The all-reduce may be NCCL's tree, whose
    latency is logarithmic in the nodes: across nodes with small parts it beats the two rings.
    A MoE model's parts add the MoE layers' non-expert parameters (over dp x cp) and their local
    experts (over the expert-data-parallel group, `moe_layer.moe_layer_terms`), each reduced on its own.
    The layers' weights are gathered in `precision.gathered_param_bytes` (FP8 with fp8_param_gather),
    the embedding's and the head's in BF16."""
    shard = np.asarray(dp, dtype=np.float64) * np.asarray(cp, dtype=np.float64)
    g = grad_reduce_bytes(precision, grad_reduce_dtype)
    ok = np.ones(np.broadcast(shard, np.asarray(tp), np.asarray(ep)).shape, dtype=bool)
    layer_bytes = gathered_param_bytes(precision, fp8_param_gather)
    layer, emb, head = reduced_params_per_gpu(model, tp, pp)
    parts = [(layer, shard, tp, layer_bytes), (emb, shard, tp, BF16_BYTES), (head, shard, tp, BF16_BYTES)]
    if model.is_moe:
        ep, etp = np.asarray(ep, dtype=np.float64), np.asarray(etp, dtype=np.float64)
        ne, ex = moe_layer_params_per_gpu(model, tp, ep, etp)
        parts += [(ne, shard, tp, layer_bytes), (ex, np.asarray(tp) * shard / (ep * etp), ep * etp, layer_bytes)]
    for params, n, stride, param_bytes in parts:
        ar = comm.collective_s("all_reduce", params * g, cluster, n, stride)
        two = (comm.collective_s("reduce_scatter", params * g, cluster, n, stride)
               + comm.collective_s("all_gather", params * param_bytes, cluster, n, stride))
        ok &= two <= ar * (1 + 1e-12)
    return ok
