"""The subprocess runner of script tools: real processes, real process trees."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolgate.backends import process_tree, processes
from toolgate.backends.processes import ProcessResult, ProcessStartError, run_process

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="inspects processes through /proc"
)

ENV = {"PATH": os.environ.get("PATH", os.defpath)}
BASH = shutil.which("bash") or "/bin/bash"


async def run(
    script: str,
    *,
    stdin: bytes = b"",
    timeout: float = 30.0,
    max_output: int = processes.DEFAULT_MAX_OUTPUT,
    cwd: Path | None = None,
) -> ProcessResult:
    return await run_process(
        [BASH, "-c", script],
        stdin=stdin,
        env=ENV,
        cwd=cwd,
        timeout=timeout,
        max_output=max_output,
    )


def _stat(pid: int) -> tuple[str, int] | None:
    """State and start time of ``pid``, or None when there is no such process."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 1 :].split()
    return fields[0].decode(), int(fields[19])


def alive(pid: int, start: int | None = None) -> bool:
    """True when ``pid`` runs (a zombie is dead) and, if given, started at ``start``."""
    stat = _stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and start in (None, stat[1])


async def wait_pid_file(path: Path, within: float = 10.0) -> int:
    until = time.monotonic() + within
    while time.monotonic() < until:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return int(text)
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} was not written")


async def assert_gone(pid: int, start: int | None = None, within: float = 5.0) -> None:
    """Wait up to ``within`` seconds for ``pid`` to die; fail if it does not."""
    until = time.monotonic() + within
    while alive(pid, start):
        if time.monotonic() > until:
            raise AssertionError(f"process {pid} is still alive: {_stat(pid)}")
        await asyncio.sleep(0.02)


def spawn_reporting(pid_file: Path, *, setsid: bool = True) -> str:
    """Shell words starting ``sleep 300`` that first writes its own pid to ``pid_file``."""
    inner = f"echo $$ > {pid_file}; exec sleep 300"
    return f"{'setsid ' if setsid else ''}{BASH} -c '{inner}'"


def until_written(pid_file: Path) -> str:
    """Shell words waiting until ``pid_file`` was written (no race with a kill on a slow host)."""
    return f"until [ -s {pid_file} ]; do sleep 0.01; done"


def own_zombies() -> list[int]:
    """Children of this process in state Z."""
    zombies = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            data = Path(f"/proc/{name}/stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 1 :].split()
        if int(fields[1]) == os.getpid() and fields[0] == b"Z":
            zombies.append(int(name))
    return zombies


# -- input, output, environment ------------------------------------------------------------------


async def test_stdin_round_trip() -> None:
    result = await run("cat", stdin=b'{"x": 1}')
    assert result == ProcessResult(
        exit_code=0,
        stdout=b'{"x": 1}',
        stderr=b"",
        timed_out=False,
        output_exceeded=None,
        duration=result.duration,
        signal=None,
    )


async def test_large_round_trip_does_not_deadlock() -> None:
    data = os.urandom(3 * 1024 * 1024)
    result = await run("cat", stdin=data)
    assert result.exit_code == 0
    assert result.stdout == data


async def test_environment_is_exactly_the_one_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGATE_TEST_LEAK", "must not be seen")
    env_program = shutil.which("env")
    assert env_program is not None
    result = await run_process(
        [env_program],
        stdin=b"",
        env={"ONLY": "1", "WITH_SPACE": "a b"},
        cwd=None,
        timeout=30,
    )
    assert result.exit_code == 0
    assert sorted(result.stdout.decode().splitlines()) == ["ONLY=1", "WITH_SPACE=a b"]


async def test_python_sees_no_inherited_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGATE_TEST_LEAK", "must not be seen")
    result = await run_process(
        [sys.executable, "-c", "import os; print('TOOLGATE_TEST_LEAK' in os.environ)"],
        stdin=b"",
        env={"MARK": "x"},
        cwd=None,
        timeout=30,
    )
    assert result.stdout == b"False\n"


async def test_cwd_is_respected(tmp_path: Path) -> None:
    result = await run("pwd -P", cwd=tmp_path)
    assert result.stdout.decode().strip() == str(tmp_path.resolve())


async def test_exit_code_and_stderr() -> None:
    result = await run("echo out; echo 'it failed' >&2; exit 7")
    assert (result.exit_code, result.signal) == (7, None)
    assert result.stdout == b"out\n"
    assert result.stderr == b"it failed\n"
    assert not result.timed_out and result.output_exceeded is None


async def test_death_by_signal() -> None:
    result = await run("kill -TERM $$")
    assert (result.exit_code, result.signal) == (None, signal.SIGTERM)


@pytest.mark.parametrize("script", ["true", "exec sleep 0", "exit 0", "head -c 10 >/dev/null"])
async def test_program_that_ignores_stdin_gets_a_large_one(script: str) -> None:
    result = await run(script, stdin=b"x" * (1024 * 1024), timeout=30)
    assert result.exit_code == 0
    assert not result.timed_out


# -- start errors --------------------------------------------------------------------------------


async def test_missing_program(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-tool")
    with pytest.raises(ProcessStartError) as info:
        await run_process([missing], stdin=b"", env=ENV, cwd=None, timeout=5)
    assert missing in str(info.value)
    assert "No such file" in str(info.value)


async def test_program_not_executable(tmp_path: Path) -> None:
    script = tmp_path / "tool.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(ProcessStartError) as info:
        await run_process([str(script)], stdin=b"", env=ENV, cwd=None, timeout=5)
    assert str(script) in str(info.value)
    assert "Permission denied" in str(info.value)


async def test_exec_format_error(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_bytes(b"\x00\x01\x02 not a program\n")
    script.chmod(0o755)
    with pytest.raises(ProcessStartError) as info:
        await run_process([str(script)], stdin=b"", env=ENV, cwd=None, timeout=5)
    assert str(script) in str(info.value)
    assert "Exec format error" in str(info.value)


async def test_missing_working_directory(tmp_path: Path) -> None:
    with pytest.raises(ProcessStartError) as info:
        await run_process(
            [BASH, "-c", "true"], stdin=b"", env=ENV, cwd=tmp_path / "gone", timeout=5
        )
    assert BASH in str(info.value) and "gone" in str(info.value)


async def test_start_error_leaks_no_descriptor(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        with pytest.raises(ProcessStartError):
            await run_process([str(tmp_path / "nope")], stdin=b"", env=ENV, cwd=None, timeout=5)
    assert len(os.listdir("/proc/self/fd")) <= before


# -- timeout and the process tree ----------------------------------------------------------------


@pytest.mark.slow
async def test_timeout_kills_a_setsid_grandchild(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = f"{spawn_reporting(pid_file)} & {until_written(pid_file)}; sleep 300"
    result = await run(script, timeout=2)
    assert result.timed_out
    assert (result.exit_code, result.signal) == (None, signal.SIGKILL)
    grandchild = await wait_pid_file(pid_file)
    await assert_gone(grandchild)


@pytest.mark.slow
async def test_timeout_kills_a_double_forked_grandchild(tmp_path: Path) -> None:
    # The middle process exits at once: the grandchild is orphaned and in a session of its own
    # before any snapshot, but it still holds stdout, which is how it is found.
    pid_file = tmp_path / "grandchild.pid"
    script = f"( {spawn_reporting(pid_file)} & ) & {until_written(pid_file)}; sleep 300"
    result = await run(script, timeout=2)
    assert result.timed_out
    grandchild = await wait_pid_file(pid_file)
    await assert_gone(grandchild)


@pytest.mark.slow
async def test_timeout_kills_a_tracked_double_forked_daemon(tmp_path: Path) -> None:
    # Output redirected: only tracking links it to the call (its parent lives past a snapshot).
    pid_file = tmp_path / "daemon.pid"
    daemon = f"{spawn_reporting(pid_file)} </dev/null >/dev/null 2>&1"
    result = await run(f"( {daemon} & sleep 0.5 ) & sleep 300", timeout=2)
    assert result.timed_out
    grandchild = await wait_pid_file(pid_file)
    await assert_gone(grandchild)


@pytest.mark.slow
async def test_timeout_does_not_wait_for_the_sleep() -> None:
    result = await run_process(
        [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
        stdin=b"",
        env={},
        cwd=None,
        timeout=1,
    )
    assert result.timed_out
    assert result.stdout == b"started\n"
    assert result.exit_code is None and result.signal == signal.SIGKILL


async def test_background_process_holding_stdout_does_not_block(tmp_path: Path) -> None:
    pid_file = tmp_path / "background.pid"
    result = await run(
        f"{spawn_reporting(pid_file, setsid=False)} & {until_written(pid_file)}; echo done"
    )
    assert (result.exit_code, result.timed_out) == (0, False)
    assert result.stdout == b"done\n"
    await assert_gone(await wait_pid_file(pid_file))


async def test_escaped_holder_of_stdout_is_found_by_its_pipe(tmp_path: Path) -> None:
    # Double fork plus setsid, parent gone at once: no walk can find it, the pipe it holds can.
    pid_file = tmp_path / "daemon.pid"
    result = await run(f"( {spawn_reporting(pid_file)} & ); {until_written(pid_file)}; echo done")
    assert (result.exit_code, result.stdout) == (0, b"done\n")
    await assert_gone(await wait_pid_file(pid_file))


@pytest.mark.slow
async def test_daemon_tracked_while_the_call_runs_is_killed_after_it(tmp_path: Path) -> None:
    # A double-forked daemon with no handle on the output: the middle process lives 0.5 s, the
    # daemon is seen by a snapshot, orphaned, then killed when the program exits.
    pid_file = tmp_path / "daemon.pid"
    daemon = f"{spawn_reporting(pid_file)} </dev/null >/dev/null 2>&1"
    result = await run(f"( {daemon} & sleep 0.5 ); echo done")
    assert (result.exit_code, result.stdout, result.timed_out) == (0, b"done\n", False)
    await assert_gone(await wait_pid_file(pid_file))


@pytest.mark.slow
async def test_setsid_child_outliving_its_parent_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    daemon = f"{spawn_reporting(pid_file)} </dev/null >/dev/null 2>&1"
    result = await run(f"{daemon} & sleep 0.5; exit 0")
    assert result.exit_code == 0
    await assert_gone(await wait_pid_file(pid_file))


async def test_nothing_outlives_a_normal_exit(tmp_path: Path) -> None:
    # Same session, its own process group (job control), no handle on the output.
    pid_file = tmp_path / "job.pid"
    job = f"{spawn_reporting(pid_file, setsid=False)} </dev/null >/dev/null 2>&1"
    result = await run(f"set -m; {job} & {until_written(pid_file)}; exit 0")
    assert result.exit_code == 0
    await assert_gone(await wait_pid_file(pid_file))


@pytest.mark.slow
async def test_deep_tree_is_killed(tmp_path: Path) -> None:
    # Each level starts the next in a session of its own, then waits.
    pid_files = [tmp_path / f"level{i}.pid" for i in range(4)]
    inner = "sleep 300"
    for pid_file in reversed(pid_files[1:]):
        inner = f"echo $$ > {pid_file}; setsid {BASH} -c {_quote(inner)} & wait"
    script = f"echo $$ > {pid_files[0]}; setsid {BASH} -c {_quote(inner)} & "
    result = await run(script + f"{until_written(pid_files[-1])}; wait", timeout=2)
    assert result.timed_out
    for pid_file in pid_files:
        await assert_gone(await wait_pid_file(pid_file))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.mark.slow
async def test_process_group_fallback_without_proc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process_tree, "HAVE_PROC", False)
    pid_file = tmp_path / "background.pid"
    script = f"{spawn_reporting(pid_file, setsid=False)} & {until_written(pid_file)}; sleep 300"
    result = await run(script, timeout=2)
    assert result.timed_out
    await assert_gone(await wait_pid_file(pid_file))


# -- output cap ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_output_cap(stream: str) -> None:
    cap = 1024 * 1024
    code = (
        "import sys\n"
        f"out = sys.{stream}.buffer\n"
        "for _ in range(20 * 1024):\n"
        "    out.write(b'x' * 1024)\n"
        "import time; time.sleep(60)\n"
    )
    result = await run_process(
        [sys.executable, "-c", code], stdin=b"", env={}, cwd=None, timeout=60, max_output=cap
    )
    assert result.output_exceeded == stream
    assert not result.timed_out
    assert (result.exit_code, result.signal) == (None, signal.SIGKILL)
    assert len(getattr(result, stream)) == cap
    assert set(getattr(result, stream)) == {ord("x")}


async def test_output_cap_with_yes() -> None:
    result = await run_process(["yes"], stdin=b"", env=ENV, cwd=None, timeout=60, max_output=1000)
    assert result.output_exceeded == "stdout"
    assert result.stdout == b"y\n" * 500


async def test_output_exactly_at_the_cap_is_fine() -> None:
    result = await run("printf 12345", max_output=5)
    assert (result.stdout, result.output_exceeded, result.exit_code) == (b"12345", None, 0)


async def test_other_stream_is_kept_when_one_exceeds() -> None:
    result = await run("echo warning >&2; yes", max_output=4096)
    assert result.output_exceeded == "stdout"
    assert result.stderr == b"warning\n"


# -- cancellation, concurrency, zombies ----------------------------------------------------------


async def test_cancellation_kills_the_tree(tmp_path: Path) -> None:
    child_file = tmp_path / "child.pid"
    grandchild_file = tmp_path / "grandchild.pid"
    script = f"echo $$ > {child_file}; {spawn_reporting(grandchild_file)} & exec sleep 300"
    task = asyncio.create_task(run(script, timeout=300))
    child = await wait_pid_file(child_file)
    grandchild = await wait_pid_file(grandchild_file)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The child was reaped before the cancellation came back: no process, not even a zombie.
    assert _stat(child) is None
    await assert_gone(grandchild)


async def test_cancellation_kills_an_escaped_holder_of_stdout(tmp_path: Path) -> None:
    # A caller that enforces its own timeout by cancelling: the double-forked grandchild is
    # found by the pipe it holds, without waiting for end of file.
    pid_file = tmp_path / "grandchild.pid"
    script = f"( {spawn_reporting(pid_file)} & ) & {until_written(pid_file)}; exec sleep 300"
    task = asyncio.create_task(run(script, timeout=300))
    grandchild = await wait_pid_file(pid_file)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_gone(grandchild)


async def test_output_cap_kills_an_escaped_holder_of_stdout(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = f"( {spawn_reporting(pid_file)} & ) & {until_written(pid_file)}; yes"
    result = await run(script, max_output=4096)
    assert result.output_exceeded == "stdout"
    await assert_gone(await wait_pid_file(pid_file))


async def test_cancellation_during_grace_period(tmp_path: Path) -> None:
    pid_file = tmp_path / "background.pid"
    script = f"{spawn_reporting(pid_file, setsid=False)} & echo done"
    task = asyncio.create_task(run(script))
    background = await wait_pid_file(pid_file)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_gone(background)


async def test_fifty_calls_side_by_side() -> None:
    results = await asyncio.gather(*(run("sleep 0.1; echo ok") for _ in range(50)))
    assert all(r.exit_code == 0 and r.stdout == b"ok\n" for r in results)


@pytest.mark.slow
async def test_no_zombies_after_a_batch(tmp_path: Path) -> None:
    scripts = [
        "true",
        "echo hi; exit 3",
        "sleep 300",
        "yes",
        f"{spawn_reporting(tmp_path / 'a.pid', setsid=False)} & echo x",
        f"( {spawn_reporting(tmp_path / 'b.pid')} & ) & sleep 300",
    ]
    await asyncio.gather(*(run(script, timeout=1, max_output=4096) for script in scripts * 3))
    assert own_zombies() == []


async def test_no_scan_for_a_fast_program(monkeypatch: pytest.MonkeyPatch) -> None:
    # A program that is over before the first snapshot is not polled: one scan at the end.
    scans: list[int] = []
    read_table = process_tree.read_process_table

    def counting(min_pid: int = 0) -> dict[int, process_tree.ProcessStat]:
        scans.append(min_pid)
        return read_table(min_pid)

    monkeypatch.setattr(process_tree, "read_process_table", counting)
    monkeypatch.setattr(processes, "FIRST_SNAPSHOT", 5.0)
    # A process started just before: the child's pid comes after it (the counter may have
    # wrapped since pytest started, after other tests spawned thousands of processes).
    probe = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)
    before = int(probe.stdout)
    result = await run_process(["true"], stdin=b"", env=ENV, cwd=None, timeout=30)
    assert result.exit_code == 0
    assert len(scans) == 1
    # Only processes newer than the child are read (unless the pid counter wrapped meanwhile).
    assert scans[0] > before or scans[0] == 0


@pytest.mark.slow
async def test_tracking_scans_are_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    scans = 0
    read_table = process_tree.read_process_table

    def counting(min_pid: int = 0) -> dict[int, process_tree.ProcessStat]:
        nonlocal scans
        scans += 1
        return read_table(min_pid)

    monkeypatch.setattr(process_tree, "read_process_table", counting)
    results = await asyncio.gather(*(run("sleep 1") for _ in range(20)))
    assert all(r.exit_code == 0 for r in results)
    # 20 calls, each with ~7 snapshots and one final scan: far fewer scans than 160.
    print(f"scans for 20 calls of 1 s: {scans}")
    assert scans < 100


# -- parsing -------------------------------------------------------------------------------------


def test_stat_parsing_survives_odd_command_names() -> None:
    rest = " ".join(["S", "42", "7", "7"] + ["0"] * 15 + ["123456", "0"])
    parsed = process_tree.parse_stat(f"99 (a) b (c) d)) {rest}".encode())
    assert parsed == process_tree.ProcessStat(b"S", 42, 7, 7, 123456)
    assert process_tree.parse_stat(b"garbage") is None
    assert process_tree.parse_stat(b"1 (x) S 1") is None


def test_a_wrapped_pid_counter_makes_the_scan_read_everything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(process_tree, "_last_pid", lambda: 100)
    assert process_tree.lowest_pid_to_scan(5000) == 0  # the counter is below the root: wrapped
    monkeypatch.setattr(process_tree, "_last_pid", lambda: 9000)
    assert process_tree.lowest_pid_to_scan(5000) == 5000
    assert process_tree.lowest_pid_to_scan(5000, [7000, 4000]) == 4000
    monkeypatch.setattr(process_tree, "_last_pid", lambda: None)
    assert process_tree.lowest_pid_to_scan(5000) == 0
