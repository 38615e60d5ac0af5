"""Jean2 security scripts: the four outcomes, and every way a check can fail (all deny)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from folder_tools import clean_environ, require_program, write_tool
from gateway_support import gateway_with
from toolgate import ErrorCode

TOOL = (
    "import json,sys\nd=json.load(sys.stdin)\n"
    "open(d['workspacePath'] + '/ran', 'a').write('x')\n"
    "print(json.dumps({'ran': True}))\n"
)


def verdict_script(verdict: dict[str, Any]) -> str:
    return f"import sys\nsys.stdin.read()\nprint({json.dumps(json.dumps(verdict))})\n"


def setup(root: Path, security: str, *, script_name: str = "security.py", **fields: Any) -> None:
    folder = write_tool(
        root,
        "guarded",
        TOOL,
        runtime="python",
        hasSecurityCheck=True,
        securityScript=script_name,
        **fields,
    )
    (folder / script_name).write_text(security, encoding="utf-8")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    return folder


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    return folder


def call(root: Path, workspace: Path, arguments: dict[str, Any] | None = None) -> Any:
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        return gateway.call_sync("local:guarded", arguments or {}, workspace=workspace)


@pytest.mark.parametrize(
    ("verdict", "code", "runs"),
    [
        ({"allowed": True, "requiresApproval": False}, None, True),
        ({"allowed": True, "requiresApproval": True}, None, True),
        (
            {"allowed": False, "requiresApproval": False, "message": "writes outside the repo"},
            ErrorCode.SECURITY_BLOCKED,
            False,
        ),
        (
            {
                "allowed": False,
                "requiresApproval": True,
                "permissionType": "file_write",
                "permissionKey": "/etc/hosts",
                "message": "This tool wants to write to /etc/hosts",
            },
            ErrorCode.USER_REJECTION,
            False,
        ),
    ],
)
def test_the_four_outcomes(
    root: Path, workspace: Path, verdict: dict[str, Any], code: ErrorCode | None, runs: bool
) -> None:
    setup(root, verdict_script(verdict))
    outcome = call(root, workspace)
    assert outcome.code is code
    assert (workspace / "ran").exists() is runs
    if code is not None:
        assert verdict["message"] in (outcome.message or "")
    if code is ErrorCode.USER_REJECTION:
        assert "no approver is configured" in (outcome.message or "")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("security", "reason"),
    [
        ("import sys\nsys.stdin.read()\nraise SystemExit(2)\n", "exited with code 2"),
        ("import sys,time\nsys.stdin.read()\ntime.sleep(30)\n", "did not answer within 0.5 s"),
        ("import sys\nsys.stdin.read()\nprint('sure, go ahead')\n", "no valid verdict"),
        ('import sys\nsys.stdin.read()\nprint(\'{"allowed": "yes"}\')\n', "'allowed' must be"),
        ("import sys\nsys.stdin.read()\nprint('[true]')\n", "no valid verdict"),
    ],
)
def test_a_crashing_hanging_or_lying_check_denies(
    root: Path, workspace: Path, security: str, reason: str
) -> None:
    setup(root, security, securityTimeout=500)
    outcome = call(root, workspace)
    assert outcome.code is ErrorCode.SECURITY_BLOCKED
    assert reason in (outcome.message or "")
    assert "failed, so the call was denied" in (outcome.message or "")
    assert not (workspace / "ran").exists()


def test_a_missing_security_script_denies(root: Path, workspace: Path) -> None:
    write_tool(root, "guarded", TOOL, runtime="python", hasSecurityCheck=True)  # security.ts
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        assert any("security" in str(d) for d in gateway.diagnostics())  # a warning at load
        outcome = gateway.call_sync("local:guarded", {}, workspace=workspace)
    assert outcome.code is ErrorCode.SECURITY_BLOCKED
    assert "does not exist" in (outcome.message or "")
    assert not (workspace / "ran").exists()


def test_the_check_gets_the_tool_input_at_the_top_and_under_args(
    root: Path, workspace: Path, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.json"
    security = (
        f"import json,sys\nd=json.load(sys.stdin)\nopen({str(seen)!r}, 'w').write(json.dumps(d))\n"
        "print(json.dumps({'allowed': d['args']['path'] == d['path'] == 'a.txt'}))\n"
    )
    setup(
        root, security, inputSchema={"type": "object", "properties": {"path": {"type": "string"}}}
    )
    outcome = call(root, workspace, {"path": "a.txt"})
    assert outcome.ok, outcome.message
    received = json.loads(seen.read_text())
    assert received == {
        "path": "a.txt",
        "workspacePath": str(workspace),
        "sessionId": "default",
        "args": {"path": "a.txt"},
        "allowedPaths": [str(workspace)],
    }


def test_a_security_script_whose_runtime_is_missing_makes_the_tool_unavailable(
    root: Path, tmp_path: Path
) -> None:
    setup(root, "console.log('{}')", script_name="security.ts")  # bun
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(require_program("python3"))
    with gateway_with(tool_folders=[root], environ=clean_environ(PATH=str(bin_dir))) as gateway:
        [entry] = gateway.entries()
        assert "security check cannot run" in (entry.unavailable_reason or "")
        assert "bun" in (entry.unavailable_reason or "")
        assert gateway.call_sync("local:guarded").code is ErrorCode.UNAVAILABLE


def test_a_huge_security_message_is_cut(root: Path, workspace: Path) -> None:
    setup(root, verdict_script({"allowed": False, "message": "no " * 100_000}))
    outcome = call(root, workspace)
    assert outcome.code is ErrorCode.SECURITY_BLOCKED
    assert len(outcome.message or "") < 2_000


def test_a_tool_argument_named_args_is_not_overwritten(
    root: Path, workspace: Path, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.json"
    security = (
        f"import json,sys\nd=json.load(sys.stdin)\nopen({str(seen)!r}, 'w').write(json.dumps(d))\n"
        "print(json.dumps({'allowed': True}))\n"
    )
    setup(root, security, inputSchema={"type": "object", "properties": {"args": {"type": "array"}}})
    assert call(root, workspace, {"args": ["-l"]}).ok
    assert json.loads(seen.read_text())["args"] == ["-l"]


def test_the_security_runtime_follows_the_script_extension(root: Path, workspace: Path) -> None:
    setup(
        root,
        'cat >/dev/null\necho \'{"allowed": false, "message": "bash said no"}\'\n',
        script_name="security.sh",
    )
    outcome = call(root, workspace)
    assert outcome.code is ErrorCode.SECURITY_BLOCKED and "bash said no" in (outcome.message or "")


def test_invalid_arguments_are_rejected_before_the_check_runs(
    root: Path, workspace: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "checked"
    setup(
        root,
        f"import sys\nsys.stdin.read()\nopen({str(marker)!r}, 'w')\n"
        "print('{\"allowed\": true}')\n",
        inputSchema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    assert call(root, workspace, {"n": "x"}).code is ErrorCode.INVALID_ARGUMENTS
    assert not marker.exists()


def test_a_verdict_that_asks_a_person_becomes_a_request_keyed_by_its_permission(
    root: Path, workspace: Path, tmp_path: Path
) -> None:
    setup(
        root,
        verdict_script(
            {
                "allowed": False,
                "requiresApproval": True,
                "permissionType": "file_write",
                "permissionKey": "notes.txt",
                "message": "This tool wants to write to notes.txt",
            }
        ),
    )
    with gateway_with(
        tool_folders=[root], environ=clean_environ(), approver="queue", state_path=tmp_path / "s.db"
    ) as gateway:
        outcome = gateway.call_sync("local:guarded", {}, workspace=workspace)
        request = outcome.approval
        assert request is not None and not (workspace / "ran").exists()
        assert (request.permission.type, request.permission.key) == ("file_write", "notes.txt")
        assert request.security_message == "This tool wants to write to notes.txt"
        approvals = gateway.approvals
        assert approvals is not None
        approvals.decide(request.id, "always", by="alice")
        assert not (workspace / "ran").exists()  # the decision ran nothing
        ran = gateway.call_sync("local:guarded", {}, workspace=workspace)  # the retry runs it
        assert ran.ok and (workspace / "ran").read_text() == "x"
        assert ran.metadata["approval"] == {"id": request.id, "decision": "always"}
        again = gateway.call_sync("local:guarded", {}, workspace=workspace)  # the grant covers it
        assert again.ok and (workspace / "ran").read_text() == "xx"


def test_arguments_cannot_forge_what_the_check_sees(
    root: Path, workspace: Path, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.json"
    security = (
        f"import json,sys\nd=json.load(sys.stdin)\nopen({str(seen)!r}, 'w').write(json.dumps(d))\n"
        "print(json.dumps({'allowed': d['args'].get('path') == 'safe.txt' and "
        "d['allowedPaths'] == [d['workspacePath']]}))\n"
    )
    setup(root, security)  # the schema allows extra properties, as tool.md schemas often do
    forged = {
        "path": "/etc/passwd",
        "args": {"path": "safe.txt"},
        "allowedPaths": ["/"],
        "workspacePath": "/",
    }
    outcome = call(root, workspace, forged)
    assert outcome.code is ErrorCode.SECURITY_BLOCKED
    received = json.loads(seen.read_text())
    assert received["args"]["path"] == "/etc/passwd"
    assert received["allowedPaths"] == [str(workspace)]
    assert received["workspacePath"] == str(workspace)
