"""The scenarios: one ``async`` function each, registered with ``@scenario``, returning samples.

A scenario function receives a :class:`Context` (shared fixtures plus the timing budget for this
round) and returns :class:`~_timing.Samples` from ``ctx.budget.measure(call)`` (synchronous
calls) or ``await ctx.budget.measure_async(call)`` (awaited calls). It is called once per round,
inside one running event loop; it sets up whatever it needs (and checks once that the call really
works) before timing, and tears it down after. Raise :class:`Skip` when it cannot run here.

To add a scenario (script tools, audit, HTTP…), write one more function below::

    @scenario("gw_audit", "await gateway.call, audit on", group="toolgate", baseline="gw_async")
    async def gw_audit(ctx: Context) -> Samples:
        ...
        return await ctx.budget.measure_async(lambda: gateway.call("bench:add_async", ARGS))
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from _timing import Budget, Samples
from toolgate import Gateway, tool

__all__ = ["ARGS", "SCENARIOS", "Context", "Fixtures", "Scenario", "Skip", "scenario"]

ARGS: dict[str, int] = {"a": 1, "b": 2}
EXPECTED = 3

Group = Literal["baseline", "toolgate", "peer"]


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


SCENARIOS: list[Scenario] = []


def scenario(
    key: str,
    label: str,
    *,
    group: Group,
    baseline: str | None = None,
    note: str = "",
    overhead: bool = True,
) -> Callable[[Callable[[Context], Awaitable[Samples]]], Callable[[Context], Awaitable[Samples]]]:
    """Register a scenario function; the table lists them in registration order."""

    def register(
        func: Callable[[Context], Awaitable[Samples]],
    ) -> Callable[[Context], Awaitable[Samples]]:
        if any(s.key == key for s in SCENARIOS):
            raise ValueError(f"duplicate scenario key {key!r}")
        SCENARIOS.append(Scenario(key, label, group, func, baseline, note, overhead))
        return func

    return register


class Fixtures:
    """Objects shared by every round: built once, on first use."""

    @cached_property
    def gateway(self) -> Gateway:
        gateway = Gateway()
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

    def close(self) -> None:
        if "gateway" in self.__dict__:
            self.gateway.close()


@dataclass
class Context:
    fixtures: Fixtures
    budget: Budget


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
