"""Catalog commands: `models`, `gpus`, `clusters`, `show NAME`, `schema KIND`.

Listings are a rich table on stdout (a JSON list with `--json`); errors are `InputError`s that
the entry point prints as one line on stderr with exit code 2.

Derived model facts printed by `show`: `flops_per_token`, the model FLOPs of training per token
(forward + backward, no recomputation) at the recipe's sequence length, in the one convention MFU
and TFLOP/s are reported in (`formulation.flops.FLOP_CONVENTION`: Megatron-LM's
num_floating_point_operations, causal attention counted as executed).
"""

from __future__ import annotations

import difflib
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import click

from ..errors import InputError, escape_markup, escape_text
from ..formulation.flops import reported_flop_per_step
from ..specs.rope import describe_positions
from ..specs.units import GIB

_KINDS = ("model", "gpu", "cluster", "job")


# ----------------------------------------------------------------- facts
def model_facts(m) -> dict[str, Any]:
    """Derived numbers for a ModelSpec (see the module docstring for the FLOPs formula); a
    mixture-of-experts model adds `moe` (its structure, `moe_facts`)."""
    n, active = m.num_params, m.num_active_params
    facts = {
        "num_params": n, "num_active_params": active,
        "params_per_layer": m.params_per_layer, "embedding_params": m.embedding_params,
        "head_dim": m.head_dim, "kv_hidden_size": m.kv_hidden_size,
        "flops_per_token": reported_flop_per_step(m, 1, m.seq_length, 0)[0] / m.seq_length,
        "tokens_per_step": m.global_batch_size * m.seq_length,
        "weights_bf16_gib": 2 * n / GIB,
    }
    if m.is_moe:
        facts["moe"] = moe_facts(m)
    if m.is_hybrid:
        facts["hybrid"] = hybrid_facts(m)
    return facts


def hybrid_facts(m) -> dict[str, Any]:
    """The layers of a hybrid model `show` prints: the pattern, layers and weights per kind (total and
    active), the Mamba-2 mixer's and the Gated DeltaNet's dimensions."""
    counts = {k: n for k, n in m.hybrid_layer_counts().items() if n}
    total, active = m.hybrid_kind_params(), m.hybrid_kind_params(active=True)
    return {"pattern": m.hybrid_layer_pattern, "layers": counts,
            "layer_params": {k: total[k] for k in counts}, "layer_active_params": {k: active[k] for k in counts},
            "mamba": dict(zip(("num_heads", "head_dim", "num_groups", "state_dim"), m.mamba_dims),
                          d_inner=m.mamba_d_inner, conv_kernel=m.mamba_conv_kernel, chunk_size=m.mamba_chunk_size)
            if "mamba" in counts else None,
            "gdn": dict(num_key_heads=m.gdn_num_key_heads, num_value_heads=m.gdn_num_value_heads,
                        key_head_dim=m.gdn_key_head_dim, value_head_dim=m.gdn_value_head_dim,
                        conv_kernel=m.gdn_conv_kernel) if "gdn" in counts else None}


def _hybrid_rows(hy: dict) -> list[tuple[str, Any]]:
    names = {"mamba": "Mamba-2", "gdn": "Gated DeltaNet", "attention": "attention", "mlp": "MLP", "moe": "MoE"}
    rows: list[tuple[str, Any]] = [
        ("layer kinds", ", ".join(f"{n} {names[k]}" for k, n in hy["layers"].items()) + f"  ({hy['pattern']})")]
    if hy["mamba"]:
        mb = hy["mamba"]
        rows.append(("Mamba-2 mixer", f"{mb['num_heads']} heads of {mb['head_dim']} (d_inner {mb['d_inner']}), "
                                      f"{mb['num_groups']} groups, state {mb['state_dim']}, conv {mb['conv_kernel']}, "
                                      f"chunk {mb['chunk_size']}"))
    if hy.get("gdn"):
        g = hy["gdn"]
        rows.append(("Gated DeltaNet", f"{g['num_key_heads']} key heads of {g['key_head_dim']}, {g['num_value_heads']} "
                                       f"value heads of {g['value_head_dim']}, conv {g['conv_kernel']}"))
    per = [f"{names[k]} {v:,}" + (f" (active {hy['layer_active_params'][k]:,})" if hy["layer_active_params"][k] != v
                                  else "") for k, v in hy["layer_params"].items()]
    rows.append(("per layer", ", ".join(per)))
    return rows


def layer_pattern_summary(mask) -> str:
    """'all 48 layers MoE', 'dense 0-2, MoE 3-60', 'MoE every 2 layers from layer 1', or the runs."""
    n, moe = len(mask), [i for i, v in enumerate(mask) if v]
    if len(moe) == n:
        return f"all {n} layers MoE"
    runs, start = [], 0
    for i in range(1, n + 1):
        if i == n or mask[i] != mask[start]:
            kind = "MoE" if mask[start] else "dense"
            runs.append(f"{kind} {start}" + (f"-{i - 1}" if i - 1 > start else ""))
            start = i
    if len(runs) <= 4:
        return ", ".join(runs)
    step = moe[1] - moe[0] if len(moe) > 1 else 0
    if step > 1 and moe == list(range(moe[0], n, step)):
        return f"MoE every {step} layers from layer {moe[0]}"
    return f"{len(moe)} of {n} layers MoE: " + ", ".join(runs)


def moe_facts(m) -> dict[str, Any]:
    """The mixture-of-experts structure `show` prints: experts, top-k, shared experts, which layers,
    router, multi-latent attention ranks, MTP."""
    return {
        "num_experts": m.num_experts,
        "moe_router_topk": m.moe_router_topk,
        "moe_ffn_hidden_size": m.moe_ffn_hidden_size,
        "shared_expert_ffn": m.moe_shared_expert_intermediate_size,
        "num_moe_layers": m.num_moe_layers,
        "num_dense_layers": m.num_dense_layers,
        "layer_pattern": layer_pattern_summary(m.moe_layer_mask),
        "moe_layer_params": m.moe_layer_params,
        "moe_layer_active_params": m.moe_layer_active_params,
        "dense_layer_params": m.dense_layer_params if m.num_dense_layers else None,
        "router": m.moe_router_score_function + (" over all experts" if m.moe_router_pre_softmax else "")
                  + (" + expert bias" if m.moe_router_enable_expert_bias else "") + (f", {m.moe_router_group_topk} of "
                  f"{m.moe_router_num_groups} groups" if m.moe_router_num_groups else "") + (
                  f", top-k x {m.moe_router_topk_scaling_factor:g}" if m.moe_router_topk_scaling_factor else ""),
        "capacity_factor": m.moe_expert_capacity_factor,
        "mla": {"q_lora_rank": m.q_lora_rank, "kv_lora_rank": m.kv_lora_rank, "qk_head_dim": m.qk_head_dim,
                "qk_pos_emb_head_dim": m.qk_pos_emb_head_dim, "v_head_dim": m.v_head_dim}
        if m.multi_latent_attention else None,
        "sparse_attention": {"indexer_heads": m.dsa_dims[0], "indexer_head_dim": m.dsa_dims[1], "topk": m.dsa_dims[2],
                             "indexer_params_per_layer": m.dsa_indexer_params} if m.is_dsa else None,
        "deepseek_v4": {"layers_by_ratio": {str(r): list(m.csa_compress_ratios[:m.num_layers]).count(r) for r in (0, 4, 128)},
                        "window": m.csa_window_size, "topk": m.dsa_dims[2], "o_groups": m.o_groups,
                        "o_lora_rank": m.o_lora_rank, "residual_streams": m.num_residual_streams,
                        "hash_layers": m.moe_n_hash_layers} if m.is_dsv4 else None,
        "mtp_num_layers": m.mtp_num_layers,
        "mtp_pattern": m.mtp_hybrid_layer_pattern,
        "mtp_params": m.mtp_depth_params * m.mtp_weight_copies if m.mtp_hybrid_layer_pattern else None,
        "mtp_repeated": m.mtp_use_repeated_layer,
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


RULE_CELL_CHARS = 16  # a family's rule for N longer than this is printed under the table


# ----------------------------------------------------------------- output
def _console():
    from rich.console import Console

    tty = sys.stdout.isatty()
    return Console(soft_wrap=False, width=None if tty else 120, highlight=False, emoji=False)


def _table(title: str, columns: list[str], rows: list[list[Any]], wrap: tuple[str, ...] = ()) -> None:
    from rich import box
    from rich.table import Table

    # no vertical rules: ten columns of a cluster fit in 120 characters
    table = Table(title=escape_markup(title, 1000), title_justify="left", box=box.SIMPLE_HEAVY)
    cells = [[_cell(v) for v in row] for row in rows]
    for i, col in enumerate(columns):
        # only the `wrap` columns (pools, notes) may break, at their spaces, never inside a word;
        # names and numbers never do
        words = [len(w) for row in cells for w in row[i].split()] if col in wrap else []
        table.add_column(col, justify="left" if i == 0 else "right", no_wrap=col not in wrap,
                         min_width=max(words, default=None))
    for row in cells:
        table.add_row(*row)
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
    """List the catalog's models: shape, parameter count (MoE: total and active), training recipe."""
    from ..catalog import catalog_models

    ms = list(catalog_models().values())
    if as_json:
        _json([_model_row(m) for m in ms])
        return
    _table("models (catalog names; pass one as --model; heads/KV heads; MoE: experts/top-k and parameters active "
           "per token)",
           ["name", "layers", "hidden", "heads", "ffn", "mlp", "experts", "params", "active", "seq", "batch"],
           [[m.name, m.num_layers, m.hidden_size, f"{m.num_attention_heads}/{m.num_kv_heads}", m.ffn_hidden_size,
             "gated" if m.gated_mlp else "2-mat", f"{m.num_experts}/{m.moe_router_topk}" if m.is_moe else None,
             _b(m.num_params),
             _b(m.num_active_params) if m.is_moe else None, m.seq_length, m.global_batch_size] for m in ms])


@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON list instead of a table")
def gpus(as_json: bool) -> None:
    """List the catalog's GPU types: datasheet peaks and memory."""
    from ..catalog import catalog_gpus

    gs = list(catalog_gpus().values())
    if as_json:
        _json([g.model_dump(mode="json") for g in gs])
        return
    _table("GPUs (dense tensor-core peaks; MXFP8 and blockwise FP8 run at the FP8 peak)",
           ["name", "arch", "bf16 TFLOP/s", "fp8 TFLOP/s", "fp4 TFLOP/s", "HBM GiB", "HBM GB/s", "SMs/CUs",
            "efficiencies"],
           [[g.name, g.architecture, g.peak_bf16_tflops, g.peak_fp8_tflops, g.peak_fp4_tflops, g.hbm_gib,
             g.hbm_gbyte_per_s, g.num_sms,
             f"assumed: {g.efficiencies_assumed_from}'s" if g.efficiencies_assumed_from else "fitted"] for g in gs],
           wrap=("efficiencies",))


@click.command()
@click.option("--json", "as_json", is_flag=True, help="JSON list instead of a table")
def clusters(as_json: bool) -> None:
    """List named clusters and the `<family>x<N>` templates (N GPUs, a multiple of GPUs per node)."""
    from ..catalog import catalog_clusters, catalog_families, family_rule

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
             c.num_nodes, each(c, "gpus_per_node"), each(c, "domain_gpus"), c.num_gpus, each(c, "nvlink_gbyte_per_s"),
             each(c, "nic_gbit_per_s"), c.nodes_per_leaf, f"{c.spine_oversubscription:g}:1"] for c in cs]
    rules: list[str] = []  # a rule too long for a cell is a note under the table, named in the cell

    def rule_cell(t) -> str:
        rule = family_rule(t)
        if len(rule) <= RULE_CELL_CHARS:
            return rule
        if rule not in rules:
            rules.append(rule)
        return f"N: rule {rules.index(rule) + 1}"
    rows += [[f"{f}x<N>", t.get("gpu"), "N/" + str(t.get("gpus_per_node", 8)), t.get("gpus_per_node", 8),
              t.get("nvlink_domain_gpus", t.get("gpus_per_node", 8)), rule_cell(t),
              t.get("nvlink_gbyte_per_s"), t.get("nic_gbit_per_s"), t.get("nodes_per_leaf"),
              f"{t.get('spine_oversubscription', 1):g}:1"] for f, t in fams.items()]
    _table("clusters (bandwidths per GPU per direction; NVLink domain: GPUs on one NVLink/NVSwitch fabric)",
           ["name", "gpu", "nodes", "gpus/\nnode", "NVLink\ndomain", "gpus", "NVLink\nGB/s", "NIC\nGbit/s",
            "nodes/\nleaf", "spine"], rows, wrap=("gpu",))
    for i, rule in enumerate(rules, 1):
        click.echo(textwrap.fill(f"rule {i}: N a {rule}", 120, subsequent_indent="  "))


# ----------------------------------------------------------------- show
def _resolve(name: str) -> tuple[str, Any]:
    """(kind, object) for a catalog name, `<family>x<N>`, family template, or a spec file."""
    from ..catalog import (
        catalog_clusters,
        catalog_families,
        catalog_gpus,
        catalog_models,
        family_name,
        is_file_ref,
        load_cluster,
    )

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
        _show_model(obj, as_json)
        return
    if kind == "gpu":
        if as_json:
            _json({"kind": "gpu", "name": obj.name, "spec": obj.model_dump(mode="json")})
            return
        _print_pairs(f"GPU {obj.name}", [(k, v) for k, v in obj.model_dump().items() if k != "name"])
        return
    _show_cluster(obj, as_json)


def _show_model(s, as_json: bool) -> None:
    facts = model_facts(s)
    if as_json:
        _json({"kind": "model", "name": s.name, "spec": s.model_dump(mode="json"), "derived": facts})
        return
    moe = facts.get("moe")
    rows = [
        ("layers", s.num_layers), ("hidden", s.hidden_size),
        ("heads (kv)", f"{s.num_attention_heads} ({s.num_kv_heads}), head_dim {s.head_dim}"
                       + (f"; sliding window {s.sliding_window} on {s.windowed_layers} of {s.num_layers} layers"
                          if s.windowed_layers else "")
                       + (f"; softmax {s.softmax_type} (attention sinks)" if s.softmax_type != "vanilla" else "")),
        ("ffn", f"{s.ffn_hidden_size} ({'gated, 3 matrices' if s.gated_mlp else '2 matrices'}, {s.activation}"
                + (f" + {s.glu_linear_offset:g}" if s.glu_linear_offset else "")
                + (f", clamped at {s.activation_clamp:g}" if s.activation_clamp is not None else "") + ")"
                + (" in the MLP layers" if s.is_hybrid else " in the dense layers" if moe and moe["num_dense_layers"]
                   else "")),
        ("positions", describe_positions(s)),
        ("vocab", f"{s.vocab_size} ({'tied' if s.tied_embeddings else 'untied'} embeddings)"),
        ("parameters", f"{facts['num_params']:,} ({_b(facts['num_params'])})"
                       + (f"; source states {s.nominal_params_b:g}B" if s.nominal_params_b else "")),
    ]
    if moe:
        rows += _moe_rows(s, facts, moe)
    elif not s.is_hybrid:
        rows.append(("per layer", f"{facts['params_per_layer']:,}"))
    if s.is_hybrid:  # the layer kinds replace the MoE/dense layer rows
        rows = [r for r in rows if r[0] not in ("MoE layers", "per layer")] + _hybrid_rows(facts["hybrid"])
    _print_pairs(f"model {s.name}", rows + [
        ("embedding", f"{facts['embedding_params']:,}"),
        ("FLOPs/token (train)", f"{facts['flops_per_token']:.4g}  (Megatron-LM's count, causal attention)"),
        ("recipe", f"seq {s.seq_length}, global batch {s.global_batch_size} "
                   f"({facts['tokens_per_step']:,} tokens/step)"),
        ("weights (bf16)", f"{facts['weights_bf16_gib']:.1f} GiB"),
        ("source", s.source), ("notes", s.notes),
    ])


def _moe_rows(s, facts: dict, moe: dict) -> list[tuple[str, Any]]:
    """What `show` says of a mixture-of-experts model: active parameters, experts, layers,
    router, MLA, MTP, parameters per layer."""
    rows: list[tuple[str, Any]] = [
        ("active per token", f"{facts['num_active_params']:,} ({_b(facts['num_active_params'])}; "
                             f"{_b(facts['num_active_params'] - facts['embedding_params'])} without the "
                             f"input embedding)"),
        ("experts", f"{moe['num_experts']} routed of {moe['moe_ffn_hidden_size']}, top-{moe['moe_router_topk']}"
                    + (f"; shared {moe['shared_expert_ffn']}" + (" (gated)" if s.moe_shared_expert_gate else "")
                       if moe["shared_expert_ffn"] else "; no shared expert")),
        ("MoE layers", f"{moe['layer_pattern']} ({moe['num_moe_layers']} MoE, {moe['num_dense_layers']} dense)"),
        ("router", moe["router"] + ("; dropless" if moe["capacity_factor"] is None
                                    else f"; capacity factor {moe['capacity_factor']:g}")),
    ]
    if moe["mla"]:
        mla = moe["mla"]
        rows.append(("multi-latent attention",
                     f"q_lora_rank {mla['q_lora_rank'] or '- (full-rank Q)'}, kv_lora_rank {mla['kv_lora_rank']}, "
                     f"qk {mla['qk_head_dim']} + rope {mla['qk_pos_emb_head_dim']}, v {mla['v_head_dim']}"))
    if moe["deepseek_v4"]:
        v4 = moe["deepseek_v4"]
        by = v4["layers_by_ratio"]
        rows.append(("DeepSeek-V4 attention", f"{v4['window']}-token window on every layer; {by['4']} layers add the "
                                              f"top {v4['topk']} of 4-token compressed entries, {by['128']} every "
                                              f"128-token entry, {by['0']} nothing; output in {v4['o_groups']} groups "
                                              f"of rank {v4['o_lora_rank']}; mHC with {v4['residual_streams']} "
                                              f"residual streams; {v4['hash_layers']} hash-routed layers"))
    if moe["sparse_attention"]:
        dsa = moe["sparse_attention"]
        rows.append(("sparse attention", f"DeepSeek Sparse Attention: each query attends to the top {dsa['topk']} keys "
                                         f"an indexer of {dsa['indexer_heads']} heads of {dsa['indexer_head_dim']} "
                                         f"picks ({dsa['indexer_params_per_layer']:,} weights per layer)"))
    if moe["mtp_num_layers"]:
        rows.append(("MTP modules", f"{moe['mtp_num_layers']} (not in the parameter count)" if not moe.get("mtp_pattern")
                     else f"{moe['mtp_num_layers']} depth{'s' * (moe['mtp_num_layers'] > 1)} of {moe['mtp_pattern']!r}, "
                          f"{moe['mtp_params']:,} weights "
                          f"({'one set shared by the depths; ' if moe['mtp_repeated'] else ''}not in the parameter count)"))
    rows.append(("per layer", f"MoE {moe['moe_layer_params']:,} (active {moe['moe_layer_active_params']:,})"
                              + (f", dense {moe['dense_layer_params']:,}" if moe["dense_layer_params"] else "")))
    return rows


def _show_cluster(c, as_json: bool) -> None:
    facts = cluster_facts(c)
    if as_json:
        _json({"kind": "cluster", "name": c.name, "spec": c.model_dump(mode="json"), "derived": facts})
        return
    _print_pairs(f"cluster {c.name}", [
        ("GPUs", f"{c.num_gpus} = {c.num_nodes} nodes x {c.gpus_per_node}"),
        ("GPU", f"{c.gpu.name} ({c.gpu.peak_bf16_tflops:g} TFLOP/s bf16, {c.gpu.hbm_gib:g} GiB)"),
        ("NVLink", f"{c.nvlink_gbyte_per_s:g} GB/s per GPU per direction, "
                   f"{c.domain_gpus} GPUs per domain" + (" (one node)" if c.domain_gpus == c.gpus_per_node else "")),
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
    from pydantic import BaseModel

    from ..specs import ClusterSpec, GPUSpec, JobSpec, ModelSpec

    classes: dict[str, type[BaseModel]] = {"model": ModelSpec, "gpu": GPUSpec, "cluster": ClusterSpec, "job": JobSpec}
    if kind.lower() not in classes:
        close = difflib.get_close_matches(kind.lower(), _KINDS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise InputError("KIND", f"unknown schema kind {kind!r}; choose one of {', '.join(_KINDS)}{hint}")
    _json(classes[kind.lower()].model_json_schema())
