"""Calibrate the formulation to one's own cluster (`solveplan calibrate`): two independent
fits -- link latencies and efficiencies from nccl-tests logs (`link_fit`), GPU efficiencies
from measured step times (`step_fit`) -- both with `fit.fit_least_squares`, and the
calibrated cluster they give. `render.calibration_report` writes the report, the plot and
the cluster YAML."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..specs import ClusterSpec
from ..specs.base import build
from .fit import rms_log, significant
from .link_fit import LINK_CLASSES, LinkFit, LinkLog, classify_log, fit_link_class, formulation_time_us, parse_log_arg
from .nccl_tests import parse_nccl_log
from .step_fit import StepFit, build_step_rows, fit_steps, read_steps


@dataclass
class Calibration:
    """The cluster before and after, and the fits that made the difference."""

    base: ClusterSpec
    cluster: ClusterSpec
    links: dict[str, LinkFit]
    steps: StepFit | None
    step_source: str = ""
    log_inputs: list[str] = field(default_factory=list)

    @property
    def notes(self) -> list[str]:
        out = [n for lf in self.links.values() for n in lf.notes]
        return out + (self.steps.notes if self.steps else [])

    def cluster_mapping(self) -> dict:
        """A mapping `load_cluster` accepts: the cluster with its GPU inline."""
        d = self.cluster.model_dump(mode="json", exclude_none=True)
        d["gpu"] = self.cluster.gpu.model_dump(mode="json", exclude_none=True)
        if not d.get("link_overrides"):
            d.pop("link_overrides", None)
        return d


def calibrate(cluster: ClusterSpec, logs: Sequence[str] = (), steps: str | None = None,
              name: str | None = None, progress=None) -> Calibration:
    """Fit the cluster's link parameters from nccl-tests logs (`LOG[:class][:op]`) and its
    GPU efficiencies from a measured-steps file; returns the calibrated cluster and the fits.
    `progress(info)`: each phase as it starts ({"method", "phase", "elapsed_s"})."""
    def phase(text: str) -> None:
        if progress is not None:
            progress({"method": "calibrate", "phase": text, "final": False})

    if not logs and not steps:
        raise InputError("nccl_tests/steps", "nothing to fit: give nccl-tests logs and/or measured steps")
    inputs = [parse_log_arg(a) for a in logs]
    if inputs:
        phase(f"reading {len(inputs)} nccl-tests log(s)")
    by_class: dict[str, list[LinkLog]] = {}
    for inp in inputs:
        run = parse_nccl_log(inp.path)
        lg = classify_log(run, inp, cluster)
        by_class.setdefault(lg.link_class, []).append(lg)
    links: dict[str, LinkFit] = {}
    update: dict = {}
    for cls in LINK_CLASSES:  # NVLink first: the network fit's "after" uses its NVLink cap
        if cls not in by_class:
            continue
        phase(f"fitting {cls} latency and bandwidth ({len(by_class[cls])} log(s))")
        lf = fit_link_class(cls, by_class[cls], cluster)
        links[cls] = lf
        update[lf.latency.name] = significant(lf.latency.value)
        update[lf.efficiency.name] = significant(min(lf.efficiency.value, 1.0))
        if lf.nominal_after != lf.nominal_before:
            lf.nominal_after = significant(lf.nominal_after)
            update[lf.nominal_field] = lf.nominal_after
    new = cluster.model_copy(update=update)
    if name:
        new = new.model_copy(update={"name": name})
    parts = [f"{cls} from {', '.join(lg.run.source for lg in lf.logs)}" for cls, lf in links.items()]
    for lf in links.values():
        for p in lf.points:
            p.before_us = float(formulation_time_us(cluster, p.log, p.size_bytes))
            p.after_us = float(formulation_time_us(new, p.log, p.size_bytes))
        after = rms_log([p.after_us for p in lf.points], [p.measured_us for p in lf.points])
        if after > lf.rms + 0.02:
            lf.notes.append(f"{lf.link_class}: the formulation with the fitted values misses these points by {after:.1%} rms "
                            f"against the fitted line's {lf.rms:.1%}: it caps a cross-node group's bandwidth at NVLink's "
                            "attained bandwidth, which this log exceeds.")
    step_fit = None
    step_source = ""
    if steps:
        step_source = Path(steps).name
        rows = build_step_rows(read_steps(steps), new, step_source)
        if not rows:
            raise InputError("steps", f"{step_source} holds no measurements")
        # "before" = the cluster as given (links included), as a user would have predicted
        if links:
            base_rows = build_step_rows(read_steps(steps), cluster, step_source)
            for r, b in zip(rows, base_rows):
                r.before_s = b.before_s
        phase(f"fitting GPU efficiencies on {len(rows)} measured steps (least squares through the formulation)")
        step_fit = fit_steps(rows, new, step_source)
        if step_fit.params:
            new = _with_step_fit(new, step_fit, step_source)
            parts.append(f"GPU efficiencies from {step_source}")
        else:  # the few-shot fit's left-out check kept no knob: the GPU stays as given
            parts.append(f"GPU efficiencies as given ({step_source} moved none: see the notes)")
    new = new.model_copy(update={"source": f"{cluster.name} calibrated by solveplan calibrate: " + "; ".join(parts)})
    # re-validate through the spec (model_copy does not)
    gpu = build(type(new.gpu), new.gpu.model_dump(), "gpu")
    new = build(ClusterSpec, {**new.model_dump(exclude={"gpu"}), "gpu": gpu}, "cluster")
    return Calibration(cluster, new, links, step_fit, step_source, [inp.path for inp in inputs])


def _with_step_fit(cluster: ClusterSpec, step_fit, step_source: str) -> ClusterSpec:
    """The cluster with the knobs the step fit moved, and the GPU's provenance saying so."""
    fitted = {k: significant(v) for k, v in step_fit.gpu_update.items()}
    notes = (f"calibrated by solveplan calibrate on {len(step_fit.rows)} measured steps ({step_source}): "
             + ", ".join(f"{p.name} x{p.value:.4g}" for p in step_fit.params) + " ("
             + ", ".join(f"{k}={v:.4g}" for k, v in {**fitted, **step_fit.cluster_update}.items())
             + f"); rms error {step_fit.rms_before:.1%} -> {step_fit.rms_after:.1%}")
    gpu = cluster.gpu.model_copy(update={**fitted, "fit_notes": notes, "efficiencies_assumed_from": None,
                                         "source": f"{cluster.gpu.source.strip()} Efficiencies: {notes}."})
    return cluster.model_copy(update={"gpu": gpu, **{k: significant(v) for k, v in step_fit.cluster_update.items()}})
