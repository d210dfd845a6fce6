"""The relaxation of a placement problem the bounds are proven on, and the symmetry its row
model keeps.

`lift_pairs` raises slow pairs to the level of the links around them (a degraded link inside a
rack to the rack's level, one across the spine to the spine's) and keeps a slow NIC as it is.
No pair gets slower, and the objective's tables fall with bandwidth (`pricing.build_tables`),
so every placement costs at most as much after the lift: the lifted problem's optimum is a
valid lower bound. On a fabric of racks with a few degraded links (and NICs), its nodes fall
into far fewer classes, most of them whole racks that are interchangeable as a whole
(`twin_groups`), which the row model orders (symmetry breaking), and its optimum is usually
the real one."""

from __future__ import annotations

import copy

import numpy as np

from .pricing import Problem


def lift_pairs(index: np.ndarray) -> np.ndarray:
    """Raise each pair (a, b) to the level a has to some node linked to b at the top level (and
    the same from b's side), until nothing changes: a slow link between two nodes is lifted to
    the level of the links around it, while a node whose every link is slow (a slow NIC) has
    no top-level neighbour and keeps its levels. Symmetric in, symmetric out; diagonal -1."""
    w = np.array(index, dtype=np.int64)
    np.fill_diagonal(w, -1)
    n, top = len(w), int(w.max())
    while True:
        at_top = (w == top).astype(np.float32)
        via = np.full((n, n), -1, dtype=np.int64)
        for lv in range(max(int(w[w >= 0].min(initial=top)), 0), top + 1):
            # via[a, b] >= lv iff some c has w[a, c] >= lv and w[c, b] = top: a boolean matrix product
            reach = ((w >= lv).astype(np.float32) @ at_top) > 0
            via[reach] = lv
        lifted = np.maximum(w, np.maximum(via, via.T))
        np.fill_diagonal(lifted, -1)
        if np.array_equal(lifted, w):
            return w
        w = lifted


def relaxed(prob: Problem) -> Problem:
    """`prob` with its pair levels lifted (`lift_pairs`; the same grid, level values and tables,
    so objectives compare in the same quanta). Its classes are unions of `prob`'s classes: the
    lift treats twins alike, so they stay twins."""
    out = copy.copy(prob)
    out.classify(lift_pairs(prob.levels.index))
    return out


def coarse_of(prob: Problem, coarse: Problem) -> list[int]:
    """For each class of `prob`, the class of `coarse` (its relaxation) that holds it."""
    return [int(coarse.class_of[members[0]]) for members in prob.classes]


def twin_groups(prob: Problem) -> list[list[int]]:
    """Groups of classes interchangeable as a whole: the same size, the same level inside, and
    the same level to every other class. Swapping two of them maps any placement to one of the
    same objective, so the row model may order their row counts (`rows.RowModel`)."""
    CL, counts = prob.class_level, prob.counts
    K = len(CL)
    groups, seen = [], set()
    for k in range(K):
        if k in seen:
            continue
        group = [k]
        for k2 in range(k + 1, K):
            if k2 in seen or counts[k2] != counts[k] or CL[k2, k2] != CL[k, k]:
                continue
            others = [x for x in range(K) if x not in (k, k2)]
            if np.array_equal(CL[k, others], CL[k2, others]):
                group.append(k2)
        seen.update(group)
        if len(group) > 1:
            groups.append(group)
    return groups
