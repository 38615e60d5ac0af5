"""Pre-started processes: a script tool's process is started before its call and used once.

Each test drives real processes through a real gateway. A pre-started call must be exactly a
fresh one as the script sees it (input, environment, folder), and the gateway's guarantees must
hold for it (timeout and tree kill, output cap, audit); the hostile cases — a process that dies
while it waits, one that prints before reading its input, one that exits without reading it — end
in a clear outcome for that call and a pool that keeps working.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from folder_tools import all_gone, clean_environ, gone, write_tool
from gateway_support import gateway_with
from toolgate import CallStatus, ErrorCode, Gateway
from toolgate.backends.prestart import PrestartSettings
from toolgate.sandbox.host import probe_host

pytestmark = pytest.mark.slow

# Records its pid when it starts (before its input), then answers with what it saw.
PROBE = """import json, os, sys, time
started = time.time()
with open(os.path.join(os.environ["PROBE_DIR"], str(os.getpid())), "w") as f:
    f.write("started")
request = json.load(sys.stdin)
print(json.dumps({
    "pid": os.getpid(),
    "waited": time.time() - started,
    "request": request,
    "cwd": os.getcwd(),
    "env": {k: v for k, v in os.environ.items() if not k.startswith("LC_")},
}))
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    return folder


@pytest.fixture
def probe_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "pids"
    folder.mkdir()
    return folder


def _gateway(root: Path, probe_dir: Path, **settings: Any) -> Gateway:
    environ = {**clean_environ(), "PROBE_DIR": str(probe_dir)}
    (root.parent / ".env").write_text(f"PROBE_DIR={probe_dir}\n", encoding="utf-8")
    return gateway_with(
        tool_folders=[root],
        environ=environ,
        env_file=root.parent / ".env",
        prestart=PrestartSettings(**settings) if settings else None,
    )


def _probe(root: Path, name: str = "probe", **fields: Any) -> None:
    write_tool(root, name, PROBE, runtime="python", env=["PROBE_DIR"], **fields)


@pytest.fixture
def gateway(root: Path, probe_dir: Path) -> Iterator[Gateway]:
    _probe(root, prestart=True)
    with _gateway(root, probe_dir) as gateway:
        assert gateway.prestart_processes() == 1
        yield gateway


def _started(probe_dir: Path, count: int) -> set[int]:
    """The pids of the probes that have started (waits until ``count`` have, at most 10 s)."""
    deadline = time.monotonic() + 10
    while len(pids := {int(p.name) for p in probe_dir.iterdir()}) < count:
        assert time.monotonic() < deadline, f"{len(pids)} of {count} probes started"
        time.sleep(0.01)
    return pids


def test_each_call_gets_its_own_process_started_before_it(
    gateway: Gateway, probe_dir: Path
) -> None:
    ready_before = _started(probe_dir, 2)  # two processes per tool by default, started ahead
    first = gateway.call_sync("local:probe", {"n": 1})
    second = gateway.call_sync("local:probe", {"n": 2})
    assert first.status is CallStatus.OK and second.status is CallStatus.OK
    assert first.metadata["process"] == second.metadata["process"] == "prestarted"
    pids = {first.content["pid"], second.content["pid"]}
    assert pids == ready_before  # the calls ran on the processes started ahead
    assert first.content["request"]["n"] == 1 and second.content["request"]["n"] == 2
    # One process, one call: both are gone, and new ones wait for the next calls.
    assert all_gone(pids)
    assert len(_started(probe_dir, 4)) == 4


def test_a_prestarted_process_sees_what_a_fresh_one_sees(
    root: Path, probe_dir: Path, gateway: Gateway, tmp_path: Path
) -> None:
    prestarted = gateway.call_sync("local:probe", {"word": "same"}, session_id="s1")
    with _gateway(root, probe_dir, enabled=False) as fresh_gateway:
        fresh = fresh_gateway.call_sync("local:probe", {"word": "same"}, session_id="s1")
    assert prestarted.metadata.get("process") == "prestarted"
    assert "process" not in fresh.metadata
    for field in ("request", "cwd", "env"):
        assert prestarted.content[field] == fresh.content[field], field
    # The declared variable arrives; the gateway's own environment does not.
    assert prestarted.content["env"]["PROBE_DIR"] == str(probe_dir)
    assert "PYTEST_CURRENT_TEST" not in prestarted.content["env"]


def test_the_timeout_kills_the_process_and_what_it_started_while_waiting(
    root: Path, probe_dir: Path, tmp_path: Path
) -> None:
    child_file = tmp_path / "child.pid"
    script = f"""import json, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open({str(child_file)!r}, "a").write(f"{{child.pid}}\\n")
json.load(sys.stdin)
time.sleep(300)
"""
    write_tool(root, "hang", script, runtime="python", prestart=True, timeout=800)
    with _gateway(root, probe_dir) as gateway:
        gateway.prestart_processes()
        started = time.monotonic()
        outcome = gateway.call_sync("local:hang", {})
        took = time.monotonic() - started
        children = [int(line) for line in child_file.read_text().split()]
    assert outcome.status is CallStatus.ERROR and outcome.code is ErrorCode.TIMEOUT
    assert outcome.metadata["process"] == "prestarted"
    assert took < 30  # it did not wait for the script
    # The call's child was started before the call; it is killed with the call. The other
    # ready processes and their children go when the gateway closes.
    assert all_gone(children)


def test_the_output_cap_stops_a_prestarted_process(root: Path, probe_dir: Path) -> None:
    script = "import json, sys\njson.load(sys.stdin)\nsys.stdout.write('x' * 300000)\n"
    write_tool(root, "loud", script, runtime="python", prestart=True)
    with _gateway(root, probe_dir) as gateway:
        gateway._scripts.max_output = 100_000
        gateway.prestart_processes()
        outcome = gateway.call_sync("local:loud", {})
    assert outcome.status is CallStatus.ERROR and outcome.code is ErrorCode.TOOL_ERROR
    assert "wrote more than 100,000 bytes to stdout" in outcome.message
    assert outcome.metadata["process"] == "prestarted"


def test_a_process_that_died_while_waiting_is_replaced(gateway: Gateway, probe_dir: Path) -> None:
    for pid in _started(probe_dir, 2):
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not gone(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
    killed = {int(p.name) for p in probe_dir.iterdir()}
    outcome = gateway.call_sync("local:probe", {})
    assert outcome.status is CallStatus.OK, outcome.message
    assert outcome.content["pid"] not in killed
    after = gateway.call_sync("local:probe", {})
    assert after.status is CallStatus.OK and after.content["pid"] not in killed


def test_a_process_that_printed_before_its_input_fails_that_call_and_the_next_works(
    root: Path, probe_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "first"
    # Only the first process ever started prints a banner before reading its input.
    script = f"""import json, os, sys
try:
    fd = os.open({str(marker)!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    print("banner: starting up", flush=True)
except FileExistsError:
    pass
request = json.load(sys.stdin)
print(json.dumps({{"ok": True}}))
"""
    write_tool(root, "banner", script, runtime="python", prestart=True)
    with _gateway(root, probe_dir, per_tool=1) as gateway:
        gateway.prestart_processes()
        deadline = time.monotonic() + 10
        while not marker.exists():  # the ready process has printed its banner
            assert time.monotonic() < deadline
            time.sleep(0.01)
        first = gateway.call_sync("local:banner", {})
        second = gateway.call_sync("local:banner", {})
    assert first.status is CallStatus.ERROR and first.code is ErrorCode.TOOL_ERROR
    assert "must print one JSON object on stdout" in first.message and "banner" in first.message
    assert second.status is CallStatus.OK and second.content == {"ok": True}


def test_a_script_that_exits_without_reading_its_input_runs_as_a_fresh_one_would(
    root: Path, probe_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Never reads stdin; records its pid so the test knows when the ready ones have ended.
    script = """import json, os
open(os.path.join(os.environ["PROBE_DIR"], str(os.getpid())), "w").close()
print(json.dumps({'answer': 42}))
"""
    write_tool(root, "eager", script, runtime="python", env=["PROBE_DIR"], prestart=True)
    with _gateway(root, probe_dir) as gateway:
        gateway.prestart_processes()
        assert all_gone(_started(probe_dir, 2))
        # Both ready processes have ended: the call never gets one of them.
        first = gateway.call_sync("local:eager", {})
        assert first.status is CallStatus.OK and first.content == {"answer": 42}
        assert "process" not in first.metadata
        # How soon its ready processes end depends on the machine's load, so call until the
        # gateway gives up pre-starting it (each dead process it finds counts), then once more.
        outcomes = []
        while "no longer pre-started" not in caplog.text:
            assert len(outcomes) < 50, "the tool was never given up"
            time.sleep(0.2)  # the processes started after the last call have time to end
            outcomes.append(gateway.call_sync("local:eager", {}))
        after = gateway.call_sync("local:eager", {})
    # Whatever process a call got, the script ran as a fresh one would (and never blocked on
    # its unread input); once given up, the tool runs in a fresh process only.
    assert all(o.status is CallStatus.OK and o.content == {"answer": 42} for o in outcomes)
    assert after.status is CallStatus.OK and after.content == {"answer": 42}
    assert "process" not in after.metadata


def test_idle_processes_are_stopped(root: Path, probe_dir: Path) -> None:
    _probe(root, prestart=True)
    with _gateway(root, probe_dir, idle_timeout=0.3) as gateway:
        gateway.prestart_processes()
        pids = _started(probe_dir, 2)
        assert not any(gone(pid) for pid in pids)
        deadline = time.monotonic() + 10
        while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(gone(pid) for pid in pids)
        # Calls still work: a fresh process, and the pool fills again.
        assert gateway.call_sync("local:probe", {}).status is CallStatus.OK


def test_closing_the_gateway_stops_the_ready_processes(root: Path, probe_dir: Path) -> None:
    _probe(root, prestart=True)
    gateway = _gateway(root, probe_dir)
    gateway.prestart_processes()
    pids = _started(probe_dir, 2)
    assert not any(gone(pid) for pid in pids)
    gateway.close()
    assert all(gone(pid) for pid in pids)


async def test_a_burst_larger_than_the_pool_is_served_by_fresh_processes(
    root: Path, probe_dir: Path
) -> None:
    _probe(root, prestart=True)
    async with _gateway(root, probe_dir, per_tool=2) as gateway:  # start() pre-starts
        outcomes = await asyncio.gather(*(gateway.call("local:probe", {"n": n}) for n in range(8)))
    assert all(o.status is CallStatus.OK for o in outcomes)
    assert sorted(o.content["request"]["n"] for o in outcomes) == list(range(8))
    prestarted = [o for o in outcomes if o.metadata.get("process") == "prestarted"]
    assert 2 <= len(prestarted) < 8
    assert len({o.content["pid"] for o in outcomes}) == 8


def test_the_audit_records_a_prestarted_call(root: Path, probe_dir: Path, tmp_path: Path) -> None:
    _probe(root, prestart=True)
    environ = {**clean_environ(), "PROBE_DIR": str(probe_dir)}
    (root.parent / ".env").write_text(f"PROBE_DIR={probe_dir}\n", encoding="utf-8")
    with gateway_with(
        tool_folders=[root],
        environ=environ,
        env_file=root.parent / ".env",
        audit_path=tmp_path / "audit.db",
    ) as gateway:
        gateway.prestart_processes()
        outcome = gateway.call_sync("local:probe", {"n": 7}, agent="ada")
        assert gateway.audit is not None and gateway.audit.flush(10)
        records = gateway.audit.query(tool_id="local:probe")
    assert outcome.metadata["process"] == "prestarted"
    assert len(records) == 1
    assert records[0].agent == "ada" and records[0].status == "ok"
    assert records[0].args == {"n": 7}


def test_the_operator_can_prestart_a_tool_that_does_not_ask(root: Path, probe_dir: Path) -> None:
    _probe(root, name="plain")
    with _gateway(root, probe_dir) as gateway:
        assert gateway.prestart_processes() == 0  # it does not declare prestart
    with _gateway(root, probe_dir, tools=frozenset({"local:*"})) as gateway:
        assert gateway.prestart_processes() == 1
        assert gateway.call_sync("local:plain", {}).metadata["process"] == "prestarted"
    with _gateway(root, probe_dir, enabled=False, tools=frozenset({"*"})) as gateway:
        assert gateway.prestart_processes() == 0


# -- declarations and configuration, through the CLI --------------------------------------------


def test_the_declaration_fields_are_checked(run_cli: RunCli, project: Path) -> None:
    tools = project / "tools"
    write_tool(tools, "bad-protocol", "print('{}')", runtime="python", protocol="fast")
    write_tool(tools, "bad-prestart", "print('{}')", runtime="python", prestart="yes")
    write_tool(
        tools,
        "boxed-worker",
        "print('{}')",
        runtime="python",
        protocol="worker",
        sandbox="compartment",
    )
    protocol = run_cli("tools", "validate", str(tools / "bad-protocol"))
    prestart = run_cli("tools", "validate", str(tools / "bad-prestart"))
    boxed = run_cli("tools", "validate", str(tools / "boxed-worker"))
    assert protocol.returncode == 1 and "protocol" in protocol.stdout + protocol.stderr
    assert "must be one of oneshot, worker" in protocol.stdout + protocol.stderr
    assert prestart.returncode == 1 and "'prestart' must be a boolean" in (
        prestart.stdout + prestart.stderr
    )
    assert boxed.returncode == 1
    assert "cannot be combined with 'sandbox: compartment'" in boxed.stdout + boxed.stderr


def test_tools_show_says_how_processes_serve_calls(run_cli: RunCli, project: Path) -> None:
    tools = project / "tools"
    write_tool(tools, "plain", "print('{}')", runtime="python")
    write_tool(tools, "eager", "print('{}')", runtime="python", prestart=True)
    write_tool(tools, "worker", "print('{}')", runtime="python", protocol="worker")
    write_tool(
        tools, "boxed", "print('{}')", runtime="python", sandbox="compartment", prestart=True
    )
    (project / "toolgate.yaml").write_text(
        "tool_folders: [./tools]\nprocesses:\n  prestart:\n    per_tool: 3\n", encoding="utf-8"
    )
    shown = {
        name: json.loads(run_cli("tools", "show", f"local:{name}", "--json").stdout)["processes"]
        for name in ("plain", "eager", "worker")
    }
    assert shown["plain"]["mode"] == "fresh"
    assert shown["eager"]["mode"] == "prestart" and "up to 3 processes" in shown["eager"]["note"]
    assert "before reading its input happens before the call" in shown["eager"]["note"]
    assert shown["worker"]["mode"] == "worker"
    boxed = json.loads(run_cli("tools", "show", "local:boxed", "--json").stdout)["processes"]
    if probe_host().works:  # warm sandboxes
        assert boxed["mode"] == "prestart" and "sandboxes" in boxed["note"]
    else:
        assert boxed["mode"] == "fresh"
    text = run_cli("tools", "show", "local:eager").stdout
    assert "Processes" in text and "pre-started" in text
    (project / "toolgate.yaml").write_text(
        "tool_folders: [./tools]\nprocesses:\n  prestart:\n    tools: ['local:plain']\n",
        encoding="utf-8",
    )
    operator = json.loads(run_cli("tools", "show", "local:plain", "--json").stdout)
    assert operator["processes"]["mode"] == "prestart"
    (project / "toolgate.yaml").write_text(
        "tool_folders: [./tools]\nprocesses:\n  prestart:\n    tools: ['no colon']\n",
        encoding="utf-8",
    )
    bad = run_cli("tools", "list")
    assert bad.returncode == 3 and "processes.prestart.tools" in bad.stderr


def test_the_demo_tool_folders_answer_the_same_pre_started(tmp_path: Path) -> None:
    from toolgate.demo import TOOL_FOLDERS
    from toolgate.formats.tool_folder.source import FolderRoot

    (tmp_path / "old.txt").write_text("alpha\nbeta\n", encoding="utf-8")
    (tmp_path / "new.txt").write_text("alpha\nBETA\ngamma\n", encoding="utf-8")
    calls = {
        "word_count": {"path": "old.txt"},
        "file_diff": {"oldPath": "old.txt", "newPath": "new.txt"},
        "system_info": {},
    }
    outcomes = {}
    for mode, settings in (
        ("fresh", PrestartSettings(enabled=False)),
        ("prestarted", PrestartSettings(tools=frozenset({"*"}))),
    ):
        with gateway_with(
            tool_folders=[FolderRoot(TOOL_FOLDERS, "demo")],
            environ=clean_environ(),
            cwd=tmp_path,
            prestart=settings,
        ) as gateway:
            assert gateway.prestart_processes() == (3 if mode == "prestarted" else 0)
            outcomes[mode] = {
                name: gateway.call_sync(f"demo:{name}", arguments)
                for name, arguments in calls.items()
            }
    for name in calls:
        fresh, prestarted = outcomes["fresh"][name], outcomes["prestarted"][name]
        assert fresh.status is prestarted.status is CallStatus.OK, (name, prestarted.message)
        assert prestarted.metadata.get("process") == "prestarted", name
        if name == "system_info":  # the disk's free space moves; the keys do not
            assert fresh.content.keys() == prestarted.content.keys()
        else:
            assert fresh.content == prestarted.content, name
            assert fresh.visualization == prestarted.visualization, name


def test_an_edited_tool_never_runs_its_old_code(root: Path, probe_dir: Path) -> None:
    def versions(version: int) -> None:
        write_tool(
            root,
            "eager",
            f"import json, sys\njson.load(sys.stdin)\nprint(json.dumps({{'v': {version}}}))\n",
            runtime="python",
            prestart=True,
        )
        write_tool(
            root,
            "worker",
            "import json, sys\nfor line in sys.stdin:\n"
            f"    call = json.loads(line)['_call']\n"
            f"    print(json.dumps({{'v': {version}, '_call': call}}), flush=True)\n",
            runtime="python",
            protocol="worker",
        )

    versions(1)
    with _gateway(root, probe_dir) as gateway:
        gateway.prestart_processes()
        first = [gateway.call_sync(f"local:{name}", {}).content for name in ("eager", "worker")]
        versions(2)
        gateway.rescan()
        second = [gateway.call_sync(f"local:{name}", {}) for name in ("eager", "worker")]
    assert first == [{"v": 1}, {"v": 1}]
    assert [o.content for o in second] == [{"v": 2}, {"v": 2}], [o.message for o in second]
