"""A griffe extension: every docstring of the API reference with its reStructuredText bits
(Sphinx roles, double-backtick literals, code-block directives) as Markdown, which is what
mkdocstrings renders."""

from __future__ import annotations

from typing import Any

import griffe

from toolgate._rst import rst_to_markdown


class RstToMarkdown(griffe.Extension):
    """Rewrite every docstring as it is loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = rst_to_markdown(obj.docstring.value)
