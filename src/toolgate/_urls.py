"""URLs in messages and logs: without their passwords."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")
#: libpq also takes the password as a query parameter (``?password=…``).
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with the password of its user info, and a ``password=`` query parameter,
    replaced by ``***``."""
    return _PASSWORD_PARAMETER.sub(r"\1***", _PASSWORD.sub(r"\1:***@", url))
