"""Jobs at the admission edge: a JobSpec or a job mapping (`specs.request.JobRequest`, read by
`catalog.load_job`) checked against guard rails -- the enumeration is polynomial in these
sizes, and a service must not let one request occupy a worker for minutes -- with every
error naming its field under the root the caller gives (`job`, `jobs[3]`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Union

from pydantic import BaseModel

from ..catalog import load_cluster, load_job
from ..errors import InputError, path
from ..specs import ClusterSpec, JobSpec

MAX_GPUS = 32768
MAX_GLOBAL_BATCH_SIZE = 65536
MAX_SEQ_LENGTH = 1 << 20
MAX_LAYERS = 4096
MAX_WIDTH = 1 << 20  # hidden_size, ffn_hidden_size
MAX_VOCAB = 1 << 22
MAX_SPEC_NUMBER = 1e9  # any float of a GPU or cluster spec (bandwidths, latencies, peaks)

JobLike = Union[JobSpec, Mapping[str, Any]]


def _check_numbers(obj, where: str) -> None:
    """Every float of a spec (recursively) finite and at most MAX_SPEC_NUMBER in size."""
    for name, value in obj:
        here = f"{where}.{name}"
        if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= MAX_SPEC_NUMBER):
            raise InputError(here, f"{value!r} is out of range (finite, at most {MAX_SPEC_NUMBER:g})")
        if isinstance(value, BaseModel):
            _check_numbers(value, here)
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    _check_numbers(item, f"{here}[{i}]")


def check_limits(job: JobSpec, field: str = "job") -> JobSpec:
    """Reject jobs beyond the guard rails (see MAX_*), naming the field."""
    m, c = job.model, job.cluster
    _check_numbers(c, path(field, "cluster"))
    _check_numbers(m, path(field, "model"))
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
    return as_job({**job, "cluster": cluster.model_dump()}, field)


def as_cluster_ref(ref: Union[str, ClusterSpec, Mapping[str, Any]], field: str = "cluster") -> Union[str, ClusterSpec]:
    """A family or cluster name as is, a cluster mapping as a ClusterSpec (InputError naming the field)."""
    if isinstance(ref, (str, ClusterSpec)):
        return ref
    if isinstance(ref, Mapping):
        return load_cluster(dict(ref), field)
    raise InputError(field, "give a cluster family (e.g. h100), a cluster name, <gpu>x<N> or a cluster mapping")
