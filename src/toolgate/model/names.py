"""Reversible mappings between namespaced tool ids and the names each surface allows.

Ids such as ``demo:add``, ``everything:get-sum`` or ``@scope/weather:weather`` hold characters
some surfaces refuse, so each surface has a mapping that keeps everything it allows:

======================  ===============================  ======  =============================
surface                 allowed                          length  function
======================  ===============================  ======  =============================
MCP (``tools/list``)    letters, digits, ``_ - .``       1–128   :func:`to_mcp_name`
OpenAI, Anthropic,      letters, digits, ``_ -``; first  1–64    :func:`to_provider_name`
Gemini                  a letter or ``_`` (Gemini)
======================  ===============================  ======  =============================

Both follow one rule:

* ``namespace`` and ``name`` are joined by ``__`` (two underscores);
* inside each part, letters and digits stay; ``-`` stays; ``.`` stays where the surface allows
  it; a single ``_`` stays when it is neither first, last, nor next to another ``_`` (so a part
  never contains or touches ``__``); every other character becomes ``-`` followed by two
  lowercase hex digits per UTF-8 byte (``@`` → ``-40``, ``/`` → ``-2f``, ``.`` → ``-2e`` for
  providers);
* ``-`` followed by two lowercase hex digits is an escape, so the one literal ``-`` that is
  escaped (as ``-2d``) is one the part itself follows with two lowercase hex digits
  (``a-1f`` → ``a-2d1f``); ``get-sum`` stays ``get-sum``;
* a provider name that would not start with a letter gets a leading ``_`` (parts never start
  with ``_``, so this marker is unambiguous).

``everything:get-sum`` → ``everything__get-sum`` on both; ``demo:file.diff`` →
``demo__file.diff`` (MCP) and ``demo__file-2ediff`` (providers); ``@scope/weather:weather`` →
``-40scope-2fweather__weather`` (MCP) and ``_-40scope-2fweather__weather`` (providers).

:func:`from_name` decodes either surface's name (and the spelling before this mapping, where every
``-`` was escaped: ``everything__get-2dsum``) back to the id; the registry accepts those, so names
in older configurations keep resolving to the tool they meant.

A name over its surface's limit keeps its first characters, then ``-30`` and 8 hex digits of a
hash of the id. ``-30`` (an escaped ``0``) never occurs in a mapped name — a digit is never
escaped, and a literal ``-`` before ``30`` is itself escaped — so a shortened name can never be
another tool's full name; it is resolved through the registry's table rather than decoded.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "MAX_MCP_NAME",
    "MAX_PROVIDER_NAME",
    "MCP_NAME_PATTERN",
    "PROVIDER_NAME_PATTERN",
    "from_name",
    "from_provider_name",
    "legacy_provider_name",
    "legacy_shortened_name",
    "to_mcp_name",
    "to_provider_name",
]

MAX_PROVIDER_NAME = 64
PROVIDER_NAME_PATTERN = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$")
MAX_MCP_NAME = 128
MCP_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_.-]{1,128}$")
_SEPARATOR = "__"
_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_HEX = frozenset("0123456789abcdef")
#: What precedes the hash of a shortened name: an escape no mapping ever writes.
_SHORTENED = "-30"


def _escape(ch: str) -> str:
    return "".join(f"-{b:02x}" for b in ch.encode("utf-8"))


def _encode_part(part: str, literal: frozenset[str]) -> str:
    out: list[str] = []
    last = len(part) - 1
    for i, ch in enumerate(part):
        if ch in _ALNUM or ch in literal:
            out.append(ch)
        elif ch == "_":
            lone_inner = 0 < i < last and part[i - 1] != "_" and part[i + 1] != "_"
            out.append("_" if lone_inner else _escape(ch))
        elif ch == "-":
            # Letters and digits are always written as they are, so the two characters after
            # this one in the name are these two of the part: only then could it read as an
            # escape.
            looks_like_escape = i + 2 <= last and part[i + 1] in _HEX and part[i + 2] in _HEX
            out.append(_escape(ch) if looks_like_escape else ch)
        else:
            out.append(_escape(ch))
    return "".join(out)


def _encode(tool_id: str, literal: frozenset[str]) -> str:
    namespace, _, name = tool_id.rpartition(":")
    return _encode_part(namespace, literal) + _SEPARATOR + _encode_part(name, literal)


def _shorten(encoded: str, tool_id: str, limit: int) -> str:
    if len(encoded) <= limit:
        return encoded
    suffix = hashlib.sha256(tool_id.encode("utf-8")).hexdigest()[:8]
    return encoded[: limit - len(_SHORTENED) - len(suffix)] + _SHORTENED + suffix


_NOTHING: frozenset[str] = frozenset()
_DOT = frozenset(".")


def to_provider_name(tool_id: str) -> str:
    """The function name for OpenAI, Anthropic and Gemini (``^[a-zA-Z_][a-zA-Z0-9_-]{0,63}$``):
    deterministic, and reversible by :func:`from_name` unless shortened."""
    encoded = _encode(tool_id, _NOTHING)
    if not encoded[0].isalpha():
        encoded = "_" + encoded
    return _shorten(encoded, tool_id, MAX_PROVIDER_NAME)


def to_mcp_name(tool_id: str) -> str:
    """The MCP tool name (letters, digits, ``_ - .``, at most 128 characters): the provider
    name's rule with ``.`` kept and no leading marker; reversible by :func:`from_name` unless
    shortened."""
    return _shorten(_encode(tool_id, _DOT), tool_id, MAX_MCP_NAME)


def _decode_part(text: str) -> str:
    data = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        escape = text[i + 1 : i + 3]
        if ch == "-" and len(escape) == 2 and escape[0] in _HEX and escape[1] in _HEX:
            data.append(int(escape, 16))
            i += 3
        else:
            data.extend(ch.encode("utf-8"))
            i += 1
    return data.decode("utf-8")


def from_name(name: str) -> str | None:
    """The id a name of any surface spells, or ``None`` when it spells none.

    Accepts what :func:`to_mcp_name` and :func:`to_provider_name` write and the older spelling
    that escaped every ``-`` (``demo__file-2ddiff``), with or without the leading ``_``. The result
    is only what the name spells: whether such a tool exists is the registry's question.
    Shortened names do not decode; the registry resolves them by lookup.
    """
    text = name[1:] if name.startswith("_") else name
    namespace, sep, rest = text.partition(_SEPARATOR)
    if not sep or not namespace or not rest or _SHORTENED in text:
        return None
    try:
        decoded_namespace, decoded_name = _decode_part(namespace), _decode_part(rest)
    except UnicodeDecodeError:
        return None
    if ":" in decoded_name:
        return None  # an id is split at its last ':', so its name never holds one
    return decoded_namespace + ":" + decoded_name


def from_provider_name(name: str) -> str | None:
    """The id whose provider or MCP name is exactly ``name``, or ``None`` (strict: older
    spellings and shortened names return ``None``; see :func:`from_name`)."""
    tool_id = from_name(name)
    if tool_id is None:
        return None
    return tool_id if name in (to_provider_name(tool_id), to_mcp_name(tool_id)) else None


def legacy_provider_name(tool_id: str) -> str:
    """The name the mapping before this one gave (every character but letters, digits and lone
    inner ``_`` escaped; ``-h`` and a hash past 64 characters), so the registry can still
    resolve old shortened names, which do not decode."""
    namespace, _, name = tool_id.rpartition(":")
    parts = []
    for part in (namespace, name):
        out: list[str] = []
        last = len(part) - 1
        for i, ch in enumerate(part):
            lone_inner = ch == "_" and 0 < i < last and part[i - 1] != "_" and part[i + 1] != "_"
            out.append(ch if ch in _ALNUM or lone_inner else _escape(ch))
        parts.append("".join(out))
    encoded = parts[0] + _SEPARATOR + parts[1]
    if not encoded[0].isalpha():
        encoded = "_" + encoded
    if len(encoded) > MAX_PROVIDER_NAME:
        suffix = hashlib.sha256(tool_id.encode("utf-8")).hexdigest()[:8]
        encoded = encoded[: MAX_PROVIDER_NAME - 10] + "-h" + suffix
    return encoded


def legacy_shortened_name(tool_id: str) -> str | None:
    """The older mapping's name of ``tool_id`` when it was shortened (``-h`` and a hash: the
    one kind of older name that does not decode), else ``None``. Such a name is an ordinary
    name under the current mapping, so another tool may now be called by it: the registry and
    the pinning review refuse such a pair rather than let the old name reach the other tool."""
    legacy = legacy_provider_name(tool_id)
    return legacy if len(legacy) == MAX_PROVIDER_NAME and legacy[-10:-8] == "-h" else None
