"""Script tools without the process-start cost: fresh spawn vs pre-started vs worker, per runtime.

Run: ``python bench/process_bench.py [--calls N] [--runtimes bash,python,node,bun]``.

For each runtime found on this machine the same trivial tool (read the JSON input, answer
``{"ok": true}``) is called through ``await gateway.call`` in three ways, interleaved in rounds so
machine noise hits all alike:

* ``fresh``      — a new process per call (Jean2, the default);
* ``prestarted`` — ``prestart: true``: the call takes a process started ahead of it (python3
  and node through the fast-exit shim, :mod:`toolgate.backends.fast_exit`);
* ``prestarted, teardown`` — the same with ``PrestartSettings(fast_exit=False)`` (a second
  gateway in the same run): the process ends with its interpreter's teardown, as before the
  shim (python3 and node only);
* ``worker``     — ``protocol: worker``: one long-lived process answers a JSON line per call;
* ``sandboxed``  — a new process per call under bubblewrap (where it works);
* ``warm``       — ``prestart: true`` under bubblewrap: the call takes a sandbox prepared ahead
  (namespaces, pids cgroup, egress proxy) with the script started in it.

Beside them, measured in the same run: ``bare spawn``, a bare ``asyncio.create_subprocess_exec``
of the same runtime and script with the same JSON round trip (no gateway). Each call is spaced
from the previous one (``--gap`` ms) so the pool has refilled, as between an agent's calls; the
``burst`` rows then call ``--burst`` times at once, more than the pool holds, fresh and
pre-started. Reported: p50 and p99 milliseconds per call, and the gateway's own CPU per call
(``time.process_time``: this process only, not the tools').

Goals: a pre-started python3 tool ≤ 3 ms p50 and node ≤ 5 ms (issue 26); a worker ≤ 0.3 ms
p50; a warm sandbox ≤ 5 ms; a burst larger than the pool never slower than fresh (issue 16).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toolgate import EnvironmentSettings, Gateway, GatewaySettings, ScriptSettings
from toolgate.backends.fast_exit import SHIMS
from toolgate.backends.prestart import PrestartSettings
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox

SCRIPTS: dict[str, tuple[str, str, str]] = {
    # runtime: (script name, one-shot script, worker script)
    "bash": (
        "script.sh",
        "read -r input\necho '{\"ok\": true}'\n",
        # The call number is echoed back (the worker protocol's "_call").
        "while read -r input; do\n"
        '  call=${input##*\\"_call\\": \\"}; call=${call%%\\"*}\n'
        '  echo "{\\"ok\\": true, \\"_call\\": \\"$call\\"}"\n'
        "done\n",
    ),
    "python": (
        "script.py",
        "import json, sys\njson.load(sys.stdin)\nprint(json.dumps({'ok': True}))\n",
        "import json, sys\nfor line in sys.stdin:\n"
        "    call = json.loads(line)['_call']\n"
        "    print(json.dumps({'ok': True, '_call': call}), flush=True)\n",
    ),
    "node": (
        "script.js",
        "let d='';process.stdin.on('data',c=>d+=c);"
        "process.stdin.on('end',()=>{JSON.parse(d);console.log(JSON.stringify({ok:true}))});\n",
        "const rl=require('readline').createInterface({input:process.stdin});"
        "rl.on('line',l=>{const c=JSON.parse(l)._call;"
        "process.stdout.write(JSON.stringify({ok:true,_call:c})+'\\n')});\n",
    ),
    "bun": (
        "script.js",
        "const d=await Bun.stdin.text();JSON.parse(d);console.log(JSON.stringify({ok:true}));\n",
        "const rl=require('readline').createInterface({input:process.stdin});"
        "rl.on('line',l=>{const c=JSON.parse(l)._call;"
        "process.stdout.write(JSON.stringify({ok:true,_call:c})+'\\n')});\n",
    ),
}
PROGRAMS = {"bash": "bash", "python": "python3", "node": "node", "bun": "bun"}
#: The row of pre-started calls without the fast-exit shim (the interpreter's teardown).
TEARDOWN = "prestarted, teardown"


def _write(root: Path, name: str, runtime: str, script: str, **fields: Any) -> None:
    folder = root / name
    folder.mkdir()
    file_name = SCRIPTS[runtime][0]
    front = {
        "name": name,
        "script": file_name,
        "runtime": runtime,
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"},
        **fields,
    }
    (folder / "tool.md").write_text(
        "---\n" + json.dumps(front) + "\n---\n\nBench tool.\n", encoding="utf-8"
    )
    (folder / file_name).write_text(script, encoding="utf-8")


async def _bare(program: str, script: Path, payload: bytes) -> None:
    proc = await asyncio.create_subprocess_exec(
        program,
        str(script),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    out, _ = await proc.communicate(payload)
    if json.loads(out) != {"ok": True}:
        raise SystemExit(f"bare {program}: {out!r}")


def _stats(samples: list[tuple[float, float]]) -> dict[str, float]:
    wall = sorted(w for w, _ in samples)
    cpu = [c for _, c in samples]
    p99 = wall[min(len(wall) - 1, int(len(wall) * 0.99))]
    return {
        "p50_ms": statistics.median(wall) * 1000,
        "p99_ms": p99 * 1000,
        "cpu_ms": statistics.mean(cpu) * 1000,
        "n": len(wall),
    }


async def _run(args: argparse.Namespace) -> dict[str, dict[str, dict[str, float]]]:
    # A runtime by its name in a tool folder or by its program's (python3 is python).
    names = {program: name for name, program in PROGRAMS.items()}
    wanted = [names.get(r, r) for r in args.runtimes.split(",")]
    runtimes = [r for r in wanted if shutil.which(PROGRAMS[r])]
    sandbox_works = probe_host().works
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tools"
        root.mkdir()
        for runtime in runtimes:
            _, oneshot, worker = SCRIPTS[runtime]
            _write(root, f"{runtime}-fresh", runtime, oneshot)
            _write(root, f"{runtime}-prestarted", runtime, oneshot, prestart=True)
            _write(root, f"{runtime}-worker", runtime, worker, protocol="worker")
            if sandbox_works:
                _write(root, f"{runtime}-sandboxed", runtime, oneshot, sandbox="compartment")
                _write(
                    root, f"{runtime}-warm", runtime, oneshot, sandbox="compartment", prestart=True
                )

        def gateway_with(fast_exit: bool) -> Gateway:
            settings = PrestartSettings(per_tool=2, total=64, idle_timeout=600, fast_exit=fast_exit)
            return Gateway(
                GatewaySettings(
                    environment=EnvironmentSettings(
                        environ={"PATH": "/usr/local/bin:/usr/bin:/bin"}
                    ),
                    scripts=ScriptSettings(prestart=settings),
                ),
                tool_folders=[root],
                sandbox=Sandbox() if sandbox_works else None,
            )

        gateway, teardown = gateway_with(True), gateway_with(False)
        async with gateway, teardown:
            for runtime in runtimes:
                modes = ["fresh", "prestarted", "worker"]
                modes += [TEARDOWN] if runtime in SHIMS else []
                modes += ["sandboxed", "warm"] if sandbox_works else []
                script = root / f"{runtime}-fresh" / SCRIPTS[runtime][0]
                payload = json.dumps({"workspacePath": tmp, "sessionId": "default"}).encode()
                samples: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
                samples["bare spawn"] = []
                for index in range(args.calls + 3):
                    order = [*modes, "bare spawn"]
                    if index % 2:
                        order.reverse()
                    for mode in order:
                        await asyncio.sleep(args.gap / 1000)  # the pool refills between calls
                        cpu0, wall0 = time.process_time(), time.perf_counter()
                        if mode == "bare spawn":
                            await _bare(PROGRAMS[runtime], script, payload)
                        elif mode == TEARDOWN:
                            outcome = await teardown.call(f"local:{runtime}-prestarted", {})
                            if outcome.content != {"ok": True}:
                                raise SystemExit(f"{runtime} {mode}: {outcome.message}")
                        else:
                            outcome = await gateway.call(f"local:{runtime}-{mode}", {})
                            if outcome.content != {"ok": True}:
                                raise SystemExit(f"{runtime} {mode}: {outcome.message}")
                        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
                        if index >= 3:
                            samples[mode].append((wall, cpu))
                results[runtime] = {mode: _stats(s) for mode, s in samples.items()}
                for mode in ("fresh", "prestarted"):
                    await asyncio.sleep(0.5)  # a full pool before the burst
                    burst: list[tuple[float, float]] = []
                    for _ in range(3):
                        cpu0, wall0 = time.process_time(), time.perf_counter()
                        await asyncio.gather(
                            *(
                                gateway.call(f"local:{runtime}-{mode}", {})
                                for _ in range(args.burst)
                            )
                        )
                        wall = (time.perf_counter() - wall0) / args.burst
                        burst.append((wall, (time.process_time() - cpu0) / args.burst))
                        await asyncio.sleep(0.5)
                    results[runtime][f"burst of {args.burst}, {mode}"] = _stats(burst)
                print(f"{runtime}: done", file=sys.stderr)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60, help="timed calls per mode and runtime")
    parser.add_argument("--gap", type=float, default=30.0, help="ms between calls")
    parser.add_argument("--burst", type=int, default=8, help="calls at once in the burst rows")
    parser.add_argument("--runtimes", default="bash,python,node,bun")
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args()
    results = asyncio.run(_run(args))
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"{'runtime':<8} {'how':<24} {'p50 ms':>8} {'p99 ms':>8} {'gateway CPU ms':>15}")
    for runtime, rows in results.items():
        for mode, row in rows.items():
            print(
                f"{runtime:<8} {mode:<24} {row['p50_ms']:8.2f} {row['p99_ms']:8.2f} "
                f"{row['cpu_ms']:15.3f}"
            )
    print("(burst rows: wall time of the whole burst divided by its calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
