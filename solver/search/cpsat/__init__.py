"""The CP-SAT encoding of the plan search."""
