"""Errors the front ends turn into one-line messages and exit codes.

`InputError` is bad input (exit code 2 in the CLI, 422 in the service): its `field` is the
spec path of what is wrong -- `job.model.num_layers`, `compare.tp`, `bandwidth_gbit_per_s[3][5]`
-- relative to whatever the caller handed in (the caller names the root: the API says `job`,
an admission batch `jobs[2]`, the CLI nothing), and its message says how to fix it. Only
`cli/` turns a path into a flag name (`--num-layers`).
"""

from __future__ import annotations

from typing import Iterable, Optional


class InputError(ValueError):
    """Bad user input: `field` names what is wrong (a spec path), the message says how to fix it."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


def path(root: str, *parts: str) -> str:
    """`root.part...` for non-empty pieces: path("job", "model") == "job.model", path("", "tp") == "tp"."""
    return ".".join(p for p in (root, *parts) if p)


def _loc(err: dict) -> str:
    return ".".join(str(x) for x in err.get("loc", ()) if x != "__root__")


def _message(err: dict, allowed: Optional[Iterable[str]] = None) -> str:
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = (f"unknown key; allowed keys: {', '.join(allowed)}" if allowed is not None
               else "unknown key; remove it or check its spelling")
    inp = err.get("input")
    hidden = err.get("type") in ("extra_forbidden", "missing") or isinstance(inp, dict)
    return msg if hidden else f"{msg} (got {inp!r})"


def validation_error(exc, root: str = "", allowed: Optional[Iterable[str]] = None) -> InputError:
    """An InputError from a pydantic ValidationError of the object at `root`: the field is
    the first offending path; the message lists it and the others (`allowed` names the keys an
    unknown one should have been)."""
    errs = exc.errors()
    first = errs[0]
    rest = "".join(f"; {path(root, _loc(e))}: {_message(e, allowed)}" for e in errs[1:])
    return InputError(path(root, _loc(first)), _message(first, allowed) + rest)
