"""Turn summaries into the table, the ratios, the goals, and the JSON document."""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass
from typing import Any

from _timing import Summary
from scenarios import BURST, BURST_SLEEP_S, Scenario

__all__ = [
    "GOAL_AUDIT_PER_S",
    "GOAL_BURST_MS",
    "GOAL_FULL_US",
    "GOAL_OVERHEAD_US",
    "GOAL_RATIO",
    "GOAL_SCRIPT_OVERHEAD_MS",
    "Goal",
    "Ratio",
    "goals",
    "ratios",
    "render",
    "to_json",
]

#: Median overhead over the direct call that `call_sync` and `await gateway.call` must stay under.
GOAL_OVERHEAD_US = 15.0
#: How many times slower the FastMCP in-memory client should be than our call.
GOAL_RATIO = 50.0
#: Median gateway overhead (gateway call − bare spawn) a python script tool must stay under.
GOAL_SCRIPT_OVERHEAD_MS = 2.0
#: Wall time a burst of BURST concurrent 100 ms bash script calls must stay under.
GOAL_BURST_MS = 1000.0
#: Median of a call_sync with every guarantee on (access, rate limit, idempotency, audit).
GOAL_FULL_US = 40.0
#: Audit records written per second, sustained (first call → flush end).
GOAL_AUDIT_PER_S = 20_000.0
#: The full pipeline on PostgreSQL + Redis at most this many times its median on SQLite.
GOAL_PG_RATIO = 3.0

#: The guarantee rows, each read against the bare call_sync row.
GUARANTEE_ROWS = (
    ("g_access", "access"),
    ("g_rate", "rate limit"),
    ("g_idem", "idempotency (fresh key)"),
    ("g_audit", "audit"),
)


@dataclass(frozen=True)
class Ratio:
    label: str
    numerator: str
    denominator: str
    value: float


@dataclass(frozen=True)
class Goal:
    label: str
    target: str
    value: float
    unit: str
    met: bool | None
    """``None`` when a scenario it needs did not run."""
    detail: str = ""


def _median(results: dict[str, Summary], key: str) -> float:
    summary = results.get(key)
    return math.nan if summary is None else summary.median_us


def overhead(results: dict[str, Summary], key: str, base: str = "direct") -> float:
    return _median(results, key) - _median(results, base)


def ratios(results: dict[str, Summary]) -> list[Ratio]:
    pairs = [
        ("FastMCP (sync tool) / await gateway.call (async tool)", "fastmcp", "gw_async"),
        ("FastMCP (sync tool) / call_sync (sync tool)", "fastmcp", "call_sync"),
        ("like-for-like: FastMCP async tool / await gateway.call", "fastmcp_async", "gw_async"),
        ("like-for-like: FastMCP run_in_thread=False / call_sync", "fastmcp_inline", "call_sync"),
    ]
    return [
        Ratio(label, num, den, _median(results, num) / _median(results, den))
        for label, num, den in pairs
        if num in results and den in results
    ]


def goals(results: dict[str, Summary], meta: dict[str, Any] | None = None) -> list[Goal]:
    out: list[Goal] = []
    for key, label in (
        ("call_sync", "call_sync (sync tool): median overhead"),
        ("gw_async", "await gateway.call (async tool): median overhead"),
    ):
        value = overhead(results, key)
        out.append(
            Goal(
                label,
                f"< {GOAL_OVERHEAD_US:g} µs",
                value,
                "µs",
                None if math.isnan(value) else value < GOAL_OVERHEAD_US,
            )
        )
    # Judged on the smaller of the two FastMCP figures (the brief's default sync tool and the
    # like-for-like variant), so a PASS holds whichever comparison one prefers.
    for ours, peers, label in (
        ("gw_async", ("fastmcp", "fastmcp_async"), "FastMCP / await gateway.call"),
        ("call_sync", ("fastmcp", "fastmcp_inline"), "FastMCP / call_sync"),
    ):
        candidates = [
            (_median(results, peer) / _median(results, ours), peer)
            for peer in peers
            if peer in results and ours in results
        ]
        if not candidates:
            out.append(Goal(label, f"≥ {GOAL_RATIO:g}×", math.nan, "×", None))
            continue
        value, peer = min(candidates)
        out.append(
            Goal(label, f"≥ {GOAL_RATIO:g}×", value, "×", value >= GOAL_RATIO, f"lowest: {peer}")
        )
    return out + guarantee_goals(results, meta or {}) + script_goals(results)


def guarantee_goals(results: dict[str, Summary], meta: dict[str, Any]) -> list[Goal]:
    """The full pipeline's median, and the sustained audit throughput."""
    value = _median(results, "g_full")
    out = [
        Goal(
            "call_sync, all four guarantees on: median",
            f"< {GOAL_FULL_US:g} µs",
            value,
            "µs",
            None if math.isnan(value) else value < GOAL_FULL_US,
            "access + rate limit + idempotency + audit",
        )
    ]
    seen = meta.get("audit_throughput")
    rate = math.nan if not seen else float(seen["written_per_s"])
    met = None if not seen else rate >= GOAL_AUDIT_PER_S and seen["lost"] == 0
    out.append(
        Goal(
            "sustained audit throughput: records written / s",
            f"≥ {GOAL_AUDIT_PER_S:,.0f}/s",
            rate,
            "/s",
            met,
            ""
            if not seen
            else f"{seen['written']:,} of {seen['calls']:,} written, lost {seen['lost']}",
        )
    )
    return out + shared_state_goals(results, meta)


def shared_state_goals(results: dict[str, Summary], meta: dict[str, Any]) -> list[Goal]:
    """Issue 12's goals: all four guarantees on PostgreSQL + Redis ≤ 3× their median on
    SQLite (same run), and ≥ 20,000 audit records/s written into PostgreSQL."""
    out: list[Goal] = []
    pg, sql = _median(results, "g_full_pg"), _median(results, "g_full_sql")
    if not (math.isnan(pg) or math.isnan(sql)):
        ratio = pg / sql
        out.append(
            Goal(
                "all four on PostgreSQL + Redis / on SQLite: medians",
                f"≤ {GOAL_PG_RATIO:g}×",
                ratio,
                "×",
                ratio <= GOAL_PG_RATIO,
                f"{pg:,.0f} µs vs {sql:,.0f} µs (durable audit in PostgreSQL)",
            )
        )
    seen = (meta.get("audit_throughputs") or {}).get("audit_rate_pg")
    if seen:
        rate = float(seen["written_per_s"])
        out.append(
            Goal(
                "sustained audit into PostgreSQL (COPY): records written / s",
                f"≥ {GOAL_AUDIT_PER_S:,.0f}/s",
                rate,
                "/s",
                rate >= GOAL_AUDIT_PER_S and seen["lost"] == 0,
                f"{seen['written']:,} of {seen['calls']:,} written, lost {seen['lost']}",
            )
        )
    return out


def script_goals(results: dict[str, Summary]) -> list[Goal]:
    """The script-tool goals, in ms: python gateway overhead, and the bursts' wall time."""
    value = overhead(results, "python_gw", "python_bare") / 1000
    out = [
        Goal(
            "python script tool: gateway overhead (median − bare median)",
            f"< {GOAL_SCRIPT_OVERHEAD_MS:g} ms",
            value,
            "ms",
            None if math.isnan(value) else value < GOAL_SCRIPT_OVERHEAD_MS,
        )
    ]
    for key, which in (("burst_gw", "default script_concurrency"), ("burst_gw64", "64")):
        value = _median(results, key) / 1000
        if which == "64":
            which = "script_concurrency=64"
        out.append(
            Goal(
                f"{BURST} concurrent {BURST_SLEEP_S * 1000:g} ms bash calls, {which}: wall",
                f"< {GOAL_BURST_MS:g} ms",
                value,
                "ms",
                None if math.isnan(value) else value < GOAL_BURST_MS,
                "median burst",
            )
        )
    return out


def _fmt(value: float, digits: int = 2) -> str:
    if math.isnan(value):
        return "—"
    return f"{value:,.{digits}f}"


def _fmt_signed(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:+,.2f}"


def _fmt_goal(goal: Goal) -> str:
    if goal.unit == "×":
        return f"{_fmt(goal.value, 1)}×"
    if goal.unit == "/s":
        return f"{_fmt(goal.value, 0)}/s"
    return f"{_fmt(goal.value, 2)} {goal.unit}"


def _verdict(goal: Goal) -> str:
    return "n/a" if goal.met is None else ("PASS" if goal.met else "MISS")


@dataclass
class Rows:
    header: list[str]
    body: list[list[str]]
    groups: list[str]
    """Per row: a section starts where this changes."""
    bold: list[bool]
    """Per row: printed in bold (toolgate's own rows)."""


def _rows(scenarios: list[Scenario], results: dict[str, Summary]) -> Rows:
    header = [
        "#",
        "scenario",
        "median µs",
        "p95 µs",
        "overhead µs",
        "vs own baseline µs",
        "batches × calls",
    ]
    body: list[list[str]] = []
    groups: list[str] = []
    bold: list[bool] = []
    for index, sc in enumerate(scenarios, 1):
        s = results.get(sc.key)
        if s is None or not sc.batched:
            continue
        shows_overhead = sc.overhead and sc.key != "direct"
        over = _fmt_signed(overhead(results, sc.key)) if shows_overhead else ""
        own = ""
        if sc.baseline is not None and sc.baseline != "direct" and sc.baseline in results:
            own = f"{_fmt_signed(overhead(results, sc.key, sc.baseline))} vs {sc.baseline}"
        sizes = str(s.batch_min) if s.batch_min == s.batch_max else f"{s.batch_min}–{s.batch_max}"
        body.append(
            [
                str(index),
                sc.label,
                _fmt(s.median_us),
                _fmt(s.p95_us),
                over,
                own,
                f"{s.batches} × {sizes}",
            ]
        )
        groups.append(sc.group)
        bold.append(sc.group == "toolgate")
    return Rows(header, body, groups, bold)


def _root(sc: Scenario) -> str:
    return sc.baseline or sc.key


def _script_rows(scenarios: list[Scenario], results: dict[str, Summary]) -> Rows:
    """The script-tool rows, in ms; sections (``groups``) by the bare spawn they compare with."""
    header = ["#", "script tools", "median ms", "p95 ms", "min ms", "vs bare ms", "samples"]
    # "vs bare ms": median − the median of the section's bare spawn (the row's baseline).
    body: list[list[str]] = []
    groups: list[str] = []
    bold: list[bool] = []
    for index, sc in enumerate(scenarios, 1):
        s = results.get(sc.key)
        if s is None or sc.timing not in ("single", "burst"):
            continue
        own = ""
        if sc.baseline is not None and sc.baseline in results:
            own = _fmt_signed(overhead(results, sc.key, sc.baseline) / 1000)
        samples = f"{s.batches} × {s.batch_max}" if sc.timing == "burst" else str(s.batches)
        body.append(
            [
                str(index),
                sc.label,
                _fmt(s.median_us / 1000),
                _fmt(s.p95_us / 1000),
                _fmt(s.min_us / 1000),
                own,
                samples,
            ]
        )
        groups.append(_root(sc))
        bold.append(sc.group == "toolgate")
    return Rows(header, body, groups, bold)


def _program_text(info: dict[str, Any]) -> str:
    if info.get("path") is None:
        return f"{info['name']}: not on PATH"
    shown = info["path"] if info["real"] == info["path"] else f"{info['path']} → {info['real']}"
    verdict = "a shim: every call also runs it" if info.get("shim") else "not a shim"
    return f"{info['name']} = {shown} ({info['kind']}, {verdict})"


def _script_intro(meta: dict[str, Any]) -> list[str]:
    script = meta.get("script")
    if not script:
        return []
    scan = script.get("proc_scan")
    scan_text = (
        f"One /proc scan here: {scan['median_ms']:.2f} ms over {scan['processes']} processes "
        "(the process runner makes at least one per call)."
        if scan
        else "No /proc here."
    )
    return [
        "",
        "Script tools (tool folders), one child process per call. Sample = one call "
        f"({script['samples_per_round']} per round)",
        f"or, for the × {script['burst_size']} rows, the wall time of {script['burst_size']} "
        f"concurrent calls of a bash script that sleeps {BURST_SLEEP_S:g} s "
        f"({script['bursts_per_round']} per round).",
        "bare spawn = create_subprocess_exec(program, script, stdin=PIPE, stdout=PIPE) + "
        "communicate(json) + json.loads,",
        "  with the gateway's program, script, stdin, environment and cwd.  "
        "vs bare = median − the bare spawn's median.",
        _program_text(script["bash"]),
        _program_text(script["python3"]),
        scan_text,
    ]


def _guarantee_lines(results: dict[str, Summary], meta: dict[str, Any]) -> list[str]:
    """Each stage's overhead over call_sync, their sum beside the full pipeline, the audit logs'
    counts, and the sustained audit throughput."""
    out: list[str] = []
    if "call_sync" in results and any(key in results for key, _ in GUARANTEE_ROWS):
        parts = [
            (name, overhead(results, key, "call_sync"))
            for key, name in GUARANTEE_ROWS
            if key in results
        ]
        out.append(
            "Guarantee stages over call_sync: "
            + ", ".join(f"{name} {_fmt_signed(value)} µs" for name, value in parts)
        )
        extra = []
        if "g_idem_replay" in results:
            extra.append(
                "idempotency replay "
                f"{_fmt_signed(overhead(results, 'g_idem_replay', 'call_sync'))} µs"
            )
        if len(parts) == len(GUARANTEE_ROWS):
            extra.append(f"sum of the four {_fmt_signed(sum(v for _, v in parts))} µs")
        if "g_full" in results:
            extra.append(
                f"all four on {_fmt_signed(overhead(results, 'g_full', 'call_sync'))} µs "
                f"(median {_fmt(_median(results, 'g_full'))} µs)"
            )
        if extra:
            out.append("  " + "; ".join(extra))
    logs = meta.get("audit_logs") or {}
    if logs:
        out.append(
            "  their audit logs (flushed untimed after each round): "
            + "; ".join(
                f"{variant}: {v['written']:,} written, {v['lost']} lost"
                + ("" if v["healthy"] else f", UNHEALTHY ({v['last_error']})")
                for variant, v in logs.items()
            )
        )
    keys = meta.get("idempotency_keys") or {}
    if keys:
        out.append(
            "  idempotency keys in the in-memory stores at the end (24 h window; expired keys "
            "leave a heap): " + ", ".join(f"{variant} {count:,}" for variant, count in keys.items())
        )
    seen = meta.get("audit_throughput")
    if seen:
        out.append(
            f"Sustained audit (audit_rate): {seen['calls']:,} × call_sync (GC on), then flush: "
            f"{seen['written']:,} written, {seen['lost']} lost in {seen['total_s']:.2f} s "
            f"= {seen['written_per_s']:,.0f} records/s"
        )
        out.append(
            f"  calls {seen['calls_s']:.2f} s ({seen['calls_per_s']:,.0f} calls/s, "
            f"{seen['backlog_after_calls']:,} still queued at the last call) + flush wait "
            f"{seen['flush_s']:.2f} s" + ("" if seen["flushed"] else "  — FLUSH TIMED OUT")
        )
    for key, pg in (meta.get("audit_throughputs") or {}).items():
        out.append(
            f"Audit into PostgreSQL ({key}): {pg['calls']:,} calls, {pg['written']:,} written, "
            f"{pg['lost']} lost in {pg['total_s']:.2f} s = {pg['written_per_s']:,.0f} records/s"
            + ("" if pg["flushed"] else "  — FLUSH TIMED OUT")
        )
    return out


def _script_lines(results: dict[str, Summary]) -> list[str]:
    """The split of the bash overhead between the process runner and the rest of the gateway."""
    if not all(k in results for k in ("bash_gw", "bash_runner", "bash_bare")):
        return []
    gw = overhead(results, "bash_gw", "bash_bare") / 1000
    runner = overhead(results, "bash_runner", "bash_bare") / 1000
    return [
        f"  bash: gateway overhead {_fmt_signed(gw)} ms = run_process over a bare spawn "
        f"{_fmt_signed(runner)} ms + pipeline and script backend {_fmt_signed(gw - runner)} ms"
    ]


def render(
    meta: dict[str, Any],
    scenarios: list[Scenario],
    results: dict[str, Summary],
    problems: dict[str, str],
) -> None:
    """Print the report to stdout, with Rich when it is installed."""
    rows = _rows(scenarios, results)
    script_rows = _script_rows(scenarios, results)
    script_intro = _script_intro(meta) if script_rows.body else []
    script_lines = _script_lines(results)
    guarantee_lines = _guarantee_lines(results, meta)
    the_ratios = ratios(results)
    the_goals = goals(results, meta)
    intro = [
        f"toolgate {meta['toolgate']} · fastmcp {meta['fastmcp'] or 'not installed'} · "
        f"mcp {meta['mcp'] or '—'} · jsonschema_rs {meta['jsonschema_rs']} · "
        f"pydantic {meta['pydantic']} · {meta['implementation']} {meta['python']}",
        f"{meta['platform']}, {meta['cpus']} CPUs, load avg {meta['load_before']} → "
        f"{meta['load_after']} · {meta['rounds']} interleaved rounds, {meta['seconds']:g} s "
        f"timing budget, wall {meta['wall_s']:.1f} s",
        "sample = batch time / batch size (GC disabled inside each batch); median and p95 are "
        "over those per-batch figures.",
        "overhead = scenario median − direct-call median.  Goals: overhead < "
        f"{GOAL_OVERHEAD_US:g} µs, FastMCP ≥ {GOAL_RATIO:g}× slower.",
        "call_sync + … rows: vs own baseline = median − call_sync median.  Goals: all four on "
        f"< {GOAL_FULL_US:g} µs median, audit ≥ {GOAL_AUDIT_PER_S:,.0f} records/s.",
    ]
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ImportError:  # plain text
        _render_plain(
            intro,
            rows,
            the_ratios,
            guarantee_lines,
            (script_intro, script_rows, script_lines),
            the_goals,
            problems,
        )
        return

    console = Console(width=None if sys.stdout.isatty() else 140)
    for line in intro:
        console.print(line, highlight=False, markup=False)
    if rows.body:
        console.print(_rich_table(Table, escape, rows))
    for ratio in the_ratios:
        console.print(f"  {ratio.label}: [bold]{_fmt(ratio.value, 1)}×[/bold]", highlight=False)
    for line in guarantee_lines:
        console.print(line, highlight=False, markup=False)
    if script_rows.body:
        for line in script_intro:
            console.print(line, highlight=False, markup=False)
        console.print(_rich_table(Table, escape, script_rows))
        for line in script_lines:
            console.print(line, highlight=False, markup=False)
    console.print("Goals (informational; the exit code does not depend on them):")
    for goal in the_goals:
        verdict = _verdict(goal)
        colour = {"PASS": "green", "MISS": "red"}.get(verdict, "yellow")
        extra = f"  ({goal.detail})" if goal.detail else ""
        console.print(
            f"  [{colour}]{verdict:4}[/{colour}]  {escape(goal.label)} = "
            f"{_fmt_goal(goal)}, "
            f"goal {goal.target}{extra}",
            highlight=False,
        )
    for key, text in problems.items():
        console.print(f"  [yellow]{key}[/yellow]: {escape(text)}", highlight=False)


def _rich_table(table_type: Any, escape: Any, rows: Rows) -> Any:
    """A Rich table of ``rows``, a section per change of group."""
    table = table_type(show_lines=False)
    for i, name in enumerate(rows.header):
        table.add_column(name, justify="left" if i == 1 else "right", no_wrap=True)
    previous = None
    for group, row, bold in zip(rows.groups, rows.body, rows.bold, strict=True):
        if previous is not None and group != previous:
            table.add_section()
        table.add_row(*map(escape, row), style="bold" if bold else None)
        previous = group
    return table


def _print_plain_table(rows: Rows) -> None:
    if not rows.body:
        return
    widths = [max(len(r[i]) for r in [rows.header, *rows.body]) for i in range(len(rows.header))]
    for row in [rows.header, *rows.body]:
        print(
            "  ".join(
                c.ljust(w) if i == 1 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )


def _render_plain(
    intro: list[str],
    rows: Rows,
    the_ratios: list[Ratio],
    guarantee_lines: list[str],
    script: tuple[list[str], Rows, list[str]],
    the_goals: list[Goal],
    problems: dict[str, str],
) -> None:
    print("\n".join(intro))
    _print_plain_table(rows)
    for ratio in the_ratios:
        print(f"  {ratio.label}: {_fmt(ratio.value, 1)}×")
    for line in guarantee_lines:
        print(line)
    script_intro, script_rows, script_lines = script
    if script_rows.body:
        print("\n".join([*script_intro]))
        _print_plain_table(script_rows)
        for line in script_lines:
            print(line)
    print("Goals (informational; the exit code does not depend on them):")
    for goal in the_goals:
        extra = f"  ({goal.detail})" if goal.detail else ""
        print(f"  {_verdict(goal):4}  {goal.label} = {_fmt_goal(goal)}, goal {goal.target}{extra}")
    for key, text in problems.items():
        print(f"  {key}: {text}")


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def to_json(
    meta: dict[str, Any],
    scenarios: list[Scenario],
    results: dict[str, Summary],
    problems: dict[str, str],
) -> dict[str, Any]:
    rows = []
    for sc in scenarios:
        s = results.get(sc.key)
        row: dict[str, Any] = {
            "key": sc.key,
            "label": sc.label,
            "group": sc.group,
            "baseline": sc.baseline,
            "note": sc.note,
            "timing": sc.timing,
        }
        if s is None:
            row["problem"] = problems.get(sc.key, "did not run")
        else:
            row.update({k: _number(v) if isinstance(v, float) else v for k, v in asdict(s).items()})
            row["overhead_us"] = (
                _number(overhead(results, sc.key)) if sc.overhead and sc.key != "direct" else None
            )
            if sc.baseline is not None and sc.baseline in results:
                row["vs_baseline_us"] = _number(overhead(results, sc.key, sc.baseline))
        rows.append(row)
    return {
        "meta": meta,
        "method": {
            "sample": "batch time / batch size (ns per call), one sample per batch",
            "statistics": "median and p95 (linear interpolation) over the samples, in µs",
            "overhead": "scenario median − direct-call median",
            "gc": "disabled inside each timed batch, collected before each scenario round",
            "script_rows": (
                "timing 'single': one sample = one call (batch size 1); timing 'burst': one "
                f"sample = wall time of {BURST} concurrent calls (batch size {BURST}); "
                "vs_baseline_us = median − the bare spawn's median; overhead_us is null"
            ),
            "throughput_rows": (
                "timing 'throughput': run once after the rounds; one sample = (first call → "
                "audit flush end) / records written; details in meta.audit_throughput"
            ),
        },
        "scenarios": rows,
        "ratios": [{**asdict(r), "value": _number(r.value)} for r in ratios(results)],
        "goals": [{**asdict(g), "value": _number(g.value)} for g in goals(results, meta)],
    }
