"""Errors the front ends turn into one-line messages and exit codes.

`InputError` is bad input (exit code 2 in the CLI, 422 in the service): its `field` is the
spec path of what is wrong -- `job.model.num_layers`, `compare.tp`, `bandwidth_gbit_per_s[3][5]`
-- relative to whatever the caller handed in (the caller names the root: the API says `job`,
an admission batch `jobs[2]`, the CLI nothing), and its message says how to fix it. Only
`cli/` turns a path into a flag name (`--num-layers`).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable


class InputError(ValueError):
    """Bad user input: `field` names what is wrong (a spec path), the message says how to fix it."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


# ------------------------------------------------------------------ text the user gave, shown safely
MAX_SHOWN_CHARS = 200  # the longest excerpt of user text in a message
MAX_MESSAGE_CHARS = 2000  # the longest error message a front end prints or answers

HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
HOST_NAME_RULE = "1 to 253 characters of letters, digits, '.', '_' and '-', starting with a letter or digit"


def _unsafe(ch: str) -> bool:
    """Control and format characters (ESC of ANSI sequences, newlines, bidi overrides) and lone
    surrogates: what a terminal, a log line or a hostfile would act on or cannot encode."""
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def escape_text(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` as it may be printed: unsafe characters (`_unsafe`) written as Python escapes
    (\\x1b, \\n, \\ud800), and cut to `limit` characters with the length said. The one
    escape of user text in messages and output."""
    text = str(text)
    cut = len(text) > limit
    shown = "".join(ch.encode("unicode_escape").decode("ascii") if _unsafe(ch) else ch for ch in text[:limit])
    return f"{shown}... ({len(text):,} characters)" if cut else shown


_BRACKET = re.compile(r"(\\*)\[")
_RICH_TAG = re.compile(r"\[[a-z#/@][^[]*?]")  # rich.markup.RE_TAGS without its escapes


def escape_markup(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """`escape_text`, then rich markup escaped: a name such as "[/]", "[link=...]" or "\\[" prints
    as written in a rich table or title. rich.markup.render reads k backslashes before a tag as
    k // 2 literal ones (an odd one escapes the tag) and turns `\\[` before any other bracket into
    `[` (rich/markup.py `_parse`, `render`), so a tag's backslashes are doubled plus one (what
    `rich.markup.escape` does) and another bracket's get one more. Emoji codes (":smile:") print as
    written only where the console is made with `emoji=False`, as the CLI's are."""
    shown = escape_text(text, limit)

    def escape_bracket(match: re.Match) -> str:
        k = len(match.group(1))
        if _RICH_TAG.match(shown, match.end(1)):
            return "\\" * (2 * k + 1) + "["
        return "\\" * (k + 1) + "[" if k else "["

    out = _BRACKET.sub(escape_bracket, shown)
    return out + "\\" if out.endswith("\\") and not out.endswith("\\\\") else out  # as rich's escape


def unsafe_name_reason(name: str, limit: int = 256) -> str | None:
    """Why `name` (a model, GPU, cluster or pool name) cannot be printed as it is (None: it can):
    empty, longer than `limit`, or holding a control or format character."""
    if not name.strip():
        return "must not be empty"
    if len(name) > limit:
        return f"is {len(name):,} characters long; at most {limit}"
    bad = next((ch for ch in name if _unsafe(ch)), None)
    if bad is not None:
        return (f"holds the control character {bad.encode('unicode_escape').decode('ascii')} "
                f"(at {name.index(bad)}); names are printable text")
    return None


def host_name_reason(name: str) -> str | None:
    """Why `name` cannot be a host (node) name in a hostfile or a launcher's list (None: it can)."""
    if HOST_NAME.fullmatch(name):
        return None
    return f"not a host name ({HOST_NAME_RULE})"


def path(root: str, *parts: str) -> str:
    """`root.part...` for non-empty pieces: path("job", "model") == "job.model", path("", "tp") == "tp"."""
    return ".".join(p for p in (root, *parts) if p)


def _loc(err: dict) -> str:
    """The offending path, each key as it may be printed (`escape_text`: a key the user wrote with a newline
    or a control character keeps the error on one line)."""
    return ".".join(escape_text(str(x), 80) for x in err.get("loc", ()) if x != "__root__")


def _message(err: dict, allowed: Iterable[str] | None = None) -> str:
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = (f"unknown key; allowed keys: {', '.join(allowed)}" if allowed is not None
               else "unknown key; remove it or check its spelling")
    inp = err.get("input")
    hidden = err.get("type") in ("extra_forbidden", "missing") or isinstance(inp, dict)
    return msg if hidden else f"{msg} (got {escape_text(repr(inp), 80)})"


def validation_error(exc, root: str = "", allowed: Iterable[str] | None = None) -> InputError:
    """An InputError from a pydantic ValidationError of the object at `root`: the field is
    the first offending path; the message lists it and the others (`allowed` names the keys an
    unknown one should have been)."""
    errs = exc.errors()
    first = errs[0]
    rest = "".join(f"; {path(root, _loc(e))}: {_message(e, allowed)}" for e in errs[1:])
    return InputError(path(root, _loc(first)), _message(first, allowed) + rest)
