"""Exhaustive placement for small clusters: every distinct class labelling of the cells (all
node permutations up to interchangeable nodes), scored with the same integer objective as the
CP-SAT model (`pricing.Tables.objective`): the ground truth the CP-SAT model is tested
against."""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .pricing import Problem

EXHAUSTIVE_MAX_NODES = 8


def _multiset_permutations(counts: list[int]):
    n = sum(counts)
    counts = list(counts)
    out = [0] * n

    def rec(pos):
        if pos == n:
            yield tuple(out)
            return
        for k, c in enumerate(counts):
            if c:
                counts[k] -= 1
                out[pos] = k
                yield from rec(pos + 1)
                counts[k] += 1

    yield from rec(0)


def solve_exhaustive(prob: Problem, max_nodes: int = EXHAUSTIVE_MAX_NODES):
    """Every distinct class labelling of the cells (all node permutations up to
    interchangeable nodes); returns (objective, labels, count)."""
    if prob.grid.cells > max_nodes:
        raise InputError("method", f"exhaustive placement is limited to {max_nodes} nodes (got {prob.grid.cells})")
    rows = np.array(list(_multiset_permutations(prob.counts.tolist())), dtype=np.int64)
    obj = prob.tables.objective(*prob.level_rows(rows))
    k = int(np.argmin(obj))
    return int(obj[k]), rows[k], len(rows)
