"""Jobs at the admission edge: a JobSpec or a job mapping (`specs.request.JobRequest`, read by
`catalog.load_job`) checked against guard rails -- the enumeration is polynomial in these
sizes, and a service must not let one request occupy a worker for minutes -- with every
error naming its field under the root the caller gives (`job`, `jobs[3]`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..catalog import load_cluster, load_job
from ..errors import InputError, path
from ..space.enumeration import check_space
from ..specs import ClusterSpec, JobSpec
from ..specs.base import check_types
from ..specs.cluster import FABRIC_FIELDS

MAX_GPUS = 32768
MAX_GLOBAL_BATCH_SIZE = 65536
MAX_SEQ_LENGTH = 1 << 20
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20  # hidden_size, ffn_hidden_size
MAX_VOCAB = 1 << 22
# The legal space a request may span (space.enumeration.check_space): the largest catalog jobs
# span ~2.1e5 shapes and ~1.4e7 shape-stages; a request over these is refused before any work.
MAX_LEGAL_SHAPES = 500_000
MAX_SHAPE_STAGES = 30_000_000

JobLike = JobSpec | Mapping[str, Any]


def check_limits(job: JobSpec, field: str = "job") -> JobSpec:
    """Reject jobs beyond the guard rails (see MAX_*), naming the field: the spec rules a
    mapping is built under (`specs.base.check_types`: strict types, plausible ranges) also for a
    JobSpec made in Python, then the sizes, then the legal space the job spans."""
    check_types(JobSpec, job.model_dump(), field)
    m, c = job.model, job.cluster
    checks = [
        ("cluster", c.num_gpus, MAX_GPUS, f"{c.num_gpus} GPUs"),
        ("global_batch_size", job.global_batch_size, MAX_GLOBAL_BATCH_SIZE, str(job.global_batch_size)),
        ("seq_length", job.seq_length, MAX_SEQ_LENGTH, str(job.seq_length)),
        ("model.num_layers", m.num_layers, MAX_LAYERS, str(m.num_layers)),
        ("model.hidden_size", m.hidden_size, MAX_WIDTH, str(m.hidden_size)),
        ("model.ffn_hidden_size", m.ffn_hidden_size, MAX_WIDTH, str(m.ffn_hidden_size)),
        ("model.vocab_size", m.vocab_size, MAX_VOCAB, str(m.vocab_size)),
    ]
    for key, value, cap, shown in checks:
        if value > cap:
            raise InputError(path(field, key), f"{shown} is beyond what the planner accepts (at most {cap})")
    check_space(job, MAX_LEGAL_SHAPES, MAX_SHAPE_STAGES, field)
    return job


def as_job(job: JobLike, field: str = "job") -> JobSpec:
    """A JobSpec from a JobSpec or a job mapping (`specs.request.JobRequest`), checked against
    the guard rails. Bad input raises InputError naming its path under `field`."""
    if isinstance(job, JobSpec):
        return check_limits(job, field)
    if not isinstance(job, Mapping):
        raise InputError(field, f"give a JobSpec or a mapping of job fields, not {type(job).__name__}")
    return check_limits(load_job(job, field), field)


def with_cluster(job: JobLike, cluster: ClusterSpec, field: str = "job") -> JobSpec:
    """`job` (a JobSpec, or a mapping whose cluster may be missing) on `cluster`."""
    if isinstance(job, JobSpec):
        return check_limits(job.model_copy(update={"cluster": cluster}), field)
    if not isinstance(job, Mapping):
        raise InputError(field, f"give a JobSpec or a mapping of job fields, not {type(job).__name__}")
    # a cluster of pools states its node fields inside each pool only (specs.cluster)
    dump = cluster.model_dump(exclude=set(FABRIC_FIELDS) if cluster.pools else None)
    return as_job({**job, "cluster": dump}, field)


def as_cluster_ref(ref: str | ClusterSpec | Mapping[str, Any], field: str = "cluster") -> str | ClusterSpec:
    """A family or cluster name as is, a cluster mapping as a ClusterSpec (InputError naming the field)."""
    if isinstance(ref, (str, ClusterSpec)):
        return ref
    if isinstance(ref, Mapping):
        return load_cluster(dict(ref), field)
    raise InputError(field, "give a cluster family (e.g. h100), a cluster name, <gpu>x<N> or a cluster mapping")
