"""How upstream resource URIs are shown to clients, and which server a URI read resolves to.

A resource URI is its identity: renaming it would break every link to it (a ``resource_link``
in a tool's result, a URI a prompt mentions). So the gateway keeps each upstream URI **as
written** and remembers which server listed it. Only when two servers a caller sees list the
same URI (a clash, decided per caller) is each shown wrapped, as
``toolgate://<namespace>/<percent-encoded upstream URI>``, which names its server
unambiguously; the wrapped form of any resource is accepted too.

Templates keep their ``uriTemplate`` as written, so a client expands them as the upstream
intends; a URI read that no listed resource matches is matched against the visible servers'
templates (RFC 6570 expressions, matched loosely: a simple ``{var}`` takes one path segment,
a reserved ``{+var}`` or fragment ``{#var}`` anything, a query ``{?a,b}`` an optional query,
a label, path or parameter ``{.x}``/``{/x}``/``{;x}`` an optional part starting with its
operator). The matcher never backtracks: each literal part is found once, left to right, and
adjacent expressions take what they can in turn, so a match costs time linear in the URI for
each literal, whatever the template (an upstream's) or the URI (a client's); both are bounded
too (:data:`MAX_EXPRESSIONS`, :data:`MAX_MATCHED_URI`).
A URI that matches more than one server is refused, naming the wrapped forms to use instead.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import quote, unquote

__all__ = [
    "MAX_EXPRESSIONS",
    "MAX_MATCHED_URI",
    "WRAPPED_SCHEME",
    "matches_template",
    "unwrap",
    "wrap",
]

#: The scheme of wrapped URIs.
WRAPPED_SCHEME = "toolgate://"

_EXPRESSION = re.compile(r"\{([+#./;?&]?)([^{}]*)\}")


def wrap(namespace: str, uri: str) -> str:
    """``toolgate://<namespace>/<uri percent-encoded>``: the URI naming its server."""
    return f"{WRAPPED_SCHEME}{quote(namespace, safe='')}/{quote(uri, safe='')}"


def unwrap(uri: str) -> tuple[str, str] | None:
    """``(namespace, upstream uri)`` of a wrapped URI; ``None`` for any other URI."""
    if not uri.startswith(WRAPPED_SCHEME):
        return None
    namespace, slash, rest = uri[len(WRAPPED_SCHEME) :].partition("/")
    if not slash or not namespace or not rest:
        return None
    return unquote(namespace), unquote(rest)


#: Expressions of one template matched at most: a template with more matches no URI (no real
#: server needs more; the bound keeps one match cheap whatever an upstream lists).
MAX_EXPRESSIONS = 32
#: Characters of a URI matched against templates at most (longer URIs match no template).
MAX_MATCHED_URI = 4_096
#: Characters a simple, label, path-segment or parameter expansion may not contain.
_DELIMITERS = frozenset("/?#")


@lru_cache(maxsize=1024)
def _template_parts(template: str) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """``template`` as ``(literal, operators of the expressions after it)`` pairs, adjacent
    expressions grouped (their operators in order); ``None`` past :data:`MAX_EXPRESSIONS`."""
    parts: list[tuple[str, list[str]]] = []
    end = 0
    for count, match in enumerate(_EXPRESSION.finditer(template), start=1):
        if count > MAX_EXPRESSIONS:
            return None
        literal = template[end : match.start()]
        if literal or not parts:
            parts.append((literal, []))
        parts[-1][1].append(match.group(1))  # adjacent expressions share one part
        end = match.end()
    parts.append((template[end:], []))
    return tuple((literal, tuple(ops)) for literal, ops in parts)


def _take(operator: str, text: str) -> int | None:
    """How many leading characters of ``text`` one expression with ``operator`` takes (as many
    as it can); ``None`` if it cannot match. Deterministic (no backtracking)."""
    if operator in ("+", "#"):
        if operator == "#" and text and text[0] != "#":
            return 0  # an optional fragment: absent
        return len(text)
    if operator in ("?", "&"):
        if not text or text[0] not in "?&":
            return 0
        stop = text.find("#")
        return len(text) if stop < 0 else stop
    if operator in (".", "/", ";"):
        if not text or text[0] != operator:
            return 0
        forbidden = "?#" if operator == "/" else "/?#"
        size = 1
        while size < len(text) and text[size] not in forbidden:
            size += 1
        return size
    size = 0
    while size < len(text) and text[size] not in _DELIMITERS:
        size += 1
    return size or None  # a simple expression takes at least one character


def _group_matches(operators: tuple[str, ...], text: str) -> bool:
    """Whether the expressions ``operators`` (adjacent in the template) together expand to
    exactly ``text``: each takes what it can, left to right, the last must end at its end."""
    for operator in operators:
        size = _take(operator, text)
        if size is None:
            return False
        text = text[size:]
    return text == ""


def matches_template(template: str, uri: str) -> bool:
    """Whether ``uri`` is one expansion of the URI ``template`` (loosely; see the module).

    Linear in the length of ``uri`` for each literal of the template, and bounded
    (:data:`MAX_EXPRESSIONS`, :data:`MAX_MATCHED_URI`): an upstream's template or a client's
    URI cannot make one match expensive. Literal parts are found left to right, each at its
    first place after the previous one (the template's last literal at the URI's end), and the
    text between two literals must be an expansion of the expressions between them."""
    if len(uri) > MAX_MATCHED_URI:
        return False
    parts = _template_parts(template)
    if parts is None:
        return False
    head, operators = parts[0]
    if not uri.startswith(head):
        return False
    at = len(head)
    for index in range(1, len(parts)):
        literal, following = parts[index]
        final = index == len(parts) - 1
        if final:
            if not uri.endswith(literal) or len(uri) - len(literal) < at:
                return False
            stop = len(uri) - len(literal)
        else:
            stop = uri.find(literal, at) if literal else at
            if stop < 0:
                return False
        if operators and not _group_matches(operators, uri[at:stop]):
            return False
        if not operators and stop != at:
            return False
        at = stop + len(literal)
        operators = following
    return at == len(uri)
