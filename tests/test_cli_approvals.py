"""Approvals through the ``toolgate`` command line: ``call`` (exit code 4 or the terminal
prompt), ``approvals list|show|approve|deny`` and ``grants list|revoke``.

Every command is its own process sharing ``$TOOLGATE_HOME/toolgate.db``, so each test also shows
that requests and grants outlive a restart. The tools file counts runs: ``tools:append`` appends
one line to ``runs.log`` next to it per run.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from toolgate import Gateway, tool
from toolgate.cli.prompt import TerminalApprover, clean, parse_answer
from toolgate.model import CallStatus, Decision

pytestmark = pytest.mark.slow

RunCli = Callable[..., subprocess.CompletedProcess[str]]
TOOLGATE = Path(sys.executable).parent / "toolgate"

TOOLS_PY = '''
from pathlib import Path

from toolgate import tool

LOG = Path(__file__).with_name("runs.log")


def _confirm(args):
    return {
        "title": "Append to the run log",
        "risk": "medium",
        "facts": [{"label": "Line", "value": args["line"]}, {"label": "File", "value": "runs.log"}],
    }


@tool(title="Append a line", effect="external_write", build_confirmation=_confirm)
def append(line: str) -> str:
    """Append one line to runs.log."""
    with LOG.open("a", encoding="utf-8") as handle:
        handle.write(line + "\\n")
    return f"appended {line}"


@tool(effect="read_only")
def peek(text: str) -> str:
    """Echo the text (reads nothing, writes nothing)."""
    return f"peeked {text}"
'''

CONFIG = "python:\n  - ./tools.py\n"
APPR_ID = re.compile(r"apr_[0-9a-f]{32}")


@pytest.fixture
def configured(project: Path) -> Path:
    """A project whose toolgate.yaml names ./tools.py."""
    (project / "tools.py").write_text(TOOLS_PY, encoding="utf-8")
    (project / "toolgate.yaml").write_text(CONFIG, encoding="utf-8")
    return project


def _runs(project: Path) -> list[str]:
    log = project / "runs.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def _pending(result: subprocess.CompletedProcess[str]) -> str:
    """The request id of a call that exited 4 (pending approval)."""
    assert result.returncode == 4, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    found = APPR_ID.search(result.stdout)
    assert found is not None, result.stdout
    return found.group(0)


def _append(run_cli: RunCli, line: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli("call", "tools:append", "--args", json.dumps({"line": line}), *extra)


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(_ok(result))


# -- help --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["approvals"],
        ["approvals", "list"],
        ["approvals", "show"],
        ["approvals", "approve"],
        ["approvals", "deny"],
        ["grants"],
        ["grants", "list"],
        ["grants", "revoke"],
    ],
    ids=" ".join,
)
def test_commands_have_help_with_exit_codes(run_cli: RunCli, command: list[str]) -> None:
    out = _ok(run_cli(*command, "--help"))
    assert "Usage: toolgate" in out
    assert "Exit codes" in out
    assert "pending approval" in out


# -- the queue, without a terminal -------------------------------------------------------------


def test_pending_call_approved_from_the_cli_runs_once_on_the_retry(
    run_cli: RunCli, configured: Path
) -> None:
    first = _append(run_cli, "one")
    request_id = _pending(first)
    out = first.stdout
    assert "Approval needed: Append to the run log" in out
    assert "risk: medium" in out
    assert re.search(r"Line\s+one", out) and re.search(r"File\s+runs\.log", out)
    assert f"toolgate approvals approve {request_id}" in out
    assert f"toolgate approvals approve {request_id} --always" in out
    assert f"toolgate approvals deny {request_id}" in out
    assert _runs(configured) == []  # nothing ran

    # The same call again attaches to the same request instead of asking twice.
    assert _pending(_append(run_cli, "one")) == request_id

    listed = run_cli("approvals", "list")
    assert request_id in _ok(listed)
    assert "tools:append" in listed.stdout and "1 pending request" in listed.stdout
    [entry] = _json(run_cli("approvals", "list", "--json"))
    assert entry["id"] == request_id
    assert entry["tool"] == "tools:append"
    assert entry["arguments"] == {"line": "one"}
    assert entry["facts"] == [["Line", "one"], ["File", "runs.log"]]
    assert entry["workspace"] == str(configured)
    assert entry["status"] == "pending"

    approved = run_cli("approvals", "approve", request_id, "--by", "alice")
    assert _ok(approved) == ""  # only the decision is recorded: no outcome to print
    assert "Approved" in approved.stderr and "alice" in approved.stderr
    assert "Nothing ran here" in approved.stderr
    assert "the next call of tools:append with the same arguments" in approved.stderr
    assert _runs(configured) == []
    assert _json(run_cli("approvals", "list", "--json")) == []
    assert _json(run_cli("approvals", "show", request_id, "--json"))["status"] == "approved"

    retry = _append(run_cli, "one")  # the agent's retry runs it
    assert _ok(retry) == "appended one\n"
    assert "did not run again" not in retry.stderr
    assert _runs(configured) == ["one"]

    # The approval was single-use: the same call once more asks anew.
    again = _pending(_append(run_cli, "one"))
    assert again != request_id
    assert _runs(configured) == ["one"]

    shown = _json(run_cli("approvals", "show", request_id, "--json"))
    assert shown["decision"] == "approve" and shown["decided_by"] == "alice"
    assert [event["kind"] for event in shown["events"]] == ["requested", "decided", "ran"]
    text = _ok(run_cli("approvals", "show", request_id))
    assert "Decision: approve by alice" in text


def test_approve_with_run_runs_it_now_and_the_retry_gets_the_stored_outcome(
    run_cli: RunCli, configured: Path
) -> None:
    request_id = _pending(_append(run_cli, "one"))
    approved = run_cli("approvals", "approve", request_id, "--by", "alice", "--run")
    assert _ok(approved) == "appended one\n"  # it ran now, and the outcome is printed
    assert "Approved" in approved.stderr and "it ran now" in approved.stderr
    assert _runs(configured) == ["one"]

    retry = _append(run_cli, "one")
    assert _ok(retry) == "appended one\n"
    assert "did not run again" in retry.stderr
    assert _runs(configured) == ["one"]  # the stored outcome: not a second run

    # The approval was single-use: the same call once more asks anew.
    assert _pending(_append(run_cli, "one")) != request_id
    assert _runs(configured) == ["one"]
    shown = _json(run_cli("approvals", "show", request_id, "--json"))
    assert [event["kind"] for event in shown["events"]] == [
        "requested",
        "decided",
        "ran",
        "delivered",
    ]


def test_a_decision_from_a_folder_without_the_tool_is_recorded_and_runs_on_the_retry(
    run_cli: RunCli, configured: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    request_id = _pending(_append(run_cli, "far"))
    # --run where the tool is not declared is refused before anything is decided.
    refused = run_cli("approvals", "approve", request_id, "--run", cwd=elsewhere)
    assert refused.returncode == 1 and "not declared here" in refused.stderr, refused.stderr
    assert _json(run_cli("approvals", "show", request_id, "--json"))["status"] == "pending"
    approved = run_cli("approvals", "approve", request_id, "--by", "alice", cwd=elsewhere)
    assert _ok(approved) == "" and "Nothing ran here" in approved.stderr
    assert _runs(configured) == []
    assert _ok(_append(run_cli, "far")) == "appended far\n"  # the retry, where it is served
    assert _runs(configured) == ["far"]


def test_a_cli_reading_another_version_of_the_tool_refuses_without_voiding_the_request(
    run_cli: RunCli, configured: Path, tmp_path: Path
) -> None:
    """A person in another checkout (same home) whose tools.py differs from the one the
    request was made with: nothing is decided, and the request stays pending for the right
    folder — a CLI cannot know what the server runs."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "toolgate.yaml").write_text(CONFIG, encoding="utf-8")
    (other / "tools.py").write_text(TOOLS_PY.replace('"""', '"""Changed. ', 1), encoding="utf-8")
    request_id = _pending(_append(run_cli, "versions"))
    refused = run_cli("approvals", "approve", request_id, cwd=other)
    assert refused.returncode == 1 and "nothing was decided" in refused.stderr, refused.stderr
    assert _json(run_cli("approvals", "show", request_id, "--json"))["status"] == "pending"
    _ok(run_cli("approvals", "approve", request_id))
    assert _ok(_append(run_cli, "versions")) == "appended versions\n"
    assert _runs(configured) == ["versions"]


def test_by_defaults_to_the_os_user(run_cli: RunCli, configured: Path) -> None:
    import getpass

    request_id = _pending(_append(run_cli, "who"))
    _ok(run_cli("approvals", "approve", request_id))
    shown = _json(run_cli("approvals", "show", request_id, "--json"))
    assert shown["decided_by"] == getpass.getuser()


def test_denied_call_does_not_run_and_the_retry_gets_user_rejection(
    run_cli: RunCli, configured: Path
) -> None:
    request_id = _pending(_append(run_cli, "no"))
    denied = run_cli("approvals", "deny", request_id, "--message", "not on a Friday")
    assert "Denied" in _ok(denied)
    retry = _append(run_cli, "no")
    assert retry.returncode == 1
    assert "error [user_rejection]" in retry.stderr
    assert "not on a Friday" in retry.stderr
    assert _runs(configured) == []
    # A decided request cannot be decided again.
    late = run_cli("approvals", "approve", request_id)
    assert late.returncode == 1
    assert "error [approval_closed]" in late.stderr
    assert "Traceback" not in late.stderr
    assert _runs(configured) == []


def test_always_stores_a_grant_that_survives_restarts_until_revoked(
    run_cli: RunCli, configured: Path
) -> None:
    request_id = _pending(_append(run_cli, "first"))
    approved = run_cli("approvals", "approve", request_id, "--always", "--by", "bob")
    assert _ok(approved) == "" and "Nothing ran here" in approved.stderr
    assert "Grant grt_" in approved.stderr
    assert _runs(configured) == []
    assert _ok(_append(run_cli, "first")) == "appended first\n"  # the retry runs it
    assert _runs(configured) == ["first"]

    [grant] = _json(run_cli("grants", "list", "--json"))
    assert grant["tool"] == "tools:append"
    assert grant["workspace"] == str(configured)
    assert grant["permission"] == {"type": "tool", "key": "*"}
    assert grant["granted_by"] == "bob"
    assert grant["expires_at"] is None
    assert grant["approval_id"] == request_id
    table = _ok(run_cli("grants", "list"))
    for column in ("ID", "Tool", "Workspace", "Key", "Granted by", "Granted at", "Expires"):
        assert column in table
    assert grant["id"] in table and "bob" in table and "never" in table

    # Other arguments, in a new process: no question asked.
    assert _ok(_append(run_cli, "second")) == "appended second\n"
    assert _runs(configured) == ["first", "second"]
    # Another workspace is not covered.
    elsewhere = configured / "sub"
    elsewhere.mkdir()
    _pending(_append(run_cli, "third", "--workspace", str(elsewhere)))

    revoked = run_cli("grants", "revoke", grant["id"])
    assert "Revoked" in _ok(revoked)
    assert _json(run_cli("grants", "list", "--json")) == []
    assert "No grants." in _ok(run_cli("grants", "list"))
    _pending(_append(run_cli, "fourth"))
    assert _runs(configured) == ["first", "second"]


def test_grant_with_an_expiry(run_cli: RunCli, configured: Path) -> None:
    request_id = _pending(_append(run_cli, "x"))
    _ok(run_cli("approvals", "approve", request_id, "--always", "--expires-after", "3600"))
    [grant] = _json(run_cli("grants", "list", "--json"))
    assert grant["expires_at"] - grant["granted_at"] == pytest.approx(3600)
    assert "in 59m" in _ok(run_cli("grants", "list"))
    usage = run_cli("approvals", "approve", "apr_x", "--expires-after", "5")
    assert usage.returncode == 2
    assert "--always" in usage.stderr


def test_a_rule_in_toolgate_yaml_makes_a_read_only_tool_ask(
    run_cli: RunCli, configured: Path
) -> None:
    assert _ok(run_cli("call", "tools:peek", "--args", '{"text": "a"}')) == "peeked a\n"
    (configured / "toolgate.yaml").write_text(
        CONFIG
        + "approval:\n  expires_after: 90\n  rules:\n    - {tool: 'tools:peek', require: true}\n",
        encoding="utf-8",
    )
    # The catalog shows the effective requirement.
    [peek] = [t for t in _json(run_cli("tools", "list", "--json")) if t["id"] == "tools:peek"]
    assert peek["requires_approval"] is True
    assert re.search(r"Approval\s+required", _ok(run_cli("tools", "show", "tools:peek")))
    request_id = _pending(run_cli("call", "tools:peek", "--args", '{"text": "a"}'))
    [entry] = _json(run_cli("approvals", "list", "--json"))
    assert entry["id"] == request_id
    assert entry["expires_at"] - entry["created_at"] == pytest.approx(90)
    assert _ok(run_cli("approvals", "approve", request_id)) == ""  # recorded only
    assert _ok(run_cli("call", "tools:peek", "--args", '{"text": "a"}')) == "peeked a\n"


def test_a_bad_rule_is_a_configuration_error(run_cli: RunCli, configured: Path) -> None:
    (configured / "toolgate.yaml").write_text(
        CONFIG + "approval:\n  rules:\n    - {require: true}\n", encoding="utf-8"
    )
    result = run_cli("approvals", "list")
    assert result.returncode == 3
    assert "approval.rules[0]: give exactly one of tool, namespace, level" in result.stderr


def test_unknown_ids_are_errors(run_cli: RunCli, configured: Path) -> None:
    for command in (
        ("approvals", "show", "apr_nope"),
        ("approvals", "approve", "apr_nope"),
        ("approvals", "deny", "apr_nope"),
    ):
        result = run_cli(*command)
        assert result.returncode == 1, command
        assert "no approval request 'apr_nope'" in result.stderr
        assert "Traceback" not in result.stderr
    revoke = run_cli("grants", "revoke", "grt_nope")
    assert revoke.returncode == 1
    assert "no live grant 'grt_nope'" in revoke.stderr


def test_empty_lists(run_cli: RunCli, configured: Path) -> None:
    assert "No approval requests are pending." in _ok(run_cli("approvals", "list"))
    assert _json(run_cli("approvals", "list", "--json")) == []
    assert _json(run_cli("grants", "list", "--json")) == []


def test_pending_call_as_json(run_cli: RunCli, configured: Path) -> None:
    result = _append(run_cli, "j", "--json")
    assert result.returncode == 4
    data = json.loads(result.stdout)
    assert data["status"] == "pending_approval"
    assert APPR_ID.fullmatch(data["approval"]["id"])
    assert result.stderr == ""


def test_the_model_cannot_spoof_the_terminal_through_arguments(
    run_cli: RunCli, configured: Path
) -> None:
    result = _append(run_cli, "ok\x1b[2K\rrisk: low\u202e")
    _pending(result)
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "\\x1b[2K\\x0drisk: low\\u202e" in result.stdout  # the fact
    assert '"line": "ok\\u001b[2K\\rrisk: low\\u202e"' in result.stdout  # the JSON


def test_only_commands_that_call_or_decide_open_the_database(
    run_cli: RunCli, configured: Path, toolgate_home: Path
) -> None:
    _ok(run_cli("tools", "list"))
    _ok(run_cli("tools", "show", "tools:append"))
    _ok(run_cli("export"))
    assert list(toolgate_home.iterdir()) == []
    _ok(run_cli("approvals", "list"))
    assert (toolgate_home / "toolgate.db").is_file()


# -- the terminal prompt, through a real TTY -----------------------------------------------------


def _spawn(project: Path, home: Path, *args: str) -> Any:
    pexpect = pytest.importorskip("pexpect")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env.update(TOOLGATE_HOME=str(home), TERM="dumb", PYTHONIOENCODING="utf-8")
    return pexpect.spawn(
        str(TOOLGATE),
        list(args),
        cwd=str(project),
        env=env,
        encoding="utf-8",
        dimensions=(50, 140),
        timeout=60,
    )


def _finish(child: Any) -> tuple[int, str]:
    import pexpect

    child.expect(pexpect.EOF)
    out: str = child.before
    child.close()
    return child.exitstatus, out


def _prompted(project: Path, home: Path, line: str) -> Any:
    child = _spawn(project, home, "call", "tools:append", "--args", json.dumps({"line": line}))
    child.expect(r"\[o\] Allow once  \[always\] Always allow  \[d\] Deny")
    return child


def test_terminal_allow_once(configured: Path, toolgate_home: Path) -> None:
    child = _prompted(configured, toolgate_home, "tty")
    shown: str = child.before
    assert "Approval needed: Append to the run log" in shown
    assert "risk: medium" in shown
    assert re.search(r"Line\s+tty", shown) and re.search(r"File\s+runs\.log", shown)
    assert '"line": "tty"' in shown  # the exact arguments
    assert "Expires" in shown and "in 4m" in shown
    child.sendline("maybe")  # not an answer: asked again
    child.expect("Please answer o")
    child.expect(r"\[d\] Deny")
    child.sendline("o")
    status, out = _finish(child)
    assert status == 0, out
    assert "appended tty" in out
    assert _runs(configured) == ["tty"]
    # The outcome was handed to this call: the same call later asks again, it does not replay.
    again = _prompted(configured, toolgate_home, "tty")
    again.sendline("d")
    status, out = _finish(again)
    assert status == 1
    assert "user_rejection" in out
    assert _runs(configured) == ["tty"]


def test_terminal_deny(configured: Path, toolgate_home: Path) -> None:
    child = _prompted(configured, toolgate_home, "nope")
    child.sendline("deny")
    status, out = _finish(child)
    assert status == 1
    assert "error [user_rejection]" in out
    assert _runs(configured) == []


@pytest.mark.parametrize("how", ["ctrl-c", "ctrl-d"])
def test_terminal_interrupt_or_end_of_input_denies(
    configured: Path, toolgate_home: Path, how: str
) -> None:
    child = _prompted(configured, toolgate_home, "gone")
    if how == "ctrl-c":
        child.sendintr()
    else:
        child.sendeof()
    status, out = _finish(child)
    assert status == 1, out
    assert "error [user_rejection]" in out
    assert "no answer at the terminal" in out
    assert "Traceback" not in out
    assert _runs(configured) == []


def test_terminal_always_allow_stores_a_grant(
    run_cli: RunCli, configured: Path, toolgate_home: Path
) -> None:
    child = _prompted(configured, toolgate_home, "always")
    child.sendline("always")
    status, out = _finish(child)
    assert status == 0, out
    assert "appended always" in out
    [grant] = _json(run_cli("grants", "list", "--json"))
    assert grant["tool"] == "tools:append"
    assert grant["workspace"] == str(configured)
    # Covered now: the next call through the terminal runs without a question.
    status, out = _finish(
        _spawn(configured, toolgate_home, "call", "tools:append", "--args", '{"line": "b"}')
    )
    assert status == 0, out
    assert "Allow once" not in out and "appended b" in out
    assert _runs(configured) == ["always", "b"]


def test_no_prompt_on_a_terminal_leaves_it_pending(configured: Path, toolgate_home: Path) -> None:
    child = _spawn(
        configured, toolgate_home, "call", "tools:append", "--args", '{"line": "q"}', "--no-prompt"
    )
    status, out = _finish(child)
    assert status == 4, out
    assert "Allow once" not in out
    assert "toolgate approvals approve apr_" in out


# -- the approver as a library object ------------------------------------------------------------


def test_parse_answer() -> None:
    assert parse_answer("o\n") is Decision.APPROVE
    assert parse_answer(" once ") is Decision.APPROVE
    assert parse_answer("always") is Decision.ALWAYS
    assert parse_answer("ALWAYS") is Decision.ALWAYS
    assert parse_answer("d") is Decision.DENY
    assert parse_answer("Deny") is Decision.DENY
    # A permanent grant needs the whole word: one mistyped letter never makes one.
    for other in ("", "y", "yes", "allow", "a", "A", "aa", "alway"):
        assert parse_answer(other) is None


def test_clean_escapes_control_and_format_characters() -> None:
    assert clean("plain text: ünïcode") == "plain text: ünïcode"
    assert clean("a\x1b[31mb\r\nc\u200b\u202e") == "a\\x1b[31mb\\x0d\\x0ac\\u200b\\u202e"


@tool(effect="external_write")
def _launch(target: str) -> str:
    """Launch something."""
    return f"launched {target}"


@pytest.mark.parametrize(
    ("answers", "status"), [("x\nalways\n", CallStatus.OK), ("", CallStatus.ERROR)]
)
def test_terminal_approver_as_a_gateway_approver(answers: str, status: CallStatus) -> None:
    screen = io.StringIO()
    approver = TerminalApprover(
        Console(file=screen, width=100, color_system=None), stdin=io.StringIO(answers)
    )
    with Gateway(approver=approver) as gateway:
        gateway.add(_launch, namespace="t")
        outcome = gateway.call_sync("t:_launch", {"target": "rocket"}, wait_for_approval=30)
        assert outcome.status is status, outcome.text
        shown = screen.getvalue()
        assert '"target": "rocket"' in shown
        assert shown.count("[o] Allow once") == (2 if answers else 1)
        if status is CallStatus.OK:
            assert outcome.content == "launched rocket"
            assert gateway.approvals is not None and len(gateway.approvals.grants()) == 1
        else:
            assert "no answer at the terminal (end of input)" in (outcome.message or "")
