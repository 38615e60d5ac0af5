"""The reStructuredText bits of toolgate's docstrings, as Markdown.

Docstrings are written for readers of the source and for ``help()``: they use Sphinx roles
(``:class:`~toolgate.Gateway```), double-backtick literals and ``.. code-block::`` directives.
What is rendered as Markdown — OpenAPI descriptions, the configuration's JSON Schema shown by
editors, the API reference of the docs — gets them as Markdown code spans and fenced blocks.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

__all__ = ["markdown_descriptions", "rst_to_markdown"]

# ":class:`~toolgate.x.Gateway`" -> "`Gateway`"; ":func:`toolgate.tool`" -> "`toolgate.tool`".
_ROLE = re.compile(r":(?:py:)?\w+:`(~?)([^`]+)`")
_LITERAL = re.compile(r"(?<!`)``(?!`)")
_CODE_BLOCK = re.compile(r"^( *)\.\. code-block:: *(\w*)\n\n((?:\1 {4}.*\n|\n)+)", re.MULTILINE)


def _role(match: re.Match[str]) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def _code_block(match: re.Match[str]) -> str:
    indent, language, body = match.groups()
    code = textwrap.dedent(body).rstrip("\n")
    return f"{indent}```{language}\n{textwrap.indent(code, indent)}\n{indent}```\n\n"


def rst_to_markdown(text: str) -> str:
    """``text`` with roles, double-backtick literals and code-block directives as Markdown."""
    if "`" not in text and ".. code-block::" not in text:
        return text
    text = _CODE_BLOCK.sub(_code_block, text if text.endswith("\n") else text + "\n")
    return _LITERAL.sub("`", _ROLE.sub(_role, text)).rstrip("\n")


def markdown_descriptions(document: Any) -> Any:
    """A copy of a JSON Schema or OpenAPI ``document`` whose ``description`` texts are Markdown
    (both formats say descriptions are CommonMark)."""
    if isinstance(document, dict):
        return {
            key: textwrap.dedent(rst_to_markdown(value)).strip()
            if key == "description" and isinstance(value, str)
            else markdown_descriptions(value)
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [markdown_descriptions(item) for item in document]
    return document
