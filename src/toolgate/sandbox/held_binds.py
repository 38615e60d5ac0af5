"""Opening and checking what a call's sandbox binds: its workspace, ``fs`` prefixes and code.

Every host path a sandbox shows is opened once (:class:`~toolgate.sandbox.bwrap.HeldPaths`),
checked as what the descriptor points to (by the path rule and by identity, with the call's
:class:`~toolgate.sandbox.path_checks.CheckedPolicy`), and bound from the descriptor: nothing is
resolved by name again. Used by :meth:`~toolgate.sandbox.runner.Sandbox.prepare`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from ..model import Tool
from .bwrap import HeldPaths
from .command import SandboxUnavailableError, SandboxWorkspaceError
from .path_checks import CheckedPolicy

__all__ = [
    "checked_workspace",
    "held_prefixes",
    "hold",
    "hold_one",
    "own_folder",
    "workspace_message",
]


def checked_workspace(
    tool: Tool,
    workspace: Path,
    held: HeldPaths,
    checks: CheckedPolicy,
    refusal: Callable[[Tool, Path], str | None],
) -> Path:
    """The real path of the folder ``workspace`` opened as in ``held`` (what is bound), or
    :class:`SandboxWorkspaceError` when ``refusal`` (the sandbox's workspace check) refuses it:
    as given (the caller's spelling in the message) and as what was opened, then by identity. A
    link swapped in between the two, or after them, changes nothing: the descriptor is bound,
    not the path. A workspace that changes while it is looked at (``os.path.realpath`` meets a
    link that is a folder when it reads it) is refused too."""
    try:
        refused = refusal(tool, workspace)
        if refused is None:
            real = held.hold(workspace, directory=True)
            refused = refusal(tool, real)
        if refused is None:
            # The same folder under another name (a bind mount) passes the text rule.
            guard = checks.guard(writable=tool.side_effect.writes)
            problem = guard.problem(held.fd(real), real)
            if problem is not None:
                refused = workspace_message(tool, f"{real} {problem}")
    except OSError as exc:
        raise SandboxWorkspaceError(
            f"Tool {tool.id} runs in a sandbox and did not run: the workspace {workspace} "
            f"cannot be opened: {exc.strerror or exc}"
        ) from None
    if refused is not None:
        raise SandboxWorkspaceError(refused)
    return real


def held_prefixes(
    tool_id: str,
    prefixes: Sequence[str],
    held: HeldPaths,
    checks: CheckedPolicy,
    *,
    own: Sequence[Path],
    where: str,
) -> list[Path]:
    """The ``prefixes`` (granted at ``where``) that exist, opened in ``held``: their real
    paths, each checked as what was opened, by the path rule
    (:func:`~toolgate.path_policy.prefix_problem`) and by identity
    (:mod:`toolgate.sandbox.identity`). Raises :class:`SandboxUnavailableError`."""
    own = [*own, *(Path(os.path.realpath(folder)) for folder in own)]
    found: list[Path] = []
    for index, prefix in enumerate(prefixes):
        real = hold_one(tool_id, held, Path(prefix))
        if real is None:
            continue
        problem = checks.prefix_problem(real, own=own)
        if problem is None:
            guard = checks.guard(writable=True)
            try:
                problem = guard.problem(held.fd(real), real, own=own)
            except OSError as exc:
                problem = f"cannot be checked: {exc.strerror or exc}"
            if problem is not None:
                problem = f"{real} {problem}"
        if problem is not None:
            raise SandboxUnavailableError(
                f"Tool {tool_id} did not run: {where}[{index}] ({prefix}): {problem}: a "
                "sandbox never shows it to a tool"
            )
        found.append(real)
    return found


def hold(tool: Tool, held: HeldPaths, paths: Sequence[Path]) -> list[Path]:
    """``paths`` that exist, opened in ``held``: their real paths (bound read-only)."""
    return [real for path in paths if (real := hold_one(tool.id, held, path)) is not None]


def hold_one(tool_id: str, held: HeldPaths, path: Path) -> Path | None:
    """``path`` opened in ``held`` (its real path), ``None`` when it does not exist."""
    try:
        return held.hold(path)
    except (FileNotFoundError, NotADirectoryError):
        return None  # as before: a path that does not exist is not bound
    except OSError as exc:
        raise SandboxUnavailableError(
            f"Tool {tool_id} did not run: {path} cannot be opened to be bound into its "
            f"sandbox: {exc.strerror or exc}"
        ) from None


def workspace_message(tool: Tool, problem: str) -> str:
    """The refusal of a workspace for ``tool`` that ``problem`` describes."""
    return (
        f"Tool {tool.id} runs in a sandbox and did not run: the workspace {problem}, which a "
        "sandbox never binds. Call it with a project folder as the workspace that holds none "
        "of the gateway's own folders (its home, tool folders, sources, toolgate.yaml, the "
        "folders its programs and Python code come from, its run and spill folders)."
    )


def own_folder(tool: Tool) -> list[Path]:
    """The folder ``tool`` was declared in (its own files: an ``fs`` prefix there is its code)."""
    location = tool.source.location
    if not location or not location.startswith("/"):
        return []
    path = Path(location)
    return [path if path.is_dir() else path.parent]
