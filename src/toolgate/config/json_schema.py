"""The JSON Schema of ``toolgate.yaml``, for editors and for the configuration reference.

Generated from the pydantic models in :mod:`toolgate.config.schema`, so it can never drift from
what the gateway accepts. ``toolgate config schema`` prints it.
"""

from __future__ import annotations

import re
from typing import Any

from .schema import GatewayConfig

__all__ = ["SCHEMA_ID", "config_json_schema"]

#: The identifier the schema carries (``$id``).
SCHEMA_ID = "urn:toolgate:config:toolgate.yaml"


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a ``toolgate.yaml`` file, as the gateway reads it."""
    schema = GatewayConfig.model_json_schema(mode="validation")
    schema["title"] = "toolgate.yaml"
    document: dict[str, Any] = _markdown_descriptions(
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID, **schema}
    )
    return document


# ":class:`~toolgate.x.Y`" and "``code``" in the docstrings: editors render descriptions as
# Markdown, so they get "`Y`" and "`code`".
_ROLE = re.compile(r":\w+:`~?(?:[\w.]*\.)?([^`]+)`")


def _markdown_descriptions(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _ROLE.sub(r"`\1`", item).replace("``", "`").replace("\n", " ")
            if key == "description" and isinstance(item, str)
            else _markdown_descriptions(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_markdown_descriptions(item) for item in value]
    return value
