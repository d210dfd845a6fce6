"""The joint model (issue #13): the parallel shape, the layer split and which nodes of which
pool host every pipeline stage, in one CP-SAT model, on clusters of several GPU types and on
unequal links (docs/DESIGN.md sections 1 and 4).

The space: every legal shape on any number of whole nodes; each stage's tp*cp*dp GPUs fill
whole nodes of one pool; nodes left over stay idle. The price of a plan is the formulation's
(`formulation.pipeline.evaluate_stages`): each stage on its own GPU type's coefficients, its
data-parallel ring (and TP/CP groups that span nodes) at the slowest link among its nodes,
each boundary at the slowest link across it, memory against its own GPU.

Modules, in the order a search uses them: `nodes` (pools, links, levels, classes of
interchangeable nodes), `prices` (coefficients per pool and link level; float evaluation of an
assignment), `space` (shapes and valid bounds), `bounds` (the tighter bound by stages per pool, on the
relaxation's survivors), `heuristic` (contiguous-block plans, their nodes repaired),
`prepare` (pruning against the incumbent), `model` and `solve` (the CP-SAT model and its
phases), `exhaustive` (ground truth for small clusters), `baselines` (sequential method,
simulated annealing). Shared with `placement/`: link levels, a cluster priced at a link and
the order-literal chain (`formulation.links`). Its answer becomes a plan at the `optimize`
level: `optimize.joint` (the search step `optimize` runs for pools and links, into the same
`plan.OptimizeResult`) and `optimize.placed` (the placed plan, hostfile, explanation). Time is
shared among the phases by `search.phases`.
"""
