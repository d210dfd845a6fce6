"""What a placement changed and why: the slow links Megatron's default rank order puts on a
critical path (a pipeline boundary or a data-parallel ring) that the optimised placement
keeps off, the slow nodes and where they went, and the predicted steps side by side."""

from __future__ import annotations

import math

import numpy as np

from ..plan import Out
from .pricing import PlacementEval, Problem


class AvoidedLink(Out):
    a: str
    b: str
    gbit_per_s: float
    role_in_default: str


def _roles(prob: Problem, node_of_cell) -> dict[tuple[int, int], list[str]]:
    g = prob.grid
    roles: dict[tuple[int, int], list[str]] = {}
    for b in range(g.pp - 1):
        for j, (x, y) in enumerate(g.boundary_edges(b)):
            u, w = sorted((int(node_of_cell[x]), int(node_of_cell[y])))
            roles.setdefault((u, w), []).append(f"pipeline boundary {b}->{b + 1} (replica group {j})")
    for s in range(g.pp):
        for x, y in g.ring_edges(s):
            u, w = sorted((int(node_of_cell[x]), int(node_of_cell[y])))
            roles.setdefault((u, w), []).append(f"stage {s} data-parallel ring")
    return roles


def explain(prob: Problem, opt_nodes, default_nodes, opt: PlacementEval, dflt: PlacementEval):
    lm = prob.links
    pair = lm.pair_gbit_per_s()
    opt_roles = _roles(prob, opt_nodes)
    def_roles = _roles(prob, default_nodes)
    opt_pp = min(opt.boundary_gbit_per_s) if opt.boundary_gbit_per_s else math.inf
    rings = [x for x in opt.dp_ring_gbit_per_s if x is not None]
    opt_dp = min(rings) if rings else math.inf
    top = float(np.nanmax(pair)) if lm.n > 1 else 0.0
    avoided = []
    for (u, w), roles in sorted(def_roles.items(), key=lambda kv: (pair[kv[0]], kv[0])):
        bw = float(pair[u, w])
        if bw >= top or (u, w) in opt_roles:
            continue  # full-speed links, and slow links the optimised placement also uses
        avoided.append(AvoidedLink(a=lm.hosts[u], b=lm.hosts[w], gbit_per_s=round(bw, 6),
                                   role_in_default="; ".join(roles)))
    lines = []
    G = prob.grid.groups

    def where(nodes, i):
        return ", ".join(f"stage {c // G} replica group {c % G}" for c, n in enumerate(nodes) if n == i)

    slow_nodes = [i for i in range(lm.n) if lm.n > 1 and np.nanmax(pair[i]) < top]
    for i in slow_nodes[:8]:
        lines.append(f"{lm.hosts[i]} has no link faster than {np.nanmax(pair[i]):g} Gbit/s: placed at "
                     f"{where(opt_nodes, i)} (default rank order: {where(default_nodes, i)})")
    if avoided:
        shown = ", ".join(f"{a.a}<->{a.b} ({a.gbit_per_s:g} Gbit/s, {a.role_in_default})" for a in avoided[:6])
        more = f" and {len(avoided) - 6} more" if len(avoided) > 6 else ""
        lines.append(f"slow links the default rank order puts on critical paths and the optimised placement "
                     f"avoids: {shown}{more}")
    lines.append(
        f"optimised: slowest pipeline boundary {opt_pp:g} Gbit/s, slowest data-parallel ring {opt_dp:g} Gbit/s; "
        f"default rank order: {min(dflt.boundary_gbit_per_s, default=math.inf):g} and "
        f"{min([x for x in dflt.dp_ring_gbit_per_s if x is not None], default=math.inf):g} Gbit/s")
    lines.append(f"predicted step {opt.step_time_s:.4f} s vs {dflt.step_time_s:.4f} s with the default rank order "
                 f"(pipeline p2p {opt.pp_comm_s:.4f} vs {dflt.pp_comm_s:.4f} s, data-parallel {opt.dp_comm_s:.4f} vs "
                 f"{dflt.dp_comm_s:.4f} s per step)")
    return avoided, lines
