"""Reading the files a user names -- spec, job, link, step and log files -- safely: a regular
file of at most MAX_FILE_BYTES, opened without blocking (a FIFO or /proc/kmsg cannot hang a
reader), UTF-8, and parsed by loaders that refuse what would silently change or explode the
input: duplicate keys, YAML aliases (billion laughs), nesting deeper than MAX_DEPTH, integers of
more than MAX_INT_DIGITS digits. (NaN and infinities are read, and refused by the field that
holds them, which the error then names.) Errors are one line naming the file and never quote
its contents.

`file_policy` restricts which files may be named at all (the HTTP service: none, or plain names
inside an operator's spec directory); `catalog` reads its own shipped files outside any policy.
"""

from __future__ import annotations

import json
import os
import re
import stat
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError

MAX_FILE_BYTES = 32 << 20
MAX_DEPTH = 32
MAX_INT_DIGITS = 20
# elements (list items, mapping entries, scalars) of one file or body: a spec holds hundreds, a
# link matrix of 1,024 hosts two million (its reader raises the limit); 4M small YAML items
# took 200 s and 2 GB to parse before this limit
MAX_ELEMENTS = 200_000
MAX_STRING_CHARS = 1 << 16  # characters of one string scalar


@dataclass(frozen=True)
class SpecFiles:
    """Which files a caller may name (`file_policy`): `directory` None opens no file at all."""

    directory: Path | None = None


_FILE_POLICY: ContextVar[SpecFiles | None] = ContextVar("solveplan_file_policy", default=None)


@contextmanager
def file_policy(policy: SpecFiles | None):
    """Within the block (this thread or task and what it starts with a copied context), user
    file names are restricted by `policy` (None: any file, the default for the CLI and the
    Python API). The HTTP service runs every request under `SpecFiles(...)`."""
    token = _FILE_POLICY.set(policy)
    try:
        yield
    finally:
        _FILE_POLICY.reset(token)


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")


def user_path(ref: str | Path, field: str) -> Path:
    """The path of a file the user names, under the file policy in force."""
    policy = _FILE_POLICY.get()
    if policy is None:
        return Path(ref)
    if policy.directory is None:
        raise InputError(field, "this service opens no files: give a catalog name or an inline spec mapping")
    name = str(ref)
    root = policy.directory.resolve()
    target = (root / name).resolve()
    if not _PLAIN_NAME.match(name) or ".." in name or target.parent != root:
        raise InputError(field, "give the plain name of a file in the service's spec directory (no paths), "
                                "a catalog name or an inline spec mapping")
    if not target.is_file():
        raise InputError(field, f"no spec file {name!r} in the service's spec directory")
    return target


def is_file_ref(ref: str) -> bool:
    """Does `ref` name a spec file (by its suffix, a path separator, or because it exists)? Under
    a service's file policy existence is looked up only inside its spec directory, so an answer
    never reveals whether a path exists on the server."""
    ref = str(ref)
    if Path(ref).suffix.lower() in (".yaml", ".yml", ".json") or "/" in ref or "\\" in ref:
        return True
    policy = _FILE_POLICY.get()
    try:
        if policy is None:
            return Path(ref).exists()
    except (OSError, ValueError):  # a NUL byte, a name too long
        return False
    return policy.directory is not None and _PLAIN_NAME.match(ref) is not None and (policy.directory / ref).is_file()


def read_text(path: str | Path, field: str) -> str:
    """The UTF-8 text of a regular file of at most MAX_FILE_BYTES (InputError naming `field`)."""
    path = user_path(path, field)
    name = path.name or str(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        raise InputError(field, f"file {str(path)!r} does not exist") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(field, f"{str(path)!r} is a directory; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(field, f"{str(path)!r} is not a regular file (a FIFO, device or socket); give a file")
    if st.st_size > MAX_FILE_BYTES:
        raise InputError(field, f"{name} is {st.st_size:,} bytes; files are read up to {MAX_FILE_BYTES:,} bytes")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
        if raw is None:  # a non-blocking read with nothing to read yet
            raise BlockingIOError
    except BlockingIOError:
        raise InputError(field, f"{name} cannot be read without waiting; give a regular file") from None
    except OSError as exc:
        raise InputError(field, f"cannot read {name}: {exc.strerror or type(exc).__name__}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(field, f"{name} is over {MAX_FILE_BYTES:,} bytes; files are read up to that size")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(field, f"{name} is not UTF-8 text (invalid byte at offset {exc.start}); "
                                f"save it as UTF-8") from None


def _too_big_int(digits: str) -> bool:
    return len(digits.lstrip("+-").replace("_", "").lstrip("0")) > MAX_INT_DIGITS


class _Refused(ValueError):
    """A file construct the loaders refuse (the message says which)."""


def _json_int(text: str) -> int:
    if _too_big_int(text):
        raise _Refused(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _unique_pairs(pairs: list) -> dict:
    """A JSON object; a key given twice with different values is refused (the same value twice,
    as some published Hugging Face configs have, loses nothing)."""
    out: dict = {}
    for key, value in pairs:
        if key in out and out[key] != value:
            raise _Refused(f"key {str(key)[:60]!r} appears twice with different values")
        out[key] = value
    return out


class _StrictYamlLoader(yaml.SafeLoader):
    """SafeLoader without aliases (billion laughs), duplicate keys or huge integers."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.events.AliasEvent):
            mark = self.peek_event().start_mark
            raise _Refused(f"YAML aliases (*name) are not accepted (line {mark.line + 1}); write the values out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:
                raise _Refused(f"a mapping key must be a scalar (line {key_node.start_mark.line + 1})") from None
            value = self.construct_object(value_node, deep=True)
            if dup and seen[key] != value:
                raise _Refused(f"key {str(key)[:60]!r} appears twice with different values "
                               f"(line {key_node.start_mark.line + 1})")
            seen[key] = value
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        if _too_big_int(str(node.value)):
            raise _Refused(f"an integer of {len(str(node.value))} digits (line {node.start_mark.line + 1}; "
                           f"at most {MAX_INT_DIGITS})")
        return super().construct_yaml_int(node)


_StrictYamlLoader.add_constructor("tag:yaml.org,2002:int", _StrictYamlLoader.construct_yaml_int)
_StrictYamlLoader.add_constructor("tag:yaml.org,2002:map", _StrictYamlLoader.construct_yaml_map)


# ------------------------------------------------------------------ YAML 1.2 core schema
# PyYAML resolves plain scalars by YAML 1.1: `01400` is octal 768, `1:30` sexagesimal 90,
# `yes`/`on` booleans, `1_000` an integer. A spec means what it says only under YAML 1.2's core
# schema (what JSON and every other current parser agree on): true/false, null, decimal integers
# (0o and 0x when written so), decimal floats, .inf/.nan; anything else is a string, which the
# field's type check then refuses naming the field. A decimal with a leading zero is refused:
# YAML 1.1 readers take it for octal, so the file means two things.
_YAML12_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    ("tag:yaml.org,2002:float", r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+.0123456789"),
)


def _construct_yaml12_int(loader, node) -> int:
    """A YAML 1.2 integer: decimal (no leading zero), 0o octal or 0x hexadecimal."""
    text = str(node.value)
    line = node.start_mark.line + 1
    if _too_big_int(text):
        raise _Refused(f"an integer of {len(text)} digits (line {line}; at most {MAX_INT_DIGITS})")
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    if len(text.lstrip("+-")) > 1 and text.lstrip("+-").startswith("0"):
        raise _Refused(f"{text} has a leading zero (line {line}): YAML 1.1 readers take it for octal; "
                       f"write {int(text, 10)} (or 0o{text.lstrip('+-').lstrip('0') or '0'} for octal)")
    return int(text, 10)


def _use_yaml_1_2(loader_cls) -> None:
    """Replace `loader_cls`'s YAML 1.1 implicit resolvers by the YAML 1.2 core schema's."""
    loader_cls.yaml_implicit_resolvers = {}
    for tag, pattern, first in _YAML12_RESOLVERS:
        loader_cls.add_implicit_resolver(tag, re.compile(pattern), list(first))
    loader_cls.add_constructor("tag:yaml.org,2002:int", _construct_yaml12_int)


_use_yaml_1_2(_StrictYamlLoader)


def _depth(data) -> int:
    """Nesting depth of lists and mappings (iterative: no recursion on hostile input)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        obj, d = stack.pop()
        if isinstance(obj, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (obj.values() if isinstance(obj, dict) else obj))
    return deepest


def parse_data(text: str, field: str, name: str, fmt: str = "yaml", max_elements: int = MAX_ELEMENTS) -> Any:
    """JSON (`fmt` "json") or YAML text -> data, refusing what `read_text`'s comment lists, and
    text of more than `max_elements` elements or strings over MAX_STRING_CHARS (`_bounded`)."""
    check_element_count(text, field, name, fmt, max_elements)
    try:
        if fmt == "json":
            data = json.loads(text, object_pairs_hook=_unique_pairs, parse_int=_json_int)
        else:
            data = yaml.load(text, Loader=_bounded_yaml_loader(max_elements))  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise InputError(field, f"{name}: {exc}") from None
    except RecursionError:
        raise InputError(field, f"{name} is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except json.JSONDecodeError as exc:
        raise InputError(field, f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = str(getattr(exc, "problem", None) or "malformed")[:120]
        raise InputError(field, f"{name} is not valid YAML{where}: {problem}") from None
    except ValueError as exc:  # numbers Python cannot convert
        raise InputError(field, f"{name}: {str(exc)[:120]}") from None
    if _depth(data) > MAX_DEPTH:
        raise InputError(field, f"{name} is nested too deeply (at most {MAX_DEPTH} levels)")
    _check_strings(data, field, name)
    return data


# ------------------------------------------------------------------ bounded work (issue #27)
def _elements_upper_bound(text: str, fmt: str) -> int:
    """An upper bound of the elements the text can parse to, counted without parsing: in JSON
    every element but the first of a container follows a comma, so elements <= commas +
    containers + 1; in YAML block elements also start lines (flow ones follow commas)."""
    n = text.count(",") + text.count("[") + text.count("{") + 1
    return n + text.count("\n") if fmt != "json" else n


def check_element_count(text: str, field: str, name: str, fmt: str, max_elements: int = MAX_ELEMENTS) -> None:
    """Refuse, before parsing, text that may hold more than `max_elements` elements (parsing
    them would cost seconds and gigabytes per few megabytes). One line naming the limit."""
    if len(text) > max_elements and _elements_upper_bound(text, fmt) > max_elements:
        raise InputError(field, f"{name} holds more than {max_elements:,} elements (list items, keys and values), "
                                f"the most a file or request may hold")


def _bounded_yaml_loader(max_elements: int):
    """The strict YAML loader that also counts the nodes it composes and stops past
    `max_elements` (the guard during parsing, should the count before it be passed)."""

    class _Bounded(_StrictYamlLoader):
        def compose_node(self, parent, index):
            self._nodes = getattr(self, "_nodes", 0) + 1
            if self._nodes > max_elements:
                raise _Refused(f"more than {max_elements:,} elements (list items, keys and values), the most "
                               f"a file or request may hold")
            return super().compose_node(parent, index)

    return _Bounded


def _check_strings(data, field: str, name: str) -> None:
    """Refuse a string (key or value) of more than MAX_STRING_CHARS characters."""
    stack = [data]
    while stack:
        obj = stack.pop()
        if isinstance(obj, str):
            if len(obj) > MAX_STRING_CHARS:
                raise InputError(field, f"{name} holds a string of {len(obj):,} characters (at most "
                                        f"{MAX_STRING_CHARS:,})")
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list):
            stack.extend(obj)


def read_data(path: str | Path, field: str) -> Any:
    """A user's JSON (by the .json suffix) or YAML file, read and parsed safely."""
    text = read_text(path, field)
    name = Path(path).name or str(path)
    return parse_data(text, field, name, "json" if str(path).lower().endswith(".json") else "yaml")


def read_mapping(path: str | Path, field: str) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict; malformed input is an InputError naming the file."""
    data = read_data(path, field)
    name = Path(path).name or str(path)
    if data is None:
        raise InputError(field, f"{name} is empty; it must hold a mapping of keys to values")
    if not isinstance(data, dict):
        raise InputError(field, f"{name} must hold a mapping of keys to values, not {type(data).__name__}")
    return data
