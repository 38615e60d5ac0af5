"""Three real ``toolgate serve`` replicas on three ports, one PostgreSQL database and one Redis:
calls spread across them see one rate limit, one idempotency record, one approval queue and one
set of agent keys.

The database is made for this module and dropped after it; ``toolgate db upgrade`` makes its
schema, as an operator would. Each run uses its own tool namespace, so counters other runs left
in the shared Redis never count here.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

import toolgate
from postgres_support import scratch_database
from test_mcp_server_helpers import answer_with

pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
pytest.importorskip("redis", reason="toolgate[redis] is not installed")

from toolgate.stores.postgres_schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("TOOLGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
TOOLGATE = str(Path(sys.executable).parent / "toolgate")
BOT_KEY = "tg_bot_" + uuid.uuid4().hex
OPS_KEY = "tg_ops_" + uuid.uuid4().hex

TOOLS = '''
import os
import time
from toolgate import tool

RUNS = {runs!r}


def _ran(name: str) -> None:
    with open(RUNS, "a") as log:
        log.write(name + "\\n")


@tool(effect="read_only")
def whoami() -> int:
    """The process id of the server that ran this call."""
    return os.getpid()


@tool(effect="read_only")
def echo(text: str) -> str:
    """Say the text back (no shared state but the audit log)."""
    return text


@tool(calls_per_minute=10)
def ping() -> str:
    """Answer pong, at most ten times a minute across every replica."""
    return "pong"


@tool(idempotency_key="{{{{ args.order_id }}}}")
def charge(order_id: str) -> dict:
    """Charge an order, slowly, once per order id."""
    time.sleep(0.5)
    _ran("charge " + order_id)
    return {{"charged": order_id, "pid": os.getpid()}}


@tool(effect="external_write", approval=True)
def deploy(target: str) -> str:
    """Deploy, once a person agrees."""
    _ran("deploy " + target)
    return "deployed " + target


@tool(effect="external_write", approval=True)
def release(target: str) -> str:
    """Release, once a person agrees (never always-allowed here)."""
    _ran("release " + target)
    return "released " + target
'''


def _redis_up() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.RedisError:
        pytest.skip(
            "Redis is not running at 127.0.0.1:6379; start it with `redis-server --daemonize yes "
            "--bind 127.0.0.1 --port 6379 --save '' --appendonly no` (.ci/run does) or point "
            "TOOLGATE_TEST_REDIS at a server"
        )


def run_toolgate(folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``toolgate ARGS`` in ``folder`` (its toolgate.yaml), to completion."""
    return subprocess.run(
        [TOOLGATE, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )


def clean_env(home: Path, **variables: str) -> dict[str, str]:
    """This process's environment with ``home`` as TOOLGATE_HOME and no shared-state variables
    but ``variables``."""
    env = {**os.environ, "TOOLGATE_HOME": str(home)}
    env.pop("TOOLGATE_DATABASE_URL", None)
    env.pop("TOOLGATE_REDIS_URL", None)
    return {**env, **variables}


@dataclass
class Cluster:
    urls: list[str]
    namespace: str
    runs: Path
    env: dict[str, str]
    folder: Path

    def call(self, replica: int, tool: str, key: str = BOT_KEY, **arguments: Any) -> Any:
        response = httpx2.post(
            f"{self.urls[replica]}/v1/tools/{self.namespace}:{tool}/call",
            json={"arguments": arguments},
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        return response

    def audited(self, tool: str) -> dict[str, dict[str, Any]]:
        """The shared audit log's records of ``tool``, by call id (read with the CLI)."""
        export = self.toolgate("audit", "export", "--tool", f"{self.namespace}:{tool}")
        assert export.returncode == 0, export.stderr
        records = [json.loads(line) for line in export.stdout.splitlines()]
        return {record["call_id"]: record for record in records}

    def ran(self) -> list[str]:
        return self.runs.read_text().splitlines() if self.runs.exists() else []

    def toolgate(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_toolgate(self.folder, self.env, *args)


def _start(folder: Path, env: dict[str, str], *options: str) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [TOOLGATE, "serve", "--port", "0", *options],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    banner = process.stdout.readline()
    match = re.search(r"on http://(127\.0\.0\.1|0\.0\.0\.0):(\d+)", banner)
    if not match:
        process.kill()
        rest = process.stdout.read()
        raise AssertionError(f"serve did not start: {banner}{rest}")
    return process, f"http://127.0.0.1:{match.group(2)}"


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx2.get(url + "/healthz", timeout=5).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "replica did not start"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    _redis_up()
    folder = tmp_path_factory.mktemp("replicas")
    (folder / "shared_tools").mkdir()
    namespace = "r" + uuid.uuid4().hex[:8]
    runs = folder / "runs.log"
    (folder / "replica_tools.py").write_text(TOOLS.format(runs=str(runs)))
    with scratch_database() as database_url:
        config = {
            "state": database_url,
            "redis": REDIS_URL,
            "python": [{"module": "replica_tools.py", "namespace": namespace}],
            # One folder of tool folders for every replica (a shared volume in production).
            "tool_folders": [{"path": "shared_tools", "namespace": namespace}],
            "agents": {
                "bot": {"key_sha256": hashlib.sha256(BOT_KEY.encode()).hexdigest()},
                "ops": {
                    "key_sha256": hashlib.sha256(OPS_KEY.encode()).hexdigest(),
                    "labels": {"role": "operator"},
                },
            },
        }
        (folder / "toolgate.yaml").write_text(json.dumps(config))
        env = clean_env(folder / "home")
        upgrade = run_toolgate(folder, env, "db", "upgrade")
        assert upgrade.returncode == 0, upgrade.stderr
        assert f"to {SCHEMA_VERSION}" in upgrade.stdout
        processes: list[subprocess.Popen[str]] = []
        try:
            urls = []
            for _ in range(3):
                process, url = _start(folder, env)
                processes.append(process)
                urls.append(url)
            for process, url in zip(processes, urls, strict=True):
                _wait_healthy(url, process)
            yield Cluster(urls, namespace, runs, env, folder)
        finally:
            for process in processes:
                process.send_signal(signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_serve_refuses_a_database_that_was_never_upgraded(tmp_path: Path) -> None:
    with scratch_database() as database_url:
        (tmp_path / "toolgate.yaml").write_text(json.dumps({"state": database_url}))
        env = clean_env(tmp_path / "home")
        result = run_toolgate(tmp_path, env, "serve", "--port", "0")
        assert result.returncode == 3
        assert "state:" in result.stderr and "toolgate db upgrade" in result.stderr
        status = run_toolgate(tmp_path, env, "db", "status", "--json")
        assert status.returncode == 1
        assert json.loads(status.stdout)["version"] == 0


def test_the_environment_variable_wins_and_a_refusing_server_is_named(tmp_path: Path) -> None:
    env = clean_env(
        tmp_path / "home",
        TOOLGATE_DATABASE_URL="postgresql://toolgate:hunter2@127.0.0.1:1/toolgate",
    )
    result = run_toolgate(tmp_path, env, "serve", "--port", "0")
    assert result.returncode == 3
    assert "TOOLGATE_DATABASE_URL" in result.stderr and "127.0.0.1:1" in result.stderr
    assert "hunter2" not in result.stderr


def test_a_rate_limit_counts_calls_on_every_replica_together(cluster: Cluster) -> None:
    answers = [cluster.call(i % 3, "ping").json() for i in range(15)]
    assert [a["status"] for a in answers].count("ok") == 10
    refused = [a for a in answers if a["status"] != "ok"]
    assert len(refused) == 5 and all(a["code"] == "rate_limited" for a in refused)


def test_one_idempotency_key_sent_to_three_replicas_at_once_runs_once(cluster: Cluster) -> None:
    order = "o-" + uuid.uuid4().hex[:6]
    with ThreadPoolExecutor(3) as pool:
        answers = list(
            pool.map(lambda i: cluster.call(i, "charge", order_id=order).json(), [0, 1, 2])
        )
    assert cluster.ran().count(f"charge {order}") == 1
    assert all(a["status"] == "ok" for a in answers), answers
    assert len({json.dumps(a["content"], sort_keys=True) for a in answers}) == 1
    replayed = sorted(a["metadata"]["idempotency"]["replayed"] for a in answers)
    assert replayed == [False, True, True]


def test_approval_asked_on_a_decided_on_b_runs_on_retry_on_c(cluster: Cluster) -> None:
    target = "t-" + uuid.uuid4().hex[:6]
    asked = cluster.call(0, "deploy", target=target).json()
    assert asked["status"] == "pending_approval"
    approval_id = asked["approval"]["id"]
    listed = httpx2.get(
        f"{cluster.urls[2]}/v1/approvals",
        headers={"Authorization": f"Bearer {OPS_KEY}"},
        timeout=30,
    ).json()
    assert approval_id in [a["id"] for a in listed["approvals"]]
    decided = httpx2.post(
        f"{cluster.urls[1]}/v1/approvals/{approval_id}/decision",
        json={"decision": "approve"},
        headers={"Authorization": f"Bearer {OPS_KEY}"},
        timeout=30,
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["outcome"] is None  # B recorded the decision; nothing ran on B
    assert cluster.ran().count(f"deploy {target}") == 0
    retried = cluster.call(2, "deploy", target=target).json()
    assert retried["status"] == "ok", retried
    assert retried["content"] == f"deployed {target}"
    assert cluster.ran().count(f"deploy {target}") == 1


def test_always_allow_given_on_b_applies_on_a_at_once(cluster: Cluster) -> None:
    first = cluster.call(0, "deploy", target="always-1").json()
    assert first["status"] == "pending_approval"
    decided = httpx2.post(
        f"{cluster.urls[1]}/v1/approvals/{first['approval']['id']}/decision",
        json={"decision": "always"},
        headers={"Authorization": f"Bearer {OPS_KEY}"},
        timeout=30,
    )
    assert decided.status_code == 200, decided.text
    other = cluster.call(0, "deploy", target="always-2").json()
    assert other["status"] == "ok", other


def test_an_agent_key_revoked_with_the_cli_is_refused_by_every_replica(cluster: Cluster) -> None:
    added = cluster.toolgate("agents", "add", "temp-bot")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip().splitlines()[-1].strip()
    time.sleep(1.0)  # each replica re-reads the key generation at most every half second
    assert [cluster.call(i, "charge", key=key, order_id="k-1").status_code for i in range(3)] == [
        200,
        200,
        200,
    ]
    revoked = cluster.toolgate("agents", "revoke", "temp-bot")
    assert revoked.returncode == 0, revoked.stderr
    time.sleep(1.0)  # each replica re-reads the key generation at most every half second
    assert [cluster.call(i, "charge", key=key, order_id="k-2").status_code for i in range(3)] == [
        401,
        401,
        401,
    ]


async def test_an_mcp_client_whose_requests_land_on_every_replica_in_turn(cluster: Cluster) -> None:
    """A load balancer without session affinity: each HTTP request goes to the next replica."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    ports = [int(url.rsplit(":", 1)[1]) for url in cluster.urls]
    turns = itertools.cycle(ports)
    served: list[int] = []

    class RoundRobin(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            port = next(turns)
            served.append(port)
            request.url = request.url.copy_with(port=port)
            return await super().handle_async_request(request)

    http = httpx2.AsyncClient(
        transport=RoundRobin(), timeout=60, headers={"Authorization": f"Bearer {BOT_KEY}"}
    )
    transport = streamable_http_client(cluster.urls[0] + "/mcp", http_client=http)
    # The person approves in the client's form; the client's retry, carrying the sealed
    # requestState, lands on the next replica, which must open what another one sealed.
    async with Client(transport, elicitation_callback=answer_with("approve")) as mcp:
        names = {tool.name for tool in (await mcp.list_tools()).tools}
        assert f"{cluster.namespace}__charge" in names
        for n in range(4):
            result = await mcp.call_tool(f"{cluster.namespace}__charge", {"order_id": f"m-{n}"})
            assert not result.is_error, result
        approved = await mcp.call_tool(f"{cluster.namespace}__release", {"target": "via-mcp"})
        assert not approved.is_error, approved
        assert "released via-mcp" in "".join(getattr(b, "text", "") for b in approved.content)
    await http.aclose()
    assert set(served) == set(ports)
    assert all(f"charge m-{n}" in cluster.ran() for n in range(4))
    assert cluster.ran().count("release via-mcp") == 1


async def test_a_legacy_mcp_client_waiting_on_one_replica_hears_of_a_decision_made_on_another(
    cluster: Cluster,
) -> None:
    """Behind a load balancer that keeps each Mcp-Session-Id on one replica (``mcp_sessions:
    stateful``): the approval form is open in a handshake-era client of replica S, a person
    approves on replica B over the HTTP API, and the call on S completes with the outcome."""
    import anyio
    import mcp_types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    folder = cluster.folder / "sticky"
    folder.mkdir()
    config = json.loads((cluster.folder / "toolgate.yaml").read_text())
    config["python"][0]["module"] = str(cluster.folder / "replica_tools.py")
    config["tool_folders"][0]["path"] = str(cluster.folder / "shared_tools")
    config["serve"] = {"mcp_sessions": "stateful"}
    (folder / "toolgate.yaml").write_text(json.dumps(config))
    process, url = _start(folder, cluster.env)
    target = "sticky-" + uuid.uuid4().hex[:6]
    asked, release = anyio.Event(), anyio.Event()

    async def slow_user(context: Any, params: Any) -> Any:
        asked.set()
        await release.wait()
        return mcp_types.ElicitResult(action="cancel")

    results: list[Any] = []
    try:
        _wait_healthy(url, process)
        http = httpx2.AsyncClient(timeout=60, headers={"Authorization": f"Bearer {BOT_KEY}"})
        transport = streamable_http_client(url + "/mcp", http_client=http)
        async with Client(transport, mode="legacy", elicitation_callback=slow_user) as mcp:
            assert mcp.protocol_version == "2025-11-25"

            async def call() -> None:
                name = f"{cluster.namespace}__release"
                results.append(await mcp.call_tool(name, {"target": target}))

            with anyio.fail_after(120):
                async with anyio.create_task_group() as group:
                    group.start_soon(call)
                    await asked.wait()  # the form is open on S
                    listed = httpx2.get(
                        f"{cluster.urls[1]}/v1/approvals",
                        headers={"Authorization": f"Bearer {OPS_KEY}"},
                        timeout=30,
                    ).json()["approvals"]
                    [request] = [a for a in listed if a["arguments"].get("target") == target]
                    decided = httpx2.post(
                        f"{cluster.urls[1]}/v1/approvals/{request['id']}/decision",
                        json={"decision": "approve"},
                        headers={"Authorization": f"Bearer {OPS_KEY}"},
                        timeout=30,
                    )
                    assert decided.status_code == 200, decided.text
                    while not results:
                        await anyio.sleep(0.05)
                    release.set()
        await http.aclose()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert not results[0].is_error, results[0]
    assert f"released {target}" in "".join(getattr(b, "text", "") for b in results[0].content)
    assert cluster.ran().count(f"release {target}") == 1


def test_a_web_ui_form_from_one_replica_is_accepted_by_another(cluster: Cluster) -> None:
    """The operator's browser loads the inbox from A and its decision is posted to B (no
    affinity): both sign and check form tokens with the key the replicas share."""
    asked = cluster.call(0, "release", target="from-the-web-ui").json()
    approval_id = asked["approval"]["id"]
    with httpx2.Client(auth=("ops", OPS_KEY), timeout=30, follow_redirects=True) as browser:
        page = browser.get(f"{cluster.urls[0]}/approvals/{approval_id}")
        assert page.status_code == 200, page.text
        token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
        assert token is not None
        decided = browser.post(
            f"{cluster.urls[1]}/approvals/{approval_id}",
            data={"csrf_token": token.group(1), "decision": "approve"},
        )
    assert decided.status_code == 200, decided.text
    assert cluster.ran().count("release from-the-web-ui") == 0  # the decision ran nothing
    # The agent's retry, on a third replica, runs it once.
    retried = cluster.call(2, "release", target="from-the-web-ui").json()
    assert retried["status"] == "ok", retried
    assert cluster.ran().count("release from-the-web-ui") == 1


def _start_redis() -> None:
    """Start the local Redis as .ci/run does (the issue's command), and wait until it answers."""
    subprocess.run(
        [
            "redis-server",
            "--daemonize",
            "yes",
            "--bind",
            "127.0.0.1",
            "-::1",
            "--port",
            "6379",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            "/var/lib/redis",
            "--logfile",
            "/var/log/redis/ci.log",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    deadline = time.monotonic() + 30
    while subprocess.run(["redis-cli", "ping"], capture_output=True).stdout.strip() != b"PONG":
        assert time.monotonic() < deadline, "Redis did not start again"
        time.sleep(0.2)


def test_every_replica_writes_and_reads_one_audit_log_and_one_set_of_health_figures(
    cluster: Cluster,
) -> None:
    answers = [
        cluster.call(replica, "echo", text=f"from {replica}").json() for replica in (0, 1, 2)
    ]
    ids = {answer["call_id"] for answer in answers}
    assert all(answer["status"] == "ok" for answer in answers)
    assert all("audit" not in answer.get("metadata", {}) for answer in answers)  # recorded
    # Any replica's API, and the CLI, show the calls every replica answered.
    for replica in range(3):
        page = httpx2.get(
            f"{cluster.urls[replica]}/v1/audit",
            params={"tool": f"{cluster.namespace}:echo"},
            headers={"Authorization": f"Bearer {OPS_KEY}"},
            timeout=30,
        ).json()
        assert ids <= {record["call_id"] for record in page["records"]}
        tool = httpx2.get(
            f"{cluster.urls[replica]}/v1/tools/{cluster.namespace}:echo",
            headers={"Authorization": f"Bearer {BOT_KEY}"},
            timeout=30,
        ).json()
        assert tool["status"]["totalCalls7d"] >= 3, tool["status"]
    assert ids <= set(cluster.audited("echo"))


def test_a_tool_folder_added_to_the_shared_path_reaches_every_replica(cluster: Cluster) -> None:
    demo = Path(toolgate.__file__).parent / "demo" / "tool_folders" / "system_info"
    target = cluster.folder / "shared_tools" / "host-info"
    shutil.copytree(demo, target / "staging")
    manifest = target / "staging" / "tool.md"
    manifest.write_text(manifest.read_text().replace("name: system_info", "name: host-info"))
    for item in (target / "staging").iterdir():  # the folder appears whole, as a deploy does
        item.rename(target / item.name)
    (target / "staging").rmdir()
    tool_id = f"{cluster.namespace}:host-info"
    deadline = time.monotonic() + 90  # the watcher at once; the periodic rescan within 60 s
    pending = set(range(3))
    while pending:
        assert time.monotonic() < deadline, f"replicas {pending} never listed {tool_id}"
        for replica in sorted(pending):
            listed = httpx2.get(
                f"{cluster.urls[replica]}/v1/tools/{tool_id}",
                headers={"Authorization": f"Bearer {BOT_KEY}"},
                timeout=30,
            )
            if listed.status_code == 200:
                pending.discard(replica)
        time.sleep(0.3)
    answer = cluster.call(2, "host-info").json()
    assert answer["status"] == "ok" and "system" in answer["content"], answer


def _hammer(url: str, namespace: str, stop: threading.Event) -> list[tuple[int, Any]]:
    """Call ``echo`` on ``url`` until ``stop`` is set or the replica stops answering; returns
    (HTTP status, answer) for every call that was answered."""
    answered: list[tuple[int, Any]] = []
    with httpx2.Client(timeout=30) as client:
        for n in itertools.count():
            if stop.is_set():
                break
            try:
                response = client.post(
                    f"{url}/v1/tools/{namespace}:echo/call",
                    json={"arguments": {"text": f"n{n}"}},
                    headers={"Authorization": f"Bearer {BOT_KEY}"},
                )
            except httpx2.TransportError:
                break
            answered.append((response.status_code, response.json()))
    return answered


def test_a_replica_killed_in_the_middle_of_calls_lost_no_record_of_a_call_it_answered(
    cluster: Cluster,
) -> None:
    process, url = _start(cluster.folder, cluster.env)
    try:
        _wait_healthy(url, process)
        # A pending approval asked on the replica that is about to die.
        pending = cluster_call(url, cluster.namespace, "release", target="killed").json()
        assert pending["status"] == "pending_approval"
        stop = threading.Event()
        with ThreadPoolExecutor(6) as pool:
            loads = [pool.submit(_hammer, url, cluster.namespace, stop) for _ in range(6)]
            time.sleep(2)  # calls answered, and more in flight on every thread
            process.send_signal(signal.SIGKILL)
            process.wait(30)
            stop.set()
            answered = [item for load in loads for item in load.result()]
    finally:
        if process.poll() is None:
            process.kill()
    acknowledged = {answer["call_id"] for status, answer in answered if status == 200}
    assert len(acknowledged) >= 10, f"only {len(acknowledged)} calls were answered before the kill"
    assert all(answer["status"] == "ok" for _, answer in answered)
    assert all("audit" not in answer.get("metadata", {}) for _, answer in answered)
    # Every call the killed replica answered is in the shared audit log.
    missing = acknowledged - set(cluster.audited("echo"))
    assert not missing, f"{len(missing)} answered calls have no audit record"
    # The others keep serving, and the approval asked on the dead replica is not lost.
    assert cluster.call(1, "echo", text="still here").json()["status"] == "ok"
    approval_id = pending["approval"]["id"]
    listed = httpx2.get(
        f"{cluster.urls[0]}/v1/approvals/{approval_id}",
        headers={"Authorization": f"Bearer {OPS_KEY}"},
        timeout=30,
    )
    assert listed.status_code == 200, listed.text
    assert listed.json()["approval"]["status"] == "pending"


def cluster_call(url: str, namespace: str, tool: str, **arguments: Any) -> httpx2.Response:
    return httpx2.post(
        f"{url}/v1/tools/{namespace}:{tool}/call",
        json={"arguments": arguments},
        headers={"Authorization": f"Bearer {BOT_KEY}"},
        timeout=30,
    )


def test_serve_with_two_workers_shares_one_port_restarts_a_dead_worker_and_stops_cleanly(
    cluster: Cluster,
) -> None:
    # Beyond loopback (the agents have keys): the workers must check the address as a single
    # server does, and answer a browser that names the gateway by another host name.
    process, url = _start(cluster.folder, cluster.env, "--workers", "2", "--host", "0.0.0.0")

    def pids(calls: int) -> set[int]:
        with ThreadPoolExecutor(4) as pool:
            answers = pool.map(
                lambda _: cluster_call(url, cluster.namespace, "whoami").json(), range(calls)
            )
            return {answer["content"] for answer in answers}

    try:
        _wait_healthy(url, process)
        first: set[int] = set()
        for _ in range(10):
            first |= pids(20)
            if len(first) == 2:
                break
        assert len(first) == 2 and process.pid not in first, first
        port = url.rsplit(":", 1)[1]
        with httpx2.Client(auth=("ops", OPS_KEY), timeout=30) as browser:
            for _ in range(6):  # several connections: both workers
                page = browser.get(
                    f"http://127.0.0.1:{port}/", headers={"Host": f"gateway.example:{port}"}
                )
                assert page.status_code == 200, page.text[:300]
        victim = min(first)
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 60
        seen: set[int] = set()
        while not seen - first:
            assert time.monotonic() < deadline, f"no worker replaced {victim}: {seen}"
            seen |= pids(8)  # every call is answered meanwhile, by the survivor
        assert victim not in seen
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    output = process.stdout.read() if process.stdout else ""
    assert f"worker pid {victim} exited" in output
    for pid in first | seen:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_serve_refuses_several_workers_without_the_shared_state(tmp_path: Path) -> None:
    result = run_toolgate(tmp_path, clean_env(tmp_path / "home"), "serve", "--workers", "2")
    assert result.returncode == 1
    assert "--workers 2 needs the shared state in PostgreSQL" in result.stderr
    assert "state:" in result.stderr


@pytest.mark.exclusive
@pytest.mark.skipif(
    os.geteuid() != 0
    or REDIS_URL != "redis://127.0.0.1:6379/0"
    or not Path("/var/lib/redis").is_dir(),
    reason="stopping and starting the local Redis needs root and its folders (as in CI)",
)
def test_rate_limited_calls_are_unavailable_while_redis_is_down_and_recover(
    cluster: Cluster,
) -> None:
    """Redis stopped for ten seconds under calls on every replica."""
    stop = threading.Event()
    calls = (("ping", {}), ("echo", {"text": "no Redis needed"}))
    with ThreadPoolExecutor(3) as pool:
        loads = [pool.submit(_cycle, cluster, worker, stop, calls) for worker in range(3)]
        time.sleep(1)
        subprocess.run(["redis-cli", "shutdown", "nosave"], capture_output=True, timeout=30)
        try:
            down_until = time.monotonic() + 10
            health = httpx2.get(cluster.urls[1] + "/healthz", timeout=30).json()
            assert health["status"] == "degraded" and health["state"]["redis"] is False
            time.sleep(max(0.0, down_until - time.monotonic()))
        finally:
            _start_redis()
        time.sleep(1)
        stop.set()
        answers = [answer for load in loads for answer in load.result()]
    assert all(status != 500 for _, status, _ in answers)
    pings = [answer for tool, _, answer in answers if tool == "ping"]
    unavailable = [answer for answer in pings if answer.get("code") == "unavailable"]
    assert unavailable and all("Redis" in answer["message"] for answer in unavailable)
    # Never unlimited: while Redis was down no ping ran. The restarted Redis keeps nothing (no
    # persistence here), so the minute's count starts again after it: at most ten before the
    # outage and ten after it (and a minute boundary inside the run starts a new window too).
    assert all(
        answer["code"] in ("unavailable", "rate_limited") for answer in pings if answer.get("code")
    )
    assert sum(answer["status"] == "ok" for answer in pings) <= 30
    # Tools without rate limits do not need Redis: every echo ran.
    assert all(answer["status"] == "ok" for tool, _, answer in answers if tool == "echo")
    for replica in range(3):
        # Counted again (ok, or rate_limited once this minute's ten are spent): never unavailable.
        answer = cluster.call(replica, "ping").json()
        assert answer["status"] == "ok" or answer["code"] == "rate_limited", answer


def _pg_ctl(action: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action, "-m", "fast"]
        if action == "stop"
        else ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.exclusive
@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/etc/postgresql").is_dir(),
    reason="stopping the local PostgreSQL needs root and pg_ctlcluster (as in CI)",
)
def test_replicas_answer_unavailable_while_postgresql_is_down_and_recover_by_themselves(
    cluster: Cluster,
) -> None:
    """Runs last in this module: it stops the server every test here uses for ten seconds,
    under calls on every replica, then starts it."""
    assert cluster.call(0, "charge", order_id="before-outage").json()["status"] == "ok"
    stop = threading.Event()
    with ThreadPoolExecutor(3) as pool:
        loads = [pool.submit(_cycle, cluster, worker, stop, CHARGES) for worker in range(3)]
        time.sleep(1)
        _pg_ctl("stop")
        try:
            down_until = time.monotonic() + 10
            for replica in range(3):
                health = httpx2.get(cluster.urls[replica] + "/healthz", timeout=30).json()
                assert health["status"] == "degraded" and health["state"]["database"] is False
            time.sleep(max(0.0, down_until - time.monotonic()))
        finally:
            _pg_ctl("start")
        # No restart of the replicas: each reconnects on its own once the server is back.
        deadline = time.monotonic() + 60
        recovered: set[int] = set()
        while len(recovered) < 3:
            assert time.monotonic() < deadline, f"replicas {set(range(3)) - recovered} are down"
            for replica in set(range(3)) - recovered:
                answer = cluster.call(replica, "charge", order_id=f"after-{replica}").json()
                if answer["status"] == "ok":
                    recovered.add(replica)
            time.sleep(0.5)
        stop.set()
        answers = [answer for load in loads for answer in load.result()]
    # Every call was answered (no 500, no hang), and the ones that needed the database while
    # it was down were refused with a reason, never run unguarded.
    assert all(status != 500 for _, status, _ in answers)
    unavailable = [answer for _, _, answer in answers if answer.get("code") == "unavailable"]
    assert unavailable and all("PostgreSQL" in answer["message"] for answer in unavailable)
    assert {tool for tool, _, answer in answers if answer in unavailable} >= {"charge"}
    # No record lost that a caller was told was recorded.
    told = {
        tool: {
            answer["call_id"]
            for named, _, answer in answers
            if named == tool and "audit" not in answer.get("metadata", {})
        }
        for tool in ("echo", "charge")
    }
    for tool, ids in told.items():
        assert not ids - set(cluster.audited(tool)), f"{tool}: acknowledged records lost"
    assert any("not recorded" in a.get("metadata", {}).get("audit", "") for _, _, a in answers)
    assert all(
        httpx2.get(url + "/healthz", timeout=30).json()["status"] == "ok" for url in cluster.urls
    )


#: What the PostgreSQL outage test calls in turn: a tool with no shared state but the audit log,
#: and one with an idempotency key ({n}: a new order per call).
CHARGES = (("echo", {"text": "w{worker}-{n}"}), ("charge", {"order_id": "load-{worker}-{n}"}))


def _cycle(
    cluster: Cluster,
    worker: int,
    stop: threading.Event,
    calls: tuple[tuple[str, dict[str, str]], ...],
) -> list[tuple[str, int, Any]]:
    """Make ``calls`` (``{worker}`` and ``{n}`` filled in) on each replica in turn until
    ``stop``; returns (tool, HTTP status, answer) of every call. A call that gets no answer
    fails the test."""
    answers: list[tuple[str, int, Any]] = []
    for n in itertools.count():
        if stop.is_set():
            return answers
        for tool, arguments in calls:
            filled = {name: value.format(worker=worker, n=n) for name, value in arguments.items()}
            response = cluster.call(n % 3, tool, **filled)
            answers.append((tool, response.status_code, response.json()))
    raise AssertionError("unreachable")
