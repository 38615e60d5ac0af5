"""The gateway's resources and prompts: which a caller sees, and reading or getting one.

**Who sees what.** A caller sees the resources, templates and prompts of namespace ``N`` only
if it may see tools of ``N``: the same decision as ``gateway.list_tools(agent=...,
namespaces=...)`` — tool safety, the operator's policies, the OAuth token's scope namespaces.
A namespace with no tool at all (a server offering only resources) is decided for a stand-in
read-only tool ``N:*`` of that namespace, so a policy denying the namespace denies it too.
Something a caller may not see does not exist for it: reading or getting it is answered like
reading what does not exist, and the audit log records it ``forbidden`` for the operator.

**Names.** A prompt is named like a tool: ``<namespace>__<name>``
(:func:`~toolgate.model.names.to_mcp_name` of ``<namespace>:<name>``). A resource keeps
its upstream URI (:mod:`.uris` says why, and the one exception, a URI two servers list).
toolgate's own prompts: ``<namespace>__guide``, a capability's guide (:data:`GUIDE_PROMPT`).

**Audit.** Every read and get is one audit record, like a call: ``tool_id`` is the target as the
client named it (``resource:<uri>``, ``prompt:<name>``), with the agent, the session, how it
ended and its duration; ``metadata.offering`` says the method, the server and the upstream
name. The contents are not kept: the result is a bounded summary (each content's URI, MIME type
and size; the number of prompt messages), redacted like every record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ..backends.base import BackendUnavailableError, ToolTimeoutError
from ..call_state import new_call_id
from ..errors import ErrorCode, ToolError
from ..model import CallOutcome, CallStatus, SideEffect, Tool
from ..model.names import to_mcp_name
from ..pipeline.observers import FinishedCall
from .uris import matches_template, unwrap, wrap

if TYPE_CHECKING:
    from ..backends.mcp_offerings import Offerings
    from ..formats.declarations import SourceSet
    from ..formats.mcp_server.source import McpServers
    from ..pipeline.authorize import AccessRules
    from ..registry import Registry

__all__ = ["GUIDE_PROMPT", "GatewayOfferings", "OfferingAmbiguous", "OfferingNotFound"]

#: The name (inside its namespace) of the prompt holding a capability's guide.
GUIDE_PROMPT = "guide"
#: Contents summarized in one audit record.
_AUDITED_CONTENTS = 20
#: Characters of the target (``resource:<uri>``) an audit record keeps.
_MAX_TARGET = 2_100
#: Seconds a read of an unknown URI waits for listings being refreshed (a server that has just
#: announced a new resource) before it is answered "no such resource".
SETTLE_SECONDS = 5.0


class OfferingNotFound(LookupError):
    """No resource or prompt of this name exists for this caller (none exists, or the caller may
    not see it: answered alike)."""


class OfferingAmbiguous(ValueError):
    """A resource URI matches resources of more than one server (the message names the wrapped
    URIs that tell them apart)."""


class _Catalog(Protocol):
    registry: Registry
    access: AccessRules
    declarations: SourceSet

    def list_tools(
        self, *, agent: str | None = None, namespaces: frozenset[str] | None = None
    ) -> list[Tool]: ...


@dataclass(frozen=True)
class _Server:
    name: str
    namespace: str
    servers: McpServers
    offerings: Offerings


@dataclass(frozen=True)
class _Prompt:
    """One prompt as served: an upstream's (``server``) or a guide (``guide``)."""

    namespace: str
    entry: Mapping[str, Any]
    server: _Server | None = None
    remote: str | None = None
    guide: str | None = None


class GatewayOfferings:
    """The resources and prompts of a gateway (``gateway.offerings``); see the module."""

    def __init__(self, catalog: _Catalog, notify: Callable[[FinishedCall], None]) -> None:
        self._catalog = catalog
        self._notify = notify
        self._stand_ins: dict[str, Tool] = {}
        self._listeners: list[Callable[[], None]] = []
        self._update_listeners: list[Callable[[str, str], None]] = []
        self._watched: set[int] = set()
        self._known: tuple[int, frozenset[str]] | None = None

    # -- the upstreams --------------------------------------------------------------------------

    def _servers(self) -> list[_Server]:
        found: dict[str, _Server] = {}
        for source in self._catalog.declarations.sources:
            servers = source.mcp_servers()
            if servers is None:
                continue
            self._watch(servers)
            for name in servers.server_names():
                if name in found:
                    continue  # the first declaration of a name wins, as for its tools
                offerings = servers.offerings(name)
                if offerings is None:
                    continue
                spec, _snapshot = servers.server(name)
                found[name] = _Server(name, spec.namespace, servers, offerings)
        return [found[name] for name in sorted(found)]

    # -- change listeners -----------------------------------------------------------------------

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` (from any thread) when the resources or prompts may have changed;
        returns a function that removes it."""
        self._listeners.append(listener)
        self._servers()  # start watching the sources declared so far
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def on_resource_updated(self, listener: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``listener(server, upstream uri)`` (from the hub's thread) when an upstream
        says a subscribed resource changed; returns a function that removes it. The listener
        maps it to the URIs its subscribers used (:meth:`subscribe` returns that pair), and
        must be cheap: a hostile upstream may send updates in a flood."""
        self._update_listeners.append(listener)
        self._servers()
        return lambda: (
            self._update_listeners.remove(listener) if listener in self._update_listeners else None
        )

    def _watch(self, servers: McpServers) -> None:
        if id(servers) in self._watched:
            return
        self._watched.add(id(servers))
        servers.on_offerings_changed = self._changed
        servers.on_resource_updated = self._updated

    def _changed(self) -> None:
        for listener in list(self._listeners):
            listener()

    def _updated(self, server: str, uri: str) -> None:
        for listener in list(self._update_listeners):
            listener(server, uri)

    # -- who sees what --------------------------------------------------------------------------

    def _visible(
        self, agent: str | None, namespaces: frozenset[str] | None
    ) -> Callable[[str], bool]:
        allowed = {
            tool.namespace for tool in self._catalog.list_tools(agent=agent, namespaces=namespaces)
        }
        known = self._known_namespaces()

        def visible(namespace: str) -> bool:
            if namespace in allowed:
                return True
            if namespace in known:
                return False
            stand_in = self._stand_ins.get(namespace)
            if stand_in is None:
                stand_in = self._stand_ins[namespace] = Tool(
                    id=f"{namespace}:*",
                    description="",
                    input_schema={"type": "object"},
                    side_effect=SideEffect.READ_ONLY,
                )
            return self._catalog.access.decide(stand_in, agent, namespaces).allowed

        return visible

    def _known_namespaces(self) -> frozenset[str]:
        """Every namespace with a registered tool (kept until the registry changes)."""
        version = self._catalog.registry.version
        cached = self._known
        if cached is None or cached[0] != version:
            names = frozenset(entry.tool.namespace for entry in self._catalog.registry)
            cached = self._known = (version, names)
        return cached[1]

    # -- listings -------------------------------------------------------------------------------

    @staticmethod
    def _shown_uris(servers: Iterable[_Server]) -> dict[tuple[str, str], str]:
        """(server, upstream URI) → the URI shown, decided over ``servers`` — the servers the
        caller sees: a server it may not see neither exists for it nor renames what it is
        shown (a clash between two visible servers wraps both)."""
        listers: dict[str, list[_Server]] = {}
        for server in servers:
            for resource in server.offerings.resources:
                listers.setdefault(str(resource["uri"]), []).append(server)
        shown: dict[tuple[str, str], str] = {}
        for uri, servers in listers.items():
            for server in servers:
                shown[(server.name, uri)] = (
                    uri if len(servers) == 1 else wrap(server.namespace, uri)
                )
        return shown

    def resources(
        self, *, agent: str | None = None, namespaces: frozenset[str] | None = None
    ) -> list[dict[str, Any]]:
        """The ``resources/list`` entries ``agent`` (with credentials allowing ``namespaces``)
        sees, as the upstreams list them (server by server, in their order), URIs as shown."""
        visible = self._visible(agent, namespaces)
        servers = [server for server in self._servers() if visible(server.namespace)]
        shown = self._shown_uris(servers)
        found: list[dict[str, Any]] = []
        for server in servers:
            for resource in server.offerings.resources:
                entry = dict(resource)
                entry["uri"] = shown[(server.name, str(resource["uri"]))]
                found.append(entry)
        return found

    def templates(
        self, *, agent: str | None = None, namespaces: frozenset[str] | None = None
    ) -> list[dict[str, Any]]:
        """The ``resources/templates/list`` entries the caller sees, ``uriTemplate`` as the
        upstream wrote it."""
        visible = self._visible(agent, namespaces)
        return [
            dict(template)
            for server in self._servers()
            if visible(server.namespace)
            for template in server.offerings.templates
        ]

    def _prompts(self) -> dict[str, _Prompt]:
        found: dict[str, _Prompt] = {}
        for source in self._catalog.declarations.sources:
            for namespace, title, guide in source.guides():
                name = to_mcp_name(f"{namespace}:{GUIDE_PROMPT}")
                entry = {
                    "name": name,
                    "title": f"{title}: guide",
                    "description": f"How to use the {title} tools (the capability's guide).",
                }
                found.setdefault(name, _Prompt(namespace, entry, guide=guide))
        for server in self._servers():
            for prompt in server.offerings.prompts:
                remote = str(prompt["name"])
                name = to_mcp_name(f"{server.namespace}:{remote}")
                entry = {**prompt, "name": name}
                found.setdefault(name, _Prompt(server.namespace, entry, server, remote))
        return found

    def prompts(
        self, *, agent: str | None = None, namespaces: frozenset[str] | None = None
    ) -> list[dict[str, Any]]:
        """The ``prompts/list`` entries the caller sees, sorted by name."""
        visible = self._visible(agent, namespaces)
        return [
            dict(prompt.entry)
            for name, prompt in sorted(self._prompts().items())
            if visible(prompt.namespace)
        ]

    # -- resolving ------------------------------------------------------------------------------

    def _resolve(self, uri: str, servers: Iterable[_Server]) -> tuple[_Server, str] | None:
        """The one server ``uri`` names among ``servers`` and its upstream URI; ``None`` for
        none. Raises :class:`OfferingAmbiguous` for more than one."""
        servers = list(servers)
        wrapped = unwrap(uri)
        if wrapped is not None:
            namespace, upstream = wrapped
            for server in servers:
                if server.namespace == namespace:
                    return server, upstream
            return None
        listed = [s for s in servers if any(r["uri"] == uri for r in s.offerings.resources)]
        if not listed:
            listed = [
                s
                for s in servers
                if any(matches_template(str(t["uriTemplate"]), uri) for t in s.offerings.templates)
            ]
        if len(listed) > 1:
            names = ", ".join(wrap(s.namespace, uri) for s in listed)
            raise OfferingAmbiguous(
                f"the resource URI {uri!r} belongs to more than one server; read one of {names}"
            )
        return (listed[0], uri) if listed else None

    def _find(
        self,
        target: str,
        uri: str,
        servers: list[_Server],
        agent: str | None,
        session: str | None,
        started: float,
    ) -> tuple[_Server, str] | None:
        """:meth:`_resolve`, an ambiguity audited before it is raised."""
        try:
            return self._resolve(uri, servers)
        except OfferingAmbiguous as exc:
            self._audit(
                target, agent, session, started, error=(ErrorCode.INVALID_ARGUMENTS, str(exc))
            )
            raise

    @staticmethod
    async def _settle(servers: list[_Server]) -> bool:
        """Wait (bounded, :data:`SETTLE_SECONDS`) until the listings of ``servers`` that are
        being refreshed are; whether any was (only then is a second look worth it). Only the
        caller's visible servers are waited on, and nothing is sent to any server."""
        waited = False
        for server in servers:
            settled = getattr(server.servers, "settled", None)
            if settled is not None and await settled(server.name, SETTLE_SECONDS):
                waited = True
        return waited

    # -- reading and getting --------------------------------------------------------------------

    async def read_resource(
        self,
        uri: str,
        *,
        agent: str | None = None,
        namespaces: frozenset[str] | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        """``resources/read`` of ``uri`` (as shown) for this caller: the upstream's result with
        the URIs it names as shown. Raises :class:`OfferingNotFound`,
        :class:`OfferingAmbiguous`, or the upstream's failure
        (:class:`~toolgate.backends.base.BackendUnavailableError`,
        :class:`~toolgate.backends.base.ToolTimeoutError`, a
        :class:`~toolgate.errors.ToolError` with the server's MCP ``code``). Audited."""
        started = time.time()
        target = f"resource:{uri}"
        visible = self._visible(agent, namespaces)
        everything = self._servers()
        seen = [s for s in everything if visible(s.namespace)]
        found = self._find(target, uri, seen, agent, session, started)
        if found is None and await self._settle(seen):
            # A URI a server has just handed out (a resource_link in a tool's result, with
            # its list_changed on the way): read it once its listing has been refreshed.
            everything = self._servers()
            seen = [s for s in everything if visible(s.namespace)]
            found = self._find(target, uri, seen, agent, session, started)
        if found is None:
            self._refuse(target, uri, everything, agent, session, started, "resource")
        server, upstream = found
        info = {"method": "resources/read", "server": server.name, "uri": upstream}
        try:
            result = await server.servers.offering(server.name, "resources/read", {"uri": upstream})
        except Exception as exc:
            self._audit(target, agent, session, started, error=_failure(exc), info=info)
            raise
        shown = self._shown_uris(seen)
        for content in result.get("contents", ()):
            if isinstance(content, dict) and isinstance(content.get("uri"), str):
                content["uri"] = shown.get((server.name, content["uri"]), content["uri"])
        summary = [_content_summary(c) for c in result.get("contents", ())[:_AUDITED_CONTENTS]]
        self._audit(target, agent, session, started, info=info, summary={"contents": summary})
        return result

    async def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        agent: str | None = None,
        namespaces: frozenset[str] | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        """``prompts/get`` of ``name`` (as listed) with ``arguments``. Raises as
        :meth:`read_resource` does. Audited (without the arguments)."""
        started = time.time()
        target = f"prompt:{name}"
        prompt = self._prompts().get(name)
        if prompt is None or not self._visible(agent, namespaces)(prompt.namespace):
            why = None if prompt is None else "the caller may not see tools of its namespace"
            self._audit(
                target,
                agent,
                session,
                started,
                error=(
                    ErrorCode.FORBIDDEN if why else ErrorCode.TOOL_NOT_FOUND,
                    why or "no such prompt",
                ),
            )
            raise OfferingNotFound(
                f"There is no prompt named {name!r}. List the prompts and use one of their names."
            )
        if prompt.guide is not None:
            result: dict[str, Any] = {
                "description": prompt.entry.get("description"),
                "messages": [{"role": "user", "content": {"type": "text", "text": prompt.guide}}],
                "resultType": "complete",
            }
            self._audit(
                target,
                agent,
                session,
                started,
                info={"method": "prompts/get", "guide": prompt.namespace},
                summary={"messages": 1},
            )
            return result
        assert prompt.server is not None and prompt.remote is not None
        info = {"method": "prompts/get", "server": prompt.server.name, "prompt": prompt.remote}
        params: dict[str, Any] = {"name": prompt.remote}
        if arguments:
            params["arguments"] = dict(arguments)
        try:
            result = await prompt.server.servers.offering(prompt.server.name, "prompts/get", params)
        except Exception as exc:
            self._audit(target, agent, session, started, error=_failure(exc), info=info)
            raise
        messages = result.get("messages")
        count = len(messages) if isinstance(messages, list) else 0
        self._audit(target, agent, session, started, info=info, summary={"messages": count})
        return result

    def locate_subscription(
        self,
        uri: str,
        *,
        agent: str | None = None,
        namespaces: frozenset[str] | None = None,
        session: str | None = None,
    ) -> tuple[str, str]:
        """``(server, upstream uri)`` of the resource ``uri`` names for this caller, checked
        for following: raises :class:`OfferingNotFound` (a refusal is audited),
        :class:`OfferingAmbiguous`, or :class:`~toolgate.errors.ToolError` when its server
        does not take subscriptions through toolgate (audited). Sends nothing."""
        started = time.time()
        target = f"resource:{uri}"
        visible = self._visible(agent, namespaces)
        everything = self._servers()
        found = self._find(
            target, uri, [s for s in everything if visible(s.namespace)], agent, session, started
        )
        if found is None:
            self._refuse(target, uri, everything, agent, session, started, "resource")
        server, upstream = found
        if not server.offerings.subscribe:
            if server.offerings.listen_only:
                message = (
                    f"the MCP server {server.name} speaks MCP 2026-07-28, whose resource "
                    "updates come on a subscriptions/listen stream; toolgate does not follow "
                    "an upstream's resources on that stream, so it cannot subscribe to them"
                )
            else:
                message = f"the MCP server {server.name} does not take resource subscriptions"
            info = {"method": "resources/subscribe", "server": server.name, "uri": upstream}
            self._audit(
                target, agent, session, started, error=(ErrorCode.TOOL_ERROR, message), info=info
            )
            raise ToolError(message)
        return server.name, upstream

    async def subscribe_upstream(
        self,
        key: tuple[str, str],
        *,
        subscribe: bool = True,
        uri: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> None:
        """Send ``resources/subscribe`` (or unsubscribe) for ``key`` (from
        :meth:`locate_subscription`) to its server: the caller's access was checked when the
        key was located. ``uri`` is the caller's spelling, for the audit record. Audited;
        raises the upstream's failure."""
        method = "resources/subscribe" if subscribe else "resources/unsubscribe"
        started = time.time()
        name, upstream = key
        target = f"resource:{uri or upstream}"
        info = {"method": method, "server": name, "uri": upstream}
        server = next((s for s in self._servers() if s.name == name), None)
        try:
            if server is None:
                raise BackendUnavailableError(f"the MCP server {name} is no longer declared")
            await server.servers.offering(name, method, {"uri": upstream})
        except Exception as exc:
            self._audit(target, agent, session, started, error=_failure(exc), info=info)
            raise
        self._audit(target, agent, session, started, info=info)

    async def subscribe(
        self,
        uri: str,
        *,
        subscribe: bool = True,
        agent: str | None = None,
        namespaces: frozenset[str] | None = None,
        session: str | None = None,
    ) -> tuple[str, str]:
        """``resources/subscribe`` (or, ``subscribe=False``, ``resources/unsubscribe``) of
        ``uri`` on its server, for this caller: :meth:`locate_subscription` then
        :meth:`subscribe_upstream`; returns ``(server, upstream uri)``."""
        caller = {"agent": agent, "session": session}
        key = self.locate_subscription(uri, namespaces=namespaces, **caller)
        await self.subscribe_upstream(key, subscribe=subscribe, uri=uri, **caller)
        return key

    # -- audit ----------------------------------------------------------------------------------

    def _refuse(
        self,
        target: str,
        uri: str,
        everything: list[_Server],
        agent: str | None,
        session: str | None,
        started: float,
        what: str,
    ) -> NoReturn:
        hidden = _hidden_owner(uri, everything)
        if hidden is not None:
            reason = f"the caller may not see tools of the namespace {hidden!r}"
            self._audit(target, agent, session, started, error=(ErrorCode.FORBIDDEN, reason))
        else:
            self._audit(
                target, agent, session, started, error=(ErrorCode.TOOL_NOT_FOUND, f"no such {what}")
            )
        raise OfferingNotFound(
            f"There is no {what} {uri!r}. List the resources and templates and use one of them."
        )

    def _audit(
        self,
        target: str,
        agent: str | None,
        session: str | None,
        started: float,
        *,
        error: tuple[ErrorCode, str] | None = None,
        info: Mapping[str, Any] | None = None,
        summary: Any = None,
    ) -> None:
        call_id = new_call_id()
        metadata = {"offering": dict(info or {})}
        if len(target) > _MAX_TARGET:  # a client's URI or name: bounded in the log
            target = target[: _MAX_TARGET - 1] + "…"
        outcome = CallOutcome(
            status=CallStatus.OK if error is None else CallStatus.ERROR,
            tool_id=target,
            call_id=call_id,
            content=summary,
            code=None if error is None else error[0],
            message=None if error is None else error[1],
            duration=max(0.0, time.time() - started),
            metadata=metadata,
        )
        self._notify(
            FinishedCall(
                call_id=call_id,
                tool_id=target,
                tool=None,
                arguments={},
                agent=agent,
                session_id=session,
                workspace=None,
                started_at=started,
                outcome=outcome,
            )
        )


def _hidden_owner(uri: str, servers: list[_Server]) -> str | None:
    """The namespace of a server that names ``uri`` by its wrapped form or its listing — for
    the operator's audit record only. Templates are not matched here: a refusal must cost a
    caller no more than a lookup (the caller may not see these servers at all)."""
    wrapped = unwrap(uri)
    for server in servers:
        if wrapped is not None:
            if server.namespace == wrapped[0]:
                return server.namespace
        elif any(resource["uri"] == uri for resource in server.offerings.resources):
            return server.namespace
    return None


def _failure(exc: BaseException) -> tuple[ErrorCode, str]:
    if isinstance(exc, BackendUnavailableError):
        return ErrorCode.UNAVAILABLE, str(exc)
    if isinstance(exc, ToolTimeoutError):
        return ErrorCode.TIMEOUT, str(exc)
    return ErrorCode.TOOL_ERROR, str(exc)


def _content_summary(content: Any) -> dict[str, Any]:
    if not isinstance(content, Mapping):
        return {}
    summary: dict[str, Any] = {"uri": content.get("uri"), "mimeType": content.get("mimeType")}
    if isinstance(content.get("text"), str):
        summary["text_chars"] = len(content["text"])
    if isinstance(content.get("blob"), str):
        summary["blob_chars"] = len(content["blob"])
    return summary
