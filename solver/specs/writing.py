"""Every output file is written whole or not at all (issue #27 item 6): into a temporary file
beside it, then renamed over it, so a full disk, a killed process or a failing renderer never
leaves a cut file where a valid one was. The one helper for that is `atomic_output`; errors
of the filesystem become one-line `InputError`s naming the file (exit 2), never a traceback.

A regular file (or a new name) is replaced by renaming; a character device (`/dev/null`,
`/dev/full`) is written as named, in place (renaming would replace the device node itself), so
`/dev/full` fails with its ENOSPC; directories, FIFOs and other special files are refused.
Plots name their format by their suffix (`PLOT_SUFFIXES`): matplotlib would otherwise add
`.png` to a name without one and write a different file than the one named."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

from ..errors import InputError

PLOT_SUFFIXES = (".png", ".pdf", ".svg")


def check_output(path: str | Path, field: str, suffixes: Sequence[str] | None = None) -> Path:
    """`path` as a Path when it may be written: a new name or a regular file, in a directory
    that exists, with one of `suffixes` (when given). InputError naming `field` otherwise."""
    p = Path(path)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise InputError(field, f"{str(p)!r}: name the file {', '.join(suffixes[:-1])} or {suffixes[-1]} "
                                f"(the suffix picks the format)")
    try:
        st = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(field, f"{str(p)!r}: {exc.strerror}") from None
    if st is not None and not (stat.S_ISREG(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise InputError(field, f"{str(p)!r} is {kind}; give a regular file to write")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(field, f"{str(p)!r}: directory {str(parent)!r} does not exist")
    return p


@contextlib.contextmanager
def atomic_output(path: str | Path, field: str, suffixes: Sequence[str] | None = None) -> Iterator[Path]:
    """A temporary path beside `path` (same suffix, so renderers pick the same format) to write;
    renamed over `path` when the block ends without an error, removed otherwise. OSError
    (ENOSPC, EACCES, ...) becomes InputError(field, 'cannot write PATH: reason')."""
    p = check_output(path, field, suffixes)
    if _is_device(p):  # written as named (see the module docstring)
        try:
            yield p
        except OSError as exc:
            raise InputError(field, f"cannot write {str(p)!r}: {exc.strerror or type(exc).__name__}") from None
        return
    tmp = p.with_name(f".{p.stem}.{os.getpid()}.tmp{p.suffix}")
    try:
        yield tmp
        os.replace(tmp, p)
    except OSError as exc:
        raise InputError(field, f"cannot write {str(p)!r}: {exc.strerror or type(exc).__name__}") from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()


def _is_device(p: Path) -> bool:
    try:
        return stat.S_ISCHR(os.stat(p).st_mode)
    except OSError:
        return False


def write_text(path: str | Path, text: str, field: str) -> None:
    """Write `text` (UTF-8) to `path` atomically (`atomic_output`)."""
    with atomic_output(path, field) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if not _is_device(tmp):
                os.fsync(fh.fileno())
