"""Solving the CP-SAT model (`search`): rounds of build -> solve -> tie-break -> canonical split,
one round per plan of the top-k, every verdict checked against the float formulation.

A round: the incumbent (the best heuristic plan not yet returned) caps the objective and
decides which shapes enter the model (those whose objective floor is under the cap); the
model is built (`model.build_model`), measured (`scaling.check_scaling`) and solved. An
INFEASIBLE answer while a fitting plan is known is refuted and the model re-solved without
presolve. A proven optimum goes through phase 2: the objective is fixed and the shape's rank
in `ParallelConfig.key()` order minimised. The split is then the canonical one for the shape
and the objective (`integer.canonical_split`), re-evaluated by the float formulation.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from .ortools_cp import cp_model

from ...formulation.linear import middle_limits_sorted, pp_blocks
from ...formulation.pipeline import step_time_batch
from ..candidates import Candidates
from ..result import Choice, MethodResult, PlanStatus
from .integer import IntegerForm, canonical_split
from .model import Model, add_hint, build_model
from .scaling import OBJECTIVE_UNITS, SAFE_COEFFICIENT, check_scaling

PHASE2_MIN_S = 0.05
_STATUS: dict[int, PlanStatus] = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE",
                                  cp_model.INFEASIBLE: "INFEASIBLE", cp_model.UNKNOWN: "UNKNOWN"}


def plan_status(cp_status: int) -> PlanStatus:
    """A CP-SAT status as data; MODEL_INVALID is a bug in the model, not an answer."""
    if cp_status not in _STATUS:
        raise RuntimeError(f"CP-SAT rejected the model (status {cp_model.CpSolverStatus.Name(cp_status)})")
    return _STATUS[cp_status]


def solve_model(model: cp_model.CpModel, time_s: float, workers: int, seed: int, presolve: bool = True,
                callback=None) -> tuple[cp_model.CpSolver, int]:
    """Solve with the given limits; returns the solver (for values and statistics) and its status."""
    solver = cp_model.CpSolver()
    prm = solver.parameters
    prm.max_time_in_seconds = max(0.01, float(time_s))
    prm.num_workers = max(1, int(workers))
    prm.random_seed = int(seed)
    # CP-SAT's own Ctrl-C handler is left at SIG_DFL after a solve: Ctrl-C then killed the whole
    # process without cleanup (a sweep could not write the rows it had); Python keeps Ctrl-C
    prm.catch_sigint_signal = False
    if not presolve:
        prm.cp_model_presolve = False
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


def _phase_stats(phase: str, solver, status, m: Model, build_s: float) -> dict:
    solved = status in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    return {"phase": phase, "status": plan_status(status), "wall_time_s": solver.wall_time,
            "build_time_s": build_s, "branches": solver.num_branches, "conflicts": solver.num_conflicts,
            "num_booleans": solver.num_booleans, "num_variables": len(m.model.proto.variables),
            "num_constraints": len(m.model.proto.constraints),
            "objective": solver.objective_value if solved else None,
            "best_bound": solver.best_objective_bound if solved else None}


def shape_ranks(cands: Candidates) -> np.ndarray:
    """rank[k]: position of shape k in `ParallelConfig.key()` order (the canonical tie-break):
    (tp, cp, pp, vp, micro_batch_size, recompute code, sequence_parallel, zero); shapes are
    distinct in these, dp and the micro-batch count being derived. A test checks the order
    against ParallelConfig.key()."""
    sh = cands.shapes
    keys = (sh.tp, sh.cp, sh.pp, sh.vp, sh.micro_batch_size, sh.recompute, sh.sequence_parallel.astype(np.int64), sh.zero)
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
    """What a round's solve gives: shape k with `split`, its objective in quanta, whether it is
    proven optimal, a bound (quanta), the model (for phase 2) and whether presolve stays on."""

    k: int
    split: list[int]
    value: int
    proven: bool
    bound_q: Optional[int]
    model: Optional[Model] = None
    presolve: bool = True


@dataclass
class _Search:
    cands: Candidates
    deadline: float
    workers: int
    seed: int
    progress: Optional[Callable[[dict], None]]
    t0: float
    notes: list[str] = field(default_factory=list)
    stats: dict = field(default_factory=dict)

    def __post_init__(self):
        cands = self.cands
        self.L = cands.num_layers
        self.uneven = cands.job.constraints.uneven_split
        self.form = cands.form
        self.mem_ok = cands.feasible
        self.symmetry = middle_limits_sorted(self.form)
        if not self.symmetry:
            self.notes.append("memory limits are not monotone over middle stages: symmetry breaking off")
        self.heur, self.h_step = self._heuristic_plans()
        self.finite = np.isfinite(self.h_step)
        self.rank = shape_ranks(cands)

    def _heuristic_plans(self) -> tuple[np.ndarray, np.ndarray]:
        """One fitting split per memory-feasible shape (the candidates' splits) and its float
        step time; the candidates' incumbent where it is better."""
        cands, form = self.cands, self.form
        heur = cands.splits.copy()
        h_step = np.full(cands.num_survivors, np.inf)
        for p, rows in pp_blocks(form.pp):
            st, _, fits = step_time_batch(cands.coeffs.take(rows), heur[rows, :p])
            h_step[rows] = np.where(self.mem_ok[rows] & fits, st, np.inf)
        k0 = cands.incumbent_index
        if k0 is not None and cands.incumbent_step_s < h_step[k0]:
            p0 = int(form.pp[k0])
            bal = list(cands.incumbent_layers)
            if self.uneven and self.symmetry and p0 >= 4:
                bal = [bal[0]] + sorted(bal[1:-1]) + [bal[-1]]  # same time and fit (limits grow with the stage)
            h_step[k0] = cands.incumbent_step_s
            heur[k0] = 0
            heur[k0, :p0] = bal
        return heur, h_step

    def scale(self, top_k: int) -> None:
        """The time quantum: the K-th best heuristic plan maps to OBJECTIVE_UNITS quanta."""
        finite, h_step = self.finite, self.h_step
        if finite.any():
            ref = float(np.sort(h_step[finite])[min(top_k, int(finite.sum())) - 1])
        else:
            ref = 4.0 * float(np.max(self.cands.time_lb_s))
        self.q = ref * (1 + 1e-9) / OBJECTIVE_UNITS
        self.iform = IntegerForm.make(self.form, self.cands.time_lb_s, self.q)
        self.tolerance = (2 * self.L + 3) * self.q + 1e-9 * ref
        self.floor_q = self.iform.objective_floor(self.L)  # shapes above the round's cap cannot be chosen
        self.stats.update(time_quantum_s=self.q, tolerance_s=self.tolerance, objective_units=OBJECTIVE_UNITS,
                          incumbent_s=float(h_step[finite].min()) if finite.any() else None)

    def solve_round(self, round_no: int, allowed: np.ndarray, k_inc: Optional[int], inc_split, cap,
                    in_model: list[int], floor_bound: Optional[int]) -> Optional[_Answer]:
        """Build and solve the round's model. None when it proves nothing fits or finds nothing
        (then `self.status0` may be set for round 1)."""
        if self.deadline - time.perf_counter() <= 0 and k_inc is not None:
            self.notes.append("time limit reached before the CP-SAT model was solved; returning the best known plan "
                              "with the shapes' lower bound")
            return _Answer(k_inc, inc_split, cap, False, floor_bound)
        tb = time.perf_counter()
        m = build_model(self.iform, in_model, self.L, cap, rank=self.rank, uneven=self.uneven,
                        symmetry=self.symmetry, hint=(k_inc, inc_split) if k_inc is not None else None)
        sc = check_scaling(m.model)
        build_s = time.perf_counter() - tb
        if round_no == 1:
            self.stats.update(sc)
        cb = _Progress(self.progress, self.q, self.t0, "optimize") if self.progress is not None else None
        solver, st = solve_model(m.model, self.deadline - time.perf_counter(), self.workers, self.seed, callback=cb)
        self.stats["phases"].append(_phase_stats(f"round{round_no}:optimize", solver, st, m, build_s))
        presolve = True
        if st == cp_model.INFEASIBLE and k_inc is not None:
            self.notes.append(f"CP-SAT answered INFEASIBLE although a fitting plan is known (shape {k_inc}, "
                              f"{self.h_step[k_inc]:.6g} s): verdict refuted; re-solved without presolve")
            presolve = False
            solver, st = solve_model(m.model, max(0.01, self.deadline - time.perf_counter()), self.workers, self.seed,
                                     presolve=False)
            self.stats["phases"].append(_phase_stats(f"round{round_no}:optimize-no-presolve", solver, st, m, 0.0))
        status = plan_status(st)
        if status == "INFEASIBLE":
            if k_inc is not None:  # still refuted: report the known plan, prove nothing
                self.notes.append("CP-SAT still answers INFEASIBLE without presolve; returning the known plan unproven")
                return _Answer(k_inc, inc_split, cap, False, None, m, presolve)
            if round_no == 1:
                self.status0 = "INFEASIBLE"
                if self.mem_ok.any():  # cannot happen: a memory-feasible shape has a heuristic plan
                    self.notes.append("inconsistent: a shape fits by memory but no plan was found")
            return None
        if status == "UNKNOWN":  # time ran out before any solution
            if k_inc is None:
                if round_no == 1:
                    self.status0 = "UNKNOWN"
                return None
            self.notes.append("CP-SAT found no solution within the time limit; returning the best known plan "
                              "with the shapes' lower bound")
            return _Answer(k_inc, inc_split, cap, False, floor_bound, m, presolve)
        k, split = _read(m, solver)
        ans = _Answer(k, split, int(round(solver.objective_value)), status == "OPTIMAL",
                      int(math.floor(solver.best_objective_bound + 1e-9)), m, presolve)
        if floor_bound is not None:
            ans.bound_q = max(ans.bound_q, floor_bound)
        again = self.iform.objective(k, split)
        if again > ans.value:
            self.notes.append(f"encoding check failed: the split's integer objective {again} exceeds the solver's "
                              f"{ans.value}; bound not trusted")
            ans.proven, ans.bound_q = False, None
        return ans

    def tie_break(self, round_no: int, ans: _Answer) -> None:
        """Phase 2: fix the optimum, take the smallest shape rank (the deterministic answer)."""
        m = ans.model
        left = self.deadline - time.perf_counter()
        if left < PHASE2_MIN_S:
            self.notes.append("no time left for the tie-break among optimal shapes: the shape may differ between runs")
            return
        m.model.add(m.obj <= ans.value)
        for j, kk in enumerate(m.shapes):  # only shapes ranked before the found one can replace it
            if self.rank[kk] > self.rank[ans.k]:
                m.model.add(m.x[j] == 0)
        m.model.minimize(m.rank_expr)
        add_hint(m, self.iform, ans.k, ans.split)
        s2, st2 = solve_model(m.model, left, self.workers, self.seed, presolve=ans.presolve)
        self.stats["phases"].append(_phase_stats(f"round{round_no}:canonical-shape", s2, st2, m, 0.0))
        if st2 == cp_model.OPTIMAL:
            ans.k, ans.split = _read(m, s2)
        else:
            self.notes.append("tie-break among optimal shapes not finished in time: the shape may differ between runs")

    def finish(self, status: PlanStatus, best, bound, top, finished=True) -> MethodResult:
        return _finish(self.stats, self.t0, self.progress, status, best, bound, top, finished)

def search(cands: Candidates, time_limit_s: float, workers: int = 1, top_k: int = 1, seed: int = 0,
           progress: Optional[Callable[[dict], None]] = None) -> MethodResult:
    """The fastest fitting (shape, split) of `cands` by CP-SAT, with the solver's bound.

    Returns a MethodResult whose `best.objective_s` is the float formulation's step time of the
    returned plan; `bound_s` a proven lower bound of the optimum (q x the solver's bound);
    `stats` the solver statistics, the quantum (`time_quantum_s`), the optimality tolerance
    (`tolerance_s`) and `notes`."""
    t0 = time.perf_counter()
    K = max(1, int(top_k))
    notes: list[str] = []
    stats: dict = {"method": "cpsat", "workers": int(workers), "seed": int(seed), "notes": notes, "phases": []}
    S = cands.num_survivors
    if S == 0:
        stats.update(shapes_in_model=0, shapes_memory_infeasible=0)
        notes.append("no legal shape survives the memory lower bound: nothing to search")
        return _finish(stats, t0, progress, "INFEASIBLE", None, None, [])
    s = _Search(cands, t0 + float(time_limit_s), int(workers), int(seed), progress, t0, notes, stats)
    stats["shapes_memory_infeasible"] = int((~s.mem_ok).sum())
    s.scale(K)
    L, iform = s.L, s.iform
    choices: list[Choice] = []
    s.status0, bound0 = None, None
    excluded: set[int] = set()
    round_no = 0
    while len(choices) < K:
        round_no += 1
        allowed = np.array([k not in excluded for k in range(S)])
        fin = s.finite & allowed
        if fin.any():
            k_inc = int(np.flatnonzero(fin)[np.argmin(s.h_step[fin])])
            inc_split = [int(v) for v in s.heur[k_inc, :int(s.form.pp[k_inc])]]
            cap = iform.objective(k_inc, inc_split)
            in_model = np.flatnonzero(allowed & (s.floor_q <= cap)).tolist()
        elif round_no == 1:
            k_inc, inc_split, cap = None, None, None
            in_model = np.flatnonzero(allowed).tolist()  # prove that none fits
        else:
            break  # no further fitting shape: top-k ends here
        dropped = [k for k in in_model if iform.coefficient_max(k) > SAFE_COEFFICIENT]
        if dropped:
            notes.append(f"scaling guard: {len(dropped)} shape(s) whose coefficients exceed {SAFE_COEFFICIENT} "
                         f"left out of the model: the answer is not proven optimal")
            in_model = [k for k in in_model if k not in dropped]
        if round_no == 1:
            stats.update(shapes_in_model=len(in_model), shapes_pruned_incumbent=int(allowed.sum()) - len(in_model),
                         shapes_dropped_scaling=len(dropped), cap_quanta=cap)
        # a bound valid for every split of every shape (pruned shapes lie above the incumbent)
        floor_bound = int(s.floor_q[allowed].min()) if round_no == 1 and allowed.any() else None
        ans = s.solve_round(round_no, allowed, k_inc, inc_split, cap, in_model, floor_bound)
        if ans is None:
            break
        if dropped:  # the model did not hold every shape: nothing is proven about the rest
            ans.proven, ans.bound_q = False, None
        if ans.proven and ans.model is not None and len(ans.model.shapes) > 1:
            s.tie_break(round_no, ans)
        target = ans.value if ans.proven else iform.objective(ans.k, ans.split)
        canon = canonical_split(iform, ans.k, target, L, s.uneven)
        if canon is None:
            notes.append("canonical split not found; keeping the solver's split")
            canon = [int(v) for v in ans.split[:int(s.form.pp[ans.k])]]
        step, _, fits = step_time_batch(cands.coeffs.take([ans.k]), np.array([canon], dtype=np.int64))
        step_s = float(step[0])
        if not bool(fits[0]):
            notes.append(f"the plan of round {round_no} does not fit under the float formulation: discarded")
            excluded.add(ans.k)
            if round_no == 1:
                s.status0 = "UNKNOWN"
            continue
        proven = ans.proven
        if round_no == 1:
            bound0 = ans.bound_q * s.q if ans.bound_q is not None else None
            if bound0 is not None and bound0 > step_s * (1 + 1e-9):
                notes.append(f"bound {bound0:.9g} s exceeds the plan's {step_s:.9g} s: bound discarded")
                bound0, proven = None, False
            if step_s > s.q * target + s.tolerance:
                notes.append("the plan's float time exceeds its integer objective by more than the tolerance")
            s.status0 = "OPTIMAL" if proven else "FEASIBLE"
        choices.append(Choice(index=int(ans.k), layers=canon, objective_s=step_s))
        excluded.add(ans.k)
        if time.perf_counter() >= s.deadline:
            if len(choices) < K:
                notes.append(f"time limit reached after {len(choices)} of {K} plans")
            break

    status0 = s.status0 or "UNKNOWN"
    best = choices[0] if choices else None
    if status0 == "INFEASIBLE":
        best, bound0, choices = None, None, []
    if status0 == "OPTIMAL" and best is not None:
        stats["gap_s"] = best.objective_s - bound0 if bound0 is not None else None
    return s.finish(status0, best, bound0, choices, status0 in ("OPTIMAL", "INFEASIBLE"))
