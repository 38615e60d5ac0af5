"""The gateway's guarantees through the real ``toolgate`` command: access policies from
``toolgate.yaml`` (inline and from a file), the audit log (``toolgate audit``) and tool health
(``tools list`` / ``tools show``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli

pytestmark = pytest.mark.slow

TOOLS_PY = '''
from toolgate import tool


@tool(effect="read_only", redact=["args.secret_note"])
def lookup(query: str, secret_note: str = "") -> dict:
    """Look a customer up."""
    return {"query": query, "echo": "note was " + secret_note}


@tool(effect="external_write")
def send(to: str, body: str) -> str:
    """Send a message."""
    return "sent to " + to


@tool(effect="local_write")
def archive(name: str) -> str:
    """Archive a record."""
    return "archived " + name
'''

CONFIG = """\
python:
  - module: ./crm_tools.py
    namespace: crm
agents:
  intern:
    labels: {team: interns}
audit:
  jsonl: ./audit.jsonl
policies:
  - apiVersion: joch.dev/v1alpha1
    kind: Policy
    metadata: {name: interns-no-external-writes}
    spec:
      appliesTo: {selector: {matchLabels: {team: interns}}}
      rules:
        - when: {tool.sideEffect: external_write}
          action: deny
          reason: interns do not write to external systems
  - ./policies.yaml
"""

POLICIES_YAML = """\
# two Policy documents
apiVersion: joch.dev/v1alpha1
kind: Policy
metadata: {name: no-archive-for-interns}
spec:
  appliesTo: {agents: [intern]}
  rules:
    - when: {tool.id: "crm:archive"}
      action: deny
---
apiVersion: joch.dev/v1alpha1
kind: Policy
metadata: {name: contractors-read-only}
spec:
  appliesTo: {agents: [contractor]}
  rules:
    - when: {tool.sideEffect: [local_write, external_write]}
      action: deny
      reason: contractors only read
"""

SECRET = "s3cr3t-n0te-4711"


@pytest.fixture
def configured(project: Path) -> Path:
    (project / "crm_tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (project / "policies.yaml").write_text(POLICIES_YAML, encoding="utf-8")
    (project / "toolgate.yaml").write_text(CONFIG, encoding="utf-8")
    return project


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def _listed(run_cli: RunCli, *args: str) -> set[str]:
    return {row["id"] for row in json.loads(_ok(run_cli("tools", "list", "--json", *args)))}


def _call(run_cli: RunCli, tool_id: str, args: dict[str, Any], agent: str) -> Any:
    return run_cli("call", tool_id, "--args", json.dumps(args), "--agent", agent)


# -- access policies -----------------------------------------------------------------------------


def test_listing_is_what_the_agent_may_call(run_cli: RunCli, configured: Path) -> None:
    everything = {"crm:lookup", "crm:send", "crm:archive"}
    assert _listed(run_cli) == everything
    assert _listed(run_cli, "--agent", "boss") == everything
    assert _listed(run_cli, "--agent", "intern") == {"crm:lookup"}
    assert _listed(run_cli, "--agent", "contractor") == {"crm:lookup"}

    table = _ok(run_cli("tools", "list", "--agent", "intern"))
    assert "crm:lookup" in table
    assert "crm:send" not in table and "crm:archive" not in table
    header = next(line for line in table.splitlines() if line.startswith("ID"))
    assert "Phase" in header
    assert any(line.startswith("crm:lookup") and "Ready" in line for line in table.splitlines())


def test_a_denied_call_finds_no_tool_and_the_audit_names_the_policy(
    run_cli: RunCli, configured: Path
) -> None:
    # To the agent a tool it may not call does not exist: not even its display line is shown.
    inline = _call(run_cli, "crm:send", {"to": "a@example.com", "body": "hi"}, "intern")
    assert inline.returncode == 1, inline.stderr
    assert inline.stderr == (
        "error [tool_not_found]: There is no tool named 'crm:send'. List the available tools "
        "and use one of their names.\n"
    )
    assert inline.stdout == ""

    from_file = _call(run_cli, "crm:archive", {"name": "x"}, "intern")
    assert from_file.returncode == 1, from_file.stderr
    assert "tool_not_found" in from_file.stderr and "no-archive" not in from_file.stderr

    second_document = _call(run_cli, "crm:archive", {"name": "x"}, "contractor")
    assert second_document.returncode == 1
    assert "tool_not_found" in second_document.stderr

    # The operator's audit log names the rule of each refusal.
    records = json.loads(_ok(run_cli("audit", "list", "--json", "--status", "forbidden")))
    messages = " ".join(record["message"] for record in records)
    for policy in ("interns-no-external-writes", "no-archive-for-interns", "contractors-read-only"):
        assert policy in messages

    # Other agents are not affected.
    assert "archived x" in _ok(_call(run_cli, "crm:archive", {"name": "x"}, "boss"))


# -- the audit log -------------------------------------------------------------------------------


def test_every_call_is_audited_with_redaction(
    run_cli: RunCli, configured: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    ok = _call(run_cli, "crm:lookup", {"query": "acme", "secret_note": SECRET}, "boss")
    assert SECRET in _ok(ok)  # the caller sees it; the log must not
    invalid = _call(run_cli, "crm:lookup", {"secret_note": SECRET}, "boss")
    assert invalid.returncode == 1 and "invalid_arguments" in invalid.stderr
    forbidden = _call(run_cli, "crm:send", {"to": "x", "body": "y"}, "intern")
    assert forbidden.returncode == 1 and "tool_not_found" in forbidden.stderr

    listed = _ok(run_cli("audit", "list", "--json"))
    assert SECRET not in listed
    records = json.loads(listed)
    assert len(records) == 3
    by_outcome = {record["code"] or record["status"]: record for record in records}
    assert set(by_outcome) == {"ok", "invalid_arguments", "forbidden"}
    good = by_outcome["ok"]
    assert good["tool_id"] == "crm:lookup" and good["agent"] == "boss"
    assert good["args"] == {"query": "acme", "secret_note": "[REDACTED]"}
    assert "[REDACTED]" in json.dumps(good["result"])  # echoed back: still redacted
    assert by_outcome["forbidden"]["agent"] == "intern"
    assert by_outcome["forbidden"]["tool_id"] == "crm:send"
    assert "interns-no-external-writes" in by_outcome["forbidden"]["message"]

    filtered = json.loads(_ok(run_cli("audit", "list", "--json", "--status", "forbidden")))
    assert [record["tool_id"] for record in filtered] == ["crm:send"]
    table = _ok(run_cli("audit", "list", "--agent", "boss"))
    assert "crm:lookup" in table and "crm:send" not in table

    exported = tmp_path / "export.jsonl"
    _ok(run_cli("audit", "export", "--output", str(exported)))
    lines = exported.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert {json.loads(line)["call_id"] for line in lines} == {r["call_id"] for r in records}
    streamed = _ok(run_cli("audit", "export", "--tool", "crm:lookup")).splitlines()
    assert len(streamed) == 2 and all(
        json.loads(line)["tool_id"] == "crm:lookup" for line in streamed
    )

    # The database and the configured JSON-lines copy hold no trace of the secret.
    database = toolgate_home / "audit.db"
    assert database.is_file()
    for path in toolgate_home.glob("audit.db*"):
        assert SECRET.encode() not in path.read_bytes()
    copy = (configured / "audit.jsonl").read_text(encoding="utf-8")
    assert len(copy.splitlines()) == 3 and SECRET not in copy


def test_audit_can_be_turned_off(run_cli: RunCli, configured: Path, toolgate_home: Path) -> None:
    text = (configured / "toolgate.yaml").read_text(encoding="utf-8")
    (configured / "toolgate.yaml").write_text(
        text.replace("audit:\n  jsonl: ./audit.jsonl\n", "audit:\n  enabled: false\n"),
        encoding="utf-8",
    )
    _ok(_call(run_cli, "crm:lookup", {"query": "acme"}, "boss"))
    assert not (toolgate_home / "audit.db").exists()
    assert json.loads(_ok(run_cli("audit", "list", "--json"))) == []


# -- health --------------------------------------------------------------------------------------


def test_tools_show_reports_the_status(
    run_cli: RunCli, configured: Path, toolgate_home: Path
) -> None:
    fresh = json.loads(_ok(run_cli("tools", "show", "crm:lookup", "--json")))
    assert fresh["status"]["phase"] == "Ready"
    assert fresh["status"]["totalCalls7d"] == 0
    assert not (toolgate_home / "audit.db").exists()  # reading statistics creates nothing

    for query in ("a", "b", "c"):
        _ok(_call(run_cli, "crm:lookup", {"query": query}, "boss"))
    _call(run_cli, "crm:lookup", {}, "boss")  # invalid_arguments: a call, not a failure

    shown = json.loads(_ok(run_cli("tools", "show", "crm:lookup", "--json")))
    status = shown["status"]
    assert status["tool"] == "crm:lookup"
    assert status["phase"] == "Ready"
    assert status["totalCalls7d"] == 4
    assert status["failureRate7d"] == 0
    assert status["p50"] is not None and status["p95"] is not None
    untouched = json.loads(_ok(run_cli("tools", "show", "crm:send", "--json")))
    assert untouched["status"]["totalCalls7d"] == 0

    text = _ok(run_cli("tools", "show", "crm:lookup"))
    for label in ("Phase", "Calls (7 days)", "Failure rate (7 days)", "Latency", "Last error"):
        assert label in text
    assert "Ready" in text and "p50 " in text and " ms" in text

    listed = {row["id"]: row for row in json.loads(_ok(run_cli("tools", "list", "--json")))}
    assert listed["crm:lookup"]["phase"] == "Ready"


# -- configuration errors ------------------------------------------------------------------------


def test_a_malformed_policy_file_is_a_configuration_error(
    run_cli: RunCli, configured: Path
) -> None:
    (configured / "policies.yaml").write_text(
        POLICIES_YAML.replace(
            "action: deny\n      reason: contractors", "action: allow\n      reason: contractors"
        ),
        encoding="utf-8",
    )
    result = run_cli("tools", "list")
    assert result.returncode == 3, result.stderr
    assert "policies[1]" in result.stderr
    assert "policies.yaml (document 2)" in result.stderr
    assert "spec.rules.0.action" in result.stderr


def test_a_malformed_inline_policy_is_a_configuration_error(
    run_cli: RunCli, configured: Path
) -> None:
    text = (configured / "toolgate.yaml").read_text(encoding="utf-8")
    (configured / "toolgate.yaml").write_text(
        text.replace("appliesTo: {selector:", "appliesTo: {selektor:"), encoding="utf-8"
    )
    result = run_cli("call", "crm:lookup", "--args", '{"query": "x"}')
    assert result.returncode == 3, result.stderr
    assert "toolgate.yaml: policies[0]" in result.stderr
    assert "spec.appliesTo.selektor" in result.stderr
