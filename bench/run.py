"""Time toolgate's call paths beside baselines and FastMCP, all in the same run.

    python bench/run.py            # ~90 s: 5 interleaved rounds, 46 s of µs timing budget
    python bench/run.py --quick    # ~27 s: 2 rounds, 11 s of µs timing budget
    python bench/run.py --json     # machine-readable results on stdout
    python bench/run.py --only direct,call_sync,gw_async
    python bench/run.py --only bash_gw,python_gw,burst_gw,burst_gw64   # script tools only
    python bench/run.py --only g_access,g_rate,g_idem,g_idem_replay,g_audit,g_full,audit_rate
    python bench/run.py --only starlette,fastmcp,tg_mcp,tg_api     # HTTP throughput only
    python bench/run.py --no-http  # skip the HTTP throughput section (~50 s)
    python bench/run.py --only sandbox   # the sandbox's cost per call only

The script-tool rows (one child process per call) take a fixed number of samples per round
(``--script-samples``, ``--bursts``) on top of the µs budget; the sustained-audit scenario runs
once, after the rounds (``--audit-calls`` calls).

See bench/README.md for what is measured and how to read it. The exit code is 0 whatever the
figures (the goals are informational); it is 1 only when a scenario failed to run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import http_throughput
import shared_audit_scenarios  # noqa: F401 - registers the PostgreSQL audit scenarios
import shared_state_floor  # noqa: F401 - registers g_full_pg_floor
import toolgate
from _report import render, to_json
from _timing import Budget, Samples, Summary, summarize
from scenarios import (
    AUDIT_CALLS,
    AUDIT_CALLS_QUICK,
    BURST,
    SCENARIOS,
    Context,
    Fixtures,
    Scenario,
    ScriptPlan,
    Skip,
    describe_program,
    proc_scan,
)

PINNED_FASTMCP = "4.1.2"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller, faster run (~27 s)")
    parser.add_argument("--json", action="store_true", help="print JSON results on stdout")
    parser.add_argument(
        "--seconds", type=float, help="total timing budget, split over scenarios and rounds"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (each runs every scenario)")
    parser.add_argument(
        "--script-samples",
        type=int,
        help="script-tool calls timed per scenario and round (default 30, quick 15)",
    )
    parser.add_argument(
        "--bursts",
        type=int,
        help=f"bursts of {BURST} concurrent script calls timed per burst scenario and round "
        "(default 2)",
    )
    parser.add_argument(
        "--audit-calls",
        type=int,
        help=f"calls of the sustained-audit scenario, run once (default {AUDIT_CALLS:,}, "
        f"quick {AUDIT_CALLS_QUICK:,})",
    )
    parser.add_argument("--only", help="comma-separated scenario keys (see --list)")
    parser.add_argument(
        "--no-http", action="store_true", help="skip the HTTP throughput section (wrk)"
    )
    parser.add_argument(
        "--no-sandbox",
        action="store_true",
        help="skip the sandbox section (the same script tool with and without bubblewrap)",
    )
    parser.add_argument(
        "--no-js",
        action="store_true",
        help="skip the JavaScript plugin section (warm compartment tool, node -e, Python plugin)",
    )
    parser.add_argument(
        "--http-seconds",
        type=float,
        help="seconds of wrk load per HTTP target and concurrency (default 5, quick 2)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    args = parser.parse_args(argv)
    # 16 µs rows share the budget (36 s / 8 s for the 10 rows before the guarantee rows).
    args.seconds = args.seconds or (11.0 if args.quick else 46.0)
    args.rounds = max(1, args.rounds or (2 if args.quick else 5))
    args.script_samples = max(1, args.script_samples or (15 if args.quick else 30))
    args.bursts = max(1, args.bursts or 2)
    audit_calls = AUDIT_CALLS_QUICK if args.quick else AUDIT_CALLS
    args.audit_calls = max(1, args.audit_calls or audit_calls)
    args.http_seconds = args.http_seconds or (2.0 if args.quick else 5.0)
    return args


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _fastmcp_version() -> str | None:
    try:
        import fastmcp
    except ImportError:
        return None
    return str(fastmcp.__version__)


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


_HTTP_KEYS = {t.key for t in http_throughput.TARGETS} | {"sandbox", "js"}


def _select(only: str | None) -> list[Scenario]:
    if not only:
        return list(SCENARIOS)
    wanted = [k.strip() for k in only.split(",") if k.strip() and k.strip() not in _HTTP_KEYS]
    if not wanted:
        return []
    known = {s.key for s in SCENARIOS} | _HTTP_KEYS
    unknown = [k for k in wanted if k not in known]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {sorted(known)}")
    chosen = set(wanted)
    # A script row's overhead is relative to its bare spawn: measure that too.
    chosen |= {s.baseline for s in SCENARIOS if s.key in wanted and not s.batched and s.baseline}
    # The guarantee rows are read against the bare call_sync row.
    if any(s.baseline == "call_sync" for s in SCENARIOS if s.key in wanted):
        chosen.add("call_sync")
    # The µs rows' overheads are relative to the direct call: measure it whenever one runs.
    if any(s.batched for s in SCENARIOS if s.key in chosen):
        chosen.add("direct")
    return [s for s in SCENARIOS if s.key in chosen]


async def _run_all(
    scenarios: list[Scenario],
    budget: Budget,
    plan: ScriptPlan,
    rounds: int,
    fixtures: Fixtures,
    quiet: bool,
) -> tuple[dict[str, Samples], dict[str, str]]:
    samples = {s.key: Samples() for s in scenarios}
    problems: dict[str, str] = {}

    async def run(sc: Scenario) -> None:
        if sc.key in problems:
            return
        try:
            samples[sc.key].extend(await sc.run(Context(fixtures, budget, plan)))
        except Skip as exc:
            problems[sc.key] = f"skipped: {exc}"
        except Exception as exc:  # noqa: BLE001 - report it, run the other scenarios
            problems[sc.key] = f"FAILED: {type(exc).__name__}: {exc}"
            if not quiet:
                traceback.print_exc()

    rotated = [s for s in scenarios if s.timing != "throughput"]
    for r in range(rounds if rotated else 0):
        # Rotate the order each round so slow drift on a shared machine spreads over everyone.
        shift = r % len(rotated)
        order = rotated[shift:] + rotated[:shift]
        if not quiet:
            print(f"round {r + 1}/{rounds} …", file=sys.stderr, flush=True)
        for sc in order:
            await run(sc)
    # Throughput scenarios run once, after the rounds (their writer backlog is flushed inside).
    for sc in scenarios:
        if sc.timing == "throughput":
            if not quiet:
                print(f"{sc.key} ({plan.audit_calls:,} calls) …", file=sys.stderr, flush=True)
            await run(sc)
    return samples, problems


def _sandbox_section(*, calls: int, quiet: bool) -> list[str]:
    """The sandbox's cost per call (bench/sandbox_bench.py, in its own process)."""
    if not quiet:
        print(f"sandbox ({calls} calls each way) …", file=sys.stderr, flush=True)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("sandbox_bench.py")), "--calls", str(calls)],
        capture_output=True,
        text=True,
    )
    heading = "Sandbox: the same python3 script tool on the host and under bubblewrap, alternating"
    if done.returncode != 0:
        return ["", heading, f"  skipped: {(done.stderr or done.stdout).strip()[-300:]}"]
    return ["", heading, *("  " + line for line in done.stdout.strip().splitlines())]


def _js_section(*, calls: int, quiet: bool) -> list[str]:
    """JavaScript plugin tools (bench/js_bench.py, in its own process)."""
    if not quiet:
        print(f"javascript ({calls} calls) …", file=sys.stderr, flush=True)
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("js_bench.py")), "--calls", str(calls)],
        capture_output=True,
        text=True,
    )
    heading = (
        "JavaScript plugins: a warm SES-compartment tool, a bare node -e spawn, the Python plugin"
    )
    if done.returncode != 0:
        return ["", heading, f"  skipped: {(done.stderr or done.stdout).strip()[-300:]}"]
    return ["", heading, *("  " + line for line in done.stdout.strip("\n").splitlines())]


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.list:
        for s in SCENARIOS:
            print(
                f"{s.key:16} {s.group:9} {s.timing:8} {s.label}"
                + (f"  — {s.note}" if s.note else "")
            )
        for t in http_throughput.TARGETS:
            print(f"{t.key:16} {t.group:9} {'http':8} {t.label}  — wrk at 1 and 16 connections")
        return 0
    http_only = None
    if args.only:
        http_only = {k.strip() for k in args.only.split(",")} & (_HTTP_KEYS - {"sandbox", "js"})
    scenarios = _select(args.only)
    # The time budget is split over the µs (batched) rows only; script rows take a fixed number
    # of samples per round (plan), so adding them does not thin the other rows.
    batched = sum(1 for s in scenarios if s.batched)
    round_ns = int(args.seconds * 1e9 / (max(1, batched) * args.rounds))
    budget = Budget(round_ns=round_ns, warmup_ns=min(30_000_000, round_ns // 4))
    plan = ScriptPlan(samples=args.script_samples, bursts=args.bursts, audit_calls=args.audit_calls)

    fastmcp_version = _fastmcp_version()
    meta: dict[str, Any] = {
        "toolgate": toolgate.__version__,
        "fastmcp": fastmcp_version,
        "mcp": _version("mcp"),
        "jsonschema_rs": _version("jsonschema_rs") or _version("jsonschema-rs"),
        "pydantic": _version("pydantic"),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "load_before": _load(),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "round_ms_per_scenario": round(round_ns / 1e6, 1),
        "quick": args.quick,
    }
    if any(s.timing in ("single", "burst") for s in scenarios):
        meta["script"] = {
            "bash": describe_program("bash"),
            "python3": describe_program("python3"),
            "proc_scan": proc_scan(),
            "samples_per_round": plan.samples,
            "bursts_per_round": plan.bursts,
            "burst_size": BURST,
        }

    fixtures = Fixtures()
    started = time.perf_counter()
    try:
        samples, problems = asyncio.run(
            _run_all(scenarios, budget, plan, args.rounds, fixtures, quiet=args.json)
        )
    finally:
        fixtures.close()
    meta["wall_s"] = round(time.perf_counter() - started, 2)
    if fixtures.audit_logs:
        meta["audit_logs"] = fixtures.audit_logs
    if fixtures.idempotency_keys:
        meta["idempotency_keys"] = fixtures.idempotency_keys
    if fixtures.audit_throughput is not None:
        meta["audit_throughput"] = fixtures.audit_throughput
    if fixtures.audit_throughputs:
        meta["audit_throughputs"] = fixtures.audit_throughputs
    meta["load_after"] = _load()
    if fastmcp_version is not None and fastmcp_version != PINNED_FASTMCP:
        problems["fastmcp"] = (
            f"version {fastmcp_version} is not the pinned {PINNED_FASTMCP}; "
            + problems.get("fastmcp", "figures are not comparable with earlier runs")
        )

    results: dict[str, Summary] = {key: summarize(s) for key, s in samples.items() if s.per_call_ns}
    http_targets: list[http_throughput.Target] = []
    if not args.no_http and (not args.only or http_only):
        http_targets = http_throughput.run(args.http_seconds, http_only or None, quiet=args.json)
        for target in http_targets:
            if target.problem:
                problems[target.key] = target.problem
    sandbox_lines: list[str] = []
    if not args.no_sandbox and (not args.only or "sandbox" in args.only.split(",")):
        sandbox_lines = _sandbox_section(calls=40 if args.quick else 100, quiet=args.json)
    if not args.no_js and (not args.only or "js" in args.only.split(",")):
        sandbox_lines += _js_section(calls=100 if args.quick else 300, quiet=args.json)
    if args.json:
        document = to_json(meta, scenarios, results, problems)
        document["http"] = http_throughput.to_json(http_targets)
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        if scenarios:
            render(meta, scenarios, results, problems)
        if http_targets:
            print("\n".join(http_throughput.report(http_targets)))
        if sandbox_lines:
            print("\n".join(sandbox_lines))
    return 1 if any(p.startswith("FAILED") for p in problems.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
