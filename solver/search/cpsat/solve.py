"""Solving the CP-SAT model (`search`): the exact per-shape optima, one kept model, one solve
per plan of the top-k, every verdict checked against the float formulation.

1. The time quantum q comes from the K-th best heuristic plan (`scale`); the integer form's
   per-shape lower bounds are raised to each shape's exact optimum (`exact.shape_optima`: valid,
   and reached by one split), so the shapes and their order are known before the model is built.
2. One model holds the shapes that can be among the K best (exact optimum <= the K-th best:
   the cap of the objective); the best one with its canonical split is the hint. Its rows
   `objective >= optimum_k * x_k` give CP-SAT the bound at the root.
3. Each round solves the kept model, takes the smallest shape in `ParallelConfig.key()` order
   among those reaching the proven optimum (the deterministic answer), re-evaluates its
   canonical split (`integer.canonical_split`) with the float formulation, and cuts the shape
   off the model (x_k = 0) for the next round.

Presolve is off (it costs ~25 ms a solve and finds nothing to simplify once the exact optima
bound every shape). An INFEASIBLE answer while a fitting plan is known is refuted and the model
re-solved with presolve on; a time limit returns the best known plan (the exact one: its value
is the shapes' bound) and a top-k cut short by the limit is FEASIBLE with the plans found.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...formulation.linear import middle_limits_sorted, pp_blocks
from ...formulation.pipeline import step_time_batch
from ...specs.deadline import Deadline
from ..candidates import Candidates
from ..result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Choice, MethodResult, PlanStatus
from .exact import NO_SPLIT, shape_optima
from .integer import IntegerForm, canonical_split
from .model import Model, add_hint, build_model
from .ortools_cp import cp_model
from .scaling import OBJECTIVE_UNITS, SAFE_COEFFICIENT, check_scaling, time_quantum_s

_STATUS: dict[int, PlanStatus] = {cp_model.OPTIMAL: OPTIMAL, cp_model.FEASIBLE: FEASIBLE,
                                  cp_model.INFEASIBLE: INFEASIBLE, cp_model.UNKNOWN: UNKNOWN}


def plan_status(cp_status: int) -> PlanStatus:
    """A CP-SAT status as data; MODEL_INVALID is a bug in the model, not an answer."""
    if cp_status not in _STATUS:
        raise RuntimeError(f"CP-SAT rejected the model (status {cp_model.CpSolverStatus.Name(cp_status)})")
    return _STATUS[cp_status]


def solve_model(model: cp_model.CpModel, time_s: float, workers: int, seed: int, presolve: bool = True,
                callback=None, deterministic_s: float | None = None,
                deadline: Deadline | None = None) -> tuple[cp_model.CpSolver, int]:
    """Solve with the given limits; returns the solver (for values and statistics) and its status.
    `deterministic_s` also limits CP-SAT's deterministic time (work units, the same on any
    machine), so that one worker's answer does not depend on the load while it stays under
    both limits. `deadline`: the solve gets at most the time it leaves, and stops (StopSearch)
    when it is stopped. Every CP-SAT solve of the package goes through here."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    if deterministic_s is not None:
        prm.max_deterministic_time = max(0.01, float(deterministic_s))
    dl = deadline if deadline is not None else Deadline()
    prm.max_time_in_seconds = dl.solver_s(max(0.01, float(time_s)))
    prm.num_workers = max(1, int(workers))
    prm.random_seed = int(seed)
    # CP-SAT's own Ctrl-C handler is left at SIG_DFL after a solve: Ctrl-C then killed the whole
    # process without cleanup (a sweep could not write the rows it had); Python keeps Ctrl-C
    prm.catch_sigint_signal = False
    if not presolve:
        prm.cp_model_presolve = False
    with dl.stopping(solver.stop_search):
        status = solver.solve(model, callback) if callback is not None else solver.solve(model)
    return solver, status


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, fn, q: float, t0: float, phase: str):
        super().__init__()
        self.fn, self.q, self.t0, self.phase = fn, q, t0, phase

    def on_solution_callback(self):
        try:
            self.fn({"method": "cpsat", "phase": self.phase, "best_s": self.objective_value * self.q,
                     "bound_s": self.best_objective_bound * self.q, "elapsed_s": time.perf_counter() - self.t0,
                     "final": False})
        except Exception:  # noqa: BLE001 - progress must never break the search
            pass


def _read(m: Model, solver) -> tuple[int, list[int]]:
    j = next(j for j, xv in enumerate(m.x) if solver.boolean_value(xv))
    return m.shapes[j], [int(solver.value(lv)) for lv in m.layers]


def _phase_stats(phase: str, solver, status, m: Model) -> dict:
    solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return {"phase": phase, "status": plan_status(status), "wall_time_s": solver.wall_time,
            "branches": solver.num_branches, "conflicts": solver.num_conflicts,
            "num_booleans": solver.num_booleans, "num_variables": len(m.model.proto.variables),
            "num_constraints": len(m.model.proto.constraints),
            "objective": solver.objective_value if solved else None,
            "best_bound": solver.best_objective_bound if solved else None}


def shape_ranks(cands: Candidates) -> np.ndarray:
    """rank[k]: position of shape k in `ParallelConfig.key()` order (the canonical tie-break):
    (tp, cp, pp, vp, micro_batch_size, recompute code, sequence_parallel, zero, ep, etp); shapes
    are distinct in these, dp and the micro-batch count being derived. A test checks the order
    against ParallelConfig.key()."""
    sh = cands.shapes
    keys = (sh.tp, sh.cp, sh.pp, sh.vp, sh.micro_batch_size, sh.recompute, sh.sequence_parallel.astype(np.int64), sh.zero,
            sh.ep, sh.etp)
    order = np.lexsort(tuple(reversed(keys)))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _finish(stats: dict, t0: float, progress, status: PlanStatus, best, bound, top, finished=True) -> MethodResult:
    stats["wall_time_s"] = time.perf_counter() - t0
    stats["status_name"] = status
    if progress is not None:
        try:
            progress({"method": "cpsat", "phase": "done", "status": status,
                      "best_s": best.objective_s if best else None, "bound_s": bound,
                      "elapsed_s": stats["wall_time_s"], "final": True})
        except Exception:  # noqa: BLE001 - progress must never break the search
            pass
    return MethodResult(status=status, best=best, bound_s=bound, top=top, evaluations=None, finished=finished,
                        stats=stats)


@dataclass
class _Answer:
    """A round's plan: shape k with `split`, its objective in quanta, whether it is proven
    optimal and a bound (quanta)."""

    k: int
    split: list[int]
    value: int
    proven: bool
    bound_q: int | None


@dataclass
class _Search:
    cands: Candidates
    deadline: float
    workers: int
    seed: int
    progress: Callable[[dict], None] | None
    t0: float
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    stop: Deadline = field(default_factory=Deadline)  # the caller's: stops the solves when it is stopped
    status0: PlanStatus | None = None  # the first round's status, once known

    def __post_init__(self):
        cands = self.cands
        # the loops' deadline (exact optima, model building): the search's limit, stopped with the caller's
        self.work = self.stop.within(self.deadline - time.perf_counter())
        self.L = cands.num_layers
        self.uneven = cands.job.constraints.uneven_split
        self.form = cands.form
        self.mem_ok = cands.feasible
        self.symmetry = middle_limits_sorted(self.form)
        if not self.symmetry:
            self.notes.append("memory limits are not monotone over middle stages: symmetry breaking off")
        self.h_step = self._heuristic_steps()
        self.rank = shape_ranks(cands)
        self.presolve = False  # see the module docstring
        self._canonical: dict = {}
        self.refuted = False
        self.timed_out = None  # why the exact optima are incomplete

    def _heuristic_steps(self) -> np.ndarray:
        """The float step time of each shape's heuristic split (the candidates' splits, and its
        incumbent): what scales the time quantum."""
        cands, form = self.cands, self.form
        h_step = np.full(cands.num_survivors, np.inf)
        for p, rows in pp_blocks(form.pp):
            st, _, fits = step_time_batch(cands.coeffs.take(rows), cands.splits[rows, :p])
            h_step[rows] = np.where(self.mem_ok[rows] & fits, st, np.inf)
        k0 = cands.incumbent_index
        if k0 is not None:
            h_step[k0] = min(h_step[k0], cands.incumbent_step_s)
        return h_step

    def scale(self, top_k: int, prune: bool = True) -> None:
        """The time quantum (the K-th best heuristic plan maps to OBJECTIVE_UNITS quanta; without
        `prune` the slowest, so that every shape fits under the scaling guard), the integer form,
        and every shape's exact optimum in it (its lower bound from now on)."""
        finite, h_step = np.isfinite(self.h_step), self.h_step
        if finite.any():
            ref = float(np.sort(h_step[finite])[min(top_k, int(finite.sum())) - 1] if prune else h_step[finite].max())
        else:
            ref = 4.0 * float(np.max(self.cands.time_lb_s))
        self.q = time_quantum_s(ref)
        self.iform = iform = IntegerForm.make(self.form, self.cands.time_lb_s, self.q)
        self.tolerance = (2 * self.L + 3) * self.q + 1e-9 * ref
        te = time.perf_counter()
        # only shapes whose floor is under the K-th heuristic plan can be among the K best (its
        # integer objective is at most its float time / q): the others need no exact optimum
        look = np.ones(len(iform.pp), dtype=bool)
        if prune and int(finite.sum()) >= top_k:
            look = iform.objective_floor(self.L) <= math.floor(ref / self.q)
        self.optimum = np.full(len(iform.pp), NO_SPLIT, dtype=np.int64)
        try:
            self.optimum[look] = shape_optima(iform, np.flatnonzero(look), self.L, self.uneven, self.work,
                                              fixed=self.cands.fixed_splits)
        except TimeoutError as exc:
            self.timed_out = str(exc)
        self.reach = self.optimum < NO_SPLIT
        iform.lower_bound = np.where(self.reach, np.maximum(iform.lower_bound, self.optimum), iform.lower_bound)
        self.floor_q = iform.objective_floor(self.L)  # = the optimum where a split fits
        reach = np.flatnonzero(self.reach)
        self.order = reach[np.lexsort((self.rank[reach], self.optimum[reach]))].tolist()  # best first
        self.stats.update(time_quantum_s=self.q, tolerance_s=self.tolerance, objective_units=OBJECTIVE_UNITS,
                          incumbent_s=float(h_step[finite].min()) if finite.any() else None,
                          exact_optima_time_s=time.perf_counter() - te)

    def canonical(self, k: int, target: int) -> list[int] | None:
        """Shape k's canonical split at `target` quanta (memoised: the hint, the known plan and
        the answer are usually the same)."""
        key = (int(k), int(target))
        if key not in self._canonical:
            self._canonical[key] = canonical_split(self.iform, k, int(target), self.L, self.uneven,
                                                   self.cands.accounted_split(k))
        return self._canonical[key]

    def known(self, k: int) -> list[int]:
        """Shape k's canonical split at its exact optimum (a plan known without CP-SAT)."""
        split = self.canonical(k, int(self.optimum[k]))
        assert split is not None, "a shape's exact optimum is the objective of some split"
        return split

    def build(self, top_k: int, prune: bool = True) -> tuple[Model | None, int | None]:
        """The kept model: the shapes whose optimum is at most the K-th best (all shapes, uncapped,
        when none fits: CP-SAT then proves it; every shape that fits, uncapped, without `prune`).
        (model, cap in quanta)."""
        iform, S = self.iform, len(self.iform.pp)
        if self.order and not prune:
            cap, in_model = None, list(self.order)
        elif self.order:
            cap = int(self.optimum[self.order[min(top_k, len(self.order)) - 1]])
            in_model = np.flatnonzero(self.reach & (self.floor_q <= cap)).tolist()
        else:
            cap, in_model = None, list(range(S))
        dropped = [k for k in in_model if iform.coefficient_max(k) > SAFE_COEFFICIENT]
        if dropped:
            self.notes.append(f"scaling guard: {len(dropped)} shape(s) whose coefficients exceed {SAFE_COEFFICIENT} "
                              f"left out of the model: the answer is not proven optimal")
            in_model = [k for k in in_model if k not in dropped]
        self.dropped = bool(dropped)
        self.stats.update(shapes_in_model=len(in_model), shapes_pruned_incumbent=S - len(in_model) - len(dropped),
                          shapes_dropped_scaling=len(dropped), cap_quanta=cap)
        if not in_model:
            return None, cap
        tb = time.perf_counter()
        try:  # the known plan is hinted by solve_round
            m = build_model(iform, in_model, self.L, cap, uneven=self.uneven, symmetry=self.symmetry,
                            deadline=self.work, fixed=self.cands.fixed_splits)
        except TimeoutError as exc:
            self.notes.append(str(exc))
            return None, cap
        self.stats.update(check_scaling(m.model))
        self.stats["build_time_s"] = time.perf_counter() - tb
        return m, cap

    def solve_round(self, round_no: int, m: Model | None, k_known: int | None) -> _Answer | None:
        """Solve the kept model once. None when it proves that nothing fits or finds nothing
        (then `self.status0` may be set); the known plan (shape `k_known`) when CP-SAT cannot
        answer (no model: the time limit stopped its building)."""
        known = None
        if k_known is not None:
            split = self.known(k_known)
            known = _Answer(k_known, split, int(self.optimum[k_known]), False, int(self.optimum[k_known]))
            if m is not None:
                add_hint(m, self.iform, k_known, split)
        left = self.deadline - time.perf_counter()
        if m is None:
            return known
        if left <= 0 and known is not None:
            self.notes.append("time limit reached before the CP-SAT model was solved; returning the best known plan "
                              "(its exact optimum is the shapes' bound)")
            return known
        cb = _Progress(self.progress, self.q, self.t0, "optimize") if self.progress is not None else None
        solver, st = solve_model(m.model, left, self.workers, self.seed, presolve=self.presolve, callback=cb,
                                 deadline=self.stop)
        self.stats["phases"].append(_phase_stats(f"round{round_no}", solver, st, m))
        if st == cp_model.INFEASIBLE and known is not None and not self.refuted:
            self.refuted = True
            self.presolve = not self.presolve
            self.notes.append(f"CP-SAT answered INFEASIBLE although a fitting plan is known (shape {k_known}): "
                              f"verdict refuted; re-solved with presolve {'on' if self.presolve else 'off'}")
            solver, st = solve_model(m.model, max(0.01, self.deadline - time.perf_counter()), self.workers, self.seed,
                                     presolve=self.presolve, deadline=self.stop)
            self.stats["phases"].append(_phase_stats(f"round{round_no}-presolve-{'on' if self.presolve else 'off'}",
                                                     solver, st, m))
        status = plan_status(st)
        if status == INFEASIBLE:
            if known is not None:
                self.notes.append("CP-SAT answers INFEASIBLE again; returning the known plan unproven")
                known.bound_q = None
                return known
            if round_no == 1:
                self.status0 = INFEASIBLE
                if self.mem_ok.any():  # cannot happen: a memory-feasible shape has a split that fits
                    self.notes.append("inconsistent: a shape fits by memory but no plan was found")
            return None
        if status == UNKNOWN:  # time ran out before any solution
            if known is None:
                if round_no == 1:
                    self.status0 = UNKNOWN
                return None
            self.notes.append("CP-SAT found no solution within the time limit; returning the best known plan")
            return known
        k, split = _read(m, solver)
        ans = _Answer(k, split, int(round(solver.objective_value)), status == OPTIMAL,
                      int(math.floor(solver.best_objective_bound + 1e-9)))
        if self.order and ans.bound_q is not None:  # every split of every shape scores at least the least exact optimum
            ans.bound_q = max(ans.bound_q, int(self.optimum[self.order[0]]))
        if self.iform.objective(k, split) > ans.value:
            self.notes.append(f"encoding check failed: the split's integer objective exceeds the solver's {ans.value}; "
                              f"bound not trusted")
            ans.proven, ans.bound_q = False, None
        return ans

    def canonical_shape(self, ans: _Answer, excluded: set[int]) -> None:
        """Of the shapes not yet returned that reach the proven optimum, the first in
        `ParallelConfig.key()` order (the deterministic answer): their exact optima say which."""
        best = min((int(self.optimum[k]) for k in self.order if k not in excluded), default=None)
        if best != ans.value:
            self.notes.append(f"CP-SAT's optimum {ans.value} differs from the shapes' exact optimum {best}: "
                              f"keeping the solver's shape, unproven")
            ans.proven = False
            return
        ans.k = min((k for k in self.order if k not in excluded and self.optimum[k] == best), key=lambda k: self.rank[k])

    def heuristic_answer(self) -> MethodResult:
        """The time limit stopped the exact optima: the best heuristic plan, FEASIBLE, with the
        pruning's lower bound over every shape (UNKNOWN when none is known)."""
        self.notes.append(f"{self.timed_out}; returning the best heuristic plan")
        fin = np.isfinite(self.h_step)
        if not fin.any():
            return self.finish(UNKNOWN, None, None, [], finished=False)
        k = int(np.flatnonzero(fin)[np.argmin(self.h_step[fin])])
        cands = self.cands
        layers = (cands.incumbent_layers if k == cands.incumbent_index and cands.incumbent_step_s <= self.h_step[k]
                  and cands.incumbent_layers is not None else [int(x) for x in cands.splits[k, :int(self.form.pp[k])]])
        best = Choice(index=k, layers=list(layers), objective_s=float(self.h_step[k]))
        self.stats["top_k_found"] = 1
        return self.finish(FEASIBLE, best, float(cands.time_lb_s.min()), [best], finished=False)

    def finish(self, status: PlanStatus, best, bound, top, finished=True) -> MethodResult:
        return _finish(self.stats, self.t0, self.progress, status, best, bound, top, finished)


def search(cands: Candidates, time_limit_s: float, workers: int = 1, top_k: int = 1, seed: int = 0,
           progress: Callable[[dict], None] | None = None, prune: bool = True,
           deadline: Deadline | None = None) -> MethodResult:
    """The fastest fitting (shape, split) of `cands` by CP-SAT, with the solver's bound; with
    `top_k` > 1 the K best distinct shapes (each with its canonical split), best first.

    Returns a MethodResult whose `best.objective_s` is the float formulation's step time of the
    returned plan; `bound_s` a proven lower bound of the optimum (q x the solver's bound);
    `stats` the solver statistics, the quantum (`time_quantum_s`), the optimality tolerance
    (`tolerance_s`), `top_k_asked` / `top_k_found` and `notes`. A top-k stopped by the time
    limit before K plans is FEASIBLE and not finished. `deadline`: the caller's (the limit is
    at most what it leaves; its stop flag stops the solves). `prune=False` keeps every shape that fits in
    the model, uncapped (the cost without pruning against the incumbent: `benchmarks/search_cost.py`)."""
    t0 = time.perf_counter()
    K = max(1, int(top_k))
    notes: list[str] = []
    stats: dict = {"method": "cpsat", "workers": int(workers), "seed": int(seed), "notes": notes, "phases": [],
                   "top_k_asked": K, "top_k_found": 0}
    if cands.num_survivors == 0:
        stats.update(shapes_in_model=0, shapes_memory_infeasible=0)
        notes.append("no legal shape survives the memory lower bound: nothing to search")
        return _finish(stats, t0, progress, INFEASIBLE, None, None, [])
    dl = deadline if deadline is not None else Deadline()
    s = _Search(cands, t0 + min(float(time_limit_s), dl.left_s()), int(workers), int(seed), progress, t0, notes,
                stats, dl)
    stats["shapes_memory_infeasible"] = int((~s.mem_ok).sum())
    s.scale(K, prune)
    if s.timed_out:
        return s.heuristic_answer()
    m, _cap = s.build(K, prune)
    s.status0 = None
    choices, bound0, cut_short = _rounds(s, m, K)
    status0: PlanStatus = s.status0 or UNKNOWN
    best = choices[0] if choices else None
    if status0 == INFEASIBLE:
        best, bound0, choices = None, None, []
    if cut_short and status0 == OPTIMAL:
        status0 = FEASIBLE  # the first plan is proven; the list is not complete
    if status0 == OPTIMAL and best is not None:
        stats["gap_s"] = best.objective_s - bound0 if bound0 is not None else None
    stats["top_k_found"] = len(choices)
    return s.finish(status0, best, bound0, choices, status0 in (OPTIMAL, INFEASIBLE))


def _rounds(s: _Search, m: Model | None, K: int) -> tuple[list[Choice], float | None, bool]:
    """Round r solves the model for the r-th best distinct shape (a no-good cut excludes each
    shape returned): the plans found with their canonical splits, the first round's bound, and
    whether the time limit cut the list short. Sets `s.status0` from the first round."""
    notes = s.notes
    choices: list[Choice] = []
    excluded: set[int] = set()
    bound0: float | None = None
    for round_no in range(1, K + 1):
        remaining = [k for k in s.order if k not in excluded]
        if round_no > 1 and not remaining:
            notes.append(f"only {len(choices)} distinct configuration(s) fit: every one is returned")
            break
        if m is None and (round_no > 1 or not remaining):
            break
        ans = s.solve_round(round_no, m, remaining[0] if remaining else None)
        if ans is None:
            break
        if s.dropped:  # the model did not hold every shape: nothing is proven about the rest
            ans.proven, ans.bound_q = False, None
        if ans.proven:
            s.canonical_shape(ans, excluded)
        canon = s.canonical(ans.k, ans.value)
        if canon is None:
            notes.append("canonical split not found; keeping the solver's split")
            canon = [int(v) for v in ans.split[:int(s.form.pp[ans.k])]]
        step, _, fits = step_time_batch(s.cands.coeffs.take([ans.k]), np.array([canon], dtype=np.int64))
        step_s = float(step[0])
        excluded.add(ans.k)
        if m is not None:  # the no-good cut: the next round looks for another shape
            for j, kk in enumerate(m.shapes):
                if kk == ans.k:
                    m.model.add(m.x[j] == 0)
        if not bool(fits[0]):
            notes.append(f"the plan of round {round_no} does not fit under the float formulation: discarded")
            if round_no == 1:
                s.status0 = UNKNOWN
            continue
        if round_no == 1:
            bound0 = _first_round_verdict(s, ans, step_s)
        choices.append(Choice(index=int(ans.k), layers=canon, objective_s=step_s))
        if len(choices) < K and time.perf_counter() >= s.deadline:
            notes.append(f"time limit reached after {len(choices)} of {K} plans")
            return choices, bound0, True
    return choices, bound0, False


def _first_round_verdict(s: _Search, ans: _Answer, step_s: float) -> float | None:
    """The first plan's status (`s.status0`) and bound in seconds, checked against its float
    step time."""
    proven = ans.proven
    bound0 = ans.bound_q * s.q if ans.bound_q is not None else None
    if bound0 is not None and bound0 > step_s * (1 + 1e-9):
        s.notes.append(f"bound {bound0:.9g} s exceeds the plan's {step_s:.9g} s: bound discarded")
        bound0, proven = None, False
    if step_s > s.q * ans.value + s.tolerance:
        s.notes.append("the plan's float time exceeds its integer objective by more than the tolerance")
    s.status0 = OPTIMAL if proven else FEASIBLE
    return bound0
