"""Solver encodings of the planning problem. `cpsat`: the OR-Tools CP-SAT model over the
surviving shapes and their layer splits (DESIGN.md section 4). Encodings build and solve
models; they never print or render."""
