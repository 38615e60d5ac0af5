"""Prompt ``examples``: requests that should select a tool.

The extension info format gives each tool ``examples``; toolgate lets every declaration
format declare them (its extension): ``examples:`` in a tool folder's ``tool.md`` front matter or
``tool.json``, in a capability's or a plugin's tool definition, and in a ``Tool`` resource's
``spec``. Search indexes them, and ``toolgate examples check`` uses them as a regression set.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_EXAMPLES", "MAX_EXAMPLE_CHARS", "parse_examples"]

#: An example is a request in a sentence or two (the search's own query limit is 2,000).
MAX_EXAMPLE_CHARS = 500
#: More examples than this is a data set, not a declaration.
MAX_EXAMPLES = 50


def parse_examples(value: Any) -> tuple[tuple[str, ...], str | None]:
    """The examples in ``value`` (``None``: none) and the problem with it, if any.

    ``value`` must be a list of non-empty strings of at most :data:`MAX_EXAMPLE_CHARS`
    characters, at most :data:`MAX_EXAMPLES` of them. On a problem, no example is kept.
    """
    if value is None:
        return (), None
    if not isinstance(value, (list, tuple)):
        return (), f"expected a list of prompts (strings), not {type(value).__name__}"
    if len(value) > MAX_EXAMPLES:
        return (), f"at most {MAX_EXAMPLES} examples, not {len(value)}"
    found: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            return (), f"item {index}: expected a non-empty string"
        if len(item) > MAX_EXAMPLE_CHARS:
            return (), f"item {index}: at most {MAX_EXAMPLE_CHARS} characters, not {len(item)}"
        found.append(" ".join(item.split()))
    return tuple(dict.fromkeys(found)), None
