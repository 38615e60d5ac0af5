"""Declaration sources: files, folders and packages in one of the declaration formats.

Each format (capabilities, plugins, extension info, Kubernetes-style resources) has one
:class:`DeclarationSource` subclass that turns its declarations into registered tools plus
diagnostics and alerts. :class:`SourceSet` keeps the registry in step with every source: a
reload adds, updates and removes that source's tools, and a tool id another declaration already
holds becomes a diagnostic instead of a takeover.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..backends.mcp_limits import DEFAULT_MAX_MESSAGE
from ..errors import DuplicateToolError, ToolgateError
from ..model import ImplementationKind, SourceFormat, Tool
from ..model.effects import ToolHints
from ..model.hidden_text import tool_findings
from ..model.policy import AccessPolicy
from ..registry import RegisteredTool, Registry
from ..secrets import SecretResolver
from ..stores.tool_pins import ToolPins
from ._common.diagnostics import Diagnostic, Severity

if TYPE_CHECKING:
    from typing import Self

    from ..backends import Backend
    from ..sandbox.runner import Sandbox
    from .mcp_server.source import McpServers

__all__ = [
    "THIRD_PARTY_FORMATS",
    "DeclarationSource",
    "SourceAlert",
    "SourceContext",
    "SourceLoad",
    "SourceSet",
]

log = logging.getLogger("toolgate.sources")

#: Declaration formats whose texts someone other than the operator wrote (a plugin's or a
#: capability's author): a tool whose texts hide something is held until accepted. Tool
#: folders, Python functions and resources are the operator's own (flagged, not held); MCP
#: servers are checked by :mod:`.mcp_pinning`.
THIRD_PARTY_FORMATS = frozenset(
    {SourceFormat.PLUGIN, SourceFormat.CAPABILITY, SourceFormat.EXTENSION_INFO}
)
#: The pin-store key under which accepted third-party definitions are kept.
_PIN_KEY = "declared-tools"


@dataclass(frozen=True, slots=True)
class SourceAlert:
    """Something a source wants the operator to see (a plugin's ``resolveTools`` alerts)."""

    source: str
    """The source's id (plugin id, capability id…) or location."""
    level: Literal["info", "warning"]
    message: str


@dataclass
class SourceLoad:
    """What one load of a source produced."""

    entries: list[RegisteredTool] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    alerts: list[SourceAlert] = field(default_factory=list)
    policies: list[AccessPolicy] = field(default_factory=list)
    """Access policies declared next to the tools (Kubernetes-style ``kind: Policy``)."""


@dataclass(frozen=True)
class SourceContext:
    """What the gateway lends a source while it loads and binds tools."""

    secrets: SecretResolver = field(default_factory=lambda: SecretResolver(None, None))
    """Secret values by scope (connections, ``secretRef``); sources only check presence."""
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """The gateway's environment (plugins' ``env`` snapshots are taken from it at load time)."""
    script_availability: Callable[[Tool], str | None] = lambda tool: None
    """Why a script tool cannot run here (missing runtime), for tools bound to tool folders."""
    home: Path | None = None
    """``$TOOLGATE_HOME``, when the gateway was built from a configuration."""
    sandbox: Sandbox | None = None
    """The process sandbox for compartment-mode tools (``None``: the gateway has none)."""
    tool_pins: ToolPins = field(default_factory=ToolPins)
    """The accepted definitions of upstream tools (MCP servers), opened on first use
    (default: in memory, for this gateway's lifetime)."""
    mcp_max_message: int = DEFAULT_MAX_MESSAGE
    """Bytes of one message from an upstream MCP server (``mcp.max_message_bytes``), for the
    servers whose spec sets none."""


class DeclarationSource(ABC):
    """One declaration (file, folder or package) in one format.

    :meth:`load` reads and binds the declarations; it must not run any tool. A source whose tools
    change by themselves (an MCP server's list, a connection being made) calls the ``changed``
    callback it got in :meth:`start`, and the :class:`SourceSet` reloads it.
    """

    format: ClassVar[SourceFormat]

    def __init__(self, location: str) -> None:
        self.location = location
        """The file, folder or package the declarations come from."""

    @classmethod
    def claims(cls, path: Path, document: Any) -> bool:
        """Whether a parsed JSON/YAML file (``document``, its first document) is in this format,
        for ``toolgate validate`` and ``format: auto`` (``path`` is the file). Never runs code."""
        return False

    @classmethod
    @abstractmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> Self:
        """A source for ``path`` (a file or a folder). ``options`` are the format-specific keys of
        its ``sources:`` entry in ``toolgate.yaml``. Reads nothing yet: :meth:`load` does."""

    @classmethod
    @abstractmethod
    def validate(cls, path: Path) -> list[Diagnostic]:
        """Check the declarations at ``path`` against the format's schema without importing or
        running anything; each diagnostic names the file, the JSON pointer and what was
        expected."""

    @abstractmethod
    def load(self) -> SourceLoad:
        """Read the declarations and return the tools with their bindings. Never raises for a
        bad declaration: problems are diagnostics naming the file and the field."""

    def backends(self) -> Mapping[ImplementationKind, Backend]:
        """Backends this source's tools need beyond the built-in Python and script ones."""
        return {}

    def agent_context(
        self, agent: str | None, visible: Callable[[str], bool] = lambda tool_id: True
    ) -> str | None:
        """Text agents should be given about this source's tools (capability guides): only
        about the tools ``visible`` accepts (by id) — the ones this caller may see."""
        return None

    def mcp_servers(self) -> McpServers | None:
        """The MCP servers this source connects to (``None``: none), for reviewing and
        accepting their tools."""
        return None

    def guides(self) -> list[tuple[str, str, str]]:
        """``(namespace, title, guide)`` of each declaration of this source that has a guide
        for agents (a capability's): served as the MCP prompt ``<namespace>__guide``."""
        return []

    async def start(self, changed: Callable[[], None]) -> None:  # noqa: B027 - optional hook
        """Begin background work (connections, watching). ``changed()`` asks for a reload."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`start` acquired."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`load` acquired (connections, processes), from synchronous code
        such as ``Gateway.close``; called after :meth:`aclose` when the gateway was started."""


class SourceSet:
    """Every declaration source of a gateway, applied to its registry."""

    def __init__(
        self,
        registry: Registry,
        check: Callable[[Tool], None],
        *,
        on_reload: Callable[[], None] = lambda: None,
        pins: ToolPins | None = None,
    ) -> None:
        self.registry = registry
        self._pins = pins if pins is not None else ToolPins()
        self._held: dict[str, tuple[DeclarationSource, Tool]] = {}
        """Third-party tools held for hidden text: id → (source, the tool as declared)."""
        self._check = check
        self._on_reload = on_reload
        self.sources: list[DeclarationSource] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop the set was started on; sources added later are started on it too."""
        self._owned: dict[int, set[str]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loads: dict[int, SourceLoad] = {}

    def add(self, source: DeclarationSource) -> SourceLoad:
        """Load a source and register its tools."""
        self.sources.append(source)
        loaded = self.reload(source)
        if self._loop is not None and not self._loop.is_closed():
            self._start_later(source, self._loop)
        return loaded

    def _start_later(self, source: DeclarationSource, loop: asyncio.AbstractEventLoop) -> None:
        # Added to a running gateway: start it on the gateway's loop, from whichever thread
        # added it, so its connections and polling run like those of the first sources.
        coroutine = self._start_one(source)
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            task = loop.create_task(coroutine)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            asyncio.run_coroutine_threadsafe(coroutine, loop)

    async def _start_one(self, source: DeclarationSource) -> None:
        try:
            await source.start(lambda: self._changed(source))
        except Exception:
            log.exception("starting %s failed", source.location)

    def reload(self, source: DeclarationSource) -> SourceLoad:
        """Load ``source`` again and bring the registry in step with it. Never raises for a
        broken declaration (the source's diagnostics say what is wrong)."""
        try:
            loaded = source.load()
        except Exception as exc:
            log.exception("loading %s failed", source.location)
            loaded = SourceLoad(
                diagnostics=[Diagnostic(source.location, None, f"cannot be loaded: {exc}")]
            )
        owned_before = self._owned.get(id(source), set())
        owned_now: set[str] = set()
        problems = list(loaded.diagnostics)
        for held in [k for k, (s, _) in self._held.items() if s is source]:
            del self._held[held]
        for declared in loaded.entries:
            entry = self._screen(source, declared, problems)
            problem = self._apply(entry, owned_before | owned_now)
            if problem is None:
                owned_now.add(entry.tool.id)
            else:
                problems.append(Diagnostic(source.location, entry.tool.id, problem))
        for tool_id in owned_before - owned_now:
            self.registry.remove(tool_id)
        self._owned[id(source)] = owned_now
        result = SourceLoad(loaded.entries, problems, loaded.alerts, loaded.policies)
        self._loads[id(source)] = result
        self._on_reload()
        return result

    def _screen(
        self, source: DeclarationSource, entry: RegisteredTool, problems: list[Diagnostic]
    ) -> RegisteredTool:
        """``entry``, or — for a third-party tool whose texts hide something and whose
        definition was not accepted as it is — the tool held: unavailable, with toolgate's own
        description and no schema, and a reason saying what was found and how to accept it."""
        tool = entry.tool
        if tool.source.format not in THIRD_PARTY_FORMATS or tool.kind is ImplementationKind.MCP:
            return entry
        found = tool_findings(tool)
        if not found:
            return entry
        try:
            pin = self._pins.store().pins(_PIN_KEY).get(tool.id)
        except Exception as exc:  # noqa: BLE001 - fail closed: held, with the reason
            pin, unreadable = None, f" (the accepted definitions cannot be read: {exc})"
        else:
            unreadable = ""
        if pin is not None and pin.definition_hash == tool.definition_hash:
            return entry
        where = f"its {tool.source.format} declaration at {tool.source.location or source.location}"
        reason = (
            f"{tool.id} is held: {where} describes it with hidden text: {'; '.join(found)}"
            f"{unreadable}. It cannot be called until an operator reviews that declaration and "
            f"accepts it: 'toolgate tools accept {tool.id} --hash {tool.definition_hash}'"
        )
        problems.append(Diagnostic(source.location, tool.id, reason, Severity.WARNING))
        self._held[tool.id] = (source, tool)
        held = dataclasses.replace(
            tool,
            description=(
                f"Held by toolgate: the {tool.source.format} that declares this tool describes "
                "it with hidden text; an operator must review and accept it before it can be used."
            ),
            title=None,
            input_schema={"type": "object"},
            output_schema=None,
            hints=ToolHints(),
        )
        return RegisteredTool(held, entry.binding, reason)

    def held(self, tool_id: str) -> Tool | None:
        """The tool as declared, when it is held for hidden text (``None``: it is not)."""
        found = self._held.get(tool_id)
        return None if found is None else found[1]

    def accept(self, tool_id: str, *, by: str | None, expected: str | None = None) -> Tool:
        """Accept a held third-party tool at its declared definition (``expected``: the hash
        the operator reviewed; ``LookupError`` when it is not held or differs) and reload its
        source; returns the tool."""
        found = self._held.get(tool_id)
        if found is None:
            raise LookupError(f"{tool_id} is not held for hidden text: nothing to accept")
        source, tool = found
        if expected is not None and expected != tool.definition_hash:
            raise LookupError(
                f"{tool_id} changed since it was reviewed (reviewed {expected}, now "
                f"{tool.definition_hash}); review it again"
            )
        self._pins.store().accept(
            _PIN_KEY,
            {tool_id: (tool.definition_hash, {"id": tool.id, "description": tool.description})},
            by=by,
            now=time.time(),
        )
        self.reload(source)
        return tool

    def _apply(self, entry: RegisteredTool, owned: set[str]) -> str | None:
        tool = entry.tool
        try:
            self._check(tool)
        except ToolgateError as exc:
            return exc.message
        current = self.registry.get(tool.id)
        if current is not None and current.tool.id == tool.id and tool.id not in owned:
            return (
                f"tool {tool.id} is already registered by the {current.tool.source.format} "
                f"declaration at {current.tool.source.location}"
            )
        try:
            if current is None or current.tool.id != tool.id:
                self.registry.add(entry)
            elif current != entry:
                self.registry.replace(entry)
        except DuplicateToolError as exc:
            return str(exc)
        return None

    def last_load(self, source: DeclarationSource) -> SourceLoad:
        """What the last load of ``source`` produced (diagnostics include duplicate ids)."""
        return self._loads.get(id(source), SourceLoad())

    def diagnostics(self) -> list[Diagnostic]:
        """Problems of the last load of every source."""
        return [d for s in self.sources for d in self._loads.get(id(s), SourceLoad()).diagnostics]

    def policies(self) -> list[AccessPolicy]:
        """Policies of the last load of every source."""
        return [p for s in self.sources for p in self._loads.get(id(s), SourceLoad()).policies]

    def alerts(self) -> list[SourceAlert]:
        """Alerts of the last load of every source."""
        return [a for s in self.sources for a in self._loads.get(id(s), SourceLoad()).alerts]

    def agent_context(
        self, agent: str | None, visible: Callable[[str], bool] = lambda tool_id: True
    ) -> str:
        """Every source's agent context, one paragraph each, about the tools ``visible``
        accepts."""
        parts = [text for s in self.sources if (text := s.agent_context(agent, visible))]
        return "\n\n".join(part.strip() for part in parts)

    async def start(self) -> None:
        """Start every source's background work (and that of sources added later)."""
        self._loop = asyncio.get_running_loop()
        for source in list(self.sources):
            await self._start_one(source)

    def _changed(self, source: DeclarationSource) -> None:
        self.reload(source)

    def close(self) -> None:
        """Release every source's resources (synchronous; never raises)."""
        for source in reversed(self.sources):
            try:
                source.close()
            except Exception:
                log.exception("closing %s failed", source.location)

    async def aclose(self) -> None:
        """Stop every source's background work."""
        self._loop = None
        for source in reversed(self.sources):
            try:
                await source.aclose()
            except Exception:
                log.exception("closing %s failed", source.location)
