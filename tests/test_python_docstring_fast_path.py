"""``@tool`` reads Google-style docstrings without running the other three styles' parsers, and
gets exactly what the automatic parse gives (descriptions and every parameter's text)."""

from __future__ import annotations

from typing import Any

import docstring_parser
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgate import tool
from toolgate.python.schema import parse_docstring


def _shape(doc: docstring_parser.Docstring) -> Any:
    return (
        doc.short_description,
        doc.long_description,
        [(p.arg_name, p.type_name, p.description, p.is_optional, p.default) for p in doc.params],
        [(type(m).__name__, m.args, m.description) for m in doc.meta],
    )


_LINES = st.sampled_from(
    [
        "Find records.",
        "",
        "Args:",
        "Arguments:",
        "Parameters",
        "----------",
        "Returns:",
        "Raises:",
        "Example:",
        "    query: Words to look for.",
        "    limit (int): How many, at most.",
        "    exact: Match the whole",
        "        query only.",
        "query : str",
        "    The words.",
        ":param query: the words",
        ":returns: the records",
        "@param query: the words",
        ".. deprecated:: 1.0",
        "- a bullet",
        "Some longer text: with a colon.",
        "    ValueError: when bad.",
        "  indented text",
    ]
)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(_LINES, max_size=12))
def test_the_fast_parse_is_the_automatic_parse(lines: list[str]) -> None:
    text = "\n".join(lines)
    assert _shape(parse_docstring(text)) == _shape(docstring_parser.parse(text))


def test_a_google_docstring_describes_the_tool_and_its_parameters() -> None:
    @tool(namespace="t")
    def find(query: str, limit: int = 10) -> list[str]:
        """Find records matching a query.

        Longer text about records.

        Args:
            query: Words to look for.
            limit: How many records to return
                at most.
        """
        return [query][:limit]

    assert find.tool.description == "Find records matching a query.\n\nLonger text about records."
    properties = find.tool.input_schema["properties"]
    assert properties["query"]["description"] == "Words to look for."
    assert properties["limit"]["description"] == "How many records to return\nat most."


def test_a_rest_docstring_still_describes_the_parameters() -> None:
    @tool(namespace="t")
    def find(query: str) -> list[str]:
        """Find records.

        :param query: Words to look for.
        """
        return [query]

    assert find.tool.input_schema["properties"]["query"]["description"] == "Words to look for."
