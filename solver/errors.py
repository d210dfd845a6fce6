"""Errors the front ends turn into one-line messages and exit codes.

`InputError` is bad input (exit code 2): it always names the offending field and the fix.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input: `field` names what is wrong, the message says how to fix it."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


def pydantic_error_line(exc, prefix: str = "") -> str:
    """One line from a pydantic ValidationError: every offending field with its value."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "__root__")
        loc = f"{prefix}{loc}" if loc else prefix.rstrip(".")
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key; remove it or check its spelling"
        inp = err.get("input")
        shown = "" if err.get("type") in ("extra_forbidden", "missing") or isinstance(inp, dict) else f" (got {inp!r})"
        parts.append(f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}")
    return "; ".join(parts)
