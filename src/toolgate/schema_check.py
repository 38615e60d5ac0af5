"""Checking and compiling JSON Schemas declared by tools (with errors that name where).

Nothing here touches the network: a schema naming an unknown ``$schema`` dialect is refused before
the meta-schema check (which would try to download it), and ``$ref`` to anything but the schema
itself is refused when compiling. A declaration must never make the gateway fetch a URL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import jsonschema_rs

from ._json import thaw
from .errors import ToolDefinitionError

__all__ = ["KNOWN_DIALECTS", "check_schema", "compile_schema"]

#: The JSON Schema drafts the validator ships with (``$schema`` values, trailing ``#`` ignored).
KNOWN_DIALECTS = frozenset(
    {
        "http://json-schema.org/draft-04/schema",
        "http://json-schema.org/draft-06/schema",
        "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    }
)


def _refuse_remote(uri: str) -> NoReturn:
    raise ValueError(f"remote references are not allowed ({uri}); inline the schema in $defs")


def check_schema(schema: Mapping[str, Any], where: str) -> None:
    """Raise :class:`ToolDefinitionError` when ``schema`` is not a valid JSON Schema."""
    dialect = schema.get("$schema")
    if dialect is not None and (
        not isinstance(dialect, str) or dialect.rstrip("#") not in KNOWN_DIALECTS
    ):
        raise ToolDefinitionError(
            f"{where}: $schema {dialect!r} is not a JSON Schema draft this gateway knows "
            "(use draft-04, -06, -07, 2019-09 or 2020-12, or leave it out)"
        )
    try:
        jsonschema_rs.meta.validate(thaw(schema))
    except jsonschema_rs.ValidationError as exc:
        pointer = "/" + "/".join(str(p) for p in exc.instance_path)
        raise ToolDefinitionError(
            f"{where} is not a valid JSON Schema at {pointer}: {exc.message}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - referencing errors, unsupported drafts…
        raise ToolDefinitionError(f"{where} is not a usable JSON Schema: {exc}") from None


def compile_schema(
    schema: Mapping[str, Any], where: str, *, check_formats: bool = True, checked: bool = False
) -> jsonschema_rs.Validator:
    """Compile a schema once; raise :class:`ToolDefinitionError` naming ``where`` if it is bad.

    ``format`` is checked (``check_formats``) for every format the validator knows, whatever
    the draft (2019-09 and 2020-12 would otherwise treat it as a note); a format it does not
    know (a declaration's own, say ``"format": "sku"``) is ignored, so such a schema still
    loads. ``checked``: the caller has just checked ``schema`` against its meta-schema and
    dialect as :func:`check_schema` does (a tool folder's loader, with messages of its own),
    so it is not checked twice.
    """
    if not checked:
        check_schema(schema, where)
    try:
        return jsonschema_rs.validator_for(
            thaw(schema),
            retriever=_refuse_remote,
            validate_formats=check_formats,
            ignore_unknown_formats=True,
        )
    except Exception as exc:  # noqa: BLE001 - the library raises several unrelated types
        raise ToolDefinitionError(f"{where} cannot be compiled: {exc}") from None
