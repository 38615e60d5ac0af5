"""URLs in messages and logs: without their passwords."""

from __future__ import annotations

import re

__all__ = ["password_pieces", "redact_url", "scrub_reason"]

# The user info runs to the LAST "@" before the query: a password holding "/" or "@" (base64
# ones do) must not end the match early and leave its tail in a message. Masking too much of a
# URL whose path holds an "@" is the safe mistake.
# libpq even takes a raw "?" or "#" in a password, so the match runs to the last "@" at all.
_PASSWORD = re.compile(r"(://[^:/@?#]*):(.*)@")
#: libpq also takes the password as a query parameter (``?password=…``).
_PASSWORD_PARAMETER = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with the password of its user info, and a ``password=`` query parameter,
    replaced by ``***``."""
    return _PASSWORD_PARAMETER.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url))


def password_pieces(url: str) -> list[str]:
    """What a message about ``url`` must not show: the password of its user info (read to the
    last "@"), and each piece of it a parser that stops at "@" or "/" may quote (a driver's
    "cannot resolve host 'ter2Pw@db'"), longest first."""
    pieces: set[str] = set()
    match = _PASSWORD.search(url)
    if match is not None and match.group(2):
        password = match.group(2)
        pieces |= {password, *re.split(r"[@/]", password)}
    for parameter in _PASSWORD_PARAMETER.finditer(url):
        pieces.add(url[parameter.end(1) : parameter.end()])
    return sorted((piece for piece in pieces if len(piece) >= 2), key=len, reverse=True)


def scrub_reason(reason: str, url: str) -> str:
    """A driver's error ``reason`` about ``url`` with the URL redacted and every piece of its
    password masked (drivers quote what they misparsed: "cannot resolve host 'ter2Pw@db'")."""
    reason = reason.replace(url, redact_url(url))
    for piece in password_pieces(url):
        reason = reason.replace(piece, "***")
    return reason
