"""Search over the legal shapes and their layer splits: `candidates` (enumerate, price,
prune; the state every method shares), `pruning` (valid lower bounds), `cpsat` (the CP-SAT
model) and `baselines` (exhaustive search, Alpa-style DP)."""
