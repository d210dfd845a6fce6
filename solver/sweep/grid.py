"""The sweep grid: its file schema and its expansion into scenarios.

A grid file (YAML or JSON) names lists whose product is planned, and/or explicit scenarios:

    models: [gpt3-13b, llama2-70b, my-model.yaml]          # catalog names, files, inline mappings
    clusters:
      - a100x64                                            # <gpu>x<N>, a named cluster, a file
      - {family: h100, num_gpus: [64, 128, 256], price_per_gpu_hour_usd: 2.5}   # a pool
    global_batch_sizes: [512, 1024]      # optional (default: each model's recipe)
    seq_lengths: [2048]                  # optional (default: each model's recipe)
    precisions: [bf16, fp8]              # optional (default: bf16; also fp16)
    frameworks: [megatron, transformers] # optional (default: megatron; also torchtitan)
    constraints: [{}, {tp: [8], recompute: [selective]}]   # optional constraint sets ({} = none)
    prefer: simple                       # optional: fastest (default) or simple, every scenario
    scenarios:                           # optional explicit scenarios, planned after the product
      - {model: gpt3-175b, cluster: a100x1024, global_batch_size: 1536, constraints: {pp: [8]}}

A pool is one cluster family at several sizes (`h100x64`, `h100x128`, ...), optionally with
a price per GPU-hour. Files named in the grid (`.yaml`, `.yml`, `.json`) are read relative to
the grid file's folder (to the working directory for a grid given as a mapping).

Rules: unknown keys are errors naming their path; an empty list anywhere is an error (it would
plan nothing, or constrain a knob to no value); a list may not name the same value twice, and
no two scenarios may be equal. Names (models, clusters, families) are not looked up here: a
scenario whose model or cluster does not resolve is planned as an INVALID row, so one typo does
not stop a fleet study.

Every scenario gets a stable id: a hash of its canonical inputs as written in the grid (not of
the files they name), so a resumed sweep recognises the scenarios it has done.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, PositiveFloat, PositiveInt, ValidationError

from ..catalog import build, read_mapping
from ..errors import InputError
from ..specs import Constraints, Precision

Framework = Literal["megatron", "torchtitan", "transformers"]
PATH_SUFFIXES = (".yaml", ".yml", ".json")


def _ref(what: str):
    def check(value: Any) -> Any:
        if (isinstance(value, str) and value.strip()) or isinstance(value, dict):
            return value
        raise ValueError(f"give a {what} name, a file path or a mapping of {what} fields")
    return AfterValidator(check)


ModelRef = Annotated[Any, _ref("model")]
ClusterRef = Annotated[Any, _ref("cluster")]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Pool(_Strict):
    """One cluster family at several sizes: `{family: h100, num_gpus: [64, 128]}` plans h100x64 and h100x128."""

    family: str
    num_gpus: list[PositiveInt]
    price_per_gpu_hour_usd: PositiveFloat | None = None


class ScenarioSpec(_Strict):
    """One explicit scenario: a job mapping (as `--job` files) plus an optional price."""

    model: ModelRef
    cluster: ClusterRef
    global_batch_size: PositiveInt | None = None
    seq_length: PositiveInt | None = None
    precision: Precision | None = None
    framework: Framework | None = None
    constraints: dict[str, Any] | None = None
    price_per_gpu_hour_usd: PositiveFloat | None = None
    prefer: Literal["fastest", "simple"] | None = None


class Grid(_Strict):
    models: list[ModelRef] | None = None
    clusters: list[ClusterRef] | None = None
    global_batch_sizes: list[PositiveInt] | None = None
    seq_lengths: list[PositiveInt] | None = None
    precisions: list[Precision] | None = None
    frameworks: list[Framework] | None = None
    constraints: list[dict[str, Any]] | None = None
    scenarios: list[ScenarioSpec] | None = None
    prefer: Literal["fastest", "simple"] | None = None  # every scenario's (a scenario's own wins)


PRODUCT_KEYS = ("models", "clusters", "global_batch_sizes", "seq_lengths", "precisions", "frameworks", "constraints")


@dataclass(frozen=True)
class Scenario:
    """One planning question. `inputs` are canonical (keys left out when not given):
    model, cluster, global_batch_size, seq_length, precision, constraints, price_per_gpu_hour_usd, prefer."""

    index: int
    id: str
    inputs: dict = field(hash=False)
    base_dir: str = "."

    def job_mapping(self) -> dict:
        """What `solveplan.api.as_job` takes: the inputs less the price, file paths made
        relative to the grid's folder."""
        job = {k: v for k, v in self.inputs.items() if k != "price_per_gpu_hour_usd"}
        for key in ("model", "cluster"):
            ref = job[key]
            if isinstance(ref, str) and ref.lower().endswith(PATH_SUFFIXES) and not Path(ref).is_absolute():
                job[key] = str(Path(self.base_dir) / ref)
        return job


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scenario_id(inputs: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(dict(inputs)).encode()).hexdigest()[:16]


# ------------------------------------------------------------------ loading
def _path(loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _empty_list(data: Any, where: str) -> str | None:
    """The path of the first empty list inside `data`, or None."""
    if isinstance(data, list):
        if not data:
            return where
        for i, item in enumerate(data):
            hit = _empty_list(item, f"{where}[{i}]")
            if hit:
                return hit
    elif isinstance(data, dict):
        for key, item in data.items():
            hit = _empty_list(item, f"{where}.{key}" if where else str(key))
            if hit:
                return hit
    return None


def _validate(cls, data: Mapping[str, Any], prefix: str):
    try:
        return cls(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = prefix + _path(err.get("loc", ()))
        if err.get("type") == "extra_forbidden":
            allowed = ", ".join(cls.model_fields)
            raise InputError(where, f"unknown key; allowed keys: {allowed}") from None
        if err.get("type") == "missing":
            raise InputError(where, "missing: give it") from None
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise InputError(where, f"{msg} (got {err.get('input')!r})") from None


def load_grid(grid: str | Path | Mapping[str, Any] | Grid) -> tuple[Grid, str]:
    """(Grid, folder its file paths are relative to) from a grid file, a mapping or a Grid."""
    if isinstance(grid, Grid):
        return grid, "."
    if isinstance(grid, (str, Path)):
        if not Path(grid).is_file():
            raise InputError("GRID", f"file {str(grid)!r} does not exist")
        data, base = read_mapping(grid, "GRID"), str(Path(grid).parent)
    elif isinstance(grid, Mapping):
        data, base = dict(grid), "."
    else:
        raise InputError("grid", f"give a grid file, a mapping or a Grid, not {type(grid).__name__}")
    empty = _empty_list(data, "")
    if empty:
        raise InputError(empty, "empty list: give at least one value, or leave the key out for the default")
    return _validate(Grid, data, ""), base


def _constraints(data: dict | None, where: str) -> dict | None:
    """Checked constraint set as written ({} and None both mean: no constraint)."""
    if not data:
        return None
    build(Constraints, data, where)
    return data


def _clusters(entries: list, where: str) -> list[tuple[Any, float | None]]:
    """(cluster ref, price) per cluster; a pool expands into one `<family>x<N>` per size."""
    out: list[tuple[Any, float | None]] = []
    for i, entry in enumerate(entries):
        if isinstance(entry, dict) and ("family" in entry or "num_gpus" in entry):
            pool = _validate(Pool, entry, f"{where}[{i}].")
            out.extend((f"{pool.family}x{n}", pool.price_per_gpu_hour_usd) for n in pool.num_gpus)
        else:
            out.append((entry, None))
    return out


def _axis(values: list | None) -> list:
    """The values of a product axis; [None] (each scenario left to the defaults) when not given."""
    return values or [None]


def _no_repeats(values: list, where: str) -> None:
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        key = canonical_json(v)
        if key in seen:
            raise InputError(f"{where}[{i}]", f"repeats {where}[{seen[key]}] ({key}); give each value once")
        seen[key] = i


def _inputs(model, cluster, price, gbs, seq, precision, constraints, prefer=None, framework=None) -> dict:
    raw = {"model": model, "cluster": cluster, "global_batch_size": gbs, "seq_length": seq,
           "precision": precision, "framework": framework, "constraints": constraints, "price_per_gpu_hour_usd": price, "prefer": prefer}
    return {k: v for k, v in raw.items() if v is not None}


# scenarios of one sweep unless the caller raises it (`max_scenarios`, the CLI's --max-scenarios):
# a grid of a million scenarios is a typo more often than a plan, and is counted before it is built
MAX_SCENARIOS = 10_000


def expand(grid: Grid, base_dir: str = ".", max_scenarios: int = MAX_SCENARIOS) -> list[Scenario]:
    """The scenarios of a grid, in order: the product (models x clusters x batches x sequences
    x precisions x constraint sets, the last varying fastest), then the explicit scenarios; at
    most `max_scenarios` of them (InputError naming `max_scenarios` beyond)."""
    given = [k for k in PRODUCT_KEYS if getattr(grid, k) is not None]
    if given and (grid.models is None or grid.clusters is None):
        missing = "models" if grid.models is None else "clusters"
        raise InputError(missing, f"missing: a product grid needs both models and clusters (it has {', '.join(given)})")
    if not given and grid.scenarios is None:
        raise InputError("grid", "nothing to plan: give models and clusters (their product is planned) and/or scenarios")
    rows: list[tuple[str, dict]] = []
    if given:
        assert grid.models is not None and grid.clusters is not None  # a product grid has both (above)
        for key in PRODUCT_KEYS:
            if getattr(grid, key) is not None:
                _no_repeats(getattr(grid, key), key)
        clusters = _clusters(grid.clusters, "clusters")
        _no_repeats([c for c, _ in clusters], "clusters (after pools are expanded)")
        axes = (_axis(grid.global_batch_sizes), _axis(grid.seq_lengths), _axis(grid.precisions),
                _axis(grid.frameworks))
        _check_count(math.prod(len(x) for x in (grid.models, clusters, *axes, _axis(grid.constraints)))
                     + len(grid.scenarios or []), max_scenarios)
        cons = [_constraints(c, f"constraints[{i}]") for i, c in enumerate(_axis(grid.constraints))]
        for model, (cluster, price), gbs, seq, prec, fw, con in itertools.product(grid.models, clusters, *axes, cons):
            rows.append(("product", _inputs(model, cluster, price, gbs, seq, prec, con, grid.prefer, fw)))
    for i, sc in enumerate(grid.scenarios or []):
        con = _constraints(sc.constraints, f"scenarios[{i}].constraints")
        rows.append((f"scenarios[{i}]", _inputs(sc.model, sc.cluster, sc.price_per_gpu_hour_usd, sc.global_batch_size,
                                                sc.seq_length, sc.precision, con, sc.prefer or grid.prefer,
                                                sc.framework)))
    _check_count(len(rows), max_scenarios)
    out: list[Scenario] = []
    seen: dict[str, int] = {}
    for index, (where, inputs) in enumerate(rows):
        sid = scenario_id(inputs)
        if sid in seen:
            raise InputError(where, f"the same scenario as #{seen[sid]} ({canonical_json(inputs)}); give it once")
        seen[sid] = index
        out.append(Scenario(index=index, id=sid, inputs=inputs, base_dir=base_dir))
    return out


def _check_count(n: int, max_scenarios: int) -> None:
    if n > max_scenarios:
        raise InputError("max_scenarios", f"the grid spans {n:,} scenarios; a sweep plans at most {max_scenarios:,} "
                                          f"unless this limit is raised")
