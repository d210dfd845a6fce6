"""Legal parallel shapes of a job, enumerated in numpy (docs/DESIGN.md section 4).

A shape fixes tp, cp, pp, dp (tp*cp*pp*dp = GPUs), vp, micro-batch size, recompute, sequence
parallelism and the ZeRO stage; the layer split is chosen later. Legality follows
Megatron-LM's checks:
- tp divides the attention heads, the KV heads (query groups) and the FFN width;
- cp needs flash attention and a sequence length divisible by 2*cp (load-balanced causal CP), and
  with attention sinks a TP rank's query and KV heads divisible by cp (all-to-all CP); a hybrid model's cp
  only without Mamba layers and with its Gated DeltaNet heads a multiple of tp x cp (`hybrid_cp_violations`);
- pp <= layers; the global batch divides into dp * micro_batch_size;
- interleaving (vp > 1) needs pp >= 2, pp*vp <= layers and micro-batches divisible by pp
  (Megatron-Core's default micro-batch group of pp per virtual stage); the search tries the vp
  that split the layers into equal chunks (`--num-layers-per-virtual-pipeline-stage`), any
  vp a constraint names (uneven chunks go through `--pipeline-model-parallel-layout`);
- the embedding and the loss may count as layers of the split (Megatron's
  `--account-for-embedding/loss-in-pipeline-split`, `pipeline_split`): the split is then
  Megatron's, and the search tries it where interleaving needs it (a named vp with pp*vp above
  L; vp unnamed, a depth whose L layers make no equal chunks while L + 1 or L + 2 slots do), or
  wherever the constraints name the knob;
- sequence parallelism only with tp > 1; optimizer sharding only with dp*cp > 1;
  ZeRO-3 only without pipelining;
- a mixture-of-experts model adds expert parallelism (ep, etp) with Megatron-Core's parallel
  folding and its rules (`space.experts`): SP whenever tp > 1; a dense model keeps
  ep = etp = 1;
- Megatron-FSDP's HSDP instances (the job's distributed_optimizer_instances) divide dp x cp and
  the expert data parallelism (`space.experts.hsdp_violations`).
User constraints (`Constraints`) filter every knob. `space.rules.config_violations` checks
the same rules on one explicit configuration (a test checks that both agree).

Dominance (a zero=0 shape whose zero=1 twin is never slower) depends on costs, so it is
applied above this layer (`search.candidates.prepare`, `formulation.job.zero0_dominated`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import InputError
from ..specs import JobSpec
from ..specs.frameworks import torchtitan_ep_fits
from ..specs.peft import FROZEN_ZERO_UNPRICED
from .experts import (
    cp_a2a_violations,
    dsv4_violations,
    expert_degrees,
    hsdp_violations,
    hybrid_cp_violations,
    tp_split_widths,
)
from .pipeline_split import slot_count, unit_split
from .shapes import RECOMPUTE_CODES, Shapes

# How much an enumeration may build, by default (the CLI, the Python library): legal shapes,
# and shapes x the most pipeline stages (the width of the per-stage arrays the formulation and
# the search build over them). The largest catalog jobs need ~2.1e5 shapes and ~9e6 cells; the
# HTTP service and admission control set tighter limits (admission/limits.py).
MAX_SHAPES = 2_000_000
MAX_SHAPE_STAGES = 200_000_000


@lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of n, ascending, in O(sqrt n)."""
    small, large = [], []
    for k in range(1, math.isqrt(n) + 1):
        if n % k == 0:
            small.append(k)
            if k != n // k:
                large.append(n // k)
    return tuple(small + large[::-1])


@dataclass(frozen=True)
class Space:
    shapes: Shapes
    num_legal: int


def interleavings(num_layers: int, pp: int, named=None) -> list[int]:
    """The vp > 1 to search for `pp` stages: those giving equal chunks of layers, or (when a
    constraint names vp values) every named one that leaves each chunk a layer."""
    if named is not None:
        return [v for v in named if v > 1 and pp * v <= num_layers]
    return [v for v in range(2, num_layers // pp + 1) if num_layers % (pp * v) == 0]


ACCOUNT_KNOBS = ("account_for_embedding", "account_for_loss")


def pipeline_variants(job: JobSpec, pp: int, interleave: bool) -> list[tuple[int, bool, bool]]:
    """(vp, account_for_embedding, account_for_loss) to search for `pp` stages (`interleave`:
    the micro-batches allow vp > 1): vp 1 and `interleavings` with the planner's own split,
    then Megatron's accounted splits (module docstring). Where the constraints leave the knobs
    unset, accounted splits come only where interleaving needs them: a named vp with pp*vp above
    the layers, or, vp unnamed, a depth whose layers split into no equal chunks (126 layers over
    pp 16 or 32); a depth that interleaves already gains a vp or two of bubble at most."""
    cons, model = job.constraints, job.model
    L = model.num_pipeline_units
    vps = [1] + (interleavings(L, pp, cons.vp) if pp >= 2 and interleave else [])
    if job.moe_a2a_overlap and pp > 1:  # Megatron's EP overlap needs a virtual pipeline
        vps = vps[1:]
    plain = [v for v in vps if cons.allows("vp", v)] if all(cons.allows(k, False) for k in ACCOUNT_KNOBS) else []
    out = [(v, False, False) for v in plain]
    named = any(getattr(cons, k) is not None for k in ACCOUNT_KNOBS)
    interleaves = any(v > 1 for v in plain)
    needed = lambda v: named or (v not in plain if cons.vp is not None else not interleaves)  # noqa: E731
    for e, loss in ((True, False), (False, True), (True, True)):
        if model.is_hybrid or not (cons.allows("account_for_embedding", e) and cons.allows("account_for_loss", loss)):
            continue
        S = slot_count(model.num_layers, e, loss)
        for v in _accounted_vps(S, pp, cons.vp, interleave, named):
            if needed(v) and cons.allows("vp", v) and not (job.moe_a2a_overlap and pp > 1 and v == 1) \
                    and unit_split(model, pp, v, e, loss) is not None:
                out.append((v, e, loss))
    return out


def _accounted_vps(slots: int, pp: int, named, interleave: bool, any_vp: bool) -> list[int]:
    """The vp whose chunks are equal in slots (`pipeline_split`): the named ones, else every
    divisor of slots / pp; vp 1 only when the knobs are named (`any_vp`)."""
    if slots % pp:
        return []
    per = slots // pp
    cands = list(named) if named is not None else range(1, per + 1)
    return [v for v in cands if per % v == 0 and (v == 1 and any_vp or v > 1 and pp >= 2 and interleave)]


def _recomputes(job: JobSpec) -> tuple[str, ...]:
    """Recomputation modes of the space: Megatron's EP all-to-all overlap refuses full (`space.experts`)."""
    return ("none", "selective") if job.moe_a2a_overlap else ("none", "selective", "full")


def _zeros(job: JobSpec) -> tuple[int, ...]:
    """The ZeRO stages a job may take: all four, but 0 and 1 under LoRA, whose frozen base weights stay whole
    (specs/peft.py)."""
    return (0, 1, 2, 3) if job.peft == "none" else tuple(z for z in (0, 1, 2, 3) if z not in FROZEN_ZERO_UNPRICED)


def _allowed(cons, knob, values):
    return [v for v in values if cons.allows(knob, v)]


def _knobs_legal(tp, pp, dp, cp, S, Z, needs_sp: bool = False):
    """Which (sequence parallel, ZeRO) knobs a degree combination allows: SP needs tp > 1,
    optimizer sharding dp*cp > 1, ZeRO-3 no pipelining (scalars or numpy arrays); a MoE model
    or DeepSeek Sparse Attention needs SP with tp > 1 (`_needs_sp`). (A hybrid model's context
    parallelism is a degree rule, `_degrees`.)"""
    ok = ~(S & (tp == 1)) & ~((Z > 0) & (dp * cp == 1)) & ~((Z == 3) & (pp > 1))
    if needs_sp:
        ok = ok & ~(~S & (tp > 1))
    return ok


def _needs_sp(model) -> bool:
    """Whether tp > 1 needs sequence parallelism: Megatron's MoE layer (`space.experts`) and its absorbed MLA under
    DeepSeek Sparse Attention ("AbsorbedMLA requires sequence_parallel when tensor_model_parallel_size > 1",
    experimental_attention_variant/absorbed_mla.py at d98e8a6) refuse to train otherwise."""
    return model.is_moe or model.is_dsa


@dataclass(frozen=True)
class SpaceSize:
    """What enumerating a job would build: legal shapes (a lower bound when
    the count stopped at its limit) and the most pipeline stages among them."""

    shapes: int
    max_pp: int
    stopped: bool

    @property
    def shape_stages(self) -> int:
        return self.shapes * self.max_pp


def space_size(job: JobSpec, stop_above: int | None = None) -> SpaceSize:
    """The number of legal shapes `enumerate_shapes` would build, counted with the same rules
    without building them (O(divisor triples), stopping once over `stop_above`)."""
    cons, B = job.constraints, job.global_batch_size
    S, Z = (x.ravel() for x in np.meshgrid(np.array(_allowed(cons, "sequence_parallel", (False, True)), dtype=bool),
                                           np.array(_allowed(cons, "zero", _zeros(job)), dtype=np.int64), indexing="ij"))
    n_rc = len(_allowed(cons, "recompute", _recomputes(job)))
    total, max_pp = 0, 0
    needs_sp = _needs_sp(job.model)
    for tp, cp, pp, dp in _degrees(job):
        knobs = n_rc * int(_knobs_legal(tp, pp, dp, cp, S, Z, needs_sp).sum()) * len(expert_degrees(job, tp, cp, dp))
        if knobs == 0:
            continue
        variants = {ok: len(pipeline_variants(job, pp, ok)) for ok in (False, True)}
        for mbs in _allowed(cons, "micro_batch_size", divisors(B // dp)):
            n = variants[(B // (dp * mbs)) % pp == 0]
            if n:
                total += n * knobs
                max_pp = max(max_pp, pp)
        if stop_above is not None and total > stop_above:
            return SpaceSize(total, max_pp, True)
    return SpaceSize(total, max_pp, False)


def check_space(job: JobSpec, max_shapes: int = MAX_SHAPES, max_shape_stages: int = MAX_SHAPE_STAGES,
                field: str = "") -> SpaceSize:
    """Refuse (InputError naming `field`, with the limit and what to change) a job whose legal
    space is larger than the limits, before anything is built."""
    size = space_size(job, stop_above=max_shapes)
    over = "more than " if size.stopped else ""
    fix = "constrain tp, pp, cp or micro_batch_size (e.g. pp_max), or plan fewer GPUs or a smaller batch"
    if size.shapes > max_shapes:
        raise InputError(field, f"{over}{size.shapes:,} legal parallel shapes, over the limit of {max_shapes:,}; {fix}")
    if size.shape_stages > max_shape_stages:
        raise InputError(field, f"{size.shapes:,} legal shapes of up to {size.max_pp} pipeline stages "
                                f"({size.shape_stages:.3g} shape-stages), over the limit of {max_shape_stages:.3g}; {fix}")
    return size


def _degrees(job: JobSpec):
    """(tp, cp, pp, dp) combinations that pass the divisibility and head rules."""
    model, cons, N = job.model, job.constraints, job.cluster.num_gpus
    B, s, L = job.global_batch_size, job.seq_length, model.num_pipeline_units
    widths = tp_split_widths(model)
    for tp in _allowed(cons, "tp", divisors(N)):
        if model.num_attention_heads % tp or model.num_kv_heads % tp or any(w % tp for w in widths):
            continue
        for cp in _allowed(cons, "cp", divisors(N // tp)):
            if cp > 1 and (not job.flash_attention or s % (2 * cp) or hybrid_cp_violations(model, tp=tp, cp=cp)
                           or cp_a2a_violations(model, tp=tp, cp=cp)):
                continue
            if dsv4_violations(model, tp=tp, cp=cp):  # DeepSeek-V4: tp 1, cp 1
                continue
            for pp in _allowed(cons, "pp", divisors(N // (tp * cp))):
                dp = N // (tp * cp * pp)
                if (pp > L or B % dp or not cons.allows("dp", dp)
                        or hsdp_violations(job, tp=tp, cp=cp, dp=dp, ep=1, etp=1)):  # HSDP's instances divide dp x cp
                    continue
                yield tp, cp, pp, dp


def enumerate_shapes(job: JobSpec, max_shapes: int = MAX_SHAPES, max_shape_stages: int = MAX_SHAPE_STAGES) -> Space:
    """The legal shapes of `job`; a job whose space is over the limits is refused before
    anything is built (`check_space`)."""
    check_space(job, max_shapes, max_shape_stages)
    cons, B = job.constraints, job.global_batch_size
    empty = Space(Shapes(*(np.zeros(0, dtype=np.int64) for _ in range(11))), 0)
    rc_vals = np.array([RECOMPUTE_CODES[r] for r in _allowed(cons, "recompute", _recomputes(job))])
    sp_vals = np.array(_allowed(cons, "sequence_parallel", (False, True)), dtype=bool)
    z_vals = np.array(_allowed(cons, "zero", _zeros(job)))
    if len(rc_vals) == 0 or len(sp_vals) == 0 or len(z_vals) == 0:
        return empty
    # degrees, expert degrees, micro-batching and the pipeline split's variants (tp, pp, dp, cp,
    # vp, mbs, ep, etp, account_for_embedding, account_for_loss): a short Python loop
    base: list[tuple[int, ...]] = []
    for tp, cp, pp, dp in _degrees(job):
        experts = expert_degrees(job, tp, cp, dp)
        variants = {ok: pipeline_variants(job, pp, ok) for ok in (False, True)}
        for mbs in _allowed(cons, "micro_batch_size", divisors(B // dp)):
            m = B // (dp * mbs)
            base.extend((tp, pp, dp, cp, vp, mbs, ep, etp, int(e), int(loss))
                        for vp, e, loss in variants[m % pp == 0] for ep, etp in experts)
    if not base:
        return empty
    # cross product with the knob grid (recompute x SP x ZeRO), vectorised
    R, S, Z = (x.ravel() for x in np.meshgrid(rc_vals, sp_vals, z_vals, indexing="ij"))
    nb, nk = len(base), len(R)
    deg = np.repeat(np.array(base, dtype=np.int64), nk, axis=0)
    R, S, Z = np.tile(R, nb), np.tile(S, nb), np.tile(Z, nb)
    tp, pp, dp, cp = deg[:, 0], deg[:, 1], deg[:, 2], deg[:, 3]
    ok = _knobs_legal(tp, pp, dp, cp, S, Z, _needs_sp(job.model))
    if job.framework == "torchtitan" and job.model.is_moe:  # EP borrows ranks from FSDP and TP there
        ok &= torchtitan_ep_fits(tp=tp, cp=cp, dp=dp, zero=Z, ep=deg[:, 6])
    arr = np.column_stack([deg[ok][:, :6], R[ok], S[ok].astype(np.int64), Z[ok], deg[ok][:, 6:]])
    return Space(Shapes(*(arr[:, i] for i in range(13))), int(ok.sum()))
