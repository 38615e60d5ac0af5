"""The tool ``toolgate serve`` answers in the HTTP throughput bench (``bench:add``)."""

from __future__ import annotations

from toolgate import tool


@tool(namespace="bench")
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b
