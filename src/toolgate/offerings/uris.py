"""How upstream resource URIs are shown to clients, and which server a URI read resolves to.

A resource URI is its identity: renaming it would break every link to it (a ``resource_link``
in a tool's result, a URI a prompt mentions). So the gateway keeps each upstream URI **as
written** and remembers which server listed it. Only when two servers list the same URI (a
clash) is each shown wrapped, as ``toolgate://<namespace>/<percent-encoded upstream URI>``,
which names its server unambiguously; the wrapped form of any resource is accepted too.

Templates keep their ``uriTemplate`` as written, so a client expands them as the upstream
intends; a URI read that no listed resource matches is matched against the visible servers'
templates (RFC 6570 expressions, matched loosely: a simple ``{var}`` takes one path segment,
a reserved ``{+var}`` or fragment ``{#var}`` anything, a query ``{?a,b}`` an optional query).
A URI that matches more than one server is refused, naming the wrapped forms to use instead.
"""

from __future__ import annotations

import re
from functools import lru_cache
from urllib.parse import quote, unquote

__all__ = ["WRAPPED_SCHEME", "matches_template", "unwrap", "wrap"]

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


@lru_cache(maxsize=1024)
def _template_pattern(template: str) -> re.Pattern[str] | None:
    parts: list[str] = []
    end = 0
    for match in _EXPRESSION.finditer(template):
        parts.append(re.escape(template[end : match.start()]))
        operator = match.group(1)
        if operator in ("+", "#"):
            parts.append("#.*" if operator == "#" else ".+")
        elif operator in ("?", "&"):
            parts.append(r"(?:[?&][^#]*)?")
        elif operator in (".", "/", ";"):
            parts.append(r"(?:" + re.escape(operator) + r"[^/?#]*)*")
        else:
            parts.append(r"[^/?#]+")
        end = match.end()
    parts.append(re.escape(template[end:]))
    try:
        return re.compile("".join(parts) + r"\Z")
    except re.error:  # pragma: no cover - escaped pieces always compile
        return None


def matches_template(template: str, uri: str) -> bool:
    """Whether ``uri`` is one expansion of the URI ``template`` (loosely; see the module)."""
    pattern = _template_pattern(template)
    return pattern is not None and pattern.match(uri) is not None
