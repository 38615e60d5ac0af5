"""A faithful MCP gateway (issue 27): the same requests sent to each upstream directly and
through ``toolgate serve`` (and ``toolgate mcp``) get the same answers, field by field, with the
official Python client.

The upstreams are the reference ``mcp-server-everything`` (streamable HTTP) and the Python
upstream ``tests/fixtures/mcp_faithful/python_upstream.py`` (stdio); the harness, the named
allowances and the normalizers are in ``tests/mcp_faithful_support.py``. Compared:
``tools/list``, every tool's call (the tools not called are listed with the reason),
``resources/list``, ``resources/templates/list``, ``resources/read`` of every listed resource
and of a template, ``prompts/list`` and ``prompts/get`` of every prompt.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from mcp_faithful_support import (
    EVERYTHING,
    EVERYTHING_CALLS,
    EVERYTHING_NOT_CALLED,
    PYTHON,
    PYTHON_CALLS,
    PYTHON_NOT_CALLED,
    PYTHON_UPSTREAM,
    Call,
    Gateway,
    assert_same,
    by_name,
    faithful_setup,
    namespaced,
    python_upstream_env,
    wire,
    without_envelope,
    without_session_resources,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with faithful_setup(tmp_path_factory.mktemp("mcp-faithful")) as running:
        yield running


@asynccontextmanager
async def direct(upstream: str, gateway: Gateway) -> AsyncIterator[Client]:
    """A client of the upstream itself, in the era toolgate's answers are compared in."""
    server: Any
    if upstream == EVERYTHING:
        server = gateway.everything_url
    else:
        server = StdioServerParameters(
            command=sys.executable, args=[str(PYTHON_UPSTREAM)], env=python_upstream_env()
        )
    async with Client(server, mode="legacy", cache=None) as client:
        yield client


@asynccontextmanager
async def through(gateway: Gateway, mode: str = "legacy") -> AsyncIterator[Client]:
    """A client of toolgate's MCP endpoint, same era as :func:`direct` unless ``mode`` says
    otherwise (``auto``: the 2026-07-28 era, the Python SDK's default)."""
    async with Client(gateway.toolgate_url, mode=mode, cache=None) as client:
        yield client


UPSTREAMS = [EVERYTHING, PYTHON]
CALLS = [(EVERYTHING, call) for call in EVERYTHING_CALLS] + [(PYTHON, c) for c in PYTHON_CALLS]
NOT_CALLED = {EVERYTHING: EVERYTHING_NOT_CALLED, PYTHON: PYTHON_NOT_CALLED}


def _served_by(namespace: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The entries of one upstream in toolgate's listing, under the upstream's own names."""
    prefix = namespaced(namespace, "")
    return {
        item["name"][len(prefix) :]: {**item, "name": item["name"][len(prefix) :]}
        for item in items
        if item["name"].startswith(prefix)
    }


# -- tools ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_tools_list_is_the_upstreams_with_the_namespace_prefix(
    gateway: Gateway, upstream: str
) -> None:
    async with direct(upstream, gateway) as client:
        upstream_tools = by_name(wire(await client.list_tools())["tools"])
    async with through(gateway) as client:
        listed = wire(await client.list_tools())["tools"]
    # Nothing but the two upstreams' tools is served (this configuration declares no other).
    prefixes = tuple(namespaced(namespace, "") for namespace in UPSTREAMS)
    assert [t["name"] for t in listed if not t["name"].startswith(prefixes)] == []
    # Allowance "namespace prefix": every name is the upstream's, as written, after the prefix
    # (a renamed tool shows as one missing and one added).
    assert_same(upstream_tools, _served_by(upstream, listed), f"tools/list of {upstream}")


def test_every_tool_is_called_or_listed_with_the_reason(gateway: Gateway) -> None:
    """The call table covers every tool the upstreams list: none is skipped silently."""
    import anyio

    async def names(upstream: str) -> set[str]:
        async with direct(upstream, gateway) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    for upstream, calls in ((EVERYTHING, EVERYTHING_CALLS), (PYTHON, PYTHON_CALLS)):
        listed = anyio.run(names, upstream)
        covered = {call.tool for call in calls} | set(NOT_CALLED[upstream])
        assert listed == covered, f"{upstream}: not in the call table: {sorted(listed - covered)}"


@pytest.mark.parametrize(("upstream", "call"), CALLS, ids=[f"{u}:{c.tool}" for u, c in CALLS])
async def test_every_tools_call_answers_as_the_upstream(
    gateway: Gateway, upstream: str, call: Call
) -> None:
    # The toggles keep per-session state: call each twice (on, then off) on both sides.
    times = 2 if call.tool.startswith("toggle-") else 1
    async with direct(upstream, gateway) as client:
        upstream_results = [
            wire(await client.call_tool(call.tool, call.arguments)) for _ in range(times)
        ]
    async with through(gateway) as client:
        results = [
            wire(await client.call_tool(namespaced(upstream, call.tool), call.arguments))
            for _ in range(times)
        ]
    # The table's arguments are valid: the upstream itself answers without an error.
    assert not any(r.get("isError") for r in upstream_results), upstream_results
    for upstream_result, result in zip(upstream_results, results, strict=True):
        assert_same(
            without_envelope(upstream_result),
            without_envelope(result),
            f"tools/call {upstream}:{call.tool}",
        )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_rich_content_reaches_the_client_as_typed_blocks(gateway: Gateway, mode: str) -> None:
    """Images, audio, resource links and embedded resources are blocks of their own type, in
    both protocol eras."""
    async with through(gateway, mode) as client:
        image = await client.call_tool(namespaced(EVERYTHING, "get-tiny-image"), {})
        links = await client.call_tool(namespaced(EVERYTHING, "get-resource-links"), {"count": 2})
        mixed = await client.call_tool(namespaced(PYTHON, "mixed_content"), {})
    assert [block.type for block in image.content] == ["text", "image", "text"]
    assert image.content[1].mime_type == "image/png"  # type: ignore[union-attr]
    assert [block.type for block in links.content] == ["text", "resource_link", "resource_link"]
    assert [block.type for block in mixed.content] == ["text", "resource_link", "resource", "audio"]


# -- resources -----------------------------------------------------------------------------------


async def _resources(client: Client) -> list[dict[str, Any]]:
    """Every page of resources/list."""
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = wire(await client.list_resources(cursor=cursor))
        found += page["resources"]
        cursor = page.get("nextCursor")
        if not cursor:
            return found


@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_resources_list_is_the_upstreams(gateway: Gateway, upstream: str) -> None:
    async with direct(upstream, gateway) as client:
        upstream_resources = {item["uri"]: item for item in await _resources(client)}
    async with through(gateway) as client:
        served = {item["uri"]: item for item in await _resources(client)}
    upstream_resources = without_session_resources(upstream_resources)
    assert upstream_resources
    # Entries are the upstream's as listed, URI and name included (no namespace prefix: a
    # resource is known by its URI); the other upstream's are not this comparison's.
    mine = {uri: item for uri, item in served.items() if uri in upstream_resources}
    assert_same(upstream_resources, mine, f"resources/list of {upstream}")


@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_resource_templates_list_is_the_upstreams(gateway: Gateway, upstream: str) -> None:
    async with direct(upstream, gateway) as client:
        listed = wire(await client.list_resource_templates())["resourceTemplates"]
    async with through(gateway) as client:
        served = wire(await client.list_resource_templates())["resourceTemplates"]
    upstream_templates = {item["uriTemplate"]: item for item in listed}
    assert upstream_templates
    mine = {t["uriTemplate"]: t for t in served if t["uriTemplate"] in upstream_templates}
    assert_same(upstream_templates, mine, f"resources/templates/list of {upstream}")


#: Resources read through a template: (upstream, URI).
TEMPLATE_READS = [
    (EVERYTHING, "demo://resource/dynamic/text/3"),
    (EVERYTHING, "demo://resource/dynamic/blob/4"),
    (PYTHON, "faithful://notes/shopping"),
]


@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_every_listed_resource_reads_as_the_upstreams(
    gateway: Gateway, upstream: str
) -> None:
    async with direct(upstream, gateway) as client:
        uris = list(without_session_resources({i["uri"]: i for i in await _resources(client)}))
        uris += [uri for owner, uri in TEMPLATE_READS if owner == upstream]
        upstream_reads = {uri: wire(await client.read_resource(uri)) for uri in uris}
    assert uris
    async with through(gateway) as client:
        reads = {uri: wire(await client.read_resource(uri)) for uri in uris}
    for uri in uris:
        assert_same(
            without_envelope(upstream_reads[uri]),
            without_envelope(reads[uri]),
            f"resources/read {uri}",
        )


async def test_a_resource_link_made_through_toolgate_reads_back_through_toolgate(
    gateway: Gateway,
) -> None:
    """A client follows a resource_link of a result: the URI reads through toolgate, and its
    contents are what the upstream returned inline for the same input."""
    arguments = {"name": "link.txt.gz", "data": "data:text/plain;base64,aGVsbG8="}
    async with through(gateway) as client:
        tool = namespaced(EVERYTHING, "gzip-file-as-resource")
        inline = await client.call_tool(tool, {**arguments, "outputType": "resource"})
        linked = await client.call_tool(tool, {**arguments, "outputType": "resourceLink"})
        assert [block.type for block in linked.content] == ["resource_link"], wire(linked)
        link = wire(linked)["content"][0]
        assert link["uri"] == "demo://resource/session/link.txt.gz"
        read = wire(await client.read_resource(link["uri"]))
    embedded = wire(inline)["content"][0]
    assert embedded["type"] == "resource", wire(inline)
    assert read["contents"] == [embedded["resource"]]


# -- prompts -------------------------------------------------------------------------------------


#: Arguments valid for every prompt of the two upstreams.
PROMPT_ARGUMENTS: dict[tuple[str, str], dict[str, str]] = {
    (EVERYTHING, "simple-prompt"): {},
    (EVERYTHING, "args-prompt"): {"city": "Lisbon", "state": "Lisboa"},
    (EVERYTHING, "completable-prompt"): {"department": "Engineering", "name": "Alice"},
    (EVERYTHING, "resource-prompt"): {"resourceType": "Text", "resourceId": "2"},
    (PYTHON, "review-code"): {"code": "print('hi')", "language": "python"},
}


@pytest.mark.parametrize("upstream", UPSTREAMS)
async def test_prompts_list_is_the_upstreams(gateway: Gateway, upstream: str) -> None:
    async with direct(upstream, gateway) as client:
        upstream_prompts = by_name(wire(await client.list_prompts())["prompts"])
    async with through(gateway) as client:
        served = wire(await client.list_prompts())["prompts"]
    assert set(upstream_prompts) == {name for owner, name in PROMPT_ARGUMENTS if owner == upstream}
    assert_same(upstream_prompts, _served_by(upstream, served), f"prompts/list of {upstream}")


@pytest.mark.parametrize(
    ("upstream", "prompt"), list(PROMPT_ARGUMENTS), ids=[f"{u}:{p}" for u, p in PROMPT_ARGUMENTS]
)
async def test_every_prompt_gets_as_the_upstreams(
    gateway: Gateway, upstream: str, prompt: str
) -> None:
    arguments = PROMPT_ARGUMENTS[(upstream, prompt)]
    async with direct(upstream, gateway) as client:
        upstream_prompt = wire(await client.get_prompt(prompt, arguments))
    async with through(gateway) as client:
        served = wire(await client.get_prompt(namespaced(upstream, prompt), arguments))
    assert_same(
        without_envelope(upstream_prompt), without_envelope(served), f"prompts/get {prompt}"
    )


# -- over stdio: toolgate mcp ----------------------------------------------------------------------


async def test_toolgate_mcp_over_stdio_answers_as_the_upstream(gateway: Gateway) -> None:
    """The same comparison through ``toolgate mcp`` for the Python upstream: tools/list, an
    image call, a structured one, resources/list, a resource read and a prompt."""
    stdio = StdioServerParameters(
        command=str(Path(sys.executable).parent / "toolgate"),
        args=["mcp"],
        cwd=str(gateway.project),
        env=gateway.env,
    )
    prompt_arguments = PROMPT_ARGUMENTS[(PYTHON, "review-code")]
    async with direct(PYTHON, gateway) as client:
        upstream = {
            "tools": by_name(wire(await client.list_tools())["tools"]),
            "image": without_envelope(wire(await client.call_tool("tiny_image", {}))),
            "distance": without_envelope(
                wire(await client.call_tool("geo.distance", {"start": 1, "end": 9}))
            ),
            "resources": {item["uri"]: item for item in await _resources(client)},
            "note": without_envelope(wire(await client.read_resource("faithful://notes/a"))),
            "prompt": without_envelope(
                wire(await client.get_prompt("review-code", prompt_arguments))
            ),
        }
    async with Client(stdio, mode="legacy", cache=None, read_timeout_seconds=60) as client:
        listed = wire(await client.list_tools())["tools"]
        assert_same(upstream["tools"], _served_by(PYTHON, listed), "tools/list over stdio")
        image = wire(await client.call_tool(namespaced(PYTHON, "tiny_image"), {}))
        assert_same(upstream["image"], without_envelope(image), "tiny_image over stdio")
        distance = wire(
            await client.call_tool(namespaced(PYTHON, "geo.distance"), {"start": 1, "end": 9})
        )
        assert_same(upstream["distance"], without_envelope(distance), "geo.distance over stdio")
        served = {item["uri"]: item for item in await _resources(client)}
        resources = {uri: item for uri, item in served.items() if uri in upstream["resources"]}
        assert_same(upstream["resources"], resources, "resources/list over stdio")
        note = wire(await client.read_resource("faithful://notes/a"))
        assert_same(upstream["note"], without_envelope(note), "resources/read over stdio")
        prompt = wire(await client.get_prompt(namespaced(PYTHON, "review-code"), prompt_arguments))
        assert_same(upstream["prompt"], without_envelope(prompt), "prompts/get over stdio")
