"""Helpers for tests that write tool folders (tool.md + script) to disk."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def write_tool(
    root: Path,
    name: str,
    script: str,
    *,
    runtime: str = "bash",
    script_name: str | None = None,
    body: str = "A test tool.",
    executable: bool = False,
    declared_name: str | None = None,
    **fields: Any,
) -> Path:
    """Write ``root/name/`` with a tool.md (front matter from ``fields``) and the script.

    The tool's ``name`` is the folder's name unless ``declared_name`` says otherwise.
    """
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    extension = {"bash": ".sh", "python": ".py", "node": ".js", "bun": ".ts", "go": ".go"}
    script_name = script_name or "script" + extension.get(runtime, "")
    front = {
        "name": declared_name or name,
        "script": script_name,
        "runtime": runtime,
        "inputSchema": OBJECT_SCHEMA,
        "outputSchema": OBJECT_SCHEMA,
        **fields,
    }
    (folder / "tool.md").write_text(
        "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n" + body + "\n",
        encoding="utf-8",
    )
    path = folder / script_name
    path.write_text(script, encoding="utf-8")
    if executable:
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


#: Programs .ci/run installs; any other missing program is simply not available here.
CI_INSTALLS = {"bun", "node", "go", "bwrap"}


def require_program(name: str) -> str:
    """The program's path, or skip the test saying what is missing and why."""
    found = shutil.which(name)
    if found is None:
        why = (
            ".ci/run installs it"
            if name in CI_INSTALLS
            else "it has no Debian or PyPI package this project can install"
        )
        pytest.skip(f"{name} is not installed on this machine ({why})")
    return found


def gone(pid: int) -> bool:
    """True when no live process has this pid (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rpartition(")")[2].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):  # reaped before or while it was read
        return True


def all_gone(pids: Iterable[int], within: float = 10.0) -> bool:
    """True once every pid is :func:`gone`, waiting at most ``within`` seconds: a killed process
    dies when the kernel next schedules it, not when ``kill`` returns."""
    deadline = time.monotonic() + within
    while not all(gone(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def clean_environ(**extra: str) -> dict[str, str]:
    """A gateway environment with PATH and HOME from the test process, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "TMPDIR"}}
    env.update(extra)
    return env


# The Jean2 seed's own word-count example, verbatim (tool.md and script.ts).
WORD_COUNT_TOOL_MD = """\
---
name: word-count
script: script.ts
runtime: bun
inputSchema:
  type: object
  properties:
    path:
      type: string
      description: "Path to the file to count words in"
  required:
    - path
outputSchema:
  type: object
  properties:
    words:
      type: number
    lines:
      type: number
    characters:
      type: number
timeout: 10000
---

Count words, lines, and characters in a file.
"""

WORD_COUNT_SCRIPT_TS = """\
import { readFileSync } from 'node:fs';

const input = JSON.parse(await Bun.stdin.text());
const { path } = input;

try {
  const content = readFileSync(path, 'utf-8');
  const words = content.split(/\\s+/).filter(Boolean).length;
  const lines = content.split('\\n').length;
  const characters = content.length;

  console.log(JSON.stringify({ words, lines, characters }));
} catch (e) {
  console.log(JSON.stringify({ error: e.message }));
}
"""
