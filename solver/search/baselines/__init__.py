"""Yardsticks over the same space and formulation as the CP-SAT encoding (DESIGN.md section 5):
`exhaustive` (every shape x every layer split) and `alpa_dp` (Alpa's inter-operator DP).

Both take a `search.candidates.Candidates` and return a `search.result.MethodResult`. They
are meant to search the legal space without our dominance and time pruning: build their
candidates with `search.candidates.prepare(job, **PREPARE_KWARGS)`. The memory lower bound
stays on (it is valid for every split, so it only drops shapes that cannot fit under any
split).
"""

from typing import Optional

from ..result import Choice, PlanStatus

PREPARE_KWARGS = {"prune_time": False, "apply_dominance": False}


def verdict(finished: bool, best: Optional[Choice]) -> tuple[PlanStatus, Optional[float]]:
    """(status, bound_s) of a baseline: a finished search proves its best (or that none fits);
    a stopped one proves nothing."""
    if finished:
        return ("OPTIMAL", best.objective_s) if best else ("INFEASIBLE", None)
    return ("FEASIBLE" if best else "UNKNOWN"), None


__all__ = ["PREPARE_KWARGS", "verdict"]
