"""Mixture-of-experts: the expert-parallel space against Megatron-LM's rules, the MoE terms of the
formulation against hand computations from their sources, and the judged optimize runs."""

from pathlib import Path

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.specs import Constraints, JobSpec, ModelSpec

MOE = Path(__file__).parent / "data" / "moe"


def tiny_moe(L=4, experts=8, topk=2, pattern=None, bias=False, **kw):
    return ModelSpec(name="tiny-moe", num_layers=L, hidden_size=512, num_attention_heads=8, num_kv_heads=4,
                     ffn_hidden_size=1536, vocab_size=32000, gated_mlp=True, add_bias_linear=bias,
                     num_experts=experts, moe_ffn_hidden_size=256, moe_router_topk=topk, moe_layer_pattern=pattern,
                     seq_length=1024, **kw)


def moe_job(model, cluster="a100x16", B=32, s=1024, **cons):
    return JobSpec(model=model, cluster=load_cluster(cluster), global_batch_size=B, seq_length=s,
                   constraints=Constraints(**cons))


# ---------------------------------------------------------------- space and rules

def test_moe_config_rules_agree_with_the_enumeration():
    """`config_violations` and `enumerate_shapes` accept exactly the same MoE configurations
    (etp named, so the enumeration tries every etp value checked here)."""
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.space.rules import config_violations

    job = moe_job(tiny_moe(), etp=(1, 2, 4))
    shapes = enumerate_shapes(job).shapes
    legal = {tuple(shapes.row(i).values()) for i in range(len(shapes))}
    assert {r[-2] for r in legal} == {1, 2, 4, 8} and {r[-1] for r in legal} == {1, 2, 4}
    for tp in (1, 2, 4):
        for cp in (1, 2):
            for pp in (1, 2, 4):
                for mbs in (1, 2):
                    for rc in ("none", "full"):
                        for sp in (False, True):
                            for z in (0, 1, 2):
                                for ep in (1, 2, 3, 4, 8, 16):
                                    for etp in (1, 2, 4):
                                        dp, errs = config_violations(
                                            job, tp=tp, pp=pp, cp=cp, vp=1, micro_batch_size=mbs, recompute=rc,
                                            sequence_parallel=sp, zero=z, ep=ep, etp=etp)
                                        key = (tp, pp, dp, cp, 1, mbs, rc, sp, z, ep, etp)
                                        assert (not errs) == (key in legal), (key, errs)


@pytest.mark.parametrize("cfg,field", [
    (dict(ep=3), "ep"),  # 8 experts are not a multiple of 3 (arguments.py)
    (dict(ep=16), "ep"),  # more experts ranks than experts
    (dict(tp=4, ep=8, etp=4), "ep"),  # etp*ep = 32 does not divide the 16 GPUs of the stage
    (dict(tp=2, sequence_parallel=False), "sequence_parallel"),  # MoELayer: MoE + TP needs SP
    (dict(zero=2, ep=2), "zero"),  # not modelled
])
def test_megatron_moe_rules_are_refused_naming_the_field(cfg, field):
    from solveplan.errors import InputError
    from solveplan.space.rules import complete_config

    with pytest.raises(InputError) as e:
        complete_config(moe_job(tiny_moe()), cfg)
    assert e.value.field == field


def test_bias_needs_etp_one_and_dense_models_keep_ep_one():
    from solveplan.space.enumeration import enumerate_shapes
    from solveplan.space.rules import config_violations

    biased = moe_job(tiny_moe(bias=True), etp=(1, 2))
    shapes = enumerate_shapes(biased).shapes
    assert set(shapes.etp.tolist()) == {1} and shapes.ep.max() == 8
    _, errs = config_violations(biased, tp=2, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=True, zero=1, ep=1, etp=2)
    assert [f for f, _ in errs] == ["etp"]
    dense = JobSpec(model=load_model("gpt3-1.3b"), cluster=load_cluster("a100x16"), global_batch_size=32,
                    seq_length=1024)
    sh = enumerate_shapes(dense).shapes
    assert set(sh.ep.tolist()) == {1} and set(sh.etp.tolist()) == {1}
    _, errs = config_violations(dense, tp=1, pp=1, cp=1, vp=1, micro_batch_size=1, recompute="none",
                                sequence_parallel=False, zero=1, ep=2, etp=1)
    assert [f for f, _ in errs] == ["ep"]
