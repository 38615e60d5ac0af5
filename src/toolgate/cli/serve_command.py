"""``toolgate serve``: one process serving the HTTP API (and MCP and the web UI when built in).

It loads the configured gateway — with the approval queue and the audit log under
``$TOOLGATE_HOME`` — or, when no ``toolgate.yaml`` exists, the bundled demo tools, so that it
works on a fresh machine. It listens on ``127.0.0.1:8470`` by default (``serve:`` in
toolgate.yaml, ``--host``, ``--port``; port 0 picks a free one); any address that is not
loopback is refused until an agent key exists (``toolgate agents add NAME``). SIGINT and SIGTERM
stop it cleanly: requests in flight finish (for up to 5 seconds), the gateway closes and the
audit log is flushed, and it exits 0.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import contextlib
import signal
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from ..config import STATE_FILE_NAME, build_gateway, load_config, toolgate_home
from ..config.shared_state import SharedState, open_shared_state
from ..pipeline.approval_policy import ApprovalPolicy
from ..serve.auth.identity import AgentIdentity, check_bind
from ..stores.agent_keys import AgentKeyStore
from ..stores.shared_keys import shared_key
from .errors import EXIT_CODES_HELP, CliFailure
from .options import CliState, ConfigOption, LogFormat, LogFormatOption
from .serve_processes import refuse_unshared, supervise, worker_command

__all__ = ["register"]

#: Seconds open connections get to finish when the server stops.
GRACEFUL_SHUTDOWN = 5


def _state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    return state if state is not None else CliState()


def _listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket, made before anything else starts: a busy port is a clear
    error, and the port printed is the one served."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as exc:
        raise CliFailure(f"cannot listen on {host}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        # Listening now: clients that connect while the gateway starts wait in the backlog
        # instead of being refused.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        hint = "; pass another --port (0 picks a free one)" if exc.errno == 98 else ""
        raise CliFailure(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sock


def _base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


@contextlib.contextmanager
def _stop_quietly() -> Iterator[None]:
    """Let SIGINT and SIGTERM end the server with exit code 0.

    uvicorn shuts down gracefully on either, then raises the signal again with the handler
    that was installed before it started; these handlers make that a no-op.
    """
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve(
    ctx: typer.Context,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            metavar="ADDRESS",
            help="The address to listen on (default 127.0.0.1, or serve.host in toolgate.yaml). "
            "Anything but loopback needs an agent key (toolgate agents add NAME).",
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            "-p",
            min=0,
            max=65535,
            help="The TCP port (default 8470, or serve.port in toolgate.yaml; 0: a free one).",
        ),
    ] = None,
    config: ConfigOption = None,
    log_format: LogFormatOption = LogFormat.TEXT,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "-w",
            min=1,
            max=64,
            help="Server processes sharing the port (default 1). More than one needs the shared "
            "state in PostgreSQL (state: in toolgate.yaml): see docs/guides/scale-out.md.",
        ),
    ] = 1,
    listen_fd: Annotated[int | None, typer.Option("--listen-fd", hidden=True)] = None,
) -> None:
    """Serve the tools over HTTP: the JSON API at /v1 (OpenAPI at /openapi.json), /healthz,
    /metrics (Prometheus), and MCP and the web UI.

    Uses toolgate.yaml (./toolgate.yaml, else $TOOLGATE_HOME/toolgate.yaml); without one it
    serves the bundled demo tools. Calls that need approval wait in the queue (decide them with
    'toolgate approvals' or over the API); every call is audited. Stop it with Ctrl+C or
    SIGTERM. OpenTelemetry traces and metrics are exported when the OTEL_* environment
    variables ask for them (pip install 'toolgate[otel]').
    """
    from ..telemetry import CallMetrics, from_environment
    from ..telemetry.call_log import CallLog, use_json_logs

    state = _state(ctx)
    if config is not None:
        state.config_path = config
    loaded = load_config(state.config_path)
    state.loaded = loaded
    settings = loaded.config.serve
    host = settings.host if host is None else host
    port = settings.port if port is None else port
    home = toolgate_home()
    if log_format is LogFormat.JSON:
        use_json_logs()
    with contextlib.ExitStack() as cleanup:
        # PostgreSQL/Redis named by `state:` / `redis:` (ConfigError naming the setting: exit 3).
        shared = open_shared_state(loaded)
        cleanup.callback(shared.close)
        keys = AgentKeyStore(home / STATE_FILE_NAME if shared.database is None else shared.database)
        cleanup.callback(keys.close)
        identity = AgentIdentity.from_config(loaded.config, keys)
        auth = loaded.config.auth
        # OAuth: bearer tokens beside the API keys; credentials are then always required.
        oauth = None
        if auth is not None:
            from ..serve.auth.oauth import build_oauth

            oauth = build_oauth(auth, identity)  # ConfigError: exit 3
        # UnsafeBindError (a ConfigError): exit 3
        loopback = check_bind(host, identity, oauth=oauth is not None)
        if workers > 1 and listen_fd is None:
            refuse_unshared(workers, shared.database)
            sock = _listen(host, port)
            cleanup.callback(sock.close)
            shared.close()  # the workers open their own
            _print_workers_banner(state, _base_url(sock), workers)
            # The workers check the address as this process did (keys needed beyond loopback,
            # which Host headers the MCP endpoint and web UI accept).
            options = ["--host", host, "--log-format", log_format.value]
            command = worker_command(sock.fileno(), loaded.path, options)
            code = supervise(sock, workers, command, state.err, cwd=Path.cwd())
            state.err.print("toolgate stopped.")
            raise typer.Exit(code)
        # The web stack, imported once the configuration and the shared state are known good
        # (a mistake there is reported a second sooner) and only by the processes that serve.
        import uvicorn

        from ..serve.api import ApiLimits
        from ..serve.app import SubApp, build_app, http_authenticator, mcp_authenticator
        from ..serve.mcp.http import McpHttp
        from ..serve.web import DEFAULT_ALLOWED_HOSTS, build_ui, identity_operator

        # A worker of `serve --workers N` serves the supervisor's socket.
        sock = _listen(host, port) if listen_fd is None else socket.socket(fileno=listen_fd)
        cleanup.callback(sock.close)
        gateway = build_gateway(
            loaded,
            include_demo=loaded.path is None,
            home=home,
            approver="queue",
            audit="write",
            # The port actually bound (--port, or a free one for 0): sandboxed tools and REST
            # calls must not reach the gateway itself.
            serve_ports=[sock.getsockname()[1]],
            telemetry=from_environment(),
            shared=shared,
            keep_processes=True,
        )
        cleanup.callback(gateway.close)  # after the lifespan's aclose: a no-op then
        metrics = CallMetrics(gateway.gauges())
        gateway.observe_calls(metrics)
        if log_format is LogFormat.JSON:
            gateway.observe_calls(CallLog())
        url = _base_url(sock)
        mcp = McpHttp(
            gateway,
            authenticate=(
                http_authenticator(identity.authenticate)
                if oauth is None
                else mcp_authenticator(oauth.callers.identify, oauth.metadata)
            ),
            approvals_url=url,
            host=host,
            max_body=settings.max_body_bytes,
            page_size=settings.mcp_page_size,
            **_replica_mcp_options(shared, settings.mcp_sessions),
        )
        ui = build_ui(
            gateway,
            require_operator=identity_operator(identity),
            # On loopback the console answers only to loopback names (DNS rebinding); beyond
            # it, keys are required and a rebinding page has none.
            allowed_hosts=(*DEFAULT_ALLOWED_HOSTS, host) if loopback else None,
            # Replicas sign form tokens with one shared key: a page from one, a post to another.
            csrf_key=None if shared.database is None else shared_key(shared.database, "web_csrf"),
        )
        app = build_app(
            gateway,
            authenticate=identity.authenticate,
            is_operator=identity.is_operator,
            approval_policy=ApprovalPolicy(loaded.config.approval.approval_rules()),
            limits=ApiLimits(
                max_body_bytes=settings.max_body_bytes, request_timeout=settings.request_timeout
            ),
            public_url=url,
            mcp=SubApp(mcp.app, mcp.lifespan),
            ui=SubApp(ui),
            identify=None if oauth is None else oauth.callers.identify,
            resource_metadata=None if oauth is None else oauth.metadata,
            metrics=metrics,
            loop_blocked_after=settings.loop_blocked_after,
        )
        if listen_fd is None:
            _print_banner(state, url, app, identity, tools=len(gateway.registry))
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                interface="asgi3",
                lifespan="on",
                log_level="warning",
                # JSON logs: uvicorn's loggers propagate to the JSON handler instead of their own.
                log_config=None if log_format is LogFormat.JSON else uvicorn.config.LOGGING_CONFIG,
                access_log=False,
                proxy_headers=False,  # the peer address is the client (no-key mode checks it)
                server_header=False,
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
            )
        )
        with _stop_quietly():
            server.run(sockets=[sock])
        if not server.started:
            raise CliFailure("the server did not start (see the errors above)")
    if listen_fd is None:  # a worker stops quietly: its supervisor says it once for all
        state.err.print("toolgate stopped.")


def _print_banner(state: CliState, url: str, app: Any, identity: AgentIdentity, tools: int) -> None:
    out = state.out
    loaded = state.loaded
    source = (
        "the demo tools (no toolgate.yaml found)"
        if loaded is None or loaded.path is None
        else loaded.label
    )
    out.print(Text(f"toolgate is serving {tools} tools from {source} on {url}", style="bold"))
    rows = [
        ("HTTP API", f"{url}/v1", f"OpenAPI: {url}/openapi.json"),
        ("Health", f"{url}/healthz", ""),
        ("Metrics", f"{url}/metrics", "Prometheus, operators only"),
    ]
    if app.mcp is not None:
        rows.append(("MCP", f"{url}/mcp", "streamable HTTP"))
    if app.ui is not None:
        rows.append(("Web UI", f"{url}/", "catalog, approvals, audit, connections"))
    for name, where, note in rows:
        out.print(Text(f"  {name:<9} {where}" + (f"   ({note})" if note else "")), soft_wrap=True)
    auth = None if loaded is None else loaded.config.auth
    if auth is not None:
        out.print(
            f"OAuth: access tokens of {auth.issuer} for {auth.resource} are accepted beside the "
            f"API keys (metadata: {url}/.well-known/oauth-protected-resource).",
            soft_wrap=True,
        )
    if identity.keys_configured or auth is not None:
        out.print(
            f"Agents: {len(identity.agents())} known; every request needs 'Authorization: "
            "Bearer KEY' (toolgate agents list).",
            soft_wrap=True,
        )
    else:
        out.print(
            "Agents: no keys, so only this machine is answered and every caller is the "
            "'default' agent ('toolgate agents add NAME' creates a key).",
            soft_wrap=True,
        )
    out.print("Press Ctrl+C to stop.")
    sys.stdout.flush()


def _print_workers_banner(state: CliState, url: str, workers: int) -> None:
    loaded = state.loaded
    source = "the demo tools" if loaded is None or loaded.path is None else loaded.label
    state.out.print(
        Text(f"toolgate is serving {source} on {url} with {workers} worker processes", "bold")
    )
    for name, where in (
        ("HTTP API", "/v1"),
        ("Health", "/healthz"),
        ("MCP", "/mcp"),
        ("Web UI", "/"),
    ):
        state.out.print(Text(f"  {name:<9} {url}{where}"), soft_wrap=True)
    state.out.print("Press Ctrl+C to stop.")
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    """Add ``toolgate serve``."""
    app.command("serve", epilog=EXIT_CODES_HELP)(serve)


def _replica_mcp_options(shared: SharedState, sessions: str) -> dict[str, Any]:
    """With a shared database, every replica seals and opens ``requestState`` with one key,
    and (``sessions: auto``) handshake-era clients get no per-process sessions, so any replica
    may get any MCP request (no session affinity needed)."""
    stateless = sessions == "stateless" or (sessions == "auto" and shared.database is not None)
    options: dict[str, Any] = {"stateless": stateless}
    if shared.database is not None:
        options["request_state_key"] = shared_key(shared.database, "mcp_request_state")
    return options
