"""The space of parallel shapes: `shapes` (a batch of configurations as numpy arrays),
`enumeration` (every legal shape of a job, with dominance), `rules` (the same rules on one
explicit configuration, its defaults, the textbook configuration, the least-memory knobs).
Nothing here prices a shape: that is the formulation's."""
