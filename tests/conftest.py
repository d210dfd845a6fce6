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


def llama4_vision_params() -> int:
    """Weights of Llama 4's vision encoder, adapter and projector, which solveplan does not plan (it
    plans the text decoder): transformers' Llama4VisionModel and Llama4MultiModalProjector built from
    the Scout/Maverick checkpoints' vision_config (hidden 1408, MLP 5632, 34 layers, patch 14 on
    336-pixel images, pixel-shuffle ratio 0.5 -> adapter 5632 -> 4096 -> 4096, projector 4096 -> text
    hidden 5120; biases on the encoder's linear layers, LayerNorms with bias)."""
    h, f, layers, patch, image, out = 1408, 5632, 34, 14, 336, 4096
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    patches = (image // patch) ** 2 + 1  # + the class token
    encoder = 3 * patch * patch * h + h + patches * h + 2 * 2 * h + layers * layer
    adapter = (4 * h) * out + out * out
    return encoder + adapter + out * 5120
