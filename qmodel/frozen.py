"""The base of every catalog value: an immutable pydantic model that rejects unknown keys."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen"]


class Frozen(BaseModel):
    """Base for catalog values: immutable, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
