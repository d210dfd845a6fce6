"""The base of every spec, and `build`: a spec from a mapping, bad input named by its path."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import InputError, validation_error


class Spec(BaseModel):
    """Base of every spec: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def build(spec_cls, data: dict, field: str, *, list_keys: bool = False):
    """`spec_cls(**data)`; a bad value is an InputError whose field is its path under `field`
    (`list_keys`: an unknown key's message lists the allowed ones)."""
    try:
        return spec_cls(**data)
    except ValidationError as exc:
        raise validation_error(exc, field, list(spec_cls.model_fields) if list_keys else None) from None
    except TypeError as exc:
        raise InputError(field, str(exc)) from None
