"""A per-shape lower bound of the joint step time by the number of stages on each pool: for
clusters of one or two pools, tighter than the equal-link relaxation (`space.relaxed_bound_s`)
on the shapes that survive it.

For a shape, let q of its p stages sit on pool 0 and p - q on pool 1 (q within what the pools'
nodes can host). Each stage on pool P costs, for l layers, at least a_P l + c_{P,s} per slot
(s its position in the pipeline; a, c the least over the link levels a stage of this many
nodes can reach inside pool P -- `best_levels` -- and the cheapest boundary), holds at most
U_{P,s} layers (its memory limit there) and at least one. The step
`T = (m - 1/v) max slot + sum slot / v + max tail` (`prices`) is then at least, for this q,

- max slot >= M: the least M at which, for some allowed q, q positions on pool 0 and the rest
  on pool 1 hold L layers with every slot <= M (the positions chosen at best: the q largest
  differences of the two pools' capacities at M);
- sum slot >= the layers on the pool of the cheaper slope up to its memory limits (every stage
  of the other pool keeping one layer), plus every stage's least constant;
- max tail >= the tail of a stage holding ceil(L / p) layers (some stage holds that many),
  on the pool where that is least;

and the shape's bound is w M plus the least over q of the other two terms. Every piece is the formulation's, through the
prices' tables (`prices.StageTable`).
"""

from __future__ import annotations

import numpy as np

from .prices import Prices

ITERATIONS = 40  # bisection steps of the largest slot (relative precision 2^-40)


def best_levels(prices: Prices, pool: int, max_nodes: int) -> np.ndarray:
    """(max_nodes + 1,) per stage size n, the highest level the slowest pair of n nodes of the
    pool can have: some node has n - 1 others at that level or above (an upper estimate of
    the largest such clique, so the level is never underestimated); the sentinel for n = 1,
    -1 where the pool has fewer than n nodes."""
    nodes = prices.nodes
    members = np.flatnonzero(nodes.pool_of == pool)
    out = np.full(max_nodes + 1, -1, dtype=np.int64)
    if len(members) == 0:
        return out
    out[1] = prices.sentinel
    sub = nodes.levels.index[np.ix_(members, members)]
    for lv in range(prices.sentinel - 1, -1, -1):
        deg = int(((sub >= lv) & ~np.eye(len(members), dtype=bool)).sum(axis=1).max()) if len(members) > 1 else 0
        for n in range(2, min(deg + 1, max_nodes) + 1):
            if out[n] < 0:
                out[n] = lv
    return out


def _pool_terms(prices: Prices, pool: int, stage_nodes: np.ndarray, cols: np.ndarray):
    """Per shape on this pool: least slot slope a (S,), least slot constants c (S, P) with the
    cheapest boundary, memory limits U (S, P), and the tail rows' least slopes and constants."""
    S = len(prices.shapes)
    top = best_levels(prices, pool, int(stage_nodes.max(initial=1)))[stage_nodes]
    pp = prices.shapes.pp
    inf = np.inf
    a = np.full(S, inf)
    c = np.full(cols.shape, inf)
    o_s, o_c, r_s, r_c = (np.full(S, inf), np.full(S, inf), np.full(S, inf), np.full(S, inf))
    pi = np.full(S, inf)
    for lv in range(prices.sentinel + 1):
        t = prices.table(pool, lv)
        if lv < prices.sentinel:
            pi = np.minimum(pi, t.pi)  # a boundary joins two nodes: a pair level
        on = np.where(stage_nodes >= 2, lv <= top, lv == prices.sentinel) & (top >= 0)
        a = np.where(on, np.minimum(a, t.slot_slope), a)
        c = np.where(on[:, None], np.minimum(c, t.slot_const), c)
        o_s = np.where(on, np.minimum(o_s, t.opt_slope), o_s)
        o_c = np.where(on, np.minimum(o_c, np.where(cols, t.opt_const, inf).min(axis=1)), o_c)
        r_s = np.where(on, np.minimum(r_s, t.red_slope), r_s)
        r_c = np.where(on, np.minimum(r_c, np.where(cols, t.red_const, inf).min(axis=1)), r_c)
    v = prices.table(pool, prices.sentinel).v
    c = c + np.where(pp > 1, v * pi, 0.0)[:, None]
    U = np.where(cols, np.clip(prices.limits(pool), 0, prices.L), 0)
    # where no stage of the shape fits on this pool: infinite constants, finite slopes (no nan)
    c = np.where(np.isfinite(a)[:, None] & cols, c, inf)
    fin = lambda x: np.where(np.isfinite(x), x, 0.0)  # noqa: E731
    tails = (fin(o_s), np.where(np.isfinite(a), o_c, inf), fin(r_s), np.where(np.isfinite(a), r_c, inf))
    return np.maximum(fin(a), 1e-300), c, U, tails


def pool_count_bound_s(prices: Prices, stage_nodes: np.ndarray, pool_nodes) -> np.ndarray:
    """Per shape, the bound of the module docstring (inf where no q fits); zeros (no
    information) on clusters of more than two pools."""
    return bound_and_patterns(prices, stage_nodes, pool_nodes)[0]


def bound_and_patterns(prices: Prices, stage_nodes: np.ndarray, pool_nodes) -> tuple[np.ndarray, list]:
    """`pool_count_bound_s`, and per shape the pools of its stages where that bound's largest
    slot is reached (the q positions with the largest capacity differences on pool 0, the rest
    on pool 1): a pattern for the heuristic (None where no q fits, or more than two pools)."""
    with np.errstate(invalid="ignore", divide="ignore"):  # pools a shape cannot use: inf, masked
        return _bound(prices, stage_nodes, pool_nodes)


def _bound(prices: Prices, stage_nodes: np.ndarray, pool_nodes) -> tuple[np.ndarray, list]:
    S, L = len(prices.shapes), prices.L
    if len(pool_nodes) > 2 or S == 0:
        return np.zeros(S), [None] * S
    pp = prices.shapes.pp.astype(np.int64)
    Pm = prices.limits(0).shape[1]
    cols = np.arange(Pm)[None, :] < pp[:, None]
    per = np.maximum(stage_nodes, 1)
    terms = [_pool_terms(prices, pl, stage_nodes, cols) for pl in range(len(pool_nodes))]
    caps = [pool_nodes[pl] // per for pl in range(len(pool_nodes))]
    if len(terms) == 1:  # one pool: every stage on it
        terms.append(terms[0])
        caps.append(np.zeros(S, dtype=np.int64))
    (a0, c0, U0, t0), (a1, c1, U1, t1) = terms
    qs = np.arange(Pm + 1)[None, :]
    valid = (qs <= np.minimum(pp, caps[0])[:, None]) & (pp[:, None] - qs <= caps[1][:, None])  # (S, Q)

    def capacity(M, detail=False):  # (S,) the most layers held with every slot <= M (S,), over the q allowed
        k0 = np.clip(np.floor((M[:, None] - c0) / a0[:, None]), 0, U0)
        k1 = np.clip(np.floor((M[:, None] - c1) / a1[:, None]), 0, U1)
        k0 = np.where(k0 >= 1, k0, -1e9)  # a stage holds at least one layer
        k1 = np.where(k1 >= 1, k1, -1e9)
        order = np.argsort(-np.where(cols, k0 - k1, -np.inf), axis=1, kind="stable")
        top = np.take_along_axis(np.where(cols, k0 - k1, -np.inf), order, axis=1)
        csum = np.concatenate([np.zeros((S, 1)), np.cumsum(np.where(np.isfinite(top), top, 0), axis=1)], axis=1)
        total = np.where(valid, np.where(cols, k1, 0).sum(axis=1)[:, None] + csum, -np.inf)
        return (total.max(axis=1), order, total.argmax(axis=1)) if detail else total.max(axis=1)

    ends = [np.where(cols, c, 0).max(axis=1) + a * L for a, c in ((a0, c0), (a1, c1))]
    hi = np.maximum(*(np.where(np.isfinite(e), e, 0.0) for e in ends)) + 1.0
    feasible = capacity(hi) >= L
    lo = np.zeros_like(hi)
    for _ in range(ITERATIONS):
        mid = 0.5 * (lo + hi)
        ok = capacity(mid) >= L
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid)
    M = lo * (1 - 1e-12)
    _, order, q_best = capacity(hi, detail=True)
    patterns: list[tuple[int, ...] | None] = []
    for i in range(S):
        if not feasible[i]:
            patterns.append(None)
            continue
        pat = np.ones(int(pp[i]), dtype=np.int64) if len(pool_nodes) == 2 else np.zeros(int(pp[i]), dtype=np.int64)
        pat[order[i, :int(q_best[i])]] = 0
        patterns.append(tuple(int(x) for x in pat))
    # sum of slots: layers on the cheaper slope first, within its stages' limits
    n0, n1 = qs, pp[:, None] - qs
    cmin0 = np.where(cols, c0, np.inf).min(axis=1)[:, None]
    cmin1 = np.where(cols, c1, np.inf).min(axis=1)[:, None]
    u0, u1 = U0.max(axis=1)[:, None], U1.max(axis=1)[:, None]
    cheap0 = (a0 <= a1)[:, None]
    on_cheap = np.where(cheap0, np.minimum(n0 * u0, L - n1), np.minimum(n1 * u1, L - n0))
    on_cheap = np.maximum(on_cheap, 0)
    a_lo, a_hi = np.minimum(a0, a1)[:, None], np.maximum(a0, a1)[:, None]
    consts = np.where(n0 > 0, n0 * cmin0, 0.0) + np.where(n1 > 0, n1 * cmin1, 0.0)
    slot_sum = a_lo * on_cheap + a_hi * (L - on_cheap) + consts
    # the tail of a stage holding ceil(L / p) layers, on the pool where it is least
    heavy = np.ceil(L / pp)[:, None]

    def tail(t, U):
        o_s, o_c, r_s, r_c = (x[:, None] for x in t)
        at = np.where(o_s >= 0, heavy, U.max(axis=1)[:, None])
        at_r = np.where(r_s >= 0, heavy, U.max(axis=1)[:, None])
        return np.maximum(np.maximum(o_s * at + o_c, r_s * at_r + r_c), 0.0)

    tl = np.minimum(np.where(n0 > 0, tail(t0, U0), np.inf), np.where(n1 > 0, tail(t1, U1), np.inf))
    tab = prices.table(0, prices.sentinel)
    w, v = tab.w[:, None], tab.v[:, None]
    rest = np.where(valid, slot_sum / v + tl, np.inf).min(axis=1)
    w, v = w[:, 0], v[:, 0]
    return np.where(feasible & np.isfinite(rest), w * M + rest, np.inf), patterns
