"""What of a tool is searched, and how text becomes search terms.

A tool's searchable text is its id, title, description, parameter names and descriptions, and
its prompt examples (``examples``, as extension info defines them: "prompts that should select
this tool"). Fields that name the tool weigh more: BM25 counts a term repeated in a field as more
frequent, so weights are applied by repetition.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..model import Tool

__all__ = [
    "MAX_DOCUMENT_TERMS",
    "MAX_FIELD_CHARS",
    "document_terms",
    "document_text",
    "summary_text",
    "terms",
]

_WORD = re.compile(r"\w+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

#: Words that say nothing about which tool is meant, including the politeness of requests
#: ("can you please…", "I want to…").
_STOPWORD_TEXT = """a an and are as at be by can could do does for from have how i in into is it
its me my of on or our please should so some that the their them then there these this those to
us want we what when where which who will with would you your let lets need any just also via
using use"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())

#: Characters of one field (a description, a parameter's description, an example) made into
#: terms, and terms indexed per tool, weights included: a tool with a 2 MB description held the
#: index's lock ~0.3 s while its 285,000 terms were made and indexed. 8,192 terms is some 40
#: pages of text, far beyond any real tool's description.
MAX_FIELD_CHARS = 32_768
MAX_DOCUMENT_TERMS = 8_192

#: Field weights (how often a field's terms are repeated in the document).
NAME_WEIGHT = 3
TITLE_WEIGHT = 2
EXAMPLE_WEIGHT = 2


def _stem(word: str) -> str:
    # A light suffix stripper: "files", "listing", "created" and "creates" meet "file", "list",
    # "create". Enough for tool catalogs; no stemming library needed.
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif word.endswith("sses"):
        word = word[:-2]
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def terms(text: str) -> list[str]:
    """The search terms of ``text``: words split at case changes, ``_``, ``-`` and ``.``,
    lower-cased, stop words dropped, lightly stemmed. Works for any script (``\\w``)."""
    found: list[str] = []
    for word in _WORD.findall(_CAMEL.sub(" ", text)):
        for part in word.split("_"):
            lowered = part.lower()
            if lowered and lowered not in _STOPWORDS:
                found.append(_stem(lowered))
    return found


def _parameters(schema: Mapping[str, Any], depth: int = 0) -> Iterator[str]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping) or depth > 3:
        return
    for name, spec in properties.items():
        yield str(name)
        if isinstance(spec, Mapping):
            description = spec.get("description")
            if isinstance(description, str):
                yield description
            yield from _parameters(spec, depth + 1)
            items = spec.get("items")
            if isinstance(items, Mapping):
                yield from _parameters(items, depth + 1)


def document_text(tool: Tool) -> str:
    """The tool as one plain text (for embedding models): id, title, description, parameters,
    examples."""
    parts = [tool.id.replace(":", " ").replace("_", " "), tool.title or "", tool.description]
    parts.extend(_parameters(tool.input_schema))
    parts.extend(tool.display.examples)
    return "\n".join(part for part in parts if part)


def summary_text(tool: Tool) -> str:
    """The tool's name and description only (for embedding models): a second vector that the
    parameters' wording does not dilute (bench/search/rankers.py measures it)."""
    name = tool.id.replace(":", " ").replace("_", " ")
    return (
        f"{name}\n{tool.title}\n{tool.description}" if tool.title else f"{name}\n{tool.description}"
    )


def document_terms(tool: Tool) -> list[str]:
    """The tool's search terms, with the naming fields and examples repeated by their weight;
    at most :data:`MAX_DOCUMENT_TERMS`, each field read to :data:`MAX_FIELD_CHARS` (the naming
    fields first, so a huge description cannot push out the name)."""
    found: list[str] = []

    def add(text: str, weight: int = 1) -> bool:
        room = MAX_DOCUMENT_TERMS - len(found)
        if room > 0:
            found.extend((terms(text[:MAX_FIELD_CHARS]) * weight)[:room])
        return len(found) < MAX_DOCUMENT_TERMS

    add(tool.name, NAME_WEIGHT)
    add(tool.namespace)
    if tool.title:
        add(tool.title, TITLE_WEIGHT)
    if not add(tool.description):
        return found
    for part in _parameters(tool.input_schema):
        if not add(part):
            return found
    for example in tool.display.examples:
        if not add(example, EXAMPLE_WEIGHT):
            return found
    return found
