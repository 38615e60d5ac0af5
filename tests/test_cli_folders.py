"""Tool folders from the command line: ``tools new / validate / install / remove``, diagnostics in
``tools list``, the ``tool_folders:`` and ``scripts:`` config sections, and the demo tool folders.

Every test runs the real console script (see ``conftest.py``) and real script processes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import TOOLGATE, RunCli
from folder_tools import require_program, write_tool

pytestmark = pytest.mark.slow

GREET_PY = """\
import json, sys
request = json.load(sys.stdin)
print(json.dumps({"message": "Hi " + request["name"] + " from VERSION"}))
"""

GREET_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def _greeter(root: Path, name: str = "shout", version: str = "v1") -> Path:
    return write_tool(
        root,
        name,
        GREET_PY.replace("VERSION", version),
        runtime="python",
        inputSchema=GREET_SCHEMA,
        requireApproval=False,
    )


def _broken(root: Path, name: str = "broken") -> Path:
    return write_tool(root, name, "echo {}", runtime="rubyy")


# -- help ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "install", "remove", "new"])
def test_every_folder_command_has_help(run_cli: RunCli, command: str) -> None:
    out = _ok(run_cli("tools", command, "--help"))
    assert "Usage: toolgate tools" in out
    assert "Exit codes" in out


# -- tools new ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "program"),
    [("python", "python3"), ("bash", "bash"), ("node", "node"), ("binary", "bash")],
)
def test_new_tool_validates_and_runs(
    run_cli: RunCli, toolgate_home: Path, runtime: str, program: str
) -> None:
    require_program(program)
    name = f"greet-{runtime}"
    created = _ok(run_cli("tools", "new", name, "--runtime", runtime))
    folder = toolgate_home / "tools" / name
    assert f"Created {folder} ({runtime})" in created
    assert (folder / "tool.md").is_file() and (folder / "test-input.json").is_file()
    if runtime == "binary":
        assert os.access(folder / "script", os.X_OK)

    # Named from its parent folder: its absolute path under a long temporary folder (a parallel
    # run's is longer) would wrap the line at the piped width of 120 columns.
    validated = run_cli("tools", "validate", name, cwd=folder.parent)
    assert f"loads as local:{name}" in _ok(validated)
    assert "error:" not in validated.stdout and "warning:" not in validated.stdout

    greeting = _ok(run_cli("call", f"local:{name}", "--args", '{"name": "Ada"}'))
    assert json.loads(greeting.splitlines()[0]) == {"message": "Hello, Ada!"}
    sample = _ok(run_cli("call", f"local:{name}", "--args", f"@{folder / 'test-input.json'}"))
    assert "Hello, Ada!" in sample


@pytest.mark.parametrize("runtime", ["bun", "go", "powershell"])
def test_new_tool_loads_for_every_runtime(run_cli: RunCli, project: Path, runtime: str) -> None:
    _ok(run_cli("tools", "new", "hello", "--runtime", runtime, "--dir", "dev"))
    result = run_cli("tools", "validate", "dev/hello")
    assert "loads as local:hello" in _ok(result)
    # A runtime missing here is a warning, never an error.
    assert "error:" not in result.stdout


def test_new_refuses_an_existing_folder_and_bad_input(run_cli: RunCli, project: Path) -> None:
    _ok(run_cli("tools", "new", "twice", "--dir", "dev"))
    again = run_cli("tools", "new", "twice", "--dir", "dev")
    assert again.returncode == 1
    assert "already exists" in again.stderr

    for name in ("../escape", "a/b", ".hidden", "has space"):
        bad = run_cli("tools", "new", name, "--dir", "dev")
        assert bad.returncode == 2, name
        assert "NAME" in bad.stderr
    assert not (project / "escape").exists()

    unknown = run_cli("tools", "new", "x", "--runtime", "ruby")
    assert unknown.returncode == 2
    assert "--runtime must be one of python, node" in unknown.stderr


# -- tools validate -----------------------------------------------------------------------------


def test_validate_reports_each_problem_with_file_and_field(run_cli: RunCli, project: Path) -> None:
    folder = _broken(project)
    result = run_cli("tools", "validate", str(folder))
    assert result.returncode == 1
    assert "does not load" in result.stdout
    assert f"error: {folder / 'tool.md'}: runtime: unknown runtime 'rubyy'" in result.stdout
    assert "does not load (1 error above)" in result.stderr

    not_a_folder = run_cli("tools", "validate", str(folder / "tool.md"))
    assert not_a_folder.returncode == 2
    assert "is not a folder" in not_a_folder.stderr
    assert run_cli("tools", "validate", "nowhere").returncode == 2


def test_validate_warns_when_the_runtime_is_not_installed(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    folder = _greeter(project)
    empty_path = tmp_path / "empty-bin"
    empty_path.mkdir()
    env = {"PATH": str(empty_path), "TOOLGATE_HOME": str(toolgate_home)}
    result = subprocess.run(
        [str(TOOLGATE), "tools", "validate", str(folder)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "loads as local:shout" in result.stdout
    assert re.search(
        r"warning: .*tool\.md: runtime: runtime 'python' is not installed: 'python3' was not "
        r"found on PATH",
        result.stdout,
    )


# -- tools install / remove ---------------------------------------------------------------------


def test_install_list_call_remove(run_cli: RunCli, project: Path, toolgate_home: Path) -> None:
    source = _greeter(project / "src")
    installed = _ok(run_cli("tools", "install", str(source)))
    assert "Installed local:shout" in installed
    assert "available now" in installed
    copy = toolgate_home / "tools" / "shout"
    assert (copy / "tool.md").is_file() and (copy / "script.py").is_file()

    listed = _ok(run_cli("tools", "list"))
    assert re.search(r"(?m)^local:shout\s+shout\s+local_write\s+no\s+script\s+tool-folder", listed)
    call = _ok(run_cli("call", "local:shout", "--args", '{"name": "Ada"}'))
    assert json.loads(call.splitlines()[0]) == {"message": "Hi Ada from v1"}

    removed = _ok(run_cli("tools", "remove", "shout"))
    assert f"Removed local:shout (deleted {copy})" in removed
    assert not copy.exists()
    assert source.is_dir()  # the original is untouched
    assert "local:shout" not in _ok(run_cli("tools", "list"))
    gone = run_cli("call", "local:shout", "--args", '{"name": "Ada"}')
    assert gone.returncode == 1 and "tool_not_found" in gone.stderr


def test_install_refuses_a_broken_folder(
    run_cli: RunCli, project: Path, toolgate_home: Path
) -> None:
    folder = _broken(project)
    result = run_cli("tools", "install", str(folder))
    assert result.returncode == 1
    assert f"{folder / 'tool.md'}: runtime: unknown runtime 'rubyy'" in result.stderr
    assert "nothing was installed" in result.stderr
    assert not (toolgate_home / "tools" / "broken").exists()


def test_install_refuses_to_overwrite_without_force(
    run_cli: RunCli, project: Path, toolgate_home: Path
) -> None:
    _ok(run_cli("tools", "install", str(_greeter(project / "one", version="v1"))))
    second = _greeter(project / "two", version="v2")
    refused = run_cli("tools", "install", str(second))
    assert refused.returncode == 1
    assert "local:shout is already installed" in refused.stderr and "--force" in refused.stderr
    assert "from v1" in _ok(run_cli("call", "local:shout", "--args", '{"name": "A"}'))

    _ok(run_cli("tools", "install", str(second), "--force"))
    assert "from v2" in _ok(run_cli("call", "local:shout", "--args", '{"name": "A"}'))
    leftovers = [p.name for p in (toolgate_home / "tools").iterdir() if p.name != "shout"]
    assert leftovers == []


def test_install_refuses_symlinks_pointing_outside(
    run_cli: RunCli, project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    folder = _greeter(project)
    secret = tmp_path / "secret.txt"
    secret.write_text("not for tools", encoding="utf-8")
    (folder / "data.txt").symlink_to(secret)
    result = run_cli("tools", "install", str(folder))
    assert result.returncode == 1
    assert "symlinks that point outside the folder" in result.stderr
    assert "data.txt" in result.stderr
    assert not (toolgate_home / "tools" / "shout").exists()

    # A link that stays inside the folder is copied as a link.
    (folder / "data.txt").unlink()
    (folder / "notes.txt").write_text("notes", encoding="utf-8")
    (folder / "data.txt").symlink_to("notes.txt")
    _ok(run_cli("tools", "install", str(folder)))
    copied = toolgate_home / "tools" / "shout" / "data.txt"
    assert copied.is_symlink() and copied.read_text(encoding="utf-8") == "notes"


def test_remove_refuses_paths_and_missing_tools(
    run_cli: RunCli, project: Path, toolgate_home: Path
) -> None:
    (toolgate_home / "tools").mkdir()
    (toolgate_home / "x").mkdir()
    for name in ("../x", "a/b", "..", ".hidden"):
        result = run_cli("tools", "remove", name)
        assert result.returncode == 2, name
        assert "cannot be a folder name" in result.stderr
    assert (toolgate_home / "x").is_dir()

    missing = run_cli("tools", "remove", "nothing")
    assert missing.returncode == 1
    assert "no tool folder named 'nothing'" in missing.stderr

    _ok(run_cli("tools", "install", str(_greeter(project))))
    assert "Removed local:shout" in _ok(run_cli("tools", "remove", "local:shout"))


# -- tools list ---------------------------------------------------------------------------------


def test_list_shows_diagnostics_while_other_tools_load(
    run_cli: RunCli, toolgate_home: Path
) -> None:
    tools = toolgate_home / "tools"
    _greeter(tools)
    broken = _broken(tools)
    out = _ok(run_cli("tools", "list"))
    assert re.search(r"(?m)^local:shout\s", out)
    assert "local:broken" not in out
    assert "1 problem in declarations:" in out
    assert f"error: {broken / 'tool.md'}: runtime: unknown runtime 'rubyy'" in out

    as_json = run_cli("tools", "list", "--json")
    rows = json.loads(_ok(as_json))
    assert [row["id"] for row in rows] == ["local:shout"]
    assert f"error: {broken / 'tool.md'}: runtime:" in as_json.stderr


def test_list_prints_long_unavailable_reasons_whole(run_cli: RunCli, toolgate_home: Path) -> None:
    write_tool(toolgate_home / "tools", "rigid", "#!/bin/sh\necho '{}'\n", runtime="binary")
    out = _ok(run_cli("tools", "list"))
    assert re.search(r"(?m)^local:rigid\s.*unavailable \(see below\)", out)
    assert (
        "local:rigid is unavailable: the script script is not executable; runtime 'binary' runs "
        "it directly (chmod +x script)" in out
    )


# -- configuration ------------------------------------------------------------------------------

ENV_PY = """\
import json, os, sys
json.load(sys.stdin)
print(json.dumps({"greeting": os.environ.get("GREETING"), "other": os.environ.get("OTHER")}))
"""

LOUD_PY = """\
import json, sys
json.load(sys.stdin)
print(json.dumps({"text": "x" * 5000}))
"""


def test_config_tool_folders_and_scripts_reach_the_gateway(
    run_cli: RunCli, project: Path, toolgate_home: Path
) -> None:
    write_tool(
        project / "team-tools",
        "env-check",
        ENV_PY,
        runtime="python",
        env=["GREETING", "OTHER"],
        requireApproval=False,
    )
    write_tool(project / "more", "loud", LOUD_PY, runtime="python", requireApproval=False)
    _greeter(toolgate_home / "tools")
    (toolgate_home / ".env").write_text("GREETING=from-dotenv\n", encoding="utf-8")
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n"
        "  - ./more\n"
        "  - path: ./team-tools\n"
        "    namespace: team\n"
        "scripts:\n"
        "  max_output: 1000\n"
        "  concurrency: 2\n",
        encoding="utf-8",
    )
    listed = _ok(run_cli("tools", "list"))
    for tool_id in ("local:shout", "local:loud", "team:env-check"):
        assert re.search(rf"(?m)^{tool_id}\s", listed), tool_id

    env = json.loads(_ok(run_cli("call", "team:env-check")).splitlines()[0])
    assert env == {"greeting": "from-dotenv", "other": None}
    loud = run_cli("call", "local:loud")
    assert loud.returncode == 1
    assert "more than 1,000 bytes" in loud.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scripts:\n  max_ouput: 5\n", "toolgate.yaml: scripts.max_ouput: unknown key"),
        (
            "tool_folders:\n  - path: ./x\n    namspace: y\n",
            "toolgate.yaml: tool_folders[0].namspace: unknown key",
        ),
        ("tool_folders: [./missing]\n", "toolgate.yaml: tool_folders[0]: no such folder: "),
        (
            "scripts: {env_from_process: SECRET}\n",
            "toolgate.yaml: scripts.env_from_process: must be a list of variable names",
        ),
    ],
)
def test_config_errors_name_the_field(
    run_cli: RunCli, project: Path, text: str, message: str
) -> None:
    (project / "toolgate.yaml").write_text(text, encoding="utf-8")
    result = run_cli("tools", "list")
    assert result.returncode == 3
    assert message in result.stderr
    assert "Traceback" not in result.stderr


# -- the demo tool folders ----------------------------------------------------------------------


def _call_json(run_cli: RunCli, tool_id: str, args: dict[str, Any]) -> Any:
    out = _ok(run_cli("call", tool_id, "--json", "--args", json.dumps(args)))
    return json.loads(out)


def test_demo_tool_folders_run(run_cli: RunCli, project: Path) -> None:
    require_program("python3")
    (project / "toolgate.yaml").write_text("demo: true\n", encoding="utf-8")
    (project / "essay.txt").write_text("one two three\nfour five\n", encoding="utf-8")
    (project / "essay-v2.txt").write_text("one two three\nfour five six\n", encoding="utf-8")

    listed = _ok(run_cli("tools", "list"))
    for tool_id in ("demo:word_count", "demo:file_diff", "demo:system_info", "demo:add"):
        assert re.search(rf"(?m)^{tool_id}\s.*available", listed), tool_id
    assert "problem" not in listed  # the demo folders load without any diagnostic

    counted = _call_json(run_cli, "demo:word_count", {"path": "essay.txt"})
    assert counted["content"] == {"path": "essay.txt", "words": 5, "lines": 2, "characters": 24}
    assert counted["visualization"] == {"type": "none", "message": "Counted 5 words in essay.txt."}
    missing = run_cli("call", "demo:word_count", "--args", '{"path": "nope.txt"}')
    assert missing.returncode == 1
    assert "error [tool_error]: no such file: nope.txt" in missing.stderr

    diffed = _call_json(
        run_cli, "demo:file_diff", {"oldPath": "essay.txt", "newPath": "essay-v2.txt"}
    )
    assert diffed["content"]["additions"] == 1 and diffed["content"]["deletions"] == 1
    hunk = diffed["visualization"]["hunks"][0]
    assert (hunk["oldStart"], hunk["oldLines"], hunk["newStart"], hunk["newLines"]) == (1, 2, 1, 2)
    rendered = _ok(
        run_cli(
            "call",
            "demo:file_diff",
            "--args",
            '{"oldPath": "essay.txt", "newPath": "essay-v2.txt"}',
        )
    )
    assert "│ + four five six" in rendered
    outside = run_cli(
        "call", "demo:file_diff", "--args", '{"oldPath": "../x", "newPath": "essay.txt"}'
    )
    assert outside.returncode == 1 and "outside the workspace" in outside.stderr

    info = _call_json(run_cli, "demo:system_info", {})
    assert info["content"]["exitCode"] == 0
    assert info["content"]["system"].split()[0] == os.uname().sysname
    assert info["visualization"]["type"] == "shell-output"
    assert info["visualization"]["command"] == "uname -srm && df -hP ."
