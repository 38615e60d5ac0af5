"""The gateway reaps what a call under the Landlock layer leaves behind, and nothing else.

Without a PID namespace a tool's orphans are handed to the nearest child subreaper (the gateway,
after :func:`toolgate.sandbox.orphans.adopt_orphans`); a zombie it never waits for would count
against ``RLIMIT_NPROC`` forever. These tests run real processes in the test's own process, which
becomes a subreaper like the gateway does.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from toolgate.sandbox.orphans import adopt_orphans, reap_now, reap_soon

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


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


def test_an_orphan_left_by_a_call_is_reaped_once_it_exits() -> None:
    assert adopt_orphans()
    pid = _orphan()
    assert os.getppid() != pid and _state(pid) is not None  # adopted: it is ours now
    reap_soon()
    deadline = time.monotonic() + 10
    while _state(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    # Gone, not a zombie left holding its user's process count.
    assert _state(pid) is None


def test_a_child_someone_else_waits_for_is_never_reaped() -> None:
    assert adopt_orphans()
    started = subprocess.Popen(["true"], start_new_session=True)  # leads its own session
    plain = subprocess.Popen(["true"])  # stays in this process's session
    deadline = time.monotonic() + 10
    while {_state(started.pid), _state(plain.pid)} != {"Z"} and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reap_now() == []
    # Their starters still get their exit status.
    assert started.wait(timeout=5) == 0
    assert plain.wait(timeout=5) == 0
