"""The joint CP-SAT model: shape, pool and nodes of every stage, and the layer split, in one
model (issue #13; docs/DESIGN.md section 4).

Variables (s a stage, c a class of interchangeable nodes, j a shape in the model):
- x_j: the shape (one true); act_s: stage s exists (the shape's pp > s);
- a[s][P]: stage s runs on pool P (one, when it exists);
- n[s][c]: nodes of class c that stage s takes (sum: the shape's nodes per stage, all of one
  pool; sum over stages <= the class's nodes: the rest stay idle), u[s][c] <=> n >= 1,
  t[s][c] <=> n >= 2;
- l_s: layers of stage s (sum L, >= 1 on every stage that exists, within its pool's memory
  limit for the chosen shape);
- ring[s] >= r and bnd[b] >= r (order-encoded, only at levels where some price changes): the
  level of the slowest pair of stage s, and across boundary b, bounded by the classes used:
  ring[s] >= r forbids two used classes (or two nodes of one class) whose link is below r.
The costs (`prices.StageTable`, in quanta of q seconds, every piece rounded down) are rows
enforced by (x_j, a[s][P], ring[s] below the next level where the row changes):

    Y   >= w (slope l_s + const) + YP_s,      YP_s >= (mv - 1) pi(P, bnd[b]) for b adjacent to s
    B_s >= (slope l_s + const) / v + BP_s,   BP_s >= pi(P, bnd[b])
    Tail >= opt / reduction rows of stage s
    objective = Y + sum_s B_s + Tail  >= sum_j lb_j x_j  (the relaxation's bound), <= the cap

which is the step time `(m - 1/v) max slot + sum slot / v + max tail` (`prices`). Classes
that are interchangeable as a whole (same pool and size, the same levels to every other class:
two identical racks) are used in a fixed order (symmetry breaking).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...formulation.splits import balanced_split
from ...search.cpsat.ortools_cp import cp_model
from ..objective import level_chain
from .heuristic import Assignment
from .prepare import JointCandidates

ROWS = ("slot_slope", "slot_const", "opt_slope", "opt_const", "red_slope", "red_const")


def floor_q(x, q: float) -> np.ndarray:
    """floor(x / q), shaved by 1e-12 relative so float rounding can never round it up."""
    r = np.asarray(x, dtype=np.float64) / q
    return np.floor(r - np.abs(r) * 1e-12).astype(np.int64)


@dataclass
class IntTables:
    """Per (pool, level), integer rows of the shapes `ks` (index j): ys/yc, bs/bc, os/oc,
    rs/rc (slopes (J,), constants (J, P)); ypi/bpi per boundary level (J,)."""

    q: float
    ks: np.ndarray
    rows: dict = field(default_factory=dict)  # (pool, level) -> dict of arrays
    lb: np.ndarray = None


def int_tables(cands: JointCandidates, ks, q: float) -> IntTables:
    pr = cands.prices
    ks = np.asarray(ks, dtype=np.int64)
    out = IntTables(q, ks, lb=floor_q(cands.lower_bound_s[ks], q))
    for pl in range(len(pr.views)):
        for lv in range(pr.sentinel + 1):
            t = pr.table(pl, lv)
            w, v = t.w[ks], t.v[ks]
            out.rows[pl, lv] = dict(
                ys=floor_q(w * t.slot_slope[ks], q), yc=floor_q(w[:, None] * t.slot_const[ks], q),
                bs=floor_q(t.slot_slope[ks] / v, q), bc=floor_q(t.slot_const[ks] / v[:, None], q),
                os=floor_q(t.opt_slope[ks], q), oc=floor_q(t.opt_const[ks], q),
                rs=floor_q(t.red_slope[ks], q), rc=floor_q(t.red_const[ks], q),
                ypi=floor_q(w * v * t.pi[ks], q), bpi=floor_q(t.pi[ks], q))
    return out


def objective_q(tab: IntTables, cands: JointCandidates, j: int, a: Assignment) -> int:
    """The model's objective of plan `a` (shape ks[j]), in quanta."""
    pr = cands.prices
    ring, bnd = pr.levels_of(a.nodes)
    p = len(a.pools)
    y = tail = 0
    bsum = 0
    for s in range(p):
        r = tab.rows[a.pools[s], ring[s]]
        adj = [b for b in (s - 1, s) if 0 <= b < p - 1]
        yp = max([int(tab.rows[a.pools[s], bnd[b]]["ypi"][j]) for b in adj], default=0)
        bp = max([int(tab.rows[a.pools[s], bnd[b]]["bpi"][j]) for b in adj], default=0)
        lay = a.layers[s]
        y = max(y, int(r["ys"][j]) * lay + int(r["yc"][j, s]) + yp)
        bsum += max(0, int(r["bs"][j]) * lay + int(r["bc"][j, s]) + bp)
        tail = max(tail, int(r["os"][j]) * lay + int(r["oc"][j, s]), int(r["rs"][j]) * lay + int(r["rc"][j, s]))
    return max(y + bsum + tail, int(tab.lb[j]))


@dataclass
class JointModel:
    model: cp_model.CpModel
    ks: np.ndarray
    x: list
    a: list  # a[s][P] (None where not allowed)
    n: list  # n[s][c]
    layers: list
    obj: object
    rank_expr: object
    num_stages: int
    stats: dict = field(default_factory=dict)


def _useful(values_by_level: list) -> list[int]:
    """Levels 1.. at which some row differs from the level below (costs change there)."""
    return [lv for lv in range(1, len(values_by_level)) if values_by_level[lv] != values_by_level[lv - 1]]


def build_joint_model(cands: JointCandidates, tab: IntTables, cap: Optional[int], rank: np.ndarray,
                      hint: Optional[tuple[int, Assignment]] = None,
                      fixed_layers: Optional[tuple[int, ...]] = None) -> JointModel:
    """The model over the shapes `tab.ks`, objective capped at `cap` quanta; `fixed_layers`:
    the split is given (placement of a fixed plan: the sequential baseline)."""
    pr, nodes = cands.prices, cands.nodes
    ks = tab.ks
    J, L = len(ks), pr.L
    Pn, K = len(pr.views), len(nodes.classes)
    Lv = pr.sentinel  # levels 0..Lv-1 are pairs; Lv: no pair
    pp = pr.shapes.pp[ks]
    ns = cands.stage_nodes[ks]
    S = int(pp.max())
    counts = nodes.counts
    cpool = nodes.class_pool
    CL = nodes.class_level
    pool_size = np.array([int(counts[cpool == pl].sum()) for pl in range(Pn)])
    md = cp_model.CpModel()
    ub = int(cap) if cap is not None else 1 << 30
    x = [md.new_bool_var(f"x{j}") for j in range(J)]
    md.add_exactly_one(x)
    act = [sum(x[j] for j in range(J) if pp[j] > s) for s in range(S)]
    a, n, u, t, lay = [], [], [], [], []
    for s in range(S):
        on = [j for j in range(J) if pp[j] > s]
        nmax = int(ns[on].max())
        row = []
        for pl in range(Pn):
            fits = [j for j in on if ns[j] <= pool_size[pl]]
            row.append(md.new_bool_var(f"a{s}_{pl}") if fits else None)
            for j in on:
                if row[pl] is not None and ns[j] > pool_size[pl]:
                    md.add_bool_or([x[j].Not(), row[pl].Not()])
        a.append(row)
        md.add(sum(v for v in row if v is not None) == act[s])
        ns_row, us_row, ts_row = [], [], []
        for c in range(K):
            hi = min(int(counts[c]), nmax)
            nv = md.new_int_var(0, hi, f"n{s}_{c}")
            uv = md.new_bool_var(f"u{s}_{c}")
            md.add(nv >= uv)
            md.add(nv <= hi * uv)
            pa = row[int(cpool[c])]
            md.add_implication(uv, pa) if pa is not None else md.add(uv == 0)
            tv = None
            if hi >= 2:
                tv = md.new_bool_var(f"t{s}_{c}")
                md.add(nv >= 2 * tv)
                md.add(nv <= 1 + (hi - 1) * tv)
            ns_row.append(nv)
            us_row.append(uv)
            ts_row.append(tv)
        md.add(sum(ns_row) == sum(int(ns[j]) * x[j] for j in on))
        n.append(ns_row)
        u.append(us_row)
        t.append(ts_row)
        lv = md.new_int_var(0, L, f"l{s}")
        md.add(lv >= act[s])
        md.add(lv <= L * act[s])
        lay.append(lv)
    md.add(sum(lay) == L)
    for c in range(K):
        md.add(sum(n[s][c] for s in range(S)) <= int(counts[c]))
    _symmetry(md, n, nodes, S)

    # ---- levels: ring per stage, boundary per stage pair (order-encoded where costs change)
    def bnd_key(lv):
        return tuple(tab.rows[pl, lv][k].tobytes() for pl in range(Pn) for k in ("ypi", "bpi"))

    rge, bge = [], []
    for s in range(S):
        keys = [tuple(tab.rows[pl, lv][k][:, s].tobytes() if k.endswith("c") else tab.rows[pl, lv][k].tobytes()
                      for pl in range(Pn) for k in ("ys", "yc", "bs", "bc", "os", "oc", "rs", "rc"))
                for lv in range(Lv + 1)]
        levels = _useful(keys)
        ge = level_chain(md, f"ring{s}", levels)
        for lv in levels:
            for c in range(K):
                for c2 in range(c, K):
                    if cpool[c] != cpool[c2]:
                        continue
                    if c == c2:
                        if t[s][c] is not None and CL[c, c] < lv:
                            md.add_bool_or([ge[lv].Not(), t[s][c].Not()])
                    elif CL[c, c2] < lv:
                        md.add_bool_or([ge[lv].Not(), u[s][c].Not(), u[s][c2].Not()])
        rge.append((levels, ge))
    bkeys = [bnd_key(lv) for lv in range(Lv)]
    blevels = _useful(bkeys) if Lv else []
    for b in range(S - 1):
        ge = level_chain(md, f"bnd{b}", blevels)
        for lv in blevels:
            for c in range(K):
                for c2 in range(K):
                    if CL[c, c2] < lv and (c != c2 or counts[c] >= 2):
                        md.add_bool_or([ge[lv].Not(), u[b][c].Not(), u[b + 1][c2].Not()])
        bge.append(ge)

    # ---- costs
    Y = md.new_int_var(0, ub, "Y")
    tail = md.new_int_var(0, ub, "tail")
    B = [md.new_int_var(0, ub, f"B{s}") for s in range(S)]
    YP = [md.new_int_var(0, ub, f"YP{s}") for s in range(S)]
    BP = [md.new_int_var(0, ub, f"BP{s}") for s in range(S)]
    nrows = 0
    bint = [0] + blevels  # interval starts of boundary levels
    for s in range(S):
        levels, ge = rge[s]
        starts = [0] + levels
        for j in range(J):
            if pp[j] <= s:
                continue
            for pl in range(Pn):
                if a[s][pl] is None or ns[j] > pool_size[pl]:
                    continue
                lits = [x[j], a[s][pl]]
                Ucap = int(pr.limits(pl)[ks[j], s])
                if Ucap < 1:
                    md.add_bool_or([x[j].Not(), a[s][pl].Not()])
                    continue
                if Ucap < L:
                    md.add(lay[s] <= Ucap).only_enforce_if(lits)
                prev_key = None
                for i in range(len(starts) - 1, -1, -1):  # from the top interval down
                    r = tab.rows[pl, starts[i]]
                    vals = (int(r["ys"][j]), int(r["yc"][j, s]), int(r["bs"][j]), int(r["bc"][j, s]),
                            int(r["os"][j]), int(r["oc"][j, s]), int(r["rs"][j]), int(r["rc"][j, s]))
                    if vals == prev_key:
                        continue
                    prev_key = vals
                    lit = lits + ([ge[starts[i + 1]].Not()] if i + 1 < len(starts) else [])
                    ys, yc, bs, bc, os_, oc, rs, rc = vals
                    if max(ys + yc, bs + bc, os_ + oc, min(rs + rc, rs * L + rc)) > ub:
                        md.add_bool_or([v.Not() for v in lit])  # above the cap at any layer count
                        continue
                    md.add(Y >= ys * lay[s] + yc + YP[s]).only_enforce_if(lit)
                    md.add(B[s] >= bs * lay[s] + bc + BP[s]).only_enforce_if(lit)
                    if os_ > 0 or os_ + oc > 0:
                        md.add(tail >= os_ * lay[s] + oc).only_enforce_if(lit)
                    if rs > 0 or rs + rc > 0:
                        md.add(tail >= rs * lay[s] + rc).only_enforce_if(lit)
                    nrows += 4
                for b in (s - 1, s):
                    if not 0 <= b < S - 1 or pp[j] <= b + 1:
                        continue
                    prev_key = None
                    for i in range(len(bint) - 1, -1, -1):
                        r = tab.rows[pl, bint[i]]
                        vals = (int(r["ypi"][j]), int(r["bpi"][j]))
                        if vals == prev_key or vals == (0, 0):
                            prev_key = vals
                            continue
                        prev_key = vals
                        lit = lits + ([bge[b][bint[i + 1]].Not()] if i + 1 < len(bint) else [])
                        if max(vals) > ub:
                            md.add_bool_or([v.Not() for v in lit])
                            continue
                        md.add(YP[s] >= vals[0]).only_enforce_if(lit)
                        md.add(BP[s] >= vals[1]).only_enforce_if(lit)
                        nrows += 2
        if fixed_layers is not None:
            md.add(lay[s] == int(fixed_layers[s]))
        elif not pr.job.constraints.uneven_split:
            for j in range(J):
                if pp[j] > s:
                    md.add(lay[s] == balanced_split(L, int(pp[j]))[s]).only_enforce_if(x[j])
    obj = md.new_int_var(0, ub, "objective")
    md.add(obj == Y + sum(B) + tail)
    md.add(obj >= sum(min(int(tab.lb[j]), ub + 1) * x[j] for j in range(J)))
    md.minimize(obj)
    rank_expr = sum(int(rank[j]) * x[j] for j in range(J))
    jm = JointModel(md, ks, x, a, n, lay, obj, rank_expr, S,
                    stats={"shapes_in_model": J, "classes": K, "stages": S, "cost_rows": nrows,
                           "ring_levels": [len(r[0]) for r in rge], "boundary_levels": len(blevels)})
    if hint is not None:
        add_hint(jm, nodes, *hint)
    return jm


def _symmetry(md, n, nodes, S: int) -> None:
    """Interchangeable classes (a transposition of the two is an automorphism of the class
    levels, same pool and size) are used in order: nodes taken of the first >= of the next."""
    CL, K = nodes.class_level, len(nodes.classes)
    counts, cpool = nodes.counts, nodes.class_pool
    done = set()
    for c in range(K):
        if c in done:
            continue
        group = [c]
        for c2 in range(c + 1, K):
            if c2 in done or cpool[c2] != cpool[c] or counts[c2] != counts[c] or CL[c, c] != CL[c2, c2]:
                continue
            others = [o for o in range(K) if o not in (c, c2)]
            if all(CL[c, o] == CL[c2, o] for o in others) and CL[c, c2] == CL[c2, c]:
                group.append(c2)
        done.update(group)
        for c1, c2 in zip(group, group[1:]):
            md.add(sum(n[s][c1] for s in range(S)) >= sum(n[s][c2] for s in range(S)))


def add_hint(jm: JointModel, nodes, j: int, a: Assignment) -> None:
    md = jm.model
    for jj, xv in enumerate(jm.x):
        md.add_hint(xv, int(jj == j))
    cls_of = {i: c for c, members in enumerate(nodes.classes) for i in members}
    for s in range(jm.num_stages):
        for pl, av in enumerate(jm.a[s]):
            if av is not None:
                md.add_hint(av, int(s < len(a.pools) and a.pools[s] == pl))
        cnt = np.zeros(len(nodes.classes), dtype=np.int64)
        if s < len(a.nodes):
            for i in a.nodes[s]:
                cnt[cls_of[i]] += 1
        for c, nv in enumerate(jm.n[s]):
            md.add_hint(nv, int(cnt[c]))
        md.add_hint(jm.layers[s], int(a.layers[s]) if s < len(a.layers) else 0)
