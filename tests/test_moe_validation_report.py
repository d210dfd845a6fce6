"""README's MoE accuracy block is the table benchmarks/moe_validation.py makes from its committed
result file (benchmarks/results/moe_validation.json): regenerated, never typed."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("moe_validation_bench", ROOT / "benchmarks" / "moe_validation.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_block_is_the_committed_result():
    mod = _bench()
    blob = json.loads((ROOT / "benchmarks" / "results" / "moe_validation.json").read_text())
    readme = (ROOT / "README.md").read_text()
    assert f"{mod.START}\n{mod.readme_block(blob)}\n{mod.END}" in readme
    # the result covers every MoE row (category A, and Nemotron 3.5 Lightning's filed as B): predicted or skipped
    assert blob["predicted"] + sum(n for _, n in blob["skipped"]) == blob["moe_rows"] == 106
    assert len(blob["rows"]) == blob["predicted"]


def test_block_lists_each_model_family_and_all():
    mod = _bench()
    line = {"group": "all", "rows": 2, "mape": 0.25}
    fam = {"group": "mixtral", "rows": 2, "mape": 0.25}
    blob = {"in_sample": [fam, line], "left_out": {"source": {"by_model": [fam, line]}}, "gpus": ["b200"],
            "skipped": [("why", 3)], "predicted": 2, "moe_rows": 5, "not_fitting": 1, "commit": "abc"}
    text = mod.readme_block(blob)
    assert "| mixtral | 2 | 25.0% | 25.0% |" in text and "| **all** (b200) | 2 | **25.0%** | **25.0%** |" in text
    assert "2 of 5 MoE rows predicted" in text and "3 why" in text
