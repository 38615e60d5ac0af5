"""The JSON Schema of ``toolgate.yaml``, for editors and for the configuration reference.

Generated from the pydantic models in :mod:`toolgate.config.schema`, so it can never drift from
what the gateway accepts. ``toolgate config schema`` prints it.
"""

from __future__ import annotations

from typing import Any

from .._rst import markdown_descriptions
from .schema import GatewayConfig

__all__ = ["SCHEMA_ID", "config_json_schema"]

#: The identifier the schema carries (``$id``).
SCHEMA_ID = "urn:toolgate:config:toolgate.yaml"


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``toolgate.yaml`` file, as the gateway reads it."""
    schema = GatewayConfig.model_json_schema(mode="validation")
    schema["title"] = "toolgate.yaml"
    # Editors render descriptions as Markdown; the docstrings they come from are reST.
    document: dict[str, Any] = markdown_descriptions(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
    )
    return document
