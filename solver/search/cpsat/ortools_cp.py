"""ortools' CP-SAT module (`cp_model`) without importing pandas.

ortools 9.15's `cp_model.py` imports pandas at the top (about 0.16-0.3 s and 60 MiB in a
fresh process, more than the whole search of a typical `solveplan optimize`) only for its
`*_series` helpers, which solveplan never calls. Its module body touches nothing of pandas but
the names `pd.Index` and `pd.Series` in type annotations. So the import runs with a
placeholder module under the name `pandas` that provides those two names, and afterwards the
module's `pd` is a proxy that imports the real pandas on first use: the series helpers still
work for whoever calls them, and a process that imports pandas itself gets the real one.

Anything unexpected (pandas already imported, a newer ortools needing more of pandas at import
time) falls back to the plain import. Every solveplan module that builds CP-SAT models imports
`cp_model` from here.

The import also loads ortools' native library (tens of thousands of relocations). CPython opens
extension modules with RTLD_NOW, which resolves every function symbol at load time; the import
runs with RTLD_LAZY instead (as ld.so binds an ordinary program): the functions a solve calls
are bound on first call, which takes ~40 ms off every process that imports CP-SAT. The flags
are restored afterwards; LD_BIND_NOW in the environment still forces eager binding.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from contextlib import contextmanager
from typing import Any

_MODULE = "ortools.sat.python.cp_model"


class _PandasOnFirstUse(types.ModuleType):
    """Stands for pandas in `cp_model`'s globals; imports it when an attribute is read."""

    def __getattr__(self, name: str):
        return getattr(importlib.import_module("pandas"), name)


@contextmanager
def _lazy_binding():
    """dlopen with RTLD_LAZY (keeping the other flags) while the native modules load."""
    flags = sys.getdlopenflags()
    lazy = getattr(os, "RTLD_LAZY", None)
    if lazy is None or not hasattr(os, "RTLD_NOW"):  # not a dlopen platform
        yield
        return
    sys.setdlopenflags((flags & ~os.RTLD_NOW) | lazy)
    try:
        yield
    finally:
        sys.setdlopenflags(flags)


def _import_without_pandas():
    if _MODULE in sys.modules or "pandas" in sys.modules:
        return importlib.import_module(_MODULE)
    placeholder: Any = types.ModuleType("pandas")  # a stand-in module: its attributes are set here
    placeholder.Index = type("Index", (), {})
    placeholder.Series = type("Series", (), {})
    before = set(sys.modules)
    sys.modules["pandas"] = placeholder
    try:
        module: Any = importlib.import_module(_MODULE)
    except Exception:  # noqa: BLE001 - it needs more of pandas: forget the half import, import plainly
        for name in set(sys.modules) - before:
            if name == "pandas" or name.startswith("ortools"):
                del sys.modules[name]
        return importlib.import_module(_MODULE)
    finally:
        if sys.modules.get("pandas") is placeholder:
            del sys.modules["pandas"]
    module.pd = _PandasOnFirstUse("pandas")
    return module


with _lazy_binding():
    cp_model = _import_without_pandas()

__all__ = ["cp_model"]
