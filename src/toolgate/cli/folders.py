"""``toolgate tools validate / install / remove / new``: working with tool folders on disk.

Installed tools live in ``$TOOLGATE_HOME/tools/<name>/`` (namespace ``local``). The gateway loads
that folder on every command and a running server watches it, so installing, replacing or
removing a folder is all it takes; nothing is registered anywhere else.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from ..formats._common.diagnostics import Diagnostic, Severity
from ..formats.tool_folder.parse import FolderLoad, load_tool_folder
from ..model import ScriptEntry, Tool
from ..runtimes import RUNTIMES
from .errors import CliFailure, CliUsageError
from .scaffold import SCAFFOLD_RUNTIMES, WORKER_SCAFFOLDS, scaffold

__all__ = [
    "LOCAL_NAMESPACE",
    "FolderCheck",
    "check_folder",
    "install_folder",
    "new_folder",
    "print_diagnostics",
    "print_folder_check",
    "remove_folder",
]

#: The namespace of the tools in ``$TOOLGATE_HOME/tools``.
LOCAL_NAMESPACE = "local"
#: Not copied by ``tools install``: version-control data and Python caches.
_IGNORED = (".git", "__pycache__")
#: A name that is safe as a folder name and as a tool name on every platform.
_NEW_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class FolderCheck:
    """A loaded tool folder, with the host checks the loader leaves out (runtime installed)."""

    load: FolderLoad
    diagnostics: tuple[Diagnostic, ...]
    """The loader's diagnostics, then a warning when the runtime cannot run here."""

    @property
    def tool(self) -> Tool | None:
        """The tool, when the folder loads."""
        return self.load.tool

    @property
    def ok(self) -> bool:
        """True when the folder loads (warnings may remain)."""
        return self.load.ok


def check_folder(folder: Path, *, namespace: str = LOCAL_NAMESPACE) -> FolderCheck:
    """Load ``folder`` as a tool folder (nothing is installed or run) and check its runtime."""
    load = load_tool_folder(folder, namespace=namespace)
    diagnostics = list(load.diagnostics)
    tool = load.tool
    if tool is not None and isinstance(tool.entry, ScriptEntry):
        runtime = RUNTIMES.get(tool.entry.runtime)
        reason = (
            None
            if runtime is None
            else runtime.unavailable_reason(Path(tool.entry.path), os.environ.get("PATH"))
        )
        if reason is not None:
            diagnostics.append(
                Diagnostic(
                    tool.source.location or str(folder),
                    "runtime",
                    f"{reason} (the tool loads, but calls fail until then)",
                    Severity.WARNING,
                )
            )
    return FolderCheck(load, tuple(diagnostics))


def _require_folder(path: Path, what: str = "PATH") -> Path:
    if not path.exists():
        raise CliUsageError(f"{what}: no such folder: {path}")
    if not path.is_dir():
        raise CliUsageError(f"{what}: {path} is not a folder; give the tool's folder")
    return path


# -- printing -----------------------------------------------------------------------------------


def print_diagnostics(
    diagnostics: Sequence[Diagnostic], console: Console, *, heading: str | None = None
) -> None:
    """Print each diagnostic on one line: ``error: path: field: message`` (unwrapped)."""
    if not diagnostics:
        return
    if heading is not None:
        console.print(Text(heading, style="bold"))
    for diagnostic in diagnostics:
        error = diagnostic.severity is Severity.ERROR
        console.print(
            Text.assemble(
                (f"{diagnostic.severity}: ", "bold red" if error else "bold yellow"),
                str(diagnostic),
            ),
            soft_wrap=True,
        )


def _inputs(tool: Tool) -> str:
    properties = tool.input_schema.get("properties") or {}
    required = set(tool.input_schema.get("required") or ())
    names = [f"{key} (required)" if key in required else str(key) for key in properties]
    return ", ".join(names) or "none"


def print_folder_check(check: FolderCheck, folder: Path, console: Console) -> None:
    """Print what ``tools validate`` found: the tool's summary, then every diagnostic."""
    tool = check.tool
    if tool is None:
        console.print(Text(f"✗ {folder} does not load as a tool folder", style="bold red"))
    else:
        console.print(Text(f"✓ {folder} loads as {tool.id}", style="bold green"))
        entry = tool.entry
        script = (
            f"{entry.runtime}: {Path(entry.path).name}" if isinstance(entry, ScriptEntry) else "-"
        )
        security = tool.security_check
        rows = [
            ("Script", script),
            ("Timeout", f"{tool.timeout:g} s"),
            ("Side effect", str(tool.side_effect)),
            ("Approval", "required" if tool.requires_approval else "not required"),
            (
                "Security check",
                "none"
                if security is None
                else f"{Path(security.script or '?').name} ({security.timeout:g} s)",
            ),
            ("Env", ", ".join(tool.env) or "none"),
            ("Inputs", _inputs(tool)),
            ("Output schema", "declared" if tool.output_schema is not None else "none"),
            ("Description", tool.description.strip().splitlines()[0] if tool.description else ""),
        ]
        for label, value in rows:
            console.print(Text.assemble((f"  {label:<16}", "bold"), value), soft_wrap=True)
    if check.diagnostics:
        console.print()
        print_diagnostics(check.diagnostics, console)


# -- validate -----------------------------------------------------------------------------------


def validate_folder(path: Path, console: Console) -> FolderCheck:
    """``tools validate``: load and print. Raises :class:`CliFailure` when it does not load."""
    folder = _require_folder(path)
    check = check_folder(folder)
    print_folder_check(check, folder, console)
    if not check.ok:
        errors = sum(1 for d in check.diagnostics if d.severity is Severity.ERROR)
        noun = "error" if errors == 1 else "errors"
        raise CliFailure(f"{folder} does not load ({errors} {noun} above)")
    return check


# -- install ------------------------------------------------------------------------------------


def _folder_name(
    name: str, *, what: str, error: type[CliUsageError | CliFailure] = CliUsageError
) -> str:
    """``name`` when it can be a single folder name inside the tools folder."""
    if (
        not name
        or name in (".", "..")
        or name.startswith(".")
        or any(sep in name for sep in ("/", "\\", "\0"))
    ):
        raise error(
            f"{what} {name!r} cannot be a folder name in $TOOLGATE_HOME/tools: use a plain name "
            "without '/', '\\' or '..' that does not start with '.'"
        )
    return name


def _walk(folder: Path) -> Iterable[Path]:
    """Every path under ``folder``, not descending into symlinked or ignored folders."""
    for directory, subfolders, files in os.walk(folder):
        subfolders[:] = [name for name in subfolders if name not in _IGNORED]
        for name in [*subfolders, *files]:
            yield Path(directory) / name


def _links_outside(folder: Path) -> list[str]:
    """The symlinks under ``folder`` that point outside it (or nowhere), as ``link -> target``."""
    root = folder.resolve()
    found = []
    for path in _walk(folder):
        if path.is_symlink():
            target = path.resolve()
            if not target.exists() or not target.is_relative_to(root):
                found.append(f"{path.relative_to(folder)} -> {os.readlink(path)}")
    return found


def _claimed_elsewhere(tools_dir: Path, name: str, dest: Path) -> Path | None:
    """Another installed folder that already declares the tool ``name``."""
    if not tools_dir.is_dir():
        return None
    for child in sorted(tools_dir.iterdir()):
        if child == dest or child.name.startswith(".") or not child.is_dir():
            continue
        tool = load_tool_folder(child, namespace=LOCAL_NAMESPACE).tool
        if tool is not None and tool.name == name:
            return child
    return None


def _discard(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def install_folder(source: Path, tools_dir: Path, *, force: bool, console: Console) -> FolderCheck:
    """``tools install``: validate ``source`` and copy it to ``tools_dir/<name>``.

    The copy keeps symlinks as links (never following them), refuses links that point outside the
    folder, skips ``.git`` and ``__pycache__``, is validated again, and only then replaces the
    installed folder (``force``) in one rename, so a running server never sees half a folder.
    """
    folder = _require_folder(source)
    check = check_folder(folder)
    if not check.ok:
        print_diagnostics(check.diagnostics, console)
        raise CliFailure(f"{folder} does not load as a tool folder; nothing was installed")
    assert check.tool is not None
    name = _folder_name(check.tool.name, what="the tool name", error=CliFailure)
    links = _links_outside(folder)
    if links:
        raise CliFailure(
            f"{folder} has symlinks that point outside the folder, which an installed tool must "
            f"not depend on: {'; '.join(links)}. Copy those files into the folder instead."
        )
    dest = tools_dir / name
    if dest.exists() and folder.resolve() == dest.resolve():
        raise CliFailure(f"{folder} is already the installed folder of local:{name}")
    if dest.resolve().is_relative_to(folder.resolve()):
        raise CliFailure(f"cannot install {folder} into its own sub-folder {dest}")
    if (dest.exists() or dest.is_symlink()) and not force:
        raise CliFailure(f"local:{name} is already installed at {dest}; use --force to replace it")
    other = _claimed_elsewhere(tools_dir, name, dest)
    if other is not None:
        raise CliFailure(
            f"the folder {other} already declares the tool local:{name}; remove it first "
            f"(toolgate tools remove {other.name})"
        )

    tools_dir.mkdir(parents=True, exist_ok=True)
    # Dot-prefixed folders are ignored by the tool-folder scanner while they are being built.
    staging = tools_dir / f".{name}.installing-{uuid.uuid4().hex[:8]}"
    try:
        shutil.copytree(folder, staging, symlinks=True, ignore=shutil.ignore_patterns(*_IGNORED))
        copied = load_tool_folder(staging, namespace=LOCAL_NAMESPACE)
        if not copied.ok or copied.tool is None or copied.tool.name != name:
            print_diagnostics(copied.diagnostics, console)
            raise CliFailure(f"the copy of {folder} does not load; nothing was installed")
        links = _links_outside(staging)
        if links:
            raise CliFailure(
                f"the copy of {folder} has symlinks pointing outside it ({'; '.join(links)}); "
                "use relative links inside the folder, or copy the files in"
            )
        if dest.exists() or dest.is_symlink():
            old = tools_dir / f".{name}.replaced-{uuid.uuid4().hex[:8]}"
            dest.rename(old)
            staging.rename(dest)
            _discard(old)
        else:
            staging.rename(dest)
    except (OSError, shutil.Error) as exc:
        raise CliFailure(f"cannot copy {folder} to {dest}: {exc}") from None
    finally:
        if staging.exists() or staging.is_symlink():
            _discard(staging)
    return check_folder(dest)


# -- remove -------------------------------------------------------------------------------------


def remove_folder(name: str, tools_dir: Path) -> Path:
    """``tools remove``: delete ``tools_dir/<name>`` (a symlink is unlinked, never followed).

    ``name`` may be written ``local:<name>``. Returns the path removed.
    """
    if name.startswith(f"{LOCAL_NAMESPACE}:"):
        name = name[len(LOCAL_NAMESPACE) + 1 :]
    _folder_name(name, what="NAME")
    target = tools_dir / name
    if target.is_symlink():
        target.unlink()
        return target
    if not target.exists():
        installed = (
            sorted(
                child.name
                for child in tools_dir.iterdir()
                if child.is_dir() and not child.name.startswith(".")
            )
            if tools_dir.is_dir()
            else []
        )
        listing = f"installed: {', '.join(installed)}" if installed else "no tools are installed"
        raise CliFailure(f"no tool folder named {name!r} in {tools_dir} ({listing})")
    if not target.is_dir():
        raise CliFailure(f"{target} is not a tool folder; remove it by hand if it should go")
    try:
        shutil.rmtree(target)
    except OSError as exc:
        raise CliFailure(f"cannot remove {target}: {exc.strerror or exc}") from None
    return target


# -- new ----------------------------------------------------------------------------------------


def new_folder(
    name: str, runtime: str, parent: Path, *, worker: bool = False
) -> tuple[Path, list[Path], FolderCheck]:
    """``tools new``: scaffold ``parent/<name>`` for ``runtime`` (a ``protocol: worker`` tool
    with ``worker``) and check that it loads."""
    if not _NEW_NAME.match(name):
        raise CliUsageError(
            f"NAME {name!r}: use letters, digits, '-', '_' and '.', starting with a letter or "
            "digit (at most 64 characters), for example 'word-count'"
        )
    if runtime not in SCAFFOLD_RUNTIMES:
        raise CliUsageError(
            f"--runtime must be one of {', '.join(SCAFFOLD_RUNTIMES)}, not {runtime!r}"
        )
    if worker and runtime not in WORKER_SCAFFOLDS:
        raise CliUsageError(
            f"--protocol worker has a helper for {', '.join(WORKER_SCAFFOLDS)}, not {runtime!r} "
            "(any runtime can speak it: read one JSON line per call, write one)"
        )
    if parent.exists() and not parent.is_dir():
        raise CliUsageError(f"--dir: {parent} is not a folder")
    folder = parent / name
    if folder.exists() or folder.is_symlink():
        raise CliFailure(f"{folder} already exists; choose another NAME or --dir")
    try:
        files = scaffold(folder, name, runtime, worker=worker)
    except OSError as exc:
        raise CliFailure(f"cannot create {folder}: {exc.strerror or exc}") from None
    check = check_folder(folder)
    if not check.ok:  # a bug in the templates, never the user's doing
        raise CliFailure(
            f"the scaffold in {folder} does not load: "
            + "; ".join(str(d) for d in check.diagnostics)
        )
    return folder, files, check
