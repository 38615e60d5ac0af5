"""``toolgate serve --port 0`` as a user runs it, for the end-to-end tests."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOOLGATE = str(Path(sys.executable).parent / "toolgate")


@contextmanager
def serving(folder: Path, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """Start ``toolgate serve --port 0`` in ``folder``; yield its base URL and pid once
    ``/healthz`` answers, and check it stops cleanly on SIGTERM."""
    process = subprocess.Popen(
        [TOOLGATE, "serve", "--port", "0"],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        match = re.search(r"on (http://127\.0\.0\.1:\d+)", banner)
        assert match, banner + (process.stdout.read() if process.poll() is not None else "")
        url = match.group(1)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
                    assert json.load(response)["status"] == "ok"
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "did not start"
                time.sleep(0.1)
        yield url, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
