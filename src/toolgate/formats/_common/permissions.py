"""The plugin format's ``sandbox`` and ``permissions``, checked.

Shared by the manifest (:mod:`toolgate.formats.plugin.manifest`, JSON values) and the per-tool
overrides of
tool objects (:mod:`toolgate.formats.plugin.tool`, Python mappings or objects), and by tool folders,
``os`` tools and capability sources' ``options.permissions`` through them. What no declaration may
be granted is decided in :mod:`toolgate.model.permission_rules`: ``network`` entries are parsed by
the egress proxy's own parser (:func:`toolgate.model.hosts.parse_pattern`) and stored in its
canonical form, so an entry the proxy would refuse — a bare ``*``, a wildcard over a top-level
domain or an IP address (``*.127.0.0.1``), a URL, a port out of range — does not load; ``env`` names
that make a runtime load or run code (``BASH_ENV``, ``LD_PRELOAD``, ``PYTHONPATH``…) are errors; an
unknown field of ``permissions`` is an error naming the closest known one (a misspelt ``netwrok``
would silently drop a restriction). ``fs`` prefixes are stored absolute (relative ones against the
plugin folder). Nothing here enforces anything: it only records what a tool is granted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..._spelling import did_you_mean
from ...model import Permissions, SandboxMode
from ...model.permission_rules import env_name_refusal, network_entry
from ...path_policy import normalise_prefix, prefix_problem
from .diagnostics import Report, Severity
from .messages import got

__all__ = [
    "PERMISSION_FIELDS",
    "escape_pointer",
    "exceeding",
    "parse_permissions",
    "parse_sandbox",
    "suggest",
    "unknown_field",
    "unknown_permission",
]

#: The fields of ``permissions`` (the plugin format's "Sandbox & Permissions").
PERMISSION_FIELDS: tuple[str, ...] = ("time", "network", "env", "fs", "random")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SANDBOX_MODES = ", ".join(f"'{mode}'" for mode in SandboxMode)


def suggest(key: str, known: tuple[str, ...]) -> str:
    """``"; did you mean 'x'?"`` for a misspelt field name, or ``""`` (the one rule of
    :mod:`toolgate._spelling`)."""
    return did_you_mean(key, known)


def escape_pointer(part: str) -> str:
    """One JSON pointer segment (``~`` → ``~0``, ``/`` → ``~1``)."""
    return part.replace("~", "~0").replace("/", "~1")


def unknown_field(
    report: Report, pointer: str, key: Any, known: tuple[str, ...], what: str
) -> None:
    """Warn about a field nobody reads, suggesting the closest known one."""
    name = key if isinstance(key, str) else repr(key)
    hint = suggest(name, known) if isinstance(key, str) else ""
    report.warning(
        f"{pointer}/{escape_pointer(name)}",
        f"unknown {what} field {name!r} (ignored){hint}; known fields: {', '.join(known)}",
    )


def unknown_permission(report: Report, pointer: str, key: Any) -> None:
    """An error for a ``permissions`` field nobody reads: a misspelt ``netwrok`` would silently
    drop the restriction its author meant, so the declaration does not load."""
    name = key if isinstance(key, str) else repr(key)
    hint = suggest(name, PERMISSION_FIELDS) if isinstance(key, str) else ""
    report.error(
        f"{pointer}/{escape_pointer(name)}",
        f"unknown permissions field {name!r}{hint}; known fields: {', '.join(PERMISSION_FIELDS)}",
    )


def parse_sandbox(value: Any, pointer: str, report: Report) -> SandboxMode | None:
    """``sandbox``: the default when ``None``; a diagnostic (and ``None``) for anything else."""
    if value is None:
        return SandboxMode.COMPARTMENT
    if isinstance(value, str) and value in {mode.value for mode in SandboxMode}:
        return SandboxMode(value)
    report.error(
        pointer, f"'sandbox' must be {_SANDBOX_MODES} (default 'compartment'), {got(value)}"
    )
    return None


_MISSING: Any = object()


def _get(value: Any, key: str) -> Any:
    """A field of a mapping or an attribute of an object (Python tool overrides); ``None`` when
    absent, as an optional JSON field set to ``null``."""
    if isinstance(value, Mapping):
        return value.get(key)
    return getattr(value, key, None)


def parse_permissions(
    value: Any,
    pointer: str,
    folder: Path,
    report: Report,
) -> Permissions | None:
    """Check ``permissions`` (a JSON object, or a Python mapping/object for a tool's override)
    and map it onto :class:`~toolgate.model.Permissions`. ``None`` after any error."""
    if value is None:
        return Permissions()
    if isinstance(value, (str, bytes, int, float, list, tuple)) or value is True:
        report.error(
            pointer,
            f"'permissions' must be an object with {', '.join(PERMISSION_FIELDS)}, {got(value)}",
        )
        return None
    before = len(report.items)
    if isinstance(value, Mapping):
        for key in value:
            if key not in PERMISSION_FIELDS:
                unknown_permission(report, pointer, key)
    time = _flag(_get(value, "time"), f"{pointer}/time", "time", report)
    randomness = _flag(_get(value, "random"), f"{pointer}/random", "random", report)
    network = _strings(_get(value, "network"), f"{pointer}/network", "host names", report)
    env = _strings(_get(value, "env"), f"{pointer}/env", "environment variable names", report)
    fs = _strings(_get(value, "fs"), f"{pointer}/fs", "path prefixes", report)
    hosts = tuple(
        host
        for index, text in enumerate(network)
        if (host := _host(text, f"{pointer}/network/{index}", report))
    )
    names = _env_names(env, f"{pointer}/env", report)
    prefixes = tuple(
        prefix
        for index, text in enumerate(fs)
        if (prefix := _prefix(text, f"{pointer}/fs/{index}", folder, report))
    )
    if any(d.severity is Severity.ERROR for d in report.items[before:]):
        return None
    return Permissions(
        time=time, network=_unique(hosts), env=names, fs=_unique(prefixes), random=randomness
    )


def _unique(items: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _flag(value: Any, pointer: str, name: str, report: Report) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    report.error(pointer, f"'{name}' must be a boolean (true or false), {got(value)}")
    return False


def _strings(value: Any, pointer: str, what: str, report: Report) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        report.error(pointer, f"must be a list of {what}, {got(value)}")
        return ()
    items: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, str) and item.strip():
            items.append(item.strip())
        else:
            report.error(f"{pointer}/{index}", f"must be a non-empty string ({what}), {got(item)}")
    return tuple(items)


def _host(text: str, pointer: str, report: Report) -> str | None:
    """Check one ``network`` entry with the egress proxy's own parser, so an entry loads only
    when the proxy will enforce it as written; stored in the proxy's canonical form."""
    try:
        return network_entry(text)
    except ValueError as exc:
        report.error(pointer, str(exc))
        return None


def _env_names(names: tuple[str, ...], pointer: str, report: Report) -> tuple[str, ...]:
    valid: list[str] = []
    for index, name in enumerate(names):
        if not _ENV_NAME.match(name):
            report.error(
                f"{pointer}/{index}",
                f"{name!r} is not a valid environment variable name "
                "(letters, digits and '_', not starting with a digit)",
            )
        elif (refusal := env_name_refusal(name)) is not None:
            report.error(f"{pointer}/{index}", refusal)
        elif name not in valid:
            valid.append(name)
    return tuple(valid)


def _prefix(text: str, pointer: str, folder: Path, report: Report) -> str | None:
    """One ``fs`` prefix, normalised and checked by the rule of :mod:`toolgate.path_policy`
    (what is known at load: kernel, system, credential and home folders); ``None`` after an
    error. The gateway's own folders are checked again when the sandbox is prepared."""
    absolute, problem = normalise_prefix(text, folder)
    if absolute is not None:
        problem = prefix_problem(absolute, own=(folder,))
        if problem is not None:
            problem = (
                f"{problem}: a sandbox never shows it to a tool. Grant only the folder of the "
                "data the tool reads (see 'fs' in the sandboxing guide)"
            )
    if problem is not None or absolute is None:
        report.error(pointer, problem or f"{text!r} is not a path prefix")
        return None
    return absolute


def exceeding(wanted: Permissions, granted: Permissions) -> str:
    """What ``wanted`` asks for beyond ``granted``, in words (empty when nothing): hosts, keys
    and prefixes not granted (a prefix is granted when it lies under a granted one), and
    ``time`` / ``random`` when not granted."""
    parts: list[str] = []
    if wanted.time and not granted.time:
        parts.append("time")
    if wanted.random and not granted.random:
        parts.append("random")
    hosts = [host for host in wanted.network if host not in granted.network]
    if hosts:
        parts.append("network: " + ", ".join(hosts))
    keys = [key for key in wanted.env if key not in granted.env]
    if keys:
        parts.append("env: " + ", ".join(keys))
    roots = [Path(prefix) for prefix in granted.fs]
    prefixes = [
        prefix
        for prefix in wanted.fs
        if not any(Path(prefix) == root or root in Path(prefix).parents for root in roots)
    ]
    if prefixes:
        parts.append("fs: " + ", ".join(prefixes))
    return "; ".join(parts)
