"""The shipped catalogs: models/*.yaml, clusters/gpus/*.yaml, clusters/families/*.yaml
(templates behind `<gpu>x<N>` names) and clusters/*.yaml (named clusters).

Every lookup failure is an `InputError` naming the field and offering close matches.
"""

from __future__ import annotations

import difflib
import json
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .errors import InputError, pydantic_error_line
from .specs import ClusterSpec, GPUSpec, ModelSpec

_PACKAGES = {
    "models": "solveplan.catalog_models",
    "gpus": "solveplan.catalog_clusters.gpus",
    "families": "solveplan.catalog_clusters.families",
    "clusters": "solveplan.catalog_clusters",
}
_REPO_DIRS = {"models": "models", "gpus": "clusters/gpus", "families": "clusters/families", "clusters": "clusters"}


def _catalog_dir(kind: str) -> Path:
    try:
        return Path(str(resources.files(_PACKAGES[kind])))
    except (ModuleNotFoundError, TypeError):  # running from a source tree without install
        return Path(__file__).resolve().parent.parent / _REPO_DIRS[kind]


def read_mapping(path: str | Path, field: str) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict; malformed input is an InputError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise InputError(field, f"file {str(path)!r} does not exist; give a catalog name or an existing file")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise InputError(field, f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InputError(field, f"{path.name} is not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise InputError(field, f"{path.name} must hold a mapping of keys to values, not {type(data).__name__}")
    return data


def _entries(kind: str) -> dict[str, Path]:
    d = _catalog_dir(kind)
    return {p.stem: p for p in sorted(d.glob("*.yaml"))}


def _unknown(field: str, what: str, name: str, known: list[str]) -> InputError:
    close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; see `solveplan {what}s`"
    return InputError(field, f"unknown {what} {name!r}{hint}")


def build(spec_cls, data: dict, field: str):
    try:
        return spec_cls(**data)
    except ValidationError as exc:
        raise InputError("", pydantic_error_line(exc, prefix=f"{field}.")) from None
    except TypeError as exc:
        raise InputError(field, str(exc)) from None


# ---------------------------------------------------------------- models
@lru_cache(maxsize=None)
def catalog_models() -> dict[str, ModelSpec]:
    return {name: build(ModelSpec, {"name": name, **read_mapping(p, "model")}, f"models/{name}.yaml")
            for name, p in _entries("models").items()}


def load_model(ref: str) -> ModelSpec:
    """A catalog name, a YAML/JSON ModelSpec file, or a Hugging Face config.json."""
    models = catalog_models()
    if ref in models:
        return models[ref]
    if ref.lower() in models:
        return models[ref.lower()]
    if Path(ref).suffix.lower() in (".yaml", ".yml", ".json") or Path(ref).exists():
        data = read_mapping(ref, "--model")
        from .specs.hf import is_hf_config, model_from_hf_config

        if is_hf_config(data):
            return model_from_hf_config(data, name=ref)  # named after the config (name_or_path) or the file
        data.setdefault("name", Path(ref).stem)
        return build(ModelSpec, data, "model")
    raise _unknown("--model", "model", ref, list(models))


# ---------------------------------------------------------------- GPUs
@lru_cache(maxsize=None)
def catalog_gpus() -> dict[str, GPUSpec]:
    return {name: build(GPUSpec, {"name": name, **read_mapping(p, "gpu")}, f"gpus/{name}.yaml")
            for name, p in _entries("gpus").items()}


def load_gpu(ref: str | dict, field: str = "gpu") -> GPUSpec:
    if isinstance(ref, dict):
        return build(GPUSpec, ref, field)
    gpus = catalog_gpus()
    if str(ref).lower() in gpus:
        return gpus[str(ref).lower()]
    raise _unknown(field, "gpu", str(ref), list(gpus))


# ---------------------------------------------------------------- clusters
@lru_cache(maxsize=None)
def catalog_families() -> dict[str, dict]:
    return {name: read_mapping(p, "cluster family") for name, p in _entries("families").items()}


def _cluster_from_mapping(data: dict, field: str) -> ClusterSpec:
    data = dict(data)
    if "gpu" not in data:
        raise InputError(f"{field}.gpu", "missing; name a GPU from `solveplan gpus` or give its spec")
    data["gpu"] = load_gpu(data["gpu"], f"{field}.gpu")
    return build(ClusterSpec, data, field)


@lru_cache(maxsize=None)
def catalog_clusters() -> dict[str, ClusterSpec]:
    return {name: _cluster_from_mapping({"name": name, **read_mapping(p, "cluster")}, f"clusters/{name}.yaml")
            for name, p in _entries("clusters").items()}


_FAMILY_RE = re.compile(r"^(?P<family>[a-z0-9][a-z0-9.\-]*?)x(?P<n>\d+)$")


def family_cluster(family: str, num_gpus: int, field: str = "--cluster") -> ClusterSpec:
    fams = catalog_families()
    if family not in fams:
        raise _unknown(field, "cluster family", family, list(fams))
    tmpl = dict(fams[family])
    per_node = int(tmpl.get("gpus_per_node", 8))
    if num_gpus <= 0 or num_gpus % per_node:
        lo = max(per_node, num_gpus // per_node * per_node)
        raise InputError(field, f"{family}x{num_gpus}: {num_gpus} GPUs is not a multiple of {per_node} GPUs per node; "
                                f"use {family}x{lo} or {family}x{lo + per_node}")
    tmpl.pop("description", None)
    return _cluster_from_mapping({**tmpl, "name": f"{family}x{num_gpus}", "num_nodes": num_gpus // per_node}, field)


def load_cluster(ref: str) -> ClusterSpec:
    """A named cluster, a `<gpu>x<N>` family name, or a YAML/JSON ClusterSpec file."""
    clusters = catalog_clusters()
    key = ref.lower()
    if key in clusters:
        return clusters[key]
    m = _FAMILY_RE.match(key)
    if m and m.group("family") in catalog_families():
        return family_cluster(m.group("family"), int(m.group("n")))
    if Path(ref).suffix.lower() in (".yaml", ".yml", ".json") or Path(ref).exists():
        data = read_mapping(ref, "--cluster")
        data.setdefault("name", Path(ref).stem)
        return _cluster_from_mapping(data, "cluster")
    known = list(clusters) + [f"{f}x{m.group('n') if m else 64}" for f in catalog_families()]
    if m and not any(key.startswith(f) for f in catalog_families()):
        raise _unknown("--cluster", "cluster family", m.group("family"), list(catalog_families()))
    raise _unknown("--cluster", "cluster", ref, known)
