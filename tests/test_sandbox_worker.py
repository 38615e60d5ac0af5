"""Compartment-mode Python tools: the worker imports the entry and calls execute in bwrap."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from folder_tools import require_program
from toolgate.backends.processes import run_process
from toolgate.errors import ToolError
from toolgate.model import (
    ImplementationKind,
    Permissions,
    PythonEntry,
    SandboxMode,
    SandboxSpec,
    SideEffect,
    Tool,
)
from toolgate.sandbox.compartment import (
    WorkerRequest,
    WorkerTimeoutError,
    run_worker,
    worker_answer,
)
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

pytestmark = pytest.mark.slow

PLUGIN = Path(__file__).parent / "fixtures" / "sandbox" / "plugin"


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    require_program("bwrap")
    if not probe_host().works:
        pytest.skip("bubblewrap cannot sandbox here")


def _tool(permissions: Permissions | None = None) -> Tool:
    return Tool(
        id="@test/plugin:echo",
        description="d",
        input_schema={"type": "object"},
        kind=ImplementationKind.PYTHON,
        entry=PythonEntry("x:y"),
        side_effect=SideEffect.READ_ONLY,
        sandbox=SandboxSpec(SandboxMode.COMPARTMENT, permissions or Permissions(env=("KEY",))),
    )


def _call(request: WorkerRequest, tool: Tool | None = None) -> Any:
    tool = tool or _tool()
    metadata: dict[str, Any] = {}
    answer = asyncio.run(
        run_worker(Sandbox(), tool, request, runner=run_process, metadata=metadata)
    )
    assert metadata["sandbox"]["enforced"] is True
    return answer


def _request(local_id: str | None, **arguments: Any) -> WorkerRequest:
    return WorkerRequest(
        PLUGIN, ("entry",), "@test/plugin:" + str(local_id), local_id, arguments, {"KEY": "v"}
    )


def test_execute_runs_in_the_sandbox_with_relative_imports_and_declared_env() -> None:
    answer = _call(_request("echo", text="hi"))
    assert answer == {"result": {"text": "HI", "env": {"KEY": "v"}, "tool": "@test/plugin:echo"}}


def test_resolved_tools_run_and_grants_are_offered_only_when_granted() -> None:
    plain = _call(_request("grants"))["result"]
    assert plain["time"] is False and plain["random"] is False
    assert plain["pid"] != os.getpid() and plain["pid"] < 100  # its own PID namespace
    granted = WorkerRequest(PLUGIN, ("entry",), "t", "grants", {}, {}, time=True, random=True)
    assert _call(granted)["result"]["time"] is True


def test_the_plugin_cannot_read_the_host() -> None:
    for path in ("/etc/shadow", str(Path.home() / ".ssh" / "id_rsa"), "/etc/passwd"):
        assert _call(_request("read", path=path))["result"]["ok"] is False
    inside = _call(_request("read", path=str(PLUGIN / "helpers.py")))["result"]
    assert inside["ok"] is True


def test_a_failing_tool_is_a_tool_error_naming_it() -> None:
    with pytest.raises(ToolError, match="the tool failed on purpose"):
        _call(_request("fail"))
    with pytest.raises(ToolError, match="no longer declares"):
        _call(_request("missing"))


def test_describe_lists_the_tools_without_execute() -> None:
    answer = _call(_request(None))
    ids = [tool["id"] for tool in answer["tools"]]
    assert ids == ["echo", "read", "fail", "grants"]
    assert all(tool["execute"] is True for tool in answer["tools"])


def test_no_answer_is_a_clear_error() -> None:
    with pytest.raises(ToolError, match="exited with code 3 without an answer: boom"):
        worker_answer("t:x", 3, b"", b"boom")


def test_a_hanging_tool_times_out_and_nothing_is_left(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(
        "import subprocess, sys, time\n"
        "def _hang(input, ctx):\n"
        "    subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); "
        "time.sleep(60)', 'toolgate-worker-orphan'], start_new_session=True)\n"
        "    time.sleep(60)\n"
        "tools = [{'id': 'hang', 'execute': _hang}]\n"
    )
    tool = dataclasses.replace(_tool(), timeout=1.0)
    request = WorkerRequest(tmp_path, ("hang",), tool.id, "hang")
    with pytest.raises(WorkerTimeoutError):
        asyncio.run(run_worker(Sandbox(), tool, request, runner=run_process))
    assert not [
        pid
        for pid in os.listdir("/proc")
        if pid.isdigit() and _cmdline(pid).find("toolgate-worker-orphan") >= 0
    ]


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
