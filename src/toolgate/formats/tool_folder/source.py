"""Tool folders on disk → tools in the registry, kept in step without a restart.

Every immediate sub-folder of a root (``$TOOLGATE_HOME/tools/<name>/`` and the folders named in
``toolgate.yaml``) is one tool. The roots are watched with watchfiles and also rescanned every 60
seconds (the format: "scans every 60 seconds"), so adding, changing or deleting a folder adds,
updates or removes its tool. A folder that fails to load keeps its diagnostics visible, and every
other tool keeps loading.

A folder that *appears* in a root after the root's first scan (written while the gateway runs)
never gets more rights than its location grants: ``confine_new`` (given by the gateway when it
has a sandbox) decides the mode of its tool — a tool that would run on the host is put in a
compartment unless the operator granted host mode for its namespace (``sandbox.namespaces``), and
a warning says so. Whoever could write a folder there (a tool given the folder as its workspace,
say) must not thereby get a tool that runs on the host. The folders present at the first scan are
what the operator installed; a restart takes the new ones as installed too.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import DuplicateToolError
from ...model import Tool
from ...registry import RegisteredTool, Registry
from .._common.diagnostics import Diagnostic, Severity
from .fingerprint import Fingerprint, fingerprint
from .parse import FolderLoad, load_tool_folder

__all__ = ["DEFAULT_RESCAN_INTERVAL", "FolderRoot", "ScanReport", "ToolFolderSource"]

log = logging.getLogger("toolgate.sources")

#: A folder's fingerprint (``None``: none could be taken) and what reading it gave.
_Read = tuple[Fingerprint | None, FolderLoad]

#: The tool folder format: the server "scans every 60 seconds".
DEFAULT_RESCAN_INTERVAL = 60.0


@dataclass(frozen=True, slots=True)
class FolderRoot:
    """A folder whose sub-folders are tools, and the namespace those tools get."""

    path: Path
    namespace: str = "local"


@dataclass
class ScanReport:
    """What one scan changed."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the registry changed."""
        return bool(self.added or self.updated or self.removed)


class ToolFolderSource:
    """Loads tool folders into a registry and keeps them current."""

    def __init__(
        self,
        registry: Registry,
        roots: Iterable[FolderRoot],
        *,
        availability: Callable[[Tool], str | None],
        rescan_interval: float = DEFAULT_RESCAN_INTERVAL,
        confine_new: Callable[[Tool], tuple[Tool, str | None]] | None = None,
    ) -> None:
        self.registry = registry
        self.roots = tuple(roots)
        self.availability = availability
        self.confine_new = confine_new
        """The tool of a folder that appeared after its root's first scan, in the mode its
        location grants, and the warning to show (``None``: nothing changed); ``None``: no
        limit (a gateway without a sandbox runs every tool on the host anyway)."""
        self._installed: dict[Path, frozenset[Path]] = {}
        """Per root: the folders its first scan found (what the operator installed)."""
        self.rescan_interval = rescan_interval
        self._owned: dict[Path, str] = {}
        self._diagnostics: dict[Path, tuple[Diagnostic, ...]] = {}
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._reads: dict[Path, _Read] = {}
        """The last scan's fingerprint and load of every folder (see :meth:`start`)."""
        self.scans = 0
        """How many scans ran (for tests and status pages)."""

    def add_root(self, root: FolderRoot) -> ScanReport:
        """Add a folder of tool folders and load it now (before :meth:`start`)."""
        if self._task is not None:
            raise RuntimeError("add tool folders before the gateway starts watching")
        self.roots = (*self.roots, root)
        return self.scan()

    @property
    def diagnostics(self) -> list[Diagnostic]:
        """Every problem found by the last scan, folder by folder."""
        return [d for folder in sorted(self._diagnostics) for d in self._diagnostics[folder]]

    def _folders(self) -> list[tuple[Path, FolderRoot]]:
        found: list[tuple[Path, FolderRoot]] = []
        for root in self.roots:
            try:
                children = sorted(root.path.iterdir()) if root.path.is_dir() else []
            except OSError as exc:
                log.warning("cannot list tool folder root %s: %s", root.path, exc)
                continue
            listed: list[Path] = []
            for child in children:
                try:
                    if child.is_dir() and not child.name.startswith("."):
                        listed.append(child)
                except OSError:
                    listed.append(child)  # the loader reports why it cannot be read
            found += [(child, root) for child in listed]
            # The first scan of a root is what the operator installed (setdefault: a dict
            # operation, atomic for the watcher's thread).
            self._installed.setdefault(root.path, frozenset(listed))
        return found

    def load(self) -> list[FolderLoad]:
        """Read and parse every folder. Touches no shared state but the record of each root's
        first scan: safe to run in a thread."""
        return [loaded for _, loaded in self._read()]

    def _read(self, reuse: Mapping[Path, _Read] | None = None) -> list[_Read]:
        """Every folder's fingerprint (taken before it is read, so a change while it is read
        shows at the next comparison) and load; a folder whose fingerprint equals its entry in
        ``reuse`` is not read again. Safe to run in a thread, like :meth:`load`."""
        reads: list[_Read] = []
        for folder, root in self._folders():
            taken = fingerprint(folder)
            earlier = None if reuse is None else reuse.get(folder)
            if taken is not None and earlier is not None and earlier[0] == taken:
                reads.append(earlier)
                continue
            try:
                loaded = self._confined(load_tool_folder(folder, namespace=root.namespace), root)
            except Exception as exc:  # noqa: BLE001 - one folder must never stop the others
                problem = Diagnostic(str(folder), None, f"cannot be loaded: {exc}")
                loaded = FolderLoad(folder, None, (problem,), None)
            reads.append((taken, loaded))
        return reads

    def _confined(self, loaded: FolderLoad, root: FolderRoot) -> FolderLoad:
        """``loaded`` in the mode its location grants, when its folder appeared after the
        root's first scan (see the module documentation)."""
        if (
            self.confine_new is None
            or loaded.tool is None
            or loaded.folder in self._installed.get(root.path, frozenset({loaded.folder}))
        ):
            return loaded
        tool, warning = self.confine_new(loaded.tool)
        if warning is None:
            return loaded
        note = Diagnostic(str(loaded.folder), "sandbox", warning, Severity.WARNING)
        return dataclasses.replace(loaded, tool=tool, diagnostics=(*loaded.diagnostics, note))

    def scan(self) -> ScanReport:
        """Load every folder now and bring the registry in step. Never raises for bad folders."""
        return self._apply_reads(self._read())

    def _apply_reads(self, reads: list[_Read]) -> ScanReport:
        self._reads = {loaded.folder: (taken, loaded) for taken, loaded in reads}
        return self.apply([loaded for _, loaded in reads])

    def apply(self, loads: list[FolderLoad]) -> ScanReport:
        """Bring the registry in step with freshly loaded folders."""
        report = ScanReport()
        seen: dict[Path, str] = {}
        diagnostics: dict[Path, tuple[Diagnostic, ...]] = {}
        claimed: dict[str, Path] = {}
        previous_owner = {tool_id: folder for folder, tool_id in self._owned.items()}
        # A folder that already owned its tool id keeps it: a newcomer declaring the same name
        # must not silently take over a running tool (the newcomer gets the diagnostic).
        ordered = sorted(
            loads,
            key=lambda load: (
                load.tool is None or previous_owner.get(load.tool.id) != load.folder,
                str(load.folder),
            ),
        )
        for loaded in ordered:
            folder = loaded.folder
            problems = list(loaded.diagnostics)
            tool = loaded.tool
            if tool is not None and tool.id in claimed:
                problems.append(
                    Diagnostic(
                        str(folder),
                        "name",
                        f"tool {tool.id} is already declared by the folder {claimed[tool.id]}",
                    )
                )
                tool = None
            if tool is not None:
                outcome = self._apply_one(folder, tool, report)
                if outcome is None:
                    claimed[tool.id] = folder
                    seen[folder] = tool.id
                else:
                    problems.append(outcome)
            if problems:
                diagnostics[folder] = tuple(problems)
        still_declared = set(seen.values())
        for folder, tool_id in self._owned.items():
            # Gone, broken now, or renamed: its old tool goes (a broken folder's tool must not
            # keep running an outdated definition) — unless another folder declares it now.
            dropped = seen.get(folder) != tool_id and tool_id not in still_declared
            if dropped and self.registry.remove(tool_id):
                report.removed.append(tool_id)
        self._owned = seen
        self._diagnostics = diagnostics
        self.scans += 1
        if report.changed:
            log.info("tool folders: +%s ~%s -%s", report.added, report.updated, report.removed)
        return report

    def _apply_one(self, folder: Path, tool: Tool, report: ScanReport) -> Diagnostic | None:
        entry = RegisteredTool(tool, None, self.availability(tool))
        current = self.registry.get(tool.id)
        if current is not None and tool.id not in self._owned.values():
            return Diagnostic(
                str(folder),
                "name",
                f"tool {tool.id} is already registered by the "
                f"{current.tool.source.format} declaration at {current.tool.source.location}",
                Severity.ERROR,
            )
        if current is None:
            try:
                self.registry.add(entry)
            except DuplicateToolError as exc:
                return Diagnostic(str(folder), "name", str(exc))
            report.added.append(tool.id)
        elif current.tool != tool or current.unavailable_reason != entry.unavailable_reason:
            self.registry.replace(entry)
            report.updated.append(tool.id)
        return None

    # -- watching -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bring the registry in step with the folders as they are now, then watch the roots
        and rescan periodically until :meth:`stop`."""
        if self._task is not None:
            return
        # The folders were read when the gateway was built; what changed since (a folder
        # removed, a declaration tightened) must not be served in its old form, so start
        # compares every folder's fingerprint and reads again only those that changed: a few
        # stat calls per folder instead of a second read of every one.
        self._apply_reads(self._read(reuse=self._reads))
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._watch(self._stop), name="toolgate-tool-folders")

    async def stop(self) -> None:
        """Stop watching (idempotent)."""
        task, stop = self._task, self._stop
        self._task = self._stop = None
        if task is None or stop is None:
            return
        stop.set()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _watch(self, stop: asyncio.Event) -> None:
        from watchfiles import awatch  # the watcher thread only exists while serving

        roots = [root.path for root in self.roots]
        for path in roots:
            path.mkdir(parents=True, exist_ok=True)
        rescans = asyncio.create_task(self._rescan_periodically(stop))
        try:
            async for _changes in awatch(*roots, stop_event=stop, debounce=200, step=50):
                await self._safe_scan()
        finally:
            rescans.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rescans

    async def _rescan_periodically(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rescan_interval)
            if not stop.is_set():
                await self._safe_scan()

    async def _safe_scan(self) -> None:
        # Reading and parsing happen in a thread, so a slow disk or a large folder never stalls
        # the event loop; only the registry update runs on the loop.
        try:
            self._apply_reads(await asyncio.to_thread(self._read))
        except Exception:
            log.exception("tool folder scan failed")
