"""Catalog commands: `models`, `gpus`, `clusters`, `show NAME`, `schema KIND`.

Listings are a rich table on stdout (a JSON list with `--json`); errors are `InputError`s that
the entry point prints as one line on stderr with exit code 2.

Derived model facts printed by `show` (per token of training, forward + backward):

    flops_per_token = 6 * num_params + 12 * num_layers * hidden_size * seq_length

6 FLOPs per parameter per token is the weight matmuls (2 forward, 4 backward); the second term
is the attention score and value matmuls (QK^T and AV: 2 * 2 * s * h forward per layer per token,
times 3 for forward + backward), without causal-mask savings and without activation recomputation
(Kaplan et al. 2020 Sec. 2.1; Narayanan et al. 2021 Sec. 5.1 / Eq. 3 before its 4x recompute factor).
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import InputError, escape_markup, escape_text
from ..specs.units import GIB

_KINDS = ("model", "gpu", "cluster", "job")


# ----------------------------------------------------------------- facts
def model_facts(m) -> dict[str, Any]:
    """Derived numbers for a ModelSpec (see the module docstring for the FLOPs formula)."""
    n = m.num_params
    return {
        "num_params": n,
        "params_per_layer": m.params_per_layer,
        "embedding_params": m.embedding_params,
        "head_dim": m.head_dim,
        "kv_hidden_size": m.kv_hidden_size,
        "flops_per_token": 6 * n + 12 * m.num_layers * m.hidden_size * m.seq_length,
        "tokens_per_step": m.global_batch_size * m.seq_length,
        "weights_bf16_gib": 2 * n / GIB,
    }


def cluster_facts(c) -> dict[str, Any]:
    return {
        "num_gpus": c.num_gpus,
        "num_nodes": c.num_nodes,
        "gpu": c.gpu.name,
        "peak_bf16_pflops_total": c.num_gpus * c.gpu.peak_bf16_tflops / 1000,
        "hbm_gib_total": c.num_gpus * c.gpu.hbm_gib,
        "racks": None if c.nodes_per_leaf is None else -(-c.num_nodes // c.nodes_per_leaf),
    }


def _model_row(m) -> dict[str, Any]:
    return {"name": m.name, **m.model_dump(mode="json"), **model_facts(m)}


def _cluster_row(c) -> dict[str, Any]:
    d = c.model_dump(mode="json")
    d["gpu"] = c.gpu.name
    return {**d, **cluster_facts(c)}


# ----------------------------------------------------------------- output
def _console():
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(soft_wrap=False, width=None if tty else 120, highlight=False)


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    table = Table(title=escape_markup(title, 1000), title_justify="left")
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right", no_wrap=True)
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    _console().print(table)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:g}" if isinstance(v, float) else escape_markup(str(v), 1000)  # names print as written


def _json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2))


def _b(n: float) -> str:
    return f"{n / 1e9:,.2f}B" if n >= 1e9 else f"{n / 1e6:,.1f}M"


# ----------------------------------------------------------------- listings
@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON list instead of a table")
def models(as_json: bool) -> None:
    """List the catalog's models: shape, parameter count, training recipe."""
    from ..catalog import catalog_models

    ms = list(catalog_models().values())
    if as_json:
        _json([_model_row(m) for m in ms])
        return
    _table("models (catalog names; pass one as --model)",
           ["name", "layers", "hidden", "heads", "kv", "ffn", "vocab", "mlp", "params", "seq", "batch"],
           [[m.name, m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.ffn_hidden_size,
             m.vocab_size, "gated" if m.gated_mlp else "2-mat", _b(m.num_params), m.seq_length,
             m.global_batch_size] for m in ms])


@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON list instead of a table")
def gpus(as_json: bool) -> None:
    """List the catalog's GPU types: datasheet peaks and memory."""
    from ..catalog import catalog_gpus

    gs = list(catalog_gpus().values())
    if as_json:
        _json([g.model_dump(mode="json") for g in gs])
        return
    _table("GPUs (dense tensor-core peaks)", ["name", "bf16 TFLOP/s", "fp8 TFLOP/s", "HBM GiB", "HBM GB/s"],
           [[g.name, g.peak_bf16_tflops, g.peak_fp8_tflops, g.hbm_gib, g.hbm_gbyte_per_s] for g in gs])


@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON list instead of a table")
def clusters(as_json: bool) -> None:
    """List named clusters and the `<family>x<N>` templates (N GPUs, a multiple of GPUs per node)."""
    from ..catalog import catalog_clusters, catalog_families

    cs = list(catalog_clusters().values())
    fams = catalog_families()
    if as_json:
        out = [{"kind": "cluster", **_cluster_row(c)} for c in cs]
        out += [{"kind": "family", "name": f"{f}x<N>", "family": f, **t} for f, t in fams.items()]
        _json(out)
        return
    # a cluster of pools: one entry per pool in each column ("2 h100-sxm + 4 a100-80gb")
    def each(c, key):
        return " + ".join(f"{getattr(p, key):g}" for p in c.pool_specs())
    rows = [[c.name, " + ".join(f"{p.num_nodes} {p.gpu.name}" for p in c.pool_specs()) if c.is_mixed else c.gpu.name,
             c.num_nodes, each(c, "gpus_per_node"), c.num_gpus, each(c, "nvlink_gbyte_per_s"), each(c, "nic_gbit_per_s"),
             c.nodes_per_leaf, f"{c.spine_oversubscription:g}:1"] for c in cs]
    rows += [[f"{f}x<N>", t.get("gpu"), "N/" + str(t.get("gpus_per_node", 8)), t.get("gpus_per_node", 8), "N",
              t.get("nvlink_gbyte_per_s"), t.get("nic_gbit_per_s"), t.get("nodes_per_leaf"),
              f"{t.get('spine_oversubscription', 1):g}:1"] for f, t in fams.items()]
    _table("clusters (bandwidths per GPU per direction)",
           ["name", "gpu", "nodes", "gpus/node", "gpus", "NVLink GB/s", "NIC Gbit/s", "nodes/leaf", "spine"], rows)


# ----------------------------------------------------------------- show
def _resolve(name: str) -> tuple[str, Any]:
    """(kind, object) for a catalog name, `<family>x<N>`, family template, or a spec file."""
    from ..catalog import (catalog_clusters, catalog_families, catalog_gpus, catalog_models, family_name, is_file_ref,
                           load_cluster)

    key = name.lower()
    if key in catalog_models():
        return "model", catalog_models()[key]
    if key in catalog_gpus():
        return "gpu", catalog_gpus()[key]
    if key in catalog_clusters():
        return "cluster", catalog_clusters()[key]
    if key in catalog_families():
        return "family", (key, catalog_families()[key])
    fam = family_name(key)
    if fam and fam[0] in catalog_families():
        return "cluster", load_cluster(key)
    if is_file_ref(name):
        return _resolve_file(Path(name))
    known = list(catalog_models()) + list(catalog_gpus()) + list(catalog_clusters()) + list(catalog_families())
    if fam:
        close = difflib.get_close_matches(fam[0], list(catalog_families()), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(f'{c}x{fam[1]}' for c in close)}?" if close else \
            f"; families: {', '.join(catalog_families())}"
        raise InputError("NAME", f"unknown cluster family {fam[0]!r} in {name!r}{hint}")
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `solveplan models`, `gpus`, `clusters`"
    raise InputError("NAME", f"unknown name {escape_text(repr(name), 80)}: not a model, GPU, cluster or existing file{hint}")


def _resolve_file(path: Path) -> tuple[str, Any]:
    from ..catalog import load_cluster, load_model, parse_data, read_text
    from ..specs import GPUSpec
    from ..specs.base import build
    from ..specs.hf import is_hf_config

    if path.is_dir():
        if (path / "config.json").is_file():  # a Hugging Face checkpoint directory
            return _resolve_file(path / "config.json")
        raise InputError("NAME", f"{str(path)!r} is a directory without a config.json; give a spec file")
    text = read_text(path, "NAME")
    if not text.strip():
        raise InputError("NAME", f"{path.name} is empty; it must hold a model, GPU or cluster spec")
    data = parse_data(text, "NAME", path.name, "json" if path.suffix.lower() == ".json" else "yaml")
    if not isinstance(data, dict):
        raise InputError("NAME", f"{path.name} must hold a mapping of keys to values, not {type(data).__name__}")
    if is_hf_config(data) or "num_layers" in data:
        return "model", load_model(str(path))
    if "peak_bf16_tflops" in data:
        return "gpu", build(GPUSpec, {"name": path.stem, **data}, "gpu")
    if "gpu" in data or "num_nodes" in data or "pools" in data:
        return "cluster", load_cluster(str(path))
    raise InputError("NAME", f"{path.name} is not a model, GPU or cluster spec: a model has num_layers (or is a "
                             f"Hugging Face config.json), a GPU has peak_bf16_tflops, a cluster has gpu or pools")


def _print_pairs(title: str, pairs: list[tuple[str, Any]]) -> None:
    from rich.table import Table

    table = Table(title=escape_markup(title, 1000), title_justify="left", show_header=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value")
    for k, v in pairs:
        table.add_row(k, _cell(v))
    _console().print(table)


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="JSON object instead of a table")
def show(name: str, as_json: bool) -> None:
    """Show one model, GPU, cluster, `<gpu>x<N>`, or spec file, with derived facts.

    Models: parameter count, per-layer parameters, training FLOPs per token
    (6 * params + 12 * num_layers * hidden_size * seq_length, forward + backward).
    Clusters: GPUs, nodes, GPU type, per-GPU NVLink and NIC bandwidth, rack structure.
    """
    kind, obj = _resolve(name)
    if kind == "family":
        fam, tmpl = obj
        if as_json:
            _json({"kind": "family", "name": fam, "template": tmpl})
            return
        _print_pairs(f"cluster family {fam} (use {fam}x<N>)", list(tmpl.items()))
        return
    if kind == "model":
        facts = model_facts(obj)
        if as_json:
            _json({"kind": "model", "name": obj.name, "spec": obj.model_dump(mode="json"), "derived": facts})
            return
        s = obj
        _print_pairs(f"model {s.name}", [
            ("layers", s.num_layers), ("hidden", s.hidden_size),
            ("heads (kv)", f"{s.num_attention_heads} ({s.num_kv_heads}), head_dim {s.head_dim}"),
            ("ffn", f"{s.ffn_hidden_size} ({'gated, 3 matrices' if s.gated_mlp else '2 matrices'})"),
            ("vocab", f"{s.vocab_size} ({'tied' if s.tied_embeddings else 'untied'} embeddings)"),
            ("parameters", f"{facts['num_params']:,} ({_b(facts['num_params'])})"
                           + (f"; source states {s.nominal_params_b:g}B" if s.nominal_params_b else "")),
            ("per layer", f"{facts['params_per_layer']:,}"),
            ("embedding", f"{facts['embedding_params']:,}"),
            ("FLOPs/token (train)", f"{facts['flops_per_token']:.4g}  = 6*params + 12*layers*hidden*seq"),
            ("recipe", f"seq {s.seq_length}, global batch {s.global_batch_size} "
                       f"({facts['tokens_per_step']:,} tokens/step)"),
            ("weights (bf16)", f"{facts['weights_bf16_gib']:.1f} GiB"),
            ("source", s.source), ("notes", s.notes),
        ])
        return
    if kind == "gpu":
        if as_json:
            _json({"kind": "gpu", "name": obj.name, "spec": obj.model_dump(mode="json")})
            return
        _print_pairs(f"GPU {obj.name}", [(k, v) for k, v in obj.model_dump().items() if k != "name"])
        return
    c = obj
    facts = cluster_facts(c)
    if as_json:
        _json({"kind": "cluster", "name": c.name, "spec": c.model_dump(mode="json"), "derived": facts})
        return
    _print_pairs(f"cluster {c.name}", [
        ("GPUs", f"{c.num_gpus} = {c.num_nodes} nodes x {c.gpus_per_node}"),
        ("GPU", f"{c.gpu.name} ({c.gpu.peak_bf16_tflops:g} TFLOP/s bf16, {c.gpu.hbm_gib:g} GiB)"),
        ("NVLink", f"{c.nvlink_gbyte_per_s:g} GB/s per GPU per direction"),
        ("network", f"{c.nic_gbit_per_s:g} Gbit/s per GPU per direction"),
        ("racks", "one non-blocking fabric" if c.nodes_per_leaf is None else
         f"{facts['racks']} of {c.nodes_per_leaf} nodes, spine {c.spine_oversubscription:g}:1"),
        ("link overrides", len(c.link_overrides) or None),
        ("peak bf16 total", f"{facts['peak_bf16_pflops_total']:,.1f} PFLOP/s"),
        ("source", c.source),
    ])


# ----------------------------------------------------------------- schema
@click.command()
@click.argument("kind")
def schema(kind: str) -> None:
    """JSON Schema of a spec file: model, gpu, cluster or job."""
    from ..specs import ClusterSpec, GPUSpec, JobSpec, ModelSpec

    classes = {"model": ModelSpec, "gpu": GPUSpec, "cluster": ClusterSpec, "job": JobSpec}
    if kind.lower() not in classes:
        close = difflib.get_close_matches(kind.lower(), _KINDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise InputError("KIND", f"unknown schema kind {kind!r}; choose one of {', '.join(_KINDS)}{hint}")
    _json(classes[kind.lower()].model_json_schema())
