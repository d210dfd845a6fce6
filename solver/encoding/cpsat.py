"""CP-SAT encoding of the plan search: which surviving shape, and how its layers are split
over the pipeline stages (DESIGN.md section 4).

What is linear once a shape k is chosen (formulation.evaluate, `_stage_arrays`): with
w = m - 1/v and the stage slot `slot_i = l_i*layer_s + [i=0]first_s + [i=p-1]last_s + v*boundary_s`,

    T = sum_i slot_i / v                                   (a constant of the shape: sum l_i = L)
      + max_i  w*slot_i                                    ("Y": the steady-state part)
      + max_i  max(O_i, D_i - W_i + O_i)                   ("tail": exposed DP reduction + optimizer)

where D_i, W_i, O_i (data-parallel reduction, its overlap window, optimizer step) are each
linear in l_i. So per shape every term is a row `var >= a*l_i + c` under the shape's literal,
and per-stage memory is linear in l_i, so it becomes a per-(shape, stage) limit on the layer
count, precomputed with the float formulation itself (no memory quantum at all).

The model (one boolean per shape, exactly one true):
- integer l_i per stage, sum L, >= 1 on the chosen shape's stages and 0 beyond its pp;
- memory: l_i <= sum_k U[k,i] x_k (U: the most layers stage i of shape k holds within capacity);
- symmetry: middle stages are interchangeable in time and their memory limits grow with the
  stage index, so l_1 <= l_2 <= ... <= l_{p-2} loses no optimum; then only stages 0, 1, p-2
  and p-1 need time rows (3 for Y, 3 for the optimizer, 3 for the exposed reduction);
- objective = Y + tail + sum_k (sum_i slot_i / v)_k x_k, and >= sum_k lb_k x_k (the pruning's
  valid bound per shape), capped at the incumbent.

Integer scaling. One time quantum q per instance: q = incumbent / 2^23, so the objective
domain, every coefficient and every constant stay below 2^23 ~ 8.4e6 (< 1e7: DESIGN.md warns
that ortools 9.15 answers wrongly with enforced rows whose coefficients reach ~4e8). Every
coefficient is rounded DOWN, so the integer objective never exceeds the float one: the
solver's bound times q is a valid lower bound of the float optimum, and the plan it returns is
within (2*L + 3) quanta of the optimum (`tolerance_s`; the realised gap is usually far
smaller). `model_scaling` checks every model before it is solved.

Never trusted unchecked: the chosen plan is re-evaluated with the float formulation (it must
fit, and its integer objective must match the solver's), the bound may not exceed it, and an
INFEASIBLE verdict is refuted by any plan that fits (then the model is re-solved without
presolve, and the notes say so).

Deterministic output: phase 1 finds the optimum; phase 2 fixes the objective and minimises the
shape's rank in `ParallelConfig.key()` order; the split is then the canonical one for that
shape and objective (`canonical_split`: the most balanced split within the per-stage ranges
that keep the optimum). Same plan across seeds and worker counts.

Top-k: the k best distinct parallel configurations (shapes), each with its canonical split,
by re-solving with a no-good cut (x_k = 0) on every shape already returned.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
from ortools.sat.python import cp_model

from ..candidates import Candidates, Choice, MethodResult
from ..formulation.evaluate import balanced_split, step_time_batch

SAFE_COEFFICIENT = 10_000_000  # DESIGN.md: keep every coefficient below ~1e7
SAFE_ACTIVITY = 1 << 33  # |coef|*|bound| summed over a row: 6x below the smallest known failure (4.8e10)
OBJECTIVE_UNITS = 1 << 23  # the scaling incumbent's step time, in quanta
PHASE2_MIN_S = 0.05


class ScalingError(RuntimeError):
    """A model would carry a coefficient or row activity beyond the safe limits."""


from ..formulation.linear import (
    FIRST, LAST, LinearForm, _pp_blocks, expand, heuristic_splits, linear_form, memory_feasible,
    middle_limits_sorted, stage_class,
)

# ----------------------------------------------------------------------------- integer form
def _floor_q(x, q: float) -> np.ndarray:
    """floor(x / q), shaved by 1e-12 relative so float rounding can never round it up."""
    r = np.asarray(x, dtype=np.float64) / q
    return np.floor(r - np.abs(r) * 1e-12).astype(np.int64)


@dataclass
class IntegerForm:
    """The linear pieces in quanta of `q` seconds, every one rounded down."""

    q: float
    pp: np.ndarray
    A: np.ndarray  # Y slope
    E: np.ndarray  # Y constants (S, 3) per stage class
    B: np.ndarray  # base
    T1: np.ndarray  # optimizer rows
    C1: np.ndarray
    T2: np.ndarray  # reduction rows
    C2: np.ndarray
    LB: np.ndarray  # time lower bound per shape
    U: np.ndarray  # layer limits (S, P)

    @classmethod
    def make(cls, form: LinearForm, time_lb_s: np.ndarray, q: float) -> "IntegerForm":
        f = lambda x: _floor_q(x, q)  # noqa: E731
        return cls(q=q, pp=form.pp, A=f(form.y_slope_s), E=f(form.y_const_s), B=f(form.base_s),
                   T1=f(form.opt_slope_s), C1=f(form.opt_const_s), T2=f(form.red_slope_s), C2=f(form.red_const_s),
                   LB=f(time_lb_s), U=form.max_layers)

    def parts(self, k: int, layers) -> tuple[int, int, int]:
        """(base, Y, tail) of shape k with this split, in quanta."""
        p = int(self.pp[k])
        lay = np.asarray(layers, dtype=np.int64)[:p]
        E, C1, C2 = self.stage_consts(k)
        Y = max(0, int((self.A[k] * lay + E).max()))
        tail = max(0, int((self.T1[k] * lay + C1).max()), int((self.T2[k] * lay + C2).max()))
        return int(self.B[k]), Y, tail

    def stage_consts(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(E, C1, C2) per stage of shape k."""
        p = self.pp[k:k + 1]
        return tuple(expand(a[k:k + 1], p, int(p[0]))[0] for a in (self.E, self.C1, self.C2))

    def objective(self, k: int, layers) -> int:
        """The model's objective of shape k with this split (ignoring memory), in quanta."""
        b, y, t = self.parts(k, layers)
        return max(b + y + t, int(self.LB[k]))

    def reduction_rows_bind(self, k: int) -> bool:
        """False when the reduction rows can never bind (decreasing and <= 0 at one layer)."""
        return not (self.T2[k] < 0 and self.T2[k] + int(self.C2[k].max()) <= 0)

    def coefficient_max(self, k: int) -> int:
        """Largest coefficient shape k brings into the model."""
        t2 = abs(int(self.T2[k])) if self.reduction_rows_bind(k) else 0
        return int(max(abs(self.A[k]), abs(self.T1[k]), t2, abs(self.B[k]), abs(self.LB[k])))

    def objective_floor(self, num_layers: int) -> np.ndarray:
        """Per shape, a lower bound of its objective over every split (every stage holds
        1..L layers): the base, Y and tail rows of the first and last stage at their least."""
        two = np.where(self.pp >= 2, LAST, FIRST)
        rows = np.arange(len(self.pp))
        pick = lambda a: np.maximum(a[:, FIRST], a[rows, two])  # noqa: E731
        ylow = np.maximum(0, self.A + pick(self.E))
        l2 = np.where(self.T2 >= 0, 1, num_layers)
        tlow = np.maximum(0, np.maximum(self.T1 + pick(self.C1), self.T2 * l2 + pick(self.C2)))
        return np.maximum(self.B + ylow + tlow, self.LB)


def canonical_split(form: IntegerForm, k: int, target: int, num_layers: int, uneven: bool = True) -> Optional[list[int]]:
    """The canonical split of shape k among those whose integer objective is <= target:
    the smallest feasible budget for the steady-state part Y (the rest goes to the tail), then
    the most balanced split within the per-stage layer ranges this leaves (water-filling);
    leftover layers go to the last, the first, then the later middle stages. None when no
    split reaches the target."""
    L = num_layers
    p = int(form.pp[k])
    if not uneven:
        bal = balanced_split(L, p)
        return bal if form.objective(k, bal) <= target and all(bal[i] <= form.U[k, i] for i in range(p)) else None
    if form.LB[k] > target:
        return None
    budget = int(target - form.B[k])
    A, T1, T2 = int(form.A[k]), int(form.T1[k]), int(form.T2[k])
    E, C1, C2 = form.stage_consts(k)
    U = np.minimum(np.asarray(form.U[k, :p], dtype=np.int64), L)
    if (U < 1).any() or U.sum() < L:
        return None
    if A > 0:
        ls = np.arange(1, L + 1, dtype=np.int64)
        ys = np.unique((A * ls[None, :] + np.unique(E)[:, None]).ravel())
    else:
        ys = np.array([max(0, int(E.max()))], dtype=np.int64)
    order = [p - 1] + ([0] if p > 1 else []) + list(range(p - 2, 0, -1))
    for Y in ys.tolist():
        tm = budget - Y
        if tm < 0:
            break
        lo = np.ones(p, dtype=np.int64)
        hi = U.copy()
        if A > 0:
            hi = np.minimum(hi, (Y - E) // A)
        elif (E > Y).any():
            continue
        ok = True
        for slope, const in ((T1, C1), (T2, C2)):
            if slope > 0:
                hi = np.minimum(hi, (tm - const) // slope)
            elif slope < 0:
                lo = np.maximum(lo, -((tm - const) // (-slope)))  # ceil((const - tm) / -slope)
            elif (const > tm).any():
                ok = False
        if not ok or (lo > hi).any() or lo.sum() > L or hi.sum() < L:
            continue
        # water-filling: the largest t with sum clip(t, lo, hi) <= L
        t_lo, t_hi = 0, L
        while t_lo < t_hi:
            mid = (t_lo + t_hi + 1) // 2
            if np.clip(mid, lo, hi).sum() <= L:
                t_lo = mid
            else:
                t_hi = mid - 1
        lay = np.clip(t_lo, lo, hi)
        left = L - int(lay.sum())
        for i in order:
            if left == 0:
                break
            if lo[i] <= t_lo < hi[i]:
                lay[i] += 1
                left -= 1
        if left:
            continue
        out = [int(x) for x in lay]
        if form.objective(k, out) <= target:
            return out
    return None


# ----------------------------------------------------------------------------- model
@dataclass
class _Model:
    model: cp_model.CpModel
    shapes: list[int]  # indices into the candidates, one per x
    x: list
    layers: list
    Y: object
    tail: object
    obj: object
    rank_expr: object
    aux: dict = field(default_factory=dict)


def _row(model, var, slope: int, lvar, const: int, lit) -> None:
    """var >= slope*l + const under lit, for an active stage (l >= 1); skipped when it can
    never bind (var >= 0)."""
    if slope <= 0 and slope + const <= 0:
        return
    if slope == 0:
        model.add(var >= const).only_enforce_if(lit)
    else:
        model.add(var >= slope * lvar + const).only_enforce_if(lit)


def build_model(form: IntegerForm, shapes: list[int], num_layers: int, cap: Optional[int], *, rank: np.ndarray,
                uneven: bool = True, symmetry: bool = True, hint: Optional[tuple[int, list[int]]] = None) -> _Model:
    """The CP-SAT model over `shapes` (indices into the integer form) with the objective capped
    at `cap` quanta (None: uncapped, domain 64x the scaling units)."""
    L = num_layers
    model = cp_model.CpModel()
    ub = int(cap) if cap is not None else OBJECTIVE_UNITS * 64
    x = [model.new_bool_var(f"x{k}") for k in shapes]
    model.add_exactly_one(x)
    pps = form.pp[shapes] if shapes else np.zeros(0, dtype=np.int64)
    P = int(pps.max()) if len(shapes) else 1
    sym = symmetry and uneven
    z = {}
    for p in sorted(set(pps.tolist())):
        z[p] = model.new_bool_var(f"pp{p}")
        model.add(z[p] == sum(xv for xv, pk in zip(x, pps.tolist()) if pk == p))
    act = [None]
    for i in range(1, P):
        a = model.new_bool_var(f"active{i}")
        model.add(a == sum(zv for p, zv in z.items() if p > i))
        act.append(a)
    U = np.clip(form.U[shapes, :P] if shapes else np.zeros((0, P), dtype=np.int64), 0, L)
    lmax = [int(U[:, i].max()) if len(shapes) else 0 for i in range(P)]
    layers = []
    for i in range(P):
        lv = model.new_int_var(min(1, lmax[i]) if i == 0 else 0, lmax[i], f"l{i}")
        layers.append(lv)
    model.add(sum(layers) == L)
    for i in range(1, P):
        model.add(layers[i] >= act[i])
        model.add(layers[i] <= lmax[i] * act[i])
    for i in range(P):  # memory: the chosen shape's limit on stage i
        terms = [int(U[j, i]) * x[j] for j in range(len(shapes)) if U[j, i] > 0]
        model.add(layers[i] <= (sum(terms) if terms else 0))
    if sym:
        for i in range(1, P - 2):
            model.add(layers[i] <= layers[i + 1]).only_enforce_if(act[i + 2])
    if not uneven:
        for p, zv in z.items():
            for i, n in enumerate(balanced_split(L, p)):
                model.add(layers[i] == n).only_enforce_if(zv)
    Y = model.new_int_var(0, ub, "Y")
    tail = model.new_int_var(0, ub, "tail")
    obj = model.new_int_var(0, ub, "objective")
    for j, k in enumerate(shapes):
        p = int(form.pp[k])
        lit = x[j]
        A, T1, T2 = int(form.A[k]), int(form.T1[k]), int(form.T2[k])
        if sym:
            top = sorted({0, p - 1} | ({p - 2} if p >= 3 else set()))
            red = sorted({0, p - 1} | ({(p - 2) if T2 >= 0 else 1} if p >= 3 else set()))
        else:
            top = red = list(range(p))
        for i in top:
            c = stage_class(i, p)
            _row(model, Y, A, layers[i], int(form.E[k, c]), lit)
            _row(model, tail, T1, layers[i], int(form.C1[k, c]), lit)
        for i in red:
            _row(model, tail, T2, layers[i], int(form.C2[k, stage_class(i, p)]), lit)
    model.add(obj == Y + tail + sum(int(form.B[k]) * x[j] for j, k in enumerate(shapes)))
    model.add(obj >= sum(int(form.LB[k]) * x[j] for j, k in enumerate(shapes)))
    model.minimize(obj)
    rank_expr = sum(int(rank[k]) * x[j] for j, k in enumerate(shapes))
    m = _Model(model, list(shapes), x, layers, Y, tail, obj, rank_expr, aux={"z": z, "act": act})
    if hint is not None:
        _add_hint(m, form, hint[0], hint[1])
    return m


def _add_hint(m: _Model, form: IntegerForm, k: int, split: list[int]) -> None:
    if k not in m.shapes:
        return
    m.model.clear_hints()
    p = int(form.pp[k])
    for j, kk in enumerate(m.shapes):
        m.model.add_hint(m.x[j], kk == k)
    for pv, zv in m.aux["z"].items():
        m.model.add_hint(zv, pv == p)
    for i, a in enumerate(m.aux["act"]):
        if a is not None:
            m.model.add_hint(a, i < p)
    for i, lv in enumerate(m.layers):
        m.model.add_hint(lv, int(split[i]) if i < p else 0)
    b, y, t = form.parts(k, split)
    m.model.add_hint(m.Y, y)
    m.model.add_hint(m.tail, t)
    m.model.add_hint(m.obj, max(b + y + t, int(form.LB[k])))


def model_scaling(model: cp_model.CpModel) -> dict:
    """Largest |coefficient| (rows and objective) and largest activity of an enforced row
    (sum of |coef| x largest |value| of its variable, plus its finite bound: what a big-M
    linearisation of the row would carry). Unenforced rows are sums over one-hot booleans or
    short chains; their coefficients are checked, their (pessimistic) activity only reported."""
    proto = model.proto
    mag = []
    for v in proto.variables:
        d = list(v.domain)
        mag.append(max(abs(int(d[0])), abs(int(d[-1]))))
    big = 1 << 62
    max_coef, row_act, enforced_act, n_enforced = 0, 0, 0, 0
    for ct in proto.constraints:
        if not ct.has_linear():
            continue
        lin = ct.linear
        act = 0
        for var, coef in zip(lin.vars, lin.coeffs):
            ref = var if var >= 0 else -var - 1
            max_coef = max(max_coef, abs(int(coef)))
            act += abs(int(coef)) * mag[ref]
        bounds = [abs(int(b)) for b in lin.domain if abs(int(b)) < big]
        act += max(bounds) if bounds else 0
        row_act = max(row_act, act)
        if len(ct.enforcement_literal):
            n_enforced += 1
            enforced_act = max(enforced_act, act)
    if proto.has_objective():
        for coef in proto.objective.coeffs:
            max_coef = max(max_coef, abs(int(coef)))
    return {"max_coefficient": max_coef, "max_enforced_activity": enforced_act, "max_row_activity": row_act,
            "enforced_rows": n_enforced}


def check_scaling(model: cp_model.CpModel) -> dict:
    """`model_scaling`, raising ScalingError beyond SAFE_COEFFICIENT / SAFE_ACTIVITY."""
    sc = model_scaling(model)
    if sc["max_coefficient"] > SAFE_COEFFICIENT:
        raise ScalingError(f"coefficient {sc['max_coefficient']} exceeds the safe limit {SAFE_COEFFICIENT}")
    if sc["max_enforced_activity"] > SAFE_ACTIVITY:
        raise ScalingError(f"enforced row activity {sc['max_enforced_activity']} exceeds the safe limit {SAFE_ACTIVITY}")
    return sc


# ----------------------------------------------------------------------------- solving
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


def _solve(m: _Model, time_s: float, workers: int, seed: int, presolve: bool = True, callback=None):
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
    status = solver.solve(m.model, callback) if callback is not None else solver.solve(m.model)
    return solver, status


def _read(m: _Model, solver) -> tuple[int, list[int]]:
    j = next(j for j, xv in enumerate(m.x) if solver.boolean_value(xv))
    return m.shapes[j], [int(solver.value(lv)) for lv in m.layers]


def _phase_stats(phase: str, solver, status, m: _Model, build_s: float) -> dict:
    return {"phase": phase, "status": solver.status_name(status), "wall_time_s": solver.wall_time,
            "build_time_s": build_s, "branches": solver.num_branches, "conflicts": solver.num_conflicts,
            "num_booleans": solver.num_booleans, "num_variables": len(m.model.proto.variables),
            "num_constraints": len(m.model.proto.constraints),
            "objective": solver.objective_value if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None,
            "best_bound": solver.best_objective_bound if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) else None}


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


def search(cands: Candidates, time_limit_s: float, workers: int = 1, top_k: int = 1, seed: int = 0,
           progress: Optional[Callable[[dict], None]] = None) -> MethodResult:
    """The fastest fitting (shape, split) of `cands` by CP-SAT, with the solver's bound.

    Returns a MethodResult whose `best.objective_s` is the float formulation's step time of the
    returned plan; `bound_s` a proven lower bound of the optimum (q x the solver's bound);
    `stats` the solver statistics, the quantum (`time_quantum_s`), the optimality tolerance
    (`tolerance_s`) and `notes`."""
    t0 = time.perf_counter()
    deadline = t0 + float(time_limit_s)
    job = cands.job
    L = job.model.num_layers
    uneven = job.constraints.uneven_split
    K = max(1, int(top_k))
    notes: list[str] = []
    stats: dict = {"method": "cpsat", "workers": int(workers), "seed": int(seed), "notes": notes, "phases": []}
    S = cands.num_survivors

    def finish(status, best, bound, top, finished=True):
        stats["wall_time_s"] = time.perf_counter() - t0
        stats["status_name"] = status
        if progress is not None:
            try:
                progress({"method": "cpsat", "phase": "done", "status": status,
                          "best_s": best.objective_s if best else None, "bound_s": bound,
                          "elapsed_s": stats["wall_time_s"], "final": True})
            except Exception:  # noqa: BLE001
                pass
        return MethodResult(status=status, best=best, bound_s=bound, top=top, evaluations=None,
                            finished=finished, stats=stats)

    if S == 0:
        stats.update(shapes_in_model=0, shapes_memory_infeasible=0)
        notes.append("no legal shape survives the memory lower bound: nothing to search")
        return finish("INFEASIBLE", None, None, [])

    co = cands.coeffs
    form = linear_form(co, L)
    mem_ok = memory_feasible(form, L)
    stats["shapes_memory_infeasible"] = int((~mem_ok).sum())
    # one fitting split per memory-feasible shape: the heuristic incumbents
    if uneven:
        heur = heuristic_splits(form, L)
    else:
        from ..candidates import balanced_layers_matrix

        heur = balanced_layers_matrix(L, form.pp)
    h_step = np.full(S, np.inf)
    for p, rows in _pp_blocks(form.pp):
        st, _, fits = step_time_batch(co.take(rows), heur[rows, :p])
        h_step[rows] = np.where(mem_ok[rows] & fits, st, np.inf)
    symmetry = middle_limits_sorted(form)
    if not symmetry:
        notes.append("memory limits are not monotone over middle stages: symmetry breaking off")
    if cands.incumbent_index is not None and cands.incumbent_step_s < h_step[cands.incumbent_index]:
        k0 = cands.incumbent_index
        p0 = int(form.pp[k0])
        bal = list(cands.incumbent_layers)
        if uneven and symmetry and p0 >= 4:
            bal = [bal[0]] + sorted(bal[1:-1]) + [bal[-1]]  # same time and fit (limits grow with the stage)
        h_step[k0] = cands.incumbent_step_s
        heur[k0] = 0
        heur[k0, :p0] = bal
    finite = np.isfinite(h_step)
    rank = shape_ranks(cands)

    # the time quantum: the K-th best heuristic plan maps to OBJECTIVE_UNITS quanta
    if finite.any():
        ref = float(np.sort(h_step[finite])[min(K, int(finite.sum())) - 1])
    else:
        ref = 4.0 * float(np.max(cands.time_lb_s))
    q = ref * (1 + 1e-9) / OBJECTIVE_UNITS
    iform = IntegerForm.make(form, cands.time_lb_s, q)
    tolerance = (2 * L + 3) * q + 1e-9 * ref
    stats.update(time_quantum_s=q, tolerance_s=tolerance, objective_units=OBJECTIVE_UNITS,
                 incumbent_s=float(h_step[finite].min()) if finite.any() else None)

    floor_q = iform.objective_floor(L)  # shapes above the round's cap cannot be chosen
    choices: list[Choice] = []
    status0, bound0 = None, None
    excluded: set[int] = set()
    round_no = 0
    while len(choices) < K:
        round_no += 1
        allowed = np.array([k not in excluded for k in range(S)])
        fin = finite & allowed
        if fin.any():
            k_inc = int(np.flatnonzero(fin)[np.argmin(h_step[fin])])
            inc_split = [int(v) for v in heur[k_inc, :int(form.pp[k_inc])]]
            cap = iform.objective(k_inc, inc_split)
            in_model = np.flatnonzero(allowed & (floor_q <= cap)).tolist()
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
        floor_bound = int(floor_q[allowed].min()) if round_no == 1 and allowed.any() else None
        if deadline - time.perf_counter() <= 0 and k_inc is not None:
            notes.append("time limit reached before the CP-SAT model was solved; returning the best known plan "
                         "with the shapes' lower bound")
            k, split, value, proven, bound_q = k_inc, inc_split, cap, False, floor_bound
            m = None
            presolve = True
        else:
            tb = time.perf_counter()
            m = build_model(iform, in_model, L, cap, rank=rank, uneven=uneven, symmetry=symmetry,
                            hint=(k_inc, inc_split) if k_inc is not None else None)
            sc = check_scaling(m.model)
            build_s = time.perf_counter() - tb
            if round_no == 1:
                stats.update(sc)
            left = deadline - time.perf_counter()
            cb = _Progress(progress, q, t0, "optimize") if progress is not None else None
            solver, st = _solve(m, left, workers, seed, callback=cb)
            stats["phases"].append(_phase_stats(f"round{round_no}:optimize", solver, st, m, build_s))
            presolve = True
            if st == cp_model.INFEASIBLE and k_inc is not None:
                notes.append(f"CP-SAT answered INFEASIBLE although a fitting plan is known (shape {k_inc}, "
                             f"{h_step[k_inc]:.6g} s): verdict refuted; re-solved without presolve")
                presolve = False
                solver, st = _solve(m, max(0.01, deadline - time.perf_counter()), workers, seed, presolve=False)
                stats["phases"].append(_phase_stats(f"round{round_no}:optimize-no-presolve", solver, st, m, 0.0))
            if st == cp_model.MODEL_INVALID:
                raise RuntimeError(f"CP-SAT rejected the model: {m.model.validate()}")

            if st == cp_model.INFEASIBLE:
                if k_inc is not None:  # still refuted: report the known plan, prove nothing
                    notes.append("CP-SAT still answers INFEASIBLE without presolve; returning the known plan unproven")
                    k, split, value, proven, bound_q = k_inc, inc_split, cap, False, None
                else:
                    if round_no == 1:
                        status0 = "INFEASIBLE"
                        if mem_ok.any():  # cannot happen: a memory-feasible shape has a heuristic plan
                            notes.append("inconsistent: a shape fits by memory but no plan was found")
                    break
            elif st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
                k, split = _read(m, solver)
                value = int(round(solver.objective_value))
                proven = st == cp_model.OPTIMAL
                bound_q = int(math.floor(solver.best_objective_bound + 1e-9))
                if floor_bound is not None:
                    bound_q = max(bound_q, floor_bound)
                again = iform.objective(k, split)
                if again > value:
                    notes.append(f"encoding check failed: the split's integer objective {again} exceeds the solver's "
                                 f"{value}; bound not trusted")
                    proven, bound_q = False, None
            else:  # UNKNOWN: time ran out before any solution
                if k_inc is None:
                    if round_no == 1:
                        status0 = "UNKNOWN"
                    break
                notes.append("CP-SAT found no solution within the time limit; returning the best known plan "
                             "with the shapes' lower bound")
                k, split, value, proven = k_inc, inc_split, cap, False
                bound_q = floor_bound

        if dropped:  # the model did not hold every shape: nothing is proven about the rest
            proven, bound_q = False, None
        # phase 2: fix the optimum, smallest shape rank; then the canonical split
        if proven and m is not None and len(m.shapes) > 1:
            left = deadline - time.perf_counter()
            if left >= PHASE2_MIN_S:
                m.model.add(m.obj <= value)
                for j, kk in enumerate(m.shapes):  # only shapes ranked before the found one can replace it
                    if rank[kk] > rank[k]:
                        m.model.add(m.x[j] == 0)
                m.model.minimize(m.rank_expr)
                _add_hint(m, iform, k, split)
                s2, st2 = _solve(m, left, workers, seed, presolve=presolve)
                stats["phases"].append(_phase_stats(f"round{round_no}:canonical-shape", s2, st2, m, 0.0))
                if st2 == cp_model.OPTIMAL:
                    k, split = _read(m, s2)
                else:
                    notes.append("tie-break among optimal shapes not finished in time: the shape may differ between runs")
            else:
                notes.append("no time left for the tie-break among optimal shapes: the shape may differ between runs")
        target = value if proven else iform.objective(k, split)
        canon = canonical_split(iform, k, target, L, uneven)
        if canon is None:
            notes.append("canonical split not found; keeping the solver's split")
            canon = [int(v) for v in split[:int(form.pp[k])]]
        step, _, fits = step_time_batch(co.take([k]), np.array([canon], dtype=np.int64))
        step_s = float(step[0])
        if not bool(fits[0]):
            notes.append(f"the plan of round {round_no} does not fit under the float formulation: discarded")
            excluded.add(k)
            if round_no == 1:
                status0 = "UNKNOWN"
            continue
        if round_no == 1:
            bound0 = bound_q * q if bound_q is not None else None
            if bound0 is not None and bound0 > step_s * (1 + 1e-9):
                notes.append(f"bound {bound0:.9g} s exceeds the plan's {step_s:.9g} s: bound discarded")
                bound0, proven = None, False
            if step_s > q * target + tolerance:
                notes.append("the plan's float time exceeds its integer objective by more than the tolerance")
            status0 = "OPTIMAL" if proven else "FEASIBLE"
        choices.append(Choice(index=int(k), layers=canon, objective_s=step_s))
        excluded.add(k)
        if time.perf_counter() >= deadline:
            if len(choices) < K:
                notes.append(f"time limit reached after {len(choices)} of {K} plans")
            break

    if status0 is None:
        status0 = "UNKNOWN"
    best = choices[0] if choices else None
    if status0 == "INFEASIBLE":
        best, bound0, choices = None, None, []
    if status0 == "OPTIMAL" and best is not None:
        stats["gap_s"] = best.objective_s - bound0 if bound0 is not None else None
    finished = status0 in ("OPTIMAL", "INFEASIBLE")
    return finish(status0, best, bound0, choices, finished)
