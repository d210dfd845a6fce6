"""The flex dispatcher's DeepEP / HybridEP buffers (formulation/ep_buffers.py) against hand computations from
DeepEP's sources, and where they enter a plan: the memory per GPU and the backend the launch names."""

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.formulation import ep_buffers
from solveplan.formulation.coefficients import stage_coefficients
from solveplan.space.shapes import Shapes


def test_deepep_buffer_of_eight_ranks_is_the_nvlink_hint_alone():
    """DeepSeek-V3's 7168-wide BF16 tokens over 8 ranks (config.hpp `get_nvl_buffer_size_hint`, 20 SMs = 10
    channels, 8 NVLink peers, one RDMA rank, receive chunk 256): 10 * 8 * ((2 + 3) * 4 + 256 * (14336 + 8 source
    meta + 128 * (8 + 4) top-k + 128 * 4 scales)); no RDMA buffer within 8 ranks."""
    per_token = 14336 + 8 + 128 * 12 + 128 * 4
    assert float(ep_buffers.deepep_buffer_bytes(7168, 8)) == 10 * 8 * (5 * 4 + 256 * per_token)


def test_deepep_buffer_across_nodes_adds_the_rdma_hint():
    """64 ranks: NVLink chunk 288, RDMA chunk 128 (send chunk 8 on both configs), 8 RDMA ranks; the RDMA hint
    doubles its per-token bytes and adds a 16-byte int4 (`get_rdma_buffer_size_hint`)."""
    per_token = 14336 + 8 + 128 * 12 + 128 * 4
    nvl = 10 * 8 * ((2 * 8 + 3) * 4 + 288 * per_token)
    rdma = 10 * 8 * ((8 * 2 + 2) * 2 * 4 + 128 * 2 * (per_token + 16))
    assert float(ep_buffers.deepep_buffer_bytes(7168, 64)) == nvl + rdma


def test_hybridep_reserves_every_token_of_the_group_landing_on_one_rank():
    """One NVLink domain of 64 ranks (GB200 NVL72), 4096 tokens per rank, 256 experts, 4 per rank
    (intranode.cu): 4096 * 64 tokens of 7168 BF16 values, the domain's 256 fp32 probabilities, 56 fp32 scales."""
    got = float(ep_buffers.hybridep_buffer_bytes(7168, 4096, 256, 4, 64, 1))
    assert got == 4096 * 64 * (2 * 7168 + 4 * 256 + 4 * 56)
    assert 3.7 * 2**30 < got < 3.9 * 2**30


def test_hybridep_across_domains_adds_the_rdma_buffers():
    """Four domains of 8 (H100 nodes), 4096 tokens, 256 experts, 8 per rank (internode_doca.cu): the NVLink
    buffer for 4096 * 32 tokens with the domain's 64 probabilities, plus the rank's own tokens with all 256
    probabilities and 3 x 3 remote token sets (dispatch group; combine reduction and group, no scales)."""
    w, T, R, N = 7168, 4096, 8, 4
    nvl = T * R * N * (2 * w + 4 * 8 * R + 4 * w / 128)
    rdma = T * (2 * w + 4 * 256 + 4 * w / 128) + T * (N - 1) * (2 * w + 4 * 8 * R + 4 * w / 128) \
        + 2 * T * (N - 1) * (2 * w + 4 * 8 * R)
    assert float(ep_buffers.hybridep_buffer_bytes(w, T, 256, 8, R, N)) == pytest.approx(nvl + rdma, rel=1e-12)


@pytest.mark.parametrize("cluster, group, backend", [
    ("h100x64", 16, "deepep"), ("h100x64", 8, "deepep"),
    ("h100x64", 256, "hybridep"),  # DeepEP asserts "Unsupported number of EP ranks" beyond its configs
    ("h100x64", 40, "hybridep"),
    ("gb200x72", 8, "hybridep"),  # an NVLink domain wider than a node: only HybridEP (TransformerConfig)
])
def test_flex_backend(cluster, group, backend):
    assert ep_buffers.flex_backend(load_cluster(cluster), group) == backend


def _runtime(dispatcher, cluster="h100x64", framework="megatron", **shape):
    m = load_model("qwen3-30b-a3b")
    co = stage_coefficients(m, load_cluster(cluster), Shapes.single(**shape), global_batch_size=256,
                            seq_length=4096, moe_token_dispatcher=dispatcher, framework=framework)
    return float(co.runtime_bytes[0])


def test_flex_dispatcher_memory_adds_deepeps_buffer_to_the_runtime():
    """Qwen3-30B-A3B on H100 nodes, ep 8: the flex dispatcher's plan holds DeepEP's buffer for its 2048-wide
    tokens beside the alltoall plan's runtime; without EP, or on a stack that is not Megatron's, no buffer."""
    shape = dict(tp=1, dp=64, ep=8, etp=1, micro_batch_size=1)
    added = _runtime("flex", **shape) - _runtime("alltoall", **shape)
    assert added == pytest.approx(float(ep_buffers.deepep_buffer_bytes(2048, 8)), rel=1e-9)
    no_ep = dict(shape, ep=1)
    assert _runtime("flex", **no_ep) == _runtime("alltoall", **no_ep)
    assert _runtime("flex", framework="torchtitan", **shape) == _runtime("alltoall", framework="torchtitan", **shape)


def test_hybridep_buffer_grows_with_the_micro_batch_deepeps_does_not():
    """DeepEP's chunks are fixed; HybridEP (GB200 NVL72) sizes for the rank's tokens: doubling the micro-batch
    doubles its buffer, 4096 x 2 tokens x 8 ranks of 2048 BF16 values, 128 probabilities and 16 scales each."""
    one, two = dict(tp=1, dp=64, ep=8, etp=1, micro_batch_size=1), dict(tp=1, dp=64, ep=8, etp=1, micro_batch_size=2)
    assert _runtime("flex", **two) - _runtime("alltoall", **two) == pytest.approx(
        _runtime("flex", **one) - _runtime("alltoall", **one), rel=1e-12)
    grown = [_runtime("flex", "gb200x72", **s) - _runtime("alltoall", "gb200x72", **s) for s in (one, two)]
    assert grown[1] == pytest.approx(2 * grown[0], rel=1e-12)
    assert grown[1] == pytest.approx(8192 * 8 * (2 * 2048 + 4 * 16 * 8 + 4 * 2048 / 128), rel=1e-12)
