"""Review of the orphan reaper and of ``--disable-userns`` (commit c142cc2), through the surfaces
an operator uses: ``toolgate sandbox check`` and the reaper the runner starts.

- A root gateway on a host where user namespaces are off (``user.max_user_namespaces`` 0, as on
  RHEL 7 or a hardened host) ran bubblewrap without one (bubblewrap's own ``--unshare-user-try``
  skips it there); an explicit ``--unshare-user`` made every sandbox fail to start, so the gateway
  fell back to the weaker layer (or to none). Simulated in a user namespace of the test's own
  whose ``max_user_namespaces`` is 0: uid 0 there with every capability, as such a gateway.
- The reaper thread must survive a failing sweep (else nothing is ever reaped again, silently).
- Orphans that lead a session of their own (a host-mode tool's ``setsid`` daemon, Node's
  ``detached: true`` children) cannot be told from the gateway's own ``start_new_session``
  children: a gateway that made itself a child subreaper kept them as zombies where init used to
  reap them. It no longer does: only a gateway that is PID 1 reaps (and then only non-leaders).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orphans_support import in_pid_1s_place, is_subreaper
from toolgate.sandbox import orphans
from toolgate.sandbox.orphans import adopt_orphans, reap_now, reap_soon

__all__ = ["in_pid_1s_place"]  # a fixture of this module's tests
TOOLGATE = str(Path(sys.executable).parent / "toolgate")
#: Runs its arguments as uid 0 of a new user namespace in which no further one may be made.
NO_USERNS = [
    "unshare", "--user", "--map-root-user", "sh", "-c",
    'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh",
]  # fmt: skip


def _no_userns_works() -> str | None:
    if shutil.which("unshare") is None or shutil.which("bwrap") is None:
        return "needs unshare(1) and bubblewrap"
    done = subprocess.run([*NO_USERNS, "true"], capture_output=True, timeout=30, check=False)
    if done.returncode != 0:
        return f"cannot make a user namespace here: {done.stderr.decode(errors='replace')}"
    return None


def _state(pid: int) -> tuple[str, int] | None:
    """State and parent of ``pid``, or ``None`` when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1])


# -- --disable-userns -----------------------------------------------------------------------------


def test_root_without_user_namespaces_keeps_bubblewrap(tmp_path: Path) -> None:
    why = _no_userns_works()
    if why is not None:
        pytest.skip(why)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    done = subprocess.run(
        [*NO_USERNS, TOOLGATE, "sandbox", "check", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report = json.loads(done.stdout)
    # bubblewrap starts there (it did before --unshare-user was added), and the report says the
    # truth about nested user namespaces: the host refuses every one.
    assert report["layer"] == "bubblewrap", report
    assert report["works"] is True, report
    assert "nested user namespaces refused" in report["namespaces"], report
    assert "user namespaces are off" in report["namespaces"], report


def test_an_old_bubblewrap_is_said_to_allow_nested_user_namespaces(tmp_path: Path) -> None:
    """A bubblewrap without ``--disable-userns`` (older than 0.8.0: a wrapper hides the option
    from ``--help`` and refuses it, as the old program does) still runs; the check says so."""
    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("needs bubblewrap")
    old = tmp_path / "bwrap"
    old.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in\n'
        "  --disable-userns) echo 'bwrap: Unknown option --disable-userns' >&2; exit 1;;\n"
        "  --help) " + real + " --help | grep -v userns; exit 0;;\n"
        "  --version) echo 'bubblewrap 0.6.2'; exit 0;;\n"
        "esac; done\n"
        "exec " + real + ' "$@"\n'
    )
    old.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "toolgate.yaml").write_text(f"sandbox:\n  bwrap_path: {old}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLGATE_")}
    done = subprocess.run(
        [TOOLGATE, "sandbox", "check", "--json"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["layer"] == "bubblewrap", report
    assert "nested user namespaces ALLOWED" in report["namespaces"], report
    assert "bubblewrap 0.6.2" in report["namespaces"], report


# -- the reaper thread ----------------------------------------------------------------------------


@pytest.mark.usefixtures("in_pid_1s_place")
def test_the_reaper_survives_a_failing_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    real = orphans._zombie_orphan
    failed = threading.Event()

    def once(pid: int, parent: int, session: int) -> bool:
        if not failed.is_set():
            failed.set()
            raise RuntimeError("a sweep that fails")
        return real(pid, parent, session)

    monkeypatch.setattr(orphans, "_zombie_orphan", once)
    shell = subprocess.run(
        ["sh", "-c", "sleep 0.2 & echo $!"],
        capture_output=True, text=True, check=True, start_new_session=True,
    )  # fmt: skip
    pid = int(shell.stdout)
    reap_soon()
    deadline = time.monotonic() + 15
    while _state(pid) is not None and time.monotonic() < deadline:
        if _state(pid) == ("Z", os.getpid()) and failed.is_set():
            reap_soon()  # another call ended: the thread, if alive, looks again
        time.sleep(0.05)
    assert failed.is_set()
    assert _state(pid) is None, "the reaper thread died on the failing sweep"
    assert [t for t in threading.enumerate() if t.name == "toolgate-orphan-reaper"]


@pytest.mark.usefixtures("in_pid_1s_place")
def test_reap_now_is_not_run_twice_at_once() -> None:
    """Two sweeps at once could reap a zombie twice over a reused pid (one of them then waits
    for whatever process got that pid): sweeps take a lock."""
    assert isinstance(orphans._sweeping, type(threading.Lock()))
    with orphans._sweeping:
        result: list[list[int]] = []
        other = threading.Thread(target=lambda: result.append(reap_now()))
        other.start()
        other.join(0.3)
        assert other.is_alive(), "a second sweep ran while the first held the lock"
    other.join(10)
    assert result == [[]]


def test_a_sweep_reads_the_gateways_children_not_every_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a host with thousands of processes a sweep of all of ``/proc`` costs tens of
    milliseconds (44 ms for 3,000, measured), with the GIL held, after every call: a sweep
    reads only what the kernel lists as this process's children."""
    read: list[int] = []
    real = orphans._zombie_orphan

    def counted(pid: int, parent: int, session: int) -> bool:
        read.append(pid)
        return real(pid, parent, session)

    monkeypatch.setattr(orphans, "_zombie_orphan", counted)
    child = subprocess.Popen(["sleep", "5"])
    try:
        reap_now()
    finally:
        child.kill()
        child.wait()
    assert child.pid in read
    assert os.getppid() not in read and 1 not in read  # not this process's children


@pytest.mark.usefixtures("in_pid_1s_place")
def test_without_the_kernels_children_lists_every_process_is_looked_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kernel without ``CONFIG_PROC_CHILDREN``: the sweep falls back to all of ``/proc``
    and still reaps the orphan (and only it)."""
    monkeypatch.setattr(orphans, "_kernel_lists_children", lambda me: False)
    plain = subprocess.Popen(["sh", "-c", "exit 3"])
    shell = subprocess.run(
        ["sh", "-c", "exit 0 & echo $!"],
        capture_output=True, text=True, check=True, start_new_session=True,
    )  # fmt: skip
    pid = int(shell.stdout)
    deadline = time.monotonic() + 10
    while {_state(pid), _state(plain.pid)} != {("Z", os.getpid())} and time.monotonic() < deadline:
        if _state(pid) is None:
            break  # the reaper thread was quicker
        time.sleep(0.02)
    reap_now()
    assert _state(pid) is None
    assert plain.wait(timeout=5) == 3


# -- session leaders ------------------------------------------------------------------------------


def test_a_detached_session_leader_orphan_goes_to_init_not_the_gateway() -> None:
    """An orphan that leads its own session (a host tool's setsid daemon, Node's detached)
    cannot be told from a child the gateway started with start_new_session. A gateway that made
    itself a child subreaper would keep it as a zombie where init reaps it: the gateway never
    does, even once a call ran under the Landlock layer (only a gateway that is PID 1 reaps)."""
    adopt_orphans()
    assert not is_subreaper()
    shell = subprocess.run(
        ["sh", "-c", "setsid sleep 0.2 >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True, start_new_session=True,
    )  # fmt: skip
    pid = int(shell.stdout)
    state = _state(pid)
    assert state is None or state[1] != os.getpid()
