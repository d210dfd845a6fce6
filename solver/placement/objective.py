"""The placement objective over bandwidth levels, shared by the two CP-SAT models (the cell
model in `cpsat` and the row-count relaxation in `rows`): each stage's DP ring and each
pipeline boundary gets an order-encoded level (`ge[l]`: "every link it uses is at least
level l"), and `add_objective` prices them with the integer tables of `pricing.Tables`:
`(m*v - 1) max_s slot_s + sum_s slot_s + v max_s tail_s`, slot_s = tau_s + v * (slower
adjacent boundary's p2p), the same integer `Tables.objective` computes for a labelling."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..formulation.links import level_chain
from ..search.cpsat.ortools_cp import cp_model
from .pricing import Grid, Tables


@dataclass
class Objective:
    """The objective's expression and its two bottleneck terms (variables), which proven
    floors (`rows.floors`) bound from below."""

    expr: Any  # CP-SAT linear expression and variables (ortools is imported as a module object)
    max_slot: Any
    tail: Any

    def add_floors(self, md: cp_model.CpModel, floors) -> None:
        """`floors` = (max slot, tail) proven lower bounds, or None."""
        if floors is not None:
            md.add(self.max_slot >= int(floors[0]))
            md.add(self.tail >= int(floors[1]))


def ring_useful(T: Tables, s: int) -> list[bool]:
    """Levels at which stage s's ring costs change: only those need a literal."""
    Lv = T.tau.shape[0]
    return [lv > 0 and (T.tau[lv - 1, s] != T.tau[lv, s] or T.tail[lv - 1, s] != T.tail[lv, s]) for lv in range(Lv)]


def boundary_useful(T: Tables) -> list[bool]:
    return [lv > 0 and T.pi[lv - 1] != T.pi[lv] for lv in range(len(T.pi))]


def order_literals(md: cp_model.CpModel, name: str, useful: list[bool]) -> list:
    """ge[l] for the useful levels (None elsewhere), ge[l] -> ge[l'] for useful l' < l."""
    ge = level_chain(md, name, [lv for lv in range(1, len(useful)) if useful[lv]])
    return [ge.get(lv) for lv in range(len(useful))]


def _cost(ge, table):  # table[l] nonincreasing: value at the chosen level
    expr = int(table[0])
    for lv in range(1, len(table)):
        d = int(table[lv - 1] - table[lv])
        if d:
            expr = expr - d * ge[lv]  # ge[l] exists wherever the table changes
    return expr


def level_literals(md: cp_model.CpModel, g: Grid, T: Tables):
    """Order literals of every stage's ring (None for a stage without one) and boundary."""
    ring = [order_literals(md, f"r{s}", ring_useful(T, s)) if g.ring_edges(s) else None for s in range(g.pp)]
    bnd = [order_literals(md, f"b{b}", boundary_useful(T)) for b in range(g.pp - 1)]
    return ring, bnd


def add_objective(md: cp_model.CpModel, g: Grid, T: Tables, ring_ge, bnd_ge):
    """The integer objective (see the module docstring) as a linear expression over new slot
    and tail variables; returns it (`Objective`) without minimising."""
    tau_e = [_cost(ring_ge[s], T.tau[:, s]) if ring_ge[s] is not None else int(T.tau[-1, s]) for s in range(g.pp)]
    tail_e = [_cost(ring_ge[s], T.tail[:, s]) if ring_ge[s] is not None else int(T.tail[-1, s]) for s in range(g.pp)]
    pi_e = [_cost(bnd_ge[b], T.pi) for b in range(g.pp - 1)]
    slot_ub = int(T.tau[0].max() + T.v * T.pi[0]) + 1
    slots = []
    max_slot = md.new_int_var(0, slot_ub, "maxslot")
    for s in range(g.pp):
        sl = md.new_int_var(0, slot_ub, f"slot{s}")
        adj = [pi_e[b] for b in (s - 1, s) if 0 <= b < g.pp - 1]
        for pe in adj:
            md.add(sl >= tau_e[s] + T.v * pe)
        if not adj:
            md.add(sl >= tau_e[s])
        md.add(max_slot >= sl)
        slots.append(sl)
    tail = md.new_int_var(0, int(T.tail[0].max()) + 1, "tail")
    for s in range(g.pp):
        md.add(tail >= tail_e[s])
    return Objective((T.mv - 1) * max_slot + sum(slots) + T.v * tail, max_slot, tail)
