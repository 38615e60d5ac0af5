"""``toolgate tools list`` and ``tools show``: the catalog as Rich tables and as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..backends.mcp_launch import grant_key
from ..backends.prestart import PrestartSettings
from ..health import Phase, ToolStatus
from ..model import ImplementationKind, SandboxMode, ScriptEntry, SourceFormat, TileDisplay, Tool
from ..model.display import safe_text
from ..model.hidden_text import escape_hidden, tool_findings
from ..model.names import to_mcp_name, to_provider_name
from ..pipeline.approval_policy import ApprovalPolicy
from ..registry import RegisteredTool
from ..sandbox.addresses import tool_grant
from ..sandbox.runner import Sandbox
from .prompt import clean

__all__ = [
    "describe_tool",
    "enforcement",
    "format_ms",
    "needs_approval",
    "print_tool",
    "print_tool_table",
    "summarize_tool",
    "tile_template",
]

_PHASE_STYLES = {
    Phase.READY: "green",
    Phase.DEGRADED: "yellow",
    Phase.UNAVAILABLE: "red",
    Phase.FAILED: "bold red",
}


def format_ms(seconds: float | None) -> str:
    """A latency in milliseconds (``-`` when unknown)."""
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def needs_approval(tool: Tool, policy: ApprovalPolicy | None = None) -> bool:
    """Whether calls of ``tool`` need approval: its own answer, adjusted by the operator's rules
    (``approval.rules`` in toolgate.yaml) when ``policy`` is given."""
    return tool.requires_approval if policy is None else policy.requires_approval(tool)


def _availability(entry: RegisteredTool) -> str:
    return "available" if entry.available else f"unavailable: {entry.unavailable_reason}"


def summarize_tool(entry: RegisteredTool, policy: ApprovalPolicy | None = None) -> dict[str, Any]:
    """One catalog row as JSON (what ``tools list --json`` prints)."""
    tool = entry.tool
    return {
        "id": tool.id,
        "title": tool.display_title,
        "description": tool.description,
        "provider_name": to_provider_name(tool.id),
        "mcp_name": to_mcp_name(tool.id),
        "side_effect": str(tool.side_effect),
        "requires_approval": needs_approval(tool, policy),
        "kind": str(tool.kind),
        "source_format": str(tool.source.format),
        "source": tool.source.location,
        "available": entry.available,
        "unavailable_reason": entry.unavailable_reason,
        "hidden_text": tool_findings(tool),
    }


def tile_template(ui: TileDisplay) -> str:
    """A tile as a template, each argument as ``<name>``: ``Show Map Of <address> At Zoom Level
    <zoom>``."""
    parts = [ui.prefix or ""]
    for arg in ui.args:
        parts.extend((arg.prefix or "", f"<{arg.name}>", arg.suffix or ""))
    parts.append(ui.suffix or "")
    return safe_text(" ".join(part for part in parts if part.strip()))


def _ui_dict(ui: TileDisplay | None) -> dict[str, Any] | None:
    if ui is None:
        return None
    return {
        "prefix": ui.prefix,
        "args": [{"name": a.name, "prefix": a.prefix, "suffix": a.suffix} for a in ui.args],
        "suffix": ui.suffix,
    }


def enforcement(sandbox: Sandbox, tool: Tool, binding: object = None) -> dict[str, str]:
    """What the process sandbox enforces for ``tool``, one line per aspect (``tools show``).

    Only processes can be sandboxed: scripts, ``os`` commands and compartment plugin tools (in
    the sandboxed worker). Other tools run in the gateway, which says so rather than claim a
    clean environment it does not give them. ``binding`` (the registry entry's) tells which
    MCP server an MCP tool is called on.
    """
    kind = tool.kind
    if kind in (ImplementationKind.SCRIPT, ImplementationKind.OS) or (
        kind is ImplementationKind.PYTHON
        and tool.source.format is SourceFormat.PLUGIN
        and sandbox.mode_for(tool) is SandboxMode.COMPARTMENT
    ):
        return sandbox.enforced(tool)
    if kind is ImplementationKind.REST:
        grants = tool_grant(sandbox.cidr_grants, tool.id)
        return {
            "sandbox": "none: the gateway sends the request",
            "network": "public addresses only, checked at connect time and on every redirect"
            + (f"; granted: {', '.join(grants)}" if grants else ""),
        }
    if kind is ImplementationKind.MCP:
        return _mcp_enforcement(sandbox, binding)
    return {"sandbox": "none: runs in the gateway's process"}


def _mcp_enforcement(sandbox: Sandbox, binding: object) -> dict[str, str]:
    from ..backends.mcp_client import McpBinding

    lines = {"sandbox": "none: the MCP server runs the tool"}
    if isinstance(binding, McpBinding) and binding.url is not None:
        grants = tuple(sandbox.cidr_grants.get(grant_key(binding.server), ()))
        lines["network"] = (
            f"the gateway connects to MCP server {binding.server} at public addresses only, "
            "checked at connect time and on every redirect"
            + (f"; granted ({grant_key(binding.server)}): {', '.join(grants)}" if grants else "")
        )
    return lines


def process_mode(
    tool: Tool, prestart: PrestartSettings, *, on_host: bool, warm_sandboxes: bool = False
) -> dict[str, str] | None:
    """How calls of a script tool get their process under ``toolgate serve`` and ``toolgate
    mcp`` (``None``: not a script tool): ``mode`` (``fresh``, ``prestart`` or ``worker``) and a
    ``note`` for people."""
    entry = tool.entry
    if not isinstance(entry, ScriptEntry):
        return None
    if entry.protocol == "worker":
        if on_host:
            note = "a long-lived worker answers one JSON line per call (protocol: worker)"
            return {"mode": "worker", "note": note}
        note = "one process per call: the sandbox of a compartment tool serves a single call"
        return {"mode": "fresh", "note": note}
    if (on_host or warm_sandboxes) and prestart.wants(tool.id, declared=entry.prestart):
        where = "processes" if on_host else "sandboxes (each with its script started)"
        note = (
            f"pre-started: up to {prestart.per_tool} {where} kept ready, each used for one "
            "call; work the script does before reading its input happens before the call"
        )
        return {"mode": "prestart", "note": note}
    return {"mode": "fresh", "note": "a fresh process per call"}


def describe_tool(
    entry: RegisteredTool,
    policy: ApprovalPolicy | None = None,
    status: ToolStatus | None = None,
    enforced: Mapping[str, str] | None = None,
    processes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Everything ``tools show`` tells about one tool, as JSON (with its health ``status``, in
    the status field names of Kubernetes-style resources, when given), including its prompt
    ``examples`` and tile ``ui``, and (``enforced``, from the gateway's process sandbox) what the
    sandbox enforces for it."""
    tool = entry.tool
    hints = tool.resolved_hints
    extra: dict[str, Any] = {} if status is None else {"status": status.to_dict()}
    if enforced is not None:
        extra["sandbox"] = {"mode": str(tool.sandbox.mode), "enforced": dict(enforced)}
    if processes is not None:
        extra["processes"] = dict(processes)
    return {
        **summarize_tool(entry, policy),
        **extra,
        "timeout": tool.timeout,
        "input_schema": tool.input_schema_dict(),
        "output_schema": tool.output_schema_dict(),
        "hints": {
            "readOnlyHint": hints.read_only,
            "destructiveHint": hints.destructive,
            "idempotentHint": hints.idempotent,
            "openWorldHint": hints.open_world,
        },
        "examples": list(tool.display.examples),
        "ui": _ui_dict(tool.display.ui),
    }


def _phase_cell(status: ToolStatus | None) -> tuple[str, str]:
    if status is None:
        return "-", "dim"
    return str(status.phase), _PHASE_STYLES.get(status.phase, "")


def _phase_text(status: ToolStatus | None) -> Text:
    text, style = _phase_cell(status)
    return Text(text, style=style)


#: Past this many tools the table is printed as plain aligned columns: Rich measures every cell
#: of a table, which took about 6 s for 10,000 tools; plain lines take a fraction of a second.
PLAIN_TABLE_ROWS = 500


def _cells(
    entry: RegisteredTool,
    policy: ApprovalPolicy | None,
    statuses: Mapping[str, ToolStatus] | None,
) -> list[tuple[str, str]]:
    """One row of the catalog table: each cell's text and its style (plain strings: a Rich
    ``Text`` per cell cost about 0.4 s for 10,000 rows, which the plain table does not need)."""
    tool = entry.tool
    approval = needs_approval(tool, policy)
    cells = [
        (tool.id, "bold"),
        (escape_hidden(tool.display_title), ""),
        (str(tool.side_effect), ""),
        (_yes_no(approval), "yellow" if approval else ""),
        (str(tool.kind), ""),
        (str(tool.source.format), ""),
        (
            "available" if entry.available else "unavailable (see below)",
            "" if entry.available else "red",
        ),
    ]
    if statuses is not None:
        cells.append(_phase_cell(statuses.get(tool.id)))
    return cells


def _print_plain_table(
    entries: Sequence[RegisteredTool],
    console: Console,
    headers: list[str],
    policy: ApprovalPolicy | None,
    statuses: Mapping[str, ToolStatus] | None,
) -> None:
    rows = [[text for text, _ in _cells(entry, policy, statuses)] for entry in entries]
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "   ".join(
            cell.ljust(width) for cell, width in zip(cells, widths, strict=True)
        ).rstrip()

    rule = "─" * len(line(["─" * width for width in widths]))
    text = "\n".join([line(headers), rule, *(line(row) for row in rows)])
    console.out(text, highlight=False)


def _print_rich_table(
    entries: Sequence[RegisteredTool],
    console: Console,
    headers: list[str],
    policy: ApprovalPolicy | None,
    statuses: Mapping[str, ToolStatus] | None,
) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in headers:
        table.add_column(header, overflow="fold")
    for entry in entries:
        table.add_row(*(Text(text, style=style) for text, style in _cells(entry, policy, statuses)))
    console.print(table)


def print_tool_table(
    entries: Sequence[RegisteredTool],
    console: Console,
    policy: ApprovalPolicy | None = None,
    statuses: Mapping[str, ToolStatus] | None = None,
) -> None:
    """Print the catalog as a table: id, title, level, approval, kind, source, availability and
    (when ``statuses`` are given) phase.

    Reasons for unavailability are often long (a missing runtime and how to install it), so the
    table says "unavailable (see below)" and each reason follows the table on its own line.
    """
    headers = ["ID", "Title", "Side effect", "Approval", "Kind", "Source", "Availability"]
    if statuses is not None:
        headers.append("Phase")
    show = _print_plain_table if len(entries) > PLAIN_TABLE_ROWS else _print_rich_table
    show(entries, console, headers, policy, statuses)
    noun = "tool" if len(entries) == 1 else "tools"
    console.print(Text(f"{len(entries)} {noun}", style="dim"))
    for entry in entries:
        if not entry.available:
            console.print(
                Text.assemble(
                    (f"{entry.tool.id} is unavailable: ", "red"), entry.unavailable_reason or ""
                ),
                soft_wrap=True,
            )


def _schema(schema: dict[str, Any] | None) -> RenderableType:
    if schema is None:
        return Text("(none declared)", style="dim")
    from rich.syntax import Syntax

    return Syntax(
        # Invisible and bidirectional characters inside texts shown as escapes (\u202e).
        escape_hidden(json.dumps(schema, indent=2, ensure_ascii=False)),
        "json",
        word_wrap=True,
        background_color="default",
    )


def _status_rows(status: ToolStatus) -> list[tuple[str, Text]]:
    rows = [
        ("Phase", _phase_text(status)),
        ("Calls (7 days)", Text(str(status.total_calls_7d))),
        ("Failure rate (7 days)", Text(f"{status.failure_rate_7d:.1%}")),
        ("Latency", Text(f"p50 {format_ms(status.p50)}, p95 {format_ms(status.p95)}")),
        ("Last error", Text(clean(status.last_error or "-"))),
    ]
    if status.reason:
        rows.append(("Reason", Text(clean(status.reason))))
    return rows


def print_tool(
    entry: RegisteredTool,
    console: Console,
    policy: ApprovalPolicy | None = None,
    status: ToolStatus | None = None,
    enforced: Mapping[str, str] | None = None,
    processes: Mapping[str, str] | None = None,
) -> None:
    """Print one tool's details (and its health ``status`` when given), what the process
    sandbox enforces for it (``enforced``, one line per aspect), its tile and prompt examples,
    schemas highlighted as JSON."""
    tool: Tool = entry.tool
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column(overflow="fold")
    rows = [
        ("Title", tool.display_title),
        ("Provider name", to_provider_name(tool.id)),
        ("MCP name", to_mcp_name(tool.id)),
        ("Side effect", str(tool.side_effect)),
        ("Approval", "required" if needs_approval(tool, policy) else "not required"),
        ("Timeout", f"{tool.timeout:g} s"),
        ("Kind", str(tool.kind)),
        ("Source", f"{tool.source.format}: {tool.source.location or '-'}"),
        ("Availability", _availability(entry)),
    ]
    if processes is not None:
        rows.append(("Processes", processes["note"]))
    hidden = tool_findings(tool)
    if hidden:
        rows.append(("Hidden text", "; ".join(hidden)))
    for label, value in rows:
        facts.add_row(
            label, Text(escape_hidden(value), style="yellow" if label == "Hidden text" else "")
        )
    for label, text in [] if status is None else _status_rows(status):
        facts.add_row(label, text)
    for aspect, value in (enforced or {}).items():
        label = "Sandbox" if aspect == "sandbox" else f"  {aspect}"
        facts.add_row(label, Text(value))
    if tool.display.ui is not None:
        facts.add_row("Tile", Text(tile_template(tool.display.ui)))
    console.print(Text(tool.id, style="bold underline"))
    console.print(facts)
    console.print()
    console.print(Text(escape_hidden(tool.description)))
    console.print()
    if tool.display.examples:
        console.print(Text("Examples", style="bold"))
        for example in tool.display.examples:
            console.print(Text(f"  • {clean(example)}"), soft_wrap=True)
        console.print()
    console.print(
        Group(
            Text("Input schema", style="bold"),
            _schema(tool.input_schema_dict()),
            Text("Output schema", style="bold"),
            _schema(tool.output_schema_dict()),
        )
    )
