"""How a declaration's values are named in messages: JSON type names, ``got …``, JSON pointers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["got", "kind_of", "pointer", "show"]


def kind_of(value: Any) -> str:
    """The JSON name of a value's type (``object``, ``array``…), for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def got(value: Any) -> str:
    """``got number 5`` / ``got array`` / ``got set {'A'}``: what a field holds instead, for
    messages. Containers are named, not shown; anything else is shown, including the Python
    values (a ``set``, a ``date``, ``b'…'``) only a tool object written in Python can hold."""
    if isinstance(value, (Mapping, list, tuple)):
        return f"got {kind_of(value)}"
    return f"got {kind_of(value)} {show(value)}"


def show(value: Any) -> str:
    """A value as written in a message: its ``repr``, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def pointer(*parts: str | int) -> str:
    """A JSON pointer (RFC 6901) from its reference tokens: ``pointer("spec", "a/b")`` is
    ``/spec/a~1b``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)
