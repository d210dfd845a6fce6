"""Yardsticks over the same space and formulation as the CP-SAT encoding (docs/DESIGN.md section 5):
`exhaustive` (every shape x every layer split), `branch_bound` (the same, with the pruning's
bounds) and `alpa_dp` (Alpa's inter-operator DP).

Each takes a `search.candidates.Candidates` and returns a `search.result.MethodResult`, so any
of them searches whatever candidates it is given: `prepare(job)` (the product's pruning) or
`prepare(job, **PREPARE_KWARGS)`, the legal space without our dominance and time pruning
(what `solveplan optimize --method exhaustive|alpa-dp` searches). The memory lower bound stays
on there (it is valid for every split, so it only drops shapes that cannot fit under any
split). `benchmarks/search_cost.py` runs every method on both.
"""

from ..result import FEASIBLE, INFEASIBLE, OPTIMAL, UNKNOWN, Choice, PlanStatus

PREPARE_KWARGS = {"prune_time": False, "apply_dominance": False}


def verdict(finished: bool, best: Choice | None) -> tuple[PlanStatus, float | None]:
    """(status, bound_s) of a baseline: a finished search proves its best (or that none fits);
    a stopped one proves nothing."""
    if finished:
        return (OPTIMAL, best.objective_s) if best else (INFEASIBLE, None)
    return (FEASIBLE if best else UNKNOWN), None


__all__ = ["PREPARE_KWARGS", "verdict"]
