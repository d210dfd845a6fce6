"""Admission control in bounded time (the `api` facade's implementation), in the order a
request flows through it: `limits` (jobs at the edge, guard rails), `cache` (the only state:
results and in-flight work; the clock), `screen` (what the cached candidates prove),
`planner` (`plan` with a fallback at the deadline), `check`, `sizing` (`fewest_gpus`; `pools` for a cluster of pools),
`admit` (a batch, first come first served); `http_guards`: the HTTP service's Host check,
bearer token and caps on connections without a complete request."""
