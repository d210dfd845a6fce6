"""Solving the joint model: scale, build, check the scaling, solve, then make the answer
canonical, and check it against the float formulation.

- Time quantum q: the incumbent's step maps to `OBJECTIVE_UNITS` quanta (as the homogeneous
  encoding), so coefficients stay below the scaling guard's limits (`check_scaling`).
- Phase 1 minimises the step with the user's workers and seed, capped at the incumbent.
- When phase 1 proves its optimum: phase 2 fixes the objective and takes the shape first in
  `ParallelConfig.key()` order (then fewest GPUs); phase 3 fixes that shape and finds the
  pools, nodes and split with one worker, seed 0 and a deterministic time limit, preferring
  lower pool indices on earlier stages. The answer is then the same across seeds and worker
  counts.
- Every answer is re-evaluated by the float formulation; the bound is q x CP-SAT's bound
  (every shape left out lies above the incumbent, so it bounds the whole joint space); the
  integer objective is within `tolerance_s` of the float one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...search.cpsat.ortools_cp import cp_model
from ...search.cpsat.scaling import OBJECTIVE_UNITS, check_scaling
from ...search.cpsat.solve import plan_status, solve_model
from ...search.result import PlanStatus
from .heuristic import Assignment
from .model import JointModel, build_joint_model, int_tables, objective_q
from .prepare import JointCandidates

PHASE3_DETERMINISTIC_S = 10.0


@dataclass
class JointOutcome:
    status: PlanStatus
    plan: Optional[Assignment]  # k indexes the candidates' shapes
    step_time_s: Optional[float]
    bound_s: Optional[float]
    tolerance_s: Optional[float]
    stats: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


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


def _phase(name, solver, st, stats) -> None:
    stats.setdefault("phases", []).append({
        "phase": name, "status": plan_status(st), "wall_time_s": solver.wall_time,
        "branches": solver.num_branches, "conflicts": solver.num_conflicts})


def solve_joint(cands: JointCandidates, time_limit_s: float, workers: int = 1, seed: int = 0,
                fixed_layers: Optional[tuple[int, ...]] = None) -> JointOutcome:
    """The fastest plan among the candidates (module docstring); `fixed_layers`: place a plan
    whose shape (the candidates' only one) and split are given."""
    t0 = time.perf_counter()
    deadline = t0 + float(time_limit_s)
    pr = cands.prices
    stats: dict = {"shapes_in_model": 0}
    notes: list[str] = []
    if cands.num_survivors == 0:
        notes.append("no shape has a layer split that fits on any pool's GPUs")
        return JointOutcome("INFEASIBLE", None, None, None, None, stats, notes)
    inc = cands.incumbent
    ref = cands.incumbent_step_s if inc is not None else 4.0 * float(np.max(cands.lower_bound_s))
    q = ref * (1 + 1e-9) / OBJECTIVE_UNITS
    ks = np.arange(cands.num_survivors)
    tab = int_tables(cands, ks, q)
    cap = objective_q(tab, cands, inc.k, inc) if inc is not None else None
    rank = shape_ranks(cands)
    tolerance = (3 * pr.L + 3 * int(pr.shapes.pp.max()) + 3) * q + 1e-9 * ref
    if inc is not None and time.perf_counter() >= deadline:
        return _unproven(cands, inc, t0, stats, notes, "preparing the candidates")
    jm = build_joint_model(cands, tab, cap, rank, hint=(inc.k, inc) if inc is not None else None,
                           fixed_layers=fixed_layers)
    stats.update(jm.stats, time_quantum_s=q, tolerance_s=tolerance, cap_quanta=cap,
                 build_time_s=time.perf_counter() - t0)
    if inc is not None and time.perf_counter() >= deadline:
        return _unproven(cands, inc, t0, stats, notes, "building the model")
    stats.update(check_scaling(jm.model))
    solver, st = solve_model(jm.model, deadline - time.perf_counter(), workers, seed)
    _phase("optimize", solver, st, stats)
    status = plan_status(st)
    if status == "INFEASIBLE" and inc is not None:
        notes.append("CP-SAT answered INFEASIBLE although the incumbent fits: verdict refuted, returning it unproven")
        status, solver = "FEASIBLE", None
    if status in ("INFEASIBLE", "UNKNOWN") and inc is None:
        return JointOutcome(status, None, None, None, tolerance, stats, notes)
    if solver is None or status == "UNKNOWN":
        plan, value, bound_q = inc, cap, None
        status = "FEASIBLE"
        notes.append("no CP-SAT solution within the time limit: the heuristic plan, unproven")
    else:
        plan = read_plan(jm, solver, cands)
        value = int(round(solver.objective_value))
        bound_q = int(math.floor(solver.best_objective_bound + 1e-9))
        if status == "OPTIMAL":
            plan = _canonical(jm, cands, plan, value, deadline, workers, seed, stats, notes)
    plan = Assignment(int(ks[plan.k]), plan.pools, plan.nodes, plan.layers, math.nan)
    ev = pr.evaluate(plan.k, plan.pools, plan.nodes, plan.layers)
    if not ev.fits:
        notes.append("the model's plan does not fit under the float formulation: returning the incumbent unproven")
        plan, status, bound_q = inc, "FEASIBLE", None
        ev = pr.evaluate(plan.k, plan.pools, plan.nodes, plan.layers)
    if inc is not None and cands.incumbent_step_s < ev.step_time_s - tolerance:
        notes.append("the heuristic plan is faster than the model's by more than the tolerance: returning it")
        plan, ev = inc, pr.evaluate(inc.k, inc.pools, inc.nodes, inc.layers)
    bound = bound_q * q if bound_q is not None else None
    if bound is not None and bound > ev.step_time_s * (1 + 1e-9):
        notes.append(f"bound {bound:.9g} s exceeds the plan's {ev.step_time_s:.9g} s: bound discarded")
        bound, status = None, "FEASIBLE"
    plan = Assignment(plan.k, plan.pools, plan.nodes, plan.layers, ev.step_time_s)
    stats["wall_time_s"] = time.perf_counter() - t0
    stats["objective_quanta"] = value
    return JointOutcome(status, plan, ev.step_time_s, bound, tolerance, stats, notes)


def _unproven(cands: JointCandidates, inc: Assignment, t0: float, stats: dict, notes: list[str],
              spent_on: str) -> JointOutcome:
    """The incumbent, FEASIBLE without a bound, when the time limit is spent before CP-SAT can
    start: a large joint model is not solved past the caller's limit."""
    ev = cands.prices.evaluate(inc.k, inc.pools, inc.nodes, inc.layers)
    notes.append(f"the time limit was spent {spent_on}: the heuristic plan, unproven (raise the time limit "
                 f"for a proof)")
    stats["wall_time_s"] = time.perf_counter() - t0
    return JointOutcome("FEASIBLE", Assignment(inc.k, inc.pools, inc.nodes, inc.layers, ev.step_time_s),
                        ev.step_time_s, None, None, stats, notes)


def _canonical(jm: JointModel, cands, plan: Assignment, value: int, deadline: float, workers: int, seed: int,
               stats: dict, notes: list[str]) -> Assignment:
    """Phases 2 and 3 (module docstring): the same answer across seeds and worker counts."""
    md = jm.model
    md.add(jm.obj <= value)
    if len(jm.x) > 1 and deadline - time.perf_counter() > 0.05:
        md.minimize(jm.rank_expr)
        s2, st2 = solve_model(md, deadline - time.perf_counter(), workers, seed)
        _phase("canonical-shape", s2, st2, stats)
        if st2 == cp_model.OPTIMAL:
            plan = read_plan(jm, s2, cands)
        else:
            notes.append("tie-break among optimal shapes not finished in time: the shape may differ between runs")
            return plan
    for j, xv in enumerate(jm.x):
        md.add(xv == int(j == plan.k))
    P = max(len(row) for row in jm.a)
    md.minimize(sum((pl * (jm.num_stages - s)) * av for s, row in enumerate(jm.a) for pl, av in enumerate(row)
                    if av is not None and pl))
    md.clear_hints()
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.num_workers, prm.random_seed = 1, 0
    prm.max_deterministic_time = PHASE3_DETERMINISTIC_S
    prm.max_time_in_seconds = max(0.05, deadline - time.perf_counter())
    prm.catch_sigint_signal = False
    st3 = solver.solve(md)
    _phase("canonical-placement", solver, st3, stats)
    if st3 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return read_plan(jm, solver, cands)
    notes.append("canonical placement not found in time: the placement may differ between runs")
    del P
    return plan
