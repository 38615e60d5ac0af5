"""The base of every ``toolgate.yaml`` section model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..model import split_tool_id

__all__ = ["Section", "valid_namespace"]


class Section(BaseModel):
    """A section of ``toolgate.yaml``: unknown keys are errors, values are frozen."""

    # Attribute docstrings become the fields' descriptions in the published JSON Schema
    # (``toolgate config schema``) and in the generated configuration reference.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def valid_namespace(value: str) -> str:
    """``value`` if it can be a tool namespace; else ``ValueError`` saying why."""
    try:
        split_tool_id(f"{value}:x")
    except ValueError:
        raise ValueError(
            f"{value!r} is not a usable namespace (no white space, no trailing colon)"
        ) from None
    return value
