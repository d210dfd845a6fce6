"""Plots of a sweep (matplotlib, the `plot` extra): tokens/s and cost per million tokens
against the GPU count, one line per model and GPU type (and per batch, sequence, precision or
constraint set where those vary), each point labelled with the chosen degrees
(t=TP, p=PP, d=DP, c=CP and v=virtual stages when above 1).

Where no scenario has a price, the right panel shows GPU-hours per million tokens instead.
Scenarios without a plan (INFEASIBLE, INVALID, ...) are counted in the title, not drawn.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError

PLOT_EXTRA = "plots need matplotlib: pip install 'solveplan[plot]'"
VARYING = ("global_batch_size", "seq_length", "precision", "constraints")
SHORT = {"global_batch_size": "B", "seq_length": "s", "precision": "", "constraints": ""}


def degrees_label(row: dict) -> str:
    parts = [f"t{row['tp']}", f"p{row['pp']}", f"d{row['dp']}"]
    if row.get("cp") and row["cp"] > 1:
        parts.append(f"c{row['cp']}")
    if row.get("vp") and row["vp"] > 1:
        parts.append(f"v{row['vp']}")
    return "".join(parts)


def _groups(rows: list[dict]) -> dict[tuple, list[dict]]:
    """Rows by (model, gpu, variant): the variant names the inputs that vary within one model and GPU type."""
    by_pair: dict[tuple, list[dict]] = {}
    for r in rows:
        by_pair.setdefault((r["model"], r["gpu"]), []).append(r)
    vary = [k for k in VARYING if any(len({r[k] for r in grp}) > 1 for grp in by_pair.values())]
    out: dict[tuple, list[dict]] = {}
    for r in rows:
        variant = " ".join(f"{SHORT[k]}{r[k]}" if SHORT[k] else str(r[k]) for k in vary)
        out.setdefault((r["model"], r["gpu"], variant), []).append(r)
    for key in out:
        out[key].sort(key=lambda r: (r["num_gpus"], r["cluster"]))
    return out


def plot_rows(rows: list[dict], path: str | Path, field: str = "--plot") -> Path:
    """Write the sweep's plot to `path` (PNG, PDF or SVG by suffix)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(field, PLOT_EXTRA) from None
    path = Path(path)
    if path.suffix.lower() not in (".png", ".pdf", ".svg"):
        raise InputError(field, f"{str(path)!r}: name the plot .png, .pdf or .svg")
    planned = [r for r in rows if r.get("tokens_per_s") is not None and r.get("num_gpus")]
    if not planned:
        raise InputError(field, f"nothing to plot: none of the {len(rows)} rows has a plan")
    priced = any(r.get("cost_per_million_tokens_usd") is not None for r in planned)
    right_key = "cost_per_million_tokens_usd" if priced else "gpu_hours_per_million_tokens"
    right_label = "USD per million tokens" if priced else "GPU-hours per million tokens (no prices given)"

    groups = _groups(planned)
    models = sorted({k[0] for k in groups})
    gpus = sorted({k[1] for k in groups})
    variants = sorted({k[2] for k in groups})
    colors = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 6.5))
    for (model, gpu, variant), grp in groups.items():
        color = colors(models.index(model) % 10)
        style = styles[gpus.index(gpu) % len(styles)]
        marker = markers[variants.index(variant) % len(markers)]
        label = " / ".join(x for x in (model, gpu, variant) if x)
        for ax, metric in ((axes[0], "tokens_per_s"), (axes[1], right_key)):
            pts = [r for r in grp if r.get(metric) is not None]
            if not pts:
                continue
            xs, ys = [r["num_gpus"] for r in pts], [r[metric] for r in pts]
            ax.plot(xs, ys, linestyle=style, marker=marker, color=color, label=label)
            for r, x, y in zip(pts, xs, ys):
                ax.annotate(degrees_label(r), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=color)
    for ax, ylabel in ((axes[0], "tokens/s"), (axes[1], right_label)):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_title("throughput of the best plan (labels: chosen t/p/d/c/v degrees)")
    axes[1].set_title("cost of a million tokens" if priced else "GPU-hours per million tokens")
    no_plan = len(rows) - len(planned)
    fig.suptitle(f"solveplan sweep: {len(planned)} planned scenarios"
                 + (f" ({no_plan} without a plan not shown)" if no_plan else ""))
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * ((len(labels) + 3) // 4), 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
