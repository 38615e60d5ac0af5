"""One reversible mapping between namespaced tool ids and provider-safe function names.

Providers accept only ``^[a-zA-Z0-9_-]{1,64}$`` (OpenAI, Anthropic) and Gemini also wants the
first character to be a letter or an underscore. Ids such as ``demo:add`` or
``@scope/weather:weather`` do not fit, so every surface uses this one mapping:

* ``namespace`` and ``name`` are joined by ``__`` (two underscores);
* inside each part, letters and digits stay; a single ``_`` stays when it is neither first, last,
  nor next to another ``_`` (so a part never contains or touches ``__``); every other character
  becomes ``-`` followed by two hex digits per UTF-8 byte (``@`` → ``-40``, ``/`` → ``-2f``);
* a name that would not start with a letter gets a leading ``_`` (parts never start with ``_``,
  so this marker is unambiguous).

``demo:add`` → ``demo__add``; ``@scope/weather:weather`` → ``_-40scope-2fweather__weather``.
Names over 64 characters keep their first 54 characters plus ``-h`` and 8 hex digits of a hash.
``-h`` is never an escape, so a shortened name can never be mistaken for an encoded one; it is
resolved through the registry's table rather than decoded.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_PROVIDER_NAME", "PROVIDER_NAME_PATTERN", "from_provider_name", "to_provider_name"]

MAX_PROVIDER_NAME = 64
PROVIDER_NAME_PATTERN = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")
_SEPARATOR = "__"
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _escape(ch: str) -> str:
    return "".join(f"-{b:02x}" for b in ch.encode("utf-8"))


def _encode_part(part: str) -> str:
    out: list[str] = []
    last = len(part) - 1
    for i, ch in enumerate(part):
        lone_inner_underscore = (
            ch == "_" and 0 < i < last and part[i - 1] != "_" and part[i + 1] != "_"
        )
        if ch in _ALNUM or lone_inner_underscore:
            out.append(ch)
        else:
            out.append(_escape(ch))
    return "".join(out)


def _decode_part(text: str) -> str:
    data = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "-":
            hex_digits = text[i + 1 : i + 3]
            if len(hex_digits) != 2 or not all(c in "0123456789abcdef" for c in hex_digits):
                raise ValueError(f"bad escape at position {i}")
            data.append(int(hex_digits, 16))
            i += 3
        else:
            data.extend(ch.encode("ascii"))
            i += 1
    return data.decode("utf-8")


def to_provider_name(tool_id: str) -> str:
    """The provider-safe function name for a namespaced id (deterministic, usually reversible)."""
    namespace, _, name = tool_id.rpartition(":")
    encoded = _encode_part(namespace) + _SEPARATOR + _encode_part(name)
    if not encoded[0].isalpha():
        encoded = "_" + encoded
    if len(encoded) > MAX_PROVIDER_NAME:
        suffix = hashlib.sha256(tool_id.encode("utf-8")).hexdigest()[:8]
        encoded = encoded[: MAX_PROVIDER_NAME - 10] + "-h" + suffix
    return encoded


def from_provider_name(name: str) -> str | None:
    """Decode a provider-safe name back to its id, or ``None`` when it is not one of ours.

    Shortened (hashed) names cannot be decoded; the registry resolves them by lookup.
    """
    text = name[1:] if name.startswith("_") else name
    namespace, sep, rest = text.partition(_SEPARATOR)
    if not sep or not namespace or not rest:
        return None
    try:
        decoded = _decode_part(namespace) + ":" + _decode_part(rest)
    except (ValueError, UnicodeDecodeError):
        return None
    return decoded if to_provider_name(decoded) == name else None
