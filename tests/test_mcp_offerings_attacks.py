"""The adversarial review's findings on upstream resources (each test asserts the right
behaviour, and failed before the fix):

* F1 — matching a URI against an upstream's URI template is linear and bounded: neither a
  crafted URI nor a crafted template can stall the event loop (the old regexes backtracked
  exponentially), and a caller's refusal never matches the templates of servers it cannot see.
* F2 — subscriptions are kept per (server, upstream URI): one caller unsubscribing a spelling
  (the wrapped one) does not cancel another caller's subscription; updates reach every spelling.
* F3 — a listen stream of an agent denied the namespace carries no update of it.
* F4 — refused subscribes leave nothing behind; concurrent subscribes count once; the bound on
  followers is per agent.
* F5 — a 2026-07-28 upstream (no ``resources/subscribe`` in its protocol) is refused with a
  clear error rather than a ``-32601``.
* F6 — whether a URI is shown wrapped is decided over the servers the caller sees.
* Update storms: updates of resources nobody follows are dropped on arrival, and a burst of
  updates of one resource is relayed once.
* A URI a server has just handed out (a ``resource_link``, its listing refreshed later) reads.

Real parts: upstreams on the official SDK (``tests/fixtures/mcp/offerings_upstream.py``,
``modern_subscribe_upstream.py``), the real ``mcp-server-everything`` for subscriptions (its
handshake-era ``resources/subscribe``), ``toolgate serve`` with the official client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated

from test_serve_command import Served, serving
from toolgate.config import build_gateway, load_config
from toolgate.errors import ToolError
from toolgate.gateway import Gateway
from toolgate.model.names import to_provider_name
from toolgate.offerings import OfferingNotFound, wrap
from toolgate.offerings.uris import MAX_EXPRESSIONS, MAX_MATCHED_URI, matches_template
from toolgate.pipeline.observers import FinishedCall
from toolgate.serve.mcp import resources as resources_module
from toolgate.serve.mcp.server import build_mcp_server

FIXTURES = Path(__file__).parent / "fixtures" / "mcp"
UPSTREAM = FIXTURES / "offerings_upstream.py"
MODERN = FIXTURES / "modern_subscribe_upstream.py"


# -- F1: template matching ------------------------------------------------------------------------
# A hang here is the failure (the test run's timeout ends it): the old matcher took hours on
# these inputs; no timing is asserted.


@pytest.mark.parametrize("operator", [".", "/", ";"])
def test_a_crafted_uri_against_a_label_template_is_answered(operator: str) -> None:
    template = "memo://doc{" + operator + "format}"
    assert not matches_template(template, "memo://doc" + operator * 3000 + "?")
    assert matches_template(template, "memo://doc" + operator + "json")
    assert matches_template(template, "memo://doc")


def test_adjacent_reserved_expressions_are_matched_without_backtracking() -> None:
    template = "".join(f"{{+v{i}}}" for i in range(14)) + "!"
    assert not matches_template(template, "demo://resource/dynamic/text/" + "1" * 3000)
    assert matches_template(template, "x" * 3000 + "!")


def test_matching_is_bounded() -> None:
    many = "x://" + "/".join(f"{{v{i}}}" for i in range(MAX_EXPRESSIONS + 1))
    assert not matches_template(many, "x://" + "/".join("a" * (MAX_EXPRESSIONS + 1)))
    assert matches_template("x://{+rest}", "x://" + "a" * (MAX_MATCHED_URI - 4))
    assert not matches_template("x://{+rest}", "x://" + "a" * MAX_MATCHED_URI)


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("x://{/a}{?q}", "x:///p/q?z=1", True),
        ("x://{a}{?q}", "x://p?z=1", True),
        ("x://{a}{?q}", "x://p/q?z=1", False),
        ("x://{a}.txt", "x://a.b.txt", True),
        ("x://{a}.txt", "x://a/b.txt", False),
        ("x://{a}/{b}.{c}", "x://1/2.3", True),
        ("x://{#f}", "x://#frag", True),
        ("x://a{b}", "x://a", False),
    ],
)
def test_template_matching_of_combined_expressions(template: str, uri: str, expected: bool) -> None:
    assert matches_template(template, uri) is expected


# -- in-process gateways ------------------------------------------------------------------------


def _server(name: str, script: Path, **env: str) -> str:
    environment = f"  env: {json.dumps(env)}\n" if env else ""
    return (
        f"apiVersion: joch.dev/v1alpha1\nkind: MCPServer\nmetadata: {{name: {name}}}\nspec:\n"
        f"  command: {json.dumps(sys.executable)}\n  args: [{json.dumps(str(script))}]\n"
        f"{environment}  sideEffects: {{level: read_only}}\n"
    )


def _deny(agent: str, namespace: str) -> str:
    return (
        f"apiVersion: joch.dev/v1alpha1\nkind: Policy\nmetadata: {{name: no-{namespace}}}\n"
        f"spec:\n  appliesTo: {{agents: [{agent}]}}\n  rules:\n"
        f"    - when: {{tool.namespace: {namespace}}}\n      action: deny\n"
    )


@contextlib.asynccontextmanager
async def _gateway(tmp_path: Path, *documents: str, servers: int) -> AsyncIterator[Gateway]:
    home = tmp_path / "home"
    home.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "upstream.yaml").write_text("---\n".join(documents))
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )
    gateway = build_gateway(load_config(project / "toolgate.yaml"), home=home, audit="off")
    await gateway.start()
    try:
        for _ in range(600):
            listed = gateway.offerings._servers()
            if len(listed) >= servers and all(s.offerings.resources for s in listed):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the upstreams' resources never arrived")
        yield gateway
    finally:
        await gateway.aclose()


async def test_a_hostile_template_leaves_other_servers_readable(tmp_path: Path) -> None:
    """F1: one upstream lists ``{+v0}…{+v13}!``; a read of another server's template expansion
    is matched against it too, and answers."""
    template = "".join(f"{{+v{i}}}" for i in range(14)) + "!"
    async with _gateway(
        tmp_path,
        _server("hostile", UPSTREAM, TEMPLATE=template),
        _server("memo", UPSTREAM),
        servers=2,
    ) as gateway:
        uri = "memo://doc." + "j" * 200
        result = await gateway.offerings.read_resource(uri)
        assert result["contents"][0]["text"] == f"text of {uri}"


class _Calls:
    def __init__(self) -> None:
        self.seen: list[FinishedCall] = []

    def observe(self, call: FinishedCall) -> None:
        self.seen.append(call)


async def test_a_refusal_matches_no_template_of_a_hidden_server(tmp_path: Path) -> None:
    """F1: a caller that may not see ``memo`` is refused without ``memo``'s templates being
    tried (the audit says "no such resource", not which hidden server has it); a URI ``memo``
    lists is still recorded ``forbidden`` for the operator."""
    async with _gateway(
        tmp_path, _server("memo", UPSTREAM), _deny("intern", "memo"), servers=1
    ) as gateway:
        calls = _Calls()
        gateway.observe_calls(calls)
        seen = calls.seen
        with pytest.raises(OfferingNotFound):
            await gateway.offerings.read_resource("memo://doc" + "." * 40 + "/", agent="intern")
        with pytest.raises(OfferingNotFound):
            await gateway.offerings.read_resource("memo://doc", agent="intern")
        assert [c.outcome.message for c in seen] == [
            "no such resource",
            "the caller may not see tools of the namespace 'memo'",
        ]


async def test_a_hidden_server_does_not_rename_what_a_caller_is_shown(tmp_path: Path) -> None:
    """F6: ``alpha`` and ``beta`` both list ``memo://doc``; an agent that may not see ``beta``
    is shown ``alpha``'s URI as written (and reads it); one that sees both, both wrapped."""
    async with _gateway(
        tmp_path,
        _server("alpha", UPSTREAM, SERVER_NAME="alpha"),
        _server("beta", UPSTREAM, SERVER_NAME="beta"),
        _deny("intern", "beta"),
        servers=2,
    ) as gateway:
        offerings = gateway.offerings
        assert [r["uri"] for r in offerings.resources(agent="intern")] == ["memo://doc"]
        read = await offerings.read_resource("memo://doc", agent="intern")
        assert read["contents"][0]["uri"] == "memo://doc"
        assert sorted(r["uri"] for r in offerings.resources()) == [
            wrap("alpha", "memo://doc"),
            wrap("beta", "memo://doc"),
        ]
        read = await offerings.read_resource(wrap("beta", "memo://doc"))
        assert read["contents"][0]["uri"] == wrap("beta", "memo://doc")


async def test_a_resource_link_just_handed_out_reads_through_toolgate(tmp_path: Path) -> None:
    """A tool mints a resource, announces it and answers with a link; the read that follows
    at once finds it (toolgate waits for the announced listing instead of failing)."""
    async with _gateway(tmp_path, _server("memo", UPSTREAM), servers=1) as gateway:
        for round_ in range(3):
            outcome = await gateway.call("memo:mint", {})
            blocks = repr(outcome.content)
            uri = f"memo://minted/{round_}"
            assert uri in blocks, blocks
            result = await gateway.offerings.read_resource(uri)
            assert result["contents"][0]["text"] == f"text of {uri}"


async def test_a_2026_upstream_subscription_is_refused_clearly(tmp_path: Path) -> None:
    """F5: the upstream advertises ``resources.subscribe`` on a 2026-07-28 connection, whose
    protocol has no ``resources/subscribe``: refused naming why, nothing sent."""
    async with _gateway(tmp_path, _server("modern", MODERN), servers=1) as gateway:
        server = gateway.offerings._servers()[0]
        assert server.offerings.listen_only and not server.offerings.subscribe
        with pytest.raises(ToolError, match="2026-07-28"):
            await gateway.offerings.subscribe("memo://doc")
        surface = build_mcp_server(gateway)
        ctx = SimpleNamespace(session=SimpleNamespace(), request=None)
        with pytest.raises(MCPError, match="2026-07-28"):
            await surface.resources._subscribe(ctx, types.SubscribeRequestParams(uri="memo://doc"))
        assert surface.resources._connections == {} and surface.resources._upstream == {}


async def test_refused_subscribes_leave_nothing_behind(tmp_path: Path) -> None:
    """F4: an agent that may not see ``memo`` subscribing in a loop is refused each time and
    leaves no entry (the old map kept every URI it was sent)."""
    async with _gateway(
        tmp_path, _server("memo", UPSTREAM), _deny("intern", "memo"), servers=1
    ) as gateway:
        resources = build_mcp_server(gateway, agent="intern").resources
        for i in range(200):
            ctx = SimpleNamespace(session=SimpleNamespace(), request=None)
            params = types.SubscribeRequestParams(uri=f"memo://doc/{i}/" + "x" * 200)
            with pytest.raises(MCPError):
                await resources._subscribe(ctx, params)
        assert resources._connections == {}
        assert resources._subscribers == {} and resources._upstream == {}
        assert resources._by_agent == {}


class _Session:
    """A stand-in handshake-era session that records what it is sent."""

    def __init__(self) -> None:
        self.updated: list[str] = []

    async def send_resource_updated(self, uri: str) -> None:
        self.updated.append(uri)


async def test_updates_nobody_follows_are_dropped_and_a_burst_is_relayed_once(
    tmp_path: Path,
) -> None:
    """Update storms: a flood of updates of unfollowed resources schedules nothing on the
    serving loop; a burst of one followed resource's updates becomes one notification per
    subscriber spelling."""
    async with _gateway(tmp_path, _server("memo", UPSTREAM), servers=1) as gateway:
        surface = build_mcp_server(gateway)
        resources = surface.resources
        resources.start()
        try:
            outcome = await gateway.call("memo:storm", {})  # 2000 updates nobody asked for
            assert "stormed" in repr(outcome.content)
            await asyncio.sleep(0.2)
            assert resources._tasks == set() and resources._pending == set()

            key = ("memo", "memo://doc")
            session = _Session()
            resources._upstream[key] = 1  # followed, as after a subscribe
            resources._subscribers[key] = {(1, "memo://doc"): session}  # type: ignore[dict-item]
            resources._subscribers[key][(2, wrap("memo", "memo://doc"))] = session  # type: ignore[assignment]
            for _ in range(500):
                resources._updated(key)
            for _ in range(100):
                if len(session.updated) >= 2:
                    break
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
            assert sorted(session.updated) == sorted(["memo://doc", wrap("memo", "memo://doc")])
        finally:
            resources.stop()


# -- subscriptions through toolgate serve (the reference server takes resources/subscribe) -------

KEYS = {
    "reader": "reader-key-0123456789",
    "other": "other-key-0123456789",
    "intern": "intern-key-0123456789",
}
TOGGLE = to_provider_name("memo:toggle-subscriber-updates")  # then updates every ~5 s


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    everything = shutil.which("mcp-server-everything")
    if everything is None:
        pytest.fail("mcp-server-everything is not on PATH")
    root = tmp_path_factory.mktemp("subscriptions")
    home = root / "home"
    home.mkdir()
    project = root / "project"
    project.mkdir()
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: memo}\nspec:\n"
        f"  command: {json.dumps(everything)}\n  args: [stdio]\n"
        "  sideEffects: {level: read_only}\n---\n" + _deny("intern", "memo")
    )
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\nagents:\n"
        + "".join(
            f"  {name}:\n    key_sha256: {hashlib.sha256(key.encode()).hexdigest()}\n"
            for name, key in KEYS.items()
        )
    )
    env = {**os.environ, "TOOLGATE_HOME": str(home), "PYTHONIOENCODING": "utf-8"}
    env.pop("COLUMNS", None)
    with serving(cwd=project, env=env) as running:
        yield running


def _client(url: str, agent: str, **kw: Any) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEYS[agent]}"}, timeout=30)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http), **kw)


async def _first_uri(client: Client) -> str:
    for _ in range(300):
        listed = (await client.list_resources()).resources
        if listed:
            return str(listed[0].uri)
        await anyio.sleep(0.1)
    raise AssertionError("no resources")


async def _updates_on(client: Client) -> None:
    """Turn the reference server's simulated updates on. The switch is a toggle on toolgate's
    one upstream session, shared by every test of this module: toggle again if it was on."""
    for _ in range(2):
        toggle = await client.call_tool(TOGGLE, {})
        assert not toggle.is_error, toggle
        if "Started" in str(toggle.content):
            return
    raise AssertionError(f"the simulated updates did not start: {toggle.content}")


async def _until(got: list[str], count: int = 1) -> None:
    with anyio.fail_after(30):  # a hang guard: updates come every ~5 s
        while len(got) < count:
            await anyio.sleep(0.1)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:resources/.*subscribe is removed")
async def test_another_caller_cannot_cancel_my_subscription(served: Served) -> None:
    """F2: B follows the resource A follows under its wrapped spelling, gets its updates under
    that spelling, and unsubscribes; A still gets the updates."""
    got_a: list[str] = []
    got_b: list[str] = []

    def recorder(into: list[str]) -> Any:
        async def on_message(message: Any) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                into.append(str(message.params.uri))

        return on_message

    async with (
        _client(served.url, "reader", message_handler=recorder(got_a), mode="legacy") as a,
        _client(served.url, "other", message_handler=recorder(got_b), mode="legacy") as b,
    ):
        uri = await _first_uri(a)
        await a.subscribe_resource(uri)
        await a.subscribe_resource(uri)  # again: still once
        await _updates_on(a)
        await _until(got_a)
        wrapped = wrap("memo", uri)
        await b.subscribe_resource(wrapped)
        await _until(got_b)
        assert set(got_b) == {wrapped} and set(got_a) == {uri}
        await b.unsubscribe_resource(wrapped)
        got_a.clear()
        await _until(got_a)  # the upstream subscription outlived B's unsubscribe
        await a.unsubscribe_resource(uri)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:resources/.*subscribe is removed")
async def test_a_denied_agents_listen_stream_gets_no_hidden_update(served: Served) -> None:
    """F3: while another caller follows the resource, the listen stream of an agent denied its
    namespace (which asked for the same URI) carries none of its updates; the reader's stream,
    opened alongside, does (the control)."""
    async with (
        _client(served.url, "reader") as reader,
        _client(served.url, "intern") as intern,
    ):
        uri = await _first_uri(reader)
        assert (await intern.list_resources()).resources == []
        leaked: list[str] = []
        delivered = anyio.Event()

        async def watch(client: Client, into: list[str], done: anyio.Event | None) -> None:
            async with client.listen(resource_subscriptions=[uri]) as stream:
                async for event in stream:
                    if isinstance(event, ResourceUpdated):
                        into.append(event.uri)
                        if done is not None:
                            done.set()

        got: list[str] = []
        async with anyio.create_task_group() as group:
            group.start_soon(watch, intern, leaked, None)
            group.start_soon(watch, reader, got, delivered)
            await anyio.sleep(1.0)  # both streams open
            await _updates_on(reader)
            with anyio.fail_after(30):
                await delivered.wait()
            await anyio.sleep(0.5)  # the intern's stream had the same chance
            group.cancel_scope.cancel()
        assert got and got[0] == uri
        assert leaked == []


async def test_concurrent_subscribes_count_once_and_the_bound_is_per_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F4: two subscribes of one connection at once hold the resource once; an agent at its
    bound is refused while another agent still subscribes."""
    everything = shutil.which("mcp-server-everything")
    assert everything is not None
    monkeypatch.setattr(resources_module, "MAX_PER_AGENT", 1)
    document = (
        "apiVersion: joch.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: memo}\nspec:\n"
        f"  command: {json.dumps(everything)}\n  args: [stdio]\n"
        "  sideEffects: {level: read_only}\n"
    )
    async with _gateway(tmp_path, document, servers=1) as gateway:
        uris = [str(r["uri"]) for r in gateway.offerings.resources()][:2]
        # The agent is told by the request (here, the request is the agent's name).
        surface = build_mcp_server(gateway, agent=lambda request: request)
        resources = surface.resources
        ctx = SimpleNamespace(session=SimpleNamespace(), request="greedy")
        params = types.SubscribeRequestParams(uri=uris[0])
        await asyncio.gather(resources._subscribe(ctx, params), resources._subscribe(ctx, params))
        key = ("memo", uris[0])
        assert resources._upstream == {key: 1} and resources._by_agent == {"greedy": 1}
        with pytest.raises(MCPError, match="follows 1 resources already"):
            await resources._subscribe(ctx, types.SubscribeRequestParams(uri=uris[1]))
        other = SimpleNamespace(session=SimpleNamespace(), request="modest")
        await resources._subscribe(other, types.SubscribeRequestParams(uri=uris[1]))
        assert resources._by_agent == {"greedy": 1, "modest": 1}
        await resources._unsubscribe(ctx, types.UnsubscribeRequestParams(uri=uris[0]))
        assert key not in resources._upstream and resources._by_agent == {"modest": 1}
