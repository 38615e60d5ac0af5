"""One MCP server connection, kept alive on the MCP hub's event loop (see :mod:`.mcp_client`).

A supervisor task per server connects with the official SDK client, lists the tools, then
watches: it lists them again when the server says they changed (``notifications/tools/list_changed``
on handshake-era connections, a ``subscriptions/listen`` stream on 2026-07-28 ones) and every
health-check period (which also notices a server that went away). When the connection fails it
publishes the server as down — keeping the last tool list — and reconnects with a doubling,
capped delay until it is stopped.

The SDK's contexts hold anyio task groups, which must be entered and left by the same task; so a
"hold" task owns each connection from start to end, and everything else (listing, calls) only
sends requests over it. Every wait is bounded: the connect (``fail_after``), each request (the
client's read timeout), the health check, and the SDK's own shutdown (stdin closed, then SIGTERM
and SIGKILL to the server's process group).

Every HTTP request to a streamable HTTP server — each redirect hop the SDK follows within the
URL's origin too — goes through :class:`~toolgate.backends.rest_transport.GuardedTransport`, the
SSRF guard of REST tools: the host is resolved once per connection and refused unless every
address is public or inside the operator's grant for the server
(:func:`~toolgate.backends.mcp_launch.grant_key`); metadata addresses and the gateway's own ports
never; no proxy from the environment (``trust_env=False``). A refused destination makes the server
"refused" — its tools unavailable with a reason naming the server, the host and why — and the
gateway goes on serving everything else.

The SDK is imported on first connect, so importing this module costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import IO, TYPE_CHECKING, Any, TextIO, cast

import anyio

from ..errors import ToolError
from ..trace_context import OUTGOING
from .base import BackendUnavailableError, ToolTimeoutError
from .mcp_launch import (
    Launch,
    LaunchUnavailable,
    StdioLaunch,
    Timing,
    describe_failure,
    is_refusal,
    redact,
    refusal_hint,
    stderr_file,
    stderr_tail,
    trim_stderr,
)
from .mcp_limits import DEFAULT_MAX_MESSAGE, MessageLimit, MessageTooLarge
from .mcp_offerings import Offerings, list_offerings, request
from .mcp_results import result_value

if TYPE_CHECKING:
    from mcp import Client
    from mcp.client import Transport

__all__ = ["Connection", "Snapshot"]

log = logging.getLogger("toolgate.mcp")

#: Pages and tools of one ``tools/list`` walk (a paginator that never ends cannot hang it).
MAX_PAGES = 100
MAX_TOOLS = 1_000
#: How long a graceful disconnect may take before the hold task is cancelled (the SDK's own
#: stdio shutdown is bounded at about 6 s and shielded).
CLOSE_GRACE = 10.0
#: Seconds between trims of a stdio server's stderr log.
TRIM_EVERY = 30.0
#: Connections one streamable HTTP server may hold at once (httpx2's default for a client): the
#: event stream and every call in flight each hold one.
MAX_HTTP_CONNECTIONS = 100


@dataclass(frozen=True)
class Snapshot:
    """What is known about one server, replaced as a whole whenever it changes."""

    tools: tuple[Mapping[str, Any], ...] | None = None
    """The last ``tools/list`` (JSON objects), ``None`` until one succeeded."""
    connected: bool = False
    reason: str | None = None
    """Why the server is not connected (a sentence that follows "unavailable: "); shown to
    agents, so it never quotes the server's own output."""
    detail: str | None = None
    """:attr:`reason` plus the end of a stdio server's stderr, for the operator (diagnostics,
    the log)."""
    offerings: Offerings | None = None
    """The last listing of the server's resources, templates and prompts (``None`` until one
    succeeded; kept, like :attr:`tools`, while the server is down)."""


def _client_version() -> str:
    try:
        return metadata.version("toolgate")
    except metadata.PackageNotFoundError:
        return "0"


class _Live:
    """One established connection, owned by its hold task."""

    def __init__(self, connection: Connection, launch: Launch) -> None:
        self.connection = connection
        self.launch = launch
        self.client: Client | None = None
        self.tools: tuple[Mapping[str, Any], ...] = ()
        self.offerings = Offerings()
        self.relist = False
        """Fetch the tool list again soon (a change was announced, or a check is due)."""
        self.refreshing = False
        """A listing is being fetched now (:meth:`Connection.settled` waits for it)."""
        self.broken = False
        self.error: str | None = None
        self.stderr: IO[bytes] | None = None
        self.stderr_tail = ""
        self.http_status: int | None = None
        """The last HTTP error status the server answered with (the SDK reports only
        "Server returned an error response")."""
        self.refused = False
        """The guarded transport refused a destination (see :func:`is_refusal`)."""
        self.stop = anyio.Event()
        self.finished = anyio.Event()
        self.oversize: tuple[MessageTooLarge, float] | None = None
        """The last message cut at the limit, and when (``time.monotonic()``)."""
        """The server sent a message past the limit: the calls failing now say so."""

    async def on_message(self, message: Any) -> None:
        """The SDK's message handler: server notifications and transport errors."""
        from mcp_types import (
            PromptListChangedNotification,
            ResourceListChangedNotification,
            ResourceUpdatedNotification,
            ToolListChangedNotification,
        )

        if isinstance(message, ResourceUpdatedNotification):
            self.connection.resource_updated(message.params.uri)
            return
        if isinstance(
            message,
            (
                Exception,
                ToolListChangedNotification,
                ResourceListChangedNotification,
                PromptListChangedNotification,
            ),
        ):
            # A transport error may or may not have ended the connection: check by listing.
            self.relist = True
            self.connection.poke()


class Connection:
    """The supervisor of one MCP server connection. Lives on the hub's loop; ``snapshot`` and
    ``first_attempt`` may be read from any thread."""

    def __init__(
        self,
        name: str,
        launch: Callable[[], Launch],
        timing: Timing,
        on_change: Callable[[], None],
        max_message: int = DEFAULT_MAX_MESSAGE,
    ) -> None:
        self.name = name
        self.limit = MessageLimit(name, max_message)
        """The size limit of one message from the server (:mod:`.mcp_limits`)."""
        self.snapshot = Snapshot()
        self.first_attempt = threading.Event()
        """Set once the first attempt to connect has finished, either way."""
        self.live: _Live | None = None
        self._launch = launch
        self._timing = timing
        self._on_change = on_change
        self.on_resource_updated: Callable[[str, str], None] | None = None
        """Told ``(server, uri)`` when the server says a subscribed resource changed (on the
        hub's thread; set by the hub)."""
        self._stopping = False
        self._wake: asyncio.Event | None = None
        self._connect_scope: anyio.CancelScope | None = None

    # -- signals (hub loop only) ----------------------------------------------------------------

    def poke(self) -> None:
        """Wake the supervisor to look at its flags."""
        if self._wake is not None:
            self._wake.set()

    def stop(self) -> None:
        """Disconnect and end the supervisor (a connect in progress is abandoned)."""
        self._stopping = True
        if self._connect_scope is not None:
            self._connect_scope.cancel()
        self.poke()

    def _publish(
        self,
        connected: bool,
        reason: str | None,
        tools: Any = None,
        detail: str | None = None,
        offerings: Offerings | None = None,
    ) -> None:
        new = Snapshot(
            tools=self.snapshot.tools if tools is None else tools,
            connected=connected,
            reason=reason,
            detail=detail or reason,
            offerings=self.snapshot.offerings if offerings is None else offerings,
        )
        if new != self.snapshot:
            if not connected and new.detail != self.snapshot.detail:
                # Once per new reason: a server that stays down must not flood the log.
                log.warning("%s", new.detail)
            self.snapshot = new
            try:
                self._on_change()
            except Exception:
                log.exception("reporting a change of MCP server %s failed", self.name)
        self.first_attempt.set()

    def _down(self, detail: str, live: _Live | None = None) -> None:
        if live is not None and live.refused:
            # Not a server that is down: reconnecting goes on (a name may come to resolve
            # elsewhere), but the fix is usually the operator's, so say what it is.
            reason = f"the MCP server {self.name} is refused: {detail}. {refusal_hint(self.name)}"
        else:
            reason = (
                f"the MCP server {self.name} is not connected ({detail}); "
                "toolgate keeps trying to reconnect"
            )
        operator = reason
        if live is not None and live.stderr_tail:
            operator += f". Its stderr ends with: {redact(live.stderr_tail, live.launch)}"
        self._publish(False, reason, detail=operator)

    # -- the supervisor -------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, watch, reconnect — until :meth:`stop`."""
        self._wake = asyncio.Event()
        delay = self._timing.reconnect_initial
        try:
            async with anyio.create_task_group() as group:
                while not self._stopping:
                    live = await self._connect(group)
                    if live is None:
                        await self._pause(delay)
                        delay = min(delay * 2, self._timing.reconnect_max)
                        continue
                    delay = self._timing.reconnect_initial
                    await self._watch(live)
                    self.live = None
                    await self._release(live)
                    if not self._stopping:
                        self._down(live.error or "the connection ended", live)
                        await self._pause(delay)
                group.cancel_scope.cancel()
        finally:
            self.live = None
            self.first_attempt.set()

    async def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        assert self._wake is not None
        while not self._stopping and (left := deadline - time.monotonic()) > 0:
            self._wake.clear()
            with anyio.move_on_after(left):
                await self._wake.wait()

    async def _connect(self, group: anyio.abc.TaskGroup) -> _Live | None:
        try:
            launch = self._launch()
        except LaunchUnavailable as exc:
            self._publish(False, str(exc))
            return None
        live = _Live(self, launch)
        try:
            with anyio.CancelScope() as scope:
                self._connect_scope = scope
                with anyio.fail_after(self._timing.connect):
                    await group.start(self._hold, launch, live)
            if scope.cancelled_caught:
                if live.oversize is not None and live.error is not None:
                    self._down(live.error, live)  # a message past the limit ended it
                return None  # else: stopped while connecting
        except Exception as exc:  # noqa: BLE001 - any failure to connect is a reason to report
            if live.oversize is not None and live.error is not None:
                self._down(live.error, live)
            else:
                self._down(self._detail(exc, live, self._timing.connect), live)
            return None
        finally:
            self._connect_scope = None
        self.live = live
        log.info("MCP server %s connected with %d tools", self.name, len(live.tools))
        self._publish(True, None, live.tools, offerings=live.offerings)
        return live

    @staticmethod
    def _detail(exc: BaseException, live: _Live, timeout: float) -> str:
        live.refused = live.refused or is_refusal(exc)
        detail = describe_failure(exc, live.launch, timeout)
        if live.http_status is not None:
            detail += f"; the server answered HTTP {live.http_status}"
            if live.http_status in (401, 403):
                detail += " (check the bearer token in spec.auth.secretRef)"
        return detail

    async def _hold(
        self,
        launch: Launch,
        live: _Live,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        from mcp import Client
        from mcp_types import Implementation
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        started = False
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack, launch, live)
                client = Client(
                    transport,
                    message_handler=live.on_message,
                    # Fresh lists every time: a cached listing would hide a change.
                    cache=None,
                    read_timeout_seconds=self._timing.connect,
                    client_info=Implementation(name="toolgate", version=_client_version()),
                )
                await stack.enter_async_context(client)
                live.client = client
                live.tools = await _list_tools(client)
                live.offerings = await list_offerings(client)
                changes = _announced_changes(client)
                listens = client.protocol_version in MODERN_PROTOCOL_VERSIONS and any(changes)
                task_status.started()
                started = True
                async with anyio.create_task_group() as inner:
                    if listens:
                        inner.start_soon(self._listen, client, live, changes)
                    await live.stop.wait()
                    inner.cancel_scope.cancel()
        except Exception as exc:
            if not started:
                raise
            # The transport failed under a live connection (the SDK raises it out of its task
            # groups): the supervisor reconnects.
            live.error = live.error or self._detail(exc, live, self._timing.connect)
        finally:
            live.client = None
            if live.stderr is not None:
                live.stderr_tail = stderr_tail(live.stderr)
                live.stderr.close()
            live.finished.set()
            self.poke()

    async def _transport(
        self, stack: contextlib.AsyncExitStack, launch: Launch, live: _Live
    ) -> Transport:
        if isinstance(launch, StdioLaunch):
            from .mcp_stdio import bounded_stdio_client

            def stdio_oversize(error: MessageTooLarge) -> None:
                # The line was cut: the stream is out of step, so the connection is rebuilt.
                live.oversize = (error, time.monotonic())
                self._lost(live, error.limit.explain(reset=True))
                if self.live is not live and self._connect_scope is not None:
                    # Still connecting: the answer it waits for will never come. End the
                    # connect now, with the limit as its reason.
                    self._connect_scope.cancel()

            live.stderr = stderr_file()
            # The SDK only hands the file's descriptor to the child.
            return cast(
                "Transport",
                bounded_stdio_client(
                    launch.command,
                    list(launch.args),
                    dict(launch.env),
                    cast(TextIO, live.stderr),
                    self.limit,
                    stdio_oversize,
                ),
            )
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        from .mcp_http_cap import CappedTransport
        from .rest_transport import GuardedTransport

        def http_oversize(error: MessageTooLarge) -> None:
            # Only that response is dropped: the connection stays in step.
            live.oversize = (error, time.monotonic())

        headers = {"Authorization": f"Bearer {launch.bearer}"} if launch.bearer else None

        async def remember_error(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                live.http_status = response.status_code

        # The SDK sends every request, and each redirect hop it follows within the URL's
        # origin, through this client's transport: each new connection is checked there.
        guard = GuardedTransport(
            cidr_grants=launch.cidr_grants,
            deny_ports=launch.deny_ports,
            max_connections=MAX_HTTP_CONNECTIONS,
        )
        http = httpx2.AsyncClient(
            # Every response body and event is read no further than the message limit.
            transport=CappedTransport(guard, self.limit, http_oversize),
            # No proxy from the environment: a proxy, not the guard, would choose the address.
            trust_env=False,
            event_hooks={"response": [remember_error]},
            headers=headers,
            # Reads may wait on a long tool call or an event stream; the call's own deadline
            # (read_timeout_seconds) is what bounds a request.
            timeout=httpx2.Timeout(self._timing.connect, read=None),
            follow_redirects=False,
        )
        await stack.enter_async_context(http)
        # The capped transport bounds events; the SDK's own cap (1 MiB) would cut them sooner.
        return streamable_http_client(launch.url, http_client=http, max_sse_event_size=None)

    async def _listen(self, client: Client, live: _Live, changes: tuple[bool, bool, bool]) -> None:
        """2026-07-28 connections announce list changes (tools, resources, prompts: what the
        server's capabilities say it announces) on a listen stream."""
        from mcp.client.subscriptions import SubscriptionLost

        tools, resources, prompts = changes
        for _attempt in range(3):
            try:
                async with client.listen(
                    tools_list_changed=tools,
                    resources_list_changed=resources,
                    prompts_list_changed=prompts,
                ) as subscription:
                    async for _event in subscription:
                        live.relist = True
                        self.poke()
                return  # the server closed the stream on purpose; health checks go on
            except SubscriptionLost:
                live.relist = True  # maybe the connection is gone: list to find out
                self.poke()
                await anyio.sleep(1.0)
            except Exception as exc:  # noqa: BLE001 - health checks still notice changes
                log.info("MCP server %s: no tool list change stream (%s)", self.name, exc)
                live.relist = True
                self.poke()
                return

    async def _watch(self, live: _Live) -> None:
        period = self._timing.probe_period
        due = time.monotonic() + period if period > 0 else None
        assert self._wake is not None
        while not (self._stopping or live.broken or live.finished.is_set()):
            if live.relist:
                live.relist = False
                live.refreshing = True
                try:
                    await self._refresh(live)
                finally:
                    live.refreshing = False
                continue
            self._wake.clear()
            if live.relist or live.broken or live.finished.is_set() or self._stopping:
                continue
            # Wake at least every TRIM_EVERY seconds to keep the stderr log bounded.
            left = TRIM_EVERY if due is None else min(TRIM_EVERY, due - time.monotonic())
            with anyio.move_on_after(max(0.0, left)):
                await self._wake.wait()
            trim_stderr(live.stderr)
            if due is not None and time.monotonic() >= due:
                due = time.monotonic() + period
                live.relist = True

    async def _refresh(self, live: _Live) -> None:
        client = live.client
        if client is None:
            return
        try:
            with anyio.fail_after(self._timing.probe_timeout):
                tools = await _list_tools(client)
                offerings = await list_offerings(client)
        except Exception as exc:  # noqa: BLE001 - any failure means the connection is unusable
            live.broken = True
            live.error = live.error or self._detail(exc, live, self._timing.probe_timeout)
            return
        if tools != live.tools or offerings != live.offerings:
            log.info("MCP server %s now lists %d tools", self.name, len(tools))
            live.tools = tools
            live.offerings = offerings
            self._publish(True, None, tools, offerings=offerings)

    async def _release(self, live: _Live) -> None:
        live.stop.set()
        with anyio.move_on_after(CLOSE_GRACE):
            await live.finished.wait()

    # -- resources and prompts ------------------------------------------------------------------

    def resource_updated(self, uri: str) -> None:
        """The server says resource ``uri`` changed (a subscription's update)."""
        listener = self.on_resource_updated
        if listener is not None:
            try:
                listener(self.name, uri)
            except Exception:
                log.exception("relaying an update of a resource of %s failed", self.name)

    async def settled(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) while a listing announced by the server is pending or
        being fetched; whether there was one. Lets a read of a resource the server has just
        announced find it in the new listing rather than fail on the old one."""
        live = self.live
        if live is None or not (live.relist or live.refreshing):
            return False
        with anyio.move_on_after(timeout):
            while self.live is live and (live.relist or live.refreshing):
                await anyio.sleep(0.02)
        return True

    async def offering(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        """``resources/read``, ``prompts/get``, ``resources/subscribe`` or
        ``resources/unsubscribe`` on the live session, bounded by ``timeout``; the result as
        JSON. Failures as :func:`~toolgate.backends.mcp_offerings.request` words them; an
        answer past the message limit fails with that limit."""
        live = self.live
        client = None if live is None or live.broken else live.client
        if live is None or client is None:
            raise BackendUnavailableError(
                self.snapshot.reason or f"the MCP server {self.name} is not connected yet"
            )
        session = client.session
        started = time.monotonic()

        async def send() -> Any:
            with anyio.fail_after(timeout):
                if method == "resources/read":
                    return await session.read_resource(params["uri"])
                if method == "prompts/get":
                    return await session.get_prompt(params["name"], params.get("arguments"))
                # Deprecated for 2026-07-28 servers only; used with handshake-era ones.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if method == "resources/subscribe":
                        return await session.subscribe_resource(params["uri"])
                    if method == "resources/unsubscribe":
                        return await session.unsubscribe_resource(params["uri"])
            raise ValueError(f"not an offering request: {method}")

        what = f"{method} of {params.get('uri') or params.get('name')!r}"
        try:
            return await request(self.name, what, send, lambda why: self._lost(live, why))
        except TimeoutError:
            raise ToolTimeoutError(
                f"the MCP server {self.name} did not answer {what} within {timeout:g} s"
            ) from None
        except Exception:
            cut = live.oversize
            if cut is not None and cut[1] >= started:
                if not live.broken:
                    live.oversize = None
                raise ToolError(cut[0].limit.explain(reset=live.broken)) from None
            raise

    # -- calls ----------------------------------------------------------------------------------

    def _lost(self, live: _Live, detail: str) -> None:
        live.broken = True
        live.error = live.error or detail
        self.poke()

    def _ready(self) -> tuple[_Live, Client]:
        """The live session to call on, or :class:`BackendUnavailableError` saying why not."""
        live = self.live
        client = None if live is None or live.broken else live.client
        if live is None or client is None:
            raise BackendUnavailableError(
                self.snapshot.reason or f"the MCP server {self.name} is not connected yet"
            )
        return live, client

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """``tools/call`` on the live session; the raw toolgate result."""
        live, client = self._ready()

        async def send(meta: dict[str, str] | None) -> dict[str, Any]:
            from mcp_types import RequestParamsMeta

            if meta is None:
                result = await client.call_tool(tool, arguments, read_timeout_seconds=timeout)
            else:
                result = await client.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=timeout,
                    meta=RequestParamsMeta(**meta),  # type: ignore[typeddict-item]
                )
            answer: dict[str, Any] = result.model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
            return answer

        answer = await self._call(live, tool, send)
        return result_value(answer, server=self.name, tool=tool)

    async def call_task(self, tool: str, arguments: dict[str, Any], timeout: float) -> Any:
        """``tool`` run as an MCP task on the live session (an upstream tool whose listing says
        ``taskSupport: required``, see :mod:`.mcp_tasks`); the raw toolgate result. Guarded as
        :meth:`call` is: the same tracing, the same words for a lost connection and an answer
        past the message limit."""
        from .mcp_tasks import call_as_task

        live, client = self._ready()

        async def send(meta: dict[str, str] | None) -> dict[str, Any]:
            return await call_as_task(
                client.session, tool, arguments, timeout, server=self.name, meta=meta
            )

        answer = await self._call(live, tool, send)
        return result_value(answer, server=self.name, tool=tool)

    async def _call(
        self,
        live: _Live,
        tool: str,
        send: Callable[[dict[str, str] | None], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """``send(meta)`` — a plain or a task-augmented ``tools/call`` of ``tool`` — traced, its
        failures worded for toolgate. ``meta`` is the request's ``_meta`` (the trace context),
        ``None`` untraced."""
        started = time.monotonic()
        try:
            return await self._traced(live, tool, send)
        except Exception:
            cut = live.oversize
            # Only a message cut while this call was waiting can be its answer (an earlier one
            # answered a call that had already ended).
            if cut is not None and cut[1] >= started:
                if not live.broken:
                    live.oversize = None  # HTTP: that one answer; the connection goes on
                # The server answered with more than the limit: say that, not "lost".
                raise ToolError(cut[0].limit.explain(reset=live.broken)) from None
            raise

    async def _traced(
        self,
        live: _Live,
        tool: str,
        send: Callable[[dict[str, str] | None], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        from mcp import MCPError
        from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT

        lost = (
            f"the connection to the MCP server {self.name} was lost during the call, so it is "
            "not known whether the tool ran; toolgate is reconnecting — check its effect before "
            "calling it again"
        )
        try:
            outgoing = OUTGOING.get()
            if outgoing is None:
                return await send(None)
            # Traced: the trace context travels in the request's _meta (traceparent).
            with outgoing.client_span(
                f"tools/call {tool}",
                {"mcp.method.name": "tools/call", "gen_ai.tool.name": tool},
            ) as span:
                carrier: dict[str, str] = {}
                span.inject(carrier)
                return await send(carrier)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                self._lost(live, "the connection closed")
                raise BackendUnavailableError(lost) from None
            if exc.code == REQUEST_TIMEOUT:
                raise ToolTimeoutError(str(exc)) from None
            raise ToolError(
                f"The MCP server {self.name} refused the call to {tool}: {exc.message} "
                f"(MCP error {exc.code})"
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream) as exc:
            self._lost(live, type(exc).__name__)
            raise BackendUnavailableError(lost) from None


def _announced_changes(client: Client) -> tuple[bool, bool, bool]:
    """Whether the server announces changes of its tools, resources and prompts."""
    capabilities = client.server_capabilities
    return (
        capabilities.tools is not None and bool(capabilities.tools.list_changed),
        capabilities.resources is not None and bool(capabilities.resources.list_changed),
        capabilities.prompts is not None and bool(capabilities.prompts.list_changed),
    )


async def _list_tools(client: Client) -> tuple[Mapping[str, Any], ...]:
    """Every page of the server's ``tools/list``, as listed: a name listed twice (on one page
    or across pages) is kept twice, for :func:`toolgate.formats.mcp_server.pinning.listing_entries`
    to decide on (exact repeats count once; different definitions hold the name). A cursor
    seen before ends the listing (a server paging in a loop)."""
    if client.server_capabilities.tools is None:
        return ()  # a server of resources or prompts only: never asked (it would be -32601)
    tools: list[Mapping[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _page in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(
            tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools
        )
        cursor = page.next_cursor
        if not cursor or cursor in seen or len(tools) >= MAX_TOOLS:
            break
        seen.add(cursor)
    return tuple(tools[:MAX_TOOLS])
