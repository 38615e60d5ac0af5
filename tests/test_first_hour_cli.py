"""The first hour of a new user at the command line (issue 23): what the commands say and do on a
fresh machine, run through the real console script or Typer's test runner.

* ``toolgate mcp`` without a toolgate.yaml serves the demo tools, as ``toolgate serve`` does, and
  says on stderr what it serves and from where (stdout stays the protocol's).
* Ctrl+C on ``toolgate serve --workers 2`` says "toolgate stopped." once, not once per process.
* A shared database that refuses the connection (a role never created) stops ``toolgate serve``
  with one line that names the cause, without the password and without the connection pool's
  own log lines.
* ``toolgate --help`` reads as Click and Typer help always has: no type after a flag, arguments
  named as they are (``ID``), never ``{ID}``.
* An unknown key in toolgate.yaml gets a "did you mean" suggestion, as a tool.md field does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx2
import pytest
import typer.main
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from typer.testing import CliRunner

from conftest import TOOLGATE
from postgres_support import ADMIN_URL, START_HINT, upgraded_database
from test_mcp_server_helpers import text_of
from toolgate.cli.app import app

pytestmark = pytest.mark.slow


def _env(home: Path) -> dict[str, str]:
    return {"TOOLGATE_HOME": str(home), "PYTHONIOENCODING": "utf-8"}


def _cli_env(home: Path) -> dict[str, str]:
    """This environment with ``home`` as TOOLGATE_HOME and no shared state but the file's."""
    env = {**os.environ, **_env(home)}
    env.pop("TOOLGATE_DATABASE_URL", None)
    env.pop("TOOLGATE_REDIS_URL", None)
    return env


async def test_mcp_without_a_config_serves_the_demo_tools_and_says_so_on_stderr(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()  # no toolgate.yaml here, nor in TOOLGATE_HOME
    params = StdioServerParameters(
        command=str(TOOLGATE), args=["mcp"], env=_env(home), cwd=str(project)
    )
    stderr = tmp_path / "stderr.txt"
    with stderr.open("w", encoding="utf-8") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as mcp:
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            added = await mcp.call_tool("demo__add", {"a": 40, "b": 2})
    assert {"demo__add", "demo__diff_text"} <= names
    assert text_of(added) == "42"
    lines = stderr.read_text(encoding="utf-8").splitlines()
    assert (
        f"toolgate mcp: serving {len(names)} tools from the demo tools (no toolgate.yaml found) "
        "over stdio, as the default agent"
    ) in lines


def test_mcp_with_a_config_names_it_on_stderr_and_writes_nothing_else_to_stdout(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    (project / "toolgate.yaml").write_text("demo: true\n", encoding="utf-8")
    # No client: stdin closes at once, so the server stops after its start.
    result = subprocess.run(
        [str(TOOLGATE), "mcp", "--agent", "bob"],
        cwd=project,
        env={**os.environ, **_env(home)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("toolgate mcp: serving ")
    assert " tools from toolgate.yaml over stdio, as agent 'bob'\n" in result.stderr


def test_ctrl_c_on_serve_with_two_workers_says_stopped_once(tmp_path: Path) -> None:
    pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    with upgraded_database() as url:
        (tmp_path / "toolgate.yaml").write_text(f"state: {url}\n", encoding="utf-8")
        process = subprocess.Popen(
            [str(TOOLGATE), "serve", "--port", "0", "--workers", "2"],
            cwd=tmp_path,
            env=_cli_env(tmp_path / "home"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group, as a shell gives a job
        )
        try:
            assert process.stdout is not None
            banner = process.stdout.readline()
            match = re.search(r"on (http://127\.0\.0\.1:\d+) with 2 worker processes", banner)
            assert match, banner
            deadline = time.monotonic() + 60
            while True:  # one worker at least is serving (the other may still be starting)
                try:
                    if httpx2.get(match.group(1) + "/healthz", timeout=5).status_code == 200:
                        break
                except httpx2.TransportError:
                    pass
                assert process.poll() is None and time.monotonic() < deadline, "no worker"
                time.sleep(0.1)
            os.killpg(process.pid, signal.SIGINT)  # Ctrl+C: the terminal signals the group
            _, stderr = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    assert process.returncode == 0, stderr
    assert stderr.count("toolgate stopped.") == 1, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr


def test_serve_on_a_role_that_does_not_exist_exits_with_one_line_naming_the_cause(
    tmp_path: Path,
) -> None:
    psycopg = pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    try:
        psycopg.connect(ADMIN_URL, connect_timeout=3).close()
    except psycopg.OperationalError:
        pytest.skip(START_HINT)
    server = urlsplit(ADMIN_URL)
    url = f"postgresql://nosuchrole:pw-not-shown@{server.hostname}:{server.port or 5432}/test"
    (tmp_path / "toolgate.yaml").write_text(f"state: {url}\n", encoding="utf-8")
    result = subprocess.run(
        [str(TOOLGATE), "serve", "--port", "0"],
        cwd=tmp_path,
        env=_cli_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3
    assert result.stdout == ""
    where = url.replace(":pw-not-shown@", ":***@")
    # Trust authentication says the role is missing; password authentication does not tell.
    assert re.fullmatch(
        f"configuration error: toolgate.yaml: state: cannot connect to PostgreSQL at "
        f"{re.escape(where)}: "
        '(role "nosuchrole" does not exist; create it: see "Create the role and the database" '
        'in docs/guides/scale-out.md|password authentication failed for user "nosuchrole")\n',
        result.stderr,
    ), result.stderr


def _help(*command: str) -> str:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.output


def _usage(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if "Usage:" in line)


def _command_paths(command: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            found += _command_paths(sub, (*path, name))
    return found


def test_help_shows_no_type_after_a_flag_and_names_arguments_as_they_are() -> None:
    root = _help()
    assert re.search(r"--version +Print the version and exit\.", root), root
    assert re.search(r"--help +-h +Show this message and exit\.", root), root
    show = _help("tools", "show")
    assert _usage(show) == "Usage: toolgate tools show [OPTIONS] ID", show
    assert re.search(r"\* +ID +TEXT +The tool id", show), show
    assert re.search(r"--json +Print the details as JSON\.", show), show
    serve = _help("serve")
    assert re.search(r"--port +-p +INTEGER RANGE", serve), serve
    assert re.search(r"--log-format +\[text\|json\]", serve), serve
    assert _usage(_help("get", "tools")) == "Usage: toolgate get tools [OPTIONS] [NAME]..."
    accept = _usage(_help("mcp-servers", "accept"))
    assert accept == "Usage: toolgate mcp-servers accept [OPTIONS] SERVER [TOOLS]..."


def test_no_command_help_shows_typer_type_tags_or_braced_arguments() -> None:
    paths = _command_paths(typer.main.get_command(app))
    assert len(paths) > 40  # every command and group, not just the root
    for path in paths:
        text = _help(*path)
        assert "{" not in _usage(text), (path, text)
        assert not re.search(r"<(bool|str|int|float|path|file|list)\b", text), (path, text)


def test_unknown_keys_in_toolgate_yaml_get_a_did_you_mean_as_tool_md_fields_do(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    tool = home / "tools" / "hello"
    tool.mkdir(parents=True)
    project.mkdir()
    (tool / "tool.md").write_text(
        "---\nname: hello\nscript: hello.py\ntimout: 5\n---\nSay hello.\n", encoding="utf-8"
    )
    (tool / "hello.py").write_text("print('{}')\n", encoding="utf-8")
    cli = [str(TOOLGATE), "tools", "list"]
    env = _cli_env(home)
    listed = subprocess.run(cli, cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert "unknown field 'timout' (ignored); did you mean 'timeout'?" in listed.stdout
    (project / "toolgate.yaml").write_text(
        "tool_folder: [./tools]\n"
        "serve: {prot: 8000, zzz: 1}\n"
        "python: [{modul: my_tools.py}]\n"
        "agents: {bob: {lables: {team: a}}}\n"
        "processes: {prestart: {enabeld: true}}\n",
        encoding="utf-8",
    )
    failed = subprocess.run(cli, cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 3
    lines = failed.stderr.splitlines()
    for expected in (
        "toolgate.yaml: tool_folder: unknown key; did you mean 'tool_folders'?",
        "toolgate.yaml: serve.prot: unknown key; did you mean 'port'?",
        "toolgate.yaml: python[0].modul: unknown key; did you mean 'module'?",
        "toolgate.yaml: agents.bob.lables: unknown key; did you mean 'labels'?",
        "toolgate.yaml: processes.prestart.enabeld: unknown key; did you mean 'enabled'?",
        # Nothing close: the keys that section takes.
        "toolgate.yaml: serve.zzz: unknown key (check the spelling); the keys here are host, "
        "port, max_body_bytes, request_timeout, mcp_sessions, mcp_page_size, loop_blocked_after",
    ):
        assert any(line.endswith(expected) for line in lines), (expected, failed.stderr)
