"""Tool search: rank registered tools for a natural-language request.

Lexical ranking (BM25 over an inverted index that takes one tool at a time) always; semantic
ranking with a small local embedding model when the ``toolgate[search]`` extra is installed;
both fused by score (similarity plus a share of the normalized BM25). The index follows the
registry one tool at a time: every search sees the tools registered at that moment.
"""

from .hits import Explanation, SearchHit
from .index import ToolIndex
from .query import MAX_LIMIT, MAX_QUERY_CHARS, check_limit, clean_query

__all__ = [
    "MAX_LIMIT",
    "MAX_QUERY_CHARS",
    "Explanation",
    "SearchHit",
    "ToolIndex",
    "check_limit",
    "clean_query",
]
