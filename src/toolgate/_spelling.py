"""Suggestions ("did you mean …?") for a misspelt name: one rule for every file toolgate reads.

A tool folder's ``tool.md`` field and a ``toolgate.yaml`` key are both suggested this way, so a
typo gets the same help wherever it is made. Pure: only :mod:`difflib`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest_name", "did_you_mean"]


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name ``name`` is most likely a misspelling of: the closest by :mod:`difflib`
    (similarity 0.6 or more), else the one that differs only in case; ``None`` when none is."""
    names = list(known)
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        return close[0]
    return {known_name.lower(): known_name for known_name in names}.get(name.lower())


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` to append to a message about ``name``, or ``""``."""
    match = closest_name(name, known)
    return "" if match is None else f"; did you mean '{match}'?"
