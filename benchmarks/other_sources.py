"""The published runs as another source would state them: is any refused, and what does the missing detail cost?

    python benchmarks/other_sources.py [--data FILE]

The runs kept aside for the independent check come from other sources than the released files, whose
launch scripts the project has not read (`calibration/unread_sources.py`). Dense rows: each released dense
row restated under another source name, its source's title and text kept (so the software of its time
still reads from them): what the reader knew of that source's scripts by name no longer applies. MoE rows
will often state less than Megatron-Bridge's page does: no matched recipe (dispatcher, all-to-all
overlap, CUDA graphs, recompute modules), no micro-batch or interleaving, perhaps no catalog key. This
restates each released MoE row (`moe_validation.is_moe`) under a source name whose scripts the project
has not read, in five ways, and predicts every restated row with the shipped GPU parameters:

- another source: only the source name changes (what the reader knows of Megatron-Bridge's scripts no
  longer applies: gradient dtype, FP8 weights, DeepSeek's recompute presets, the 25.09 scripts);
- no recipe: and `parallel.other` (the matched recipe and its notes) is dropped;
- knobs unstated: and micro-batch, interleaving, ETP, recompute, sequence parallelism and the distributed
  optimizer are dropped too;
- no expert parallelism stated: another source, no recipe, no EP;
- no catalog key: another source whose row names its model only by name.

The rows and their measurements are the released ones, so this is no held-out accuracy: it says which
restated rows the reader refuses (the issue asks for none) and how far the predictions move when what a
source omits is left to the best legal value. Writes benchmarks/results/other_sources.md and .json.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections import Counter
from functools import partial

from _common import RESULTS, code_state
from moe_validation import is_moe
from solveplan.calibration.crossval import Prediction, in_sample, summary
from solveplan.calibration.moe_rows import is_moe_file_row
from solveplan.calibration.rows import published_rows, row_job
from solveplan.calibration.runs_fit import row_cases
from solveplan.render.validation import summary_table

SOURCE = "another_source"
KNOBS = ("mbs", "vp", "etp", "recompute", "sequence_parallel", "distributed_optimizer")


def restate(raw: dict, drop: tuple[str, ...] = (), recipe: bool = True, key: bool = True) -> dict:
    """`raw` under a source whose scripts are unread, without its `parallel` fields `drop`, its matched recipe
    (`parallel.other`, unless `recipe`) and its catalog key (unless `key`)."""
    out = copy.deepcopy(raw)
    out["source"] = SOURCE
    out["parallel"].update({k: None for k in drop}, **({} if recipe else {"other": None}))
    if not key:
        out["model"]["key"] = None
    return out


VARIANTS = {"another source": partial(restate), "no recipe": partial(restate, recipe=False),
            "knobs unstated": partial(restate, drop=KNOBS, recipe=False),
            "no expert parallelism stated": partial(restate, drop=("ep",), recipe=False),
            "no catalog key": partial(restate, key=False)}


def restated(raws: list[dict], variant: str) -> tuple[list[Prediction], Counter]:
    """The rows restated by `variant`, predicted in sample, and the reasons of those refused."""
    rows = [row_job(VARIANTS[variant](raw)) for raw in raws]
    refused = Counter(r.skipped for r in rows if r.skipped)
    return in_sample(row_cases([r for r in rows if not r.skipped])), refused


def dense_restated(rows: list) -> tuple[list[str], dict]:
    """Markdown lines and JSON of the dense rows as themselves and restated under another source name
    (`<source>_restated`, the source's title kept), MAPE per source."""
    dense = [r for r in rows if not is_moe_file_row(r.raw) and not r.skipped]
    restated = [row_job({**copy.deepcopy(r.raw), "source": f"{r.source}_restated"}) for r in dense]
    refused = Counter(r.skipped for r in restated if r.skipped)
    ours, theirs = in_sample(row_cases(dense)), in_sample(row_cases([r for r in restated if not r.skipped]))
    by_source = {ln["group"]: ln for ln in summary(ours, "source")}
    md = ["## Dense rows restated under another source name", "",
          f"{len(dense)} released dense rows; refused when restated: {sum(refused.values())}"
          + "".join(f"; {n} x {why}" for why, n in refused.items()) + ".", "",
          "| source | rows | MAPE as itself | MAPE restated | median as itself | median restated |",
          "|---|---:|---:|---:|---:|---:|"]
    for ln in summary(theirs, "source"):
        own = by_source[ln["group"].removesuffix("_restated")] if ln["group"] != "all" else by_source["all"]
        md.append(f"| {ln['group'].removesuffix('_restated')} | {ln['rows']} | {100 * own['mape']:.1f}% | "
                  f"{100 * ln['mape']:.1f}% | {100 * own['median_error']:+.1f}% | {100 * ln['median_error']:+.1f}% |")
    return md + [""], {"rows": len(dense), "refused": refused.most_common(), "as_itself": summary(ours, "source"),
                       "restated": summary(theirs, "source")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", action="append", default=None)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = published_rows(args.data)
    released = [r for r in rows if "category" in r.raw and is_moe(r) and not r.skipped]
    raws = [r.raw for r in released]
    as_released = in_sample(row_cases(released))
    blob: dict = {"commit": code_state(), "rows": len(raws), "as released": summary(as_released, "model"),
                  "variants": {}}
    dense_md, blob["dense"] = dense_restated(rows)
    print(f"dense: {blob['dense']['rows']} rows restated ({time.perf_counter() - t0:.0f} s)")
    md = ["# The released runs restated as another source would state them", "",
          f"`python benchmarks/other_sources.py` at {blob['commit']}, predicted with the shipped GPU parameters. "
          f"The measurements are the released ones: this checks that nothing is refused and what the missing "
          f"detail costs, not a held-out error.", "", *dense_md,
          "## MoE rows restated five ways", "",
          f"{len(raws)} released MoE rows, each "
          f"restated five ways under a source whose scripts are unread (the module docstring says how).", "",
          "| restated as | predicted | refused | MAPE | median error | within 10% |", "|---|---:|---:|---:|---:|---:|"]
    lines = {"as released": (as_released, Counter())}
    for variant in VARIANTS:
        lines[variant] = restated(raws, variant)
        print(f"{variant}: {len(lines[variant][0])} predicted ({time.perf_counter() - t0:.0f} s)")
    for name, (preds, refused) in lines.items():
        whole = next(x for x in summary(preds, "model") if x["group"] == "all")
        md.append(f"| {name} | {len(preds)} | {sum(refused.values())} | {100 * whole['mape']:.1f}% | "
                  f"{100 * whole['median_error']:+.1f}% | {whole['within_10pct']} |")
        if name != "as released":
            blob["variants"][name] = {"predicted": len(preds), "refused": refused.most_common(),
                                      "by_model": summary(preds, "model")}
    refusals = [f"- {name}: {n} x {why}" for name, (_, refused) in lines.items() for why, n in refused.items()]
    md += ["", "Refused: " + ("none." if not refusals else ""), *refusals, ""]
    for name, (preds, _) in lines.items():
        md += [f"### MoE rows: {name}", "", summary_table(summary(preds, "model"), "model"), ""]
    (RESULTS / "other_sources.md").write_text("\n".join(md))
    (RESULTS / "other_sources.json").write_text(json.dumps(blob, indent=1) + "\n")
    print(f"wrote benchmarks/results/other_sources.md ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
