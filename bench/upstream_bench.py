"""Proxied upstream calls beside the direct call to the same upstream (issue 26, first goal).

    python bench/upstream_bench.py                       # 3 alternating rounds, 3 s per wrk run
    python bench/upstream_bench.py --rounds 5 --seconds 5
    python bench/upstream_bench.py --only mcp_stateless --instances tg   # one row
    python bench/upstream_bench.py --json                # machine-readable results on stdout

Three real upstreams run in their own processes on 127.0.0.1 (``bench/servers/``):

* ``mcp_stateless`` — the official ``mcp`` SDK's server, stateless streamable HTTP, JSON answers;
* ``mcp_session``   — the same server in its session mode (``Mcp-Session-Id``);
* ``rest``          — a Starlette JSON endpoint, ``POST /add`` (a REST ``Tool`` resource).

and ``toolgate serve`` instances declare all three (an ``MCPServer`` per MCP upstream, a
``Tool`` of ``type: rest``; audit log on, its default):

* ``tg``        — one process, state in SQLite (the default store);
* ``tg_pg``     — one process, state in PostgreSQL (what ``--workers`` needs);
* ``tg_pg_w2``  — ``serve --workers 2``, state in PostgreSQL;
* ``ref``       — with ``--ref-src DIR``: one process, SQLite, from another source tree (e.g.
  ``git archive main`` exported to a folder), imported through ``PYTHONPATH``: before/after in
  one run.

The same client, ``wrk`` with a fixed request body, calls every row: the **floor** is the direct
call to the upstream (an MCP ``tools/call``, in the session mode with the session id of one
``initialize``; the REST ``POST``), the proxied rows call the same tool through toolgate's MCP
endpoint (``/mcp``, a sessionless ``tools/call``) and its HTTP API (``POST /v1/tools/{id}/call``).
Each row gets p50 and p99 at 1 connection (``wrk --latency``) and calls/s at 16 connections.
Rounds alternate floor and proxied rows (the floor first in each upstream's group), so the
machine's drift hits both alike; the figures are medians over the rounds, with their spread.

The goal: added p50 ≤ 0.5 ms over the floor, and at 16 connections ≥ 70 % of the floor's calls/s
(one process, ``tg``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from http_throughput import _drop_shared_database, _shared_database  # noqa: E402

SERVERS = HERE / "servers"
#: Added p50 (ms) over the direct call, and share of the floor's calls/s at 16 connections.
GOAL_ADDED_P50_MS = 0.5
GOAL_SHARE = 0.70
LOAD_CONNECTIONS = 16
UPSTREAMS = ("mcp_stateless", "mcp_session", "rest")
INSTANCES = ("tg", "tg_pg", "tg_pg_w2")
SURFACES = ("mcp", "api")
#: The tool id of each upstream's tool in toolgate.
TOOL_IDS = {
    "mcp_stateless": "up_stateless:add",
    "mcp_session": "up_session:add",
    "rest": "rest:add",
}
ARGUMENTS = {"a": 1, "b": 2}
MCP_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}
UPSTREAM_PROTOCOL = "2025-06-18"
TOOLGATE_PROTOCOL = "2026-07-28"


@dataclass(frozen=True)
class Request:
    """One way to call the ``add`` tool: what wrk sends and how the answer is checked."""

    url: str
    body: Mapping[str, Any]
    headers: Mapping[str, str]


@dataclass
class Row:
    """One measured row: per-round p50/p99 (ms) at 1 connection and calls/s at 16."""

    upstream: str
    key: str
    """``floor`` or ``<instance>/<surface>``."""
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    rps: list[float] = field(default_factory=list)
    problem: str | None = None


# -- processes ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _post(request: Request, timeout: float = 10.0) -> tuple[Any, Mapping[str, str]]:
    data = json.dumps(request.body).encode()
    req = urllib.request.Request(request.url, data=data, headers=dict(request.headers))
    with urllib.request.urlopen(req, timeout=timeout) as response:
        text = response.read().decode()
        headers = dict(response.headers)
    if text.startswith(("event:", "data:")):
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return (json.loads(text) if text.strip() else None), headers


@contextmanager
def _process(command: list[str], log: Path, env: Mapping[str, str] | None = None) -> Iterator[None]:
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=out, env=dict(env or os.environ))
        try:
            yield
        finally:
            process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait(request: Request, log: Path, seconds: float = 60.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            reply, _ = _post(request)
        except (urllib.error.URLError, ConnectionError, OSError) as exc:
            if time.monotonic() > deadline:
                tail = log.read_text()[-800:]
                raise RuntimeError(f"{request.url} did not answer ({exc}): {tail}") from None
            time.sleep(0.25)
            continue
        if _answers_three(reply):
            return reply
        if time.monotonic() > deadline:
            raise RuntimeError(f"{request.url} answered {json.dumps(reply)[:300]}")
        time.sleep(0.25)  # toolgate may still be connecting to the upstream


def _answers_three(reply: Any) -> bool:
    """True when ``reply`` is a successful answer whose value is 3 (JSON-RPC or the API's)."""
    if not isinstance(reply, dict) or reply.get("error") or reply.get("isError"):
        return False
    result = reply.get("result", reply)
    if isinstance(result, dict) and result.get("isError"):
        return False

    def has_three(value: Any) -> bool:
        if isinstance(value, dict):
            return any(has_three(v) for v in value.values())
        if isinstance(value, list):
            return any(has_three(v) for v in value)
        if isinstance(value, str) and value.startswith("{"):
            try:  # a text block holding the upstream's JSON answer
                return has_three(json.loads(value))
            except ValueError:
                return False
        return value == 3 or value == "3"

    return has_three(result)


def _mcp_call(url: str, name: str, *, sessionless: bool, session: str | None = None) -> Request:
    params: dict[str, Any] = {"name": name, "arguments": ARGUMENTS}
    headers = dict(MCP_HEADERS)
    if sessionless:
        # toolgate is called the way the SDK 2.x client calls: the sessionless revision.
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": TOOLGATE_PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        headers |= {"MCP-Protocol-Version": TOOLGATE_PROTOCOL, "Mcp-Method": "tools/call"}
        headers["Mcp-Name"] = name
    else:
        headers["MCP-Protocol-Version"] = UPSTREAM_PROTOCOL
    if session is not None:
        headers["Mcp-Session-Id"] = session
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return Request(url, body, headers)


def _open_session(url: str) -> str:
    """``initialize`` + ``notifications/initialized`` on the session upstream; the session id."""
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": UPSTREAM_PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "upstream-bench", "version": "1"},
        },
    }
    _, headers = _post(Request(url, init, MCP_HEADERS))
    session = next(v for k, v in headers.items() if k.lower() == "mcp-session-id")
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    _post(Request(url, note, {**MCP_HEADERS, "Mcp-Session-Id": session}))
    return session


def _toolgate_config(home: Path, ports: Mapping[str, int], state: str | None) -> Path:
    (home / "upstreams.yaml").write_text(
        textwrap.dedent(
            f"""\
            apiVersion: joch.dev/v1alpha1
            kind: MCPServer
            metadata:
              name: up_stateless
            spec:
              url: http://127.0.0.1:{ports["mcp_stateless"]}/mcp
              sideEffects:
                level: read_only
            ---
            apiVersion: joch.dev/v1alpha1
            kind: MCPServer
            metadata:
              name: up_session
            spec:
              url: http://127.0.0.1:{ports["mcp_session"]}/mcp
              sideEffects:
                level: read_only
            ---
            apiVersion: joch.dev/v1alpha1
            kind: Tool
            metadata:
              name: add
              namespace: rest
            spec:
              type: rest
              description: Add two integers (the bench's REST upstream).
              endpoint:
                method: POST
                url: http://127.0.0.1:{ports["rest"]}/add
              inputSchema:
                type: object
                required: [a, b]
                properties:
                  a: {{type: integer}}
                  b: {{type: integer}}
              sideEffects:
                level: read_only
            """
        )
    )
    config = home / "toolgate.yaml"
    text = textwrap.dedent(
        """\
        sources:
          - path: ./upstreams.yaml
        sandbox:
          network_grants:
            MCPServer:up_stateless: [127.0.0.1/32]
            MCPServer:up_session: [127.0.0.1/32]
            rest:add: [127.0.0.1/32]
        """
    )
    if state is not None:
        text += f"state: {state}\n"
    config.write_text(text)
    return config


def _toolgate_command(config: Path, port: int, workers: int) -> list[str]:
    exe = shutil.which("toolgate") or str(Path(sys.executable).parent / "toolgate")
    command = [exe, "--config", str(config), "serve", "--port", str(port)]
    return command + (["--workers", str(workers)] if workers > 1 else [])


# -- wrk ---------------------------------------------------------------------------------------

_RPS = re.compile(r"Requests/sec:\s+([\d.]+)")
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_ERRORS = re.compile(r"Socket errors:.*")
_PERCENTILE = re.compile(r"^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)


#: Gives every JSON-RPC request its own id (a session refuses an id already in flight): each wrk
#: thread counts from its own offset. The same script drives the floor and the proxied rows.
_UNIQUE_IDS = """
local next_thread = 0
function setup(thread)
  thread:set("offset", next_thread * 1000000000)
  next_thread = next_thread + 1
end
local counter = 0
function request()
  counter = counter + 1
  local body = string.gsub(template, '"id": 1,', '"id": ' .. (offset + counter) .. ',', 1)
  return wrk.format(nil, nil, nil, body)
end
"""


def _wrk_script(request: Request, folder: Path, name: str) -> Path:
    body = json.dumps(request.body)
    lines = ['wrk.method = "POST"', f"template = {json.dumps(body)}", "wrk.body = template"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in request.headers.items()]
    if '"id": 1,' in body:
        lines.append(_UNIQUE_IDS)
    script = folder / f"{name}.lua"
    script.write_text("\n".join(lines) + "\n")
    return script


def _wrk(request: Request, script: Path, connections: int, seconds: float) -> dict[str, float]:
    threads = 1 if connections == 1 else 2
    command = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
    command += ["--latency", "-s", str(script), request.url]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    rps = _RPS.search(out)
    if rps is None:
        raise RuntimeError(f"wrk printed no rate: {out[-400:]}")
    bad = _NON_2XX.search(out)
    if bad is not None and int(bad.group(1)) > 0:
        raise RuntimeError(f"{bad.group(1)} non-2xx responses")
    errors = _ERRORS.search(out)
    if errors is not None:
        raise RuntimeError(f"socket errors: {errors.group(0)}")
    figures = {"rps": float(rps.group(1))}
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    for match in _PERCENTILE.finditer(out):
        figures[f"p{match.group(1)}"] = float(match.group(2)) * scale[match.group(3)]
    return figures


# -- the run -----------------------------------------------------------------------------------


@contextmanager
def _fleet(
    instances: tuple[str, ...], folder: Path, ref_src: Path | None = None
) -> Iterator[tuple[dict[str, Request], dict[tuple[str, str], Request]]]:
    """Start the upstreams and the toolgate instances; the floor request of each upstream and
    the proxied request of each (upstream, ``instance/surface``)."""
    ports = {name: _free_port() for name in UPSTREAMS}
    commands = {
        "mcp_stateless": [sys.executable, str(SERVERS / "mcp_upstream.py"), "stateless"],
        "mcp_session": [sys.executable, str(SERVERS / "mcp_upstream.py"), "session"],
        "rest": [sys.executable, str(SERVERS / "rest_upstream.py")],
    }
    with ExitStack() as stack:
        floors: dict[str, Request] = {}
        for name in UPSTREAMS:
            command = commands[name]
            command = [*command[:2], str(ports[name]), *command[2:]]
            log = folder / f"{name}.log"
            stack.enter_context(_process(command, log))
            url = f"http://127.0.0.1:{ports[name]}"
            if name == "rest":
                json_type = {"Content-Type": "application/json"}
                floors[name] = Request(f"{url}/add", ARGUMENTS, json_type)
                _wait(floors[name], log)
                continue
            stateless = name == "mcp_stateless"
            probe = _mcp_call(f"{url}/mcp", "add", sessionless=False)
            if stateless:
                _wait(probe, log)
                floors[name] = probe
            else:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        session = _open_session(f"{url}/mcp")
                        break
                    except (urllib.error.URLError, ConnectionError, OSError):
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.25)
                floors[name] = _mcp_call(f"{url}/mcp", "add", sessionless=False, session=session)
                _wait(floors[name], log)
        proxied: dict[tuple[str, str], Request] = {}
        for instance in instances:
            home = folder / instance
            home.mkdir()
            state = _shared_database() if instance.startswith("tg_pg") else None
            config = _toolgate_config(home, ports, state)
            port = _free_port()
            workers = 2 if instance.endswith("_w2") else 1
            env = {**os.environ, "TOOLGATE_HOME": str(home)}
            if instance == "ref":
                assert ref_src is not None
                env["PYTHONPATH"] = str(ref_src)  # imported before this tree's own install
            log = folder / f"{instance}.log"
            stack.enter_context(_process(_toolgate_command(config, port, workers), log, env))
            base = f"http://127.0.0.1:{port}"
            for upstream in UPSTREAMS:
                tool = TOOL_IDS[upstream]
                api = Request(
                    f"{base}/v1/tools/{tool}/call",
                    {"arguments": ARGUMENTS},
                    {"Content-Type": "application/json"},
                )
                mcp = _mcp_call(f"{base}/mcp", tool.replace(":", "__"), sessionless=True)
                _wait(api, log)
                _wait(mcp, log)
                proxied[(upstream, f"{instance}/api")] = api
                proxied[(upstream, f"{instance}/mcp")] = mcp
        yield floors, proxied


def run(args: argparse.Namespace) -> list[Row]:
    """Measure every row, alternating floor and proxied rows in each round."""
    upstreams = tuple(u for u in UPSTREAMS if args.only is None or u in args.only)
    instances = tuple(args.instances) + (("ref",) if args.ref_src is not None else ())
    rows: dict[tuple[str, str], Row] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="tg-upstream-bench-") as tmp:
            folder = Path(tmp)
            with _fleet(instances, folder, args.ref_src) as (floors, proxied):
                plan: list[tuple[str, str, Request]] = []
                for upstream in upstreams:
                    plan.append((upstream, "floor", floors[upstream]))
                    for instance in instances:
                        for surface in SURFACES:
                            key = f"{instance}/{surface}"
                            plan.append((upstream, key, proxied[(upstream, key)]))
                scripts = {
                    (u, k): _wrk_script(r, folder, f"{u}-{k.replace('/', '-')}") for u, k, r in plan
                }
                for upstream, key, request in plan:  # warm up every path once
                    rows[(upstream, key)] = Row(upstream, key)
                    _wrk(request, scripts[(upstream, key)], 4, 1)
                for round_ in range(1, args.rounds + 1):
                    if not args.json:
                        print(f"round {round_}/{args.rounds} …", file=sys.stderr, flush=True)
                    for upstream, key, request in plan:
                        row = rows[(upstream, key)]
                        script = scripts[(upstream, key)]
                        try:
                            one = _wrk(request, script, 1, args.seconds)
                            many = _wrk(request, script, LOAD_CONNECTIONS, args.seconds)
                        except Exception as exc:  # noqa: BLE001 - report it, measure the rest
                            row.problem = f"{type(exc).__name__}: {exc}"
                            continue
                        row.p50.append(one.get("p50", float("nan")))
                        row.p99.append(one.get("p99", float("nan")))
                        row.rps.append(many["rps"])
    finally:
        _drop_shared_database()
    return list(rows.values())


# -- the report --------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _spread(values: list[float], digits: int) -> str:
    if len(values) < 2:
        return ""
    return f" [{min(values):.{digits}f}–{max(values):.{digits}f}]"


def report(rows: list[Row], rounds: int) -> list[str]:
    """The table: each proxied row beside its upstream's floor, the added p50, the % of calls/s."""
    floors = {row.upstream: row for row in rows if row.key == "floor"}
    lines = [
        f"Proxied upstream calls (wrk, loopback; medians of {rounds} alternating rounds, "
        "[min–max] over rounds)",
        f"p50/p99 at 1 connection (ms); calls/s at {LOAD_CONNECTIONS} connections",
        "",
        f"{'upstream':<14} {'row':<12} {'p50':>18} {'p99':>8} {'added p50':>10} "
        f"{'calls/s':>20} {'% floor':>8}",
    ]
    for row in rows:
        if row.problem is not None and not row.rps:
            lines.append(f"{row.upstream:<14} {row.key:<12} FAILED: {row.problem}")
            continue
        floor = floors.get(row.upstream)
        p50, p99, rps = _median(row.p50), _median(row.p99), _median(row.rps)
        added = share = ""
        if floor is not None and row is not floor and floor.rps:
            added = f"{p50 - _median(floor.p50):+.2f}"
            share = f"{100 * rps / _median(floor.rps):.0f} %"
        lines.append(
            f"{row.upstream:<14} {row.key:<12} {p50:>6.2f}{_spread(row.p50, 2):<12} "
            f"{p99:>8.2f} {added:>10} {rps:>7,.0f}{_spread(row.rps, 0):<13} {share:>8}"
        )
        if row.problem is not None:
            lines.append(f"{'':<27} (a round failed: {row.problem})")
    lines += ["", "Goals (one process, tg):"]
    for row in rows:
        floor = floors.get(row.upstream)
        if row.key.startswith("tg/") and floor is not None and row.rps and floor.rps:
            added = _median(row.p50) - _median(floor.p50)
            share = _median(row.rps) / _median(floor.rps)
            met = added <= GOAL_ADDED_P50_MS and share >= GOAL_SHARE
            lines.append(
                f"  {row.upstream:<14} {row.key:<8} added p50 {added:+.2f} ms "
                f"(≤ {GOAL_ADDED_P50_MS}), {100 * share:.0f} % of the floor's calls/s "
                f"(≥ {100 * GOAL_SHARE:.0f} %): {'met' if met else 'not met'}"
            )
    return lines


def to_json(rows: list[Row]) -> dict[str, Any]:
    """The rows as a JSON document (per-round figures and medians)."""
    return {
        "rows": [
            {
                "upstream": row.upstream,
                "row": row.key,
                "p50_ms": row.p50,
                "p99_ms": row.p99,
                "rps": row.rps,
                "median_p50_ms": _median(row.p50),
                "median_p99_ms": _median(row.p99),
                "median_rps": _median(row.rps),
                "problem": row.problem,
            }
            for row in rows
        ]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (3)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per wrk run (3)")
    parser.add_argument(
        "--only", type=lambda s: set(s.split(",")), default=None, help=f"of {','.join(UPSTREAMS)}"
    )
    parser.add_argument(
        "--instances",
        type=lambda s: s.split(","),
        default=list(INSTANCES),
        help=f"toolgate instances, of {','.join(INSTANCES)} (all)",
    )
    parser.add_argument(
        "--ref-src",
        type=Path,
        default=None,
        help="also run a 'ref' instance (one process, SQLite) from this source folder (the src "
        "of an exported tree, e.g. main's), alternating with this tree's",
    )
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 1
    unknown = set(args.instances) - set(INSTANCES)
    if unknown:
        parser.error(f"unknown instances: {', '.join(sorted(unknown))}")
    rows = run(args)
    if args.json:
        print(json.dumps(to_json(rows), indent=2))
    else:
        print("\n".join(report(rows, args.rounds)))
    return 1 if any(row.problem and not row.rps for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
