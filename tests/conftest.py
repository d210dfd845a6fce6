"""Shared test helpers: run the CLI in-process (fast) or as a subprocess (the honest check
that bad input never prints a traceback)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

DATA = Path(__file__).parent / "data"


class Result(NamedTuple):
    """Exit code and captured output; unpacks as (code, out, err)."""

    code: int
    out: str
    err: str


def run_subprocess(*args: str, cwd: str | Path | None = None) -> Result:
    """`python -m solveplan.cli ARGS` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-m", "solveplan.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(capsys):
    """Call `solveplan.cli.main(argv)` in-process; returns a Result with the exit code and output."""
    from solveplan.cli import main

    def _run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return _run
