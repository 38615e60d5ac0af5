"""Tool search: rank registered tools for a natural-language request.

Lexical ranking (BM25, the ``bm25s`` library) always; semantic ranking with a small local
embedding model when the ``toolgate[search]`` extra is installed; both fused by reciprocal rank.
The index follows the registry: every search sees the tools registered at that moment.
"""

from .hits import SearchHit
from .index import ToolIndex
from .query import MAX_LIMIT, MAX_QUERY_CHARS, check_limit, clean_query

__all__ = ["MAX_LIMIT", "MAX_QUERY_CHARS", "SearchHit", "ToolIndex", "check_limit", "clean_query"]
