"""``kind: MCPServer`` resources → :class:`McpServerSpec` values, with precise diagnostics.

The resource specification names ``MCPServer`` ("mcp: a tool exposed by an MCPServer",
``mcpServerRef``) but does not print its spec, so its fields follow the specification's style —
camelCase, Kubernetes conventions (``metadata.name/namespace``, ``env`` as
``{name, value | valueFrom}`` items, ``*Seconds`` durations), and the ``auth`` and
``sideEffects`` blocks of the ``Tool`` resource::

    apiVersion: joch.dev/v1alpha1
    kind: MCPServer
    metadata:
      name: time                       # required; what Tool resources' mcpServerRef names
      namespace: clock                 # tools get ids "clock:<tool>"; default: the name
    spec:
      transport: stdio                 # optional: stdio | streamable-http (from command / url)
      command: mcp-server-time         # stdio: the executable, args and env
      args: ["--local-timezone", "UTC"]
      env:
        - {name: TZ, value: UTC}
        - name: API_KEY
          valueFrom: {secretKeyRef: {name: time-api-key}}
      # url: https://mcp.example.com/mcp   # streamable HTTP instead of command
      # auth: {type: bearer, secretRef: {name: example-token}}
      sideEffects: {level: read_only}  # the operator's level for every tool of the server
      trustAnnotations: false          # true: map the server's annotations to a level
      timeoutSeconds: 60               # per call
      connectTimeoutSeconds: 30        # start + handshake + first tools/list
      healthCheck: {periodSeconds: 30, timeoutSeconds: 10}
      reconnect: {initialDelaySeconds: 1, maxDelaySeconds: 60}
      pin: changes                     # changes | all | off: which tools wait for the operator
      maxMessageBytes: 16777216        # bytes of one message (default: mcp.max_message_bytes)

Nothing here connects or runs anything: :func:`parse_mcp_server` only checks the document.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from ...model import SideEffect
from ...sandbox.addresses import (
    NEVER_GRANTED,
    AddressClass,
    classify,
    normalize_host,
    parse_ip_host,
)
from .._common.diagnostics import Diagnostic, Report
from .._common.messages import got

__all__ = [
    "MCP_SERVER_API_VERSION",
    "MCP_SERVER_KIND",
    "MCP_SERVER_SPEC_FIELDS",
    "McpServerSpec",
    "parse_mcp_server",
]

MCP_SERVER_API_VERSION = "joch.dev/v1alpha1"
MCP_SERVER_KIND = "MCPServer"

#: Every key ``spec`` may hold.
MCP_SERVER_SPEC_FIELDS: tuple[str, ...] = (
    "transport",
    "command",
    "args",
    "env",
    "url",
    "auth",
    "sideEffects",
    "trustAnnotations",
    "timeoutSeconds",
    "connectTimeoutSeconds",
    "healthCheck",
    "reconnect",
    "pin",
    "maxMessageBytes",
)
#: ``spec.pin`` values (see :mod:`toolgate.formats.mcp_server.pinning`).
PIN_MODES: tuple[str, ...] = ("changes", "all", "off")
_TOP_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
_METADATA_FIELDS = ("name", "namespace", "labels", "annotations")
_TRANSPORTS = ("stdio", "streamable-http")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LOOPBACK = ("localhost", "127.0.0.1", "::1")
_MAX_SECONDS = 24 * 60 * 60.0

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class McpServerSpec:
    """One ``MCPServer`` resource: how to reach the server and how to treat its tools."""

    name: str
    """``metadata.name``: what ``mcpServerRef.name`` of ``Tool`` resources refers to."""
    namespace: str
    """``metadata.namespace`` (default: the name); the server's tools get ``<namespace>:<tool>``."""
    location: str
    """The file the resource is in (for diagnostics)."""
    command: str | None = None
    """stdio transport: ``spec.command`` (looked up on ``PATH``)."""
    args: tuple[str, ...] = ()
    """``spec.args``."""
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """``spec.env`` literal values. The server gets these, the secrets of :attr:`env_secrets`,
    ``PATH`` and ``HOME`` — never the gateway's whole environment."""
    url: str | None = None
    """Streamable HTTP transport: ``spec.url``."""
    bearer_secret: str | None = None
    """``spec.auth.secretRef.name``: the secret (global scope) sent as a bearer token."""
    level: SideEffect | None = None
    """``spec.sideEffects.level``: the operator's level for every tool of the server."""
    pointer: str = ""
    """JSON pointer of this resource's document inside :attr:`location` (``""``: the file)."""
    env_secrets: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Environment variable → secret name (``env[].valueFrom.secretKeyRef.name``)."""
    trust_annotations: bool = False
    """``spec.trustAnnotations``: map the server's own annotations to a level when
    :attr:`level` is not set (otherwise they are kept as hints only)."""
    timeout: float = 60.0
    """``spec.timeoutSeconds``: how long one call of the server's tools may take."""
    connect_timeout: float = 30.0
    """``spec.connectTimeoutSeconds``: start, handshake and the first ``tools/list``."""
    probe_period: float = 30.0
    """``spec.healthCheck.periodSeconds``: how often the tool list is fetched again to notice a
    server that went away or changed its tools without saying so (0: never)."""
    probe_timeout: float = 10.0
    """``spec.healthCheck.timeoutSeconds``."""
    reconnect_initial: float = 1.0
    """``spec.reconnect.initialDelaySeconds``: the first wait before reconnecting."""
    reconnect_max: float = 60.0
    """``spec.reconnect.maxDelaySeconds``: the wait doubles up to this."""
    pin: str = "changes"
    """``spec.pin``: ``changes`` (default: the first listing is trusted, later new or changed
    tools wait for the operator), ``all`` (every tool waits, the first listing too) or ``off``
    (changes are adopted); tools with hidden text wait in every mode."""
    max_message_bytes: int | None = None
    """``spec.maxMessageBytes``: the bytes of one message from the server (a stdio line, an HTTP
    body or event); ``None``: the gateway's ``mcp.max_message_bytes``."""

    @property
    def transport(self) -> str:
        """``stdio`` or ``streamable-http``."""
        return "stdio" if self.command is not None else "streamable-http"

    @property
    def where(self) -> str:
        """The JSON pointer of ``spec`` in the file, for diagnostics about the server."""
        return f"{self.pointer}/spec"


def _unknown_keys(
    data: Mapping[Any, Any], known: tuple[str, ...], where: str, report: Report
) -> None:
    for key in data:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {', '.join(known)}"
        report.error(f"{where}/{key}", f"unknown field {key!r}{hint}")


def _object(value: Any, where: str, report: Report) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        report.error(where, f"expected an object, {got(value)}")
        return None
    return value


def _text(value: Any, where: str, report: Report) -> str | None:
    if not isinstance(value, str) or not value.strip():
        report.error(where, f"expected a non-empty string, {got(value)}")
        return None
    return value


def _seconds(
    data: Mapping[str, Any], key: str, where: str, default: float, report: Report, *, zero: bool
) -> float:
    value = data.get(key)
    if value is None:
        return default
    low = "0 or more" if zero else "more than 0"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
        or value > _MAX_SECONDS
    ):
        report.error(
            f"{where}/{key}",
            f"expected a number of seconds, {low} and at most 86400; {got(value)}",
        )
        return default
    return float(value)


def _metadata(document: Mapping[str, Any], report: Report) -> tuple[str | None, str | None]:
    if "metadata" not in document:
        report.error("/metadata", "missing: an MCPServer needs metadata.name")
        return None, None
    metadata = _object(document["metadata"], "/metadata", report)
    if metadata is None:
        return None, None
    _unknown_keys(metadata, _METADATA_FIELDS, "/metadata", report)
    names: list[str | None] = []
    for key in ("name", "namespace"):
        value = metadata.get(key)
        if value is None:
            if key == "name":
                report.error("/metadata/name", "missing: the server's name (e.g. 'github')")
            names.append(None)
        elif not isinstance(value, str) or not _NAME.match(value):
            report.error(
                f"/metadata/{key}",
                "expected letters, digits, '.', '_' or '-' (starting and ending with a letter "
                f"or digit, at most 63 characters), {got(value)}",
            )
            names.append(None)
        else:
            names.append(value)
    return names[0], names[1]


def _env(value: Any, report: Report) -> tuple[dict[str, str], dict[str, str]]:
    """``env`` as Kubernetes ``[{name, value | valueFrom.secretKeyRef.name}]`` or a plain
    ``{NAME: value}`` object. Returns (literal values, secret names)."""
    literal: dict[str, str] = {}
    secrets: dict[str, str] = {}
    if isinstance(value, Mapping):
        items = [({"name": key, "value": item}, f"/spec/env/{key}") for key, item in value.items()]
        plain = True
    elif isinstance(value, list):
        items = [(item, f"/spec/env/{index}") for index, item in enumerate(value)]
        plain = False
    else:
        report.error(
            "/spec/env", f"expected a list of {{name, value}} items or an object, {got(value)}"
        )
        return literal, secrets
    for item, where in items:
        entry = _object(item, where, report)
        if entry is None:
            continue
        _unknown_keys(entry, ("name", "value", "valueFrom"), where, report)
        name = entry.get("name")
        name_where = where if plain else f"{where}/name"
        if not isinstance(name, str) or not _ENV_NAME.match(name):
            report.error(name_where, f"expected an environment variable name, {got(name)}")
            continue
        if name in literal or name in secrets:
            report.error(name_where, f"{name} is set twice")
            continue
        has_value, has_from = "value" in entry, "valueFrom" in entry
        if has_value == has_from:
            report.error(where, f"{name}: give either value or valueFrom.secretKeyRef.name")
        elif has_value:
            raw = entry["value"]
            if isinstance(raw, bool) or not isinstance(raw, (str, int, float)):
                report.error(where if plain else f"{where}/value", f"expected a string, {got(raw)}")
            else:
                literal[name] = str(raw)
        else:
            secret = _secret_ref(entry["valueFrom"], f"{where}/valueFrom", "secretKeyRef", report)
            if secret is not None:
                secrets[name] = secret
    return literal, secrets


def _secret_ref(value: Any, where: str, key: str, report: Report) -> str | None:
    holder = _object(value, where, report)
    if holder is None:
        return None
    _unknown_keys(holder, (key,), where, report)
    ref = _object(holder.get(key), f"{where}/{key}", report)
    if ref is None:
        return None
    # ``key`` is accepted for Kubernetes familiarity; the store holds one value per name.
    _unknown_keys(ref, ("name", "key"), f"{where}/{key}", report)
    return _text(ref.get("name"), f"{where}/{key}/name", report)


def _auth(value: Any, report: Report) -> str | None:
    auth = _object(value, "/spec/auth", report)
    if auth is None:
        return None
    _unknown_keys(auth, ("type", "secretRef"), "/spec/auth", report)
    if auth.get("type") != "bearer":
        report.error("/spec/auth/type", f"expected 'bearer', {got(auth.get('type'))}")
    ref = _object(auth.get("secretRef"), "/spec/auth/secretRef", report)
    if ref is None:
        return None
    _unknown_keys(ref, ("name", "key"), "/spec/auth/secretRef", report)
    return _text(ref.get("name"), "/spec/auth/secretRef/name", report)


def _url(value: Any, bearer: bool, report: Report) -> str | None:
    url = _text(value, "/spec/url", report)
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError as exc:
        report.error("/spec/url", f"not a valid URL: {exc}")
        return None
    if parts.scheme not in ("http", "https") or not host:
        report.error("/spec/url", f"expected an http:// or https:// URL with a host, got {url!r}")
        return None
    if parts.username or parts.password:
        report.error(
            "/spec/url", "credentials in the URL are not allowed; use auth.secretRef instead"
        )
        return None
    if bearer and parts.scheme == "http" and host not in _LOOPBACK:
        report.warning(
            "/spec/url", "the bearer token would travel unencrypted over http://; use https://"
        )
    _never_reachable(host, report)
    return url


def _never_reachable(host: str, report: Report) -> None:
    """Warn about a host toolgate will refuse whatever the grants (a cloud metadata address, …);
    loopback and private ones may be granted, so they are left to the connection's check."""
    try:
        address = parse_ip_host(normalize_host(host))  # any spelling: 0xa9fea9fe too
    except ValueError:
        return  # not a usable host: the connection refuses it with the reason
    if address is not None and (kind := classify(address)) in NEVER_GRANTED:
        what = "a cloud metadata" if kind is AddressClass.METADATA else f"an {kind.value}"
        report.warning(
            "/spec/url",
            f"{address} is {what} address; toolgate never connects to it, whatever the "
            "network grants",
        )


def _level(value: Any, report: Report) -> SideEffect | None:
    effects = _object(value, "/spec/sideEffects", report)
    if effects is None:
        return None
    _unknown_keys(effects, ("level",), "/spec/sideEffects", report)
    raw = effects.get("level")
    if raw is None:
        return None
    try:
        return SideEffect(raw)
    except ValueError:
        report.error(
            "/spec/sideEffects/level",
            f"expected one of {', '.join(level.value for level in SideEffect)}, {got(raw)}",
        )
        return None


def _transport(spec: Mapping[str, Any], report: Report) -> tuple[str | None, str | None]:
    """(command, url) after checking that exactly one transport is described."""
    command = _text(spec["command"], "/spec/command", report) if "command" in spec else None
    url = _url(spec["url"], "auth" in spec, report) if "url" in spec else None
    if "command" in spec and "url" in spec:
        report.error("/spec", "give either command (stdio) or url (streamable HTTP), not both")
    elif "command" not in spec and "url" not in spec:
        report.error("/spec", "missing: command (a stdio server) or url (a streamable HTTP server)")
    declared = spec.get("transport")
    if declared is not None:
        if declared not in _TRANSPORTS:
            report.error(
                "/spec/transport", f"expected one of {', '.join(_TRANSPORTS)}, {got(declared)}"
            )
        elif declared == "stdio" and "url" in spec:
            report.error("/spec/transport", "transport stdio needs command, not url")
        elif declared == "streamable-http" and "command" in spec:
            report.error("/spec/transport", "transport streamable-http needs url, not command")
    for key in ("args", "env"):
        if key in spec and "command" not in spec:
            report.error(f"/spec/{key}", f"{key} applies to stdio servers (command) only")
    if "auth" in spec and "url" not in spec:
        report.error("/spec/auth", "auth applies to streamable HTTP servers (url) only")
    return command, url


def _args(value: Any, report: Report) -> tuple[str, ...]:
    if not isinstance(value, list):
        report.error("/spec/args", f"expected a list of strings, {got(value)}")
        return ()
    args: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            report.error(f"/spec/args/{index}", f"expected a string, {got(item)}")
        else:
            args.append(str(item))
    return tuple(args)


def _probe(spec: Mapping[str, Any], report: Report) -> tuple[float, float]:
    if "healthCheck" not in spec:
        return 30.0, 10.0
    check = _object(spec["healthCheck"], "/spec/healthCheck", report) or {}
    _unknown_keys(check, ("periodSeconds", "timeoutSeconds"), "/spec/healthCheck", report)
    return (
        _seconds(check, "periodSeconds", "/spec/healthCheck", 30.0, report, zero=True),
        _seconds(check, "timeoutSeconds", "/spec/healthCheck", 10.0, report, zero=False),
    )


def _reconnect(spec: Mapping[str, Any], report: Report) -> tuple[float, float]:
    if "reconnect" not in spec:
        return 1.0, 60.0
    settings = _object(spec["reconnect"], "/spec/reconnect", report) or {}
    keys = ("initialDelaySeconds", "maxDelaySeconds")
    _unknown_keys(settings, keys, "/spec/reconnect", report)
    initial = _seconds(settings, keys[0], "/spec/reconnect", 1.0, report, zero=False)
    most = _seconds(settings, keys[1], "/spec/reconnect", max(60.0, initial), report, zero=False)
    if most < initial:
        report.error(
            "/spec/reconnect/maxDelaySeconds",
            f"must not be less than initialDelaySeconds ({initial:g})",
        )
    return initial, max(initial, most)


#: ``spec.maxMessageBytes`` bounds: below 1 KiB not even a tool list fits; above 1 GiB is no bound.
_MESSAGE_BYTES = (1024, 1 << 30)


def _max_message(spec: Mapping[str, Any], report: Report) -> int | None:
    value = spec.get("maxMessageBytes")
    if value is None:
        return None
    low, high = _MESSAGE_BYTES
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        report.error(
            "/spec/maxMessageBytes",
            f"expected a whole number of bytes from {low} to {high}, {got(value)}",
        )
        return None
    return value


def parse_mcp_server(
    document: Mapping[str, Any], *, path: str, pointer: str
) -> tuple[McpServerSpec | None, list[Diagnostic]]:
    """Check one ``kind: MCPServer`` document and build its spec.

    ``path`` is the file, ``pointer`` the JSON pointer of the document in it (``""`` for a
    single-document file, ``"/2"`` for the third document…); every diagnostic names the file and
    the field's full pointer. Returns ``None`` for the spec when any error was found.
    """
    report = Report(path, prefix=pointer)
    if not isinstance(document, Mapping):
        report.error("", f"expected an MCPServer resource (an object), {got(document)}")
        return None, report.items
    _unknown_keys(document, _TOP_FIELDS, "", report)
    if document.get("apiVersion") != MCP_SERVER_API_VERSION:
        report.error(
            "/apiVersion",
            f"expected {MCP_SERVER_API_VERSION!r}, {got(document.get('apiVersion'))}",
        )
    if document.get("kind") != MCP_SERVER_KIND:
        report.error("/kind", f"expected {MCP_SERVER_KIND!r}, {got(document.get('kind'))}")
    name, namespace = _metadata(document, report)
    if "spec" not in document:
        report.error("/spec", "missing: command (stdio) or url (streamable HTTP)")
        return None, report.items
    spec = _object(document["spec"], "/spec", report)
    if spec is None:
        return None, report.items
    _unknown_keys(spec, MCP_SERVER_SPEC_FIELDS, "/spec", report)
    command, url = _transport(spec, report)
    args = _args(spec["args"], report) if "args" in spec and command is not None else ()
    env, env_secrets = _env(spec["env"], report) if "env" in spec and command else ({}, {})
    bearer = _auth(spec["auth"], report) if "auth" in spec and url is not None else None
    level = _level(spec["sideEffects"], report) if "sideEffects" in spec else None
    trust = spec.get("trustAnnotations", False)
    if not isinstance(trust, bool):
        report.error("/spec/trustAnnotations", f"expected true or false, {got(trust)}")
        trust = False
    timeout = _seconds(spec, "timeoutSeconds", "/spec", 60.0, report, zero=False)
    connect = _seconds(spec, "connectTimeoutSeconds", "/spec", 30.0, report, zero=False)
    probe_period, probe_timeout = _probe(spec, report)
    initial, most = _reconnect(spec, report)
    pin = spec.get("pin", "changes")
    if pin not in PIN_MODES:
        report.error(
            "/spec/pin",
            f"expected one of {', '.join(PIN_MODES)} (default changes: new or changed tools "
            f"wait for an operator to accept them), {got(pin)}",
        )
        pin = "changes"
    max_message = _max_message(spec, report)
    if report.failed or name is None:
        return None, report.items
    return (
        McpServerSpec(
            name=name,
            namespace=namespace or name,
            location=path,
            command=command,
            args=args,
            env=MappingProxyType(env),
            url=url,
            bearer_secret=bearer,
            level=level,
            pointer=pointer,
            env_secrets=MappingProxyType(env_secrets),
            trust_annotations=trust,
            timeout=timeout,
            connect_timeout=connect,
            probe_period=probe_period,
            probe_timeout=probe_timeout,
            reconnect_initial=initial,
            reconnect_max=most,
            pin=pin,
            max_message_bytes=max_message,
        ),
        report.items,
    )
