"""Python API for admission control, a thin facade over `admission/`: `plan`, `check`,
`fewest_gpus` and `admit`, each with a time limit it honours and a status it can act on.

Every call takes `time_limit_s` and returns within it (measured from the call; the work runs
in the cache's worker threads under a deadline it checks, and is stopped when the answer is
given: no work goes on after a call returns, and a process can exit right after it; final
results are cached, so the next call is fast). When time runs out the answer says so: `plan` returns
status FEASIBLE with the best plan known so far and its gap to a proven bound (or UNKNOWN
with no plan), `check` returns status UNKNOWN, `fewest_gpus` the smallest allocation verified
so far.

Answers depend on the question, not on the history: a cached result is the same value a cold
call computes (given the time to finish), so a repeated query gets the identical answer.

State: there is none except an explicit, lock-protected LRU cache (`ResultCache`; the module
default is `DEFAULT_CACHE`, every function takes `cache=`). It holds what depends on a job
alone, never on the admission batch: the pruned candidates of a job (keyed by the full
JobSpec) and the solver's result per job. Concurrent requests for the same job share one
computation (single flight).

Jobs are JobSpecs or job mappings (`specs.request.JobRequest`: catalog names, files or inline
mappings for the model and the cluster); bad input raises InputError naming its spec path
(`job.model`, `jobs[2].num_gpus`), and so does a job whose legal space is over the admission
limits (`admission.limits`: sized before any work). Every call takes `cancel=` (a
threading.Event): when it is set the call stops waiting and answers with what it has (the
service sets it when a client disconnects). Under `catalog.file_policy(...)` (what the HTTP
service runs every request under) file names are refused or confined to a directory.

    check(job, time_limit_s)                     admission.check
    plan(job, time_limit_s)                      admission.planner
    fewest_gpus(job, family_or_cluster, target)  admission.pools (one GPU type: admission.sizing)
    admit(jobs, free_cluster, time_limit_s)      admission.admit
"""

from .admission.admit import AdmitResult, Decision, admit, parse_admit_job
from .admission.cache import DEFAULT_CACHE, DEFAULT_TIME_LIMIT_S, Busy, ResultCache
from .admission.check import CheckResult, check
from .admission.limits import as_cluster_ref, as_job
from .admission.planner import plan
from .admission.pools import fewest_gpus
from .admission.sizing import FewestGpusResult, Probe
from .plan import SolveResult
from .specs.request import AdmitJob, Target

__all__ = [
    "plan", "check", "fewest_gpus", "admit", "as_job", "as_cluster_ref", "parse_admit_job",
    "CheckResult", "Target", "Probe", "FewestGpusResult", "Decision", "AdmitResult", "AdmitJob", "SolveResult",
    "ResultCache", "Busy", "DEFAULT_CACHE", "DEFAULT_TIME_LIMIT_S",
]


# ===================================================================== sweeps
def sweep(grid, output=None, **options) -> list[dict]:
    """Plan every scenario of a grid (a grid file, or a mapping with models, clusters,
    global_batch_sizes, seq_lengths, precisions, constraints and/or scenarios): one row (a dict
    of `solveplan.sweep.COLUMNS`) per scenario, in scenario order. `options`: workers, ray
    ("local" or an address), resume, overwrite, time_limit_s, batch_size, progress -- see
    `solveplan.sweep.sweep`, which this calls."""
    from .sweep import sweep as run_sweep

    return run_sweep(grid, output, **options)


__all__.append("sweep")
