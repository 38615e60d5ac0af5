"""The process sandbox's cost per call: the same script tool with and without bubblewrap.

Run: ``python bench/sandbox_bench.py [--calls N] [--split] [--baseline SRC --rounds R]``.

Both tools are the same python3 script (it reads its JSON input and prints ``{"ok": true}``),
called through the same gateway (built with a :class:`~toolgate.sandbox.runner.Sandbox`, as
``toolgate serve`` builds it, so the pipeline's workspace check is included) in the same run,
alternating, so machine noise hits both alike. The compartment one runs fresh (no pre-started
process) under ``bwrap`` with the default limits; the host one as a plain subprocess. Reported:
median and p90 milliseconds per call, and the median difference (goal: at most 5 ms).

``--split`` adds where the difference goes, measured the same way (alternating, same run):

* ``prepare``: :meth:`Sandbox.prepare` entered and left without starting anything (the
  gateway's own work: path checks, opening the binds, the call's pids cgroup, the argv);
* ``bare``: the script run with ``subprocess`` on the host; ``prepared argv``: the command
  ``prepare`` yields (join shell, limits, ``bwrap``, namespaces, mounts) run the same way. Their
  difference is what the sandbox's processes cost, without the gateway.

``--baseline SRC`` runs this bench ``--rounds`` times against the toolgate source folder ``SRC``
(an export of an older commit: ``git archive main | tar -x -C /tmp/main``) and as many times
against this checkout, alternating rounds, and prints both: before and after from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toolgate import EnvironmentSettings, Gateway, GatewaySettings
from toolgate.backends.script import ScriptBackend
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import ImplementationKind, Permissions, SandboxMode, SandboxSpec, Tool
from toolgate.registry import RegisteredTool
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

#: Median milliseconds the sandbox may add to a fresh call (issue 26).
GOAL_SANDBOX_MS = 5.0

SCRIPT = "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'ok': True}))\n"
TOOL_MD = (
    "---\nname: {name}\nscript: script.py\nruntime: python\n"
    "inputSchema: {{type: object}}\noutputSchema: {{type: object}}\n---\n\nBench tool.\n"
)
PYTHON = "/usr/bin/python3"
WARM_UP = 5


def _tool(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "tool.md").write_text(TOOL_MD.format(name=name), encoding="utf-8")
    (folder / "script.py").write_text(SCRIPT, encoding="utf-8")
    return folder


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(values), 2),
        "p90_ms": round(statistics.quantiles(values, n=10)[-1], 2),
    }


def _calls(gw: Gateway, ids: dict[str, str], workspace: Path, calls: int) -> dict[str, list[float]]:
    """Host and sandboxed calls through ``gw``, alternating (first one, then the other): wall
    milliseconds, and the gateway process's own CPU milliseconds (``time.process_time``, all
    its threads, not the tools'), which machine load does not inflate."""
    times: dict[str, list[float]] = {
        "host": [],
        "sandboxed": [],
        "host cpu": [],
        "sandboxed cpu": [],
    }
    for index in range(calls + WARM_UP):
        for name in ("host", "sandboxed") if index % 2 else ("sandboxed", "host"):
            cpu = time.process_time()
            started = time.perf_counter()
            outcome = gw.call_sync(ids[name], {}, workspace=workspace)
            elapsed = (time.perf_counter() - started) * 1000
            used = (time.process_time() - cpu) * 1000
            if outcome.content != {"ok": True}:
                raise SystemExit(f"{name}: {outcome.code} {outcome.message}")
            if index >= WARM_UP:  # warm-up calls are not counted
                times[name].append(elapsed)
                times[f"{name} cpu"].append(used)
    return times


async def _split(
    sandbox: Sandbox, tool: Tool, folder: Path, workspace: Path, calls: int
) -> dict[str, list[float]]:
    """The sandbox's own parts, alternating: ``prepare`` alone, the bare script, and the
    prepared argv run directly (see the module documentation)."""
    argv = [PYTHON, str(folder / "script.py")]
    env = {"PATH": "/usr/bin:/bin"}
    times: dict[str, list[float]] = {"prepare": [], "bare": [], "prepared argv": []}

    def run(command: list[str], command_env: dict[str, str], fds: tuple[int, ...]) -> float:
        started = time.perf_counter()
        done = subprocess.run(
            command, input=b"{}", capture_output=True, env=command_env, pass_fds=fds, check=False
        )
        if done.stdout.strip() != b'{"ok": true}':
            raise SystemExit(f"{command[0]}: exit {done.returncode}: {done.stderr[-300:]!r}")
        return (time.perf_counter() - started) * 1000

    def prepare() -> Any:
        return sandbox.prepare(
            tool, argv, env=env, workspace=workspace, code=[folder], programs=argv[:1]
        )

    for index in range(calls + WARM_UP):
        order = ("prepare", "bare", "prepared argv")
        for mode in order if index % 2 else order[::-1]:
            if mode == "prepare":
                started = time.perf_counter()
                async with prepare():
                    pass
                elapsed = (time.perf_counter() - started) * 1000
            elif mode == "bare":
                elapsed = run(argv, env, ())
            else:
                async with prepare() as command:
                    elapsed = run(command.argv, command.env, command.pass_fds)
            if index >= WARM_UP:
                times[mode].append(elapsed)
    return times


def measure(calls: int, split: bool) -> dict[str, Any]:
    """The figures of one run (see the module documentation)."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        Gateway(
            GatewaySettings(environment=EnvironmentSettings(environ={"PATH": "/usr/bin:/bin"})),
            sandbox=Sandbox(),
        ) as gw,
    ):
        root = Path(tmp)
        workspace = root / "workspace"
        workspace.mkdir()
        backend = gw._backends[ImplementationKind.SCRIPT]
        assert isinstance(backend, ScriptBackend) and backend.sandbox is not None
        ids: dict[str, str] = {}
        tools: dict[str, tuple[Tool, Path]] = {}
        for name, mode in (("host", SandboxMode.HOST), ("sandboxed", SandboxMode.COMPARTMENT)):
            folder = _tool(root, name)
            loaded = load_tool_folder(folder)
            assert loaded.tool is not None
            tool = dataclasses.replace(loaded.tool, sandbox=SandboxSpec(mode, Permissions()))
            gw.registry.add(RegisteredTool(tool, None, backend.unavailable_reason(tool)))
            ids[name] = tool.id
            tools[name] = (tool, folder)
        times = _calls(gw, ids, workspace, calls)
        if split:
            tool, folder = tools["sandboxed"]
            times |= asyncio.run(_split(backend.sandbox, tool, folder, workspace, calls))
    report: dict[str, Any] = {name: _summary(values) for name, values in times.items()}
    added = report["sandboxed"]["median_ms"] - report["host"]["median_ms"]
    report["added_median_ms"] = {"value": round(added, 2), "goal": GOAL_SANDBOX_MS}
    cpu = report["sandboxed cpu"]["median_ms"] - report["host cpu"]["median_ms"]
    report["added_cpu_median_ms"] = round(cpu, 2)
    if split:
        processes = report["prepared argv"]["median_ms"] - report["bare"]["median_ms"]
        report["processes_added_median_ms"] = round(processes, 2)
    return report


def _print(report: dict[str, Any]) -> None:
    print(f"{'':16}{'median ms':>12}{'p90 ms':>10}")
    for name in (
        "host",
        "sandboxed",
        "host cpu",
        "sandboxed cpu",
        "prepare",
        "bare",
        "prepared argv",
    ):
        if name in report:
            row = report[name]
            print(f"{name:16}{row['median_ms']:>12.2f}{row['p90_ms']:>10.2f}")
    added = report["added_median_ms"]["value"]
    verdict = "met" if added <= GOAL_SANDBOX_MS else "MISSED"
    print(f"sandbox adds {added:.2f} ms per call (goal <= {GOAL_SANDBOX_MS:g} ms: {verdict})")
    if "processes_added_median_ms" in report:
        print(
            f"of which the sandbox's processes (prepared argv - bare): "
            f"{report['processes_added_median_ms']:.2f} ms, preparing it in the gateway: "
            f"{report['prepare']['median_ms']:.2f} ms"
        )
    print(f"the gateway's own CPU per call: {report['added_cpu_median_ms']:.2f} ms more sandboxed")


def _compare(baseline: str, rounds: int, calls: int) -> dict[str, Any]:
    """This bench against ``baseline`` (a source folder) and this checkout, alternating."""
    here = str(Path(__file__).resolve().parents[1] / "src")
    sides = {"before": str(Path(baseline).resolve()), "after": here}
    found: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for index in range(rounds):
        for side in ("before", "after") if index % 2 == 0 else ("after", "before"):
            env = {**os.environ, "PYTHONPATH": sides[side]}
            done = subprocess.run(
                [sys.executable, __file__, "--json", "--calls", str(calls)],
                capture_output=True,
                env=env,
                check=True,
            )
            found[side].append(json.loads(done.stdout))
    result: dict[str, Any] = {}
    for side, reports in found.items():
        per_round = {key: [r[key]["median_ms"] for r in reports] for key in ("host", "sandboxed")}
        added = [r["added_median_ms"]["value"] for r in reports]
        cpu = [r["sandboxed cpu"]["median_ms"] - r["host cpu"]["median_ms"] for r in reports]
        result[side] = {
            "source": sides[side],
            **{
                key: {"median_ms": statistics.median(v), "min": min(v), "max": max(v)}
                for key, v in per_round.items()
            },
            "added_ms": {"median": statistics.median(added), "min": min(added), "max": max(added)},
            "added_cpu_ms": {"median": statistics.median(cpu), "min": min(cpu), "max": max(cpu)},
        }
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument("--split", action="store_true", help="add where the time goes")
    parser.add_argument("--baseline", help="a toolgate source folder to compare with")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per side (--baseline)")
    args = parser.parse_args()
    host = probe_host()
    if not host.works:
        print(f"cannot sandbox here: {host.problem}", file=sys.stderr)
        return 2
    if args.baseline:
        compared = _compare(args.baseline, args.rounds, args.calls)
        if args.json:
            print(json.dumps(compared, indent=2))
            return 0
        print(f"{args.rounds} alternating rounds of {args.calls} calls per side; medians of the")
        print("rounds' medians (min-max over the rounds), ms")
        print(f"{'':8}{'host':>22}{'sandboxed':>22}{'sandbox adds':>22}{'gateway CPU adds':>22}")
        for side in ("before", "after"):
            row = compared[side]
            cells = [
                f"{row[key]['median_ms']:.2f} ({row[key]['min']:.1f}-{row[key]['max']:.1f})"
                for key in ("host", "sandboxed")
            ]
            for key in ("added_ms", "added_cpu_ms"):
                add = row[key]
                cells.append(f"{add['median']:.2f} ({add['min']:.1f}-{add['max']:.1f})")
            print(f"{side:8}" + "".join(f"{cell:>22}" for cell in cells))
        return 0
    report = measure(args.calls, args.split)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
