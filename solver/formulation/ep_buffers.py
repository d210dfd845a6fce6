"""Communication buffers of Megatron's `flex` token dispatcher: HBM one GPU holds for DeepEP or HybridEP for the whole
run, whatever the layer or micro-batch (pure numpy, vectorised over shapes).

Megatron-Core keeps one buffer per process (megatron/core/transformer/moe/fused_a2a.py at d98e8a6: the module globals
`_buffer` and `_hybrid_ep_buffer`, built on the first dispatch over the TP x EP group, `tp_ep_group`, of etp x ep ranks):

- **DeepEP** (`get_buffer`: deep_ep Buffer(group, num_nvl_bytes, num_rdma_bytes), each the larger of the dispatch and
  combine configs' size hints for `hidden_bytes` = width x max(element size, 2)). The hints are DeepEP's
  (deepseek-ai/DeepEP csrc/legacy/config.hpp at dd758ca, `Config::get_nvl_buffer_size_hint` /
  `get_rdma_buffer_size_hint`), per channel (num_sms / 2; Megatron sets 20 SMs, token_dispatcher.py
  `set_deepep_num_sms`) and NVLink peer (at most 8): the received tokens' chunk (`num_max_nvl_chunked_recv_tokens`) of
  hidden bytes, an 8-byte source meta, 128 int64 top-k indices, 128 fp32 weights and 128 fp32 scales each, plus
  counters; across more than 8 ranks, the RDMA buffer per RDMA rank, doubled (send and receive), with a 16-byte
  int4 per token beside. The configs are `Buffer.get_dispatch_config` / `get_combine_config` (deep_ep/buffers/legacy.py),
  defined for the group sizes of `DEEPEP_CONFIGS` only: DeepEP asserts "Unsupported number of EP ranks" elsewhere.
- **HybridEP** (`init_hybrid_ep_buffer`: HybridEPBuffer(hidden_dim, max_num_of_tokens_per_rank = the dispatched
  tokens of the rank, num_local_experts), DeepEP's hybrid-ep branch at 94a9f8f, csrc/hybrid_ep/buffer/intranode.cu
  and internode_doca.cu). Inside the NVLink domain (`NVLCoordinator`): room for the worst case of every token of the
  group landing on one rank, T x R x N tokens (R ranks per NVLink domain, N domains), each w BF16 values (dispatch and
  combine share it: `use_shared_buffer`, the Python default), the routing probabilities of the domain's experts
  (E_local x R fp32) and one fp32 scale per 128 values; across domains (`RDMACoordinator`, N > 1): the rank's own
  T tokens with all E probabilities and scales, and T x (N - 1) tokens received from the other domains with the
  domain's probabilities and scales for the dispatch, twice (reduction and group buffers) for the combine.
  Flags and the preprocessing scratch (kilobytes) and the custom all-gather (off by default since #682) are left out.
"""

from __future__ import annotations

import numpy as np

from ..specs import ClusterSpec, ModelSpec
from . import comm
from .memory import BF16_BYTES, FP32_BYTES

DEEPEP_NUM_SMS = 20  # Megatron-Core's default (token_dispatcher.py: None -> 20)
NVL_PEERS = 8  # DeepEP's LEGACY_NUM_MAX_NVL_PEERS
MAX_TOPK, MAX_SCALES = 128, 128  # DeepEP's kNumMaxTopK, kNumMaxScales
SOURCE_META_BYTES, TOPK_INDEX_BYTES, INT4_BYTES = 8, 8, 16
# group size -> (NVLink, RDMA) receive chunks in tokens, the larger of the dispatch and combine configs
# (deep_ep/buffers/legacy.py `get_dispatch_config` / `get_combine_config` at dd758ca; the NVLink chunks are equal in
# both; `Config` rounds the RDMA chunk of 128 up to a multiple of the RDMA send chunk: 6 and 12 give 132, 20 gives 140)
DEEPEP_CONFIGS = {2: (256, 132), 4: (256, 132), 8: (256, 132), 16: (288, 140), 24: (288, 128), 32: (288, 128),
                  48: (288, 128), 64: (288, 128), 96: (480, 132), 128: (560, 132), 144: (720, 132), 160: (720, 132)}
HYBRIDEP_SCALE_BLOCK = 128  # one fp32 scaling factor per 128 hidden values


def uses_hybridep(cluster: ClusterSpec, group_ranks):
    """Whether the flex dispatcher launches HybridEP for a TP x EP group of `group_ranks` (vectorised): when the
    NVLink domain is wider than a node (TransformerConfig: "only hybridep backend supports the MNNVL case") or DeepEP
    has no config for the group size (module docstring); else DeepEP, Megatron-Core's default."""
    supported = np.isin(np.asarray(group_ranks), list(DEEPEP_CONFIGS))
    return (cluster.domain_gpus > cluster.gpus_per_node) | ~supported


def flex_backend(cluster: ClusterSpec, group_ranks: int) -> str:
    """The flex dispatcher's backend a plan launches with (`uses_hybridep`), as Megatron's argument names it."""
    return "hybridep" if bool(uses_hybridep(cluster, group_ranks)) else "deepep"


def _deepep_chunks(group_ranks):
    """(NVLink, RDMA) receive chunks of DeepEP's config for each group size; an unsupported size takes the next
    larger one's (DeepEP refuses it; `flex_backend` launches HybridEP there)."""
    sizes = np.array(sorted(DEEPEP_CONFIGS))
    idx = np.minimum(np.searchsorted(sizes, np.asarray(group_ranks, dtype=np.float64)), len(sizes) - 1)
    chunks = np.array([DEEPEP_CONFIGS[int(s)] for s in sizes], dtype=np.float64)
    return chunks[idx, 0], chunks[idx, 1]


def deepep_buffer_bytes(width, group_ranks):
    """DeepEP's NVLink plus RDMA buffer on one GPU for tokens `width` BF16 values wide over `group_ranks` ranks
    (module docstring: `get_nvl_buffer_size_hint` + `get_rdma_buffer_size_hint`, 128-byte alignment left out)."""
    n = np.asarray(group_ranks, dtype=np.float64)
    hidden_bytes = np.asarray(width, dtype=np.float64) * BF16_BYTES
    rdma_ranks, nvl_ranks = np.maximum(n / NVL_PEERS, 1.0), np.minimum(n, NVL_PEERS)
    channels = DEEPEP_NUM_SMS / 2
    nvl_chunk, rdma_chunk = _deepep_chunks(n)
    per_token = hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * (TOPK_INDEX_BYTES + FP32_BYTES) + MAX_SCALES * FP32_BYTES
    nvl = channels * nvl_ranks * ((2 * rdma_ranks + 3) * 4 + nvl_chunk * per_token)
    rdma = channels * rdma_ranks * ((NVL_PEERS * 2 + 2) * 2 * 4 + 2 * rdma_chunk * (per_token + INT4_BYTES))
    return nvl + np.where(n > NVL_PEERS, rdma, 0.0)


def hybridep_buffer_bytes(width, tokens_rank, experts, local_experts, domain_ranks, domains):
    """HybridEP's buffers on one GPU (module docstring): `tokens_rank` dispatched tokens of `width` BF16 values,
    `experts` in all and `local_experts` per rank, over `domains` NVLink domains of `domain_ranks` ranks."""
    w, T = np.asarray(width, dtype=np.float64), np.asarray(tokens_rank, dtype=np.float64)
    R, N = np.asarray(domain_ranks, dtype=np.float64), np.asarray(domains, dtype=np.float64)
    token, scales = BF16_BYTES * w, FP32_BYTES * w / HYBRIDEP_SCALE_BLOCK
    domain_probs = FP32_BYTES * local_experts * R
    dispatched = token + domain_probs + scales  # one token as the domain's buffers hold it
    nvl = T * R * N * dispatched
    remote = T * (N - 1)
    rdma = T * (token + FP32_BYTES * experts + scales) + remote * dispatched + 2 * remote * (token + domain_probs)
    return nvl + np.where(N > 1, rdma, 0.0)


def dispatcher_buffer_bytes(model: ModelSpec, cluster: ClusterSpec, tokens, tp, ep, etp, dispatcher: str):
    """Per-GPU bytes of the flex dispatcher's buffer (zero under the alltoall dispatcher, without experts or EP):
    HybridEP or DeepEP as `flex_backend` launches it, over the TP x EP group of etp x ep ranks, for the rank's
    tokens/tp dispatched tokens of `moe_expert_width` (LatentMoE dispatches its latent)."""
    ep, etp = np.asarray(ep, dtype=np.float64), np.asarray(etp, dtype=np.float64)
    if dispatcher != "flex" or not model.is_moe:
        return np.zeros(np.broadcast(ep, etp).shape)
    group = ep * etp
    width, tokens_rank = model.moe_expert_width, np.asarray(tokens, dtype=np.float64) / np.asarray(tp, dtype=np.float64)
    ranks, domains = comm.placement(cluster, group, 1)
    hybrid = hybridep_buffer_bytes(width, tokens_rank, model.num_experts, model.num_experts / ep, ranks, domains)
    deep = deepep_buffer_bytes(width, group)
    return np.where(group > 1, np.where(uses_hybridep(cluster, group), hybrid, deep), 0.0)
