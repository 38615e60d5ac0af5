"""The chart's rendered pods, run as real processes against the local PostgreSQL and Redis: the
migration Job's command first, then three replicas of the Deployment's container at once, each
with the image's environment (the Containerfile's ``ENV``), the pod's ``env`` (Secrets resolved
from the rendered manifests) and its volumes (the rendered ConfigMaps written where the pod
mounts them, mapped onto temporary folders). Calls through every replica show the rendered
configuration serves: the tools of the ConfigMap's module and tool folder, one rate limit across
the replicas, and ``/healthz`` with the shared state.

The one change to what a pod would run: ``--port 0``, since the three share this machine's
addresses where each pod has its own.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from deploy_support import PodFiles, containerfile_stages, find, manifests, pod_spec, render
from postgres_support import scratch_database

pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
pytest.importorskip("redis", reason="toolgate[redis] is not installed")

from toolgate.stores.postgres_schema import SCHEMA_VERSION

pytestmark = pytest.mark.slow

REDIS_URL = os.environ.get("TOOLGATE_TEST_REDIS", "redis://127.0.0.1:6379/0")
BOT_KEY = "tg_bot_" + uuid.uuid4().hex
CALLS_PER_MINUTE = 4

#: A Python module of the ConfigMap (configFiles), named in toolgate.yaml as ./replica_tools.py.
MODULE = f'''
import os
from toolgate import tool


@tool(effect="read_only")
def whoami() -> int:
    """The process id of the replica that ran this call."""
    return os.getpid()


@tool(effect="read_only", calls_per_minute={CALLS_PER_MINUTE})
def ping() -> str:
    """Answer pong, at most {CALLS_PER_MINUTE} times a minute across every replica."""
    return "pong"
'''
#: A tool folder of the ConfigMap (toolFolders), mounted at /srv/toolgate/tools/shout/.
TOOL_MD = """---
name: shout
script: script.py
runtime: python
inputSchema:
  type: object
  properties: {text: {type: string}}
  required: [text]
outputSchema:
  type: object
  properties: {shout: {type: string}}
---

Say the text back in capitals.
"""
SCRIPT = """import json, sys
print(json.dumps({"shout": json.load(sys.stdin)["text"].upper()}))
"""


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


@dataclass
class Replicas:
    urls: list[str]
    namespace: str
    #: What a pod of the Deployment did when started before the migration Job had run.
    before_migration: subprocess.CompletedProcess[str]

    def call(self, replica: int, tool: str, **arguments: Any) -> dict[str, Any]:
        response = httpx2.post(
            f"{self.urls[replica]}/v1/tools/{tool}/call",
            json={"arguments": arguments},
            headers={"Authorization": f"Bearer {BOT_KEY}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


def _values(namespace: str, database_url: str) -> dict[str, Any]:
    return {
        "replicaCount": 3,
        "config": {
            "agents": {"bot": {"key_sha256": hashlib.sha256(BOT_KEY.encode()).hexdigest()}},
            "python": [{"module": "./replica_tools.py", "namespace": namespace}],
        },
        "configFiles": {"replica_tools.py": MODULE},
        "toolFolders": {"shout": {"tool.md": TOOL_MD, "script.py": SCRIPT}},
        "toolFoldersNamespace": namespace + "f",
        "database": {"url": database_url},
        "redis": {"url": REDIS_URL},
        "secretsKey": {"value": base64.b64encode(os.urandom(32)).decode()},
    }


def _image() -> tuple[dict[str, str], str]:
    """The default image's ``ENV`` and ``WORKDIR`` (the Containerfile's last stage is the default
    target)."""
    stage = containerfile_stages()[-1]
    workdir = stage.last("WORKDIR")
    assert workdir is not None
    return stage.env(), workdir


def _start(argv: list[str], env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        return subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True
        )


def _banner_url(process: subprocess.Popen[str], log: Path) -> str:
    assert process.stdout is not None
    banner = process.stdout.readline()
    match = re.search(r"on http://0\.0\.0\.0:(\d+)", banner)
    if not match:
        process.kill()
        raise AssertionError(
            f"a replica did not start: {banner}{process.stdout.read()}{log.read_text()}"
        )
    return f"http://127.0.0.1:{match.group(1)}"


def _wait_ready(url: str, probe: dict[str, Any], process: subprocess.Popen[str]) -> None:
    """Ask the readiness probe's path as the kubelet would, until it answers 200."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx2.get(url + probe["httpGet"]["path"], timeout=5).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "a replica never got ready"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicas]:
    _redis_up()
    namespace = "k" + uuid.uuid4().hex[:8]  # counters other runs left in Redis never count here
    image_env, workdir = _image()
    with scratch_database() as database_url:
        objects = manifests(render(_values(namespace, database_url)))

        (deployment,) = find(objects, "Deployment")
        spec = pod_spec(deployment)
        container = spec["containers"][0]

        # A pod started on a database never upgraded refuses, naming the fix: why the Job runs
        # as a pre-install hook.
        files = PodFiles(tmp_path_factory.mktemp("early"), objects, spec)
        argv = files.argv(container)
        argv[argv.index("--port") + 1] = "0"
        early = subprocess.run(
            argv,
            env=files.environment(image_env, container),
            cwd=files.map(workdir),
            capture_output=True,
            text=True,
            timeout=120,
        )

        # The migration Job, as Helm runs it before the Deployment exists.
        (job,) = find(objects, "Job", hook=True)
        job_pod = pod_spec(job)
        files = PodFiles(tmp_path_factory.mktemp("job"), objects, job_pod)
        job_container = job_pod["containers"][0]
        upgrade = subprocess.run(
            files.argv(job_container),
            env=files.environment(image_env, job_container),
            cwd=files.map(workdir),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert upgrade.returncode == 0, upgrade.stderr
        assert f"to {SCHEMA_VERSION}" in upgrade.stdout

        # Three pods of the Deployment, started at once, each with its own volumes.
        assert deployment["spec"]["replicas"] == 3
        processes: list[tuple[subprocess.Popen[str], Path]] = []
        try:
            for _ in range(3):
                files = PodFiles(tmp_path_factory.mktemp("pod"), objects, spec)
                argv = files.argv(container)
                argv[argv.index("--port") + 1] = "0"
                log = files.root / "stderr.log"
                env = files.environment(image_env, container)
                env["COLUMNS"] = "500"  # the banner on one line, however long the paths here
                processes.append((_start(argv, env, Path(files.map(workdir)), log), log))
            urls = [_banner_url(process, log) for process, log in processes]
            for (process, _), url in zip(processes, urls, strict=True):
                _wait_ready(url, container["readinessProbe"], process)
            yield Replicas(urls, namespace, early)
        finally:
            for process, _ in processes:
                process.send_signal(signal.SIGTERM)
            for process, _ in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()


def test_each_replica_serves_the_configmaps_tools(replicas: Replicas) -> None:
    with ThreadPoolExecutor(3) as pool:
        answers = list(
            pool.map(lambda i: replicas.call(i, f"{replicas.namespace}:whoami"), range(3))
        )
    assert [a["status"] for a in answers] == ["ok"] * 3, answers
    assert len({a["content"] for a in answers}) == 3  # three processes answered
    for i in range(3):
        shouted = replicas.call(i, f"{replicas.namespace}f:shout", text=f"replica {i}")
        assert shouted["status"] == "ok", shouted
        assert shouted["content"] == {"shout": f"REPLICA {i}"}


def test_one_rate_limit_counts_the_calls_of_every_replica(replicas: Replicas) -> None:
    answers = [
        replicas.call(i % 3, f"{replicas.namespace}:ping") for i in range(CALLS_PER_MINUTE + 2)
    ]
    statuses = [a["status"] for a in answers]
    assert statuses.count("ok") == CALLS_PER_MINUTE, answers
    refused = [a for a in answers if a["status"] != "ok"]
    assert [a["code"] for a in refused] == ["rate_limited", "rate_limited"]


def test_healthz_answers_ok_with_the_shared_state_on_each_replica(replicas: Replicas) -> None:
    for url in replicas.urls:
        health = httpx2.get(url + "/healthz", timeout=10).json()
        assert health["status"] == "ok", health
        assert health["state"] == {"shared": True, "database": True, "redis": True}
        assert health["tools"] == 3  # whoami, ping and the tool folder's shout


def test_without_credentials_a_replica_answers_nothing_but_health(replicas: Replicas) -> None:
    url = replicas.urls[0]
    refused = httpx2.get(url + "/v1/tools", timeout=10)
    assert refused.status_code == 401


def test_a_pod_started_before_the_migration_job_refuses_and_names_it(replicas: Replicas) -> None:
    early = replicas.before_migration
    assert early.returncode == 3, early.stdout + early.stderr
    assert "toolgate db upgrade" in early.stderr
