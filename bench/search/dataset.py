"""The search evaluation set: tool catalogs of public MCP servers and hand-written requests.

``catalog_*.txt`` hold the tools (``name | description | parameters`` under ``## server``),
``requests.txt`` the requests (``server:tool[, server:tool] | request``). Both are plain text so
that a reader can audit every definition and label. A tool line may end in a fourth field, its
prompt examples (``| example ; example``). ``holdout/`` holds the second set, written apart
(tools modelled on public web APIs) and never tuned on: :data:`HOLDOUT`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolgate import DisplaySpec, SideEffect, Tool

__all__ = ["HERE", "HOLDOUT", "Request", "load_requests", "load_tools", "replicate"]

HERE = Path(__file__).parent
#: The held-out set (a test set: nothing is tuned on it).
HOLDOUT = HERE / "holdout"


@dataclass(frozen=True)
class Request:
    """One labelled request."""

    text: str
    labels: frozenset[str]
    """The tool ids that answer it (any of them is right)."""


def _tool(server: str, line: str, where: str) -> Tool:
    parts = [part.strip() for part in line.split(" | ")]
    if len(parts) not in (3, 4) or not parts[0] or not parts[1]:
        raise ValueError(f"{where}: expected 'name | description | parameters', got {line!r}")
    name, description, params = parts[:3]
    examples = tuple(e.strip() for e in parts[3].split(" ; ") if e.strip()) if parts[3:] else ()
    properties = {p.strip(): {"type": "string"} for p in params.split(",") if p.strip()}
    return Tool(
        id=f"{server}:{name}",
        description=description,
        input_schema={"type": "object", "properties": properties},
        side_effect=SideEffect.READ_ONLY,
        display=DisplaySpec(examples=examples),
    )


def load_tools(folder: Path = HERE) -> list[Tool]:
    """Every tool of every ``catalog_*.txt``, in file order."""
    tools: list[Tool] = []
    for path in sorted(folder.glob("catalog_*.txt")):
        server = None
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            line = raw.strip()
            if line.startswith("## "):
                server = line[3:].strip()
            elif line and not line.startswith("#"):
                if server is None:
                    raise ValueError(f"{path.name}:{number}: a tool before any '## server'")
                # A tool with no parameters ends in "| " and strip() eats the blank.
                padded = line if line.count(" | ") == 2 else line + " "
                tools.append(_tool(server, padded, f"{path.name}:{number}"))
    ids = [tool.id for tool in tools]
    duplicates = {tool_id for tool_id in ids if ids.count(tool_id) > 1}
    if duplicates:
        raise ValueError(f"tools declared twice: {sorted(duplicates)}")
    return tools


def load_requests(known: set[str], path: Path = HERE / "requests.txt") -> list[Request]:
    """The labelled requests; every label must name a known tool. ``path`` may be a set's folder."""
    if path.is_dir():
        path = path / "requests.txt"
    requests: list[Request] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        labels_text, sep, text = line.partition(" | ")
        labels = frozenset(label.strip() for label in labels_text.split(","))
        unknown = labels - known
        if not sep or not text.strip() or unknown:
            raise ValueError(f"requests.txt:{number}: bad line or unknown labels {unknown}")
        requests.append(Request(text.strip(), labels))
    return requests


def replicate(tools: list[Tool], count: int) -> list[Tool]:
    """``count`` tools: the catalog, then copies of it in namespaces ``<server>-copy<N>``."""
    out = list(tools)
    copy = 1
    while len(out) < count:
        for tool in tools:
            if len(out) == count:
                break
            namespace, name = tool.namespace, tool.name
            out.append(
                Tool(
                    id=f"{namespace}-copy{copy}:{name}",
                    description=tool.description,
                    input_schema=tool.input_schema_dict(),
                    side_effect=tool.side_effect,
                    display=tool.display,
                )
            )
        copy += 1
    return out
