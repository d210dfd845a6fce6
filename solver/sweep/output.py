"""Sweep output: CSV, JSON lines or Parquet (by the file's suffix), streamed and resumable.

While a sweep runs, each row is appended to a sidecar `OUT.partial.jsonl` as soon as it is
planned (so an interrupted sweep loses nothing); when it ends -- finished, interrupted or
failed -- the output file is rewritten whole (atomically: a temporary file renamed over it)
with every row in scenario order, and the sidecar is removed.

Resume: the rows already in the output (and in a sidecar an interrupted run left behind) are
kept and their scenarios are not planned again -- except FAILED rows (a crash, a lost task),
which are planned again. Rows of scenarios that are no longer in the grid are kept, after the
grid's rows.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from ..errors import InputError
from ..specs.writing import atomic_output
from .rows import COLUMNS

FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".parquet": "parquet"}
PARQUET_EXTRA = "writing or reading .parquet needs pyarrow: pip install 'solveplan[sweep]'"


def output_format(path: str | Path, field: str = "--output") -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InputError(field, f"{str(path)!r}: name the output .csv, .jsonl or .parquet (the suffix picks the format)")
    if fmt == "parquet":
        _pyarrow(field)
    return fmt


def _pyarrow(field: str):
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise InputError(field, PARQUET_EXTRA) from None
    return pyarrow


def _typed(value, typ: type, where: str):
    """A value read back from a file, as its column's type (CSV gives strings; '' is None)."""
    if value is None or value == "":
        return None
    if isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    try:
        if typ is bool:
            if str(value) not in ("True", "False", "true", "false"):
                raise ValueError(value)
            return str(value) in ("True", "true")
        if typ is int and isinstance(value, float) and value.is_integer():
            return int(value)
        return typ(value)
    except (TypeError, ValueError):
        raise InputError(where, f"{value!r} is not a {typ.__name__}; is this a file `solveplan sweep` wrote?") from None


def _check_columns(names: Iterable[str], path: Path) -> None:
    names = list(names)
    if names != list(COLUMNS):
        missing = [c for c in COLUMNS if c not in names]
        extra = [c for c in names if c not in COLUMNS]
        what = f"missing {', '.join(missing[:3])}" if missing else f"unknown {', '.join(extra[:3])}" if extra else "another order"
        raise InputError(str(path), f"its columns are not this version's sweep columns ({what}); "
                                    f"write to a new file or remove it")


def read_rows(path: str | Path) -> list[dict]:
    """Rows of a sweep output file, typed by COLUMNS."""
    path = Path(path)
    fmt = output_format(path, str(path))
    if not path.is_file():
        raise InputError(str(path), "does not exist; give a file `solveplan sweep` wrote")
    try:
        if fmt == "csv":
            with open(path, newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                _check_columns(reader.fieldnames or [], path)
                raw = list(reader)
        elif fmt == "jsonl":
            raw = _read_jsonl(path)
            for r in raw[:1]:
                _check_columns(r, path)
        else:
            table = _pyarrow(str(path)).parquet.read_table(path)
            _check_columns(table.column_names, path)
            raw = table.to_pylist()
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(str(path), f"cannot read it: {exc}") from None
    return [{c: _typed(r.get(c), t, f"{path}:{i + 1}:{c}") for c, t in COLUMNS.items()} for i, r in enumerate(raw)]


def _read_jsonl(path: Path) -> list[dict]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            # the last line of an interrupted sidecar may be cut short: that row is planned again
            if path.name.endswith(".partial.jsonl"):
                continue
            raise InputError(f"{path}:{n}", "not valid JSON; is this a file `solveplan sweep` wrote?") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{n}", "not a JSON object; is this a file `solveplan sweep` wrote?")
        out.append(obj)
    return out


def write_rows(path: str | Path, rows: list[dict]) -> None:
    """Write every row (atomically) in the format the suffix names."""
    path = Path(path)
    fmt = output_format(path)
    with atomic_output(path, "output") as tmp:
        _write_rows(tmp, fmt, rows)


def _write_rows(tmp: Path, fmt: str, rows: list[dict]) -> None:
    if fmt == "csv":
        with open(tmp, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
            writer.writeheader()
            writer.writerows({c: ("" if r.get(c) is None else r.get(c)) for c in COLUMNS} for r in rows)
    elif fmt == "jsonl":
        with open(tmp, "w", encoding="utf-8") as fh:
            for r in rows:
                fh.write(json.dumps({c: r.get(c) for c in COLUMNS}, allow_nan=False) + "\n")
    else:
        pa = _pyarrow("--output")
        types = {str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_()}
        schema = pa.schema([(c, types[t]) for c, t in COLUMNS.items()])
        table = pa.Table.from_pylist([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema)
        pa.parquet.write_table(table, tmp)


class Output:
    """The output of one sweep: what is already done, streaming new rows, the final write."""

    def __init__(self, path: str | Path, resume: bool = False, overwrite: bool = False):
        self.path = Path(path)
        self.format = output_format(self.path)
        self.partial = self.path.with_name(self.path.name + ".partial.jsonl")
        if resume and overwrite:
            raise InputError("resume", "give --resume (keep the rows done) or --overwrite (start again), not both")
        exists = [p for p in (self.path, self.partial) if p.exists()]
        if exists and not (resume or overwrite):
            raise InputError("output", f"{exists[0]} exists: add --resume to keep its rows and plan the rest, "
                                         f"or --overwrite to start again")
        if not self.path.parent.is_dir():
            raise InputError("output", f"folder {str(self.path.parent)!r} does not exist")
        self.previous: list[dict] = []
        if resume:
            if self.path.exists():
                self.previous = read_rows(self.path)
            if self.partial.exists():
                self.previous += [{c: _typed(r.get(c), t, f"{self.partial}:{c}") for c, t in COLUMNS.items()}
                                  for r in _read_jsonl(self.partial)]
        elif overwrite and self.partial.exists():
            self.partial.unlink()
        self._fh: TextIO | None = None
        self._appended = 0

    def done(self) -> dict[str, dict]:
        """Rows kept from before, by scenario id (the last row of an id wins; FAILED rows are not kept)."""
        rows = {r["scenario_id"]: r for r in self.previous}
        return {sid: r for sid, r in rows.items() if r["status"] != "FAILED"}

    def append(self, row: dict) -> None:
        if self._fh is None:
            self._fh = open(self.partial, "a", encoding="utf-8")
        self._fh.write(json.dumps({c: row.get(c) for c in COLUMNS}, allow_nan=False) + "\n")
        self._fh.flush()
        self._appended += 1

    def finish(self, ordered_ids: list[str], rows: dict[str, dict]) -> int:
        """Write the output: the grid's rows in scenario order, then kept rows of scenarios no
        longer in the grid (their number is returned). The sidecar is removed."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if not self._appended and not self.previous and not self.path.exists():
            return 0  # stopped before its first row: leave no empty file behind
        in_grid = set(ordered_ids)
        others: dict[str, dict] = {}
        for r in self.previous:
            if r["scenario_id"] not in in_grid:
                others[r["scenario_id"]] = r
        out = [rows[sid] for sid in ordered_ids if sid in rows] + list(others.values())
        write_rows(self.path, out)
        if self.partial.exists():
            self.partial.unlink()
        return len(others)
