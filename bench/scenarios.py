"""The scenarios: one ``async`` function each, registered with ``@scenario``, returning samples.

A scenario function receives a :class:`Context` (shared fixtures plus the timing budget for this
round) and returns :class:`~_timing.Samples` from ``ctx.budget.measure(call)`` (synchronous
calls) or ``await ctx.budget.measure_async(call)`` (awaited calls). It is called once per round,
inside one running event loop; it sets up whatever it needs (and checks once that the call really
works) before timing, and tears it down after. Raise :class:`Skip` when it cannot run here.

Script-tool scenarios (``timing="single"`` / ``"burst"``) take milliseconds per call: they are
timed one call (or one burst of concurrent calls) per sample with :func:`~_timing.time_each_async`,
a fixed number of samples per round (``ctx.plan``), outside the µs time budget; the report shows
them in a table of their own, in ms, beside a bare spawn of the same script.

To add a scenario (audit, HTTP…), write one more function below::

    @scenario("gw_audit", "await gateway.call, audit on", group="toolgate", baseline="gw_async")
    async def gw_audit(ctx: Context) -> Samples:
        ...
        return await ctx.budget.measure_async(lambda: gateway.call("bench:add_async", ARGS))
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from itertools import repeat
from pathlib import Path
from time import perf_counter_ns
from typing import Any, Literal

from _timing import Budget, Samples, time_each_async
from toolgate import AccessSettings, AuditSettings, Gateway, GatewaySettings, StateSettings, tool
from toolgate.backends.environment import SAFE_SYSTEM_VARIABLES
from toolgate.model.policy import AccessPolicy, PolicyAction, PolicyRule
from toolgate.pipeline.concurrency import DEFAULT_RUNNING, ConcurrencySettings
from toolgate.python import FunctionTool

__all__ = [
    "ARGS",
    "AUDIT_CALLS",
    "AUDIT_CALLS_QUICK",
    "BURST",
    "GUARANTEE_VARIANTS",
    "SCENARIOS",
    "Context",
    "Fixtures",
    "Scenario",
    "ScriptPlan",
    "Skip",
    "describe_program",
    "proc_scan",
    "scenario",
]

ARGS: dict[str, int] = {"a": 1, "b": 2}
EXPECTED = 3
#: Calls of the sustained audit-throughput scenario (default run, and with ``--quick``).
AUDIT_CALLS = 50_000
AUDIT_CALLS_QUICK = 20_000

Group = Literal["baseline", "toolgate", "peer"]
Timing = Literal["batched", "single", "burst", "throughput"]
"""``batched``: µs calls timed in batches over the time budget (the main table). ``single``: one
call per sample (script tools). ``burst``: one sample = the wall time of BURST concurrent calls.
``throughput``: run once, after the rounds; one sample = wall time / records (its own section)."""


@tool(namespace="bench")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(namespace="bench")
async def add_async(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


#: The undecorated functions: what the direct-call baselines and FastMCP get.
plain_add: Callable[..., int] = add.func
plain_add_async: Callable[..., Awaitable[int]] = add_async.func


class Skip(Exception):
    """This scenario cannot run in this environment (e.g. the peer is not installed)."""


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    group: Group
    run: Callable[[Context], Awaitable[Samples]]
    baseline: str | None = None
    """Key of the scenario this one is best compared with (besides the direct call)."""
    note: str = ""
    overhead: bool = True
    """Whether "median − direct-call median" means anything (not for a component on its own)."""
    timing: Timing = "batched"

    @property
    def batched(self) -> bool:
        return self.timing == "batched"


SCENARIOS: list[Scenario] = []


def scenario(
    key: str,
    label: str,
    *,
    group: Group,
    baseline: str | None = None,
    note: str = "",
    overhead: bool = True,
    timing: Timing = "batched",
) -> Callable[[Callable[[Context], Awaitable[Samples]]], Callable[[Context], Awaitable[Samples]]]:
    """Register a scenario function; the table lists them in registration order."""

    def register(
        func: Callable[[Context], Awaitable[Samples]],
    ) -> Callable[[Context], Awaitable[Samples]]:
        if any(s.key == key for s in SCENARIOS):
            raise ValueError(f"duplicate scenario key {key!r}")
        # Script rows compare with their bare baseline, never with the direct call.
        vs_direct = overhead and timing == "batched"
        SCENARIOS.append(Scenario(key, label, group, func, baseline, note, vs_direct, timing))
        return func

    return register


class Fixtures:
    """Objects shared by every round: built once, on first use."""

    def __init__(self) -> None:
        self._script_gateways: dict[int | None, Gateway] = {}
        self._script_tmp: tempfile.TemporaryDirectory[str] | None = None
        self._guarantee_gateways: dict[str, Gateway] = {}
        self._state_tmp: tempfile.TemporaryDirectory[str] | None = None
        self.fresh_a = itertools.count(1_000_000)
        """``args.a`` of the calls that need a new idempotency key (never 1: ARGS keeps its key)."""
        self.audit_logs: dict[str, dict[str, Any]] = {}
        """Per audited variant: records written and lost, after each round (see settle)."""
        self.idempotency_keys: dict[str, int] = {}
        """Per idempotency variant: keys held by its in-memory store after the last round."""
        self.audit_throughput: dict[str, Any] | None = None
        """What the sustained-audit scenario saw (calls, written, lost, times)."""
        self.audit_throughputs: dict[str, dict[str, Any]] = {}
        """What the sustained-audit scenarios into PostgreSQL saw, by scenario key."""

    @cached_property
    def gateway(self) -> Gateway:
        gateway = Gateway()
        gateway.add(add, add_async)
        return gateway

    @cached_property
    def otel_gateway(self) -> Gateway:
        """The same tools with OpenTelemetry on: SDK providers, spans batched to an exporter that
        discards them (the collector's network is not what is measured), metrics recorded."""
        try:
            from opentelemetry.sdk.metrics import MeterProvider
            from opentelemetry.sdk.metrics.export import InMemoryMetricReader
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import (
                BatchSpanProcessor,
                SpanExporter,
                SpanExportResult,
            )

            from toolgate.telemetry.otel import OtelTelemetry
        except ImportError as exc:
            missing = f"OpenTelemetry is not installed (pip install -e '.[otel]'): {exc}"
            raise Skip(missing) from None

        class Discard(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
        meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        gateway = Gateway(
            telemetry=OtelTelemetry(
                tracer_provider=tracer_provider, meter_provider=meter_provider, owned=True
            )
        )
        gateway.add(add, add_async)
        return gateway

    @cached_property
    def fastmcp(self) -> Any:
        try:
            import fastmcp
        except ImportError as exc:  # the `bench` extra is not installed
            raise Skip(f"fastmcp is not installed ({exc}); pip install -e '.[bench]'") from None
        return fastmcp

    @cached_property
    def fastmcp_server(self) -> Any:
        server = self.fastmcp.FastMCP("bench")
        server.tool(plain_add, name="add")  # default: a sync tool runs in a worker thread
        server.tool(plain_add, name="add_inline", run_in_thread=False)
        server.tool(plain_add_async, name="add_async")
        return server

    # -- guarantees (access, rate limit, idempotency, audit): one gateway per variant -----------

    @cached_property
    def state_dir(self) -> Path:
        """A temporary directory for the audit databases."""
        self._state_tmp = tempfile.TemporaryDirectory(prefix="toolgate-bench-state-")
        return Path(self._state_tmp.name)

    def guarantee_gateway(self, variant: str) -> Gateway:
        """The gateway of one GUARANTEE_VARIANTS entry, built on first use and kept."""
        gateway = self._guarantee_gateways.get(variant)
        if gateway is not None:
            return gateway
        func, options, expected = GUARANTEE_VARIANTS[variant]
        audit_path = self.state_dir / f"audit-{variant}.db" if options.get("audit") else None
        state_path = self.state_dir / f"state-{variant}.db" if options.get("state") else None
        database = None
        if options.get("postgres"):
            from toolgate.stores.postgres_db import PostgresDatabase

            database = PostgresDatabase(self.postgres_url)
        settings = GatewaySettings(
            access=AccessSettings(policies=tuple(options.get("policies", ()))),
            audit=AuditSettings(path=audit_path),
            state=StateSettings(
                path=state_path, redis_url=self.redis_url if options.get("redis") else None
            ),
        )
        gateway = Gateway(settings, state_database=database)
        self._guarantee_gateways[variant] = gateway
        gateway.add(func)
        # Make sure the scenario measures what it says: the stages it adds, and an inline plan.
        entry = gateway.registry.get(func.tool.id)
        assert entry is not None
        applied = [s.name for s in gateway.pipeline.stages if s.applies_to(entry)]
        # Every tool has argument validation and its own concurrency slots (issue 24).
        if set(applied) != {"validate_arguments", "concurrency", *expected}:
            raise RuntimeError(
                f"{variant}: stages {applied}, expected validation + concurrency + {expected}"
            )
        if not gateway.pipeline.plan_for(entry).inline:
            raise RuntimeError(f"{variant}: call_sync would not run {func.tool.id} inline")
        return gateway

    @cached_property
    def postgres_url(self) -> str:
        """A database made for this run at the current schema (dropped by :meth:`close`), on
        the server of ``TOOLGATE_BENCH_POSTGRES`` (default: the local one, database ``test``)."""
        try:
            import psycopg

            from toolgate.stores.postgres_db import PostgresDatabase
            from toolgate.stores.postgres_schema import upgrade
        except ImportError as exc:
            raise Skip(f"pip install -e '.[postgres]' ({exc})") from None
        admin_url = os.environ.get(
            "TOOLGATE_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
        )
        try:
            admin = psycopg.connect(admin_url, autocommit=True, connect_timeout=3)
        except psycopg.OperationalError as exc:
            raise Skip(f"PostgreSQL does not answer at {admin_url}: {exc}") from None
        name = f"toolgate_bench_{os.getpid()}"
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        self._postgres_admin = admin
        self._postgres_name = name
        url = admin_url.rpartition("/")[0] + "/" + name
        db = PostgresDatabase(url)
        upgrade(db)
        db.close()
        return url

    @cached_property
    def redis_url(self) -> str:
        """The Redis of ``TOOLGATE_BENCH_REDIS`` (default: the local one)."""
        url = os.environ.get("TOOLGATE_BENCH_REDIS", "redis://127.0.0.1:6379/0")
        try:
            import redis

            redis.Redis.from_url(url, socket_connect_timeout=2).ping()
        except ImportError as exc:
            raise Skip(f"pip install -e '.[redis]' ({exc})") from None
        except redis.RedisError as exc:
            raise Skip(f"Redis does not answer at {url}: {exc}") from None
        return url

    def settle(self, variant: str) -> None:
        """After a round (untimed): wait until the variant's audit log has written its backlog,
        and note its counts and how many idempotency keys its store holds."""
        gateway = self.guarantee_gateway(variant)
        # Private, read for the report only: how many keys the in-memory store holds (they
        # expire from a heap, so its per-call cost grows only slowly with them).
        stage = getattr(gateway, "_idempotency", None)
        records = getattr(getattr(stage, "store", None), "_records", None)
        if records is not None and GUARANTEE_VARIANTS[variant][0].tool.idempotency.key_template:
            self.idempotency_keys[variant] = len(records)
        log = gateway.audit
        if log is None:
            return
        flushed = log.flush(60.0)
        self.audit_logs[variant] = {
            "written": log.written,
            "lost": log.lost,
            "flushed": flushed,
            "healthy": log.healthy,
            "last_error": log.last_error,
        }

    # -- script tools (tool folders written to a temporary directory) ----------------------------

    @cached_property
    def script_root(self) -> Path:
        self._script_tmp = tempfile.TemporaryDirectory(prefix="toolgate-bench-")
        root = Path(self._script_tmp.name) / "tools"
        for name, (runtime, script, source) in SCRIPT_TOOLS.items():
            _write_tool_folder(root, name, runtime, script, source)
        return root

    def script_gateway_with(self, concurrency: int | None) -> Gateway:
        """A gateway over the bench's tool folders (``None``: the default script_concurrency)."""
        gateway = self._script_gateways.get(concurrency)
        if gateway is None:
            gateway = (
                Gateway(tool_folders=[self.script_root])
                if concurrency is None
                else Gateway(
                    GatewaySettings(concurrency=ConcurrencySettings(scripts_running=concurrency)),
                    tool_folders=[self.script_root],
                )
            )
            self._script_gateways[concurrency] = gateway
            missing = [n for n in SCRIPT_TOOLS if f"local:{n}" not in gateway.registry]
            if missing:
                problems = "; ".join(str(d) for d in gateway.diagnostics()) or "no diagnostics"
                raise RuntimeError(f"tool folders {missing} did not load: {problems}")
        return gateway

    @cached_property
    def script_env(self) -> dict[str, str]:
        """What the gateway gives a script that declares no variables: the safe system ones."""
        return {
            name: os.environ[name]
            for name in SAFE_SYSTEM_VARIABLES
            if name in os.environ and not os.environ[name].startswith("()")
        }

    @cached_property
    def script_cwd(self) -> Path:
        return Path.cwd()

    @cached_property
    def script_payload(self) -> bytes:
        """The stdin the gateway writes for ``SCRIPT_ARGS``, so the bare spawn sends the same."""
        payload = {**SCRIPT_ARGS, "workspacePath": str(self.script_cwd), "sessionId": "default"}
        return json.dumps(payload).encode("utf-8")

    def program(self, name: str) -> str:
        """The program the gateway runs for a runtime: looked up on the scripts' PATH."""
        found = shutil.which(name, path=self.script_env.get("PATH", os.defpath))
        if found is None:
            raise Skip(f"{name} is not on PATH")
        return found

    def close(self) -> None:
        if "gateway" in self.__dict__:
            self.gateway.close()
        if "otel_gateway" in self.__dict__:
            self.otel_gateway.close()
        for gateway in self._script_gateways.values():
            gateway.close()
        for gateway in self._guarantee_gateways.values():
            gateway.close()
        if self._script_tmp is not None:
            self._script_tmp.cleanup()
        if self._state_tmp is not None:
            self._state_tmp.cleanup()
        admin = getattr(self, "_postgres_admin", None)
        if admin is not None:
            admin.execute(f'DROP DATABASE IF EXISTS "{self._postgres_name}" WITH (FORCE)')
            admin.close()


@dataclass(frozen=True)
class ScriptPlan:
    """How many samples the script-tool scenarios take per round (they ignore the time budget)."""

    samples: int = 30
    """Single calls timed per scenario and round (after ``warmup`` untimed ones)."""
    bursts: int = 2
    """Bursts of ``BURST`` concurrent calls timed per burst scenario and round."""
    warmup: int = 3
    audit_calls: int = AUDIT_CALLS
    """Calls of the sustained-audit scenario (``throughput`` timing), run once."""


@dataclass
class Context:
    fixtures: Fixtures
    budget: Budget
    plan: ScriptPlan = field(default_factory=ScriptPlan)


def _plain(value: Any) -> Any:
    """A frozen schema (mapping proxies, tuples) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _check_outcome(outcome: Any) -> None:
    if not outcome.ok or outcome.content != EXPECTED:
        raise RuntimeError(f"gateway call did not return {EXPECTED}: {outcome!r}")


def _check_value(value: Any) -> None:
    if value != EXPECTED:
        raise RuntimeError(f"expected {EXPECTED}, got {value!r}")


# -- baselines ----------------------------------------------------------------------------------


@scenario("direct", "direct call add(a=1, b=2)", group="baseline")
async def direct(ctx: Context) -> Samples:
    func = plain_add
    _check_value(func(a=1, b=2))
    return ctx.budget.measure(lambda: func(a=1, b=2))


@scenario(
    "to_thread",
    "asyncio.to_thread(add, a=1, b=2)",
    group="baseline",
    note="bare worker-thread hop (default executor); baseline for the sync tool via async API",
)
async def to_thread(ctx: Context) -> Samples:
    func = plain_add
    _check_value(await asyncio.to_thread(func, a=1, b=2))
    return await ctx.budget.measure_async(lambda: asyncio.to_thread(func, a=1, b=2))


@scenario(
    "jsonschema",
    "jsonschema_rs is_valid(args)",
    group="baseline",
    note="the argument check alone: compiled validator for add's input schema",
    overhead=False,
)
async def jsonschema(ctx: Context) -> Samples:
    import jsonschema_rs

    schema = _plain(ctx.fixtures.gateway.get_tool("bench:add").input_schema)
    validator = jsonschema_rs.validator_for(schema)
    if not validator.is_valid(ARGS):
        raise RuntimeError("the benchmark arguments do not match add's schema")
    is_valid = validator.is_valid
    return ctx.budget.measure(lambda: is_valid(ARGS))


# -- toolgate -----------------------------------------------------------------------------------


@scenario(
    "call_sync",
    "gateway.call_sync  (sync tool)",
    group="toolgate",
    baseline="direct",
    note="runs inline in the calling thread, no event loop",
)
async def call_sync(ctx: Context) -> Samples:
    call = ctx.fixtures.gateway.call_sync
    _check_outcome(call("bench:add", ARGS))
    return ctx.budget.measure(lambda: call("bench:add", ARGS))


@scenario(
    "gw_async",
    "await gateway.call  (async tool)",
    group="toolgate",
    baseline="direct",
    note="awaited on the caller's loop",
)
async def gw_async(ctx: Context) -> Samples:
    call = ctx.fixtures.gateway.call
    _check_outcome(await call("bench:add_async", ARGS))
    return await ctx.budget.measure_async(lambda: call("bench:add_async", ARGS))


@scenario(
    "otel_sync",
    "gateway.call_sync  (sync tool, OpenTelemetry on)",
    group="toolgate",
    baseline="call_sync",
    note="spans and metrics recorded; spans batched to a discarding exporter",
)
async def otel_sync(ctx: Context) -> Samples:
    call = ctx.fixtures.otel_gateway.call_sync
    _check_outcome(call("bench:add", ARGS))
    return ctx.budget.measure(lambda: call("bench:add", ARGS))


@scenario(
    "otel_async",
    "await gateway.call  (async tool, OpenTelemetry on)",
    group="toolgate",
    baseline="gw_async",
    note="spans and metrics recorded; spans batched to a discarding exporter",
)
async def otel_async(ctx: Context) -> Samples:
    call = ctx.fixtures.otel_gateway.call
    _check_outcome(await call("bench:add_async", ARGS))
    return await ctx.budget.measure_async(lambda: call("bench:add_async", ARGS))


@scenario(
    "gw_async_sync",
    "await gateway.call  (sync tool)",
    group="toolgate",
    baseline="to_thread",
    note="pays a worker-thread hop, like asyncio.to_thread",
)
async def gw_async_sync(ctx: Context) -> Samples:
    call = ctx.fixtures.gateway.call
    _check_outcome(await call("bench:add", ARGS))
    return await ctx.budget.measure_async(lambda: call("bench:add", ARGS))


@scenario(
    "call_sync_async",
    "gateway.call_sync  (async tool)",
    group="toolgate",
    baseline="direct",
    note="hops to the gateway's private loop thread and back",
)
async def call_sync_async(ctx: Context) -> Samples:
    call = ctx.fixtures.gateway.call_sync
    _check_outcome(call("bench:add_async", ARGS))
    return ctx.budget.measure(lambda: call("bench:add_async", ARGS))


# -- guarantees: each stage on its own, then all of them (sync tool, call_sync) -----------------
#
# Every variant is its own gateway (a policy or an audit log applies gateway-wide) holding one
# tool, ``bench:<name>``, the same function as ``add``. Calls pass ``agent=GUARANTEE_AGENT`` (the
# access rules need a caller). Rate limits and idempotency use the in-memory stores (no
# ``state_path``); the audit log writes to a SQLite file in a temporary directory.

GUARANTEE_AGENT = "bench-agent"
#: Never reached: the rate-limit stage counts every call but never refuses one.
HUGE_PER_MINUTE = 10**12
#: The idempotency key template: over both arguments, so a fresh ``a`` makes a fresh key.
IDEMPOTENCY_KEY = "{{ args.a }}-{{ args.b }}"
#: A policy that is evaluated for every call and never matches the bench tools.
OTHER_NAMESPACE_POLICY = AccessPolicy(
    "bench-deny-other",
    rules=(PolicyRule(when={"tool.namespace": ("other",)}, action=PolicyAction.DENY),),
)

# The audited tools are declared ``external_write`` with approval waived by the tool itself, so
# that the audit guard stage applies too (below that level a call does not depend on the log's
# health) and no approval stage is added.


@tool(namespace="bench", allowed_agents=[GUARANTEE_AGENT])
def add_access(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(namespace="bench", calls_per_minute=HUGE_PER_MINUTE)
def add_rate(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(namespace="bench", idempotency_key=IDEMPOTENCY_KEY)
def add_idem(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(namespace="bench", redact=["args.b"], effect="external_write", approval=False)
def add_audit(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(
    namespace="bench",
    allowed_agents=[GUARANTEE_AGENT],
    calls_per_minute=HUGE_PER_MINUTE,
    idempotency_key=IDEMPOTENCY_KEY,
    redact=["args.b"],
    effect="external_write",
    approval=False,
)
def add_full(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


#: variant → (tool, gateway options, the stages its plan must contain besides validation)
GUARANTEE_VARIANTS: dict[str, tuple[FunctionTool[..., int], dict[str, Any], tuple[str, ...]]] = {
    "access": (add_access, {"policies": [OTHER_NAMESPACE_POLICY]}, ("authorize",)),
    "rate": (add_rate, {}, ("rate_limit",)),
    "idem": (add_idem, {}, ("idempotency",)),
    # External writes: the audit log reserves their record before they run (issue 24).
    "audit": (add_audit, {"audit": True}, ("audit_guard", "audit_reservation")),
    "full": (
        add_full,
        {"policies": [OTHER_NAMESPACE_POLICY], "audit": True},
        ("audit_guard", "audit_reservation", "authorize", "rate_limit", "idempotency"),
    ),
    "full_sql": (
        add_full,
        {"policies": [OTHER_NAMESPACE_POLICY], "audit": True, "state": True},
        ("audit_guard", "audit_reservation", "authorize", "rate_limit", "idempotency"),
    ),
    "full_pg": (
        add_full,
        {"policies": [OTHER_NAMESPACE_POLICY], "audit": True, "postgres": True, "redis": True},
        ("audit_guard", "audit_reservation", "authorize", "rate_limit", "idempotency"),
    ),
    "full_pg_only": (
        add_full,
        {"policies": [OTHER_NAMESPACE_POLICY], "audit": True, "postgres": True},
        ("audit_guard", "audit_reservation", "authorize", "rate_limit", "idempotency"),
    ),
}


def _guarantee(ctx: Context, variant: str) -> tuple[Gateway, str]:
    gateway = ctx.fixtures.guarantee_gateway(variant)
    return gateway, f"bench:{GUARANTEE_VARIANTS[variant][0].tool.name}"


def _measure_guarantee(ctx: Context, variant: str, *, fresh_keys: bool = False) -> Samples:
    """Check one call, time ``call_sync`` on the variant's tool, then let its audit log (if any)
    catch up outside the timed region, so its backlog is not charged to the next scenario."""
    gateway, tool_id = _guarantee(ctx, variant)
    call = gateway.call_sync
    agent = GUARANTEE_AGENT
    if fresh_keys:
        keys = ctx.fixtures.fresh_a
        first = next(keys)
        outcome = call(tool_id, {"a": first, "b": 2}, agent=agent)
        if not outcome.ok or outcome.content != first + 2:
            raise RuntimeError(f"{tool_id} did not return {first + 2}: {outcome!r}")
        if outcome.metadata.get("idempotency", {}).get("replayed") is not False:
            raise RuntimeError(f"{tool_id}: a fresh key was not run: {outcome.metadata!r}")
        samples = ctx.budget.measure(lambda: call(tool_id, {"a": next(keys), "b": 2}, agent=agent))
    else:
        _check_outcome(call(tool_id, ARGS, agent=agent))
        samples = ctx.budget.measure(lambda: call(tool_id, ARGS, agent=agent))
    ctx.fixtures.settle(variant)
    return samples


@scenario(
    "g_access",
    "call_sync + access  (allowed_agents + 1 policy)",
    group="toolgate",
    baseline="call_sync",
    note="authorize stage: the tool's allowed_agents and a policy that never matches it",
)
async def g_access(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "access")


@scenario(
    "g_rate",
    "call_sync + rate limit  (per minute, memory)",
    group="toolgate",
    baseline="call_sync",
    note="rate_limit stage, in-memory counters; the limit is never reached",
)
async def g_rate(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "rate")


@scenario(
    "g_idem",
    "call_sync + idempotency  (new key, memory)",
    group="toolgate",
    baseline="call_sync",
    note="key template over args; a counter in args.a makes every call a new key (the tool runs)",
)
async def g_idem(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "idem", fresh_keys=True)


@scenario(
    "g_idem_replay",
    "call_sync + idempotency  (replay, memory)",
    group="toolgate",
    baseline="call_sync",
    note="the same args every call: the stored outcome is replayed, the tool does not run",
)
async def g_idem_replay(ctx: Context) -> Samples:
    gateway, tool_id = _guarantee(ctx, "idem")
    first = gateway.call_sync(tool_id, ARGS, agent=GUARANTEE_AGENT)
    _check_outcome(first)
    replay = gateway.call_sync(tool_id, ARGS, agent=GUARANTEE_AGENT)
    _check_outcome(replay)
    if replay.metadata.get("idempotency", {}).get("replayed") is not True:
        raise RuntimeError(f"{tool_id}: the same key was not replayed: {replay.metadata!r}")
    return _measure_guarantee(ctx, "idem")


@scenario(
    "g_audit",
    "call_sync + audit log  (SQLite, writer thread)",
    group="toolgate",
    baseline="call_sync",
    note="observe() enqueues; the writer thread redacts and writes meanwhile (audit_guard on)",
)
async def g_audit(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "audit")


@scenario(
    "g_full",
    "call_sync + all four  (access, rate, idem, audit)",
    group="toolgate",
    baseline="call_sync",
    note="all of the above in one gateway; a fresh idempotency key per call",
)
async def g_full(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "full", fresh_keys=True)


@scenario(
    "g_full_sql",
    "call_sync + all four, SQLite state  (rate, idem in state_path)",
    group="toolgate",
    baseline="call_sync",
    note="as g_full, with the rate-limit and idempotency stores in the SQLite state database "
    "(as the CLI and toolgate serve run them)",
)
async def g_full_sql(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "full_sql", fresh_keys=True)


@scenario(
    "g_full_pg",
    "call_sync + all four, PostgreSQL + Redis  (idem + audit in PostgreSQL, rate in Redis)",
    group="toolgate",
    baseline="call_sync",
    note="as g_full_sql, with the state replicas share: idempotency records and the audit log "
    "in PostgreSQL (durable: each call waits for its record's commit), rate-limit counters in "
    "Redis (local servers; compare with g_full_sql)",
)
async def g_full_pg(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "full_pg", fresh_keys=True)


@scenario(
    "g_full_pg_only",
    "call_sync + all four, PostgreSQL only  (idem and rate in PostgreSQL)",
    group="toolgate",
    baseline="call_sync",
    note="as g_full_pg without Redis: the rate-limit counters are a PostgreSQL upsert too",
)
async def g_full_pg_only(ctx: Context) -> Samples:
    return _measure_guarantee(ctx, "full_pg_only", fresh_keys=True)


@scenario(
    "audit_rate",
    "sustained audit: N × call_sync (audit on), then audit.flush()",
    group="toolgate",
    timing="throughput",
    note="runs once, after the rounds; sample = (first call → flush end) / N",
)
async def audit_rate(ctx: Context) -> Samples:
    """N calls as fast as one thread can make them, then wait until the log has written them."""
    n = ctx.plan.audit_calls
    fx = ctx.fixtures
    gateway = Gateway(
        GatewaySettings(audit=AuditSettings(path=fx.state_dir / "audit-throughput.db"))
    )
    try:
        gateway.add(add_audit)
        log = gateway.audit
        assert log is not None
        call = gateway.call_sync
        tool_id, agent = "bench:add_audit", GUARANTEE_AGENT
        _check_outcome(call(tool_id, ARGS, agent=agent))
        if not log.flush(30.0) or log.written != 1:
            raise RuntimeError(f"the audit log did not write the check call ({log.last_error})")
        gc.collect()
        start = perf_counter_ns()
        for _ in repeat(None, n):
            call(tool_id, ARGS, agent=agent)
        calls_end = perf_counter_ns()
        backlog = log.pending
        flushed = log.flush(120.0)
        end = perf_counter_ns()
        written, lost = log.written - 1, log.lost
    finally:
        gateway.close()
    fx.audit_throughput = {
        "calls": n,
        "written": written,
        "lost": lost,
        "flushed": flushed,
        "calls_s": (calls_end - start) / 1e9,
        "flush_s": (end - calls_end) / 1e9,
        "total_s": (end - start) / 1e9,
        "backlog_after_calls": backlog,
        "calls_per_s": n / ((calls_end - start) / 1e9),
        "written_per_s": written / ((end - start) / 1e9),
        "gc": "on",
    }
    return Samples([(end - start) / max(written, 1)], [n])


# -- peers --------------------------------------------------------------------------------------


async def _fastmcp(ctx: Context, name: str) -> Samples:
    fixtures = ctx.fixtures
    async with fixtures.fastmcp.Client(fixtures.fastmcp_server) as client:
        _check_value((await client.call_tool(name, ARGS)).data)
        call_tool = client.call_tool
        return await ctx.budget.measure_async(lambda: call_tool(name, ARGS))


@scenario(
    "fastmcp",
    "FastMCP Client(server).call_tool  (sync tool)",
    group="peer",
    note="in-memory transport; FastMCP runs a sync tool in a worker thread by default",
)
async def fastmcp_sync(ctx: Context) -> Samples:
    return await _fastmcp(ctx, "add")


@scenario(
    "fastmcp_inline",
    "FastMCP call_tool  (sync tool, run_in_thread=False)",
    group="peer",
    note="like-for-like with call_sync: the sync tool runs on the loop",
)
async def fastmcp_inline(ctx: Context) -> Samples:
    return await _fastmcp(ctx, "add_inline")


@scenario(
    "fastmcp_async",
    "FastMCP call_tool  (async tool)",
    group="peer",
    note="like-for-like with await gateway.call (async tool)",
)
async def fastmcp_async(ctx: Context) -> Samples:
    return await _fastmcp(ctx, "add_async")


# -- script tools (tool folders: tool.md + a script, one child process per call) ----------------

#: Concurrent calls in one burst, and how long the burst tool's script sleeps.
BURST = 50
BURST_SLEEP_S = 0.1
SCRIPT_ARGS: dict[str, int] = {"a": 1}
#: The running limit a script tool has by default (``concurrency.default.running``).
DEFAULT_SCRIPT_CONCURRENCY = DEFAULT_RUNNING

# The echo scripts read the whole JSON object from stdin and wrap it: {"echo": <input>}. The bash
# one uses builtins only (no `cat`), so a call is exactly one process.
_ECHO_SH = """IFS= read -r -d '' input || true
printf '{"echo":%s}\\n' "$input"
"""
_ECHO_PY = """import json, sys
json.dump({"echo": json.load(sys.stdin)}, sys.stdout)
"""
_SLEEP_SH = f"""IFS= read -r -d '' input || true
sleep {BURST_SLEEP_S}
printf '{{"slept":{BURST_SLEEP_S}}}\\n'
"""

#: folder (= tool name, id ``local:<name>``): runtime, script file, script source
SCRIPT_TOOLS: dict[str, tuple[str, str, str]] = {
    "echo-sh": ("bash", "script.sh", _ECHO_SH),
    "echo-py": ("python", "script.py", _ECHO_PY),
    "sleep-sh": ("bash", "script.sh", _SLEEP_SH),
}
_RUNTIME_PROGRAM = {"bash": "bash", "python": "python3"}


def _write_tool_folder(root: Path, name: str, runtime: str, script: str, source: str) -> None:
    """A Jean2-style tool folder: ``tool.md`` (YAML front matter + description) and the script."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tool.md").write_text(
        "---\n"
        f"name: {name}\n"
        f"script: {script}\n"
        f"runtime: {runtime}\n"
        "inputSchema: {type: object, properties: {a: {type: integer}}}\n"
        "outputSchema: {type: object}\n"
        "---\n\n"
        f"Benchmark tool {name}.\n",
        encoding="utf-8",
    )
    (folder / script).write_text(source, encoding="utf-8")


def describe_program(name: str) -> dict[str, Any]:
    """Which ``name`` scripts get (on the scripts' PATH), what it really is, and if it is a shim."""
    env_path = os.environ.get("PATH", os.defpath)
    found = shutil.which(name, path=env_path)
    if found is None:
        return {"name": name, "path": None, "real": None, "kind": "missing", "shim": False}
    real = os.path.realpath(found)
    try:
        with open(real, "rb") as handle:
            head = handle.read(2048)
    except OSError:
        head = b""
    if head.startswith(b"\x7fELF"):
        kind = "ELF binary"
    elif head.startswith(b"#!"):
        kind = "pyenv shim (bash script)" if b"pyenv" in head else "wrapper script"
    else:
        kind = "unknown"
    return {"name": name, "path": found, "real": real, "kind": kind, "shim": head.startswith(b"#!")}


def proc_scan(repeat: int = 15) -> dict[str, Any] | None:
    """What one scan of ``/proc/*/stat`` costs here (median ms) and how many processes it read.

    The same work as the process runner's scan (list ``/proc``, read every ``<pid>/stat``), which
    it does at least once at the end of every script call; ``None`` without ``/proc``.
    """
    if not os.path.exists("/proc/self/stat"):
        return None
    times: list[float] = []
    count = 0
    for _ in range(repeat):
        start = time.perf_counter_ns()
        count = 0
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            except OSError:
                continue
            try:
                os.read(fd, 4096)
                count += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        times.append((time.perf_counter_ns() - start) / 1e6)
    return {"median_ms": round(statistics.median(times), 3), "processes": count}


def _check_echo(result: Any) -> None:
    echoed = result.get("echo") if isinstance(result, dict) else None
    if not isinstance(echoed, dict) or echoed.get("a") != SCRIPT_ARGS["a"]:
        raise RuntimeError(f"the script did not echo its input: {result!r}")


def _check_script_outcome(outcome: Any) -> None:
    if not outcome.ok:
        raise RuntimeError(f"script tool call failed: {outcome.code}: {outcome.message}")


async def _bare_spawn(
    program: str, script: str, payload: bytes, env: dict[str, str], cwd: Path
) -> Any:
    """One JSON round trip through a bare child process: what a gateway call is compared with."""
    proc = await asyncio.create_subprocess_exec(
        program,
        script,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )
    out, _ = await proc.communicate(payload)
    if proc.returncode != 0:
        raise RuntimeError(f"{program} {script} exited with code {proc.returncode}")
    return json.loads(out)


async def _bare_echo(ctx: Context, tool_name: str) -> Samples:
    fx = ctx.fixtures
    runtime, script, _ = SCRIPT_TOOLS[tool_name]
    program = fx.program(_RUNTIME_PROGRAM[runtime])
    path = str(fx.script_root / tool_name / script)
    payload, env, cwd = fx.script_payload, fx.script_env, fx.script_cwd

    async def call() -> None:
        _check_echo(await _bare_spawn(program, path, payload, env, cwd))

    return await time_each_async(call, samples=ctx.plan.samples, warmup=ctx.plan.warmup)


async def _gateway_echo(ctx: Context, tool_name: str) -> Samples:
    fx = ctx.fixtures
    fx.program(_RUNTIME_PROGRAM[SCRIPT_TOOLS[tool_name][0]])  # Skip when the runtime is missing
    gateway_call = fx.script_gateway_with(None).call
    tool_id = f"local:{tool_name}"

    async def call() -> None:
        outcome = await gateway_call(tool_id, SCRIPT_ARGS)
        _check_script_outcome(outcome)
        _check_echo(outcome.content)

    return await time_each_async(call, samples=ctx.plan.samples, warmup=ctx.plan.warmup)


@scenario(
    "bash_bare",
    "bare spawn  bash script.sh (JSON in → JSON out)",
    group="baseline",
    timing="single",
    note="create_subprocess_exec + communicate + json.loads; same program, script, stdin, env",
)
async def bash_bare(ctx: Context) -> Samples:
    return await _bare_echo(ctx, "echo-sh")


@scenario(
    "bash_runner",
    "run_process alone  (bash; toolgate's process runner)",
    group="toolgate",
    baseline="bash_bare",
    timing="single",
    note="the gateway's process runner without the pipeline: splits the gateway overhead",
)
async def bash_runner(ctx: Context) -> Samples:
    try:
        from toolgate.backends.processes import run_process
    except ImportError as exc:
        raise Skip(f"toolgate.backends.processes.run_process is not importable ({exc})") from None
    fx = ctx.fixtures
    argv = [fx.program("bash"), str(fx.script_root / "echo-sh" / SCRIPT_TOOLS["echo-sh"][1])]
    payload, env, cwd = fx.script_payload, fx.script_env, fx.script_cwd

    async def call() -> None:
        result = await run_process(argv, stdin=payload, env=env, cwd=cwd, timeout=30.0)
        if result.exit_code != 0:
            raise RuntimeError(f"run_process: exit code {result.exit_code}")
        _check_echo(json.loads(result.stdout))

    return await time_each_async(call, samples=ctx.plan.samples, warmup=ctx.plan.warmup)


@scenario(
    "bash_gw",
    "await gateway.call  (bash script tool)",
    group="toolgate",
    baseline="bash_bare",
    timing="single",
    note="tool folder, runtime bash; one child process per call",
)
async def bash_gw(ctx: Context) -> Samples:
    return await _gateway_echo(ctx, "echo-sh")


@scenario(
    "python_bare",
    "bare spawn  python3 script.py (JSON in → JSON out)",
    group="baseline",
    timing="single",
    note="python3 as found on PATH (see the header: may be a pyenv shim)",
)
async def python_bare(ctx: Context) -> Samples:
    return await _bare_echo(ctx, "echo-py")


@scenario(
    "python_gw",
    "await gateway.call  (python script tool)",
    group="toolgate",
    baseline="python_bare",
    timing="single",
    note="tool folder, runtime python (python3 on PATH)",
)
async def python_gw(ctx: Context) -> Samples:
    return await _gateway_echo(ctx, "echo-py")


@scenario(
    "burst_bare",
    f"{BURST} × bare spawn at once  (bash, sleep {BURST_SLEEP_S:g} s)",
    group="baseline",
    timing="burst",
    note="asyncio.gather of bare spawns: the floor for the gateway bursts",
)
async def burst_bare(ctx: Context) -> Samples:
    fx = ctx.fixtures
    program = fx.program("bash")
    path = str(fx.script_root / "sleep-sh" / SCRIPT_TOOLS["sleep-sh"][1])
    payload, env, cwd = fx.script_payload, fx.script_env, fx.script_cwd

    async def burst() -> None:
        await asyncio.gather(*(_bare_spawn(program, path, payload, env, cwd) for _ in range(BURST)))

    await _bare_spawn(program, path, payload, env, cwd)  # warm-up and check: one call
    return await time_each_async(burst, samples=ctx.plan.bursts, warmup=0, size=BURST)


async def _gateway_burst(ctx: Context, concurrency: int | None) -> Samples:
    fx = ctx.fixtures
    fx.program("bash")
    gateway_call = fx.script_gateway_with(concurrency).call

    async def burst() -> None:
        outcomes = await asyncio.gather(
            *(gateway_call("local:sleep-sh", SCRIPT_ARGS) for _ in range(BURST))
        )
        for outcome in outcomes:
            _check_script_outcome(outcome)

    _check_script_outcome(await gateway_call("local:sleep-sh", SCRIPT_ARGS))  # warm-up, check
    return await time_each_async(burst, samples=ctx.plan.bursts, warmup=0, size=BURST)


@scenario(
    "burst_gw",
    f"{BURST} × gateway.call at once  (concurrency {DEFAULT_SCRIPT_CONCURRENCY} per tool, default)",
    group="toolgate",
    baseline="burst_bare",
    timing="burst",
    note="script_concurrency left at its default (per tool): calls beyond it queue",
)
async def burst_gw(ctx: Context) -> Samples:
    return await _gateway_burst(ctx, None)


@scenario(
    "burst_gw64",
    f"{BURST} × gateway.call at once  (script_concurrency=64)",
    group="toolgate",
    baseline="burst_bare",
    timing="burst",
    note="all calls run side by side",
)
async def burst_gw64(ctx: Context) -> Samples:
    return await _gateway_burst(ctx, 64)
