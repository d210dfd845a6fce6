"""Rank order that realises a placement: a hostfile (one host per line with its slots, in the
order the launcher numbers nodes) and the RANK -> (stage, replica, cp rank, tp rank) table.

Megatron-LM numbers ranks tp-cp-dp-pp (TP fastest). Launch with the hosts in the hostfile's
order (`mpirun --hostfile`, or torchrun with `--node_rank` = line index) and global rank
`r` runs on line `r // gpus_per_node`, local GPU `r % gpus_per_node`, which is the cell
(stage, replica group) the placement gave that host.
"""

from __future__ import annotations


def hostfile(hosts_by_cell: list[str], slots: int) -> str:
    return "".join(f"{h} slots={slots}\n" for h in hosts_by_cell)


def rank_table(hosts_by_cell: list[str], *, tp: int, cp: int, dp: int, pp: int, gpus_per_node: int) -> list[dict]:
    rows = []
    for r in range(tp * cp * dp * pp):
        t = r % tp
        c = (r // tp) % cp
        d = (r // (tp * cp)) % dp
        p = r // (tp * cp * dp)
        rows.append({"rank": r, "host": hosts_by_cell[r // gpus_per_node], "local_gpu": r % gpus_per_node,
                     "stage": p, "replica": d, "cp_rank": c, "tp_rank": t})
    return rows


def render_rank_table(rows: list[dict]) -> str:
    cols = ("rank", "host", "local_gpu", "stage", "replica", "cp_rank", "tp_rank")
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    out = ["  ".join(c.rjust(width[c]) for c in cols)]
    out += ["  ".join(str(r[c]).rjust(width[c]) for c in cols) for r in rows]
    return "\n".join(out) + "\n"


def result_hostfile(result) -> str:
    """Hostfile of a `placement.PlacementResult`'s optimised placement."""
    return hostfile(result.optimized.hosts_by_cell, result.gpus_per_node)


def result_rank_table(result) -> list[dict]:
    return rank_table(result.optimized.hosts_by_cell, tp=result.tp, cp=result.cp, dp=result.dp, pp=result.pp,
                      gpus_per_node=result.gpus_per_node)


def render_placement(res, num_nodes: int) -> str:
    """Text summary of a PlacementResult: status, the three placements priced, the
    speed-ups, the explanation and the hostfile."""
    out = [f"placement of tp={res.tp} cp={res.cp} pp={res.pp} dp={res.dp} on {num_nodes} nodes: {res.status} "
           f"({res.method}, {res.wall_time_s:.2f} s, {res.node_classes} node classes, "
           f"{res.bandwidth_levels} bandwidth levels, gap {0 if res.gap is None else res.gap:.2%})",
           f"{'placement':<26}{'step s':>10}{'pp comm s':>11}{'dp comm s':>11}{'exposed dp s':>14}"
           f"{'min boundary':>14}{'min ring':>10}"]
    for ev in (res.optimized, res.default, res.whole_server):
        rings = [x for x in ev.dp_ring_gbit_per_s if x is not None]
        out.append(f"{ev.name:<26}{ev.step_time_s:>10.4f}{ev.pp_comm_s:>11.4f}{ev.dp_comm_s:>11.4f}"
                   f"{ev.exposed_dp_s:>14.4f}{min(ev.boundary_gbit_per_s, default=float('nan')):>14g}"
                   f"{min(rings, default=float('nan')):>10g}")
    out.append(f"speed-up: {res.speedup_vs_default:.3f}x vs default rank order, "
               f"{res.speedup_vs_whole_server:.3f}x vs whole-server pipelines")
    out += [f"- {line}" for line in res.explanation]
    out.append("hostfile (line i = node i of the launch; Megatron rank order tp-cp-dp-pp):")
    return "\n".join(out) + "\n" + result_hostfile(res)
