"""Search over the legal shapes and their layer splits: `candidates` (enumerate, price,
prune; the state every method shares), `pruning` (valid lower bounds), `cpsat` (the CP-SAT
model), `baselines` (exhaustive search, Alpa-style DP) and `joint` (the joint model: shape,
split, pool and nodes at once on clusters of pools and measured links; its own candidates and
outcome for now, made `optimize`'s result by `optimize.joint`); `phases` (the one runner
that shares a time limit among the phases of a solve)."""
