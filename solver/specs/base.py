from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """Base of every spec: frozen, unknown keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)
