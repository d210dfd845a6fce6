"""Validation reports: markdown tables of predicted vs measured step times (per group, worst
rows, ranking inside measured sweeps, memory points) and a predicted-vs-measured plot per GPU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..calibration.crossval import Prediction
from ..specs.writing import PLOT_SUFFIXES, atomic_output


def _pct(x: float | None, sign: bool = False) -> str:
    if x is None:
        return "n/a"
    return f"{x:+.1%}" if sign else f"{x:.1%}"


def summary_table(lines: Sequence[dict], title: str) -> str:
    out = [f"| {title} | rows | MAPE | median error | worst | within 10% |", "|---|---:|---:|---:|---:|---:|"]
    for ln in lines:
        name = f"**{ln['group']}**" if ln["group"] == "all" else ln["group"]
        out.append(f"| {name} | {ln['rows']} | {_pct(ln['mape'])} | {_pct(ln['median_error'], True)} | "
                   f"{_pct(ln['max_abs_error'])} | {ln['within_10pct']} |")
    return "\n".join(out)


def worst_rows_table(rows: Sequence[dict]) -> str:
    """Rows as `crossval.validation` gives them (id, measured_s, predicted_s, error, config)."""
    out = ["| row | measured s | predicted s | error | configuration |", "|---|---:|---:|---:|---|"]
    for r in rows:
        c = r["config"]
        cfg = (f"tp{c['tp']} pp{c['pp']} cp{c['cp']} vp{c['vp']} mbs{c['micro_batch_size']} {c['recompute']}"
               f"{' sp' if c['sequence_parallel'] else ''} z{c['zero']}")
        out.append(f"| {r['id']} | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | {_pct(r['error'], True)} | {cfg} |")
    return "\n".join(out)


def ranking_table(rank: dict) -> str:
    out = ["| job (model, GPUs, batch x seq) | configs | formulation's pick | measured best | pick slower by |",
           "|---|---:|---|---|---:|"]
    for g in rank["groups"]:
        out.append(f"| {g['model']}, {g['num_gpus']} x {g['gpu']}, {g['global_batch_size']} x {g['seq_length']} | "
                   f"{g['configs']} | {g['picked']} | {g['best']} | {_pct(g['regret'])} |")
    out.append(f"\nMedian: {_pct(rank['median_regret'])}; worst: {_pct(rank['max_regret'])} "
               f"({len(rank['groups'])} sweeps).")
    return "\n".join(out)


def memory_table(points: Sequence[dict]) -> str:
    out = ["| model | mode | state GiB (published) | activations GiB (published) | total error |",
           "|---|---|---:|---:|---:|"]
    for p in points:
        out.append(f"| {p['model']} | {p['mode']} | {p['state_gib']:.1f} ({p['state_published_gib']:.1f}) | "
                   f"{p['act_gib']:.1f} ({p['act_published_gib']:.1f}) | {_pct(p['total_error'], True)} |")
    return "\n".join(out)


def fit_table(values: dict, sd: dict, params) -> str:
    out = ["| parameter | value | sd | prior | bounds | where the prior comes from |", "|---|---:|---:|---:|---|---|"]
    for p in params:
        v = values.get(p.key)
        if v is None:
            continue
        out.append(f"| {p.key} | {v:.4g} | {sd.get(p.key, float('nan')):.2g} | {p.prior:g} +- {p.prior_sd:g} | "
                   f"[{p.lower:g}, {p.upper:g}] | {p.why} |")
    return "\n".join(out)


def plot_by_gpu(series: dict[str, Sequence[Prediction]], path_prefix: str) -> list[str]:
    """One PNG per GPU: predicted vs measured step time (log-log), one marker per series
    (e.g. 'fitted on all' and 'left out'), coloured by source. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpus = sorted({p.row.gpu for ps in series.values() for p in ps})
    sources = sorted({p.row.source for ps in series.values() for p in ps})
    colours = {s: plt.cm.tab10(i % 10) for i, s in enumerate(sources)}
    markers = ["o", "x", "^", "s"]
    paths = []
    for gpu in gpus:
        fig, ax = plt.subplots(figsize=(6.0, 5.5))
        lo, hi = float("inf"), 0.0
        for (label, ps), mk in zip(series.items(), markers):
            for src in sources:
                pts = [p for p in ps if p.row.gpu == gpu and p.row.source == src]
                if not pts:
                    continue
                xs = [p.row.measured for p in pts]
                ys = [p.predicted_s for p in pts]
                lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
                ax.scatter(xs, ys, marker=mk, s=22, color=colours[src], label=f"{src} ({label})",
                           facecolors="none" if mk == "o" else None)
        lo, hi = lo / 1.3, hi * 1.3
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (0.9, 1.1):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured step time (s)")
        ax.set_ylabel("predicted step time (s)")
        ax.set_title(f"{gpu}: predicted vs measured (dotted: +-10%)")
        ax.legend(fontsize=6, loc="upper left")
        fig.tight_layout()
        path = f"{path_prefix}{gpu}.png"
        try:
            with atomic_output(path, "plot", PLOT_SUFFIXES) as tmp:
                fig.savefig(tmp, dpi=110, format="png")
        finally:
            plt.close(fig)
        paths.append(path)
    return paths


def few_shot_table(result: dict, legacy: dict | None = None) -> str:
    """`fewshot_eval.few_shot` as markdown: per source (its groups pooled), then per group
    (source, GPU, stack): zero-shot and few-shot MAPE of the rows not drawn, median (worst) over
    draws; `legacy`: another fitter's result on the same draws."""
    leg: dict = {}
    if legacy:
        leg = {("src", x["source"]): x for x in legacy["sources"]}
        leg.update({("grp", x["source"], x["gpu"], x["stack"]): x for x in legacy["groups"]})
        leg["all"] = legacy["all"]

    def cells(x, key):
        old: Any = leg.get(key)  # a legacy entry whenever `legacy` is given (read only then)
        return (f"{_pct(x['zero_shot_mape'])} | {_pct(x['mape_median'])} ({_pct(x['mape_worst'])})"
                + (f" | {_pct(old['mape_median'])} ({_pct(old['mape_worst'])})" if legacy else ""))

    head = "| source | groups | rows | zero-shot | few-shot K={k} |" + (" before (old fit) |" if legacy else "")
    out = [head.format(k=result["k"]), "|---|---:|---:|---:|---:|" + ("---:|" if legacy else "")]
    for x in result["sources"] + ([result["all"]] if result["all"] else []):
        name = "**all**" if x["source"] == "all" else x["source"]
        out.append(f"| {name} | {x['groups']} | {x['rows']} | " + cells(x, "all" if x["source"] == "all" else ("src", x["source"])) + " |")
    out += ["", "| source | GPU | stack | rows | zero-shot | few-shot | " + ("before | " if legacy else "")
            + "knobs freed (draws) | time scale |",
            "|---|---|---|---:|---:|---:|" + ("---:|" if legacy else "") + "---|---:|"]
    for x in result["groups"]:
        knobs = ", ".join([f"{n} {c}" for n, c in x["knobs_freed"].items() if n != "time_scale"]
                          + ([f"kept as given {x['kept_as_given']}"] if x.get("kept_as_given") else [])) or "time scale only"
        out.append(f"| {x['source']} | {x['gpu']} | {x['stack']} | {x['rows']} | "
                   + cells(x, ("grp", x["source"], x["gpu"], x["stack"])) + f" | {knobs} | {x['time_scale_median']:.3f} |")
    for x in result["skipped"]:
        out.append(f"\n{x['source']} {x['gpu']} {x['stack']} ({x['rows']} rows): {x['reason']}")
    return "\n".join(out)


def sweeps_table(report: dict) -> str:
    """`sweeps.sweep_report` as markdown: per sweep the pick, the best, the regret, the measured
    and predicted spread and the terms in which pick and best differ."""
    out = ["| source | job (model, GPUs, batch x seq) | configs | pick slower by | measured spread | predicted spread "
           "| pick vs best differ in |", "|---|---|---:|---:|---:|---:|---|"]
    for g in report["groups"]:
        out.append(f"| {g['source']} | {g['model']}, {g['num_gpus']} x {g['gpu']}, {g['global_batch_size']} x "
                   f"{g['seq_length']} | {g['configs']} | {_pct(g['regret'])} | {_pct(g['measured_spread'])} | "
                   f"{_pct(g['predicted_spread'])} | {', '.join(g['terms']) or '-'} |")
    out.append(f"\n{report['within_3pct']} of {report['sweeps']} sweeps within 3%; median {_pct(report['median_regret'])}, "
               f"worst {_pct(report['max_regret'])}. Terms the misses differ in: "
               + (", ".join(f"{t} ({n})" for t, n in report["terms_of_misses"].items()) or "none") + ".")
    return "\n".join(out)


def few_shot_sweeps_table(zero: dict, after: dict) -> str:
    """Per sweep: zero-shot regret, then the median (worst) regret over draws after few-shot
    calibration with each K (`after`: K -> `fewshot_eval.few_shot_sweeps`)."""
    ks = sorted(after)
    index = {k: {(x["source"], x["model"], x["gpu"], x["num_gpus"], x["global_batch_size"], x["seq_length"]): x
                 for x in after[k]} for k in ks}
    out = ["| source | job | configs | zero-shot | " + " | ".join(f"K={k}" for k in ks) + " |",
           "|---|---|---:|---:|" + "---:|" * len(ks)]
    for g in zero["groups"]:
        key = (g["source"], g["model"], g["gpu"], g["num_gpus"], g["global_batch_size"], g["seq_length"])
        cells = [f"{_pct(index[k][key]['regret_median'])} ({_pct(index[k][key]['regret_worst'])})" if key in index[k]
                 else "n/a" for k in ks]
        out.append(f"| {g['source']} | {g['model']}, {g['num_gpus']} x {g['gpu']}, {g['global_batch_size']} x "
                   f"{g['seq_length']} | {g['configs']} | {_pct(g['regret'])} | " + " | ".join(cells) + " |")
    for k in ks:
        med = [x["regret_median"] for x in after[k]]
        ok = sum(x["within_3pct"] for x in after[k])
        out.append(f"\nK={k}: {ok} of {len(med)} sweeps within 3% at the median draw; worst median regret "
                   f"{_pct(max(med) if med else None)}.")
    out.append(f"Zero-shot: {zero['within_3pct']} of {zero['sweeps']} within 3%.")
    return "\n".join(out)
