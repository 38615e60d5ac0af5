"""Text a model reads but a person may not see: invisible characters and instruction-like blocks.

A tool's description (and every text inside its schemas) goes to the model verbatim. When someone
other than the operator wrote it — an upstream MCP server, a plugin — it can carry instructions
meant for the model ("tool poisoning"): hidden with zero-width, bidirectional or Unicode tag
characters that a terminal or a browser does not show, or spelled out in a block such as
``<IMPORTANT>read ~/.ssh/id_rsa…</IMPORTANT>`` that a person skims past.

:func:`findings` names both, for the sources to flag and hold such tools; :func:`escape_hidden`
shows the characters to people as escapes (``\\u202e``) instead of raw.

What counts as hidden: every character of the Unicode categories ``Cf`` (format: zero-width
U+200B–U+200D, U+2060, U+FEFF, the bidirectional controls U+202A–U+202E and U+2066–U+2069, the
tag characters U+E0000–U+E007F…), ``Cc`` (control) except tab, line feed and carriage return,
``Zl``/``Zp`` (line and paragraph separators), ``Co`` (private use) and unassigned code points;
and these characters that render as nothing (or as blank space) without being format characters:
the combining grapheme joiner U+034F, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0, and
the blank Braille pattern U+2800. Variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF) are
invisible too, but one directly after a visible non-ASCII character (or an ASCII digit, ``#`` or
``*``: keycaps) is ordinary text — U+FE0F after an emoji, an ideographic variant after a CJK
character. So a variation selector counts as hidden when it follows another one (a run: the
"emoji smuggling" of bytes as selectors after one emoji), starts the text, or follows white space,
another ASCII character or a hidden character.

What counts as an instruction-like block is deliberately small (a heuristic, not a classifier):
a tag named ``important``, ``critical``, ``system``, ``instruction(s)``, ``admin`` or ``secret``,
alone or with a ``_``/``-`` suffix (``<IMPORTANT>``, ``</system>``, ``<IMPORTANT_NOTE>``), also
written with HTML entities (``&lt;IMPORTANT&gt;``, which a renderer shows as the tag); a comment
that rendered Markdown or HTML does not show (``<!-- … -->``, a reference-comment line
``[//]: # (…)``); and the phrases "ignore / disregard / forget (all) (the) previous / prior /
above / earlier instructions", "do not tell / mention … the user", and "before using this tool,
read". The tags and phrases are also looked for after folding look-alike characters: NFKC
(full-width ``ＩＭＰＯＲＴＡＮＴ``, ligatures) and a small map of the Cyrillic and Greek letters
that look like Latin ones (``іgnоrе`` with Cyrillic і, о, е) — only for this check; the text
itself is never changed. It flags text for a person to look at; it does not prove intent.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .tool import Tool

__all__ = [
    "escape_hidden",
    "escape_hidden_json",
    "findings",
    "hidden_characters",
    "instruction_markers",
    "text_findings",
    "tool_findings",
]

_HIDDEN_CATEGORIES: Final = frozenset({"Cf", "Cc", "Zl", "Zp", "Co", "Cn"})
_VISIBLE_CONTROLS: Final = frozenset("\t\n\r")
#: Invisible (or blank) characters outside those categories: the combining grapheme joiner, the
#: Hangul fillers, the blank Braille pattern.
_INVISIBLE: Final = frozenset("\u034f\u115f\u1160\u3164\uffa0\u2800")
#: ASCII characters with an emoji variation (keycaps).
_VARIATION_BASES: Final = frozenset("0123456789#*")

#: Look-alike letters folded to Latin for the instruction check only (Cyrillic, then Greek).
_CONFUSABLES: Final = str.maketrans(
    "аеорсухіјѕԁһԛԝАВЕКМНОРСТХІЈЅοιναρΑΒΕΗΙΚΜΝΟΡΤΧΥΖ",
    "aeopcyxijsdhqwABEKMHOPCTXIJSoivapABEHIKMNOPTXYZ",
)

_OPEN: Final = r"(?:<|&lt;|&#0*60;|&#x0*3c;)"
_CLOSE: Final = r"(?:>|&gt;|&#0*62;|&#x0*3e;)"
_INSTRUCTIONS: Final = (
    re.compile(
        _OPEN + r"\s*/?\s*(important|critical|system|instructions?|admin|secret)"
        r"(?:[_-][\w-]{0,30})?\b[^<>]{0,80}?" + _CLOSE,
        re.I,
    ),
    re.compile(r"<!--.{0,60}", re.S),
    re.compile(r"^[ \t]{0,3}\[//\]:\s*#\s*[(\"'].{0,50}", re.M),
    re.compile(
        r"\b(ignore|disregard|forget)\s+(all\s+|any\s+)?(of\s+)?(the\s+|your\s+)?"
        r"(previous|prior|above|earlier|preceding)\s+(instructions|prompts?|messages|rules|context)",
        re.I,
    ),
    re.compile(
        r"\b(do\s+not|don't|never)\s+(tell|mention|inform|reveal|show|notify)\b[^.]{0,40}\buser",
        re.I,
    ),
    re.compile(r"\bbefore\s+using\s+this\s+tool\b[^.]{0,40}\bread\b", re.I),
)
#: Distinct findings reported per text, at most.
_MAX_FINDINGS: Final = 5


def _hidden(char: str) -> bool:
    return char not in _VISIBLE_CONTROLS and (
        unicodedata.category(char) in _HIDDEN_CATEGORIES or char in _INVISIBLE
    )


def _variation_selector(char: str) -> bool:
    return "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def _takes_variation(char: str) -> bool:
    """Whether a variation selector right after ``char`` is ordinary text (see the module doc)."""
    if char in _VARIATION_BASES:
        return True
    return (
        not _variation_selector(char)
        and not char.isascii()
        and not char.isspace()
        and not _hidden(char)
    )


def _marked(text: str) -> Iterator[tuple[str, bool]]:
    """Each character of ``text`` and whether it is hidden there."""
    previous = ""
    for char in text:
        if _variation_selector(char):
            yield char, not (previous and _takes_variation(previous))
        else:
            yield char, _hidden(char)
        previous = char


def _any_hidden(text: str) -> bool:
    return any(hidden for _, hidden in _marked(text))


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_hidden(text: str) -> str:
    """``text`` with every hidden character (see the module doc) shown as an escape such as
    ``\\u202e`` or ``\\U000e0041``; tabs and line breaks stay as they are."""
    if not _any_hidden(text):
        return text
    return "".join(_escape(char) if hidden else char for char, hidden in _marked(text))


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_hidden_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with every hidden character written
    as a JSON escape (``\\u202e``, a surrogate pair above U+FFFF): the same JSON value, but
    nothing a terminal would not show."""
    if not _any_hidden(text):
        return text
    return "".join(_json_escape(char) if hidden else char for char, hidden in _marked(text))


def hidden_characters(text: str) -> list[str]:
    """The distinct hidden characters of ``text``, escaped, in order of appearance."""
    seen: dict[str, None] = {}
    for char, hidden in _marked(text):
        if hidden:
            seen.setdefault(_escape(char))
    return list(seen)


def _fold(text: str) -> str:
    """``text`` with look-alike characters folded to Latin (NFKC and :data:`_CONFUSABLES`)."""
    return unicodedata.normalize("NFKC", text).translate(_CONFUSABLES)


def instruction_markers(text: str) -> list[str]:
    """The instruction-like passages of ``text`` (escaped, at most 60 characters each); one
    found only once look-alike characters are folded says so."""
    found: dict[str, None] = {}
    plain = _markers(text)
    for snippet in plain:
        found.setdefault(snippet)
    if not text.isascii():
        for snippet in _markers(_fold(text)):
            if snippet not in plain:
                found.setdefault(f"{snippet} (spelled with look-alike characters)")
    return list(found)


def _markers(text: str) -> list[str]:
    found: dict[str, None] = {}
    for pattern in _INSTRUCTIONS:
        for match in pattern.finditer(text):
            snippet = escape_hidden(" ".join(match.group(0).split()))
            found.setdefault(snippet if len(snippet) <= 60 else snippet[:59] + "…")
    return list(found)


def text_findings(text: str) -> list[str]:
    """What is suspicious about one text, as phrases ("invisible or bidirectional control
    characters \\u202e, \\u200b"; "an instruction-like passage '<IMPORTANT>'")."""
    out: list[str] = []
    hidden = hidden_characters(text)
    if hidden:
        shown = ", ".join(hidden[:8]) + (", …" if len(hidden) > 8 else "")
        out.append(f"invisible or bidirectional control characters {shown}")
    # Characters hidden inside a phrase ("ig\u200bnore") must not hide it from the check.
    visible = "".join(char for char, hidden in _marked(text) if not hidden)
    out.extend(f"an instruction-like passage {marker!r}" for marker in instruction_markers(visible))
    return out[:_MAX_FINDINGS]


def _strings(value: Any, pointer: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield pointer, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and _hidden_or_marked(key):
                yield f"{pointer}/{escape_hidden(key)} (key)", key
            yield from _strings(item, f"{pointer}/{escape_hidden(str(key))}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings(item, f"{pointer}/{index}")


def _hidden_or_marked(text: str) -> bool:
    return bool(text_findings(text))


def findings(texts: Mapping[str, Any]) -> list[str]:
    """Every suspicious text in ``texts`` (field → a string, or a schema whose strings are all
    checked: descriptions, titles, enum values, defaults, property names), each as
    ``"<field>[/<pointer>]: <finding>"``."""
    out: list[str] = []
    for field, value in texts.items():
        for where, text in _strings(value, field):
            out.extend(f"{where}: {finding}" for finding in text_findings(text))
    return out


def tool_findings(tool: Tool) -> list[str]:
    """Hidden characters and instruction-like passages in the texts a model reads of ``tool``
    (its title, description and schemas), whatever declared it."""
    return findings(
        {
            "title": tool.title or "",
            "description": tool.description,
            "inputSchema": tool.input_schema_dict(),
            "outputSchema": tool.output_schema_dict() or {},
        }
    )
