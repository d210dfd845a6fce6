"""The checked readers of a Hugging Face config.json's values and their error, one source for `specs.hf` and the
family modules it calls (hf_dsa, hf_hybrid, hf_router, rope): a value of the wrong type or sign is refused in one
line naming the key, never coerced."""

from __future__ import annotations

from typing import Any, overload

from ..errors import InputError

FIELD = "model"  # errors name paths under the model (catalog.load_model puts them under its own field)


def fail(msg: str) -> InputError:
    return InputError(FIELD, f"Hugging Face config.json: {msg}")


@overload
def read_int(data: dict, mt: str, *keys: str) -> int: ...
@overload
def read_int(data: dict, mt: str, *keys: str, default: int) -> int: ...
@overload
def read_int(data: dict, mt: str, *keys: str, default: None) -> int | None: ...
def read_int(data: dict, mt: str, *keys: str, default: Any = ...) -> int | None:
    """The first of `keys` present in `data`, checked to be a positive integer."""
    for key in keys:
        if data.get(key) is not None:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise fail(f"({mt}) '{key}' must be a positive integer (got {value!r})")
            return value
    if default is ...:
        raise fail(f"({mt}) is missing {' or '.join(repr(k) for k in keys)}; it is required")
    return default


def read_whole(data: dict, mt: str, key: str, default: int, least: int | None = 0) -> int:
    """An integer key (`default` when absent or null), at least `least` (None: any integer, e.g. a layer index where
    -1 means the last)."""
    value = data.get(key)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
        bound = "an integer" if least is None else "a non-negative integer" if least == 0 else f"an integer of at least {least}"
        raise fail(f"({mt}) '{key}' must be {bound} (got {value!r})")
    return value


def read_num(data: dict, mt: str, key: str, default: float | None) -> float | None:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise fail(f"({mt}) '{key}' must be a positive number (got {value!r})")
    return float(value)


def read_bool(data: dict, mt: str, key: str, default: bool) -> bool:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise fail(f"({mt}) '{key}' must be true or false (got {value!r})")
    return value
