"""The first hour of a new user at the command line (issue 23): what the commands say and do on a
fresh machine, run through the real console script or Typer's test runner.

* ``toolgate mcp`` without a toolgate.yaml serves the demo tools, as ``toolgate serve`` does, and
  says on stderr what it serves and from where (stdout stays the protocol's).
* ``toolgate --help`` reads as Click and Typer help always has: no type after a flag, arguments
  named as they are (``ID``), never ``{ID}``.
* An unknown key in toolgate.yaml gets a "did you mean" suggestion, as a tool.md field does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from conftest import TOOLGATE
from test_mcp_server_helpers import text_of


def _env(home: Path) -> dict[str, str]:
    return {"TOOLGATE_HOME": str(home), "PYTHONIOENCODING": "utf-8"}


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
