"""Placement: which node hosts which (pipeline stage, data-parallel replica) on a cluster whose
links are not all equal (docs/DESIGN.md sections 1 and 4; Pipette's fine-grained assignment).

Unit and grid. A (stage, replica) slot is a model-parallel group of `tp*cp` GPUs, kept inside
one node (TP and CP on NVLink; groups that span nodes are out of scope). A node then holds
`k = gpus_per_node / (tp*cp)` replicas of one stage, as Megatron's default rank order
tp-cp-dp-pp does, so placement assigns the cluster's nodes to a grid of cells
`(stage s, replica group j)`, `pp` rows by `dp/k` columns, cell index `s*(dp/k) + j`.
Column `j` is a pipeline chain: the boundary between stages `b` and `b+1` of replica group `j`
uses the node pair of cells (b, j) and (b+1, j). Row `s` is stage s's data-parallel (x CP)
group: NCCL's ring visits the nodes in rank order, i.e. j = 0, 1, ..., D-1, back to 0.

Pricing (the formulation's own account). A pair's bandwidth is the slower direction of the
measured per-GPU-pair matrix (`LinkMatrix.pair_gbit_per_s`), attained bytes/s after the
cluster's network efficiency for nominal numbers. A boundary's bandwidth is the slowest of
its replica groups' links, a stage's DP ring the slowest link of its ring. The stage-time
formulation (`formulation.coefficients`) is re-evaluated with the NIC bandwidth and latency
set to those values (no oversubscription: the matrix already holds it), so every cost is the
formulation's: stage `s` pays its DP collectives (and ZeRO-2/3 per-micro-batch traffic) at
its ring's bandwidth and, in its 1F1B slot, the p2p of its slower adjacent boundary (a stage
receives from and sends to both neighbours every steady-state slot). Then
`T = (m - 1/v) max_s slot_s + sum_s slot_s / v + max_s (exposed DP_s + optimizer_s)`, exactly
`evaluate_split` with per-stage bandwidths; with all links equal it equals `make_plan`.

CP-SAT model. Nodes with identical link profiles (twins: racks of a fabric, after bucketing
bandwidths into levels) are interchangeable, so the decision is which *class* of node sits in
each cell (`y[k][c]`, class counts fixed). Each boundary and each stage's ring has an
order-encoded bandwidth level (`ge[l]`: "every link it uses is at least level l"), bounded by
the assigned links through clauses `ge[l] & y[k][a] -> OR(y[k'][c] : level(k, k') >= l)`.
The objective is the step time above, tabulated per level and stage in integer time quanta.
Since costs fall with bandwidth, the solver sets each level to the real bottleneck. Where
its own bound stalls (hundreds of nodes), a relaxation over each stage row's class counts
(`rows`: necessary conditions per bandwidth level, exact on rack/spine hierarchies) is probed
at thresholds of the objective to prove a lower bound, and the row counts it finds are given
back to the cell model; a proven optimum is re-found by a one-worker deterministic search so
it does not depend on the seed or worker count (`cpsat.solve_cpsat`). Small
clusters (<= 8 nodes) can be solved exhaustively over every class labelling of the cells
(all node permutations up to interchangeable nodes) with the same integer objective.
Baselines: Megatron's default rank order (node `c` hosts cell `c`) and whole-server pipelines
(rank order tp-cp-pp-dp: each replica group's pipeline on consecutive nodes).

Modules, in the order `place.place` uses them: `links` (reading link matrices), `topology`
(generated and imported matrices; their fabric, levels and interchangeable nodes are
`formulation.links`'), `pricing` (the grid, the
formulation's prices per bandwidth level, the `Problem`), `objective` (the objective over
level literals, shared by the CP-SAT models), `cpsat`, `rows` and `exhaustive` (the
solvers and the relaxation), `explain` (what the placement avoided and why), `place` (the entry point).

The joint search (shape, split and placement at once, on clusters of pools and measured links)
is not here: it is a search method, `search.joint`, whose answer `optimize.joint` makes the
same `plan.OptimizeResult` as every other path (its plan an `optimize.placed.PlacedPlan`).
What it shares with this package is formulation: link levels, a cluster priced at a link and
the order-literal chain (`formulation.links`); and the link files read here (`links.LinkMatrix`).
"""

