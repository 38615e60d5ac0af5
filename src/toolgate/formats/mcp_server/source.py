"""``MCPServer`` resources: the tools of remote MCP servers, kept in step with the servers.

The resource source (``kind: MCPServer`` and ``kind: Tool`` with ``type: mcp``) hands the parsed
servers and the ``Tool`` resources that name them to :class:`McpServers`, which

* connects to each server with the official MCP SDK client (stdio: ``command``/``args``/``env``;
  streamable HTTP: ``url`` with an optional bearer token from the secret store) on one private
  event loop thread, with bounded timeouts everywhere;
* reaches a streamable HTTP server the way REST tools reach their endpoints (issue 8, SSRF): public
  addresses only, unless the operator's ``sandbox.network_grants`` has an entry for the server,
  keyed ``MCPServer:<metadata.name>`` (one connection serves all of the server's tools, so the
  grant is the server's, not a tool id's), e.g. ``MCPServer:everything: [127.0.0.1/32]``.
  Metadata addresses and the gateway's own serve ports are refused even then; a refused server's
  tools are unavailable with the reason;
* registers the server's tools in the server's namespace — or, when ``Tool`` resources name the
  server, only those tools, under the resources' own ids — mapped by :mod:`.mcp_tools` (the
  operator's level wins over the server's annotations, which stay hints);
* keeps the last known tools of a server that went down, unavailable with the reason, reconnects
  with a capped backoff, and asks for a reload (``changed()``) whenever a server's tool list or
  availability changes;
* pins each tool's definition when it is accepted and holds a new or changed tool, or one whose
  texts hide something, until an operator accepts it (:mod:`.mcp_pinning`, ``spec.pin``).

The CLI builds its gateway without ``start()``: the first :meth:`McpServers.entries` then connects
(waiting at most the servers' connect timeouts), so ``toolgate tools list`` and ``toolgate call``
see and run MCP tools too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...model import McpEntry, Tool
from ...registry import RegisteredTool
from ...sandbox.addresses import parse_cidr_grants
from ...secrets import GLOBAL_SCOPE
from ...stores.tool_pins import Pin
from .._common.diagnostics import Diagnostic, Severity
from ..declarations import SourceContext
from .pinning import (
    ToolReview,
    held_tool,
    is_first_listing,
    listing_entries,
    needs_passed_on,
    review_listing,
)
from .spec import McpServerSpec, parse_mcp_server
from .tools import merge_ref, tool_from_listing

if TYPE_CHECKING:
    from ...backends.base import Backend
    from ...backends.mcp_client import Launch, McpHub, Snapshot
    from ...backends.mcp_offerings import Offerings

__all__ = ["AcceptError", "McpServerSpec", "McpServers", "parse_mcp_server"]

log = logging.getLogger("toolgate.mcp")

_Mapped = tuple[dict[str, Tool], dict[str, Diagnostic]]

#: Added to the longest connect timeout when the first ``entries()`` waits for the servers.
_WAIT_MARGIN = 5.0
#: Seconds between two looks at the pins while a tool is held (another process or replica may
#: accept it).
PIN_RECHECK = 2.0

_Reviews = dict[str, ToolReview]


class AcceptError(LookupError):
    """What an operator asked to accept cannot be accepted (the message says why and what to
    do)."""


class McpServers:
    """The MCP servers of one resource source and the tools they provide."""

    def __init__(self, context: SourceContext) -> None:
        self._context = context
        self._servers: dict[str, McpServerSpec] = {}
        self._refs: list[Tool] = []
        self._problems: list[Diagnostic] = []
        self._hub: McpHub | None = None
        self._closed = False
        self._changed: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reload_pending = False
        self._seen_changes = 0
        self._lock = threading.Lock()
        self._mapped: dict[str, tuple[McpServerSpec, Snapshot, _Mapped]] = {}
        """The last mapping of each server's listing: reloads that change nothing reuse it."""
        self._reviews: dict[str, _Reviews] = {}
        """The last review of each server's listing against the pins."""
        self._pin_problems: dict[str, str] = {}
        """Servers whose pins could not be read (their tools are all held), and why."""
        self._pin_generation: int | None = None
        self._pin_task: asyncio.Task[None] | None = None
        self.on_offerings_changed: Callable[[], None] | None = None
        """Told (on the hub's thread) whenever a server's listing or availability changes: the
        resources and prompts served may have changed (:mod:`toolgate.offerings`)."""
        self.on_resource_updated: Callable[[str, str], None] | None = None
        """Told ``(server, uri)`` (on the hub's thread) when a server says a subscribed
        resource changed."""

    # -- configuration --------------------------------------------------------------------------

    def configure(self, servers: list[McpServerSpec], refs: list[Tool]) -> None:
        """Set the servers and the ``Tool`` resources that name them (``kind`` MCP, ``entry``
        an :class:`~toolgate.model.McpEntry`). Called on every load; connections whose spec did
        not change are kept, changed ones restart, removed ones end."""
        by_name: dict[str, McpServerSpec] = {}
        problems: list[Diagnostic] = []
        for spec in servers:
            first = by_name.get(spec.name)
            if first is not None:
                problems.append(
                    Diagnostic(
                        spec.location,
                        f"{spec.pointer}/metadata/name",
                        f"another MCPServer named {spec.name} is declared at {first.location}"
                        f"{first.pointer}; this one is ignored",
                    )
                )
                continue
            by_name[spec.name] = spec
        self._servers, self._refs, self._problems = by_name, list(refs), problems
        if self._hub is not None and not self._closed:
            self._sync(self._hub)

    def _ensure_hub(self) -> McpHub:
        if self._hub is None:
            from ...backends.mcp_client import McpHub

            self._hub = McpHub(self._hub_changed)
            self._hub.on_resource_updated = self._resource_updated
        return self._hub

    def _sync(self, hub: McpHub) -> None:
        from ...backends.mcp_client import Timing

        for spec in self._servers.values():
            max_message = spec.max_message_bytes or self._context.mcp_max_message
            hub.ensure(
                spec.name,
                # A changed grant restarts the connection as a changed spec does.
                (spec, self._network(spec), max_message),
                functools.partial(self._launch, spec),
                Timing(
                    connect=spec.connect_timeout,
                    probe_period=spec.probe_period,
                    probe_timeout=spec.probe_timeout,
                    reconnect_initial=spec.reconnect_initial,
                    reconnect_max=spec.reconnect_max,
                ),
                max_message=max_message,
            )
        hub.retain(self._servers)

    # -- launching (on the hub's thread, before every connection attempt) -----------------------

    def _secret(self, spec: McpServerSpec, name: str, purpose: str) -> str:
        from ...backends.mcp_client import LaunchUnavailable

        resolver = self._context.secrets
        try:
            value = resolver.static.get(name)
            if value is None and resolver.store is not None:
                value = resolver.store.get(GLOBAL_SCOPE, name)
        except Exception as exc:  # noqa: BLE001 - a failing keyring is a reason, not a crash
            raise LaunchUnavailable(
                f"the secret {name!r} of the MCP server {spec.name} cannot be read ({exc})"
            ) from None
        if value is None:
            raise LaunchUnavailable(
                f"the MCP server {spec.name} needs the secret {name!r} ({purpose}), which is not "
                f"set; ask the operator to set it with 'toolgate secrets set {name}'"
            )
        return value

    def _network(self, spec: McpServerSpec) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """The operator's CIDR grant for the server and the gateway's own ports (no sandbox:
        no grant, public addresses only)."""
        from ...backends.mcp_client import grant_key

        sandbox = self._context.sandbox
        if sandbox is None or spec.command is not None:
            return (), ()
        grants = tuple(sandbox.cidr_grants.get(grant_key(spec.name), ()))
        return grants, tuple(sandbox.deny_ports)

    def _launch(self, spec: McpServerSpec) -> Launch:
        from ...backends.mcp_client import HttpLaunch, LaunchUnavailable, StdioLaunch, grant_key

        if spec.command is None:
            assert spec.url is not None
            grants, deny_ports = self._network(spec)
            try:
                # toolgate.yaml is checked when loaded; a Sandbox built in code is not.
                parse_cidr_grants(grants)
            except ValueError as exc:
                raise LaunchUnavailable(
                    f"the MCP server {spec.name} is not connected: its network grant "
                    f"{grant_key(spec.name)} is refused ({exc})"
                ) from None
            token = None
            if spec.bearer_secret is not None:
                token = self._secret(spec, spec.bearer_secret, "spec.auth.secretRef")
            return HttpLaunch(spec.url, token, cidr_grants=grants, deny_ports=deny_ports)
        # Only what the resource declares, plus where to find programs and a home: never the
        # gateway's whole environment (it may hold other services' credentials).
        env = {key: value for key in ("PATH", "HOME") if (value := self._context.environ.get(key))}
        env.update(spec.env)
        secrets: list[str] = []
        for variable, secret in spec.env_secrets.items():
            env[variable] = self._secret(spec, secret, f"environment variable {variable}")
            secrets.append(env[variable])
        return StdioLaunch(spec.command, spec.args, env, tuple(secrets))

    # -- tools ----------------------------------------------------------------------------------

    def entries(self) -> tuple[list[RegisteredTool], list[Diagnostic]]:
        """The servers' tools with their availability, and the problems found. The first call
        waits for each server's first connection attempt (at most its connect timeout)."""
        problems = list(self._problems)
        if not self._servers and not self._refs:
            return [], problems
        if self._closed:
            return [], [*problems, *self._closed_problems()]
        hub = self._ensure_hub()
        self._sync(hub)
        if self._servers and self._changed is None:
            # Not started (the CLI, a synchronous script): nothing would reload later, so wait
            # for the servers now. Once started, a server that connects later asks for a
            # reload itself, and a reload must not block the loop.
            longest = max(spec.connect_timeout for spec in self._servers.values())
            hub.wait_first(self._servers, longest + _WAIT_MARGIN)
        self._seen_changes = hub.changes
        entries: list[RegisteredTool] = []
        refs = self._refs_by_server(problems)
        for spec in self._servers.values():
            snapshot = hub.snapshot(spec.name)
            if snapshot is not None:
                self._server_entries(
                    hub, spec, snapshot, refs.pop(spec.name, None), entries, problems
                )
        for server, orphans in refs.items():
            for ref in orphans:
                entries.append(
                    RegisteredTool(
                        ref,
                        _binding(hub, server, ref, None),
                        f"it names the MCP server {server}, which is not declared "
                        "(no MCPServer resource with that name)",
                    )
                )
                problems.append(
                    Diagnostic(
                        ref.source.location or "",
                        ref.id,
                        f"mcpServerRef names {server}, but no MCPServer with that name is declared",
                    )
                )
        return entries, problems

    def _closed_problems(self) -> list[Diagnostic]:
        return [
            Diagnostic(spec.location, spec.where, "the MCP connections of this source are closed")
            for spec in self._servers.values()
        ]

    def _refs_by_server(self, problems: list[Diagnostic]) -> dict[str, list[Tool]]:
        refs: dict[str, list[Tool]] = {}
        for ref in self._refs:
            if not isinstance(ref.entry, McpEntry):
                problems.append(
                    Diagnostic(ref.source.location or "", ref.id, "not an MCP tool (mcpServerRef)")
                )
                continue
            refs.setdefault(ref.entry.server, []).append(ref)
        return refs

    def _server_entries(
        self,
        hub: McpHub,
        spec: McpServerSpec,
        snapshot: Snapshot,
        refs: list[Tool] | None,
        entries: list[RegisteredTool],
        problems: list[Diagnostic],
    ) -> None:
        reason = None
        if not snapshot.connected:
            reason = (
                snapshot.reason or f"toolgate is still connecting to the MCP server {spec.name}"
            )
        listed, refused = self._map_listing(spec, snapshot)
        reviews = self._review(spec, snapshot)
        if refs is None and snapshot.tools is None:
            # Still connecting is not (yet) a failure of the declaration.
            severity = Severity.ERROR if snapshot.reason is not None else Severity.WARNING
            detail = snapshot.detail or reason
            problems.append(
                Diagnostic(spec.location, spec.where, f"no tools listed yet: {detail}", severity)
            )
            return
        if refs is None:
            problems.extend(refused.values())
            for tool in listed.values():
                held = self._held(spec, tool, tool.id, reviews, problems)
                entries.append(
                    RegisteredTool(
                        tool
                        if held is None
                        else held_tool(tool, spec.name, reviews.get(_remote(tool))),
                        _binding(hub, spec.name, tool, spec.url),
                        held or reason,
                    )
                )
            return
        for ref in refs:
            assert isinstance(ref.entry, McpEntry)
            remote_name = ref.entry.remote_name
            remote = listed.get(remote_name)
            why = reason
            if why is None and remote is None:
                why = f"the MCP server {spec.name} does not list a tool named {remote_name!r}"
                if remote_name in refused:
                    why = (
                        f"the MCP server {spec.name} lists {remote_name!r}, but it was refused: "
                        f"{refused[remote_name].message}"
                    )
                problems.append(
                    Diagnostic(ref.source.location or spec.location, ref.id, why, Severity.WARNING)
                )
            held = None if remote is None else self._held(spec, remote, ref.id, reviews, problems)
            if held is not None:
                # Only the operator's own words: nothing the server has not had accepted.
                entries.append(RegisteredTool(ref, _binding(hub, spec.name, ref, spec.url), held))
                continue
            entries.append(
                RegisteredTool(merge_ref(ref, remote), _binding(hub, spec.name, ref, spec.url), why)
            )

    # -- pins -----------------------------------------------------------------------------------

    def _review(self, spec: McpServerSpec, snapshot: Snapshot) -> _Reviews:
        """The server's listing against its pins; the first listing of a server new to the
        pins is recorded here (``spec.pin: changes``). A store that cannot be read holds
        every tool (:attr:`_pin_problems`)."""
        self._pin_problems.pop(spec.name, None)
        if snapshot.tools is None:
            return self._reviews.get(spec.name, {})
        try:
            store = self._context.tool_pins.store()
            pins = store.pins(spec.name)
            reviews, seeded = review_listing(
                spec.name, snapshot.tools, pins, spec.pin, spec.namespace
            )
            # The first listing is recorded once reviewed, even an empty or all-held one:
            # trust on first use ends here, and every later new tool is held.
            if is_first_listing(pins, spec.pin) and not store.first_listing(
                spec.name, seeded, now=time.time()
            ):
                # Another process recorded this server's first listing meanwhile: use its pins.
                reviews, _ = review_listing(
                    spec.name, snapshot.tools, store.pins(spec.name), spec.pin, spec.namespace
                )
            for review in reviews.values():
                if needs_passed_on(review):
                    assert review.pin is not None
                    # A pin from before passed-on fields were pinned adopts those listed now,
                    # so that a later change of them is held (not every pin at once on upgrade).
                    store.amend(
                        spec.name,
                        review.name,
                        review.definition_hash,
                        review.pin.definition,
                        review.stored_definition,
                    )
            if any(review.hold is not None for review in reviews.values()):
                self._pin_generation = store.generation()
        except Exception as exc:  # noqa: BLE001 - fail closed: every tool held, with the reason
            log.warning("the pins of the MCP server %s cannot be read: %s", spec.name, exc)
            self._pin_problems[spec.name] = (
                f"the accepted tool definitions of the MCP server {spec.name} cannot be read "
                f"({exc}); its tools are held until they can (check the state database)"
            )
            reviews = {}
        self._reviews[spec.name] = reviews
        return reviews

    def _held(
        self,
        spec: McpServerSpec,
        tool: Tool,
        tool_id: str,
        reviews: _Reviews,
        problems: list[Diagnostic],
    ) -> str | None:
        """Why ``tool`` (as the server lists it; registered as ``tool_id``) is held, or
        ``None``; a held tool is also a warning for the operator."""
        unreadable = self._pin_problems.get(spec.name)
        if unreadable is not None:
            problems.append(Diagnostic(spec.location, tool_id, unreadable, Severity.WARNING))
            return unreadable
        review = reviews.get(_remote(tool))
        if review is None or review.hold is None:
            return None
        reason = review.reason(tool_id)
        problems.append(Diagnostic(spec.location, tool_id, reason, Severity.WARNING))
        return reason

    def server_names(self) -> list[str]:
        """The declared servers' names."""
        return list(self._servers)

    def server(self, name: str) -> tuple[McpServerSpec, Snapshot | None]:
        """A declared server and what is known about it (``AcceptError`` when undeclared)."""
        spec = self._servers.get(name)
        if spec is None:
            known = ", ".join(sorted(self._servers)) or "none"
            raise AcceptError(f"no MCP server {name!r} is declared here (declared: {known})")
        hub = self._hub
        return spec, None if hub is None else hub.snapshot(name)

    def review(self, name: str) -> dict[str, ToolReview]:
        """Each tool the server ``name`` lists now, accepted or held and why (``AcceptError``
        when the server is not declared or has not listed its tools yet)."""
        spec, snapshot = self.server(name)
        if snapshot is None or snapshot.tools is None:
            why = (snapshot.detail or snapshot.reason) if snapshot is not None else None
            raise AcceptError(
                f"the MCP server {name} has not listed its tools yet"
                + (f" ({why})" if why else "")
                + "; try again once it is connected"
            )
        reviews = self._review(spec, snapshot)
        problem = self._pin_problems.get(name)
        if problem is not None:
            raise AcceptError(problem)
        return reviews

    def summary(self, name: str) -> dict[str, Any]:
        """One row of the server listings (CLI and HTTP): connected or not, its pin mode, and
        which of its tools are held or flagged; ``problem`` says why its tools cannot be
        reviewed now (not listed yet, pins unreadable)."""
        spec, snapshot = self.server(name)
        try:
            reviews, problem = self.review(name), None
        except AcceptError as exc:
            reviews, problem = {}, str(exc)
        return {
            "server": name,
            "namespace": spec.namespace,
            "pin": spec.pin,
            "connected": bool(snapshot is not None and snapshot.connected),
            "tools": len(reviews),
            "held": sorted(r.name for r in reviews.values() if r.hold is not None),
            "flagged": sorted(r.name for r in reviews.values() if r.findings),
            "problem": problem,
        }

    def accept(
        self,
        name: str,
        tools: Sequence[str] = (),
        *,
        by: str | None,
        expected: Mapping[str, str] | None = None,
    ) -> list[ToolReview]:
        """Accept the definitions the server ``name`` lists now for ``tools`` (its tools'
        names on the server; none: every held tool), so they are served; returns what was
        accepted. ``expected`` (tool → definition hash): refuse a tool whose definition
        changed again since the operator reviewed it. Raises :class:`AcceptError` naming what
        is wrong."""
        reviews = self.review(name)
        if tools:
            unknown = [tool for tool in tools if tool not in reviews]
            if unknown:
                listed = ", ".join(sorted(reviews)) or "none"
                raise AcceptError(
                    f"the MCP server {name} lists no tool named "
                    f"{', '.join(repr(t) for t in unknown)} (it lists: {listed})"
                )
            chosen = [reviews[tool] for tool in dict.fromkeys(tools)]
        else:
            chosen = [
                review
                for review in reviews.values()
                if review.hold is not None and review.hold.kind != "ambiguous"
            ]
        for review in chosen:
            if review.hold is not None and review.hold.kind == "ambiguous":
                raise AcceptError(
                    f"{review.name!r} cannot be accepted: the MCP server {name} "
                    f"{review.hold.changes[0]}, so which definition it would run cannot be "
                    "known; it stays held until the server lists the name once"
                )
            want = None if expected is None else expected.get(review.name)
            if want is not None and want != review.definition_hash:
                raise AcceptError(
                    f"the MCP server {name} changed {review.name!r} again since it was reviewed "
                    f"(reviewed {want}, now {review.definition_hash}); review it again"
                )
        if not chosen:
            return []
        now = time.time()
        self._context.tool_pins.store().accept(
            name,
            {review.name: (review.definition_hash, review.stored_definition) for review in chosen},
            by=by,
            now=now,
        )
        self._hub_changed()
        return [
            dataclasses.replace(
                review,
                hold=None,
                pin=Pin(
                    name, review.name, review.definition_hash, review.stored_definition, now, by
                ),
            )
            for review in chosen
        ]

    async def _watch_pins(self) -> None:
        """While a tool is held, notice an acceptance made elsewhere (another process or
        replica) and reload."""
        while True:
            await asyncio.sleep(PIN_RECHECK)
            if self._pin_generation is None or not any(
                review.hold is not None
                for reviews in self._reviews.values()
                for review in reviews.values()
            ):
                continue
            try:
                now = await asyncio.to_thread(self._context.tool_pins.store().generation)
            except Exception as exc:  # noqa: BLE001 - try again later; the tools stay held
                log.info("cannot read the MCP tool pins: %s", exc)
                continue
            if now != self._pin_generation:
                self._pin_generation = now
                self._hub_changed()

    def _map_listing(self, spec: McpServerSpec, snapshot: Snapshot) -> _Mapped:
        """The server's listed tools as toolgate tools, and why any were refused (by name)."""
        cached = self._mapped.get(spec.name)
        if cached is not None and cached[0] == spec and cached[1] is snapshot:
            return cached[2]
        listed: dict[str, Tool] = {}
        refused: dict[str, Diagnostic] = {}
        # The same entry per name as the review (mcp_pinning.listing_entries): what is
        # registered is what was reviewed; an ambiguous name is held by the review.
        entries, _ambiguous = listing_entries(spec.namespace, snapshot.tools or ())
        unnamed = [raw for raw in snapshot.tools or () if not isinstance(raw.get("name"), str)]
        for raw in [*entries.values(), *unnamed]:
            tool, problem = tool_from_listing(spec, raw)
            if tool is not None:
                listed[tool.name] = tool
            elif problem is not None:
                name = raw.get("name")
                refused[name if isinstance(name, str) else ""] = problem
        self._mapped[spec.name] = (spec, snapshot, (listed, refused))
        return listed, refused

    # -- resources and prompts ------------------------------------------------------------------

    def offerings(self, name: str) -> Offerings | None:
        """What server ``name`` last listed besides tools (``None``: nothing listed yet, or no
        such server). Kept while the server is down, like its tools."""
        hub = self._hub
        snapshot = None if hub is None or name not in self._servers else hub.snapshot(name)
        return None if snapshot is None else snapshot.offerings

    async def offering(self, name: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send ``resources/read``, ``prompts/get``, ``resources/subscribe`` or
        ``resources/unsubscribe`` to server ``name``, bounded by its ``spec.timeout``; the
        result as JSON. Raises :class:`~toolgate.backends.base.BackendUnavailableError` when
        the server is not connected, or the errors of
        :func:`~toolgate.backends.mcp_offerings.request`."""
        from ...backends.base import BackendUnavailableError

        spec = self._servers.get(name)
        hub = self._hub
        if spec is None or hub is None or self._closed:
            raise BackendUnavailableError(f"the MCP server {name} is not connected")
        return await hub.offering(name, method, params, spec.timeout)

    async def settled(self, name: str, timeout: float) -> bool:
        """Wait (bounded) while server ``name`` refreshes a listing it announced; whether it
        did (:meth:`~toolgate.backends.mcp_client.McpHub.settled`)."""
        hub = self._hub
        if name not in self._servers or hub is None or self._closed:
            return False
        return await hub.settled(name, timeout)

    def secrets(self) -> dict[str, list[str]]:
        """Secret name → the servers that need it (``auth.secretRef`` and ``env`` secrets), for
        listings such as ``toolgate secrets list``. Reads no value."""
        found: dict[str, list[str]] = {}
        for spec in self._servers.values():
            names = [*spec.env_secrets.values()]
            if spec.bearer_secret is not None:
                names.append(spec.bearer_secret)
            for name in names:
                found.setdefault(name, []).append(f"MCPServer {spec.name}")
        return found

    def backend(self) -> Backend:
        """The backend that runs ``ImplementationKind.MCP`` tools (any source's)."""
        from ...backends.mcp_client import McpBackend

        return McpBackend()

    # -- lifecycle ------------------------------------------------------------------------------

    def _resource_updated(self, server: str, uri: str) -> None:
        listener = self.on_resource_updated
        if listener is not None:
            listener(server, uri)

    def _hub_changed(self) -> None:
        # On the hub's thread: reload on the loop that started us, never here (a reload calls
        # entries(), and the registry belongs to that loop).
        offerings = self.on_offerings_changed
        if offerings is not None:
            try:
                offerings()
            except Exception:
                log.exception("reporting a change of MCP resources or prompts failed")
        loop = self._loop
        if loop is None or self._changed is None:
            return
        with self._lock:
            if self._reload_pending:
                return
            self._reload_pending = True
        try:
            loop.call_soon_threadsafe(self._reload)
        except RuntimeError:  # that loop is closed
            with self._lock:
                self._reload_pending = False

    def _reload(self) -> None:
        with self._lock:
            self._reload_pending = False
        changed = self._changed
        if changed is None:
            return
        try:
            changed()
        except Exception:
            log.exception("reloading after an MCP server change failed")

    async def start(self, changed: Callable[[], None]) -> None:
        """Reconnect and follow tool list changes; ``changed()`` asks the source set to reload
        (it is called on the loop that called ``start``)."""
        self._changed = changed
        self._loop = asyncio.get_running_loop()
        if self._pin_task is None and self._servers:
            self._pin_task = self._loop.create_task(self._watch_pins())
        if self._servers and not self._closed:
            hub = self._ensure_hub()
            self._sync(hub)
            if hub.changes != self._seen_changes:
                self._hub_changed()  # something changed since the last entries()

    def _stop_pin_task(self) -> None:
        task, self._pin_task = self._pin_task, None
        if task is not None and not task.done():
            task.cancel()  # aclose runs on the loop that started it

    async def aclose(self) -> None:
        """Disconnect from every server; their processes end."""
        self._stop_pin_task()
        self._changed, self._loop = None, None
        self._closed = True
        if self._hub is not None:
            await self._hub.aclose()

    def close(self) -> None:
        """:meth:`aclose` for synchronous code."""
        loop, task = self._loop, self._pin_task
        self._pin_task = None
        if task is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)
        self._changed, self._loop = None, None
        self._closed = True
        if self._hub is not None:
            self._hub.close()


def _remote(tool: Tool) -> str:
    return tool.entry.remote_name if isinstance(tool.entry, McpEntry) else tool.name


def _binding(hub: McpHub, server: str, tool: Tool, url: str | None) -> object:
    from ...backends.mcp_client import McpBinding

    remote = tool.entry.remote_name if isinstance(tool.entry, McpEntry) else tool.name
    return McpBinding(hub, server, remote, url)
