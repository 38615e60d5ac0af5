"""JavaScript plugin tools: a warm SES-compartment tool vs a bare ``node -e`` vs the Python path.

Run: ``python bench/js_bench.py [--calls N] [--json]``. In one process and run, alternating:

* ``js_warm``: ``gateway.call_sync`` of a trivial TypeScript Pandora tool (``add``) in an SES
  compartment on its warm host process (goal: median ≤ 1 ms per call);
* ``node_spawn``: a bare ``node -e`` process per call that adds two numbers (what a spawn per
  call would cost at the very least, before loading SES or the plugin);
* ``python_plugin``: ``gateway.call_sync`` of the same tool as a Python Pandora plugin run on the
  host (``host_mode``), the existing path.

``--bwrap`` gives the gateway a process sandbox, so the warm host also runs under bubblewrap.

Needs Node.js and the host's packages (``toolgate js install``; installed on first use).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgate import EnvironmentSettings, Gateway, GatewaySettings
from toolgate.sandbox.runner import Sandbox

GOAL_WARM_MS = 1.0
ARGS = {"a": 1, "b": 2}

TS = """import type { Tool } from '@pandorakit/sdk/tools'
export const tools: Tool[] = [{
  id: 'add', name: 'Add', description: 'Add two numbers',
  parameters: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } } },
  annotations: { readOnlyHint: true },
  execute: async (input: { a: number; b: number }) => ({ sum: input.a + input.b }),
}]
"""
PY = """tools = [{
    "id": "add", "name": "Add", "description": "Add two numbers",
    "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}
    },
    "annotations": {"readOnlyHint": True},
    "execute": lambda input, ctx: {"sum": input["a"] + input["b"]},
}]
"""


def _plugin(root: Path, name: str, entry: str, code: str) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / entry).write_text(code, encoding="utf-8")
    manifest = {"id": f"@bench/{name}", "provides": {"tools": {"entry": entry}}}
    (folder / "pandora.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def _timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--spawns", type=int, default=30, help="node -e processes (slow)")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    parser.add_argument(
        "--bwrap",
        action="store_true",
        help="give the gateway a process sandbox: the warm host runs under bubblewrap too",
    )
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None:
        print("Node.js is not installed", file=sys.stderr)
        return 2
    times: dict[str, list[float]] = {"js_warm": [], "node_spawn": [], "python_plugin": []}
    sandbox = Sandbox() if args.bwrap else None
    if sandbox is not None and not sandbox.host().works:
        print(f"cannot sandbox here: {sandbox.host().problem}", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory() as tmp,
        Gateway(
            GatewaySettings(environment=EnvironmentSettings(environ={})), sandbox=sandbox
        ) as gateway,
    ):
        root = Path(tmp)
        js = gateway.add_source(_plugin(root, "js", "index.ts", TS))
        py = gateway.add_source(_plugin(root, "py", "index.py", PY), options={"host_mode": True})
        if js.diagnostics or py.diagnostics:
            raise SystemExit(f"the bench plugins did not load: {js.diagnostics + py.diagnostics}")

        def call(tool_id: str) -> Callable[[], None]:
            def run() -> None:
                outcome = gateway.call_sync(tool_id, ARGS)
                if outcome.content != {"sum": 3}:
                    raise SystemExit(f"{tool_id}: {outcome.code} {outcome.message}")

            return run

        def spawn() -> None:
            done = subprocess.run(
                [node, "-e", "process.stdout.write(String(1 + 2))"], capture_output=True, text=True
            )
            if done.stdout != "3":
                raise SystemExit(f"node -e: {done.stderr}")

        rows = {"js_warm": call("@bench/js:add"), "python_plugin": call("@bench/py:add")}
        for _ in range(20):  # warm-up: the host process starts, caches fill
            for run in rows.values():
                run()
        for index in range(args.calls):
            for name in sorted(rows, reverse=index % 2 == 1):
                times[name].append(_timed(rows[name]))
            if index < args.spawns:
                times["node_spawn"].append(_timed(spawn))
    report: dict[str, Any] = {
        name: {
            "median_ms": round(statistics.median(values), 3),
            "p90_ms": round(statistics.quantiles(values, n=10)[-1], 3),
            "samples": len(values),
        }
        for name, values in times.items()
    }
    warm = report["js_warm"]["median_ms"]
    report["goal"] = {"js_warm_median_ms": GOAL_WARM_MS, "met": warm <= GOAL_WARM_MS}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'':16}{'median ms':>12}{'p90 ms':>10}{'samples':>9}")
    for name in ("js_warm", "node_spawn", "python_plugin"):
        row = report[name]
        print(f"{name:16}{row['median_ms']:>12.3f}{row['p90_ms']:>10.3f}{row['samples']:>9}")
    verdict = "met" if warm <= GOAL_WARM_MS else "MISSED"
    print(f"warm compartment tool: {warm:.3f} ms median (goal ≤ {GOAL_WARM_MS:g} ms: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
