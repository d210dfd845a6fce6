"""Catalogs and references -> specs: models/*.yaml, clusters/gpus/*.yaml, clusters/families/*.yaml
(templates behind `<gpu>x<N>` names) and clusters/*.yaml (named clusters), spec files and
Hugging Face config.json files, and `load_job`: the one reader of a job mapping
(`specs.request.JobRequest`) into a `JobSpec`.

Every lookup failure is an `InputError` naming the field (a spec path under the `field` the
caller gives) and offering close matches.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import InputError, escape_text, path
from .specs import ClusterSpec, Constraints, GPUSpec, JobSpec, ModelSpec, PoolSpec
from .specs.base import PLAUSIBLE, build
from .specs.frameworks import narrow_constraints, torchtitan_moe_unpriced
from .specs.job import rule_constraints

# the safe reader of user files, re-exported: callers read files through the catalog
from .specs.reading import SpecFiles, file_policy, is_file_ref, parse_data, read_data, read_mapping, read_text  # noqa: F401
from .specs.request import JobRequest

_PACKAGES = {
    "models": "solveplan.catalog_models",
    "gpus": "solveplan.catalog_clusters.gpus",
    "families": "solveplan.catalog_clusters.families",
    "clusters": "solveplan.catalog_clusters",
    "published": "solveplan.catalog_published",  # the published measurements (calibration.rows.find_data)
}
_REPO_DIRS = {"models": "models", "gpus": "clusters/gpus", "families": "clusters/families", "clusters": "clusters",
              "published": "published"}


def _catalog_dir(kind: str) -> Path:
    try:
        return Path(str(resources.files(_PACKAGES[kind])))
    except (ModuleNotFoundError, TypeError):  # running from a source tree without install
        return Path(__file__).resolve().parent.parent / _REPO_DIRS[kind]


def _catalog_mapping(path: Path) -> dict[str, Any]:
    """A catalog file (shipped with the package: no file policy applies)."""
    with file_policy(None):
        return read_mapping(path, f"catalog {path.name}")


@cache
def _entries(kind: str) -> dict[str, Path]:
    """The catalog's files of `kind` by name (listed, not read: a lookup reads only its file)."""
    d = _catalog_dir(kind)
    return {p.stem: p for p in sorted(d.glob("*.yaml"))}


@cache
def _catalog_entry(kind: str, name: str):
    """One catalog entry, read and validated on first use."""
    p = _entries(kind)[name]
    if kind == "models":
        return build(ModelSpec, {"name": name, **_catalog_mapping(p)}, f"models/{name}.yaml")
    if kind == "gpus":
        return build(GPUSpec, {"name": name, **_catalog_mapping(p)}, f"gpus/{name}.yaml")
    if kind == "families":
        return _catalog_mapping(p)
    return cluster_from_mapping({"name": name, **_catalog_mapping(p)}, f"clusters/{name}.yaml")


def _catalog(kind: str) -> dict:
    return {name: _catalog_entry(kind, name) for name in _entries(kind)}


def _unknown(field: str, what: str, name: str, known: list[str]) -> InputError:
    """'unknown model ...' with the closest known names; the name shown escaped and cut."""
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5) if len(name) <= 100 else []
    hint = f"; did you mean {', '.join(close)}?" if close else f"; see `solveplan {what}s`"
    return InputError(field, f"unknown {what} {escape_text(repr(name), 80)}{hint}")


# ---------------------------------------------------------------- models
def catalog_models() -> dict[str, ModelSpec]:
    return _catalog("models")


def load_model(ref: str | dict, field: str = "model") -> ModelSpec:
    """A catalog name, a YAML/JSON ModelSpec file, a Hugging Face config.json, or a mapping."""
    if isinstance(ref, dict):
        return _model_from_mapping(ref, field, "custom", "custom")
    models = _entries("models")
    for name in (ref, ref.lower()):
        if name in models:
            return _catalog_entry("models", name)
    if is_file_ref(ref):
        return _model_from_mapping(read_mapping(ref, field), field, ref, Path(ref).stem)
    raise _unknown(field, "model", ref, list(models))


def _model_from_mapping(data: dict, field: str, hf_name: str, default_name: str) -> ModelSpec:
    """A model mapping -- a Hugging Face config.json (named after its name_or_path, else
    `hf_name`) or a ModelSpec mapping (named `default_name` unless it has a name) -- whether it
    came from a file or inline (an API call, an HTTP body): both take the same forms."""
    from .specs.hf import FIELD as HF_FIELD
    from .specs.hf import is_hf_config, model_from_hf_config

    if is_hf_config(data):
        try:
            return model_from_hf_config(data, name=hf_name)
        except InputError as exc:  # the converter names paths under its own root, "model"
            raise InputError(path(field, exc.field.removeprefix(HF_FIELD).lstrip(".")), exc.message) from None
    return build(ModelSpec, {"name": default_name, **data}, field)


# ---------------------------------------------------------------- GPUs
def catalog_gpus() -> dict[str, GPUSpec]:
    return _catalog("gpus")


def load_gpu(ref: str | dict, field: str = "gpu") -> GPUSpec:
    """A catalog name, a GPU mapping, or a GPU file (YAML/JSON, e.g. what `solveplan probe`
    writes; named after the file unless it states a name; read under the file policy)."""
    if isinstance(ref, dict):
        return build(GPUSpec, ref, field)
    gpus = _entries("gpus")
    if str(ref).lower() in gpus:
        return _catalog_entry("gpus", str(ref).lower())
    if is_file_ref(str(ref)):
        data = read_mapping(str(ref), field)
        data.setdefault("name", Path(str(ref)).stem)
        return build(GPUSpec, data, field)
    raise _unknown(field, "gpu", str(ref), list(gpus))


# ---------------------------------------------------------------- clusters
def catalog_families() -> dict[str, dict]:
    return _catalog("families")


def cluster_from_mapping(data: dict, field: str = "cluster") -> ClusterSpec:
    """A ClusterSpec from a mapping whose `gpu` is a catalog name or a GPU mapping; a mixed
    cluster lists `pools`, each with its own `gpu` (specs/cluster.py)."""
    data = dict(data)
    pools = data.get("pools")
    if pools:
        if not isinstance(pools, (list, tuple)):
            raise InputError(path(field, "pools"), "must be a list of pools, each a mapping with name, gpu, num_nodes, ...")
        resolved = []
        for i, pool in enumerate(pools):
            where = f"{path(field, 'pools')}[{i}]"
            if not isinstance(pool, dict):
                raise InputError(where, f"must be a mapping with name, gpu, num_nodes, ... (got {type(pool).__name__})")
            if "gpu" not in pool:
                raise InputError(path(where, "gpu"), "missing; name a GPU from `solveplan gpus` or give its spec")
            resolved.append(build(PoolSpec, {**pool, "gpu": load_gpu(pool["gpu"], path(where, "gpu"))}, where))
        return build(ClusterSpec, {**data, "pools": resolved}, field)
    if "gpu" not in data:
        raise InputError(path(field, "gpu"), "missing; name a GPU from `solveplan gpus` or give its spec")
    data["gpu"] = load_gpu(data["gpu"], path(field, "gpu"))
    return build(ClusterSpec, data, field)


def catalog_clusters() -> dict[str, ClusterSpec]:
    return _catalog("clusters")


_FAMILY_RE = re.compile(r"^(?P<family>[a-z0-9][a-z0-9.\-]*?)x(?P<n>\d{1,18})$")  # 18 digits: past any size


def family_name(name: str) -> tuple[str, int] | None:
    """('a100', 64) for 'a100x64' (any family-shaped name; the family may not exist); None otherwise."""
    m = _FAMILY_RE.match(name.strip().lower())
    return (m.group("family"), int(m.group("n"))) if m else None


def family_cluster(family: str, num_gpus: int, field: str = "cluster") -> ClusterSpec:
    fams = _entries("families")
    if family not in fams:
        raise _unknown(field, "cluster family", family, list(fams))
    tmpl = dict(_catalog_entry("families", family))
    per_node = int(tmpl.get("gpus_per_node", 8))
    most = per_node * int(PLAUSIBLE["num_nodes"][1])
    if num_gpus > most:
        raise InputError(field, f"{family}x{num_gpus}: more GPUs than a cluster may have (at most {most:,})")
    if num_gpus <= 0 or (num_gpus > per_node and num_gpus % per_node):
        lo = max(per_node, num_gpus // per_node * per_node)
        raise InputError(field, f"{family}x{num_gpus}: {num_gpus} GPUs is not a multiple of {per_node} GPUs per node "
                                f"(nor at most one node's {per_node}); use {family}x{lo} or {family}x{lo + per_node}")
    tmpl.pop("description", None)
    if num_gpus < per_node:  # part of one node (a workstation's GPU, a scheduler's share): its GPUs on one NVLink fabric
        tmpl.update(gpus_per_node=num_gpus, nvlink_domain_gpus=num_gpus if tmpl.get("nvlink_domain_gpus") else None)
        tmpl["source"] = f"{tmpl.get('source', '').strip()} {num_gpus} of a node's {per_node} GPUs".strip()
        return cluster_from_mapping({k: v for k, v in {**tmpl, "name": f"{family}x{num_gpus}", "num_nodes": 1}.items()
                                     if v is not None}, field)
    domain = tmpl.get("nvlink_domain_gpus")
    if domain:  # racks of one NVLink domain (NVL72): whole racks, a part of one, or equal parts of several
        tmpl["nvlink_domain_gpus"] = share = rack_share(num_gpus, int(domain), per_node)
        if 2 * share < int(domain) < num_gpus:
            lo = num_gpus // int(domain) * int(domain)
            raise InputError(field, f"{family}x{num_gpus}: {family} racks hold {domain} GPUs in one NVLink domain, "
                                    f"and {num_gpus} GPUs do not split into equal parts of at least half a rack; use "
                                    f"{family}x{lo} or {family}x{lo + int(domain)} (whole racks), a multiple of "
                                    f"{_half_rack(int(domain), per_node)} GPUs, or at most {domain}")
        if share < num_gpus and share != int(domain):
            tmpl["source"] = (f"{tmpl.get('source', '').strip()} {num_gpus} GPUs over {num_gpus // share} racks: "
                              f"{share} per rack (one NVLink domain each)").strip()
    return cluster_from_mapping({**tmpl, "name": f"{family}x{num_gpus}", "num_nodes": num_gpus // per_node}, field)


def rack_share(num_gpus: int, domain: int, per_node: int) -> int:
    """GPUs of a job per NVLink domain (NVL72 racks): the largest whole-tray divisor of the job's
    GPUs that fits in one domain (a 256-GPU job on 72-GPU racks: 64 per rack, 16 of the 18 trays;
    also how the published GB200/GB300 runs of 128-512 GPUs, which do not state their layout, are read)."""
    return max((d for d in range(per_node, min(domain, num_gpus) + 1, per_node) if num_gpus % d == 0),
               default=per_node)


def _half_rack(domain: int, per_node: int) -> int:
    """The smallest whole-tray share of a rack that is at least half of it (36 of 72 by 4)."""
    return -(-domain // 2 // per_node) * per_node


def family_rule(tmpl: Mapping[str, Any]) -> str:
    """Which N a family's `<family>x<N>` accepts, in words (for `solveplan clusters`)."""
    per_node = int(tmpl.get("gpus_per_node", 8))
    domain = tmpl.get("nvlink_domain_gpus")
    if domain:
        return (f"multiple of {domain}, or of {per_node} up to {domain}, or N split into racks of equal parts of at "
                f"least {_half_rack(int(domain), per_node)}, or below {per_node} (part of one tray)")
    return f"multiple of {per_node}, or below {per_node} (part of one node)"


def cluster_family(cluster: ClusterSpec) -> str | None:
    """The catalog family a cluster was made from (`a100` for `a100x64`), else None. The name
    alone does not make a cluster a family's: every parameter but the size must be the
    family's (a client's V100 cluster named `h100x64` stays the client's)."""
    fam = family_name(cluster.name)
    if not fam or fam[0] not in _entries("families"):
        return None
    try:
        ref = family_cluster(fam[0], cluster.num_gpus)
    except InputError:
        return None
    size = {"name", "num_nodes", "link_overrides"}
    return fam[0] if ref.model_dump(exclude=size) == cluster.model_dump(exclude=size) else None


def resize_cluster(cluster: ClusterSpec, num_nodes: int) -> ClusterSpec:
    """The same cluster with `num_nodes` nodes: every parameter kept (racks, and the link
    overrides among its first `num_nodes` nodes), named `<family>x<N>` when it is a family's."""
    if num_nodes == cluster.num_nodes:
        return cluster
    fam = cluster_family(cluster)
    name = f"{fam}x{num_nodes * cluster.gpus_per_node}" if fam else f"{cluster.name}[{num_nodes} nodes]"
    links = tuple(x for x in cluster.link_overrides if x.src < num_nodes and x.dst < num_nodes)
    update = {"num_nodes": num_nodes, "name": name, "link_overrides": links}
    if cluster.nvlink_domain_gpus:  # a part of one domain is a smaller domain; beyond it, the last may be partial
        update["nvlink_domain_gpus"] = min(cluster.nvlink_domain_gpus, num_nodes * cluster.gpus_per_node)
    return cluster.model_copy(update=update)


def load_cluster(ref: str | dict, field: str = "cluster") -> ClusterSpec:
    """A named cluster, a `<gpu>x<N>` family name, a YAML/JSON ClusterSpec file, or a mapping."""
    if isinstance(ref, dict):
        return cluster_from_mapping({"name": "custom", **ref}, field)
    clusters = _entries("clusters")
    key = ref.lower()
    if key in clusters:
        return _catalog_entry("clusters", key)
    fam = family_name(key)
    if fam and fam[0] in _entries("families"):
        return family_cluster(fam[0], fam[1], field)
    if is_file_ref(ref):
        data = read_mapping(ref, field)
        data.setdefault("name", Path(ref).stem)
        return cluster_from_mapping(data, field)
    families = list(_entries("families"))
    known = list(clusters) + [f"{f}x{fam[1] if fam else 64}" for f in families]
    if fam and not any(key.startswith(f) for f in families):
        raise _unknown(field, "cluster family", fam[0], families)
    raise _unknown(field, "cluster", ref, known)


# ---------------------------------------------------------------- jobs
# the job's software settings a mapping may give (JobSpec fields of the same names)
JOB_SETTINGS = ("precision", "flash_attention", "attention_kernel", "grad_reduce_dtype", "tp_comm_overlap",
                "overlap_grad_reduce", "prefer", "tolerance_rel", "moe_load_imbalance", "moe_a2a_overlap",
                "moe_token_dispatcher", "framework", "recompute_modules", "fp8_param_gather",
                "fp8_dot_product_attention", "cuda_graph_impl",
                "cuda_graph_modules", "bf16_layers_at_start", "bf16_layers_at_end", "cpu_offloading_num_layers",
                "offload_modules", "precision_aware_optimizer", "optimizer_moment_dtype", "zero3_gathers",
                "distributed_optimizer_instances", "min_offloaded_tensor_size", "peft", "lora_rank",
                "lora_target_modules", "module_precision")


def framework_constraints(framework: str | None, constraints: Constraints, field: str) -> Constraints:
    """The job's constraints narrowed to what its software stack runs (`specs/frameworks.py`):
    transformers plans data parallelism only, torchtitan has no ZeRO-1; a value the user forced
    that the stack cannot run is bad input naming the knob."""
    if framework in (None, "megatron"):
        return constraints
    try:
        narrowed = narrow_constraints(framework, constraints.model_dump(exclude_defaults=True),
                                      Constraints.model_fields)
    except ValueError as e:
        knob, message = e.args
        raise InputError(path(field, "constraints", knob), message) from None
    return Constraints(**narrowed)


def load_job(data: JobRequest | Mapping[str, Any], field: str = "job") -> JobSpec:
    """The JobSpec of a job mapping (`specs.request.JobRequest`): model and cluster resolved
    (catalog names, files, inline mappings), global batch and sequence from the model's recipe
    unless given. Bad input is an InputError naming its path under `field`."""
    req: JobRequest
    if isinstance(data, JobRequest):
        req = data
    elif isinstance(data, Mapping):
        req = build(JobRequest, dict(data), field, list_keys=True)
    else:
        raise InputError(field, f"give a mapping of job fields, not {type(data).__name__}")
    for key in ("model", "cluster"):
        if getattr(req, key) is None:
            raise InputError(path(field, key), f"missing; give a {key} (see `solveplan {key}s`)")
    assert req.model is not None and req.cluster is not None  # (the loop above)
    model = load_model(req.model, path(field, "model"))
    unpriced = torchtitan_moe_unpriced(model) if model.is_moe and req.framework == "torchtitan" else None
    if unpriced:
        raise InputError(path(field, "framework"), unpriced)
    if (model.is_moe and req.framework == "transformers") or (model.is_dsa and req.framework not in (None, "megatron")):
        what = ("a mixture-of-experts model; its expert layers are" if model.is_moe
                else "a sparse-attention (DSA) model; its indexer and sparse core are")
        raise InputError(path(field, "framework"), f"'{model.name}' is {what} priced as Megatron-Core runs them only: "
                                                   f"use framework megatron")
    cluster = load_cluster(req.cluster, path(field, "cluster"))
    job: dict[str, Any] = {
        "model": model,
        "cluster": cluster,
        "global_batch_size": model.global_batch_size if req.global_batch_size is None else req.global_batch_size,
        "seq_length": model.seq_length if req.seq_length is None else req.seq_length,
        "constraints": framework_constraints(
            req.framework, build(Constraints, {} if req.constraints is None else req.constraints,
                                 path(field, "constraints")), field),
    }
    for key in JOB_SETTINGS:
        if getattr(req, key) is not None:
            job[key] = getattr(req, key)
    try:  # the settings' Megatron rules (offloading: pp 1, no recomputation; precision-aware optimizer: zero 1)
        job["constraints"] = Constraints(**rule_constraints(job, job["constraints"].model_dump(exclude_defaults=True)))
    except ValueError as e:
        raise InputError(path(field, "constraints", e.args[0]), e.args[1]) from None
    return build(JobSpec, job, field)
