"""``toolgate sandbox check``: what this host can enforce for compartment-mode tools.

It starts a real sandbox (the namespaces and mounts a tool gets, with its limits) and reports:
bubblewrap found and its version, whether a sandbox starts (user, PID, network, mount
namespaces) and that its process has no capabilities (``CapEff 0``; a sandbox that keeps them
does not count as working), which resource limits apply and how the process count is enforced
(a per-call pids cgroup, RLIMIT_NPROC, or not at all), how each script runtime found on ``PATH``
runs in a sandbox (the interpreter behind a shim and the folders bound for it, or exactly why it
cannot be contained), and what happens to compartment tools
under the configuration (``sandbox:`` in toolgate.yaml): they run sandboxed, are unavailable, or
run on an unsandboxed host with a label. Exit code 0 when compartment tools run sandboxed (with
every limit, or without a process limit the operator accepted), 1 when they do not.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import os
from typing import Annotated, Any

import typer
from rich.text import Text

from ..config.files import load_config
from ..runtimes import RUNTIMES
from ..sandbox.bwrap import nested_userns_flags, user_namespaces_off
from ..sandbox.host import HostCapabilities, forget_probes, probe_host
from ..sandbox.landlock import ENFORCEMENT, PERMISSIONS, forget_landlock_probes
from ..sandbox.layers import LayerChoice, choose_layer
from ..sandbox.runner import Sandbox
from ..sandbox.settings import SandboxConfig
from .errors import EXIT_CODES_HELP
from .options import CliState, print_json

__all__ = ["register", "sandbox_report"]

#: Exit code when this host cannot sandbox ("the command failed").
EXIT_CANNOT_SANDBOX = 1

sandbox_app = typer.Typer(
    help="Check which sandbox layer (bubblewrap, or Landlock + seccomp) works on this host "
    "and what it enforces.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
)


def _config(state: CliState) -> SandboxConfig:
    """The ``sandbox:`` section of toolgate.yaml (defaults when there is none)."""
    state.loaded = load_config(state.config_path)
    section = getattr(state.loaded.config, "sandbox", None)
    return section if isinstance(section, SandboxConfig) else SandboxConfig()


def sandbox_report(config: SandboxConfig) -> dict[str, Any]:
    """What ``sandbox check --json`` prints."""
    forget_probes()  # a fresh answer: the operator may just have installed bubblewrap
    forget_landlock_probes()
    layer = choose_layer(config)
    host = layer.host or probe_host(config.bwrap_path, config.pids_cgroup)
    if layer.name == "landlock":
        return _landlock_report(config, layer, host)
    process_problem = host.process_problem() if host.works else None
    if host.works and process_problem is None:
        compartment = "run sandboxed"
    elif host.works and config.allow_unlimited_processes:
        compartment = (
            "run sandboxed WITHOUT a process limit (sandbox.allow_unlimited_processes), "
            "labelled in their outcomes"
        )
    elif host.works:
        compartment = f"are unavailable: {process_problem}"
    elif config.unsandboxed_host:
        compartment = "run on the host WITHOUT a sandbox, labelled 'unsandboxed-host'"
    else:
        compartment = "are unavailable"
    works = layer.name == "bubblewrap"
    return {
        "layer": layer.name,
        "layer_setting": config.layer,
        "why_not_bubblewrap": layer.why_not_bubblewrap,
        "layer_problem": layer.problem,
        "bwrap": host.bwrap,
        "bwrap_version": host.version,
        "prlimit": host.prlimit,
        "works": host.works,
        "problem": host.problem,
        "landlock_abi": layer.landlock.abi if layer.landlock is not None else None,
        "namespaces": _namespaces_note(host) if host.works else None,
        "capabilities": _capabilities_note(host.capabilities),
        "enforcement": _enforcement(layer.name),
        "limits": host.limit_notes(
            config.limits.processes, unlimited_accepted=config.allow_unlimited_processes
        )
        if works
        else {},
        "process_limit": host.process_note(
            config.limits.processes, unlimited_accepted=config.allow_unlimited_processes
        )
        if works
        else None,
        "pids_cgroup_problem": host.cgroup_problem if works else None,
        "runtimes": _runtimes(config, host) if works else {},
        "ready": works and (process_problem is None or config.allow_unlimited_processes),
        "compartment_tools": compartment,
        "unsandboxed_host": config.unsandboxed_host,
        "allow_unlimited_processes": config.allow_unlimited_processes,
        "accept_weaker": dict(config.accept_weaker),
    }


def _namespaces_note(host: HostCapabilities) -> str:
    """The namespaces of a sandbox, and whether a tool may make user namespaces of its own."""
    assert host.bwrap is not None
    if nested_userns_flags(host.bwrap):
        return "user, mount, pid, network, ipc, uts, cgroup; nested user namespaces refused"
    off = user_namespaces_off()
    if off is not None:
        # bubblewrap makes no user namespace here, and a tool cannot make one either.
        return (
            "mount, pid, network, ipc, uts, cgroup (no user namespace: user namespaces are off "
            f"on this host, {off}); nested user namespaces refused"
        )
    return (
        "user, mount, pid, network, ipc, uts, cgroup; nested user namespaces ALLOWED "
        f"({host.version or host.bwrap} has no --disable-userns: bubblewrap 0.8.0 or later "
        "refuses them)"
    )


def _landlock_report(
    config: SandboxConfig, layer: LayerChoice, host: HostCapabilities | None
) -> dict[str, Any]:
    """:func:`sandbox_report` when the Landlock layer is in use."""
    caps = layer.landlock
    assert caps is not None
    process = caps.process_limit
    ready = process is not None or config.allow_unlimited_processes
    weaker = [name for name, (held, _) in ENFORCEMENT["landlock"].items() if not held]
    if process is None and not config.allow_unlimited_processes:
        compartment = (
            "are unavailable: the process count cannot be enforced (root, no usable pids "
            "cgroup); run the gateway as an ordinary user or set "
            "sandbox.allow_unlimited_processes"
        )
    else:
        compartment = (
            "run sandboxed by Landlock + seccomp; tools that declare "
            f"{', '.join(weaker)} permissions are unavailable unless sandbox.accept_weaker "
            "names them"
        )
    return {
        "layer": "landlock",
        "layer_setting": config.layer,
        "why_not_bubblewrap": layer.why_not_bubblewrap,
        "layer_problem": None,
        "bwrap": host.bwrap if host is not None else None,
        "bwrap_version": host.version if host is not None else None,
        "prlimit": host.prlimit if host is not None else None,
        "works": bool(host is not None and host.works),
        "problem": host.problem if host is not None else None,
        "landlock_abi": caps.abi,
        "namespaces": None,
        "capabilities": None,
        "enforcement": _enforcement("landlock"),
        "limits": {
            "cpu time": "enforced (RLIMIT_CPU)",
            "memory": "enforced per process (RLIMIT_AS)",
            "file size": "enforced (RLIMIT_FSIZE); the scratch folder has no total size",
            "processes": f"enforced: {process}" if process else "not enforced",
            "timeout and output caps": "enforced (the runner kills the process group)",
        },
        "process_limit": process,
        "pids_cgroup_problem": caps.cgroup_problem,
        "runtimes": {},
        "ready": ready,
        "compartment_tools": compartment,
        "unsandboxed_host": config.unsandboxed_host,
        "allow_unlimited_processes": config.allow_unlimited_processes,
        "accept_weaker": dict(config.accept_weaker),
    }


def _enforcement(layer: str | None) -> dict[str, dict[str, str]]:
    """Per permission: what the layer in use and bubblewrap enforce, side by side."""
    table: dict[str, dict[str, str]] = {}
    for name in PERMISSIONS:
        row: dict[str, str] = {}
        for each in ("landlock", "bubblewrap") if layer == "landlock" else ("bubblewrap",):
            held, how = ENFORCEMENT[each][name]
            row[each] = ("enforced: " if held else "NOT enforced: ") + how
        table[name] = row
    return table


def _runtimes(config: SandboxConfig, host: HostCapabilities) -> dict[str, str]:
    """How each script runtime on the gateway's ``PATH`` runs in a sandbox (empty when none can
    start): ``python: /root/.pyenv/versions/3.11.7/bin/python3 (found as …/shims/python3); binds
    … read-only``, ``not installed`` or ``CANNOT be contained: why``."""
    if not host.works:
        return {}
    sandbox = Sandbox(config)
    notes: dict[str, str] = {}
    for runtime in RUNTIMES.values():
        if runtime.executable is None:
            continue
        found = runtime.locate(os.environ.get("PATH"))
        notes[runtime.name] = (
            sandbox.contained(found, os.environ).describe() if found else "not installed"
        )
    return notes


def _capabilities_note(capabilities: str | None) -> str | None:
    """What the probe found of a sandboxed process's capabilities, for people."""
    if capabilities is None:
        return None
    if int(capabilities, 16) == 0:
        return f"all dropped (CapEff {capabilities} in the sandbox)"
    return f"NOT dropped (CapEff {capabilities} in the sandbox)"


def check(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Start a test sandbox and report what this host enforces."""
    state = ctx.find_object(CliState) or CliState()
    report = sandbox_report(_config(state))
    if as_json:
        print_json(report)
    else:
        out = state.out
        if report["layer"] == "landlock":
            out.print(
                Text.assemble(
                    ("Sandbox works", "green"),
                    f": layer landlock + seccomp (Landlock ABI {report['landlock_abi']})",
                )
            )
            out.print(f"  bubblewrap not used: {report['why_not_bubblewrap']}", soft_wrap=True)
        elif report["works"]:
            out.print(Text.assemble(("Sandbox works", "green"), f": {report['bwrap']}"))
            out.print("  layer: bubblewrap")
            out.print(f"  bubblewrap: {report['bwrap_version'] or 'unknown version'}")
            out.print(f"  namespaces: {report['namespaces']}")
            out.print(f"  capabilities: {report['capabilities']}")
        else:
            problem = report["layer_problem"] or report["problem"]
            out.print(Text.assemble(("Sandbox does not work", "red"), f": {problem}"))
        if report["layer"] is not None:
            out.print("  permissions:")
            for name, row in report["enforcement"].items():
                for layer, note in row.items():
                    out.print(f"    {name} [{layer}]: {note}", soft_wrap=True)
            out.print("  limits:")
            for name, note in report["limits"].items():
                out.print(f"    {name}: {note}", soft_wrap=True)
            if report["runtimes"]:
                out.print("  runtimes:")
                for name, note in report["runtimes"].items():
                    out.print(f"    {name}: {note}", soft_wrap=True)
        out.print(f"Compartment-mode tools {report['compartment_tools']}.", soft_wrap=True)
    if not report["ready"]:
        raise typer.Exit(EXIT_CANNOT_SANDBOX)


sandbox_app.command("check", epilog=EXIT_CODES_HELP)(check)


def register(app: typer.Typer) -> None:
    """Add ``toolgate sandbox``."""
    app.add_typer(sandbox_app, name="sandbox")
