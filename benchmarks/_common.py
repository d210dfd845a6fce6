"""Helpers shared by the benchmark scripts."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def commit() -> str:
    """The short hash of the commit the results are measured at (`unknown` outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def code_state(paths=("solver", "benchmarks", ":!benchmarks/results")) -> str:
    """`commit()`, plus ` + local changes` when the code under `paths` (results excluded)
    differs from it: results measured on uncommitted code say so."""
    try:
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return commit()
    return commit() + (" + local changes" if dirty else "")
