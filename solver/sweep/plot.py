"""Plots of a sweep (matplotlib, the `plot` extra): per model, tokens/s and cost per million
tokens against the GPU count, one line per GPU type (and per batch, sequence, precision or
constraint set where those vary), each point labelled with the chosen degrees
(t=TP, p=PP, d=DP, c=CP and v=virtual stages when above 1).

Where no scenario has a price, the right panels show GPU-hours per million tokens instead.
Scenarios without a plan (INFEASIBLE, INVALID, ...) are counted in the title, not drawn.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from ..specs.writing import PLOT_SUFFIXES, atomic_output, check_output

PLOT_EXTRA = "plots need matplotlib: pip install 'solveplan[plot]'"
LOG_Y_MIN_RATIO = 10.0  # a log y axis only over at least a decade (over 2% it hides the differences)
# label offsets tried in turn (points) until one overlaps no label placed before; else it is left out
OFFSETS = ((4, 4), (4, -11), (-4, 4), (-4, -11), (4, 15), (4, -22))
VARYING = ("global_batch_size", "seq_length", "precision", "constraints")


def degrees_label(row: dict) -> str:
    parts = [f"t{row['tp']}", f"p{row['pp']}", f"d{row['dp']}"]
    if row.get("cp") and row["cp"] > 1:
        parts.append(f"c{row['cp']}")
    if row.get("vp") and row["vp"] > 1:
        parts.append(f"v{row['vp']}")
    return "".join(parts)


def _show(key: str, value) -> str:
    if key == "global_batch_size":
        return f"batch {value}"
    if key == "seq_length":
        return f"seq {value}"
    if key == "constraints":
        cons = json.loads(value) if value else {}
        return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in cons.items()) or "unconstrained"
    return str(value)


def _lines(rows: list[dict]) -> dict[str, dict[tuple, list[dict]]]:
    """model -> (gpu, variant) -> rows by GPU count; the variant names the inputs that vary
    within one model and GPU type."""
    by_pair: dict[tuple, list[dict]] = {}
    for r in rows:
        by_pair.setdefault((r["model"], r["gpu"]), []).append(r)
    vary = [k for k in VARYING if any(len({r[k] for r in grp}) > 1 for grp in by_pair.values())]
    out: dict[str, dict[tuple, list[dict]]] = {}
    for r in rows:
        variant = ", ".join(_show(k, r[k]) for k in vary)
        out.setdefault(r["model"], {}).setdefault((r["gpu"], variant), []).append(r)
    for lines in out.values():
        for grp in lines.values():
            grp.sort(key=lambda r: (r["num_gpus"], r["cluster"]))
    return out


def plot_rows(rows: list[dict], path: str | Path, field: str = "--plot") -> Path:
    """Write the sweep's plot to `path` (PNG, PDF or SVG by suffix)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(field, PLOT_EXTRA) from None
    path = check_output(path, field, PLOT_SUFFIXES)
    planned = [r for r in rows if r.get("tokens_per_s") is not None and r.get("num_gpus")]
    if not planned:
        raise InputError(field, f"nothing to plot: none of the {len(rows)} rows has a plan")
    priced = any(r.get("cost_per_million_tokens_usd") is not None for r in planned)
    right_key = "cost_per_million_tokens_usd" if priced else "gpu_hours_per_million_tokens"
    right_label = "USD per million tokens" if priced else "GPU-hours per million tokens"

    by_model = _lines(planned)
    gpus = sorted({r["gpu"] for r in planned})
    variants = sorted({v for lines in by_model.values() for _, v in lines})
    labels_todo: dict[int, tuple] = {}
    colors, markers, styles = plt.get_cmap("tab10"), ["o", "s", "^", "D", "v", "P", "X", "*"], ["-", "--", ":", "-."]
    fig, axes = plt.subplots(len(by_model), 2, figsize=(15, 3.6 * len(by_model) + 0.8), squeeze=False,
                             layout="constrained")
    for row_axes, (model, lines) in zip(axes, by_model.items()):
        for (gpu, variant), grp in lines.items():
            color = colors(gpus.index(gpu) % 10)
            vi = variants.index(variant)
            label = gpu + (f", {variant}" if variant else "")
            for ax, metric in zip(row_axes, ("tokens_per_s", right_key)):
                pts = [r for r in grp if r.get(metric) is not None]
                if not pts:
                    continue
                xs, ys = [r["num_gpus"] for r in pts], [r[metric] for r in pts]
                ax.plot(xs, ys, linestyle=styles[vi % len(styles)], marker=markers[vi % len(markers)], color=color,
                        label=label)
                labels_todo.setdefault(id(ax), (ax, []))[1].extend(
                    (degrees_label(r), x, y, color) for r, x, y in zip(pts, xs, ys))
        for ax, ylabel in zip(row_axes, ("tokens/s", right_label)):
            ax.set_xscale("log", base=2)
            ys = [y for line in ax.get_lines() for y in line.get_ydata() if y and y > 0]
            if ys and max(ys) / min(ys) >= LOG_Y_MIN_RATIO:
                ax.set_yscale("log")
            else:
                ax.ticklabel_format(axis="y", style="plain", useOffset=False)
            ax.set_xlabel("GPUs")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{model}: {ylabel}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        handles, labels = row_axes[0].get_legend_handles_labels()  # every line has throughput; not every one a cost
        row_axes[1].legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.canvas.draw()  # settle the layout: labels are placed in display coordinates
    left_out = sum(_place_labels(ax, todo) for ax, todo in labels_todo.values())
    no_plan = len(rows) - len(planned)
    fig.suptitle(f"solveplan sweep: {len(planned)} planned scenarios"
                 + (f" ({no_plan} without a plan not shown)" if no_plan else "")
                 + "; points labelled with the chosen degrees (t=TP, p=PP, d=DP, c=CP, v=virtual stages)"
                 + (f" ({left_out} labels left out where they would overlap)" if left_out else "")
                 + ("" if priced else "; no prices given"), fontsize=10)
    try:
        with atomic_output(path, field, PLOT_SUFFIXES) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format=tmp.suffix[1:].lower())
    finally:
        plt.close(fig)
    return path


def _place_labels(ax, todo: list[tuple]) -> int:
    """Annotate each point (text, x, y, color) at the first of OFFSETS where its box overlaps no
    label placed before; returns how many found no room."""
    fig = ax.figure
    scale = fig.dpi / 72.0  # points -> pixels
    marker = 4 * scale  # every point's marker is an obstacle too
    placed = [(px - marker, py - marker, px + marker, py + marker)
              for px, py in (ax.transData.transform((x, y)) for _, x, y, _ in todo)]
    left_out = 0
    for text, x, y, color in todo:
        px, py = ax.transData.transform((x, y))
        w, h = (4.3 * len(text) + 2) * scale, 9 * scale
        for dx, dy in OFFSETS:
            x0 = px + dx * scale - (w if dx < 0 else 0)
            y0 = py + dy * scale
            box = (x0, y0, x0 + w, y0 + h)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                placed.append(box)
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(dx, dy), fontsize=7, color=color,
                            ha="right" if dx < 0 else "left")
                break
        else:
            left_out += 1
    return left_out
