"""The harness of the direct-vs-through MCP tests (``tests/test_mcp_faithful*.py``).

Two upstreams — the reference ``mcp-server-everything`` over streamable HTTP and the Python
upstream ``tests/fixtures/mcp_faithful/python_upstream.py`` over stdio — are served by a real
``toolgate serve`` (SQLite state in a temporary ``TOOLGATE_HOME``) configured with one
``MCPServer`` resource each. A test sends the same request to the upstream directly and through
toolgate and compares the answers field by field with :func:`differences`.

The only differences the comparison forgives are the named :data:`ALLOWANCES`, each applied by
its own function, and the time-varying values rewritten by the named :data:`NORMALIZERS`; there
is no blanket ignore. Both sides speak the same protocol era (the initialize handshake,
2025-11-25: the era of the reference server, the TypeScript SDK client and tasks), so a
difference is toolgate's and never the era's.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures" / "mcp_faithful"
PYTHON_UPSTREAM = FIXTURES / "python_upstream.py"
TS_CLIENT = FIXTURES / "ts_client.mjs"
TOOLGATE = str(Path(sys.executable).parent / "toolgate")

#: Where ``.ci/run`` installs the pinned npm clients (``npm install --prefix``) and says so in
#: ``TOOLGATE_MCP_CLIENTS``: with it set, a missing client fails the test; without, it skips.
MCP_CLIENTS = Path(
    os.environ.get("TOOLGATE_MCP_CLIENTS")
    or Path(__file__).parent.parent / ".cache" / "mcp-clients"
)
TS_SDK_VERSION = "1.32.2"
INSPECTOR_VERSION = "0.16.8"

#: The namespaces toolgate serves the two upstreams in (their ``metadata.name``).
EVERYTHING = "everything"
PYTHON = "faithful"

#: The separator between a namespace and a tool, prompt or resource name on the MCP surface.
SEPARATOR = "__"

# -- allowances: the only differences between direct and through ---------------------------------

#: Every difference the comparison forgives, by name, with why. A test applies each through the
#: function of the same name below; nothing else is ignored.
ALLOWANCES: dict[str, str] = {
    "namespace prefix": (
        "toolgate serves several upstreams side by side, so each tool and prompt name gets "
        f"its server's namespace and '{SEPARATOR}' in front, the upstream's name kept as "
        "written (get-sum -> everything__get-sum, hyphens and dots unescaped). Resources and "
        "resource templates get no prefix: they are known by URI, kept as the upstream wrote "
        "it, so a resource_link in a result reads back through toolgate as it is"
    ),
    "envelope": (
        "the result envelope names the server that answers (_meta "
        "io.modelcontextprotocol/serverInfo) and, at 2026-07-28, its caching and result type "
        "(ttlMs, cacheScope, resultType): those describe toolgate's own answer, not the payload"
    ),
    "task bookkeeping": (
        "toolgate runs a task-augmented call as a task of its own, so a task's id, ttl, poll "
        "interval, timestamps and status message are toolgate's (see task_outline); its "
        "status, the statuses it goes through and its result are compared"
    ),
    "isError stated": (
        "toolgate's MCP server (the official Python SDK) always states isError, false for a "
        "call that succeeded; an upstream may leave it out, which means the same (the "
        "specification's default): an absent isError upstream matches isError false"
    ),
}

_ENVELOPE_KEYS = ("resultType", "ttlMs", "cacheScope", "nextCursor")
_ENVELOPE_META = ("io.modelcontextprotocol/serverInfo",)


def namespaced(namespace: str, name: str) -> str:
    """Allowance "namespace prefix": the name a client sees through toolgate."""
    return f"{namespace}{SEPARATOR}{name}"


def without_envelope(result: dict[str, Any]) -> dict[str, Any]:
    """Allowance "envelope": a result without the fields that describe who answered."""
    kept = {key: value for key, value in result.items() if key not in _ENVELOPE_KEYS}
    meta = {k: v for k, v in kept.pop("_meta", {}).items() if k not in _ENVELOPE_META}
    if meta:
        kept["_meta"] = meta
    return kept


#: Normalizer "session resources": the reference server registers a resource under this prefix
#: for one MCP session only (gzip-file-as-resource's output). Which exist depends on the calls
#: that session made, and toolgate's one upstream session serves every caller, so listings are
#: compared without them; test_a_resource_link_made_through_toolgate_reads_back covers them.
SESSION_RESOURCES = "demo://resource/session/"


def without_session_resources(uris: dict[str, Any]) -> dict[str, Any]:
    """Normalizer "session resources": a listing by URI without per-session resources."""
    return {uri: item for uri, item in uris.items() if not uri.startswith(SESSION_RESOURCES)}


def is_error_stated(upstream: dict[str, Any], through: dict[str, Any]) -> dict[str, Any]:
    """Allowance "isError stated": ``through`` without an ``isError: false`` the upstream left
    out."""
    if "isError" not in upstream and through.get("isError") is False:
        return {key: value for key, value in through.items() if key != "isError"}
    return through


# -- normalizers: values that differ between any two requests ------------------------------------

#: Rewrites of values that change from one request to the next even on the upstream alone, each
#: named: (name, pattern, replacement). Applied to every string, and to the text inside base64.
NORMALIZERS: list[tuple[str, re.Pattern[str], str]] = [
    # mcp-server-everything's dynamic resources say when they were made (toLocaleTimeString).
    (
        "creation time",
        re.compile(r"created at \d{1,2}:\d{2}:\d{2}(\s?[AP]M)?"),
        "created at <time>",
    ),
    # Task timestamps (createdAt, lastUpdatedAt: ISO 8601, UTC).
    (
        "task timestamp",
        re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z"),
        "<timestamp>",
    ),
    # Task ids (the reference server's task store: 32 hex digits), one per task.
    ("task id", re.compile(r"\b[0-9a-f]{32}\b"), "<task id>"),
    # Its toggle tools name the MCP session, one per connection.
    (
        "session id",
        re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        "<uuid>",
    ),
]


def normalized(value: Any) -> Any:
    """``value`` with every :data:`NORMALIZERS` rule applied (inside base64 blobs too)."""
    if isinstance(value, dict):
        return {
            key: _blob(item) if key == "blob" else normalized(item) for key, item in value.items()
        }
    if isinstance(value, list):
        return [normalized(item) for item in value]
    if isinstance(value, str):
        for _name, pattern, replacement in NORMALIZERS:
            value = pattern.sub(replacement, value)
        return value
    return value


#: The fields of a task object that belong to whoever runs the task. toolgate runs a
#: task-augmented call as a task of its own (its id, lifetime, poll interval and clock), so they
#: are the executor's, not the upstream's payload: allowance "task bookkeeping".
TASK_BOOKKEEPING = ("taskId", "ttl", "pollInterval", "createdAt", "lastUpdatedAt", "statusMessage")
_RELATED_TASK = "io.modelcontextprotocol/related-task"


def task_outline(seen: dict[str, Any]) -> dict[str, Any]:
    """A task-augmented call (or cancel) as the TypeScript client saw it, for comparison.

    Allowance "task bookkeeping": the task objects (created, cancelled, final) keep their status
    and lose :data:`TASK_BOOKKEEPING` (an empty ``_meta`` counts as none); the result's
    related-task id must be the created task's and is then replaced by a marker. Every task
    object of one call must carry the same id. Normalizer "task polling": how many status
    notifications arrived depends on when the polls fell, so the statuses seen are compared as a
    set, with the last one."""
    tasks = {key: seen[key] for key in ("created", "cancelled", "final") if seen.get(key)}
    ids = {task.get("taskId") for task in tasks.values()}
    result = seen.get("result")
    related = ((result or {}).get("_meta") or {}).get(_RELATED_TASK)
    if related is not None:
        ids.add(related.get("taskId"))
    assert len(ids) <= 1, f"one call, several task ids: {sorted(map(str, ids))}"
    outline = {key: value for key, value in seen.items() if key != "statuses"}
    for key, task in tasks.items():
        kept = {k: v for k, v in task.items() if k not in TASK_BOOKKEEPING}
        if kept.get("_meta") == {}:
            del kept["_meta"]
        outline[key] = kept
    if related is not None:
        outline["result"] = {
            **result,
            "_meta": {**result["_meta"], _RELATED_TASK: {"taskId": "<the created task>"}},
        }
    if "statuses" in seen:
        statuses = seen["statuses"]
        outline["statuses seen"] = sorted(set(statuses))
        outline["last status"] = statuses[-1] if statuses else None
    return outline


def _blob(value: Any) -> Any:
    """A base64 blob whose bytes are UTF-8 text: the normalized text, marked as decoded."""
    if not isinstance(value, str):
        return value
    try:
        text = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return value
    return {"decoded base64": normalized(text)}


# -- the comparison ----------------------------------------------------------------------------


def differences(direct: Any, through: Any, path: str = "") -> list[str]:
    """Every place where ``through`` differs from ``direct``, as JSON pointers with both values."""
    if isinstance(direct, dict) and isinstance(through, dict):
        found = []
        for key in sorted(set(direct) | set(through)):
            where = f"{path}/{key}"
            if key not in through:
                found.append(f"{where}: missing through toolgate (upstream: {_short(direct[key])})")
            elif key not in direct:
                found.append(f"{where}: added by toolgate: {_short(through[key])}")
            else:
                found += differences(direct[key], through[key], where)
        return found
    if isinstance(direct, list) and isinstance(through, list):
        if len(direct) != len(through):
            return [
                f"{path}: {len(direct)} items upstream, {len(through)} through toolgate: "
                f"{_short(direct)} != {_short(through)}"
            ]
        return [
            d
            for i, (a, b) in enumerate(zip(direct, through, strict=True))
            for d in differences(a, b, f"{path}/{i}")
        ]
    if direct != through or type(direct) is not type(through):
        return [f"{path}: upstream {_short(direct)}, through toolgate {_short(through)}"]
    return []


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "…"


def assert_same(direct: Any, through: Any, what: str) -> None:
    """Fail with the list of differences (normalized) when ``through`` is not ``direct``."""
    found = differences(normalized(direct), normalized(through))
    assert not found, f"{what}: through toolgate differs from the upstream:\n" + "\n".join(found)


def wire(model: Any) -> Any:
    """An SDK model as the JSON it came from (aliases, no unset optional fields)."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


# -- the tool calls ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One tool call with arguments valid for the tool, made directly and through toolgate."""

    tool: str
    arguments: dict[str, Any]


#: One call for every tool of mcp-server-everything a client without sampling, elicitation or
#: roots is offered (the server registers those only for clients that declare them).
EVERYTHING_CALLS: list[Call] = [
    Call("echo", {"message": "hello through the gateway"}),
    Call("get-annotated-message", {"messageType": "error", "includeImage": True}),
    Call("get-env", {}),
    Call("get-resource-links", {"count": 3}),
    Call("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}),
    Call("get-structured-content", {"location": "New York"}),
    Call("get-sum", {"a": 19, "b": 23}),
    Call("get-tiny-image", {}),
    Call(
        "gzip-file-as-resource",
        {
            "name": "note.txt.gz",
            "data": "data:text/plain;base64,aGVsbG8=",
            "outputType": "resource",
        },
    ),
    Call("trigger-long-running-operation", {"duration": 0.2, "steps": 2}),
    # Each toggle twice: on, then off again (its state is per session).
    Call("toggle-simulated-logging", {}),
    Call("toggle-subscriber-updates", {}),
]

#: Tools compared by another test, or not callable unattended, each with the reason.
EVERYTHING_NOT_CALLED: dict[str, str] = {
    "simulate-research-query": (
        "declares execution.taskSupport 'required': a plain tools/call is refused by the "
        "server; the task-augmented call is compared in test_mcp_faithful_clients.py"
    ),
}

PYTHON_CALLS: list[Call] = [
    Call("word-count", {"text": "three little words"}),
    Call("geo.distance", {"start": 3, "end": -4}),
    Call("tiny_image", {}),
    Call("mixed_content", {}),
    Call("erase_note", {"name": "draft"}),
]

PYTHON_NOT_CALLED: dict[str, str] = {}


# -- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after 60 s: {log.read_text()[-2000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


def everything_binary() -> str:
    """The reference server, installed by ``.ci/run``."""
    path = shutil.which("mcp-server-everything")
    if path is None:
        pytest.fail(
            "mcp-server-everything is not on PATH: "
            "npm install -g @modelcontextprotocol/server-everything@2026.8.31 (.ci/run does)"
        )
    return path


@contextmanager
def everything_http(folder: Path) -> Iterator[str]:
    """``mcp-server-everything streamableHttp`` on a free port (env ``PORT``); yields its URL."""
    port = free_port()
    log = folder / "everything.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [everything_binary(), "streamableHttp"],
            env={"PATH": os.environ["PATH"], "HOME": str(folder), "PORT": str(port)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_port(port, process, log)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        _stop(process)


def python_upstream_env() -> dict[str, str]:
    """The environment both the test and toolgate start the Python upstream with."""
    return {"PATH": os.environ["PATH"], "PYTHONPATH": ""}


def write_project(folder: Path, everything_url: str) -> Path:
    """A project folder with ``mcp.yaml`` (the two upstreams) and ``toolgate.yaml``.

    No side-effect level is declared, so nothing of ours changes the tools' annotations; the
    operator waives approval for the two namespaces (``approval.rules``) so every call runs
    unattended, and grants the loopback address of the HTTP upstream.
    """
    project = folder / "project"
    project.mkdir()
    (project / "mcp.yaml").write_text(
        textwrap.dedent(
            f"""\
            apiVersion: joch.dev/v1alpha1
            kind: MCPServer
            metadata:
              name: {EVERYTHING}
            spec:
              url: {everything_url}
              timeoutSeconds: 30
            ---
            apiVersion: joch.dev/v1alpha1
            kind: MCPServer
            metadata:
              name: {PYTHON}
            spec:
              command: {sys.executable}
              args: [{json.dumps(str(PYTHON_UPSTREAM))}]
              timeoutSeconds: 30
            """
        )
    )
    (project / "toolgate.yaml").write_text(
        textwrap.dedent(
            f"""\
            sources:
              - path: ./mcp.yaml
                format: resource
            sandbox:
              network_grants:
                MCPServer:{EVERYTHING}: [127.0.0.1/32]
            approval:
              rules:
                - namespace: {EVERYTHING}
                  require: false
                  override: true
                - namespace: {PYTHON}
                  require: false
                  override: true
            """
        )
    )
    return project


def toolgate_env(folder: Path) -> dict[str, str]:
    """The environment of ``toolgate serve`` and ``toolgate mcp``: their own home."""
    home = folder / "home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    env["TOOLGATE_HOME"] = str(home)
    return env


@contextmanager
def toolgate_serve(project: Path, env: dict[str, str]) -> Iterator[str]:
    """``toolgate serve --port 0`` in ``project``; yields its MCP URL once both upstreams'
    tools are listed (toolgate connects to them in the background)."""
    log = project.parent / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [TOOLGATE, "serve", "--port", "0"],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = _banner_url(process, log)
        _wait_until_ready(base, process, log)
        yield base + "/mcp"
    finally:
        _stop(process)


def _banner_url(process: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", log.read_text(errors="replace"))
        if match:
            return match.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"toolgate serve did not start: {log.read_text()[-3000:]}")


def _wait_until_ready(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Until /healthz answers and the HTTP API lists a tool of each upstream."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, f"toolgate serve exited: {log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(base + "/v1/tools?limit=500", timeout=5) as response:
                listed = json.dumps(json.load(response))
            if f'"{EVERYTHING}:get-sum"' in listed and f'"{PYTHON}:word-count"' in listed:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the upstreams' tools did not appear: {log.read_text()[-3000:]}")


@dataclass(frozen=True)
class Gateway:
    """What the tests need of the running setup."""

    everything_url: str
    toolgate_url: str
    project: Path
    env: dict[str, str]


@contextmanager
def faithful_setup(folder: Path) -> Iterator[Gateway]:
    """The reference server, the project and ``toolgate serve``, for one test module."""
    with everything_http(folder) as url:
        project = write_project(folder, url)
        env = toolgate_env(folder)
        with toolgate_serve(project, env) as mcp_url:
            yield Gateway(url, mcp_url, project, env)


# -- the npm clients ---------------------------------------------------------------------------


def npm_package(name: str, version: str) -> Path:
    """The folder of a pinned npm package installed by ``.ci/run``, else fail (on CI) or skip."""
    folder = MCP_CLIENTS / "node_modules" / name
    manifest = folder / "package.json"
    if manifest.exists() and json.loads(manifest.read_text())["version"] == version:
        return folder
    reason = (
        f"{name}@{version} is not installed in {MCP_CLIENTS} "
        f"(.ci/run installs it: npm install --prefix {MCP_CLIENTS} {name}@{version})"
    )
    if os.environ.get("TOOLGATE_MCP_CLIENTS"):
        pytest.fail(reason)
    pytest.skip(reason)


def node(args: list[str]) -> subprocess.Popen[str]:
    """``node ARGS``, started; the TypeScript client finds the pinned SDK through
    ``MCP_CLIENTS_NODE_MODULES`` (ES modules ignore ``NODE_PATH``)."""
    env = {**os.environ, "MCP_CLIENTS_NODE_MODULES": str(MCP_CLIENTS / "node_modules")}
    return subprocess.Popen(
        ["node", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def node_json(process: subprocess.Popen[str], timeout: float = 120) -> Any:
    """The JSON a :func:`node` process printed, once it exits with 0."""
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"node exited with {process.returncode}: {err[-3000:]}"
    return json.loads(out)


def by_name(items: list[dict[str, Any]], rename: Callable[[str], str] = str) -> dict[str, Any]:
    """A listing keyed by (renamed) name, so two listings compare entry by entry."""
    return {rename(item["name"]): item for item in items}
