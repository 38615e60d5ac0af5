"""Pre-started scripts that end in the awkward ways a review found, against the same scripts
run fresh, through ``await gateway.call`` (see :mod:`test_prestart_fast_exit`)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from folder_tools import clean_environ, write_tool
from gateway_support import gateway_with
from toolgate import CallStatus
from toolgate.backends.prestart import PrestartSettings

pytestmark = pytest.mark.slow

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

READ = "import json, sys\njson.load(sys.stdin)\n"
NODE_END = "process.stdin.resume();process.stdin.on('end',()=>{%s});\n"
# signal-exit 4 (write-file-atomic, execa, ...) as npm ships it, if it is here.
SIGNAL_EXIT = "/usr/lib/node_modules/npm/node_modules/signal-exit/dist/cjs/index.js"


async def _both(
    tmp_path: Path, script: str, runtime: str = "python", *, prestarted: bool = True
) -> dict[str, Any]:
    """The outcomes of ``script`` run fresh and pre-started; ``{OUT}`` is a file of each's."""
    for variant in ("fresh", "pre"):
        (tmp_path / variant).mkdir()
        write_tool(
            tmp_path / "tools",
            variant,
            script.replace("{OUT}", str(tmp_path / variant / "out.txt")),
            runtime=runtime,
            **({"prestart": True} if variant == "pre" else {}),
        )
    prestart = PrestartSettings(per_tool=1, total=8, idle_timeout=600)
    gateway = gateway_with(
        tool_folders=[tmp_path / "tools"], environ=clean_environ(), prestart=prestart
    )
    async with gateway:
        outcomes = {v: await gateway.call(f"local:{v}", {}) for v in ("fresh", "pre")}
    if prestarted:  # (a script that cannot start ends before its call: started again)
        assert outcomes["pre"].metadata.get("process") == "prestarted"
    return outcomes


def _same(outcomes: dict[str, Any]) -> None:
    fresh, pre = outcomes["fresh"], outcomes["pre"]
    assert (pre.status, pre.code, pre.content) == (fresh.status, fresh.code, fresh.content)
    pre_message = None if pre.message is None else pre.message.replace("local:pre", "local:fresh")
    assert pre_message == fresh.message


def _written(tmp_path: Path, variant: str) -> bytes | None:
    out = tmp_path / variant / "out.txt"
    return out.read_bytes() if out.exists() else None


async def test_a_file_that_takes_the_status_pipes_number_is_left_alone(tmp_path: Path) -> None:
    # A script that closes what it inherited and opens files: one may take the status pipe's
    # old number; nothing is written into it, and the call ends OK at once.
    script = READ + (
        "import os\nos.closerange(3, 4096)\n"
        "fds = [os.open('{OUT}' + str(i), os.O_WRONLY | os.O_CREAT) for i in range(64)]\n"
        "print('{}')\n"
    )
    outcomes = await _both(tmp_path, script)
    _same(outcomes)
    assert outcomes["pre"].status is CallStatus.OK
    for variant in ("fresh", "pre"):
        assert all(f.stat().st_size == 0 for f in (tmp_path / variant).iterdir()), variant


@pytest.mark.parametrize("child_ends", ["sys.exit(0)", "pass"])
async def test_a_forked_child_does_not_report_for_the_script(
    tmp_path: Path, child_ends: str
) -> None:
    script = READ + (
        f"import os, time\npid = os.fork()\nif pid == 0:\n    {child_ends}\nelse:\n"
        "    time.sleep(0.3)\n    print(json.dumps({'parent': 'done'}))\n"
        "    os.waitpid(pid, 0)\n    sys.exit(3)\n"
    )
    outcomes = await _both(tmp_path, script)
    _same(outcomes)
    assert "exited with code 3" in outcomes["pre"].message


@pytest.mark.parametrize(
    "keeper",
    [
        "import signal\nsignal.signal(signal.SIGTERM, lambda *a: None)\n",
        "sys.excepthook = lambda *a: sys.__excepthook__(*a)\n",
        "import logging\nclass H(logging.Handler):\n    def emit(self, r): pass\n"
        "logging.getLogger().addHandler(H())\n",
    ],
    ids=["signal_handler", "excepthook", "logging_handler"],
)
async def test_an_unclosed_global_file_is_flushed_when_its_globals_are_kept(
    tmp_path: Path, keeper: str
) -> None:
    script = READ + keeper + "f = open('{OUT}', 'w')\nf.write('data')\nprint('{}')\n"
    _same(await _both(tmp_path, script))
    assert _written(tmp_path, "fresh") == _written(tmp_path, "pre") == b"data"


@pytest.mark.parametrize(
    "hook",
    [
        "def hook(*a):\n    raise RuntimeError('hook broke')\n",
        "def hook(*a):\n    sys.exit(6)\n",
    ],
    ids=["raises", "exits"],
)
async def test_an_excepthook_that_fails_ends_the_script_as_fresh(tmp_path: Path, hook: str) -> None:
    script = (
        READ
        + "print(json.dumps({'answer': 42}))\n"
        + hook
        + ("sys.excepthook = hook\nraise ValueError('the real failure')\n")
    )
    outcomes = await _both(tmp_path, script)
    _same(outcomes)
    assert outcomes["pre"].status is CallStatus.ERROR


@pytest.mark.parametrize(
    "script",
    ["import json\nx = = 1\n", "import json\nif True:\nprint(1)\n"],
    ids=["syntax", "indentation"],
)
async def test_a_syntax_error_reads_as_fresh(tmp_path: Path, script: str) -> None:
    outcomes = await _both(tmp_path, script, prestarted=False)
    _same(outcomes)
    assert "prestart_python" not in (outcomes["pre"].message or "")


@needs_node
@pytest.mark.skipif(not Path(SIGNAL_EXIT).exists(), reason="signal-exit is not here")
async def test_node_signal_exit_callbacks_run(tmp_path: Path) -> None:
    script = (
        f"const {{onExit}}=require({SIGNAL_EXIT!r});const fs=require('fs');"
        "onExit((c)=>{fs.writeFileSync('{OUT}','cleanup '+c)});" + NODE_END % "console.log('{}')"
    )
    _same(await _both(tmp_path, script, runtime="node"))
    assert _written(tmp_path, "fresh") == _written(tmp_path, "pre") == b"cleanup 0"


@needs_node
async def test_node_an_emit_wrapper_added_by_the_script_runs_after_exit(tmp_path: Path) -> None:
    script = (
        "const fs=require('fs');const og=process.emit;"
        "process.emit=function(ev,...a){const r=og.call(this,ev,...a);"
        "if(ev==='exit'){fs.writeFileSync('{OUT}','after exit')}return r};"
        + NODE_END
        % "console.log('{}')"
    )
    _same(await _both(tmp_path, script, runtime="node"))
    assert _written(tmp_path, "fresh") == _written(tmp_path, "pre") == b"after exit"


@needs_node
async def test_node_children_do_not_inherit_the_status_pipe(tmp_path: Path) -> None:
    script = "const cp=require('child_process');" + NODE_END % (
        "console.log(JSON.stringify({fds: cp.execSync('ls /proc/self/fd').toString()"
        ".trim().split(/\\s+/).length}))"
    )
    _same(await _both(tmp_path, script, runtime="node"))


async def test_python_children_do_not_inherit_the_status_pipe(tmp_path: Path) -> None:
    script = READ + (
        "import subprocess\n"
        "out = subprocess.run(['ls', '/proc/self/fd'], capture_output=True, text=True).stdout\n"
        "print(json.dumps({'fds': len(out.split())}))\n"
    )
    _same(await _both(tmp_path, script))


async def test_daemon_threads_stop_when_the_script_has_ended(tmp_path: Path) -> None:
    # As Python's teardown stops them: a daemon thread writes nothing (or the line it was in)
    # after the last exit handler.
    script = READ + (
        "import atexit, os, threading, time\n"
        "f = os.open('{OUT}', os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n"
        "def tick():\n    while True:\n        os.write(f, b't\\n')\n        time.sleep(0.0001)\n"
        "threading.Thread(target=tick, daemon=True).start()\ntime.sleep(0.02)\n"
        "atexit.register(lambda: os.write(f, b'END\\n'))\nprint('{}')\n"
    )
    _same(await _both(tmp_path, script))
    await asyncio.sleep(0.3)
    for variant in ("fresh", "pre"):
        written = _written(tmp_path, variant) or b""
        assert written.split(b"END\n", 1)[1].count(b"t") <= 1, variant
