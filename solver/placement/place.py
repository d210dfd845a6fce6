"""`place`: the entry point of placement -- build the `pricing.Problem`, solve it (CP-SAT, or
exhaustively on small clusters), never return worse than a baseline, price the answer and the
baselines exactly, explain it."""

from __future__ import annotations

import time

from ..errors import InputError
from ..formulation.links import refuse_moe_placement
from ..plan import Out, ParallelConfig
from ..search.result import FEASIBLE, OPTIMAL, PlanStatus
from ..specs import JobSpec
from .cpsat import solve_cpsat
from .exhaustive import solve_exhaustive
from .explain import AvoidedLink, explain
from .links import LinkMatrix
from .pricing import Grid, PlacementEval, Problem, default_order, whole_server_order


class PlacementResult(Out):
    status: PlanStatus
    method: str
    wall_time_s: float
    objective: int
    bound: int | None = None
    gap: float | None = None
    quantum_s: float
    tp: int
    cp: int
    pp: int
    dp: int
    gpus_per_node: int
    replicas_per_node: int
    node_classes: int
    bandwidth_levels: int
    optimized: PlacementEval
    default: PlacementEval
    whole_server: PlacementEval
    speedup_vs_default: float
    speedup_vs_whole_server: float
    avoided_links: list[AvoidedLink]
    explanation: list[str]
    solver: dict = {}

    def grid(self) -> Grid:
        return Grid(self.tp, self.cp, self.pp, self.dp, 1, self.gpus_per_node, self.replicas_per_node,
                    self.dp // self.replicas_per_node)


def place(job: JobSpec, parallel: ParallelConfig, links: LinkMatrix, *, layers=None, method: str = "auto",
          time_limit_s: float = 60.0, workers: int | None = None, seed: int = 0) -> PlacementResult:
    """Place the (stage, replica) groups of `parallel` on the nodes of `links` to minimise the
    formulation's step time. `method`: "cpsat", "exhaustive" (<= 8 nodes) or "auto" (CP-SAT).
    Returns the placement priced exactly against the default rank order and whole-server
    pipelines, with an explanation."""
    refuse_moe_placement(job, "links")
    t0 = time.perf_counter()
    prob = Problem(job, parallel, links, layers)
    g = prob.grid
    dflt_nodes, ws_nodes = default_order(g), whole_server_order(g)
    solver_info: dict = {}
    if method == "exhaustive":
        obj, labels, count = solve_exhaustive(prob)
        status, bound = OPTIMAL, obj
        solver_info = {"labellings": count}
    elif method in ("cpsat", "auto"):
        status, obj, bound, labels, solver_info = solve_cpsat(prob, time_limit_s, workers, seed,
                                                              hints=(dflt_nodes, ws_nodes))
        if labels is None:  # no solution in time: fall back to the better baseline
            best = min((dflt_nodes, ws_nodes), key=prob.objective_of_nodes)
            labels = prob.class_of[best]
            obj = prob.objective_of_nodes(best)
            status = FEASIBLE
    else:
        raise InputError("method", f"unknown method {method!r}; use cpsat, exhaustive or auto")
    opt_nodes = prob.nodes_from_labels(labels)
    # never return worse than a baseline (by the objective), e.g. on a time-out
    for base in (dflt_nodes, ws_nodes):
        if prob.objective_of_nodes(base) < prob.objective_of_nodes(opt_nodes):
            opt_nodes = base
    obj_check = prob.objective_of_nodes(opt_nodes)
    if obj is not None and obj_check != obj:
        solver_info["objective_mismatch"] = [obj, obj_check]
    obj = obj_check
    # among placements optimal for the integer objective, keep the fastest by the exact pricing
    # (the objective buckets latency per bandwidth level)
    opt = prob.price("optimized", opt_nodes)
    dflt = prob.price("default rank order", dflt_nodes)
    ws = prob.price("whole-server pipelines", ws_nodes)
    for base, ev in ((dflt_nodes, dflt), (ws_nodes, ws)):
        if ev.objective <= obj and ev.step_time_s < opt.step_time_s:
            opt_nodes, opt = base, prob.price("optimized", base)
    gap = None if bound is None else max(0.0, (obj - bound) / max(obj, 1))
    if status == OPTIMAL:
        gap = 0.0
    avoided, lines = explain(prob, opt_nodes, dflt_nodes, opt, dflt)
    return PlacementResult(
        status=status, method="exhaustive" if method == "exhaustive" else "cpsat",
        wall_time_s=time.perf_counter() - t0, objective=obj, bound=bound, gap=gap,
        quantum_s=prob.tables.quantum_s / prob.tables.v,
        tp=g.tp, cp=g.cp, pp=g.pp, dp=g.dp, gpus_per_node=g.gpus_per_node, replicas_per_node=g.per_node,
        node_classes=len(prob.classes), bandwidth_levels=len(prob.levels.values_bytes_per_s),
        optimized=opt, default=dflt, whole_server=ws,
        speedup_vs_default=dflt.step_time_s / opt.step_time_s,
        speedup_vs_whole_server=ws.step_time_s / opt.step_time_s,
        avoided_links=avoided, explanation=lines, solver=solver_info,
    )
