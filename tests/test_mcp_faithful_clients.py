"""A faithful MCP gateway (issue 27) seen by third-party clients: the official TypeScript SDK
client (``@modelcontextprotocol/sdk``, pinned) and the MCP Inspector CLI
(``@modelcontextprotocol/inspector``, pinned), both installed by ``.ci/run`` into
``.cache/mcp-clients``.

Each sends the same requests to ``mcp-server-everything`` directly and through ``toolgate
serve``; the answers are compared field by field with the named allowances and normalizers of
``tests/mcp_faithful_support.py``. The TypeScript client also runs a task-augmented call of the
reference server's ``simulate-research-query`` (``execution.taskSupport: required``) end to end —
created task, status, result — and cancels another, directly and through toolgate.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from mcp_faithful_support import (
    EVERYTHING,
    INSPECTOR_VERSION,
    TS_CLIENT,
    TS_SDK_VERSION,
    Gateway,
    assert_same,
    by_name,
    faithful_setup,
    is_error_stated,
    namespaced,
    node,
    node_json,
    npm_package,
    task_outline,
    without_envelope,
)

pytestmark = pytest.mark.slow

#: The calls the TypeScript client makes, by the upstream's tool name.
TS_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"message": "from TypeScript"}),
    ("get-sum", {"a": 2, "b": 40}),
    ("get-tiny-image", {}),
    ("get-resource-links", {"count": 2}),
    # The TypeScript client validates structuredContent against the tool's outputSchema.
    ("get-structured-content", {"location": "Chicago"}),
]
TASK_TOOL = ("simulate-research-query", {"topic": "bees"})


def _steps(rename: Any) -> list[dict[str, Any]]:
    name, arguments = TASK_TOOL
    return [
        {"op": "listTools"},
        *({"op": "callTool", "name": rename(tool), "arguments": args} for tool, args in TS_CALLS),
        {"op": "taskCall", "name": rename(name), "arguments": arguments},
        {"op": "taskCancel", "name": rename(name), "arguments": {"topic": "ants"}},
    ]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    npm_package("@modelcontextprotocol/sdk", TS_SDK_VERSION)
    with faithful_setup(tmp_path_factory.mktemp("mcp-faithful-clients")) as running:
        yield running


@pytest.fixture(scope="module")
def ts_answers(gateway: Gateway) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every step's answer, directly and through toolgate (the two clients run side by side:
    each waits for a task of about four seconds)."""
    direct = node([str(TS_CLIENT), gateway.everything_url, json.dumps(_steps(str))])
    through = node(
        [
            str(TS_CLIENT),
            gateway.toolgate_url,
            json.dumps(_steps(lambda tool: namespaced(EVERYTHING, tool))),
        ]
    )
    return node_json(direct)["steps"], node_json(through)["steps"]


def _result(answer: dict[str, Any], what: str) -> Any:
    assert "error" not in answer, f"{what} failed: {answer['error']}"
    return answer["result"]


def test_typescript_client_lists_the_upstreams_tools(ts_answers: Any) -> None:
    direct, through = ts_answers
    upstream = by_name(_result(direct[0], "tools/list directly")["tools"])
    prefix = namespaced(EVERYTHING, "")
    served = {
        tool["name"][len(prefix) :]: {**tool, "name": tool["name"][len(prefix) :]}
        for tool in _result(through[0], "tools/list through toolgate")["tools"]
        if tool["name"].startswith(prefix)
    }
    assert_same(upstream, served, "tools/list (TypeScript client)")


@pytest.mark.parametrize("index", range(len(TS_CALLS)), ids=[tool for tool, _ in TS_CALLS])
def test_typescript_client_calls_answer_as_the_upstream(ts_answers: Any, index: int) -> None:
    direct, through = ts_answers
    tool = TS_CALLS[index][0]
    upstream = _result(direct[1 + index], f"{tool} directly")
    assert not upstream.get("isError"), upstream
    served = _result(through[1 + index], f"{tool} through toolgate")
    assert_same(upstream, is_error_stated(upstream, served), tool)


def test_typescript_client_gets_typed_image_and_resource_link_blocks(ts_answers: Any) -> None:
    """Rich content "renders as such": the client receives image and resource_link blocks."""
    _direct, through = ts_answers
    names = [tool for tool, _ in TS_CALLS]
    image = _result(through[1 + names.index("get-tiny-image")], "get-tiny-image")
    links = _result(through[1 + names.index("get-resource-links")], "get-resource-links")
    assert [block["type"] for block in image["content"]] == ["text", "image", "text"]
    assert image["content"][1]["mimeType"] == "image/png"
    assert [block["type"] for block in links["content"]] == [
        "text",
        "resource_link",
        "resource_link",
    ]


def test_a_task_augmented_call_runs_to_its_result_as_on_the_upstream(ts_answers: Any) -> None:
    direct, through = ts_answers
    upstream = _result(direct[-2], "the task-augmented call directly")
    # The reference server runs it as a task: created working, ends completed with a report.
    assert upstream["error"] is None and upstream["created"]["status"] == "working"
    assert upstream["final"]["status"] == "completed"
    assert "# Research Report: bees" in upstream["result"]["content"][0]["text"]
    served = _result(through[-2], "the task-augmented call through toolgate")
    if served.get("result") is not None:
        # Allowances "envelope" and "isError stated", as for any tools/call result.
        served["result"] = without_envelope(is_error_stated(upstream["result"], served["result"]))
    assert_same(task_outline(upstream), task_outline(served), "task-augmented call")


def test_a_task_cancelled_through_toolgate_is_cancelled_as_on_the_upstream(
    ts_answers: Any,
) -> None:
    direct, through = ts_answers
    upstream = _result(direct[-1], "tasks/cancel directly")
    assert upstream["final"]["status"] == "cancelled"
    served = _result(through[-1], "tasks/cancel through toolgate")
    assert_same(task_outline(upstream), task_outline(served), "tasks/cancel")


# -- the MCP Inspector CLI ---------------------------------------------------------------------


def _inspector(url: str, *args: str) -> Any:
    cli = npm_package("@modelcontextprotocol/inspector", INSPECTOR_VERSION) / "cli/build/cli.js"
    done = subprocess.run(
        ["node", str(cli), "--cli", url, "--transport", "http", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the Inspector failed: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    return json.loads(done.stdout)


def test_the_inspector_cli_lists_and_calls_through_toolgate(gateway: Gateway) -> None:
    upstream = by_name(_inspector(gateway.everything_url, "--method", "tools/list")["tools"])
    served = by_name(_inspector(gateway.toolgate_url, "--method", "tools/list")["tools"])
    name = namespaced(EVERYTHING, "get-sum")
    assert name in served, f"{name} not listed: {sorted(served)}"
    assert_same(upstream["get-sum"], {**served[name], "name": "get-sum"}, "Inspector tools/list")
    call = ["--method", "tools/call", "--tool-arg", "a=19", "b=23", "--tool-name"]
    upstream_sum = _inspector(gateway.everything_url, *call, "get-sum")
    served_sum = _inspector(gateway.toolgate_url, *call, name)
    assert upstream_sum["content"] == [{"type": "text", "text": "The sum of 19 and 23 is 42."}]
    assert_same(upstream_sum, is_error_stated(upstream_sum, served_sum), "Inspector tools/call")
