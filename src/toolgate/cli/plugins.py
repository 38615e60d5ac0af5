"""``toolgate plugins``: every plugin of ``sources:`` with its tools, alerts and problems.

For each plugin: its id (name, version), where it was loaded from, the operator's host-mode
opt-in, each ``provides.tools`` entry with its declared sandbox and whether it was imported (and
why not), each tool with the mode it runs in and its availability, the alerts its
``resolve_tools`` raised, and the diagnostics of its manifest and entry modules. ``--json``
prints the same as a JSON array.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from ..formats._common.diagnostics import Diagnostic
from ..formats.plugin.report import PluginReport, PluginToolStatus
from ..formats.plugin.source import PluginSource
from ..gateway import Gateway
from ..registry import RegisteredTool
from . import plugin_install
from .errors import EXIT_CODES_HELP
from .folders import print_diagnostics
from .options import CliState, print_json
from .prompt import clean

__all__ = ["plugin_rows", "register"]


def _plugins(gateway: Gateway) -> list[tuple[PluginReport, list[Diagnostic]]]:
    """Each plugin's last report, with the problems the gateway added when registering its
    tools (an id another declaration already holds)."""
    found: list[tuple[PluginReport, list[Diagnostic]]] = []
    every = gateway.declarations.diagnostics()
    for source in gateway.declarations.sources:
        if not isinstance(source, PluginSource) or source.report is None:
            continue
        report = source.report
        ids = {tool.id for tool in report.tools}
        extra = [d for d in every if d.path == source.location and d.field in ids]
        found.append((report, [*report.diagnostics, *extra]))
    return found


def _entry_of(
    gateway: Gateway, report: PluginReport, tool: PluginToolStatus
) -> RegisteredTool | None:
    entry = gateway.registry.get(tool.id)
    if entry is None or entry.tool.source.location != report.manifest:
        return None  # not registered: another declaration holds the id
    return entry


def plugin_rows(gateway: Gateway) -> list[dict[str, Any]]:
    """Every plugin as JSON (what ``toolgate plugins --json`` prints)."""
    rows: list[dict[str, Any]] = []
    for report, diagnostics in _plugins(gateway):
        row = report.to_dict()
        for data, tool in zip(row["tools"], report.tools, strict=True):
            entry = _entry_of(gateway, report, tool)
            data["registered"] = entry is not None
            data["available"] = entry is not None and entry.available
        row["diagnostics"] = [
            {"severity": str(d.severity), "path": d.path, "field": d.field, "message": d.message}
            for d in diagnostics
        ]
        rows.append(row)
    return rows


def _host_mode(report: PluginReport) -> str:
    if report.host_mode is True:
        return "on for every tool (operator opt-in)"
    if report.host_mode is False:
        return "off"
    return "on for " + ", ".join(report.host_mode) + " (operator opt-in)"


def _print_report(
    gateway: Gateway, report: PluginReport, diagnostics: list[Diagnostic], out: Console
) -> None:
    title = Text(report.plugin_id or "(plugin without a readable id)", style="bold underline")
    extra = " ".join(part for part in (report.name, report.version) if part)
    if extra:
        title.append(f"  {clean(extra)}", style="")
    out.print(title, soft_wrap=True)
    out.print(Text(f"  Location: {report.location}"), soft_wrap=True)
    if report.manifest is not None and report.manifest != report.location:
        out.print(Text(f"  Manifest: {report.manifest}"), soft_wrap=True)
    out.print(Text(f"  Host mode: {_host_mode(report)}"), soft_wrap=True)
    for status in report.entries:
        state = "imported" if status.imported else "not loaded"
        style = "" if status.imported else "yellow"
        out.print(
            Text.assemble(f"  Entry {status.entry}: sandbox {status.sandbox}, ", (state, style)),
            soft_wrap=True,
        )
    loaded = [tool for tool in report.tools if _entry_of(gateway, report, tool) is not None]
    out.print(Text(f"  Tools loaded: {len(loaded)}"), soft_wrap=True)
    for tool in report.tools:
        entry = _entry_of(gateway, report, tool)
        if entry is None:
            availability = ("not registered (see problems)", "red")
        elif entry.available:
            availability = ("available", "green")
        else:
            availability = ("unavailable", "red")
        origin = ", from resolve_tools" if tool.resolved else ""
        out.print(
            Text.assemble(
                "    ",
                (tool.id, "bold"),
                f"  sandbox {tool.declared_sandbox}, runs: {tool.runs}{origin}  ",
                availability,
            ),
            soft_wrap=True,
        )
        if entry is not None and entry.unavailable_reason:
            out.print(Text(f"      {entry.unavailable_reason}", style="dim"), soft_wrap=True)
    if report.alerts:
        out.print(Text(f"  Alerts ({len(report.alerts)}):"))
        for alert in report.alerts:
            style = "bold yellow" if alert.level == "warning" else "bold cyan"
            out.print(
                Text.assemble("    ", (f"{alert.level}: ", style), clean(alert.message)),
                soft_wrap=True,
            )
    # A compartment entry that was not imported is both an alert and a diagnostic, with one text:
    # print it once.
    said = {alert.message for alert in report.alerts}
    diagnostics = [d for d in diagnostics if d.message not in said]
    if diagnostics:
        noun = "problem" if len(diagnostics) == 1 else "problems"
        out.print(Text(f"  {len(diagnostics)} {noun}:"))
        print_diagnostics(diagnostics, out)


def plugins(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plugins as JSON.")] = False,
) -> None:
    """List the plugins (sources: entries in the plugin format): id, location, the
    host-mode opt-in, each tools entry's sandbox and whether it was imported, the tools loaded
    and the mode they run in, the alerts of resolve_tools, and every problem found.

    JavaScript and TypeScript tools run in an SES compartment on toolgate's Node.js host. Python
    tools whose sandbox is 'compartment' run in a sandboxed worker (bubblewrap); where the host
    cannot sandbox they are not loaded unless the operator opts in to host mode (options:
    host_mode in toolgate.yaml). No such tool runs on the host without saying so.

    'toolgate plugins install SPEC' installs a plugin from the npm registry or a folder into
    $TOOLGATE_HOME/plugins (loaded by every gateway); 'toolgate plugins remove NAME' removes it.
    """
    if ctx.invoked_subcommand is not None:
        return  # toolgate plugins install / remove
    state = ctx.find_object(CliState) or CliState()
    with state.open_gateway(approver=None, audit="off") as gateway:
        reports = _plugins(gateway)
        rows = plugin_rows(gateway) if as_json else []
        if not as_json:
            for index, (report, diagnostics) in enumerate(reports):
                if index:
                    state.out.print()
                _print_report(gateway, report, diagnostics, state.out)
    if as_json:
        print_json(rows)
        return
    if not reports:
        state.out.print(
            "No plugins are configured. Add one to toolgate.yaml, for example:\n\n"
            "  sources:\n    - path: ./plugins/weather\n      format: plugin\n"
            "      options: {host_mode: true}",
            soft_wrap=True,
        )
        state.hint_when_unconfigured()


def register(app: typer.Typer) -> None:
    """Add ``toolgate plugins`` (and its ``install`` / ``remove``)."""
    plugins_app = typer.Typer(epilog=EXIT_CODES_HELP, rich_markup_mode="markdown")
    plugins_app.callback(invoke_without_command=True, epilog=EXIT_CODES_HELP)(plugins)
    plugin_install.register(plugins_app)
    app.add_typer(plugins_app, name="plugins")
