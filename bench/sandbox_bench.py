"""The process sandbox's cost per call: the same script tool with and without bubblewrap.

Run: ``python bench/sandbox_bench.py [--calls N]``. Both tools are the same python3 script
(it reads its JSON input and prints ``{"ok": true}``), called through the same gateway in the
same run, alternating, so machine noise hits both alike. The compartment one runs under
``bwrap`` + ``prlimit`` with the default limits; the host one as a plain subprocess. Reported:
median and p90 milliseconds per call, and the median difference (goal: under 10 ms).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from toolgate import EnvironmentSettings, Gateway, GatewaySettings
from toolgate.backends.script import ScriptBackend
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import ImplementationKind, Permissions, SandboxMode, SandboxSpec
from toolgate.registry import RegisteredTool
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

#: Median milliseconds the sandbox may add to a call.
GOAL_SANDBOX_MS = 10.0

SCRIPT = "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'ok': True}))\n"
TOOL_MD = (
    "---\nname: {name}\nscript: script.py\nruntime: python\n"
    "inputSchema: {{type: object}}\noutputSchema: {{type: object}}\n---\n\nBench tool.\n"
)


def _tool(root: Path, name: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "tool.md").write_text(TOOL_MD.format(name=name), encoding="utf-8")
    (folder / "script.py").write_text(SCRIPT, encoding="utf-8")
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    host = probe_host()
    if not host.works:
        print(f"cannot sandbox here: {host.problem}", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory() as tmp,
        Gateway(
            GatewaySettings(environment=EnvironmentSettings(environ={"PATH": "/usr/bin:/bin"}))
        ) as gw,
    ):
        root = Path(tmp)
        workspace = root / "workspace"
        workspace.mkdir()
        backend = gw._backends[ImplementationKind.SCRIPT]
        assert isinstance(backend, ScriptBackend)
        backend.sandbox = Sandbox()
        ids = {}
        for name, mode in (("host", SandboxMode.HOST), ("sandboxed", SandboxMode.COMPARTMENT)):
            loaded = load_tool_folder(_tool(root, name))
            assert loaded.tool is not None
            tool = dataclasses.replace(loaded.tool, sandbox=SandboxSpec(mode, Permissions()))
            gw.registry.add(RegisteredTool(tool, None, backend.unavailable_reason(tool)))
            ids[name] = tool.id
        times: dict[str, list[float]] = {"host": [], "sandboxed": []}
        for index in range(args.calls + 5):
            for name in ("host", "sandboxed") if index % 2 else ("sandboxed", "host"):
                started = time.perf_counter()
                outcome = gw.call_sync(ids[name], {}, workspace=workspace)
                elapsed = (time.perf_counter() - started) * 1000
                if outcome.content != {"ok": True}:
                    raise SystemExit(f"{name}: {outcome.code} {outcome.message}")
                if index >= 5:  # warm-up calls are not counted
                    times[name].append(elapsed)
    report = {
        name: {
            "median_ms": round(statistics.median(values), 2),
            "p90_ms": round(statistics.quantiles(values, n=10)[-1], 2),
        }
        for name, values in times.items()
    }
    added = report["sandboxed"]["median_ms"] - report["host"]["median_ms"]
    report["added_median_ms"] = {"value": round(added, 2), "goal": GOAL_SANDBOX_MS}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{'':12}{'median ms':>12}{'p90 ms':>10}")
        for name in ("host", "sandboxed"):
            row = report[name]
            print(f"{name:12}{row['median_ms']:>12.2f}{row['p90_ms']:>10.2f}")
        verdict = "met" if added < GOAL_SANDBOX_MS else "MISSED"
        print(f"sandbox adds {added:.2f} ms per call (goal < {GOAL_SANDBOX_MS:g} ms: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
