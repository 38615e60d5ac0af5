"""The README's promise, end to end: ``toolgate serve`` on a fresh $TOOLGATE_HOME serves the demo
tools; the web UI shows them; the official MCP client connects over streamable HTTP and calls
them; a call that needs approval is approved in a real browser and the agent's retry runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from doc_blocks import doc_block
from serve_support import serving

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get("TOOLGATE_SCREENSHOTS", Path(__file__).parent / "artifacts" / "screenshots")
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """``toolgate serve --port 0`` as a user runs it; yields its base URL."""
    env = {**os.environ, "TOOLGATE_HOME": str(tmp_path / "home")}
    (tmp_path / "README.md").write_text("one two three\n")  # for the word_count script tool
    with serving(tmp_path, env) as (url, _):
        yield url


def _client(url: str) -> Client:
    return Client(streamable_http_client(url + "/mcp", http_client=httpx2.AsyncClient(timeout=60)))


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_the_web_ui_lists_the_demo_tools(served: str) -> None:
    async with httpx2.AsyncClient() as http:
        page = await http.get(served + "/")
    assert page.status_code == 200
    assert 'data-tool="demo:add"' in page.text and 'data-tool="demo:send_message"' in page.text


async def test_an_mcp_client_calls_the_demo_tools(served: str) -> None:
    async with _client(served) as mcp:
        listed = await mcp.list_tools()
        names = {tool.name for tool in listed.tools}
        assert {"demo__add", "demo__send_message", "demo__word_count"} <= names
        result = await mcp.call_tool("demo__add", {"a": 2, "b": 40})
        assert not result.is_error and _text(result) == "42"
        script = await mcp.call_tool("demo__word_count", {"path": "README.md"})
        assert not script.is_error, _text(script)
        assert "words" in _text(script)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="apt-get install chromium")
async def test_a_call_that_needs_approval_is_approved_in_the_browser(served: str) -> None:
    from playwright.async_api import async_playwright

    arguments = {"to": "Ada", "text": "The gateway is up."}
    async with _client(served) as mcp:
        pending = await mcp.call_tool("demo__send_message", arguments)
        assert pending.is_error
        request_id = (pending.meta or {})["toolgate/approval"]["id"]
        assert f"/approvals/{request_id}" in _text(pending)

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
            try:
                page = await browser.new_page()
                await page.goto(served + "/approvals")
                card = page.locator(f'article[data-approval="{request_id}"]')
                await card.wait_for(state="visible")
                assert "Send" in await card.inner_text() and "Ada" in await card.inner_text()
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(SCREENSHOTS / "serve-approval-inbox.png"))
                await card.get_by_role("button", name="Allow once").click()
                await page.wait_for_url(f"**/approvals/{request_id}")
                # Only the decision is recorded: the agent's retry runs the call.
                status = page.locator("#request-status")
                assert await status.inner_text() == "approved"
                assert "Nothing ran here" in await page.locator("#runs-on-retry").inner_text()
                assert await page.locator("#outcome").count() == 0
                await page.screenshot(path=str(SCREENSHOTS / "serve-approval-done.png"))

                retried = await mcp.call_tool("demo__send_message", arguments)
                assert not retried.is_error, _text(retried)
                assert "demo: messages are not delivered" in _text(retried)
                # The request's page shows the outcome of the run the retry made.
                await page.goto(served + f"/approvals/{request_id}")
                assert await page.locator("#outcome").get_attribute("data-status") == "ok"
                assert await page.locator("#runs-on-retry").count() == 0
            finally:
                await browser.close()


def test_the_documented_python_client_runs_against_the_server(served: str, tmp_path: Path) -> None:
    script = tmp_path / "client.py"
    script.write_text(doc_block("connect:client.py"), encoding="utf-8")
    ran = subprocess.run(
        [sys.executable, str(script), served + "/mcp"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    listed, answer = ran.stdout.splitlines()
    assert "'demo__add'" in listed and "'demo__send_message'" in listed
    assert answer == "42"
