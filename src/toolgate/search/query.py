"""Checking what a caller asks the search for: the query text and the number of results.

Bad input is refused with a :class:`~toolgate.errors.SearchQueryError` that names the field, so
no query can make the gateway scan without bound (issue 14, "Bad input").
"""

from __future__ import annotations

import unicodedata

from ..errors import SearchQueryError

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "MAX_QUERY_CHARS", "check_limit", "clean_query"]

#: A request for a tool is a sentence or two; longer text is not a query but a document.
MAX_QUERY_CHARS = 2000
#: More results than this is a catalog listing, not a search.
MAX_LIMIT = 100
DEFAULT_LIMIT = 10


def clean_query(query: object, *, field: str = "query") -> str:
    """The query with control characters replaced by spaces and white space collapsed.

    Raises :class:`SearchQueryError` when it is not a string, is longer than
    :data:`MAX_QUERY_CHARS`, or has nothing left to search for.
    """
    if not isinstance(query, str):
        raise SearchQueryError(field, f"must be a string, not {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchQueryError(
            field,
            f"is {len(query):,} characters long; a search query may have at most "
            f"{MAX_QUERY_CHARS:,} (describe the task in a sentence or two)",
        )
    visible = "".join(" " if unicodedata.category(char).startswith("C") else char for char in query)
    cleaned = " ".join(visible.split())
    if not cleaned:
        raise SearchQueryError(field, "is empty; say what the tool should do")
    return cleaned


def check_limit(limit: object, *, field: str = "limit") -> int:
    """``limit`` if it is an integer from 1 to :data:`MAX_LIMIT`; else :class:`SearchQueryError`."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise SearchQueryError(field, f"must be an integer, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_LIMIT:
        raise SearchQueryError(field, f"must be between 1 and {MAX_LIMIT}, not {limit}")
    return limit
