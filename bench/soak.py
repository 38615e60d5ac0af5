"""The soak test: ``toolgate serve`` under a hostile mix of tools and callers for minutes on end.

    python bench/soak.py                    # 10 minutes on the embedded SQLite store
    python bench/soak.py --minutes 2        # a shorter run
    python bench/soak.py --shared           # state in PostgreSQL + Redis, PostgreSQL paused 10 s
                                            # (toolgate[postgres]; a scratch database on
                                            # 127.0.0.1:5432, dropped at the end)

One real ``toolgate serve`` process (audit on) serves, to three agents with their own API keys,
over the HTTP API and over MCP (streamable HTTP, the official SDK client):

* **fast** tools: a sync and an async Python function, a one-shot script tool (python3) and a
  tool of an upstream MCP server (stdio, the official SDK);
* **slow**: a sync Python tool that sleeps, flooded past its concurrency limit and queue;
* **failing**: a Python tool that raises;
* **hostile**: a script that prints 2 MB (its output spills to a file), one that never ends
  (cut at its timeout) and one that spins on the CPU (cut at its timeout);
* **approval**: a tool every call of which waits for a person, while a person (the operator's
  key) approves and denies what waits.

Meanwhile the upstream MCP server is killed every ``--kill-every`` seconds (the gateway starts it
again), and with ``--shared`` PostgreSQL is paused (SIGSTOP) for 10 s once.

Before the mix, the fast tools are called alone for ``--unloaded`` seconds: their p50/p99 there
is the baseline of the same run. The report gives, per tool class, calls served, p50/p99 and
errors by code; the fast tools' p99 under the mix against unloaded (goal: within 2×); the
server's memory over time (goal: flat after warm-up); and every call the gateway acknowledged
(an HTTP answer or an MCP result with its call id) looked up in the audit log (goal: none lost).

Exit code 0 whatever the figures (they are informational), 1 when the run could not be made.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

AGENTS = ("agent-a", "agent-b", "agent-c")
OPERATOR = "ops"
UPSTREAM_MARKER = "soak_upstream_server.py"

TOOLS_PY = '''
"""The soak test's Python tools."""
import asyncio
import time

from toolgate import ToolError, tool


@tool(namespace="soak")
def fast(text: str) -> str:
    """Echo the text (sync)."""
    return text


@tool(namespace="soak")
async def fast_async(text: str) -> str:
    """Echo the text (async)."""
    return text


@tool(namespace="soak", timeout=5)
def slow(seconds: float) -> str:
    """Sleep, then answer (a sync tool that holds a thread)."""
    time.sleep(seconds)
    return "slept"


@tool(namespace="soak")
def failing(text: str) -> str:
    """Always fail."""
    raise ToolError(f"failing as asked: {text}")


@tool(namespace="soak", effect="external_write", approval=True)
def needs_ok(order: int) -> str:
    """A call a person must approve."""
    return f"order {order} placed"
'''

UPSTREAM_PY = '''
"""An upstream MCP server for the soak test (stdio, the official SDK)."""
from mcp.server.mcpserver import MCPServer

server = MCPServer("soak-upstream")


def echo(text: str) -> str:
    """Echo the text."""
    return text


server.add_tool(echo, name="echo", description="Echo the text.")

if __name__ == "__main__":
    server.run("stdio")
'''

SCRIPTS = {
    "fast_script": (
        "import json,sys\nprint(json.dumps({'text': json.load(sys.stdin)['text']}))\n",
        10_000,
    ),
    "huge_output": (
        "import sys\nsys.stdout.write('{\"blob\": \"' + 'x' * 2_000_000 + '\"}')\n",
        10_000,
    ),
    "never_ends": ("import time\nwhile True:\n    time.sleep(1)\n", 2_000),
    "cpu_spin": ("while True:\n    pass\n", 2_000),
}


def _tool_md(name: str, timeout_ms: int) -> str:
    return textwrap.dedent(
        f"""\
        ---
        name: {name}
        script: main.py
        runtime: python
        timeout: {timeout_ms}
        inputSchema:
          type: object
          properties:
            text: {{type: string}}
          additionalProperties: false
        ---
        The soak test's {name.replace("_", " ")} script.
        """
    )


def write_home(home: Path, *, database: str | None) -> None:
    """A toolgate home with every tool of the mix, an upstream MCP server and the agents."""
    (home / "soak_tools.py").write_text(TOOLS_PY)
    (home / UPSTREAM_MARKER).write_text(UPSTREAM_PY)
    for name, (script, timeout_ms) in SCRIPTS.items():
        folder = home / "soak-scripts" / name
        folder.mkdir(parents=True)
        (folder / "tool.md").write_text(_tool_md(name, timeout_ms))
        (folder / "main.py").write_text(script)
    (home / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        "  name: upstream\n"
        "spec:\n"
        f"  command: {json.dumps(sys.executable)}\n"
        f"  args: [{json.dumps(str(home / UPSTREAM_MARKER))}]\n"
        "  sideEffects: {level: read_only}\n"
        "  reconnect: {initialDelaySeconds: 0.2, maxDelaySeconds: 1}\n"
    )
    lines = [
        "python:",
        "  - ./soak_tools.py",
        "tool_folders:",
        "  - path: ./soak-scripts",
        "    namespace: scripts",
        "sources:",
        "  - path: ./upstream.yaml",
        "    format: resource",
        "overflow:",
        f"  dir: {json.dumps(str(home / 'spill'))}",
        "agents:",
        f"  {OPERATOR}:",
        "    labels: {role: operator}",
    ]
    if database is not None:
        lines += [
            f"state: {json.dumps(database)}",
            "redis: redis://127.0.0.1:6379/0",
        ]
    (home / "toolgate.yaml").write_text("\n".join(lines) + "\n")


def toolgate(home: Path, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("toolgate"))
    env = {**os.environ, "TOOLGATE_HOME": str(home)}
    return subprocess.run(
        [exe, "--config", str(home / "toolgate.yaml"), *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        **kwargs,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mib(pid: int) -> float:
    """Resident memory of one process (its children are not counted)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def upstream_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if UPSTREAM_MARKER.encode() in cmdline:
                found.append(int(entry.name))
    return found


def postgres_pids() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("postgres"):
                found.append(int(entry.name))
    return found


@dataclass
class Tally:
    """What one tool class's calls came to."""

    latencies: list[float] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)

    def add(self, seconds: float, outcome: str) -> None:
        self.latencies.append(seconds)
        self.outcomes[outcome] += 1


@dataclass
class Run:
    base: str
    keys: dict[str, str]
    stop: float
    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    acknowledged: set[str] = field(default_factory=set)
    events: list[str] = field(default_factory=list)


def _outcome_name(body: dict[str, Any]) -> str:
    status = body.get("status", "?")
    return status if status != "error" else f"error:{body.get('code')}"


async def http_call(
    run: Run,
    client: httpx.AsyncClient,
    agent: str,
    klass: str,
    tool: str,
    arguments: dict[str, Any],
) -> dict[str, Any] | None:
    started = time.perf_counter()
    try:
        response = await client.post(
            f"{run.base}/v1/tools/{tool}/call",
            json={"arguments": arguments},
            headers={"Authorization": f"Bearer {run.keys[agent]}"},
        )
    except httpx.HTTPError as exc:
        run.tallies[klass].add(time.perf_counter() - started, f"transport:{type(exc).__name__}")
        return None
    seconds = time.perf_counter() - started
    if response.status_code not in (200, 202):  # 202: pending approval
        run.tallies[klass].add(seconds, f"http:{response.status_code}")
        return None
    body: dict[str, Any] = response.json()
    run.tallies[klass].add(seconds, _outcome_name(body))
    if body.get("call_id") and body.get("status") in ("ok", "error", "pending_approval"):
        run.acknowledged.add(body["call_id"])
    return body


async def caller(run: Run, klass: str, agent: str, tool: str, make: Any, pause: float) -> None:
    """One caller: calls ``tool`` over HTTP until the run stops."""
    async with httpx.AsyncClient(timeout=60) as client:
        n = 0
        while time.monotonic() < run.stop:
            n += 1
            await http_call(run, client, agent, klass, tool, make(n))
            if pause:
                await asyncio.sleep(pause)


async def mcp_caller(run: Run, agent: str, pause: float) -> None:
    """One MCP client (streamable HTTP) calling the fast Python tool until the run stops."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    tally = run.tallies["fast (MCP)"]
    serial = 0
    while time.monotonic() < run.stop:
        try:
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {run.keys[agent]}"}, timeout=60
            )
            async with Client(
                streamable_http_client(f"{run.base}/mcp", http_client=http), mode="legacy"
            ) as mcp:
                while time.monotonic() < run.stop:
                    # MCP results carry no call id: the text names the call in the audit log.
                    serial += 1
                    text = f"mcp-{agent}-{serial}"
                    started = time.perf_counter()
                    result = await mcp.call_tool("soak__fast", {"text": text})
                    tally.add(time.perf_counter() - started, "error" if result.is_error else "ok")
                    run.acknowledged.add(text)
                    await asyncio.sleep(pause)
        except Exception as exc:  # noqa: BLE001 - a lost session is counted, then reopened
            tally.add(0.0, f"session:{type(exc).__name__}")
            await asyncio.sleep(0.5)


async def asker(run: Run, agent: str, index: int) -> None:
    """An agent calling a tool that needs approval: it asks again with the same arguments until
    the person's decision is in (an approved call runs on that retry), then asks for the next."""
    async with httpx.AsyncClient(timeout=60) as client:
        order = index * 1_000_000
        while time.monotonic() < run.stop:
            order += 1
            while time.monotonic() < run.stop:
                body = await http_call(
                    run, client, agent, "approval", "soak:needs_ok", {"order": order}
                )
                if body is not None and body.get("status") != "pending_approval":
                    break
                await asyncio.sleep(0.5)


async def person(run: Run) -> None:
    """The operator deciding what waits for approval, every second (2 approvals for 1 denial)."""
    headers = {"Authorization": f"Bearer {run.keys[OPERATOR]}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as client:
        n = 0
        while time.monotonic() < run.stop:
            await asyncio.sleep(1.0)
            try:
                page = (await client.get(f"{run.base}/v1/approvals")).json()
            except (httpx.HTTPError, ValueError):
                continue
            for request in page.get("approvals", [])[:20]:
                n += 1
                decision = "deny" if n % 3 == 0 else "approve"
                await client.post(
                    f"{run.base}/v1/approvals/{request['id']}/decision", json={"decision": decision}
                )


async def chaos(run: Run, kill_every: float, shared: bool) -> None:
    """Kill the upstream MCP server now and then; with ``shared``, pause PostgreSQL once."""
    paused = not shared
    next_kill = time.monotonic() + kill_every
    pause_at = time.monotonic() + (run.stop - time.monotonic()) / 3
    while time.monotonic() < run.stop:
        await asyncio.sleep(0.5)
        now = time.monotonic()
        if now >= next_kill:
            pids = upstream_pids()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            run.events.append(
                f"{now - run.stop:+.0f}s killed the upstream MCP server ({len(pids)} process(es))"
            )
            next_kill = now + kill_every
        if not paused and now >= pause_at:
            pids = postgres_pids()
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            run.events.append(f"paused PostgreSQL ({len(pids)} processes) for 10 s")
            try:
                await asyncio.sleep(10)
            finally:
                for pid in pids:
                    os.kill(pid, signal.SIGCONT)
            paused = True


async def memory(run: Run, pid: int, samples: list[tuple[float, float]], started: float) -> None:
    while time.monotonic() < run.stop:
        samples.append((time.monotonic() - started, rss_mib(pid)))
        await asyncio.sleep(10)
    samples.append((time.monotonic() - started, rss_mib(pid)))


FAST = {
    "fast (python sync)": ("soak:fast", lambda n: {"text": f"hi {n}"}),
    "fast (python async)": ("soak:fast_async", lambda n: {"text": f"hi {n}"}),
    "fast (script)": ("scripts:fast_script", lambda n: {"text": f"hi {n}"}),
    "fast (upstream MCP)": ("upstream:echo", lambda n: {"text": f"hi {n}"}),
}


async def mix(
    run: Run,
    kill_every: float,
    shared: bool,
    pid: int,
    samples: list[tuple[float, float]],
    started: float,
) -> None:
    tasks = [memory(run, pid, samples, started), chaos(run, kill_every, shared), person(run)]
    for i, agent in enumerate(AGENTS):
        for klass, (tool, make) in FAST.items():
            tasks.append(caller(run, klass, agent, tool, make, 0.05))
        tasks.append(mcp_caller(run, agent, 0.05))
        tasks.append(caller(run, "failing", agent, "soak:failing", lambda n: {"text": str(n)}, 0.2))
        tasks.append(asker(run, agent, i))
    # The flood: more slow calls at once than the tool's limit and queue hold.
    for _ in range(120):
        tasks.append(
            caller(
                run,
                "slow (flooded)",
                random.choice(AGENTS),
                "soak:slow",
                lambda n: {"seconds": 2.0},
                0.0,
            )
        )
    for klass, tool in (
        ("hostile: 2 MB output", "scripts:huge_output"),
        ("hostile: never ends", "scripts:never_ends"),
        ("hostile: CPU spin", "scripts:cpu_spin"),
    ):
        tasks.append(caller(run, klass, AGENTS[1], tool, lambda n: {"text": "x"}, 0.5))
    await asyncio.gather(*tasks)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def audited_ids(base: str, key: str, since: float) -> set[str]:
    found: set[str] = set()
    async with httpx.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        offset = 0
        while True:
            page = (
                await client.get(
                    f"{base}/v1/audit", params={"since": since, "limit": 500, "offset": offset}
                )
            ).json()
            records = page.get("records", [])
            for record in records:
                found.add(record["call_id"])
                text = (record.get("args") or {}).get("text")
                if isinstance(text, str) and text.startswith("mcp-"):
                    found.add(text)
            if len(records) < 500:
                return found
            offset += 500


def _ms(values: list[float], q: float) -> str:
    return f"{percentile(values, q) * 1e3:.1f}"


def report(
    alone: Run, loaded: Run, samples: list[tuple[float, float]], missing: set[str], minutes: float
) -> None:
    print(f"\n## toolgate serve under the soak mix ({minutes:g} min)\n")
    print("| tool class | calls | p50 ms | p99 ms | outcomes |")
    print("|---|---:|---:|---:|---|")
    for klass, tally in sorted(loaded.tallies.items()):
        outcomes = ", ".join(f"{k} {v}" for k, v in tally.outcomes.most_common())
        times = tally.latencies
        print(f"| {klass} | {len(times)} | {_ms(times, 0.5)} | {_ms(times, 0.99)} | {outcomes} |")
    print("\n## Fast tools: p99 under the mix against unloaded (goal ≤ 2×)\n")
    print(
        "| tool | unloaded p50 ms | unloaded p99 ms | loaded p50 ms | loaded p99 ms | p99 ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for klass in FAST:
        quiet, busy = alone.tallies[klass].latencies, loaded.tallies[klass].latencies
        ratio = percentile(busy, 0.99) / percentile(quiet, 0.99) if quiet and busy else float("nan")
        print(
            f"| {klass} | {_ms(quiet, 0.5)} | {_ms(quiet, 0.99)} | {_ms(busy, 0.5)} "
            f"| {_ms(busy, 0.99)} | {ratio:.2f}× |"
        )
    print("\n## Server memory (RSS, MiB; children not counted)\n")
    print(" ".join(f"{t:.0f}s:{m:.0f}" for t, m in samples))
    if len(samples) >= 4:
        at, warm = samples[len(samples) // 4]
        print(f"after warm-up (t={at:.0f}s) {warm:.0f} MiB → end {samples[-1][1]:.0f} MiB")
    print("\n## Events\n")
    for event in loaded.events:
        print(f"- {event}")
    total = len(alone.acknowledged | loaded.acknowledged)
    print(f"\n## Audit: {total} acknowledged calls, {len(missing)} missing from the log (goal 0)")
    for call_id in sorted(missing)[:10]:
        print(f"- missing: {call_id}")


ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def scratch_database() -> str:
    """A new database for the shared-state run (dropped at the end, see :func:`drop`)."""
    import psycopg

    name = f"toolgate_soak_{os.getpid()}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return ADMIN_URL.rpartition("/")[0] + "/" + name


def drop(database: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{database.rpartition("/")[2]}" WITH (FORCE)')


async def main_async(args: argparse.Namespace) -> int:
    database = scratch_database() if args.shared else None
    try:
        return await soak(args, database)
    finally:
        if database is not None:
            drop(database)


async def soak(args: argparse.Namespace, database: str | None) -> int:
    home = Path(tempfile.mkdtemp(prefix="toolgate-soak-"))
    write_home(home, database=database)
    if database is not None:
        toolgate(home, "db", "upgrade")  # a new shared database gets its tables first
    keys = {
        name: toolgate(home, "agents", "add", name).stdout.strip() for name in (*AGENTS, OPERATOR)
    }
    port = free_port()
    exe = str(Path(sys.executable).with_name("toolgate"))
    log = (home / "serve.log").open("w")
    server = subprocess.Popen(
        [exe, "--config", str(home / "toolgate.yaml"), "serve", "--port", str(port)],
        env={**os.environ, "TOOLGATE_HOME": str(home)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    if (await client.get(f"{base}/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            else:
                print(
                    f"toolgate serve did not start; its log: {home / 'serve.log'}", file=sys.stderr
                )
                return 1
        since = time.time() - 5
        print(
            f"toolgate serve on {base} (home {home}); unloaded for {args.unloaded:g} s …",
            file=sys.stderr,
        )
        alone = Run(base, keys, time.monotonic() + args.unloaded)
        per_tool = args.unloaded / len(FAST)
        for klass, (tool, make) in FAST.items():
            alone.stop = time.monotonic() + per_tool
            await caller(alone, klass, AGENTS[0], tool, make, 0.02)
        print(f"the mix for {args.minutes:g} min …", file=sys.stderr)
        started = time.monotonic()
        loaded = Run(base, keys, started + args.minutes * 60)
        samples: list[tuple[float, float]] = []
        await mix(loaded, args.kill_every, args.shared, server.pid, samples, started)
        await asyncio.sleep(2)  # let the audit writer drain what is queued
        audited = await audited_ids(base, keys[OPERATOR], since)
        missing = (alone.acknowledged | loaded.acknowledged) - audited
        report(alone, loaded, samples, missing, args.minutes)
        return 0
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=10.0, help="length of the mix (default 10)"
    )
    parser.add_argument(
        "--unloaded", type=float, default=20.0, help="seconds of the unloaded baseline (default 20)"
    )
    parser.add_argument(
        "--kill-every",
        type=float,
        default=60.0,
        help="seconds between kills of the upstream MCP server (default 60)",
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="state in PostgreSQL + Redis; pause PostgreSQL for 10 s once",
    )
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
