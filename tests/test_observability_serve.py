"""Observability of a real ``toolgate serve``: traces reach an OTLP receiver, ``/metrics``
parses, logs are JSON lines — and a secret never appears in any of them.

One server for the module, started as a user starts it (the console script, a toolgate.yaml,
``OTEL_*`` variables, ``--log-format json``), with agent keys so that ``/metrics`` is guarded:
``ops`` is an operator, ``bot`` is not. Its tools: ``api:hello``, a REST tool calling the
upstream stand-in (which records the ``traceparent`` it receives), and ``py:login``, a Python
tool whose ``password`` argument is redacted and which fails echoing it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from otlp_support import OtlpReceiver, ReceivedSpan, Upstream, otlp_receiver, upstream_rest
from toolgate.serve.auth.identity import key_sha256

pytestmark = pytest.mark.slow

SECRET = "hunter2-correct-horse-battery"
OPS_KEY = "tg_ops-key-for-the-observability-tests"
BOT_KEY = "tg_bot-key-for-the-observability-tests"
SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT = 1, 3
STATUS_ERROR = 2

TOOLS_PY = '''
from toolgate import tool


@tool(namespace="py", redact=["args.password"])
def login(user: str, password: str) -> str:
    """Log in (always fails, echoing the password)."""
    raise ValueError(f"wrong password {password} for {user}")
'''


@dataclass
class Served:
    url: str
    receiver: OtlpReceiver
    upstream: Upstream
    log_path: Path


def _project(folder: Path, origin: str) -> None:
    rest_tool = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "hello", "namespace": "api"},
        "spec": {
            "type": "rest",
            "description": "Say hello upstream.",
            "endpoint": {"method": "GET", "url": f"{origin}/hello"},
            "inputSchema": {"type": "object"},
            "sideEffects": {"level": "read_only"},
        },
    }
    (folder / "api.yaml").write_text(yaml.safe_dump(rest_tool), encoding="utf-8")
    (folder / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    config = {
        "sources": [{"path": "api.yaml"}],
        "python": ["tools.py"],
        "sandbox": {"network_grants": {"api:hello": ["127.0.0.1/32"]}},
        "agents": {
            "ops": {"labels": {"role": "operator"}, "key_sha256": key_sha256(OPS_KEY)},
            "bot": {"key_sha256": key_sha256(BOT_KEY)},
        },
    }
    (folder / "toolgate.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("observed")
    log_path = folder / "serve.log"
    with otlp_receiver() as receiver, upstream_rest() as upstream:
        _project(folder, upstream.origin)
        env = {
            **os.environ,
            "TOOLGATE_HOME": str(folder / "home"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "toolgate-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_METRIC_EXPORT_INTERVAL": "200",
        }
        env.pop("OTEL_SDK_DISABLED", None)
        with log_path.open("w", encoding="utf-8") as log:
            process = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "toolgate"),
                    "serve",
                    "--port",
                    "0",
                    "--log-format",
                    "json",
                ],
                cwd=folder,
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            try:
                assert process.stdout is not None
                banner = process.stdout.readline()
                match = re.search(r"on (http://127\.0\.0\.1:\d+)", banner)
                assert match, banner + log_path.read_text(encoding="utf-8")
                url = match.group(1)
                _wait_healthy(url, process)
                yield Served(url, receiver, upstream, log_path)
            finally:
                process.send_signal(signal.SIGTERM)
                assert process.wait(60) == 0


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
                assert json.load(response)["status"] == "ok"
            return
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "did not start"
            time.sleep(0.2)


def _call(url: str, tool: str, arguments: dict[str, Any], key: str = BOT_KEY) -> dict[str, Any]:
    answer = httpx2.post(
        f"{url}/v1/tools/{tool}/call",
        json={"arguments": arguments},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    outcome: dict[str, Any] = answer.json()
    return outcome


def _span_of_call(receiver: OtlpReceiver, call_id: str) -> ReceivedSpan:
    def found(received: OtlpReceiver) -> ReceivedSpan | None:
        for span in received.spans:
            if span.attributes.get("gen_ai.tool.call.id") == call_id:
                return span
        return None

    return receiver.wait_for(found)


def _children(receiver: OtlpReceiver, parent: ReceivedSpan, name: str) -> ReceivedSpan:
    def found(received: OtlpReceiver) -> ReceivedSpan | None:
        for span in received.spans:
            if span.parent_span_id == parent.span_id and span.name == name:
                return span
        return None

    return receiver.wait_for(found)


def test_a_rest_call_is_traced_to_the_receiver_and_upstream(served: Served) -> None:
    outcome = _call(served.url, "api:hello", {})
    assert outcome["status"] == "ok", outcome
    receiver = served.receiver

    call = _span_of_call(receiver, outcome["call_id"])
    assert call.name == "execute_tool api:hello"
    assert call.kind == SPAN_KIND_INTERNAL
    assert call.parent_span_id == ""  # the HTTP request is not traced: the call is the root
    assert call.attributes["gen_ai.operation.name"] == "execute_tool"
    assert call.attributes["gen_ai.tool.name"] == "api:hello"
    assert call.attributes["toolgate.outcome"] == "ok"
    assert call.attributes["toolgate.agent"] == "bot"
    assert json.loads(call.attributes["gen_ai.tool.call.result"]) == {"hello": "upstream"}
    assert call.resource["service.name"] == "toolgate-under-test"

    backend = _children(receiver, call, "toolgate.backend")
    assert backend.attributes["toolgate.tool.kind"] == "rest"
    request = _children(receiver, backend, "GET")
    assert request.kind == SPAN_KIND_CLIENT
    assert request.trace_id == call.trace_id
    assert request.attributes["http.request.method"] == "GET"
    assert request.attributes["server.address"] == "127.0.0.1"
    assert request.attributes["http.response.status_code"] == 200

    # The upstream received the client span's context (W3C: version-trace-parent-flags).
    sent = [headers.get("traceparent", "").split("-") for headers in served.upstream.headers]
    received = [parts for parts in sent if parts[1:3] == [request.trace_id, request.span_id]]
    assert received, sent
    assert received[0][0] == "00" and int(received[0][3], 16) & 1  # sampled


def test_a_failed_call_is_an_error_span_without_the_secret(served: Served) -> None:
    outcome = _call(served.url, "py:login", {"user": "ada", "password": SECRET})
    assert outcome["status"] == "error" and outcome["code"] == "tool_error", outcome
    receiver = served.receiver

    call = _span_of_call(receiver, outcome["call_id"])
    assert call.name == "execute_tool py:login"
    assert call.status_code == STATUS_ERROR
    assert call.attributes["error.type"] == "tool_error"
    assert call.attributes["toolgate.code"] == "tool_error"
    arguments = json.loads(call.attributes["gen_ai.tool.call.arguments"])
    assert arguments == {"user": "ada", "password": "[REDACTED]"}
    assert "wrong password [REDACTED] for ada" in call.status_message
    with receiver.lock:
        assert receiver.bodies and not any(SECRET.encode() in body for body in receiver.bodies)


def test_the_call_metrics_are_exported_over_otlp(served: Served) -> None:
    _call(served.url, "api:hello", {})

    def found(received: OtlpReceiver) -> list[Any] | None:
        names = {"toolgate.calls", "toolgate.call.duration", "toolgate.audit.queue.depth"}
        return received.metrics.get("toolgate.calls") if names <= set(received.metrics) else None

    calls = served.receiver.wait_for(found)
    points = [point for metric in calls for point in metric.sum.data_points]
    tools = {
        attribute.value.string_value
        for point in points
        for attribute in point.attributes
        if attribute.key == "gen_ai.tool.name"
    }
    assert "api:hello" in tools


def _scrape(url: str, key: str | None) -> httpx2.Response:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return httpx2.get(url + "/metrics", headers=headers, timeout=30)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_parse_and_count_calls(served: Served) -> None:
    first = _scrape(served.url, OPS_KEY)
    assert first.status_code == 200, first.text
    assert first.headers["content-type"].startswith("text/plain")
    before = _samples(first.text)
    _call(served.url, "api:hello", {})
    _call(served.url, "py:login", {"user": "ada", "password": SECRET})
    after_response = _scrape(served.url, OPS_KEY)
    after = _samples(after_response.text)

    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after[key] - before.get(key, 0.0)

    assert moved("toolgate_calls_total", tool="api:hello", outcome="ok") == 1
    assert moved("toolgate_calls_total", tool="py:login", outcome="error") == 1
    assert moved("toolgate_call_errors_total", tool="py:login", code="tool_error") == 1
    assert moved("toolgate_call_duration_seconds_count", tool="api:hello") == 1
    assert moved("toolgate_call_duration_seconds_bucket", tool="api:hello", le="+Inf") == 1
    assert ("toolgate_approvals_pending", ()) in after
    assert ("toolgate_audit_queue_depth", ()) in after
    assert SECRET not in after_response.text


def test_metrics_refuse_callers_who_are_not_operators(served: Served) -> None:
    anonymous = _scrape(served.url, None)
    assert anonymous.status_code == 401
    assert "toolgate_calls" not in anonymous.text
    agent = _scrape(served.url, BOT_KEY)
    assert agent.status_code == 403
    assert agent.json()["code"] == "forbidden"
    unknown = _scrape(served.url, "tg_not-a-known-key")
    assert unknown.status_code == 401


def _log_lines(path: Path) -> list[dict[str, Any]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]  # every line is JSON


def test_logs_are_json_lines_one_per_call_without_the_secret(served: Served) -> None:
    ok = _call(served.url, "api:hello", {})
    failed = _call(served.url, "py:login", {"user": "ada", "password": SECRET})
    entries = _log_lines(served.log_path)
    by_call = {
        entry.get("call_id"): entry for entry in entries if entry["logger"] == "toolgate.calls"
    }

    line = by_call[ok["call_id"]]
    assert line["agent"] == "bot" and line["tool"] == "api:hello"
    assert line["outcome"] == "ok" and line["code"] is None
    assert isinstance(line["duration_ms"], float)  # the figure itself belongs to bench/
    assert line["level"] == "info" and line["time"].endswith("+00:00")

    line = by_call[failed["call_id"]]
    assert line["outcome"] == "error" and line["code"] == "tool_error"
    assert "[REDACTED]" in line["error"]
    assert SECRET not in served.log_path.read_text(encoding="utf-8")
    calls = [entry for entry in entries if entry.get("call_id") == failed["call_id"]]
    assert len(calls) == 1
