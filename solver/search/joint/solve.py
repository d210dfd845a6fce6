"""Solving the joint model: scale, build, check the scaling, solve, then make the answer
canonical, and check it against the float formulation.

- Time quantum q: the incumbent's step maps to `OBJECTIVE_UNITS` quanta (as the homogeneous
  encoding), so coefficients stay below the scaling guard's limits (`check_scaling`).
- Branch and bound over shapes (`solve_joint`): the candidates in order of their bound, in
  models of at most MODEL_ROWS estimated rows, each minimising the step with the user's
  workers and seed, capped at the best plan so far; shapes whose bound passes it are dropped.
- When every model is solved: the model that gave the best plan fixes the objective and takes
  the shape first in `ParallelConfig.key()` order (phase 2); phase 3 fixes that shape and
  finds the pools, nodes and split with one worker, seed 0 and a deterministic time limit,
  preferring lower pool indices on earlier stages. The answer is then the same across seeds
  and worker counts.
- The answer is a search method's `MethodResult` (`method_result`: its choice a `PlacedChoice`,
  the tolerance and notes in its statistics), as `search.cpsat` and `search.baselines` give it.
- Every answer is re-evaluated by the float formulation; the bound is the least of the plan's
  step, each model's optimum (q x CP-SAT's bound where it stopped short), the relaxation's
  bound of every shape not modelled and the preparation's `outside_bound_s` (every shape left
  out lies above the incumbent, or is counted there), so it bounds the whole joint space; the
  integer objective is within `tolerance_s` of the float one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ...search.cpsat.ortools_cp import cp_model
from ...search.cpsat.scaling import check_scaling, time_quantum_s
from ...search.cpsat.solve import plan_status, solve_model
from ...search.result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Choice, MethodResult, PlanStatus
from ...specs.deadline import Deadline
from ..phases import Phase, Phases
from .heuristic import Assignment
from .model import JointModel, build_joint_model, int_tables, objective_q
from .prepare import JointCandidates

PHASE3_DETERMINISTIC_S = 10.0
# estimated cost rows of one model (`model_rows`): CP-SAT's presolve does not keep to the time
# limit on a large model (850k rows: 390 s against 27 s on 2 cores); models of this size take
# a few seconds to build and presolve there, and a small model finds good plans sooner
MODEL_ROWS = 10_000
# The phases (`search.phases`): a model or a canonical step leaves 0.1 s of the limit for what
# follows the last model (float check, the result); none starts with less than 0.05 s left.
PHASES = (Phase("start", keep_s=0.05), Phase("model", keep_s=0.1), Phase("canonical-shape", keep_s=0.1),
          Phase("canonical-placement", keep_s=0.1))


@dataclass
class PlacedChoice(Choice):
    """A joint answer as a search method's choice (`search.result.Choice`: `index` into the joint
    candidates' shapes, the split, the float step time) with every stage's pool and nodes."""

    pools: tuple[int, ...] = ()
    nodes: tuple[tuple[int, ...], ...] = ()

    @classmethod
    def of(cls, a: Assignment) -> PlacedChoice:
        return cls(a.k, list(a.layers), a.objective_s, a.pools, a.nodes)

    def assignment(self) -> Assignment:
        return Assignment(self.index, self.pools, self.nodes, tuple(self.layers), self.objective_s)


def method_result(status: PlanStatus, plan: Assignment | None, bound_s: float | None,
                  tolerance_s: float | None, stats: dict, notes: list[str],
                  evaluations: int | None = None) -> MethodResult:
    """The joint search's answer as every search method gives it (`search.result.MethodResult`):
    the tolerance and the notes in its statistics, as the main path's methods put them;
    finished when the verdict is proven (OPTIMAL or INFEASIBLE)."""
    return MethodResult(status, PlacedChoice.of(plan) if plan is not None else None, bound_s=bound_s,
                        evaluations=evaluations, finished=status in (OPTIMAL, INFEASIBLE),
                        stats={**stats, "tolerance_s": tolerance_s, "notes": list(notes)})


def shape_ranks(cands: JointCandidates) -> np.ndarray:
    """Position of each shape in (tp, cp, pp, vp, micro-batch, recompute, SP, ZeRO, dp) order (recompute
    by its code, in `space.shapes.RECOMPUTE_CODES` order)."""
    sh = cands.prices.shapes
    keys = (sh.tp, sh.cp, sh.pp, sh.vp, sh.micro_batch_size, sh.recompute, sh.sequence_parallel.astype(np.int64),
            sh.zero, sh.dp)
    order = np.lexsort(tuple(reversed(keys)))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def read_plan(jm: JointModel, solver, cands: JointCandidates) -> Assignment:
    j = next(j for j, xv in enumerate(jm.x) if solver.boolean_value(xv))
    k = int(jm.ks[j])
    p = int(cands.prices.shapes.pp[k])
    classes = [list(m) for m in cands.nodes.classes]
    pools, node_lists, layers = [], [], []
    for s in range(p):
        pools.append(next(pl for pl, av in enumerate(jm.a[s]) if av is not None and solver.boolean_value(av)))
        mine = []
        for c, nv in enumerate(jm.n[s]):
            cnt = int(solver.value(nv))
            mine += classes[c][:cnt]
            classes[c] = classes[c][cnt:]
        node_lists.append(tuple(sorted(mine)))
        layers.append(int(solver.value(jm.layers[s])))
    return Assignment(j, tuple(pools), tuple(node_lists), tuple(layers), math.nan)


def _phase(run: Phases, name: str, solver, st, stats: dict) -> None:
    """One CP-SAT solve's time and statistics, recorded as a run of phase `name`."""
    run.record(name, solver.wall_time, status=plan_status(st), branches=solver.num_branches,
               conflicts=solver.num_conflicts)
    stats["phases"] = run.times


def model_rows(cands: JointCandidates, ks) -> np.ndarray:
    """Per shape, an upper estimate of the cost rows it adds to the model: per stage, pool and
    ring level 4 rows, per stage and boundary level 4 more (`model.build_joint_model`)."""
    levels = cands.prices.sentinel + 1
    pp = cands.prices.shapes.pp[np.asarray(ks, dtype=np.int64)]
    return pp * (4 * len(cands.prices.views) * levels + 4 * levels)


def batches(cands: JointCandidates, ks: np.ndarray, budget_rows: int) -> list[np.ndarray]:
    """The shapes `ks` (in order of their bound) cut into consecutive batches of at most
    `budget_rows` estimated rows (at least one shape each)."""
    rows = model_rows(cands, ks)
    out: list[np.ndarray] = []
    cur: list[int] = []
    used = 0
    for k, r in zip(ks.tolist(), rows.tolist()):
        if cur and used + r > budget_rows:
            out.append(np.array(cur, dtype=np.int64))
            cur, used = [], 0
        cur.append(k)
        used += r
    if cur:
        out.append(np.array(cur, dtype=np.int64))
    return out


@dataclass
class _Search:
    """The branch and bound's state: the best plan so far (k indexes the candidates), its
    objective in quanta, the model that proved it optimal with its batch (None otherwise), the
    bounds of the shapes decided or left out, and whether every shape was decided."""

    cands: JointCandidates
    q: float  # seconds per quantum
    t0: float
    run: Phases  # the time limit from t0, shared out among the models and the canonical steps
    best: Assignment | None
    best_q: int | None = None
    best_jm: tuple[JointModel, np.ndarray] | None = None
    bounds_s: list = field(default_factory=list)
    resolved: bool = True
    stats: dict = field(default_factory=lambda: {"shapes_in_model": 0, "models": 0})
    notes: list[str] = field(default_factory=list)

    def out_of_time(self) -> bool:
        return self.run.budget_s("start") <= 0

    def stop_short(self, batch: np.ndarray, note: str) -> None:
        """The time limit is spent before `batch` and the batches after it are solved: their
        relaxation bounds stand."""
        self.resolved = False
        self.bounds_s.append(float(self.cands.lower_bound_s[batch].min()))
        self.notes.append(note)


def solve_joint(cands: JointCandidates, time_limit_s: float, workers: int = 1, seed: int = 0,
                fixed_layers: tuple[int, ...] | None = None, progress=None,
                deadline: Deadline | None = None) -> MethodResult:
    """The fastest plan among the candidates (module docstring); `fixed_layers`: place a plan
    whose shape (the candidates' only one) and split are given; `deadline`: the caller's (the
    limit is at most what it leaves; stopping it stops the solves).

    Branch and bound over shapes: the candidates in order of their bound, in models of at most
    MODEL_ROWS estimated rows (a larger model's presolve alone overran the time limit), each
    capped at the best plan so far; shapes whose bound passes the best plan are dropped. The
    bound returned is the least of: the best plan, each solved model's optimum (or CP-SAT's
    bound where it stopped short), the relaxation's bound of every shape not yet in a model,
    and the candidates' `outside_bound_s` -- a valid bound over the whole joint space.
    `progress(info)`: before each model, the phase, the best plan and that bound so far."""
    t0 = time.perf_counter()
    dl = deadline if deadline is not None else Deadline()
    run = Phases(min(float(time_limit_s), dl.left_s()), PHASES, start=t0)
    if cands.num_survivors == 0:
        return _nothing_to_model(cands)
    inc = cands.incumbent
    ref = cands.incumbent_step_s if inc is not None else 4.0 * float(np.max(cands.lower_bound_s))
    q = time_quantum_s(ref)
    pr = cands.prices
    tolerance = (3 * pr.L + 3 * int(pr.shapes.pp.max()) + 3) * q + 1e-9 * ref
    search = _Search(cands, q, t0, run, inc, bounds_s=[cands.outside_bound_s])
    if inc is not None:
        search.best_q = objective_q(int_tables(cands, [inc.k], q), cands, 0, inc)
    rank = shape_ranks(cands)
    pending = np.argsort(cands.lower_bound_s, kind="stable")
    for batch in batches(cands, pending, MODEL_ROWS):
        if search.best_q is not None:
            batch = batch[cands.lower_bound_s[batch] <= search.best_q * q * (1 + 1e-9)]
        if not len(batch):
            continue
        if not _model_batch(search, np.sort(batch), len(pending), rank, fixed_layers, workers, seed, progress,
                            float(time_limit_s), dl):
            break
    best, best_q = search.best, search.best_q
    if best is None or best_q is None:  # INFEASIBLE only when every shape was decided (best_q: set with best)
        none_fit = search.resolved and not math.isfinite(cands.outside_bound_s)
        return method_result(INFEASIBLE if none_fit else UNKNOWN, None, None, tolerance, search.stats, search.notes)
    return _outcome(search, best, best_q, tolerance, workers, seed, dl)


def _nothing_to_model(cands: JointCandidates) -> MethodResult:
    """No candidate: the time limit passed before any shape was bounded, or none fits."""
    stats: dict = {"shapes_in_model": 0, "models": 0}
    if math.isfinite(cands.outside_bound_s):
        return method_result(UNKNOWN, None, None, None, stats,
                             ["the time limit was spent before any shape was bounded: no plan"])
    return method_result(INFEASIBLE, None, None, None, stats, ["no shape has a layer split that fits on any pool's GPUs"])


def _model_batch(search: _Search, batch: np.ndarray, num_pending: int, rank: np.ndarray,
                 fixed_layers: tuple[int, ...] | None, workers: int, seed: int, progress, time_limit_s: float,
                 dl: Deadline) -> bool:
    """Build and solve the model of the shapes `batch` (sorted), capped at the best plan so far,
    and take its answer; False when the search stops here."""
    cands, stats, q, lb = search.cands, search.stats, search.q, search.cands.lower_bound_s
    if search.out_of_time():
        search.stop_short(batch, f"the time limit was spent before {len(batch)} shape(s) and those after them "
                                 f"were modelled: their relaxation bounds stand")
        return False
    if progress is not None:
        progress({"method": "joint", "phase": f"CP-SAT model {stats['models'] + 1} ({len(batch)} shapes; "
                                              f"{stats['shapes_in_model']} of {num_pending} modelled)",
                  "best_s": search.best_q * q if search.best_q is not None else None,
                  "bound_s": min(search.bounds_s + [float(lb[batch].min())]),
                  "elapsed_s": time.perf_counter() - search.t0, "limit_s": time_limit_s, "final": False})
    best = search.best
    hint = (int(np.flatnonzero(batch == best.k)[0]), best) if best is not None and best.k in batch else None
    t_build = time.perf_counter()
    jm = build_joint_model(cands, int_tables(cands, batch, q), search.best_q, rank[batch], hint=hint,
                           fixed_layers=fixed_layers)
    stats["models"] += 1
    stats["shapes_in_model"] += len(batch)
    stats.update({k: v for k, v in jm.stats.items() if k != "shapes_in_model"})
    stats["build_time_s"] = stats.get("build_time_s", 0.0) + (time.perf_counter() - t_build)
    if search.out_of_time():
        search.stop_short(batch, "the time limit was spent building a model: the relaxation bounds of its shapes "
                                 "stand")
        return False
    stats.update(check_scaling(jm.model))
    solver, st = solve_model(jm.model, search.run.budget_s("model"), workers, seed, deadline=dl)
    _phase(search.run, "optimize", solver, st, stats)
    return _take_answer(search, jm, batch, solver, plan_status(st))


def _take_answer(search: _Search, jm: JointModel, batch: np.ndarray, solver, status: PlanStatus) -> bool:
    """A model's answer: a better plan, the model's bound; False when it stopped short (the
    search stops: the shapes after it keep their relaxation bounds)."""
    q = search.q
    if status == OPTIMAL:
        value = int(round(solver.objective_value))
        search.bounds_s.append(value * q)
        if search.best_q is None or value < search.best_q or (search.best_jm is None and value <= search.best_q):
            search.best, search.best_q = _global(read_plan(jm, solver, search.cands), batch), value
            search.best_jm = (jm, batch)
        return True
    if status == INFEASIBLE:
        if search.best_q is not None:  # else no plan of these shapes fits: nothing to bound
            search.bounds_s.append(search.best_q * q)
        return True
    search.resolved = False  # stopped short: its own bound, and the rest keep theirs
    if status == FEASIBLE:
        value = int(round(solver.objective_value))
        search.bounds_s.append(math.floor(solver.best_objective_bound + 1e-9) * q)
        if search.best_q is None or value < search.best_q:
            search.best, search.best_q = _global(read_plan(jm, solver, search.cands), batch), value
            search.best_jm = None
    else:
        search.bounds_s.append(float(search.cands.lower_bound_s[batch].min()))
    return False


def _outcome(search: _Search, best: Assignment, best_q: int, tolerance: float, workers: int, seed: int,
             dl: Deadline) -> MethodResult:
    """The best plan (`best_q` quanta) made canonical when proven optimal, checked against the
    float formulation and the incumbent, with the least bound."""
    cands, stats, notes, q = search.cands, search.stats, search.notes, search.q
    pr, inc = cands.prices, cands.incumbent
    status = OPTIMAL if search.resolved and cands.outside_bound_s >= best_q * q else FEASIBLE
    plan = best
    if status == OPTIMAL and search.best_jm is not None:
        jm, batch = search.best_jm
        local = Assignment(int(np.flatnonzero(batch == plan.k)[0]), plan.pools, plan.nodes, plan.layers, math.nan)
        plan = _global(_canonical(jm, cands, local, best_q, search.run, workers, seed, stats, notes, dl), batch)
    ev = pr.evaluate(plan.k, plan.pools, plan.nodes, plan.layers)
    if not ev.fits:
        if inc is None:  # nothing verified to return: no plan, not a crash
            notes.append("the model's plan does not fit under the float formulation and no heuristic plan is known: "
                         "no plan")
            return method_result(UNKNOWN, None, None, tolerance, stats, notes)
        notes.append("the model's plan does not fit under the float formulation: returning the incumbent unproven")
        plan, status = inc, FEASIBLE
        ev = pr.evaluate(plan.k, plan.pools, plan.nodes, plan.layers)
    if inc is not None and cands.incumbent_step_s < ev.step_time_s - tolerance:
        notes.append("the heuristic plan is faster than the model's by more than the tolerance: returning it")
        plan, ev = inc, pr.evaluate(inc.k, inc.pools, inc.nodes, inc.layers)
    bound = min([ev.step_time_s] + [b for b in search.bounds_s if b is not None])
    if bound > ev.step_time_s * (1 + 1e-9):
        notes.append(f"bound {bound:.9g} s exceeds the plan's {ev.step_time_s:.9g} s: bound discarded")
        bound, status = None, FEASIBLE
    plan = Assignment(plan.k, plan.pools, plan.nodes, plan.layers, ev.step_time_s)
    stats["wall_time_s"] = time.perf_counter() - search.t0
    stats["objective_quanta"] = best_q
    stats["time_quantum_s"], stats["tolerance_s"] = q, tolerance
    return method_result(status, plan, bound, tolerance, stats, notes)


def _global(a: Assignment, batch: np.ndarray) -> Assignment:
    """A model's plan (k indexes its batch) with k indexing the candidates."""
    return Assignment(int(batch[a.k]), a.pools, a.nodes, a.layers, a.objective_s)


def _canonical(jm: JointModel, cands, plan: Assignment, value: int, run: Phases, workers: int, seed: int,
               stats: dict, notes: list[str], dl: Deadline) -> Assignment:
    """Phases 2 and 3 (module docstring): the same answer across seeds and worker counts."""
    md = jm.model
    md.add(jm.obj <= value)
    if len(jm.x) > 1 and run.budget_s("canonical-shape") > 0.05:
        md.minimize(jm.rank_expr)
        s2, st2 = solve_model(md, run.budget_s("canonical-shape"), workers, seed, deadline=dl)
        _phase(run, "canonical-shape", s2, st2, stats)
        if st2 == cp_model.OPTIMAL:
            plan = read_plan(jm, s2, cands)
        else:
            notes.append("tie-break among optimal shapes not finished in time: the shape may differ between runs")
            return plan
    for j, xv in enumerate(jm.x):
        md.add(xv == int(j == plan.k))
    md.minimize(sum((pl * (jm.num_stages - s)) * av for s, row in enumerate(jm.a) for pl, av in enumerate(row)
                    if av is not None and pl))
    md.clear_hints()
    solver, st3 = solve_model(md, run.budget_s("canonical-placement", 0.05), 1, 0,
                              deterministic_s=PHASE3_DETERMINISTIC_S, deadline=dl)
    _phase(run, "canonical-placement", solver, st3, stats)
    if st3 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return read_plan(jm, solver, cands)
    notes.append("canonical placement not found in time: the placement may differ between runs")
    return plan
