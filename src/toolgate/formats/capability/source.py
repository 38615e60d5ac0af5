"""Capability manifests as a declaration source: tools bound, connections checked,
guides given to agents.

A source is one manifest file, or a folder whose manifests (directly in it, or one level down:
one folder per extension) are all loaded. :meth:`CapabilitySource.load` imports each manifest's
``main`` module (only when its code changed since the last load), checks its ``tools`` against
``toolNames`` (:mod:`toolgate.formats.capability.tools`) and registers
``<capability id>:<tool name>``.

**Connections.** ``requiredPreferenceNames`` are secrets kept in the gateway's secret store under
the capability's id (``toolgate connect ID``); ``publicPreferenceNames`` are plain settings kept
next to them, under the same scope. A capability whose secrets are not all set is *not
connected*: its tools are registered but unavailable, and a call returns ``unavailable`` with a
message telling the agent to ask the user to connect the extension in Settings. Connection state
is read when the source loads; a running gateway notices ``toolgate connect`` /
``toolgate disconnect`` within ``refresh_interval`` seconds (a ``sources:`` option, default 10,
``0`` turns polling off) or at once through :meth:`CapabilitySource.refresh`.

**Permissions** of JavaScript/TypeScript tools modules are the operator's to grant: the
``permissions`` option (``{network: [api.notion.com], time: true}``; see
:mod:`toolgate.formats.capability.js`). Python tools modules run in the gateway's process and
are not affected by it.

**Handlers** are called as ``handler(input, ctx)``: ``input`` a private copy of the arguments,
``ctx`` a :class:`CapabilityContext` whose ``secrets`` are this capability's (and no other's) and
whose ``config`` holds its public settings. Values of the secrets are masked in what a handler
returns or raises, so they reach neither the model nor the audit log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import inspect
import logging
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

from ..._json import thaw
from ...backends.base import BackendUnavailableError
from ...backends.js_host import JsHosts
from ...errors import ConfigError, ToolError
from ...model import Permissions, SourceFormat
from ...python.binding import PythonBinding
from ...python.context import ToolContext
from ...registry import RegisteredTool
from ...secrets import SecretStore, store_problem
from .._common.diagnostics import Diagnostic, Severity
from .._common.javascript import JS_SUFFIXES
from .._common.python_files import NotAModuleError, import_file
from .._common.safe_yaml import YamlError, load_yaml
from ..declarations import DeclarationSource, SourceContext, SourceLoad
from .context import CapabilityContext
from .js import JsHandler, js_capability_tools, permissions_option
from .manifest import CapabilityManifest, is_capability_document, read_manifest
from .masking import mask as _mask
from .masking import masked_error as _masked_error
from .tools import CapabilityTool, build_capability_tools

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "DEFAULT_REFRESH_INTERVAL",
    "CapabilityContext",
    "CapabilitySource",
    "Connection",
    "LoadedCapability",
    "check_connection",
]

log = logging.getLogger("toolgate.sources")

#: Seconds between checks of the connections while the gateway runs.
DEFAULT_REFRESH_INTERVAL = 10.0
_OPTIONS = ("refresh_interval", "permissions")
_MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")
# The keyword the backend passes the ToolContext under. Not a valid identifier on purpose, so
# it can never be the name of an argument the handler expects.
_CONTEXT_PARAM = "__toolgate context__"
# The keyword the outcome's metadata reaches a JavaScript handler under (never a user's).
_METADATA_PARAM = "__toolgate metadata__"


@dataclass(frozen=True, slots=True)
class Connection:
    """Whether a capability is connected, and if not, why."""

    capability: str
    title: str
    missing: tuple[str, ...] = ()
    """Required secrets that are not set (names only, never values)."""
    problem: str | None = None
    """Why the secret store cannot be read, when it cannot."""

    @property
    def connected(self) -> bool:
        """True when every required secret is set."""
        return not self.missing and self.problem is None

    @property
    def reason(self) -> str | None:
        """Why the tools cannot run, written for the model; ``None`` when connected."""
        if self.problem is not None:
            return (
                f"the {self.title} extension's connection cannot be read ({self.problem}). "
                f"Tell the user, who can check it with 'toolgate connections'."
            )
        if self.missing:
            return (
                f"the {self.title} extension is not connected (missing: "
                f"{', '.join(self.missing)}). Ask the user to connect {self.title} in Settings "
                f"(toolgate connect {self.capability}), then call this tool again."
            )
        return None


def check_connection(manifest: CapabilityManifest, store: SecretStore | None) -> Connection:
    """The connection state of ``manifest``'s capability in ``store`` (reads names, keeps no
    values)."""
    required = manifest.required_preferences
    if not required:
        return Connection(manifest.id, manifest.title)
    if store is None:
        return Connection(manifest.id, manifest.title, required, "this gateway has no secret store")
    problem = store_problem(store)
    missing = tuple(name for name in required if not store.get(manifest.id, name))
    return Connection(manifest.id, manifest.title, missing, problem)


@dataclass(frozen=True, slots=True)
class LoadedCapability:
    """One capability as the last load saw it."""

    manifest: CapabilityManifest
    connection: Connection
    tool_ids: tuple[str, ...]
    """The tools registered for it (fewer than ``toolNames`` when definitions are broken)."""


class CapabilitySource(DeclarationSource):
    """Capability manifests (a file, or a folder of them) and their Python tools."""

    format: ClassVar[SourceFormat] = SourceFormat.CAPABILITY

    def __init__(
        self,
        path: Path,
        context: SourceContext,
        *,
        refresh_interval: float = DEFAULT_REFRESH_INTERVAL,
        permissions: Permissions | None = None,
    ) -> None:
        path = path.absolute()
        super().__init__(str(path))
        self.path = path
        self.context = context
        self.refresh_interval = refresh_interval
        self.permissions = permissions
        """What the operator grants the JavaScript tools modules here (``None``: nothing)."""
        self._capabilities: tuple[LoadedCapability, ...] = ()
        self._modules: dict[Path, tuple[str, ModuleType]] = {}
        self._changed: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.js_hosts = JsHosts()
        """The warm JavaScript host processes of JavaScript/TypeScript tools modules."""

    # -- the DeclarationSource contract ---------------------------------------------------------

    @classmethod
    def claims(cls, path: Path, document: Any) -> bool:
        """A JSON/YAML document with an ``aiCapability`` object."""
        return is_capability_document(document)

    @classmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> Self:
        """Options: ``refresh_interval`` (seconds between connection checks, ``0`` = never) and
        ``permissions`` (what JavaScript tools modules may use: ``time``, ``random``,
        ``network``, ``env``, ``fs``; relative ``fs`` prefixes are taken against the source's
        folder). Raises :class:`ConfigError` naming the source and the field."""
        for key in options:
            if key not in _OPTIONS:
                raise ConfigError(
                    f"{path}: unknown option {key!r} for a capability source; known: "
                    f"{', '.join(_OPTIONS)}"
                )
        interval = options.get("refresh_interval", DEFAULT_REFRESH_INTERVAL)
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
            raise ConfigError(
                f"{path}: options.refresh_interval must be a number of seconds >= 0, "
                f"not {interval!r}"
            )
        permissions = None
        if "permissions" in options:
            folder = path.absolute() if path.is_dir() else path.absolute().parent
            permissions = permissions_option(options["permissions"], str(path), folder)
        return cls(path, context, refresh_interval=float(interval), permissions=permissions)

    @classmethod
    def validate(cls, path: Path) -> list[Diagnostic]:
        """Check every manifest at ``path`` (and that its ``main`` exists); imports nothing."""
        files, problems = _manifest_files(path)
        for file in files:
            problems.extend(read_manifest(file).diagnostics)
        return problems

    def load(self) -> SourceLoad:
        """Import each manifest's tools module, bind its tools, and mark them unavailable while
        the capability is not connected. A broken module or definition is a diagnostic; the
        other capabilities and tools keep loading."""
        files, diagnostics = _manifest_files(self.path)
        result = SourceLoad(diagnostics=diagnostics)
        loaded: list[LoadedCapability] = []
        seen: dict[str, Path] = {}
        for file in files:
            check = read_manifest(file)
            result.diagnostics.extend(check.diagnostics)
            manifest = check.manifest
            if manifest is None:
                continue
            if manifest.id in seen:
                result.diagnostics.append(
                    Diagnostic(
                        str(file),
                        "/aiCapability/id",
                        f"capability {manifest.id!r} is already declared by {seen[manifest.id]}",
                    )
                )
                continue
            seen[manifest.id] = file
            connection = check_connection(manifest, self.context.secrets.store)
            entries = self._tools(manifest, connection, result.diagnostics)
            result.entries.extend(entries)
            loaded.append(LoadedCapability(manifest, connection, tuple(e.tool.id for e in entries)))
        self._capabilities = tuple(loaded)
        return result

    def agent_context(
        self, agent: str | None, visible: Callable[[str], bool] = lambda tool_id: True
    ) -> str | None:
        """The guide of each connected capability, and a one-line "connect it in Settings"
        hint for each unconnected one — only capabilities with a loaded tool the caller may
        see (``visible``), naming only those tools."""
        parts: list[str] = []
        for capability in self._capabilities:
            shown = [tool_id for tool_id in capability.tool_ids if visible(tool_id)]
            if not shown:
                continue
            manifest = capability.manifest
            tools = ", ".join(shown)
            if capability.connection.connected:
                if manifest.guide:
                    parts.append(f"{manifest.title} (tools {tools}): {manifest.guide}")
            else:
                parts.append(
                    f"{manifest.title} is not connected (tools {tools}): before reading or "
                    f"writing {manifest.title} data, ask the user to connect {manifest.title} in "
                    f"Settings (toolgate connect {manifest.id})."
                )
        return "\n\n".join(parts) or None

    def guides(self) -> list[tuple[str, str, str]]:
        """``(namespace, title, guide)`` of each loaded capability with a guide and a tool (its
        namespace is its tools')."""
        found: list[tuple[str, str, str]] = []
        for capability in self._capabilities:
            manifest = capability.manifest
            if manifest.guide and capability.tool_ids:
                namespace = capability.tool_ids[0].rpartition(":")[0]
                found.append((namespace, manifest.title, manifest.guide))
        return found

    async def start(self, changed: Callable[[], None]) -> None:
        """Check the connections every ``refresh_interval`` seconds; reload on a change."""
        self._changed = changed
        if self.refresh_interval > 0 and self._task is None:
            self._task = asyncio.create_task(self._poll(), name=f"capabilities {self.location}")

    async def aclose(self) -> None:
        """Stop checking the connections."""
        task, self._task = self._task, None
        self._changed = None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.js_hosts.aclose()

    def close(self) -> None:
        """Stop the JavaScript host processes."""
        self.js_hosts.close()

    # -- connections ----------------------------------------------------------------------------

    @property
    def capabilities(self) -> tuple[LoadedCapability, ...]:
        """The capabilities of the last load, with their connection state then."""
        return self._capabilities

    def connection(self, capability_id: str) -> Connection | None:
        """The connection state of a capability of this source now (``None``: not one of its
        capabilities)."""
        for capability in self._capabilities:
            if capability.manifest.id == capability_id:
                return check_connection(capability.manifest, self.context.secrets.store)
        return None

    def connections_changed(self) -> bool:
        """Whether any capability's connection state differs from the last load."""
        store = self.context.secrets.store
        return any(check_connection(c.manifest, store) != c.connection for c in self._capabilities)

    def refresh(self) -> bool:
        """Check the connections now. When one changed, ask the gateway to reload this source
        (a started gateway; otherwise reload it with ``gateway.declarations.reload(source)``).
        Returns whether anything changed."""
        if not self.connections_changed():
            return False
        if self._changed is not None:
            self._changed()
        return True

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            try:
                # Keyring reads may block (D-Bus, a locked keychain): not on the event loop.
                if await asyncio.to_thread(self.connections_changed) and self._changed:
                    self._changed()
            except Exception:
                log.exception("checking the connections of %s failed", self.location)

    # -- tools ----------------------------------------------------------------------------------

    def _tools(
        self, manifest: CapabilityManifest, connection: Connection, problems: list[Diagnostic]
    ) -> list[RegisteredTool]:
        listed: Any
        digest: str | None
        if manifest.main.suffix in JS_SUFFIXES:
            try:
                listed, digest = js_capability_tools(
                    manifest,
                    self.js_hosts,
                    self.context.sandbox,
                    self.permissions,
                    self.context.environ,
                )
            except ToolError as exc:
                problems.append(Diagnostic(str(manifest.main), None, f"{manifest.id}: {exc}"))
                return []
        else:
            module, digest = self._import(manifest, problems)
            if module is None:
                return []
            listed = getattr(module, "tools", None)
        check = build_capability_tools(
            manifest,
            listed,
            digest=digest,
            reserved_properties=(_CONTEXT_PARAM, _METADATA_PARAM),
        )
        problems.extend(check.diagnostics)
        return [
            RegisteredTool(item.tool, self._bind(manifest, item), connection.reason)
            for item in check.tools
        ]

    def _import(
        self, manifest: CapabilityManifest, problems: list[Diagnostic]
    ) -> tuple[ModuleType | None, str | None]:
        """The tools module, imported again only when its code changed."""
        main = manifest.main
        try:
            digest = _code_digest(main)
        except OSError as exc:
            problems.append(Diagnostic(str(main), None, f"cannot read the tools module: {exc}"))
            return None, None
        cached = self._modules.get(main)
        if cached is not None and cached[0] == digest:
            return cached[1], digest
        is_package = main.is_dir()
        file = main / "__init__.py" if is_package else main
        safe_id = manifest.id.replace(".", "_").replace("-", "_")
        name = f"_toolgate_capabilities.{safe_id}_{digest[:12]}"
        try:
            module = import_file(file, name, search_locations=[str(main)] if is_package else None)
        except NotAModuleError:
            problems.append(Diagnostic(str(main), None, "cannot be imported as a Python module"))
            return None, None
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken module is a diagnostic
            _forget(name)
            problems.append(Diagnostic(str(main), None, _import_failure(exc, main)))
            return None, None
        if cached is not None:
            _forget(cached[1].__name__)
        self._modules[main] = (digest, module)
        return module, digest

    def _bind(self, manifest: CapabilityManifest, item: CapabilityTool) -> PythonBinding:
        handler = item.handler
        store_of = self._store
        is_async = _is_async(handler)
        # A JavaScript handler records what ran it (and its egress) in the outcome's metadata.
        wants_metadata = isinstance(handler, JsHandler)

        def context_for(context: ToolContext) -> CapabilityContext:
            store = store_of()
            # Re-checked on every call: a capability disconnected while the gateway runs stops
            # at once, before the next refresh marks its tools unavailable.
            connection = check_connection(manifest, store)
            if not connection.connected:
                raise BackendUnavailableError(connection.reason)
            config = dict(context.config)
            for name in manifest.public_preferences:
                value = None if store is None else store.get(manifest.id, name)
                if value is not None:
                    config[name] = value
            base = {f.name: getattr(context, f.name) for f in dataclasses.fields(ToolContext)}
            base["config"] = MappingProxyType(config)
            return CapabilityContext(**base, capability=manifest.id, connected=True)

        def prepare(arguments: dict[str, Any]) -> tuple[dict[str, Any], CapabilityContext]:
            context = arguments.pop(_CONTEXT_PARAM)
            # A private copy: what the handler changes never reaches the audit record.
            return thaw(arguments), context_for(context)

        if is_async:

            async def run_async(**arguments: Any) -> Any:
                metadata = arguments.pop(_METADATA_PARAM, None)
                data, ctx = prepare(arguments)
                try:
                    if wants_metadata:
                        return _mask(await handler(data, ctx, metadata), ctx.secrets)
                    return _mask(await handler(data, ctx), ctx.secrets)
                except Exception as exc:  # noqa: BLE001 - re-raised, with secrets masked
                    raise _masked_error(exc, ctx.secrets) from None

            func: Callable[..., Any] = run_async
        else:

            def run_sync(**arguments: Any) -> Any:
                data, ctx = prepare(arguments)
                try:
                    result = handler(data, ctx)
                    if inspect.isawaitable(result):
                        if inspect.iscoroutine(result):
                            result.close()
                        raise ToolError(
                            f"the handler of {item.tool.id} returned an awaitable from a plain "
                            "function; declare it 'async def'"
                        )
                    return _mask(result, ctx.secrets)
                except Exception as exc:  # noqa: BLE001 - re-raised, with secrets masked
                    raise _masked_error(exc, ctx.secrets) from None

            func = run_sync
        return PythonBinding(
            func=func,
            is_async=is_async,
            context_param=_CONTEXT_PARAM,
            metadata_param=_METADATA_PARAM if wants_metadata else None,
            build_confirmation=_confirmation_builder(item.build_confirmation),
        )

    def _store(self) -> SecretStore | None:
        return self.context.secrets.store


# -- helpers -------------------------------------------------------------------------------------


def _manifest_files(path: Path) -> tuple[list[Path], list[Diagnostic]]:
    """The manifests at ``path``: the file itself, or the manifests directly in a folder and in
    its sub-folders (one extension per folder)."""
    if path.is_file():
        return [path], []
    if not path.is_dir():
        return [], [Diagnostic(str(path), None, "no such file or folder")]
    found: list[Path] = []
    problems: list[Diagnostic] = []
    folders = [
        path,
        *sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith(".")),
    ]
    for folder in folders:
        for file in sorted(folder.iterdir()):
            if file.suffix not in _MANIFEST_SUFFIXES or not file.is_file():
                continue
            try:
                document = load_yaml(file.read_text(encoding="utf-8"), source=str(file))
            except (OSError, UnicodeDecodeError, YamlError) as exc:
                problems.append(
                    Diagnostic(
                        str(file),
                        None,
                        f"skipped: not readable as JSON or YAML ({exc})",
                        Severity.WARNING,
                    )
                )
                continue
            if is_capability_document(document):
                found.append(file)
    if not found:
        problems.append(
            Diagnostic(
                str(path),
                None,
                "no capability manifest here (a JSON or YAML file with an aiCapability object, "
                "in this folder or one level down)",
            )
        )
    return found, problems


def _code_digest(main: Path) -> str:
    """SHA-256 over the module's source files, so approvals end when the code changes."""
    hasher = hashlib.sha256()
    files = sorted(main.rglob("*.py")) if main.is_dir() else [main]
    for file in files:
        hasher.update(str(file.relative_to(main) if main.is_dir() else file.name).encode())
        hasher.update(b"\0")
        hasher.update(file.read_bytes())
        hasher.update(b"\0")
    return hasher.hexdigest()


def _forget(name: str) -> None:
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def _import_failure(exc: BaseException, main: Path) -> str:
    """``failed to import: ValueError: boom (tools.py, line 12)`` — the deepest frame that is
    the extension's own code."""
    root = main if main.is_dir() else main.parent
    where = ""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        try:
            inside = Path(frame.filename).resolve().is_relative_to(root)
        except (OSError, ValueError):
            inside = False
        if inside:
            where = f" ({Path(frame.filename).name}, line {frame.lineno})"
            break
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        where = f" ({Path(exc.filename or main).name}, line {exc.lineno})"
    return f"the tools module failed to import: {type(exc).__name__}: {exc}{where}"


def _is_async(function: Callable[..., Any]) -> bool:
    call = getattr(function, "__call__", None)  # noqa: B004 - callable objects
    return inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(call)


def _confirmation_builder(
    builder: Callable[[Mapping[str, Any]], Any] | None,
) -> Callable[[Mapping[str, Any]], Any] | None:
    """``buildConfirmation(input)``, accepting an object as well as a mapping back."""
    if builder is None:
        return None

    def build(arguments: Mapping[str, Any]) -> Any:
        result = builder(thaw(arguments))
        if result is None or isinstance(result, Mapping):
            return result
        facts = []
        for fact in getattr(result, "facts", None) or ():
            if isinstance(fact, Mapping):
                facts.append(fact)
            else:
                facts.append(
                    {"label": getattr(fact, "label", ""), "value": getattr(fact, "value", "")}
                )
        risk = next(
            (
                getattr(result, name)
                for name in ("risk", "riskLabel", "risk_label")
                if getattr(result, name, None) is not None
            ),
            None,
        )
        return {"title": getattr(result, "title", None), "risk": risk, "facts": facts}

    return build
