"""URLs in messages and logs: without their passwords."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_PASSWORD = re.compile(r"(://[^:/@]*):[^@/]*@")


def redact_url(url: str) -> str:
    """``url`` with the password of its user info replaced by ``***``."""
    return _PASSWORD.sub(r"\1:***@", url)
