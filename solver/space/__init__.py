"""The space of parallel shapes: `shapes` (a batch of configurations as numpy arrays),
`enumeration` (every legal shape of a job, with dominance)."""
