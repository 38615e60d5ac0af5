"""Prompt examples as a regression set: does each tool's own examples find it?

Every example of every tool is run through the search (as the operator: no access rules, every
tool registered), with that tool's own examples left out of the index while its examples are
checked: an example always finds the tool that contains it word for word, so only its
description, parameters and the other tools decide (leave-one-out). Per tool: how many of its
examples rank it first and in the top 3, and which tools took its examples instead (the
confusion list), so an author sees that two descriptions collide before an agent picks the
wrong tool.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..registry import Registry
from .index import SearchMode, ToolIndex

__all__ = ["ExampleMiss", "ExamplesReport", "ToolExamples", "check_examples"]


@dataclass(frozen=True, slots=True)
class ExampleMiss:
    """An example whose tool did not rank first."""

    example: str
    rank: int | None
    """The tool's rank for its own example (``None``: not in the top 10)."""
    first: str | None
    """The tool that ranked first instead (``None``: nothing matched)."""


@dataclass(frozen=True, slots=True)
class ToolExamples:
    """How one tool's examples fared."""

    tool_id: str
    examples: int
    top1: int
    """Examples that ranked this tool first."""
    top3: int
    """Examples that ranked it in the first three."""
    confused_with: dict[str, int] = field(default_factory=dict)
    """Tools that ranked first for this tool's examples, with how many examples each took."""
    misses: tuple[ExampleMiss, ...] = ()


@dataclass(frozen=True, slots=True)
class ExamplesReport:
    """The whole check."""

    tools: tuple[ToolExamples, ...]
    without_examples: tuple[str, ...]
    """Tools that declare no example (not counted)."""

    @property
    def examples(self) -> int:
        """Examples checked."""
        return sum(t.examples for t in self.tools)

    @property
    def top1_rate(self) -> float:
        """Share of examples that ranked their tool first (1.0 when there are none)."""
        total = self.examples
        return 1.0 if total == 0 else sum(t.top1 for t in self.tools) / total

    @property
    def top3_rate(self) -> float:
        """Share of examples that ranked their tool in the first three."""
        total = self.examples
        return 1.0 if total == 0 else sum(t.top3 for t in self.tools) / total

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data (what ``examples check --json`` prints)."""
        return {
            "examples": self.examples,
            "top1_rate": round(self.top1_rate, 4),
            "top3_rate": round(self.top3_rate, 4),
            "tools": [
                {
                    "id": t.tool_id,
                    "examples": t.examples,
                    "top1": t.top1,
                    "top3": t.top3,
                    "confused_with": t.confused_with,
                    "misses": [
                        {"example": m.example, "rank": m.rank, "first": m.first} for m in t.misses
                    ],
                }
                for t in self.tools
            ],
            "without_examples": list(self.without_examples),
        }


def check_examples(
    registry: Registry, index: ToolIndex, *, mode: SearchMode | None = None
) -> ExamplesReport:
    """Run every tool's examples through a copy of ``index`` (same model, same ranking; each
    tool's own examples left out while they are checked) and report per tool."""
    results: list[ToolExamples] = []
    without: list[str] = []
    private = Registry()
    for entry in registry:
        private.add(entry)
    held_out = index.like(private)  # ranks exactly as the gateway's search does
    for entry in registry:
        tool = entry.tool
        if not tool.display.examples:
            without.append(tool.id)
            continue
        top1 = top3 = 0
        confused: Counter[str] = Counter()
        misses: list[ExampleMiss] = []
        bare = dataclasses.replace(tool, display=dataclasses.replace(tool.display, examples=()))
        private.replace(dataclasses.replace(entry, tool=bare))
        for example in tool.display.examples:
            ranked = [hit.tool.id for hit in held_out.search(example, limit=10, mode=mode)]
            rank = ranked.index(tool.id) + 1 if tool.id in ranked else None
            top1 += rank == 1
            top3 += rank is not None and rank <= 3
            if rank != 1:
                first = ranked[0] if ranked else None
                if first is not None:
                    confused[first] += 1
                misses.append(ExampleMiss(example, rank, first))
        private.replace(entry)
        results.append(
            ToolExamples(
                tool_id=tool.id,
                examples=len(tool.display.examples),
                top1=top1,
                top3=top3,
                confused_with=dict(confused.most_common()),
                misses=tuple(misses),
            )
        )
    return ExamplesReport(tuple(results), tuple(without))
