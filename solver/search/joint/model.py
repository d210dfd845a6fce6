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

`build_joint_model` adds the groups in this order, each a named builder over a `ModelBuild`
(tests/test_joint_model_groups.py checks them one by one): the shape (`add_shape_choice`);
per stage its pool, nodes and layers (`add_stage_pool`, `add_stage_nodes`, `add_stage_layers`);
the class supply and symmetry; ring and boundary levels (`add_ring_levels`,
`add_boundary_levels`); the costs (`add_costs`: per stage `add_memory_limit`, `add_stage_rows`,
`add_boundary_rows`, `add_split_rule`); the objective (`add_objective`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...formulation.links import level_chain
from ...formulation.splits import balanced_split
from ...search.cpsat.integer import floor_q  # the one rounding rule: every piece down
from ...search.cpsat.ortools_cp import cp_model
from .heuristic import Assignment
from .nodes import NodeSet
from .prepare import JointCandidates
from .prices import Prices

ROWS = ("slot_slope", "slot_const", "opt_slope", "opt_const", "red_slope", "red_const")


@dataclass
class IntTables:
    """Per (pool, level), integer rows of the shapes `ks` (index j): ys/yc, bs/bc, os/oc,
    rs/rc (slopes (J,), constants (J, P)); ypi/bpi per boundary level (J,)."""

    q: float
    ks: np.ndarray
    rows: dict = field(default_factory=dict)  # (pool, level) -> dict of arrays
    lb: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (J,) the relaxation's bound


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
    obj: Any  # CP-SAT's IntVar and linear expression (ortools is imported as a module object)
    rank_expr: Any
    num_stages: int
    stats: dict = field(default_factory=dict)


def _useful(values_by_level: list) -> list[int]:
    """Levels 1.. at which some row differs from the level below (costs change there)."""
    return [lv for lv in range(1, len(values_by_level)) if values_by_level[lv] != values_by_level[lv - 1]]


@dataclass
class ModelBuild:
    """What the constraint groups read and write: the model, the shapes in it (index j), the
    nodes, the objective's cap `ub` (quanta) and the variables made so far (module docstring)."""

    md: cp_model.CpModel
    cands: JointCandidates
    tab: IntTables
    ub: int
    x: list = field(default_factory=list)  # x[j]
    act: list = field(default_factory=list)  # act[s]: sum of x over the shapes with stage s
    a: list = field(default_factory=list)  # a[s][P] (None where no shape of stage s fits the pool)
    n: list = field(default_factory=list)  # n[s][c]
    u: list = field(default_factory=list)  # u[s][c] <=> n[s][c] >= 1
    t: list = field(default_factory=list)  # t[s][c] <=> n[s][c] >= 2 (None where the class has one node)
    layers: list = field(default_factory=list)  # l[s]
    ring: list = field(default_factory=list)  # per stage (its useful levels, ring[s] >= level literals)
    boundary_levels: list = field(default_factory=list)  # the useful levels of every boundary
    boundary: list = field(default_factory=list)  # per boundary b, bnd[b] >= level literals
    costs: CostVars = field(init=False)  # made by `add_costs`
    # read from the candidates
    prices: Prices = field(init=False)
    nodes: NodeSet = field(init=False)
    pp: np.ndarray = field(init=False)  # (J,) stages of each shape
    stage_nodes: np.ndarray = field(init=False)  # (J,) nodes per stage of each shape
    pool_size: np.ndarray = field(init=False)  # (P,) nodes of each pool
    num_shapes: int = field(init=False)
    num_stages: int = field(init=False)  # of the deepest shape
    num_layers: int = field(init=False)
    num_pools: int = field(init=False)
    num_classes: int = field(init=False)

    def __post_init__(self):
        pr, nodes = self.cands.prices, self.cands.nodes
        self.prices, self.nodes = pr, nodes
        self.pp = pr.shapes.pp[self.tab.ks]
        self.stage_nodes = self.cands.stage_nodes[self.tab.ks]
        self.num_shapes, self.num_stages, self.num_layers = len(self.tab.ks), int(self.pp.max()), pr.L
        self.num_pools, self.num_classes = len(pr.views), len(nodes.classes)
        self.pool_size = np.array([int(nodes.counts[nodes.class_pool == pl].sum()) for pl in range(self.num_pools)])

    def shapes_with_stage(self, s: int) -> list[int]:
        return [j for j in range(self.num_shapes) if self.pp[j] > s]


@dataclass
class CostVars:
    """Y (the slowest slot), B[s] (stage s's slot over v), YP/BP[s] (its boundary terms), tail."""

    Y: object
    tail: object
    B: list
    YP: list
    BP: list


def build_joint_model(cands: JointCandidates, tab: IntTables, cap: int | None, rank: np.ndarray,
                      hint: tuple[int, Assignment] | None = None,
                      fixed_layers: tuple[int, ...] | None = None) -> JointModel:
    """The model over the shapes `tab.ks`, objective capped at `cap` quanta; `fixed_layers`:
    the split is given (placement of a fixed plan: the sequential baseline)."""
    b = ModelBuild(cp_model.CpModel(), cands, tab, int(cap) if cap is not None else 1 << 30)
    add_shape_choice(b)
    for s in range(b.num_stages):
        add_stage_pool(b, s)
        add_stage_nodes(b, s)
        add_stage_layers(b, s)
    b.md.add(sum(b.layers) == b.num_layers)
    add_class_supply(b)
    _symmetry(b.md, b.n, b.nodes, b.num_stages)
    add_ring_levels(b)
    add_boundary_levels(b)
    cost_rows = add_costs(b, fixed_layers)
    obj = add_objective(b)
    rank_expr = sum(int(rank[j]) * b.x[j] for j in range(b.num_shapes))
    stats = {"shapes_in_model": b.num_shapes, "classes": b.num_classes, "stages": b.num_stages, "cost_rows": cost_rows,
             "ring_levels": [len(r[0]) for r in b.ring], "boundary_levels": len(b.boundary_levels)}
    jm = JointModel(b.md, tab.ks, b.x, b.a, b.n, b.layers, obj, rank_expr, b.num_stages, stats=stats)
    if hint is not None:
        add_hint(jm, b.nodes, *hint)
    return jm


# ---- variables and their own constraints: the shape, and per stage its pool, nodes and layers
def add_shape_choice(b: ModelBuild) -> None:
    """x[j]: exactly one shape; act[s]: stage s exists (the shape's pp > s)."""
    b.x = [b.md.new_bool_var(f"x{j}") for j in range(b.num_shapes)]
    b.md.add_exactly_one(b.x)
    b.act = [sum(b.x[j] for j in b.shapes_with_stage(s)) for s in range(b.num_stages)]


def add_stage_pool(b: ModelBuild, s: int) -> None:
    """a[s][P]: stage s runs on one pool when it exists, one that holds the shape's nodes per stage."""
    md, x = b.md, b.x
    on = b.shapes_with_stage(s)
    row = []
    for pl in range(b.num_pools):
        fits = [j for j in on if b.stage_nodes[j] <= b.pool_size[pl]]
        on_pool = md.new_bool_var(f"a{s}_{pl}") if fits else None
        row.append(on_pool)
        for j in on:
            if on_pool is not None and b.stage_nodes[j] > b.pool_size[pl]:
                md.add_bool_or([x[j].Not(), on_pool.Not()])
    b.a.append(row)
    md.add(sum(v for v in row if v is not None) == b.act[s])


def add_stage_nodes(b: ModelBuild, s: int) -> None:
    """n[s][c]: nodes of class c that stage s takes, only of the stage's pool, summing to the
    shape's nodes per stage; u[s][c] <=> n >= 1, t[s][c] <=> n >= 2."""
    md, counts, class_pool = b.md, b.nodes.counts, b.nodes.class_pool
    on = b.shapes_with_stage(s)
    nmax = int(b.stage_nodes[on].max())
    ns_row, us_row, ts_row = [], [], []
    for c in range(b.num_classes):
        hi = min(int(counts[c]), nmax)
        nv = md.new_int_var(0, hi, f"n{s}_{c}")
        uv = md.new_bool_var(f"u{s}_{c}")
        md.add(nv >= uv)
        md.add(nv <= hi * uv)
        pa = b.a[s][int(class_pool[c])]
        md.add_implication(uv, pa) if pa is not None else md.add(uv == 0)
        tv = None
        if hi >= 2:
            tv = md.new_bool_var(f"t{s}_{c}")
            md.add(nv >= 2 * tv)
            md.add(nv <= 1 + (hi - 1) * tv)
        ns_row.append(nv)
        us_row.append(uv)
        ts_row.append(tv)
    md.add(sum(ns_row) == sum(int(b.stage_nodes[j]) * b.x[j] for j in on))
    b.n.append(ns_row)
    b.u.append(us_row)
    b.t.append(ts_row)


def add_stage_layers(b: ModelBuild, s: int) -> None:
    """l[s]: at least one layer on a stage that exists, none on one that does not."""
    lv = b.md.new_int_var(0, b.num_layers, f"l{s}")
    b.md.add(lv >= b.act[s])
    b.md.add(lv <= b.num_layers * b.act[s])
    b.layers.append(lv)


def add_class_supply(b: ModelBuild) -> None:
    """The stages take at most the nodes a class has (the rest stay idle)."""
    for c in range(b.num_classes):
        b.md.add(sum(b.n[s][c] for s in range(b.num_stages)) <= int(b.nodes.counts[c]))


# ---- levels: ring per stage, boundary per stage pair (order-encoded where costs change)
def add_ring_levels(b: ModelBuild) -> None:
    """ring[s] >= r, at the levels where stage s's rows change, forbids two used classes (or
    two nodes of one class) of its pool whose link is below r."""
    md, class_pool, class_level = b.md, b.nodes.class_pool, b.nodes.class_level
    K = b.num_classes
    for s in range(b.num_stages):
        keys = [tuple(b.tab.rows[pl, lv][k][:, s].tobytes() if k.endswith("c") else b.tab.rows[pl, lv][k].tobytes()
                      for pl in range(b.num_pools) for k in ("ys", "yc", "bs", "bc", "os", "oc", "rs", "rc"))
                for lv in range(b.prices.sentinel + 1)]
        levels = _useful(keys)
        ge = level_chain(md, f"ring{s}", levels)
        for lv in levels:
            for c in range(K):
                for c2 in range(c, K):
                    if class_pool[c] != class_pool[c2]:
                        continue
                    if c == c2:
                        if b.t[s][c] is not None and class_level[c, c] < lv:
                            md.add_bool_or([ge[lv].Not(), b.t[s][c].Not()])
                    elif class_level[c, c2] < lv:
                        md.add_bool_or([ge[lv].Not(), b.u[s][c].Not(), b.u[s][c2].Not()])
        b.ring.append((levels, ge))


def add_boundary_levels(b: ModelBuild) -> None:
    """bnd[b] >= r, at the levels where a boundary's rows change, forbids a used class of stage
    b and one of stage b + 1 (two nodes when the same class) whose link is below r."""
    md, counts, class_level = b.md, b.nodes.counts, b.nodes.class_level
    K, no_pair = b.num_classes, b.prices.sentinel  # levels 0..no_pair-1 are pairs

    def key(lv):
        return tuple(b.tab.rows[pl, lv][k].tobytes() for pl in range(b.num_pools) for k in ("ypi", "bpi"))

    b.boundary_levels = _useful([key(lv) for lv in range(no_pair)]) if no_pair else []
    for bd in range(b.num_stages - 1):
        ge = level_chain(md, f"bnd{bd}", b.boundary_levels)
        for lv in b.boundary_levels:
            for c in range(K):
                for c2 in range(K):
                    if class_level[c, c2] < lv and (c != c2 or counts[c] >= 2):
                        md.add_bool_or([ge[lv].Not(), b.u[bd][c].Not(), b.u[bd + 1][c2].Not()])
        b.boundary.append(ge)


# ---- costs
def add_costs(b: ModelBuild, fixed_layers: tuple[int, ...] | None = None) -> int:
    """Per stage, shape and pool: the memory limit on its layers, its cost rows and those of
    its boundaries; then the stage's split rule. The number of cost rows."""
    md, ub, S = b.md, b.ub, b.num_stages
    b.costs = CostVars(md.new_int_var(0, ub, "Y"), md.new_int_var(0, ub, "tail"),
                       [md.new_int_var(0, ub, f"B{s}") for s in range(S)],
                       [md.new_int_var(0, ub, f"YP{s}") for s in range(S)],
                       [md.new_int_var(0, ub, f"BP{s}") for s in range(S)])
    nrows = 0
    for s in range(S):
        for j in b.shapes_with_stage(s):
            for pl in range(b.num_pools):
                if b.a[s][pl] is None or b.stage_nodes[j] > b.pool_size[pl]:
                    continue
                if not add_memory_limit(b, s, j, pl):
                    continue
                nrows += add_stage_rows(b, s, j, pl)
                for bd in (s - 1, s):
                    if 0 <= bd < S - 1 and b.pp[j] > bd + 1:
                        nrows += add_boundary_rows(b, s, j, pl, bd)
        add_split_rule(b, s, fixed_layers)
    return nrows


def add_memory_limit(b: ModelBuild, s: int, j: int, pl: int) -> bool:
    """Stage s of shape j on pool pl holds at most the layers that fit its memory; False when
    none fit (the pair is forbidden)."""
    lits = [b.x[j], b.a[s][pl]]
    limit = int(b.prices.limits(pl)[b.tab.ks[j], s])
    if limit < 1:
        b.md.add_bool_or([b.x[j].Not(), b.a[s][pl].Not()])
        return False
    if limit < b.num_layers:
        b.md.add(b.layers[s] <= limit).only_enforce_if(lits)
    return True


def add_stage_rows(b: ModelBuild, s: int, j: int, pl: int) -> int:
    """Y, B[s] and the tail above stage s's rows for shape j on pool pl, one set per interval of
    its ring levels where the rows change (from the top interval down); the rows added."""
    md, ub, L, cv = b.md, b.ub, b.num_layers, b.costs
    levels, ge = b.ring[s]
    starts = [0] + levels
    lits = [b.x[j], b.a[s][pl]]
    lay = b.layers[s]
    nrows, prev_key = 0, None
    for i in range(len(starts) - 1, -1, -1):
        r = b.tab.rows[pl, starts[i]]
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
        md.add(cv.Y >= ys * lay + yc + cv.YP[s]).only_enforce_if(lit)
        md.add(cv.B[s] >= bs * lay + bc + cv.BP[s]).only_enforce_if(lit)
        if os_ > 0 or os_ + oc > 0:
            md.add(cv.tail >= os_ * lay + oc).only_enforce_if(lit)
        if rs > 0 or rs + rc > 0:
            md.add(cv.tail >= rs * lay + rc).only_enforce_if(lit)
        nrows += 4
    return nrows


def add_boundary_rows(b: ModelBuild, s: int, j: int, pl: int, bd: int) -> int:
    """YP[s] and BP[s] above the price of boundary bd (next to stage s) for shape j on pool pl,
    one per interval of the boundary levels where it changes; the rows added."""
    cv, lits = b.costs, [b.x[j], b.a[s][pl]]
    starts = [0] + b.boundary_levels  # interval starts of boundary levels
    nrows, prev_key = 0, None
    for i in range(len(starts) - 1, -1, -1):
        r = b.tab.rows[pl, starts[i]]
        vals = (int(r["ypi"][j]), int(r["bpi"][j]))
        if vals == prev_key or vals == (0, 0):
            prev_key = vals
            continue
        prev_key = vals
        lit = lits + ([b.boundary[bd][starts[i + 1]].Not()] if i + 1 < len(starts) else [])
        if max(vals) > b.ub:
            b.md.add_bool_or([v.Not() for v in lit])
            continue
        b.md.add(cv.YP[s] >= vals[0]).only_enforce_if(lit)
        b.md.add(cv.BP[s] >= vals[1]).only_enforce_if(lit)
        nrows += 2
    return nrows


def add_split_rule(b: ModelBuild, s: int, fixed_layers: tuple[int, ...] | None) -> None:
    """Stage s's layers: the given split, or the balanced split when the job wants even splits."""
    if fixed_layers is not None:
        b.md.add(b.layers[s] == int(fixed_layers[s]))
    elif not b.prices.job.constraints.uneven_split:
        for j in b.shapes_with_stage(s):
            b.md.add(b.layers[s] == balanced_split(b.num_layers, int(b.pp[j]))[s]).only_enforce_if(b.x[j])


def add_objective(b: ModelBuild):
    """objective = Y + sum B + tail, at least the chosen shape's relaxation bound; minimised."""
    md, cv = b.md, b.costs
    obj = md.new_int_var(0, b.ub, "objective")
    md.add(obj == cv.Y + sum(cv.B) + cv.tail)
    md.add(obj >= sum(min(int(b.tab.lb[j]), b.ub + 1) * b.x[j] for j in range(b.num_shapes)))
    md.minimize(obj)
    return obj


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
