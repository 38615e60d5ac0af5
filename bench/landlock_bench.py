"""The start-up cost of each sandbox layer: bare spawn vs bubblewrap vs the Landlock launcher.

Run: ``python bench/landlock_bench.py [--calls N] [--json]``.

The same python3 script (it reads its JSON input and prints ``{"ok": true}``) is run with
``subprocess``, alternating, three ways: bare on the host, as the command
:meth:`~toolgate.sandbox.runner.Sandbox.prepare` yields under ``sandbox.layer: bubblewrap``, and
as the one it yields under ``sandbox.layer: landlock`` (the launcher ``python -I -S
landlock_exec.py``: Landlock ruleset, rlimits, seccomp filter, then ``execve``). ``prepare`` is
entered outside the timing; only the processes are timed. Reported: median and p90 milliseconds
and each layer's median over bare. Needs a kernel with Landlock ABI 6+ and working bubblewrap.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import Permissions, SandboxMode, SandboxSpec, Tool
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

SCRIPT = "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'ok': True}))\n"
TOOL_MD = (
    "---\nname: bench\nscript: script.py\nruntime: python\n"
    "inputSchema: {type: object}\noutputSchema: {type: object}\n---\n\nBench tool.\n"
)
PYTHON = "/usr/bin/python3"
WARM_UP = 5


def _run(command: list[str], env: dict[str, str], fds: tuple[int, ...]) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        command, input=b"{}", capture_output=True, env=env, pass_fds=fds, check=False
    )
    if done.stdout.strip() != b'{"ok": true}':
        raise SystemExit(f"{command[0]}: exit {done.returncode}: {done.stderr[-300:]!r}")
    return (time.perf_counter() - started) * 1000


async def _measure(tool: Tool, folder: Path, workspace: Path, calls: int) -> dict[str, list[float]]:
    argv = [PYTHON, str(folder / "script.py")]
    env = {"PATH": "/usr/bin:/bin"}
    layers = {name: Sandbox(SandboxConfig(layer=name)) for name in ("bubblewrap", "landlock")}
    times: dict[str, list[float]] = {"bare": [], "bubblewrap": [], "landlock": []}
    for index in range(calls + WARM_UP):
        order = ("bare", "bubblewrap", "landlock")
        for mode in order if index % 2 else order[::-1]:
            if mode == "bare":
                elapsed = _run(argv, env, ())
            else:
                prepared = layers[mode].prepare(
                    tool, argv, env=env, workspace=workspace, code=[folder], programs=argv[:1]
                )
                async with prepared as command:
                    elapsed = _run(command.argv, command.env, command.pass_fds)
            if index >= WARM_UP:
                times[mode].append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = root / "tools" / "bench"
        folder.mkdir(parents=True)
        (folder / "tool.md").write_text(TOOL_MD, encoding="utf-8")
        (folder / "script.py").write_text(SCRIPT, encoding="utf-8")
        workspace = root / "workspace"
        workspace.mkdir()
        loaded = load_tool_folder(folder)
        assert loaded.tool is not None
        tool = dataclasses.replace(
            loaded.tool, sandbox=SandboxSpec(SandboxMode.COMPARTMENT, Permissions())
        )
        times = asyncio.run(_measure(tool, folder, workspace, args.calls))
    bare = statistics.median(times["bare"])
    report: dict[str, Any] = {}
    for mode, values in times.items():
        median = statistics.median(values)
        report[mode] = {
            "median_ms": round(median, 2),
            "p90_ms": round(statistics.quantiles(values, n=10)[-1], 2),
            "over_bare_ms": round(median - bare, 2),
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for mode, row in report.items():
        print(
            f"{mode:>10}: median {row['median_ms']:6.2f} ms  p90 {row['p90_ms']:6.2f} ms  "
            f"(+{row['over_bare_ms']:.2f} ms over bare)"
        )


if __name__ == "__main__":
    main()
