"""The test process in PID 1's place for the orphan reaper's tests.

The gateway reaps orphans only when it is PID 1 (:func:`toolgate.sandbox.orphans.adopt_orphans`);
a test process is not, so it makes itself a child subreaper: the orphans of its children then come
to it, as they come to a PID 1, and the reaper thread runs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import pytest

from toolgate.sandbox.orphans import start_reaper

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def is_subreaper() -> bool:
    """Whether this process is a child subreaper."""
    value = ctypes.c_int(0)
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) == 0
    return bool(value.value)


@pytest.fixture
def in_pid_1s_place() -> Iterator[None]:
    """Orphans of this process's children come to it while the test runs; the reaper runs."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    start_reaper()
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
