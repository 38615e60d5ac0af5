"""What a call under the Landlock layer leaves behind is reaped, and nothing anyone waits for.

Without a PID namespace a tool's orphans go to PID 1; a zombie no one waits for would count
against ``RLIMIT_NPROC`` forever. An init reaps them (the image's ``tini -s``, systemd); a
gateway that is PID 1 itself reaps them with :func:`toolgate.sandbox.orphans.adopt_orphans`.
Real processes: in PID 1's place (a child subreaper: ``orphans_support``), and as PID 1 of a PID
namespace of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orphans_support import in_pid_1s_place, is_subreaper
from toolgate.sandbox.orphans import adopt_orphans, reap_now, reap_soon

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
__all__ = ["in_pid_1s_place"]  # a fixture of this module's tests


def _state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return text[text.rfind(b")") + 2 :].split()[0].decode()


def _orphan() -> int:
    """A process whose parent exited at once, in the session its parent led (as a tool's
    processes are in the launcher's session): its pid."""
    shell = subprocess.run(
        ["sh", "-c", "sleep 0.3 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
        start_new_session=True,
    )
    return int(shell.stdout)


@pytest.mark.usefixtures("in_pid_1s_place")
def test_an_orphan_left_by_a_call_is_reaped_once_it_exits() -> None:
    pid = _orphan()
    assert _state(pid) is not None  # adopted: it is this process's now
    reap_soon()
    deadline = time.monotonic() + 10
    while _state(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    # Gone, not a zombie left holding its user's process count.
    assert _state(pid) is None


@pytest.mark.usefixtures("in_pid_1s_place")
def test_a_child_someone_else_waits_for_is_never_reaped() -> None:
    started = subprocess.Popen(["true"], start_new_session=True)  # leads its own session
    plain = subprocess.Popen(["true"])  # stays in this process's session
    deadline = time.monotonic() + 10
    while {_state(started.pid), _state(plain.pid)} != {"Z"} and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reap_now() == []
    # Their starters still get their exit status.
    assert started.wait(timeout=5) == 0
    assert plain.wait(timeout=5) == 0


def test_under_an_init_the_gateway_leaves_orphans_to_it() -> None:
    """Not PID 1: no reaper, and never a child subreaper (which would take orphans from an init
    that reaps them all, a host tool's own session leaders included, and keep those)."""
    assert os.getpid() != 1
    assert adopt_orphans() is False
    assert not is_subreaper()


_AS_PID_1 = textwrap.dedent(
    """
    import os, subprocess, time
    from toolgate.sandbox.orphans import adopt_orphans, reap_soon
    assert os.getpid() == 1, os.getpid()
    assert adopt_orphans()
    shell = subprocess.run(["sh", "-c", "sleep 0.3 & echo $!"], capture_output=True,
                           text=True, check=True, start_new_session=True)
    pid = int(shell.stdout)
    reap_soon()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    print("reaped" if not os.path.exists(f"/proc/{pid}") else "left")
    """
)


def test_a_gateway_that_is_pid_1_reaps_the_orphans_it_gets() -> None:
    """A container started without an init: the gateway is PID 1 of its PID namespace."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) from util-linux")
    command = ["unshare", "--pid", "--fork", "--mount-proc"]
    if os.getuid() != 0:
        command[1:1] = ["--user", "--map-root-user"]
    probe = subprocess.run([*command, "true"], capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a PID namespace here: {probe.stderr.decode(errors='replace')}")
    done = subprocess.run(
        [*command, sys.executable, "-c", _AS_PID_1],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "reaped"
