"""Attacks on what the gateway records and returns (issue 22): credentials inside URLs, pieces
and encodings of a secret echoed by a tool, host paths in a tool's error text, and the arguments
of a call to a tool that does not exist.

Through the public surface: a real ``toolgate serve`` (HTTP, an OTLP receiver for the spans,
JSON logs, the JSONL audit, the state database of idempotent replays) and ``toolgate call``; then
every file the gateway wrote is searched byte for byte, and the gateway must keep serving.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from conftest import RunCli
from folder_tools import write_tool
from gateway_support import gateway_with
from js_support import js_runtime, plugin_copy
from otlp_support import OtlpReceiver, otlp_receiver
from test_plugins import weather, weather_api
from toolgate.serve.auth.identity import key_sha256

pytestmark = pytest.mark.slow

__all__ = ["js_runtime", "weather", "weather_api"]  # fixtures, used by name

OPS_KEY = "tg_ops-key-for-the-record-attacks"
BOT_KEY = "tg_bot-key-for-the-record-attacks"

#: The gateway's own credential, given to a script tool through ``env`` (from ``.env``).
SERVICE_TOKEN = "tgk-7f3a9c2e5b81d4f6a0c3e7b9d2f5a8c1"
#: Credentials an agent puts inside a URL argument.
URL_PASSWORD = "Pw-9d8c7b6a5f4e"
URL_KEY = "ak-1b2c3d4e5f6a7b8c"
URL_SIG = "sig-0a9b8c7d6e5f"
CRED_URL = (
    f"https://deploy:{URL_PASSWORD}@api.example.test/v1/items"
    f"?page=2&api_key={URL_KEY}&X-Amz-Signature={URL_SIG}#access_token=tok-5e6f7a8b9c0d"
)
URL_SECRETS = (URL_PASSWORD, URL_KEY, URL_SIG, "tok-5e6f7a8b9c0d")

TOOLS_PY = '''
from toolgate import tool


@tool(namespace="py", effect="read_only")
def fetch(url: str) -> dict:
    """Fetch a page (echoes the URL back, and names a mirror in free text)."""
    return {"fetched": url, "note": "also tried " + url.replace("api.", "mirror.")}


@tool(namespace="py", effect="read_only")
def broken(endpoint: str) -> str:
    """Always fails, naming the endpoint in the error."""
    raise ConnectionError("could not reach " + endpoint)


@tool(namespace="py", effect="external_write", approval=True)
def deploy(url: str) -> dict:
    """Deploy from a URL (a person approves it first)."""
    return {"with_credentials": ":" in url.split("@")[0].split("//")[-1]}


@tool(namespace="py", effect="read_only", idempotency_key="{{ args.url | hash }}")
def remember(url: str) -> dict:
    """Idempotent: its outcome is kept for replays."""
    return {"kept": url}
'''

LEAK_SCRIPT = """\
import base64, json, os, sys
args = json.load(sys.stdin)
token = os.environ["SERVICE_TOKEN"]
if args.get("fail"):
    sys.stderr.write("auth failed for " + token + " (prefix " + token[:12] + ")\\n")
    sys.exit(3)
print(json.dumps({
    "prefix": token[:12],
    "middle": token[9:21],
    "basic": base64.b64encode(("svc:" + token).encode()).decode(),
    "hex": token.encode().hex(),
    "guess": args.get("guess"),
}))
"""


@dataclass
class Served:
    url: str
    folder: Path
    receiver: OtlpReceiver
    log_path: Path


def _project(folder: Path) -> None:
    home = folder / "home"
    home.mkdir()
    (home / ".env").write_text(f"SERVICE_TOKEN={SERVICE_TOKEN}\n", encoding="utf-8")
    write_tool(
        home / "tools",
        "leak",
        LEAK_SCRIPT,
        runtime="python",
        env=["SERVICE_TOKEN"],
        effect="read_only",
    )
    (folder / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    config = {
        "python": ["tools.py"],
        "audit": {"jsonl": "./audit.jsonl"},
        "agents": {
            "ops": {"labels": {"role": "operator"}, "key_sha256": key_sha256(OPS_KEY)},
            "bot": {"key_sha256": key_sha256(BOT_KEY)},
        },
    }
    (folder / "toolgate.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("records")
    log_path = folder / "serve.log"
    with otlp_receiver() as receiver:
        _project(folder)
        env = {
            **os.environ,
            "TOOLGATE_HOME": str(folder / "home"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "toolgate-record-attacks",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        }
        env.pop("OTEL_SDK_DISABLED", None)
        with log_path.open("w", encoding="utf-8") as log:
            command = [str(Path(sys.executable).parent / "toolgate"), "serve", "--port", "0"]
            process = subprocess.Popen(
                [*command, "--log-format", "json"],
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
                yield Served(url, folder, receiver, log_path)
            finally:
                process.send_signal(signal.SIGTERM)
                assert process.wait(60) == 0


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx2.get(url + "/healthz", timeout=5).status_code == 200:
                return
        except httpx2.HTTPError:
            pass
        assert process.poll() is None and time.monotonic() < deadline, "did not start"
        time.sleep(0.2)


def _post(served: Served, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(
        f"{served.url}/v1/tools/{tool}/call",
        json={"arguments": arguments},
        headers={"Authorization": f"Bearer {BOT_KEY}"},
        timeout=60,
    )


def _call(served: Served, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = _post(served, tool, arguments)
    assert answer.status_code == 200, answer.text
    outcome: dict[str, Any] = answer.json()
    return outcome


def _audited(served: Served, tool: str, count: int = 1) -> list[dict[str, Any]]:
    """The audit records of ``tool`` (through the HTTP API), once ``count`` are written."""
    deadline = time.monotonic() + 60
    while True:
        page = httpx2.get(
            f"{served.url}/v1/audit",
            params={"tool": tool},
            headers={"Authorization": f"Bearer {OPS_KEY}"},
            timeout=30,
        )
        assert page.status_code == 200, page.text
        records: list[dict[str, Any]] = page.json()["records"]
        if len(records) >= count:
            return records
        assert time.monotonic() < deadline, f"no audit record of {tool}"
        time.sleep(0.1)


def _traced(served: Served, call_id: str) -> None:
    """Wait until the span of ``call_id`` reached the OTLP receiver."""

    def found(received: OtlpReceiver) -> bool | None:
        ids = (span.attributes.get("gen_ai.tool.call.id") for span in received.spans)
        return True if call_id in ids else None

    served.receiver.wait_for(found)


def _stored(served: Served) -> bytes:
    """Every byte the gateway recorded: its home (audit.db and its WAL, toolgate.db for
    replays), the JSONL audit, the JSON logs — everything but the ``.env`` holding the
    credential — and what the OTLP receiver was sent."""
    chunks: list[bytes] = []
    for path in sorted(served.folder.rglob("*")):
        if path.is_file() and path.name not in {".env", "tools.py"} and "tools" not in path.parts:
            chunks.append(path.read_bytes())
    chunks.extend(served.receiver.bodies)
    return b"\n".join(chunks)


def _encodings(text: str) -> list[bytes]:
    """``text`` as it could sit in a file: raw, and in JSON with escaped slashes."""
    return [text.encode(), json.dumps(text).encode()[1:-1]]


def _nowhere(stored: bytes, *texts: str) -> None:
    for text in texts:
        for form in _encodings(text):
            assert form not in stored, f"{text!r} was recorded"


# -- credentials inside URLs ------------------------------------------------------------------


def test_credentials_in_a_url_argument_and_result_are_recorded_nowhere(served: Served) -> None:
    outcome = _call(served, "py:fetch", {"url": CRED_URL})
    assert outcome["status"] == "ok"
    # The caller gets its own URL back as the tool returned it (it sent those credentials).
    assert outcome["content"]["fetched"] == CRED_URL
    [record] = _audited(served, "py:fetch")
    assert record["args"]["url"] == (
        "https://[REDACTED]@api.example.test/v1/items?page=2&api_key=[REDACTED]"
        "&X-Amz-Signature=[REDACTED]#access_token=[REDACTED]"
    )
    assert "mirror.example.test" in record["result"]["note"]  # the rest of the text is kept
    _traced(served, outcome["call_id"])
    _nowhere(_stored(served), *URL_SECRETS)


def test_credentials_in_a_url_inside_an_error_message_are_recorded_nowhere(
    served: Served,
) -> None:
    outcome = _call(served, "py:broken", {"endpoint": CRED_URL})
    assert outcome["status"] == "error" and outcome["code"] == "tool_error"
    [record] = _audited(served, "py:broken")
    assert "https://[REDACTED]@api.example.test" in record["message"]
    assert "api_key=[REDACTED]" in record["message"]
    _traced(served, outcome["call_id"])
    _nowhere(_stored(served), *URL_SECRETS)
    assert _call(served, "py:fetch", {"url": "https://example.test/"})["status"] == "ok"


def test_an_idempotent_replay_keeps_no_url_credentials(served: Served) -> None:
    first = _call(served, "py:remember", {"url": CRED_URL})
    again = _call(served, "py:remember", {"url": CRED_URL})
    assert first["content"] == {"kept": CRED_URL}
    # The replay comes from the state database, which never held the credentials.
    assert again["metadata"]["idempotency"]["replayed"] is True
    assert again["content"]["kept"].startswith("https://[REDACTED]@api.example.test/")
    _audited(served, "py:remember", 2)
    _nowhere(_stored(served), *URL_SECRETS)


def test_an_approval_request_shows_people_no_url_credentials_and_runs_with_them(
    served: Served,
) -> None:
    password, key = "Apw-4c3b2a1f0e9d", "akey-8e7d6c5b4a39"
    url = f"https://ops:{password}@deploy.example.test/v1?token={key}"
    answer = _post(served, "py:deploy", {"url": url})
    assert answer.status_code == 202, answer.text
    pending = answer.json()
    assert pending["status"] == "pending_approval"
    assert password not in answer.text and key not in answer.text
    approval_id = pending["approval"]["id"]
    ops = {"Authorization": f"Bearer {OPS_KEY}"}
    listed = httpx2.get(f"{served.url}/v1/approvals", headers=ops, timeout=30).json()
    [request] = [r for r in listed["approvals"] if r["id"] == approval_id]
    assert request["arguments"] == {
        "url": "https://[REDACTED]@deploy.example.test/v1?token=[REDACTED]"
    }
    shown = json.dumps(request)
    assert password not in shown and key not in shown
    decided = httpx2.post(
        f"{served.url}/v1/approvals/{approval_id}/decision",
        json={"decision": "approve"},
        headers=ops,
        timeout=60,
    ).json()
    assert decided["approval"]["status"] == "approved" and decided["outcome"] is None
    assert password not in json.dumps(decided) and key not in json.dumps(decided)
    # The agent's retry runs the call with the exact arguments the agent sent.
    ran = _call(served, "py:deploy", {"url": url})
    assert ran["status"] == "ok" and ran["content"] == {"with_credentials": True}, ran
    followed = httpx2.get(f"{served.url}/v1/approvals/{approval_id}", headers=ops, timeout=30)
    assert followed.json()["outcome"]["content"] == {"with_credentials": True}, followed.text
    assert password not in followed.text and key not in followed.text
    records = _audited(served, "py:deploy", 2)
    assert password not in json.dumps(records) and key not in json.dumps(records)


# -- pieces and encodings of a secret ---------------------------------------------------------


def _secret_forms() -> list[str]:
    return [
        SERVICE_TOKEN,
        SERVICE_TOKEN[:12],
        SERVICE_TOKEN[9:21],
        SERVICE_TOKEN.encode().hex(),
        base64.b64encode(("svc:" + SERVICE_TOKEN).encode()).decode(),
    ]


def test_a_prefix_or_an_encoding_of_a_secret_echoed_by_a_tool_is_recorded_nowhere(
    served: Served,
) -> None:
    outcome = _call(served, "local:leak", {})
    assert outcome["status"] == "ok", outcome
    content = outcome["content"]
    # The caller (the model) never receives the gateway's credential, whole or in part.
    assert content["prefix"] == "[REDACTED]" and content["middle"] == "[REDACTED]"
    assert content["hex"] == "[REDACTED]"
    assert "[REDACTED]" in content["basic"]
    assert SERVICE_TOKEN[4:14] not in json.dumps(content)
    [record] = _audited(served, "local:leak")
    assert record["result"]["prefix"] == "[REDACTED]"
    _traced(served, outcome["call_id"])
    _nowhere(_stored(served), *_secret_forms())


def test_a_secret_in_a_failing_tools_stderr_reaches_neither_the_caller_nor_a_record(
    served: Served,
) -> None:
    outcome = _call(served, "local:leak", {"fail": True})
    assert outcome["status"] == "error" and outcome["code"] == "tool_error"
    assert "auth failed for [REDACTED] (prefix [REDACTED])" in outcome["message"]
    records = _audited(served, "local:leak", 2)
    assert any("auth failed for [REDACTED]" in (r["message"] or "") for r in records)
    _traced(served, outcome["call_id"])
    _nowhere(_stored(served), *_secret_forms())
    assert SERVICE_TOKEN[:12] not in json.dumps(outcome)


def test_a_caller_guessing_a_piece_of_the_secret_learns_nothing_from_masking(
    served: Served,
) -> None:
    guess = SERVICE_TOKEN[:12]
    outcome = _call(served, "local:leak", {"guess": guess})
    # Its own guess comes back as sent — were it masked, the marker would confirm the guess.
    assert outcome["content"]["guess"] == guess
    assert outcome["content"]["middle"] == "[REDACTED]"  # what it did not send stays masked
    _audited(served, "local:leak", 3)
    _traced(served, outcome["call_id"])
    _nowhere(_stored(served), *_secret_forms())


# -- arguments of a call to a tool that does not exist ----------------------------------------


def test_arguments_sent_to_an_unknown_tool_over_http_are_not_recorded(served: Served) -> None:
    password, api_key = "pw-unknown-tool-31337", "key-unknown-tool-42"
    outcome = _call(served, "py:no_such_tool", {"password": password, "api_key": api_key})
    assert outcome["status"] == "error" and outcome["code"] == "tool_not_found"
    [record] = _audited(served, "py:no_such_tool")
    assert record["code"] == "tool_not_found" and record["args"] is None
    stored = _stored(served)
    _nowhere(stored, password, api_key)
    assert b"api_key" not in served.folder.joinpath("home", "audit.db").read_bytes()
    assert _call(served, "py:fetch", {"url": "https://example.test/"})["status"] == "ok"


def test_arguments_sent_to_an_unknown_tool_from_the_cli_are_not_recorded(
    run_cli: RunCli, toolgate_home: Path
) -> None:
    password, api_key = "pw-cli-unknown-27182", "key-cli-unknown-16180"
    args = json.dumps({"password": password, "api_key": api_key})
    result = run_cli("call", "nope:missing", "--args", args)
    assert result.returncode != 0 and "nope:missing" in result.stdout + result.stderr
    listed = run_cli("audit", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [record] = json.loads(listed.stdout)
    assert record["tool_id"] == "nope:missing" and record["args"] is None
    for path in toolgate_home.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert password.encode() not in data and api_key.encode() not in data, path
    # The gateway still serves: a call to a real tool works from the same home.
    assert run_cli("tools", "list").returncode == 0


# -- the redaction module on its own, where a rule is easiest to read -------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("git clone https://ghp_abc123def456@github.com/o/r", "https://[REDACTED]@github.com/o/r"),
        ("GET /v1?token=abc&x=1", "?token=[REDACTED]&x=1"),
        ("redis://:hunter22@cache:6379/0", "redis://[REDACTED]@cache:6379/0"),
        ("/cb#access_token=aaa&state=s", "#access_token=[REDACTED]&state=s"),
        (
            "https://h/?clientSecret=x1&privateKey=x2",
            "?clientSecret=[REDACTED]&privateKey=[REDACTED]",
        ),
        ("https://h/p?q=search+terms&page=3", "https://h/p?q=search+terms&page=3"),
        ("mail ada@example.com, a=b", "mail ada@example.com, a=b"),
    ],
)
def test_url_credentials_are_masked_in_any_text(text: str, expected: str) -> None:
    from toolgate.redaction import redact_url_credentials

    assert expected in redact_url_credentials(text)


def test_pieces_of_a_secret_are_masked_at_any_offset_and_short_ones_are_not() -> None:
    from toolgate.redaction import MIN_FRAGMENT_LENGTH, record_masker

    masker = record_masker([SERVICE_TOKEN])
    n = MIN_FRAGMENT_LENGTH
    for start in range(len(SERVICE_TOKEN) - n + 1):
        piece = SERVICE_TOKEN[start : start + n]
        assert masker.sub(f"<{piece}>") == "<[REDACTED]>", start
    short = SERVICE_TOKEN[3 : 3 + n - 1]
    assert masker.sub(f"<{short}>") == f"<{short}>"
    quoted = urllib.parse.quote(SERVICE_TOKEN + "/+", safe="")
    assert record_masker([SERVICE_TOKEN + "/+"]).sub(quoted) == "[REDACTED]"


# -- host paths in a tool's error text --------------------------------------------------------


def test_a_js_plugin_that_throws_does_not_tell_the_model_where_it_lives(
    js_runtime: Path, tmp_path: Path
) -> None:

    folder = plugin_copy(tmp_path, "probe")
    with gateway_with(environ={}, audit_path=tmp_path / "audit.db") as gateway:
        assert gateway.add_source(folder).diagnostics == []
        outcome = gateway.call_sync("@toolgate-test/probe:throw", {})
        assert outcome.is_error and outcome.message is not None
        assert "Error: the probe failed on purpose (index.ts, line " in outcome.message
        assert str(tmp_path) not in outcome.message
        assert str(tmp_path) not in json.dumps(outcome.to_dict())
        assert gateway.call_sync("@toolgate-test/probe:echo", {}).ok  # still serving


def test_a_failing_script_tool_does_not_tell_the_model_where_it_lives(
    run_cli: RunCli, toolgate_home: Path
) -> None:
    crash = "import json, sys\njson.load(sys.stdin)\nopen('missing.txt')\n"
    folder = write_tool(toolgate_home / "tools", "crash", crash, runtime="python")
    result = run_cli("call", "local:crash", "--json")
    outcome = json.loads(result.stdout)
    assert outcome["status"] == "error" and outcome["code"] == "tool_error"
    # Python's traceback named the script by its absolute path; the caller sees it relative.
    assert 'File "script.py", line 3' in outcome["message"], outcome["message"]
    assert str(folder) not in result.stdout + result.stderr
    assert str(toolgate_home) not in result.stdout + result.stderr
    write_tool(toolgate_home / "tools", "fine", "cat >/dev/null; echo '{}'")
    assert run_cli("call", "local:fine").returncode == 0


# -- the same records in PostgreSQL -----------------------------------------------------------


def test_url_credentials_in_arguments_results_and_errors_reach_no_postgresql_table(
    tmp_path: Path,
) -> None:
    pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    from postgres_support import upgraded_database
    from toolgate import tool
    from toolgate.stores.postgres_db import PostgresDatabase

    @tool(namespace="pg", effect="read_only", idempotency_key="{{ args.url | hash }}")
    def fetch(url: str) -> dict[str, str]:
        """Echo the URL; fail naming it when asked."""
        if "fail" in url:
            raise ConnectionError("could not reach " + url)
        return {"fetched": url}

    with upgraded_database() as url:
        with gateway_with(
            environ={}, state_database=PostgresDatabase(url), audit_path=tmp_path / "audit.db"
        ) as gateway:
            gateway.add(fetch)
            assert gateway.call_sync("pg:fetch", {"url": CRED_URL}).ok
            assert gateway.call_sync("pg:fetch", {"url": CRED_URL + "&fail=1"}).is_error
            assert gateway.call_sync("pg:nothing", {"url": CRED_URL}).is_error
            assert gateway.audit is not None and gateway.audit.flush(10)
            assert gateway.call_sync("pg:fetch", {"url": "https://example.test/"}).ok
        db = PostgresDatabase(url, max_size=1)
        try:
            with db.read() as conn:
                tables = [
                    row["table_name"]
                    for row in conn.execute(
                        "SELECT table_name FROM information_schema.tables"
                        " WHERE table_schema = 'public'"
                    ).fetchall()
                ]
                dumped = "\n".join(
                    str(row["t"])
                    for table in tables
                    for row in conn.execute(f'SELECT t::text AS t FROM "{table}" t').fetchall()
                )
        finally:
            db.close()
    assert "audit_records" in tables and "api.example.test" in dumped  # the records are there
    for secret in URL_SECRETS:
        assert secret not in dumped, secret


# -- the operator's log of a plugin -----------------------------------------------------------


def test_a_plugin_logging_its_key_or_url_credentials_leaves_them_out_of_the_log(
    weather: Path, weather_api: tuple[str, list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    from test_plugins import API_KEY, WEATHER_ID

    base, _ = weather_api
    environ = {"OPENWEATHER_API_KEY": API_KEY, "OPENWEATHER_API_BASE": base, "HOME": "/root"}
    # The tool logs the city it is given: here a piece of its own key and a URL credential.
    city = f"{API_KEY[:11]} https://u:{URL_PASSWORD}@x.test/?token={URL_KEY}"
    with gateway_with(environ=environ) as gateway:
        gateway.add_source(weather, options={"host_mode": True})
        with caplog.at_level(logging.INFO, logger=f"toolgate.tool.{WEATHER_ID}"):
            assert gateway.call_sync(WEATHER_ID, {"city": city}).ok
            assert gateway.call_sync(WEATHER_ID, {"city": "Lisbon"}).ok
    logged = [r.getMessage() for r in caplog.records if r.name == f"toolgate.tool.{WEATHER_ID}"]
    assert logged == [
        "Fetching weather for [REDACTED] https://[REDACTED]@x.test/?token=[REDACTED]",
        "Fetching weather for Lisbon",
    ]
