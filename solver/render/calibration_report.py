"""The calibration's outputs (`solveplan calibrate -o/--report/--plot`): the calibrated
cluster as YAML, a markdown report of every fit, and a plot of the fits."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from ..calibration.calibrate import Calibration
from ..calibration.fit import fmt_bytes, rms_log
from ..calibration.link_fit import LinkFit, formulation_time_us
from ..errors import InputError
from ..specs.writing import PLOT_SUFFIXES, atomic_output, check_output, write_text


def write_yaml(cal: Calibration, path: str | Path, field: str = "output") -> None:
    """The calibrated cluster as a YAML file `--cluster` accepts, with a header saying where it came from."""
    header = (f"# Calibrated by `solveplan calibrate` from {cal.base.name}"
              + (f"; links from {', '.join(cal.log_inputs)}" if cal.log_inputs else "")
              + (f"; GPU efficiencies from {cal.step_source}" if cal.steps else "") + ".\n"
              "# Use it as --cluster with optimize, evaluate and the API.\n")
    write_text(path, header + yaml.safe_dump(cal.cluster_mapping(), sort_keys=False, width=110), field)


def report_markdown(cal: Calibration) -> str:
    """The markdown report: each fit's parameters before and after, and every point's error."""
    L = [f"# Calibration of `{cal.base.name}` -> `{cal.cluster.name}`", ""]
    L.append(f"Cluster: {cal.base.num_nodes} node(s) x {cal.base.gpus_per_node} {cal.base.gpu.name}; "
             f"NVLink {cal.base.nvlink_gbyte_per_s:g} GB/s, NIC {cal.base.nic_gbit_per_s:g} Gbit/s per GPU per "
             "direction (nominal). Fits: bounded least squares on log(predicted/measured); +- is one standard "
             "deviation from the Jacobian and the residual spread.")
    L.append("")
    if cal.links:
        L += ["## Links (nccl-tests)", "",
              "| class | logs | points | sizes | latency us: before -> fitted | bus bandwidth GB/s: before -> fitted | "
              "efficiency: before -> fitted | rms error before -> after |",
              "|---|---|---|---|---|---|---|---|"]
        for cls, lf in cal.links.items():
            bnom = lf.logs[0].nominal_bytes_per_s
            lat, eff = lf.latency, lf.efficiency
            pm = lambda p, k=1.0, fmt="{:.3g}": (fmt.format(p.value * k) + (  # noqa: E731
                f" +- {fmt.format(p.sd * k)}" if math.isfinite(p.sd) else (" (kept)" if p.fixed else " +- n/a")))
            meas = np.array([p.measured_us for p in lf.points])
            rb = rms_log([p.before_us for p in lf.points], meas)
            ra = rms_log([p.after_us for p in lf.points], meas)
            L.append(f"| {cls} | {len(lf.logs)} | {len(lf.points)} | {len({p.size_bytes for p in lf.points})} | "
                     f"{lat.before:.3g} -> {pm(lat)} | {eff.before * bnom / 1e9:.4g} -> {pm(eff, bnom / 1e9, '{:.4g}')} | "
                     f"{eff.before:.3g} -> {pm(eff)} | {rb:.1%} -> {ra:.1%} |")
        L += ["", "Efficiency = fitted bus bandwidth / the nominal bandwidth the formulation assigns the group "
              "(NVLink per GPU; k NICs per rank for k ranks per node across nodes).", "",
              "| log | op | ranks | ranks/node | class | nominal GB/s | how decided |", "|---|---|---|---|---|---|---|"]
        for cls, lf in cal.links.items():
            for lg in lf.logs:
                L.append(f"| {lg.run.source} | {lg.op} | {lg.nranks} | {lg.ranks_per_node} | {cls} | "
                         f"{lg.nominal_bytes_per_s / 1e9:.4g} | op {lg.run.op_from or 'given'}; {lg.how} |")
        L += ["", "Per message size (geometric mean of out-of-place and in-place):", "",
              "| log | line | size | measured us | before us | err | after us | err |", "|---|---|---|---|---|---|---|---|"]
        for _cls, lf in cal.links.items():
            for a, b in zip(lf.points[::2], lf.points[1::2]):
                m = math.sqrt(a.measured_us * b.measured_us)
                L.append(f"| {a.log.run.source} | {a.line} | {fmt_bytes(a.size_bytes)} | {m:.4g} | {a.before_us:.4g} | "
                         f"{a.before_us / m - 1:+.1%} | {a.after_us:.4g} | {a.after_us / m - 1:+.1%} |")
        L.append("")
    if cal.steps:
        sf = cal.steps
        L += ["## GPU efficiencies (measured steps)", "",
              f"{len(sf.rows)} measurements from {cal.step_source}, {len([p for p in sf.params if not p.fixed])} "
              f"parameters, {sf.dof} degrees of freedom; rms error {sf.rms_before:.1%} before -> {sf.rms_after:.1%} after.", "",
              "| parameter | before | fitted | +- sd | bounds |", "|---|---|---|---|---|"]
        for p in sf.params:
            sd = f"{p.sd:.3g}" if math.isfinite(p.sd) else "n/a"
            L.append(f"| {p.name} | {p.before:.4g} | {p.value:.4g}{' (at bound)' if p.at_bound else ''} | {sd} | "
                     f"[{p.lower:g}, {p.upper:g}] {p.unit} |")
        L += ["", "| row | configuration | measured s | before s | err | after s | err |", "|---|---|---|---|---|---|---|"]
        for r in sf.rows:
            L.append(f"| {r.index} | {r.label} | {r.measured_s:.4g} | {r.before_s:.4g} | {r.before_s / r.measured_s - 1:+.1%} | "
                     f"{r.after_s:.4g} | {r.after_s / r.measured_s - 1:+.1%} |")
        L.append("")
    if cal.notes:
        L += ["## Notes", ""] + [f"- {n}" for n in cal.notes] + [""]
    return "\n".join(L)

def plot(cal: Calibration, path: str | Path, field: str = "plot") -> None:
    """Links: time and bus bandwidth against message size (measured, before, fitted);
    steps: predicted against measured, and each row's error before and after."""
    check_output(path, field, PLOT_SUFFIXES)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(cal.links.values()) + ([cal.steps] if cal.steps else [])
    if not panels:
        raise InputError("plot", "nothing to plot: give --nccl-tests logs or --steps")
    fig, axes = plt.subplots(2, len(panels), figsize=(5.2 * len(panels), 8.2), squeeze=False)
    for col, pan in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        if isinstance(pan, LinkFit):
            for k, lg in enumerate(pan.logs):
                pts = [p for p in pan.points if p.log is lg]
                S = np.array([p.size_bytes for p in pts], dtype=float)
                t = np.array([p.measured_us for p in pts])
                color = f"C{k}"
                grid = np.geomspace(S.min(), S.max(), 100)
                before = formulation_time_us(cal.base, lg, grid)
                after = formulation_time_us(cal.cluster, lg, grid)
                top.loglog(S, t, "o", ms=3, color=color, label=f"{lg.run.source} ({lg.op}, {lg.nranks} ranks)")
                top.loglog(grid, before, "--", color=color, lw=1, alpha=0.6)
                top.loglog(grid, after, "-", color=color, lw=1.5)
                bus = lambda tt, ss, k_bw=lg.k_bw: k_bw * ss / (np.asarray(tt) * 1e-6) / 1e9  # noqa: E731
                bottom.semilogx(S, bus(t, S), "o", ms=3, color=color)
                bottom.semilogx(grid, bus(before, grid), "--", color=color, lw=1, alpha=0.6)
                bottom.semilogx(grid, bus(after, grid), "-", color=color, lw=1.5)
            top.set_ylabel("time (us)")
            top.set_title(f"{pan.link_class}: latency {pan.latency.value:.3g} us, efficiency {pan.efficiency.value:.3g}")
            top.plot([], [], "k--", lw=1, alpha=0.6, label="before")
            top.plot([], [], "k-", lw=1.5, label="fitted")
            top.legend(fontsize=7)
            bottom.set_xlabel("message size (bytes)")
            bottom.set_ylabel("bus bandwidth (GB/s)")
            bottom.set_title("bandwidth grows with size: S / (a + S/b)")
        else:
            meas = np.array([r.measured_s for r in pan.rows])
            top.loglog(meas, [r.before_s for r in pan.rows], "x", color="C3", label=f"before (rms {pan.rms_before:.1%})")
            top.loglog(meas, [r.after_s for r in pan.rows], "o", color="C0", label=f"fitted (rms {pan.rms_after:.1%})")
            lo, hi = meas.min() / 1.3, meas.max() * 1.3
            top.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            top.set_xlabel("measured step time (s)")
            top.set_ylabel("predicted step time (s)")
            top.set_title("measured steps")
            top.legend(fontsize=7)
            x = np.arange(len(pan.rows))
            bottom.bar(x - 0.2, [100 * (r.before_s / r.measured_s - 1) for r in pan.rows], 0.4, color="C3", label="before")
            bottom.bar(x + 0.2, [100 * (r.after_s / r.measured_s - 1) for r in pan.rows], 0.4, color="C0", label="fitted")
            bottom.axhline(0, color="k", lw=0.8)
            bottom.set_xticks(x, [str(r.index) for r in pan.rows])
            bottom.set_xlabel("row")
            bottom.set_ylabel("error (%)")
            bottom.legend(fontsize=7)
    fig.tight_layout()
    try:
        with atomic_output(path, field, PLOT_SUFFIXES) as tmp:
            fig.savefig(tmp, dpi=100, format=tmp.suffix[1:].lower())
    finally:
        plt.close(fig)
