"""Script tools from tool folders, run through the gateway: runtimes, protocol, errors, env."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from folder_tools import (
    WORD_COUNT_SCRIPT_TS,
    WORD_COUNT_TOOL_MD,
    clean_environ,
    gone,
    require_program,
    write_tool,
)
from gateway_support import gateway_with
from toolgate import ErrorCode, Gateway, SideEffect
from toolgate.backends.prestart import PrestartSettings

WORD_COUNT_PY = """import json, sys
data = json.load(sys.stdin)
try:
    content = open(data["path"], encoding="utf-8").read()
except OSError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"words": len(content.split()), "lines": len(content.split("\\n")),
                      "characters": len(content)}))
"""


#: How the module's gateways start processes (set per test by ``process_start``).
_PRESTART_ALL: list[bool] = [False]


@pytest.fixture(autouse=True, params=["fresh", "prestarted"])
def process_start(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every test runs twice: with a fresh process per call, and with the processes of every
    tool started ahead of its calls, which must change nothing a Jean2 tool folder can see."""
    _PRESTART_ALL[0] = request.param == "prestarted"
    yield request.param
    _PRESTART_ALL[0] = False


def gateway_for(root: Path, **options: Any) -> Gateway:
    options.setdefault("environ", clean_environ())
    if not _PRESTART_ALL[0]:
        return gateway_with(tool_folders=[root], **options)
    options.setdefault("prestart", PrestartSettings(tools=frozenset({"*"})))
    gateway = gateway_with(tool_folders=[root], **options)
    gateway.prestart_processes()
    return gateway


@pytest.fixture
def tools_root(tmp_path: Path) -> Path:
    root = tmp_path / "tools"
    root.mkdir()
    return root


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    path = tmp_path / "sample.txt"
    path.write_text("one two three\nfour five\n", encoding="utf-8")
    return path


# -- the seed's own example ------------------------------------------------------------------------


def test_the_seed_word_count_example_runs_unchanged_with_bun(
    tools_root: Path, sample: Path
) -> None:
    require_program("bun")
    folder = tools_root / "word-count"
    folder.mkdir()
    (folder / "tool.md").write_text(WORD_COUNT_TOOL_MD, encoding="utf-8")
    (folder / "script.ts").write_text(WORD_COUNT_SCRIPT_TS, encoding="utf-8")
    with gateway_for(tools_root) as gateway:
        assert gateway.diagnostics() == []
        tool = gateway.get_tool("local:word-count")
        assert tool.timeout == 10.0 and tool.description == (
            "Count words, lines, and characters in a file."
        )
        outcome = gateway.call_sync("local:word-count", {"path": str(sample)})
        assert outcome.ok, outcome.message
        assert outcome.content == {"words": 5, "lines": 3, "characters": 24}
        missing = gateway.call_sync("local:word-count", {"path": str(sample) + ".nope"})
        assert missing.code is ErrorCode.TOOL_ERROR and "no such file" in (missing.message or "")


def test_the_seed_word_count_with_a_python_script(tools_root: Path, sample: Path) -> None:
    folder = tools_root / "word-count"
    folder.mkdir()
    (folder / "tool.md").write_text(
        WORD_COUNT_TOOL_MD.replace("script.ts", "script.py").replace(
            "runtime: bun", "runtime: python"
        ),
        encoding="utf-8",
    )
    (folder / "script.py").write_text(WORD_COUNT_PY, encoding="utf-8")
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:word-count", {"path": str(sample)})
    assert outcome.content == {"words": 5, "lines": 3, "characters": 24}


# -- every runtime ---------------------------------------------------------------------------------

ECHO_SCRIPTS = {
    "python": "import json,sys\nd=json.load(sys.stdin)\nprint(json.dumps({'echo': d['word']}))\n",
    "bash": 'read -r -d "" input\n'
    'word=$(printf %s "$input" | sed -E \'s/.*"word": *"([a-z]*)".*/\\1/\')\n'
    'printf \'{"echo": "%s"}\\n\' "$word"\n',
    "node": "let s='';process.stdin.on('data',c=>s+=c).on('end',()=>{"
    "console.log(JSON.stringify({echo: JSON.parse(s).word}))});\n",
    "bun": "const d = JSON.parse(await Bun.stdin.text());\n"
    "console.log(JSON.stringify({echo: d.word}));\n",
    "go": 'package main\nimport ("encoding/json";"os")\nfunc main(){var d map[string]any\n'
    "json.NewDecoder(os.Stdin).Decode(&d)\n"
    'json.NewEncoder(os.Stdout).Encode(map[string]any{"echo": d["word"]})}\n',
}
PROGRAMS = {"python": "python3", "bash": "bash", "node": "node", "bun": "bun", "go": "go"}


@pytest.mark.slow
@pytest.mark.parametrize("runtime", sorted(ECHO_SCRIPTS))
def test_each_runtime_round_trips_json(tools_root: Path, runtime: str) -> None:
    require_program(PROGRAMS[runtime])
    write_tool(
        tools_root, f"echo-{runtime}", ECHO_SCRIPTS[runtime], runtime=runtime, timeout=120000
    )
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync(f"local:echo-{runtime}", {"word": "hello"})
    assert outcome.ok, outcome.message
    assert outcome.content == {"echo": "hello"}


def test_binary_runtime_runs_an_executable_directly(tools_root: Path, tmp_path: Path) -> None:
    shebang = '#!/usr/bin/env bash\ncat >/dev/null\necho \'{"kind": "shebang"}\'\n'
    write_tool(tools_root, "shebang", shebang, runtime="binary", executable=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is not None:
        source = tmp_path / "tool.c"
        source.write_text(
            "#include <stdio.h>\nint main(void){int c; while((c=getchar())!=EOF){}"
            'puts("{\\"kind\\": \\"compiled\\"}"); return 0;}\n',
            encoding="utf-8",
        )
        folder = write_tool(tools_root, "compiled", "", runtime="binary", script_name="tool")
        subprocess.run([cc, str(source), "-o", str(folder / "tool")], check=True)
    with gateway_for(tools_root) as gateway:
        assert gateway.call_sync("local:shebang").content == {"kind": "shebang"}
        if cc is not None:
            assert gateway.call_sync("local:compiled").content == {"kind": "compiled"}


def test_a_binary_that_is_not_executable_is_unavailable(tools_root: Path) -> None:
    write_tool(tools_root, "noexec", "#!/bin/sh\necho '{}'\n", runtime="binary")
    with gateway_for(tools_root) as gateway:
        [entry] = gateway.entries()
        assert not entry.available and "chmod +x" in (entry.unavailable_reason or "")
        assert gateway.call_sync("local:noexec").code is ErrorCode.UNAVAILABLE


def test_powershell_runtime(tools_root: Path) -> None:
    require_program("pwsh")  # not packaged for Debian; skipped where it is missing
    script = (
        "$in = [Console]::In.ReadToEnd() | ConvertFrom-Json\n"
        "@{echo=$in.word} | ConvertTo-Json -Compress\n"
    )
    write_tool(tools_root, "ps", script, runtime="powershell", script_name="script.ps1")
    with gateway_for(tools_root) as gateway:
        assert gateway.call_sync("local:ps", {"word": "hi"}).content == {"echo": "hi"}


def test_a_missing_runtime_makes_the_tool_unavailable_not_broken(
    tools_root: Path, tmp_path: Path
) -> None:
    write_tool(tools_root, "needs-bun", "console.log('{}')", runtime="bun")
    write_tool(tools_root, "fine", "cat >/dev/null; echo '{\"ok\": true}'")
    # A PATH that has bash and cat but no bun, whatever this machine has installed.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for program in ("bash", "cat"):
        (bin_dir / program).symlink_to(require_program(program))
    environ = clean_environ(PATH=str(bin_dir))
    with gateway_for(tools_root, environ=environ) as gateway:
        entries = {entry.tool.id: entry for entry in gateway.entries()}
        reason = entries["local:needs-bun"].unavailable_reason or ""
        assert "runtime 'bun' is not installed" in reason and "PATH" in reason
        outcome = gateway.call_sync("local:needs-bun")
        assert outcome.code is ErrorCode.UNAVAILABLE and "bun" in (outcome.message or "")
        assert gateway.call_sync("local:fine").content == {"ok": True}


# -- the execution protocol ------------------------------------------------------------------------


def test_stdin_carries_arguments_workspace_and_session_and_cwd_is_the_workspace(
    tools_root: Path, tmp_path: Path
) -> None:
    script = (
        "import json,os,sys\nd=json.load(sys.stdin)\n"
        "print(json.dumps({'input': d, 'cwd': os.getcwd()}))\n"
    )
    write_tool(tools_root, "inspect", script, runtime="python")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync(
            "local:inspect", {"x": 1}, workspace=workspace, session_id="abc123"
        )
    assert outcome.content == {
        "input": {"x": 1, "workspacePath": str(workspace), "sessionId": "abc123"},
        "cwd": str(workspace),
    }


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("cat >/dev/null; echo 'not json at all'", "not a JSON object: 'not json at all'"),
        ("cat >/dev/null; echo '[1, 2]'", "not a JSON object: '[1, 2]'"),
        ("cat >/dev/null", "printed nothing"),
        ('cat >/dev/null; echo \'{"error": "File not found"}\'', "File not found"),
        (
            "cat >/dev/null; echo 'boom: disk on fire' >&2; exit 3",
            "exited with code 3: boom: disk on fire",
        ),
        (
            'cat >/dev/null; echo \'{"error": "quota"}\'; exit 4',
            "quota (tool local:t exited with code 4)",
        ),
        ("cat >/dev/null; kill -9 $$", "killed by signal 9"),
    ],
)
def test_script_failures_are_tool_errors_with_a_useful_message(
    tools_root: Path, script: str, expected: str
) -> None:
    write_tool(tools_root, "t", script)
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:t")
    assert outcome.code is ErrorCode.TOOL_ERROR
    assert expected in (outcome.message or "")


def test_the_stderr_tail_is_bounded(tools_root: Path) -> None:
    write_tool(
        tools_root, "noisy", "cat >/dev/null; head -c 100000 /dev/zero | tr '\\0' x >&2; exit 1"
    )
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:noisy")
    assert outcome.code is ErrorCode.TOOL_ERROR
    assert len(outcome.message or "") < 3_000


def test_invalid_arguments_never_reach_the_script(tools_root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    write_tool(
        tools_root,
        "strict",
        f"cat >/dev/null; touch {marker}; echo '{{}}'",
        inputSchema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:strict", {"n": "x"})
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS and "/n" in (outcome.message or "")
    assert not marker.exists()


def test_output_schema_is_enforced_for_scripts(tools_root: Path) -> None:
    write_tool(
        tools_root,
        "typed",
        'cat >/dev/null; echo \'{"words": "many"}\'',
        outputSchema={"type": "object", "properties": {"words": {"type": "number"}}},
    )
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:typed")
    assert outcome.code is ErrorCode.INVALID_OUTPUT and "/words" in (outcome.message or "")


def test_visualization_and_overflow_apply_to_script_results(
    tools_root: Path, tmp_path: Path
) -> None:
    script = (
        "import json,sys\nd=json.load(sys.stdin)\n"
        "print(json.dumps({'text': 'x' * d['n'], '_visualization': "
        "{'type': 'shell-output', 'command': 'make', 'stdout': 'ok', 'exitCode': 0}}))\n"
    )
    write_tool(tools_root, "viz", script, runtime="python")
    with gateway_for(tools_root, spill_dir=tmp_path / "spill") as gateway:
        small = gateway.call_sync("local:viz", {"n": 3})
        large = gateway.call_sync("local:viz", {"n": 60_000}, session_id="s")
    assert small.content == {"text": "xxx"}
    assert small.visualization == {
        "type": "shell-output",
        "command": "make",
        "stdout": "ok",
        "stderr": "",
        "exitCode": 0,
    }
    assert large.overflow is not None and large.overflow.original_size > 60_000
    assert '"_visualization"' not in large.text


def test_folder_declarations_map_onto_the_model(tools_root: Path) -> None:
    write_tool(
        tools_root, "risky", "cat >/dev/null; echo '{}'", dangerous=True, requireApproval=False
    )
    with gateway_for(tools_root) as gateway:
        tool = gateway.get_tool("local:risky")
    assert tool.side_effect is SideEffect.CODE_EXECUTION and tool.display.dangerous
    assert tool.requires_approval is False
    assert tool.timeout == 30.0  # the seed's default 30000 ms


# -- process control -------------------------------------------------------------------------------


@pytest.mark.slow
def test_timeout_kills_the_whole_tree_including_a_setsid_grandchild(
    tools_root: Path, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    script = (
        "cat >/dev/null\n"
        f"setsid sleep 300 & echo $! >> {pids}\n"
        f"( setsid sleep 301 & echo $! >> {pids} ) &\n"
        "sleep 300\n"
    )
    write_tool(tools_root, "hang", script, timeout=500)
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:hang")
        assert outcome.code is ErrorCode.TIMEOUT
        children = [int(line) for line in pids.read_text().split()]
        assert len(children) == 2
        deadline = time.monotonic() + 5
        while not all(gone(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(gone(pid) for pid in children), children
        # The gateway keeps serving.
        write_tool(tools_root, "next", "cat >/dev/null; echo '{\"ok\": 1}'")
        gateway.rescan()
        assert gateway.call_sync("local:next").content == {"ok": 1}


def test_output_over_the_cap_stops_the_script(tools_root: Path) -> None:
    write_tool(tools_root, "flood", "cat >/dev/null; yes '{\"a\": 1}'")
    with gateway_for(tools_root, script_max_output=64 * 1024) as gateway:
        outcome = gateway.call_sync("local:flood")
    assert outcome.code is ErrorCode.TOOL_ERROR
    assert "more than 65,536 bytes to stdout" in (outcome.message or "")


@pytest.mark.slow
async def test_scripts_run_side_by_side_and_the_per_tool_cap_holds(
    tools_root: Path, tmp_path: Path
) -> None:
    log = tmp_path / "log"
    script = f"cat >/dev/null; echo start >> {log}; sleep 0.3; echo end >> {log}; echo '{{}}'"
    write_tool(tools_root, "slow", script)

    def max_overlap() -> int:
        depth = peak = 0
        for line in log.read_text().split():
            depth += 1 if line == "start" else -1
            peak = max(peak, depth)
        return peak

    async with gateway_for(tools_root) as gateway:
        outcomes = await asyncio.gather(*(gateway.call("local:slow") for _ in range(8)))
    assert all(o.ok for o in outcomes)
    assert max_overlap() > 1  # not serialized
    log.unlink()
    async with gateway_for(tools_root, script_concurrency=2) as gateway:
        outcomes = await asyncio.gather(*(gateway.call("local:slow") for _ in range(6)))
    assert all(o.ok for o in outcomes)
    assert max_overlap() <= 2


# -- environment -----------------------------------------------------------------------------------

ENV_SCRIPT = "import json,os,sys\nsys.stdin.read()\nprint(json.dumps(dict(os.environ)))\n"


def test_scripts_never_inherit_the_gateway_environment(tools_root: Path, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text(
        "MY_TOOL_CACHE_DIR=/data/cache\nOTHER_TOOL_TOKEN=sk-other\nBAD_FUNC=() { :; }; echo x\n",
        encoding="utf-8",
    )
    write_tool(
        tools_root, "declared", ENV_SCRIPT, runtime="python", env=["MY_TOOL_CACHE_DIR", "BAD_FUNC"]
    )
    write_tool(tools_root, "none", ENV_SCRIPT, runtime="python")
    write_tool(tools_root, "empty", ENV_SCRIPT, runtime="python", env=[])
    environ = clean_environ(AWS_SECRET_ACCESS_KEY="gateway-secret", OPENAI_API_KEY="sk-gw")
    with gateway_for(tools_root, environ=environ, env_file=env_file) as gateway:
        declared = gateway.call_sync("local:declared").content
        undeclared = gateway.call_sync("local:none").content
        empty = gateway.call_sync("local:empty").content
    for seen in (declared, undeclared, empty):
        assert "AWS_SECRET_ACCESS_KEY" not in seen and "OPENAI_API_KEY" not in seen
        assert "OTHER_TOOL_TOKEN" not in seen
        assert "BAD_FUNC" not in seen  # values starting with "()" are refused
        assert seen["PATH"] == environ["PATH"]
    assert declared["MY_TOOL_CACHE_DIR"] == "/data/cache"
    assert "MY_TOOL_CACHE_DIR" not in undeclared and "MY_TOOL_CACHE_DIR" not in empty
    # PYTHONNOUSERSITE is toolgate's own setting for Python tools (no user site-packages).
    assert set(empty) <= {
        "PATH",
        "HOME",
        "LANG",
        "TMPDIR",
        "LC_CTYPE",
        "PWD",
        "SHLVL",
        "_",
        "PYTHONNOUSERSITE",
    }


def test_the_operator_may_allow_declared_names_from_the_process_environment(
    tools_root: Path,
) -> None:
    write_tool(tools_root, "gh", ENV_SCRIPT, runtime="python", env=["GITHUB_TOKEN", "OTHER"])
    environ = clean_environ(GITHUB_TOKEN="ghp_x", OTHER="o")
    with gateway_for(tools_root, environ=environ, env_from_process=["GITHUB_TOKEN"]) as gateway:
        seen = gateway.call_sync("local:gh").content
    # The tool got the token; its caller sees it masked (a credential never reaches the model).
    assert seen["GITHUB_TOKEN"] == "[REDACTED]" and "OTHER" not in seen


def test_the_env_file_is_reread_when_it_changes(tools_root: Path, tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("MODE=one\n", encoding="utf-8")
    write_tool(tools_root, "mode", ENV_SCRIPT, runtime="python", env=["MODE"])
    with gateway_for(tools_root, env_file=env_file) as gateway:
        assert gateway.call_sync("local:mode").content["MODE"] == "one"
        env_file.write_text("MODE=two\n", encoding="utf-8")
        os.utime(env_file, (time.time() + 5, time.time() + 5))
        assert gateway.call_sync("local:mode").content["MODE"] == "two"


def test_python_runtime_is_python3(tools_root: Path) -> None:
    script = "import json,sys\nsys.stdin.read()\nprint(json.dumps({'major': sys.version_info[0]}))"
    write_tool(tools_root, "which", script, runtime="python")
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:which")
    assert outcome.content == {"major": 3}


# -- review findings -------------------------------------------------------------------------------


def test_require_approval_denies_while_no_approver_is_configured(
    tools_root: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    write_tool(
        tools_root, "ask", f"cat >/dev/null; touch {marker}; echo '{{}}'", requireApproval=True
    )
    write_tool(tools_root, "risky", f"cat >/dev/null; touch {marker}; echo '{{}}'", dangerous=True)
    with gateway_for(tools_root) as gateway:
        for tool_id in ("local:ask", "local:risky"):
            outcome = gateway.call_sync(tool_id)
            assert outcome.code is ErrorCode.USER_REJECTION
            assert "no approver is configured" in (outcome.message or "")
    assert not marker.exists()


@pytest.mark.parametrize(
    ("error", "fails"),
    [(None, False), (False, False), ("", False), (0, True), ("boom", True), ({"c": 1}, True)],
)
def test_which_error_values_mean_an_error(tools_root: Path, error: Any, fails: bool) -> None:
    payload = json.dumps({"result": 1, "error": error})
    write_tool(tools_root, "err", f"cat >/dev/null; echo '{payload}'")
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:err")
    assert (outcome.code is ErrorCode.TOOL_ERROR) is fails


def test_a_huge_error_value_is_cut(tools_root: Path) -> None:
    script = "import json,sys\nsys.stdin.read()\nprint(json.dumps({'error': 'x' * 3_000_000}))\n"
    write_tool(tools_root, "err", script, runtime="python")
    with gateway_for(tools_root) as gateway:
        outcome = gateway.call_sync("local:err")
    assert outcome.code is ErrorCode.TOOL_ERROR
    assert len(outcome.message or "") < 3_000 and "characters, cut" in (outcome.message or "")


@pytest.mark.slow
async def test_the_concurrency_cap_works_from_sync_and_async_callers_at_once(
    tools_root: Path,
) -> None:
    write_tool(tools_root, "one", "cat >/dev/null; sleep 0.1; echo '{\"ok\": 1}'")
    async with gateway_for(tools_root, script_concurrency=1) as gateway:
        threaded = [asyncio.to_thread(gateway.call_sync, "local:one") for _ in range(3)]
        direct = [gateway.call("local:one") for _ in range(3)]
        outcomes = await asyncio.gather(*threaded, *direct)
    assert [o.content for o in outcomes] == [{"ok": 1}] * 6
