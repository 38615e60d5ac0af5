"""Pre-started python3 and node tools end without their interpreter's teardown, unchanged.

The shims of :mod:`toolgate.backends.fast_exit` run a pre-started tool's unchanged script and
report its exit code once it is final; the gateway answers from it. Everything here goes through
``await gateway.call`` with the real interpreters: each script is run as a fresh process and as
a pre-started one, and the two outcomes must be the same — exit codes, stderr in the message,
what ``atexit`` handlers and ``'exit'`` listeners print, threads joined, files flushed — and the
tree, grandchildren included, is still killed at the end of the call and at its timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from folder_tools import all_gone, clean_environ, write_tool
from gateway_support import gateway_with
from toolgate import CallStatus, ErrorCode, Gateway
from toolgate.backends.prestart import PrestartSettings
from toolgate.backends.processes import STATUS_ENV, run_process

pytestmark = pytest.mark.slow

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")

# Each case: a script that reads its input and ends in one way; its fresh and pre-started
# outcomes are compared.
PYTHON_CASES: dict[str, str] = {
    "ok": "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'ok': True}))\n",
    "exit_code": "import json, sys\njson.load(sys.stdin)\nprint('{}')\nsys.exit(3)\n",
    "exit_message": "import sys\nsys.stdin.read()\nsys.exit('gave up: no data')\n",
    "uncaught": "import sys\nsys.stdin.read()\nprint('{}')\nraise ValueError('boom here')\n",
    "interrupted": "import sys\nsys.stdin.read()\nraise KeyboardInterrupt\n",
    # The answer comes from an atexit handler, after the script's code has ended.
    "atexit": (
        "import atexit, json, sys\nsys.stdin.read()\n"
        "atexit.register(lambda: print(json.dumps({'from': 'atexit'})))\n"
    ),
    # ...and from a non-daemon thread the interpreter waits for.
    "thread": (
        "import json, sys, threading, time\nsys.stdin.read()\n"
        "def late():\n    time.sleep(0.05)\n    print(json.dumps({'from': 'thread'}))\n"
        "threading.Thread(target=late).start()\n"
    ),
    # ...and from the __del__ of an object in the script's globals, at the teardown.
    "finalizer": (
        "import json, sys\nsys.stdin.read()\n"
        "class Last:\n    def __del__(self):\n        print(json.dumps({'from': '__del__'}))\n"
        "last = Last()\n"
    ),
    "stderr_then_fail": (
        "import sys\nsys.stdin.read()\nprint('partial', file=sys.stderr)\n"
        "import atexit\natexit.register(lambda: print('from atexit', file=sys.stderr))\n"
        "sys.exit(5)\n"
    ),
    # A script that closes every descriptor but its stdio: the status pipe is gone, the call
    # ends at the process's exit as always.
    "closes_fds": "import os, sys\nsys.stdin.read()\nos.closerange(3, 4096)\nsys.exit(4)\n",
}

NODE_CASES: dict[str, str] = {
    "ok": (
        "let d='';process.stdin.on('data',c=>d+=c);"
        "process.stdin.on('end',()=>{JSON.parse(d);console.log(JSON.stringify({ok:true}))});\n"
    ),
    "exit_code": "process.stdin.resume();process.stdin.on('end',()=>{process.exitCode=3});\n",
    "exit_call": "process.stdin.resume();process.stdin.on('end',()=>{process.exit(6)});\n",
    "uncaught": (
        "process.stdin.resume();process.stdin.on('end',()=>{throw new Error('boom here')});\n"
    ),
    "rejected": (
        "process.stdin.resume();"
        "process.stdin.on('end',()=>{Promise.reject(new Error('nobody caught me'))});\n"
    ),
    # The answer and the exit code come from an 'exit' listener.
    "exit_listener": (
        "process.stdin.resume();"
        "process.on('exit',()=>{console.log(JSON.stringify({from:'exit'}));"
        "console.error('listener ran');process.exitCode=7});\n"
    ),
    "exit_listener_ok": (
        "process.stdin.resume();"
        "process.on('exit',()=>{console.log(JSON.stringify({from:'exit'}))});\n"
    ),
    "timer": (
        "process.stdin.resume();process.stdin.on('end',()=>"
        "setTimeout(()=>console.log(JSON.stringify({from:'timer'})),30));\n"
    ),
    # More than a pipe holds: written before 'exit' all the same.
    "big_output": (
        "process.stdin.resume();process.stdin.on('end',()=>"
        "console.log(JSON.stringify({n:300000,text:'x'.repeat(300000)})));\n"
    ),
}


def _gateway(root: Path, **settings: Any) -> Gateway:
    prestart = PrestartSettings(**{"per_tool": 1, "total": 64, "idle_timeout": 600, **settings})
    return gateway_with(tool_folders=[root], environ=clean_environ(), prestart=prestart)


def _same(message: str | None, tool_id: str) -> str | None:
    return None if message is None else message.replace(tool_id, "TOOL")


def _saved(content: Any) -> Any:
    """The content, or for a large one the complete output the gateway saved to a file."""
    if isinstance(content, str) and (match := re.search(r"saved to (\S+\.txt);", content)):
        return Path(match[1]).read_bytes()
    return content


async def _compare(root: Path, runtime: str, cases: dict[str, str]) -> None:
    for name, script in cases.items():
        write_tool(root, f"{name}-fresh", script, runtime=runtime)
        write_tool(root, f"{name}-pre", script, runtime=runtime, prestart=True)
    async with _gateway(root) as gateway:
        for name in cases:
            fresh = await gateway.call(f"local:{name}-fresh", {})
            pre = await gateway.call(f"local:{name}-pre", {})
            assert pre.metadata.get("process") == "prestarted", name
            assert (pre.status, pre.code) == (fresh.status, fresh.code), (name, pre.message)
            assert _saved(pre.content) == _saved(fresh.content), name
            assert _same(pre.message, f"local:{name}-pre") == _same(
                fresh.message, f"local:{name}-fresh"
            ), name


async def test_python_scripts_end_the_same_prestarted_as_fresh(tmp_path: Path) -> None:
    await _compare(tmp_path, "python", PYTHON_CASES)


@needs_node
async def test_node_scripts_end_the_same_prestarted_as_fresh(tmp_path: Path) -> None:
    await _compare(tmp_path, "node", NODE_CASES)


async def test_the_outcomes_say_what_the_scripts_did(tmp_path: Path) -> None:
    """Not only the same as fresh: right (the comparison above would pass if both broke)."""
    cases = {name: PYTHON_CASES[name] for name in ("atexit", "thread", "finalizer", "uncaught")}
    cases["stderr"] = PYTHON_CASES["stderr_then_fail"]
    cases["closes"] = PYTHON_CASES["closes_fds"]
    cases["interrupted"] = PYTHON_CASES["interrupted"]
    for name, script in cases.items():
        write_tool(tmp_path, name, script, runtime="python", prestart=True)
    async with _gateway(tmp_path) as gateway:
        outcomes = {name: await gateway.call(f"local:{name}", {}) for name in cases}
    assert all(o.metadata.get("process") == "prestarted" for o in outcomes.values())
    assert outcomes["atexit"].content == {"from": "atexit"}
    assert outcomes["thread"].content == {"from": "thread"}
    assert outcomes["finalizer"].content == {"from": "__del__"}
    uncaught = outcomes["uncaught"].message or ""
    assert "exited with code 1" in uncaught and "ValueError: boom here" in uncaught
    assert "prestart_python" not in uncaught  # the traceback is the script's own
    assert "exited with code 5" in (outcomes["stderr"].message or "")
    assert "partial" in (outcomes["stderr"].message or "")
    assert "from atexit" in (outcomes["stderr"].message or "")
    assert "exited with code 4" in (outcomes["closes"].message or "")
    assert "killed by signal 2" in (outcomes["interrupted"].message or "")


@needs_node
async def test_node_outcomes_say_what_the_scripts_did(tmp_path: Path) -> None:
    for name in ("exit_listener", "uncaught", "rejected", "exit_call"):
        write_tool(tmp_path, name, NODE_CASES[name], runtime="node", prestart=True)
    async with _gateway(tmp_path) as gateway:
        outcomes = {name: await gateway.call(f"local:{name}", {}) for name in NODE_CASES}
    listener = outcomes["exit_listener"].message or ""
    assert "exited with code 7" in listener and "listener ran" in listener
    assert "boom here" in (outcomes["uncaught"].message or "")
    assert "nobody caught me" in (outcomes["rejected"].message or "")
    assert "exited with code 6" in (outcomes["exit_call"].message or "")


PROBES = {
    "python": """import json, os, sys
request = json.load(sys.stdin)
print(json.dumps({
    "argv": sys.argv, "path0": sys.path[0], "file": __file__, "name": __name__,
    "globals": sorted(globals()), "cwd": os.getcwd(), "env": dict(os.environ),
    "workspace": request["workspacePath"],
}))
""",
    "node": """let d='';process.stdin.on('data',c=>d+=c);
process.stdin.on('end',()=>{const r=JSON.parse(d);console.log(JSON.stringify({
  argv: process.argv.slice(1), execArgv: process.execArgv, file: __filename,
  main: require.main === module, cwd: process.cwd(), env: process.env,
  workspace: r.workspacePath}))});
""",
}


@pytest.mark.parametrize("runtime", ["python", pytest.param("node", marks=needs_node)])
async def test_a_prestarted_script_sees_what_a_fresh_one_sees(tmp_path: Path, runtime: str) -> None:
    root = tmp_path / "tools"
    write_tool(root, "fresh", PROBES[runtime], runtime=runtime)
    write_tool(root, "pre", PROBES[runtime], runtime=runtime, prestart=True)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with _gateway(root) as gateway:
        results = []
        for where in (None, workspace):  # the gateway's folder, then a call's workspace
            fresh = await gateway.call("local:fresh", {}, workspace=where)
            pre = await gateway.call("local:pre", {}, workspace=where)
            assert fresh.status is CallStatus.OK and pre.status is CallStatus.OK, pre.message
            results.append((fresh.content, pre.content))
    for fresh, pre in results:
        assert STATUS_ENV not in pre["env"]
        fresh = json.loads(json.dumps(fresh).replace("tools/fresh", "tools/TOOL"))
        pre = json.loads(json.dumps(pre).replace("tools/pre", "tools/TOOL"))
        assert pre == fresh
    assert results[1][1]["cwd"] == str(workspace)


@pytest.mark.parametrize("runtime", ["python", pytest.param("node", marks=needs_node)])
async def test_what_a_finished_script_left_running_is_killed(tmp_path: Path, runtime: str) -> None:
    """A script that answers and ends, leaving a grandchild in a session of its own: the call
    is answered from the shim's status, and the grandchild is still killed with the tree."""
    pid_file = tmp_path / "grandchild.pid"
    script = {
        "python": f"""import json, subprocess, sys
json.load(sys.stdin)
child = subprocess.Popen(["sleep", "300"], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
open({str(pid_file)!r}, "w").write(str(child.pid))
print(json.dumps({{"ok": True}}))
""",
        "node": f"""const cp=require('child_process'),fs=require('fs');
process.stdin.resume();process.stdin.on('end',()=>{{
const c=cp.spawn('sleep',['300'],{{detached:true,stdio:'ignore'}});c.unref();
fs.writeFileSync({json.dumps(str(pid_file))},String(c.pid));
console.log(JSON.stringify({{ok:true}}))}});
""",
    }[runtime]
    write_tool(tmp_path / "tools", "leaves", script, runtime=runtime, prestart=True)
    async with _gateway(tmp_path / "tools") as gateway:
        outcome = await gateway.call("local:leaves", {})
        assert outcome.status is CallStatus.OK, outcome.message
        assert outcome.metadata["process"] == "prestarted"
        assert await asyncio.to_thread(all_gone, [int(pid_file.read_text())])


@pytest.mark.parametrize("runtime", ["python", pytest.param("node", marks=needs_node)])
async def test_the_timeout_still_kills_the_whole_tree(tmp_path: Path, runtime: str) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = {
        "python": f"""import subprocess, sys, time
sys.stdin.read()
child = subprocess.Popen(["sleep", "300"], start_new_session=True)
open({str(pid_file)!r}, "w").write(str(child.pid))
time.sleep(300)
""",
        "node": f"""const cp=require('child_process'),fs=require('fs');
process.stdin.resume();process.stdin.on('end',()=>{{
const c=cp.spawn('sleep',['300'],{{detached:true,stdio:'ignore'}});
fs.writeFileSync({json.dumps(str(pid_file))},String(c.pid));setTimeout(()=>{{}},300000)}});
""",
    }[runtime]
    write_tool(tmp_path / "tools", "hangs", script, runtime=runtime, prestart=True, timeout=1500)
    async with _gateway(tmp_path / "tools") as gateway:
        outcome = await gateway.call("local:hangs", {})
    assert outcome.status is CallStatus.ERROR and outcome.code is ErrorCode.TIMEOUT
    assert outcome.metadata["process"] == "prestarted"
    assert await asyncio.to_thread(all_gone, [int(pid_file.read_text())])


@pytest.mark.parametrize("runtime", ["python", pytest.param("node", marks=needs_node)])
async def test_concurrent_calls_each_get_their_own_answer(tmp_path: Path, runtime: str) -> None:
    script = {
        "python": "import json, os, sys\nr = json.load(sys.stdin)\n"
        "print(json.dumps({'n': r['n'], 'pid': os.getpid()}))\n",
        "node": "let d='';process.stdin.on('data',c=>d+=c);process.stdin.on('end',()=>"
        "console.log(JSON.stringify({n:JSON.parse(d).n,pid:process.pid})));\n",
    }[runtime]
    write_tool(
        tmp_path,
        "echo",
        script,
        runtime=runtime,
        prestart=True,
        inputSchema={"type": "object", "properties": {"n": {"type": "integer"}}},
    )
    async with _gateway(tmp_path, per_tool=3) as gateway:
        outcomes = await asyncio.gather(*(gateway.call("local:echo", {"n": n}) for n in range(8)))
    assert [o.content["n"] for o in outcomes] == list(range(8)), [o.message for o in outcomes]
    assert len({o.content["pid"] for o in outcomes}) == 8  # one process per call
    assert any(o.metadata.get("process") == "prestarted" for o in outcomes)


async def test_fast_exit_can_be_turned_off(tmp_path: Path) -> None:
    script = (
        "import json, sys\njson.load(sys.stdin)\n"
        "print(json.dumps({'cmdline': open('/proc/self/cmdline', 'rb').read().decode()}))\n"
    )
    write_tool(tmp_path, "cmd", script, runtime="python", prestart=True)
    async with _gateway(tmp_path) as gateway:
        shimmed = await gateway.call("local:cmd", {})
    async with _gateway(tmp_path, fast_exit=False) as gateway:
        plain = await gateway.call("local:cmd", {})
    assert shimmed.metadata["process"] == plain.metadata["process"] == "prestarted"
    assert "prestart_python.py" in shimmed.content["cmdline"]
    assert "prestart_python.py" not in plain.content["cmdline"]


async def test_the_runner_takes_a_valid_status_and_ignores_anything_else(tmp_path: Path) -> None:
    async def run(line: str) -> tuple[int | None, int | None]:
        # Reports `line`, closes its output, then dies by SIGKILL as the node shim does.
        script = f'printf "{line}" >&"${STATUS_ENV}"; exec >&- 2>&-; kill -9 $$'
        result = await run_process(
            ["bash", "-c", script],
            stdin=b"",
            env=clean_environ(),
            cwd=tmp_path,
            timeout=10,
            status=True,
        )
        return result.exit_code, result.signal

    assert await run("7\\n") == (7, None)
    assert await run("0\\n") == (0, None)
    for bad in ("x\\n", "1234\\n", "7", "7 \\n", "-1\\n"):
        assert await run(bad) == (None, 9), bad
    # Without the flag there is no status pipe at all.
    plain = await run_process(
        ["bash", "-c", f'test -z "${{{STATUS_ENV}:-}}"'],
        stdin=b"",
        env={**clean_environ(), **{k: v for k, v in os.environ.items() if k == "PATH"}},
        cwd=tmp_path,
        timeout=10,
    )
    assert plain.exit_code == 0
