"""What every search method returns: a status as data (`PlanStatus`), the chosen shapes and
splits (`Choice`), the bound it proved and its statistics (`MethodResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# OPTIMAL: the plan is proven best (within the stated tolerance); FEASIBLE: a plan, not proven
# best (a time limit or a budget stopped the proof); INFEASIBLE: proven that no plan fits;
# UNKNOWN: no plan and no proof (time ran out first).
PlanStatus = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]
# the statuses by name, so that code compares with these and never spells a raw string; the last
# three typed as their own value, so that they also fit a narrower status (CheckStatus). (OPTIMAL
# stays PlanStatus-typed for now: placement/place.py and optimize/ start a status variable from it
# and assign FEASIBLE later, which its own type would refuse until they annotate it PlanStatus.)
OPTIMAL: PlanStatus = "OPTIMAL"
FEASIBLE: Literal["FEASIBLE"] = "FEASIBLE"
INFEASIBLE: Literal["INFEASIBLE"] = "INFEASIBLE"
UNKNOWN: Literal["UNKNOWN"] = "UNKNOWN"
# What `admission.check` can say: some plan fits, none does, or not decided in time (never OPTIMAL).
CheckStatus = Literal["FEASIBLE", "INFEASIBLE", "UNKNOWN"]


@dataclass
class Choice:
    """One answer of a search method: a surviving shape (index into Candidates.shapes) and
    its layer split, with the method's own value of the objective."""

    index: int
    layers: list[int]
    objective_s: float


@dataclass
class MethodResult:
    """What every search method (cpsat, exhaustive, alpa-dp) returns to `optimize`.

    best: the chosen plan (None when there is none); top: the K best distinct plans found
    (best first) when asked for; bound_s: a proven lower bound on the optimal step time (None
    when the method proves nothing); evaluations: configurations evaluated (baselines);
    finished: False when a budget stopped the method; stats: solver statistics to report.
    """

    status: PlanStatus
    best: Choice | None
    bound_s: float | None = None
    top: list[Choice] = field(default_factory=list)
    evaluations: int | None = None
    finished: bool = True
    stats: dict = field(default_factory=dict)
