"""torchtitan's own ConfigManager loads what `--format torchtitan` writes for the current release
(0.3): the Python config module (`--module solveplan_job --config solveplan_job`) and the
flag line on torchtitan's stock config, for a 7-plan spread (DDP / FSDP with and without
resharding, TP with and without sequence parallelism, CP, 1F1B and interleaved pipelines with
uneven splits, the three recompute modes, FP8), and the loaded config holds the plan: degrees,
batch, schedule and the split.

Needs torchtitan 0.3 and CPU torch, which the `test` extra does not install (torchtitan pulls
torch, datasets, tensorboard, wandb, ...): skipped with that reason where they are missing.
To run it: `pip install torch` (CPU build), then `pip install torchtitan==0.3.0` with its
dependencies. FP8: torchtitan builds Float8Linear while it loads the config function, which
needs an SM89+ GPU and torchao; on CPU the FP8 plan is checked through its flags (bf16) and its
Float8LinearConverter.Config fields."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys

import pytest

from solveplan.catalog import load_cluster, load_model
from solveplan.optimize import optimize
from solveplan.plan import ParallelConfig, make_plan
from solveplan.render.torchtitan import MODULE_NAME, render_torchtitan, torchtitan_config, torchtitan_flags
from solveplan.specs import JobSpec


def _torchtitan():
    try:
        version = importlib.metadata.version("torchtitan")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("torchtitan is not installed (pip install torchtitan==0.3.0 and CPU torch)")
    if not version.startswith("0.3"):
        pytest.skip(f"torchtitan {version} installed; this test loads the 0.3 format")
    try:
        from torchtitan.config import ConfigManager
        import torchtitan.models.llama3.config_registry  # noqa: F401  (its imports: torch, datasets, ...)
    except ImportError as exc:
        pytest.skip(f"torchtitan 0.3 does not import here: {exc}")
    return ConfigManager


def _plan(model, cluster, *, tp=1, pp=1, cp=1, vp=1, zero=1, recompute="selective", sp=None, layers=None,
          precision="bf16", mbs=1):
    m, c = load_model(model), load_cluster(cluster)
    job = JobSpec(model=m, cluster=c, global_batch_size=m.global_batch_size, seq_length=m.seq_length,
                  precision=precision)
    dp = c.num_gpus // (tp * pp * cp)
    par = ParallelConfig(tp=tp, pp=pp, dp=dp, cp=cp, vp=vp, micro_batch_size=mbs,
                         num_microbatches=job.global_batch_size // (dp * mbs), recompute=recompute,
                         sequence_parallel=tp > 1 if sp is None else sp, zero=zero)
    return job, make_plan(job, par, layers or [m.num_layers // pp] * pp)


def _optimized(model, cluster, **kw):
    m = load_model(model)
    job = JobSpec(model=m, cluster=load_cluster(cluster), global_batch_size=kw.pop("batch", m.global_batch_size),
                  seq_length=kw.pop("seq", m.seq_length))
    res = optimize(job, time_limit_s=60)
    assert res.plan is not None
    return job, res.plan


SPREAD = {
    "ddp-tp2-full": lambda: _plan("llama3.1-8b", "h100x64", tp=2, zero=0, recompute="full"),
    "fsdp-1f1b-uneven-no-sp": lambda: _plan("llama3.1-8b", "h100x64", tp=2, pp=4, zero=2, recompute="none",
                                            sp=False, layers=[7, 9, 9, 7]),
    "zero3-tp8-pp4": lambda: _plan("llama3.1-70b", "h100x512", tp=8, pp=4, zero=3, recompute="full"),
    "interleaved-cp2-uneven": lambda: _plan("llama3.1-70b", "h100x512", tp=2, pp=8, cp=2, vp=2,
                                            layers=[9, 10, 10, 10, 10, 10, 10, 11]),
    "fp8-tp4-pp2": lambda: _plan("llama3.1-70b", "h100x512", tp=4, pp=2, precision="fp8"),
    "optimized-8b-131k": lambda: _optimized("llama3.1-8b", "h100x64", batch=16, seq=131072),
    "optimized-mistral": lambda: _optimized("mistral-7b", "a100x64"),
}


def _check(cfg, job, plan, sections):
    par = plan.parallel
    p, t = cfg.parallelism, cfg.training
    assert (p.tensor_parallel_degree, p.context_parallel_degree, p.pipeline_parallel_degree) == (par.tp, par.cp, par.pp)
    assert p.data_parallel_replicate_degree * p.data_parallel_shard_degree == par.dp
    assert (p.data_parallel_replicate_degree == par.dp) == (par.zero == 0)
    if par.zero:
        assert p.fsdp_reshard_after_forward == ("always" if par.zero == 3 else "never")
    if par.tp > 1:
        assert p.enable_sequence_parallel == par.sequence_parallel
    assert (t.seq_len, t.global_batch_size) == (job.seq_length, job.global_batch_size)
    assert type(cfg.activation_checkpoint).__qualname__ == {
        "none": "NoneType", "selective": "SelectiveAC.Config", "full": "FullAC.Config"}[par.recompute]
    if par.pp > 1:
        assert t.local_batch_size * par.dp == job.global_batch_size
        assert p.pipeline_parallel_microbatch_size == par.micro_batch_size
        assert p.pipeline_parallel_schedule == ("Interleaved1F1B" if par.vp > 1 else "1F1B")
        parts = p.module_fqns_per_model_part
        assert parts == sections["parallelism"]["module_fqns_per_model_part"]
        count = [sum(1 for f in part if f.startswith("layers.")) for part in parts]
        assert [sum(count[r::par.pp]) for r in range(par.pp)] == list(plan.layers_per_stage)  # the planned split
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    else:
        assert t.local_batch_size == par.micro_batch_size
        assert p.module_fqns_per_model_part is None


@pytest.mark.parametrize("name", list(SPREAD))
def test_torchtitan_03_loads_the_plan(name, tmp_path, monkeypatch):
    ConfigManager = _torchtitan()
    job, plan = SPREAD[name]()
    sections, _ = torchtitan_config(job, plan)

    cfg = ConfigManager().parse_args(torchtitan_flags(job, plan))  # the flags on torchtitan's stock config
    _check(cfg, job, plan, sections)

    (tmp_path / f"{MODULE_NAME}.py").write_text(render_torchtitan(job, plan))
    if job.precision == "fp8":
        from torchtitan.components.quantization import Float8LinearConverter

        Float8LinearConverter.Config(**sections["float8"], model_compile_enabled=False)  # the fields exist
        compile((tmp_path / f"{MODULE_NAME}.py").read_text(), MODULE_NAME, "exec")
        return
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)
    importlib.invalidate_caches()
    cfg = ConfigManager().parse_args(["--module", MODULE_NAME, "--config", MODULE_NAME])
    _check(cfg, job, plan, sections)
    monkeypatch.delitem(sys.modules, MODULE_NAME, raising=False)
