"""Upstream resources and prompts served through toolgate, against the real
``mcp-server-everything``: ``toolgate mcp`` (stdio) driven by the official MCP Python client,
each answer compared field by field with the same request sent to the upstream directly. The
only differences allowed are listed here: prompt names carry the namespace
(``everything__<name>``, :func:`~toolgate.model.names.to_provider_name`); resource URIs
and templates are the upstream's as written (no clash); the clock time the reference server
writes into a dynamic resource when it is read.

In-process: the access rules (a policy denying an agent the namespace hides every resource and
prompt of it, and a read or get is refused and audited ``forbidden``), the audit record of a read
(no contents), and an upstream that is down (a clear error naming it).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.subscriptions import ResourceUpdated

from conftest import TOOLGATE
from test_serve_command import serve_env, serving  # noqa: F401 - the fixture
from toolgate.backends.base import BackendUnavailableError
from toolgate.backends.mcp_offerings import MAX_DESCRIPTION
from toolgate.config import build_gateway, load_config
from toolgate.model.names import to_provider_name
from toolgate.offerings import OfferingAmbiguous, OfferingNotFound, unwrap, wrap
from toolgate.pipeline.observers import FinishedCall

pytestmark = pytest.mark.slow

NAMESPACE = "everything"


@pytest.fixture(scope="module")
def everything() -> str:
    path = shutil.which("mcp-server-everything")
    if path is None:
        pytest.fail(
            "mcp-server-everything is not on PATH "
            "(npm i -g @modelcontextprotocol/server-everything)"
        )
    return path


def _declare(project: Path, command: str, *, policy: bool = False) -> Path:
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\n"
        "kind: MCPServer\n"
        "metadata:\n"
        f"  name: {NAMESPACE}\n"
        "spec:\n"
        f"  command: {json.dumps(command)}\n"
        "  args: [stdio]\n"
        "  sideEffects: {level: read_only}\n"
        "  healthCheck: {periodSeconds: 0.5, timeoutSeconds: 10}\n"
        "  reconnect: {initialDelaySeconds: 0.2, maxDelaySeconds: 1}\n"
        + (
            "---\napiVersion: joch.dev/v1alpha1\nkind: Policy\nmetadata: {name: no-everything}\n"
            "spec:\n  appliesTo: {agents: [intern]}\n  rules:\n"
            f"    - when: {{tool.namespace: {NAMESPACE}}}\n      action: deny\n"
            if policy
            else ""
        )
    )
    config = project / "toolgate.yaml"
    config.write_text("sources:\n  - path: upstream.yaml\n    format: resource\n")
    return config


_CLOCK = re.compile(r"\d{1,2}:\d{2}:\d{2}( [AP]M)?")


def _untimed(value: Any) -> Any:
    """``value`` with clock times (``5:51:56 AM``) replaced: a read's time is not its content."""
    return json.loads(_CLOCK.sub("<time>", json.dumps(value)))


def _prompt_name(name: str) -> str:
    """The name a prompt is served under: named like a tool of the namespace."""
    return to_provider_name(f"{NAMESPACE}:{name}")


def _direct(command: str) -> Client:
    return Client(stdio_client(StdioServerParameters(command=command, args=["stdio"])))


def _through(config: Path, home: Path, project: Path) -> Client:
    params = StdioServerParameters(
        command=str(TOOLGATE),
        args=["--config", str(config), "mcp"],
        env={"TOOLGATE_HOME": str(home), "PYTHONIOENCODING": "utf-8"},
        cwd=str(project),
    )
    return Client(stdio_client(params))


#: Envelope metadata the answering server adds about itself (2026-07-28 era): toolgate's
#: ``serverInfo`` on its answers, the upstream's on the upstream's. Not part of the result.
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def _dump(value: Any) -> Any:
    dumped = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    meta = dumped.get("_meta")
    if isinstance(meta, dict):
        meta.pop(SERVER_INFO, None)
        if not meta:
            dumped.pop("_meta")
    return dumped


async def _all(client: Client, method: str, field: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        page = await getattr(client, method)(cursor=cursor)
        found.extend(_dump(item) for item in getattr(page, field))
        cursor = page.next_cursor
        if not cursor:
            break
    return found


async def test_resources_and_prompts_match_the_upstream_through_toolgate_mcp(
    everything: str, project: Path, toolgate_home: Path
) -> None:
    config = _declare(project, everything)
    async with _direct(everything) as direct, _through(config, toolgate_home, project) as gate:
        await _compare(direct, gate)


async def test_resources_and_prompts_match_the_upstream_through_toolgate_serve(
    everything: str,
    project: Path,
    serve_env: dict[str, str],  # noqa: F811
) -> None:
    _declare(project, everything)
    with serving(cwd=project, env=serve_env) as served:
        async with (
            _direct(everything) as direct,
            Client(streamable_http_client(f"{served.url}/mcp")) as gate,
        ):
            await _compare(direct, gate)


# The handshake-era pair is what the legacy client is meant to use here.
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed")
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_subscription_through_toolgate_delivers_the_upstreams_updates(
    everything: str, project: Path, toolgate_home: Path, mode: str
) -> None:
    """Handshake era: ``resources/subscribe``; 2026-07-28: the URI on a listen stream."""
    config = _declare(project, everything)
    updated: list[str] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            arrived.set()

    params = StdioServerParameters(
        command=str(TOOLGATE),
        args=["--config", str(config), "mcp"],
        env={"TOOLGATE_HOME": str(toolgate_home), "PYTHONIOENCODING": "utf-8"},
        cwd=str(project),
    )
    async with Client(stdio_client(params), message_handler=on_message, mode=mode) as gate:
        assert gate.server_capabilities.resources is not None
        assert gate.server_capabilities.resources.subscribe
        uri = str((await gate.list_resources()).resources[0].uri)
        # The reference server sends simulated updates of subscribed resources every 5 s once
        # this tool is called (on its session: toolgate's).
        toggle_name = to_provider_name(f"{NAMESPACE}:toggle-subscriber-updates")
        if mode == "legacy":
            await gate.subscribe_resource(uri)
            toggle = await gate.call_tool(toggle_name, {})
            assert not toggle.is_error, toggle
            with anyio.fail_after(60):
                await arrived.wait()
            assert updated[0] == uri
            await gate.unsubscribe_resource(uri)
            return
        async with gate.listen(resource_subscriptions=[uri]) as subscription:
            toggle = await gate.call_tool(toggle_name, {})
            assert not toggle.is_error, toggle
            with anyio.fail_after(60):
                async for event in subscription:
                    if isinstance(event, ResourceUpdated):
                        assert event.uri == uri
                        break


async def _compare(direct: Client, gate: Client) -> None:
    capabilities = gate.server_capabilities
    assert capabilities.resources is not None and capabilities.prompts is not None

    upstream = await _all(direct, "list_resources", "resources")
    served = await _all(gate, "list_resources", "resources")
    assert upstream, "the reference server lists resources"
    # Same entries, field by field; toolgate sorts by URI for its cursors.
    assert sorted(served, key=lambda r: r["uri"]) == sorted(upstream, key=lambda r: r["uri"])

    upstream_templates = await _all(direct, "list_resource_templates", "resource_templates")
    served_templates = await _all(gate, "list_resource_templates", "resource_templates")
    assert upstream_templates
    key = lambda t: t["uriTemplate"]  # noqa: E731
    assert sorted(served_templates, key=key) == sorted(upstream_templates, key=key)

    # A static resource, read both ways.
    static = upstream[0]["uri"]
    assert _dump(await gate.read_resource(static)) == _dump(await direct.read_resource(static))
    # A templated one: the template expanded as a client would.
    template = upstream_templates[0]["uriTemplate"]
    expanded = template.split("{")[0] + "1"
    # The reference server writes the time of the read into a dynamic resource.
    direct_read = _untimed(_dump(await direct.read_resource(expanded)))
    assert _untimed(_dump(await gate.read_resource(expanded))) == direct_read

    upstream_prompts = await _all(direct, "list_prompts", "prompts")
    served_prompts = await _all(gate, "list_prompts", "prompts")
    assert upstream_prompts
    renamed = [{**p, "name": _prompt_name(p["name"])} for p in upstream_prompts]
    assert sorted(served_prompts, key=lambda p: p["name"]) == sorted(
        renamed, key=lambda p: p["name"]
    )

    # prompts/get with arguments: every prompt whose arguments are all plain strings.
    for prompt in upstream_prompts:
        arguments = {a["name"]: "1" for a in prompt.get("arguments", [])}
        try:
            expected = _dump(await direct.get_prompt(prompt["name"], arguments))
        except Exception:  # noqa: BLE001 - a prompt that wants other values: compare the error
            with pytest.raises(Exception):  # noqa: B017
                await gate.get_prompt(_prompt_name(prompt["name"]), arguments)
            continue
        got = _dump(await gate.get_prompt(_prompt_name(prompt["name"]), arguments))
        assert got == expected, prompt["name"]

    with pytest.raises(Exception, match="no resource"):
        await gate.read_resource("nothing://here")
    with pytest.raises(Exception, match="no prompt"):
        await gate.get_prompt("everything__no-such-prompt", {})


@asynccontextmanager
async def _gateway(project: Path, home: Path, **declare: Any) -> AsyncIterator[Any]:
    gateway = build_gateway(load_config(project / "toolgate.yaml"), home=home, audit="off")
    await gateway.start()
    try:
        yield gateway
    finally:
        await gateway.aclose()


class _Calls:
    def __init__(self) -> None:
        self.seen: list[FinishedCall] = []

    def observe(self, call: FinishedCall) -> None:
        self.seen.append(call)


async def _connected(gateway: Any) -> None:
    for _ in range(600):
        if gateway.offerings.resources():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the upstream's resources never arrived")


async def test_an_agent_denied_the_namespace_sees_and_reads_nothing_and_is_audited(
    everything: str, project: Path, toolgate_home: Path
) -> None:
    _declare(project, everything, policy=True)
    async with _gateway(project, toolgate_home) as gateway:
        calls = _Calls()
        gateway.observe_calls(calls)
        await _connected(gateway)
        offerings = gateway.offerings
        resources = offerings.resources(agent="reader")
        assert resources and offerings.prompts(agent="reader")
        assert offerings.templates(agent="reader")
        assert offerings.resources(agent="intern") == []
        assert offerings.templates(agent="intern") == []
        assert offerings.prompts(agent="intern") == []
        # An OAuth token whose scopes name other namespaces only: the same.
        assert offerings.resources(namespaces=frozenset({"other"})) == []

        uri = resources[0]["uri"]
        with pytest.raises(OfferingNotFound):
            await offerings.read_resource(uri, agent="intern", session="s1")
        prompt = offerings.prompts(agent="reader")[0]["name"]
        with pytest.raises(OfferingNotFound):
            await offerings.get_prompt(prompt, {}, agent="intern")
        denied = [c for c in calls.seen if c.agent == "intern"]
        assert [c.tool_id for c in denied] == [f"resource:{uri}", f"prompt:{prompt}"]
        assert all(c.outcome.code == "forbidden" for c in denied)

        result = await offerings.read_resource(uri, agent="reader", session="s2")
        assert result["contents"]
        record = calls.seen[-1]
        assert (record.tool_id, record.agent, record.session_id) == (
            f"resource:{uri}",
            "reader",
            "s2",
        )
        assert record.outcome.status == "ok"
        assert record.outcome.metadata["offering"]["server"] == NAMESPACE
        # The audit keeps a summary, never the contents themselves.
        text = json.dumps(record.outcome.content)
        for content in result["contents"]:
            for field in ("text", "blob"):
                if content.get(field):
                    assert content[field] not in text


async def test_an_upstream_that_is_down_gives_a_clear_error(
    project: Path, toolgate_home: Path, tmp_path: Path
) -> None:
    # A real server (the official SDK) that lists one resource and exits when its tool "quit"
    # is called; it is not restarted within the test (reconnect delay 30 s).
    script = tmp_path / "once.py"
    script.write_text(
        "import os\n"
        "from mcp.server.mcpserver import MCPServer\n"
        "server = MCPServer('once')\n"
        "@server.resource('memo://one')\n"
        "def one() -> str:\n"
        "    return 'one'\n"
        "@server.tool()\n"
        "def quit() -> str:\n"
        "    os._exit(0)\n"
        "server.run()\n"
    )
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: once}\nspec:\n"
        f"  command: {json.dumps(sys.executable)}\n  args: [{json.dumps(str(script))}]\n"
        "  sideEffects: {level: read_only}\n"
        "  reconnect: {initialDelaySeconds: 30, maxDelaySeconds: 60}\n"
        "  healthCheck: {periodSeconds: 0.5, timeoutSeconds: 5}\n"
    )
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )
    async with _gateway(project, toolgate_home) as gateway:
        await _connected(gateway)
        read = await gateway.offerings.read_resource("memo://one")
        assert read["contents"][0]["text"] == "one"
        quit_call = await gateway.call("once:quit", {})
        assert quit_call.status != "pending_approval", quit_call.message
        servers = gateway.mcp_servers()["once"][1]
        for _ in range(600):
            snapshot = servers.server("once")[1]
            if snapshot is not None and not snapshot.connected:
                break
            await asyncio.sleep(0.1)
        # The listing is kept while the server is down; reading says why it cannot be read.
        assert [r["uri"] for r in gateway.offerings.resources()] == ["memo://one"]
        with pytest.raises(BackendUnavailableError, match="MCP server once is not connected"):
            await gateway.offerings.read_resource("memo://one")


async def test_two_servers_listing_the_same_uris_are_told_apart_by_wrapped_uris(
    everything: str, project: Path, toolgate_home: Path
) -> None:
    documents = [
        "apiVersion: joch.dev/v1alpha1\nkind: MCPServer\n"
        f"metadata: {{name: {name}}}\nspec:\n  command: {json.dumps(everything)}\n"
        "  args: [stdio]\n  sideEffects: {level: read_only}\n"
        for name in ("alpha", "beta")
    ]
    (project / "upstream.yaml").write_text("---\n".join(documents))
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )
    async with _gateway(project, toolgate_home) as gateway:
        offerings = gateway.offerings
        for _ in range(600):
            if {r["uri"].split("/")[2] for r in offerings.resources()} >= {"alpha", "beta"}:
                break
            await asyncio.sleep(0.1)
        listed = [r["uri"] for r in offerings.resources()]
        assert listed and all(uri.startswith("toolgate://") for uri in listed)
        raw = unwrap(listed[0])
        assert raw is not None
        namespace, upstream = raw
        assert wrap(namespace, upstream) == listed[0]
        # The wrapped URI reads from its server, the contents naming it as listed.
        read = await offerings.read_resource(listed[0])
        assert read["contents"][0]["uri"] == listed[0]
        # The upstream URI alone matches both servers: refused, naming both wrapped forms.
        with pytest.raises(OfferingAmbiguous) as refused:
            await offerings.read_resource(upstream)
        assert wrap("alpha", upstream) in str(refused.value)
        assert wrap("beta", upstream) in str(refused.value)
        # Templates keep their uriTemplate; an expansion matching both is refused alike.
        template = offerings.templates()[0]["uriTemplate"]
        with pytest.raises(OfferingAmbiguous):
            await offerings.read_resource(template.split("{")[0] + "1")
        names = {p["name"] for p in offerings.prompts()}
        assert to_provider_name("alpha:simple-prompt") in names
        assert to_provider_name("beta:simple-prompt") in names


async def test_a_server_without_templates_still_serves_its_resources_bounded(
    project: Path, toolgate_home: Path
) -> None:
    server = Path(__file__).parent / "fixtures" / "mcp" / "resources_only_server.py"
    (project / "upstream.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: memo}\nspec:\n"
        f"  command: {json.dumps(sys.executable)}\n  args: [{json.dumps(str(server))}]\n"
    )
    (project / "toolgate.yaml").write_text(
        "sources:\n  - path: upstream.yaml\n    format: resource\n"
    )
    async with _gateway(project, toolgate_home) as gateway:
        await _connected(gateway)
        offerings = gateway.offerings
        resources = offerings.resources()
        assert [r["uri"] for r in resources] == ["memo://kept", "memo://second"]
        assert len(resources[0]["description"]) == MAX_DESCRIPTION  # cut, not refused
        assert resources[1]["mimeType"] == "text/plain"
        assert offerings.templates() == [] and offerings.prompts() == []
        read = await offerings.read_resource("memo://second")
        assert read["contents"][0]["text"] == "memo"
