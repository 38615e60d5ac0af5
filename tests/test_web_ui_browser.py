"""The web UI in a real browser: Debian's chromium driven by Playwright, against uvicorn.

Each test saves screenshots of the pages it visits in ``tests/artifacts/screenshots`` (or
``$TOOLGATE_SCREENSHOTS``) for a person to look at; those the docs show are also copied into
``docs/assets/screenshots``. Every page is also checked for what the
browser refused: a Content-Security-Policy violation or a script that ran.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolgate import Gateway
from toolgate.model import CallStatus
from toolgate.serve.web import build_ui
from web_support import (
    CHROMIUM,
    SCREENSHOTS,
    Served,
    make_gateway,
    publish_screenshot,
    screenshot_path,
    serve,
)

playwright_api = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} is not installed (apt-get install chromium)"
    ),
    pytest.mark.slow,
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    print(f"screenshots go to {SCREENSHOTS}", file=sys.stderr)
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield browser
        finally:
            browser.close()


class Session:
    """A console served for one test, and a browser tab on it that records what went wrong."""

    def __init__(self, browser: Any, gateway: Gateway, served: Served) -> None:
        self.gateway = gateway
        self.served = served
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on("dialog", self._dialog)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(message.text)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def open(self, path: str) -> Any:
        response = self.page.goto(self.served.url + path)
        assert response is not None and response.ok, f"{path}: {response and response.status}"
        return self.page

    def shot(self, name: str) -> None:
        path = screenshot_path(name)
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 0
        publish_screenshot(path)

    def check(self) -> None:
        """Nothing was refused by the CSP, no script error, no dialog, nothing injected ran."""
        assert self.problems == []
        assert self.dialogs == []
        assert self.page.evaluate("window.__pwned") is None

    def pending(self, **arguments: Any) -> str:
        outcome = self.gateway.call_sync(
            "ops:deploy", arguments or {"service": "api", "version": "2.0"}, agent="agent-7"
        )
        assert outcome.approval is not None
        return outcome.approval.id


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    folder.mkdir()
    (folder / "old.txt").write_text("alpha\nbeta\ngamma\ndelta\n", encoding="utf-8")
    (folder / "new.txt").write_text("alpha\nBETA\ngamma\ndelta\nepsilon\n", encoding="utf-8")
    return folder


@pytest.fixture
def session(browser: Any, tmp_path: Path, workspace: Path) -> Iterator[Session]:
    gateway = make_gateway(tmp_path)
    try:
        app = build_ui(gateway, workspace=workspace, poll_interval=0.5)
        with serve(app) as served:
            session = Session(browser, gateway, served)
            try:
                yield session
                session.check()
            finally:
                session.context.close()
    finally:
        gateway.close()


def test_catalog_shows_the_demo_tools(session: Session) -> None:
    page = session.open("/")
    tiles = page.locator("article.tile")
    assert tiles.count() == len(session.gateway.entries())
    tile = page.locator('article.tile[data-tool="demo:file_diff"]')
    assert tile.locator(".badge.phase").inner_text() == "Ready"
    assert tile.locator(".badge.source").inner_text() == "tool-folder"
    session.shot("catalog")
    page.locator('article.tile[data-tool="demo:diff_text"] h3 a').click()
    page.wait_for_url(re.compile(r"/tools/demo(%3A|:)diff_text$"))
    assert page.locator("h1").inner_text() == "Diff two texts"
    session.shot("tool-page")


def test_catalog_pages_through_a_catalog_larger_than_a_page(browser: Any, tmp_path: Path) -> None:
    gateway = make_gateway(tmp_path)
    try:
        entries = [entry.tool.id for entry in gateway.entries()]
        size = 5
        with serve(build_ui(gateway, catalog_page_size=size)) as served:
            session = Session(browser, gateway, served)
            try:
                page = session.open("/")
                shown = page.locator("article.tile").evaluate_all(
                    "tiles => tiles.map(tile => tile.dataset.tool)"
                )
                assert shown == entries[:size]
                pages = -(-len(entries) // size)
                total = page.locator("#catalog-total").inner_text()
                assert total == f"{len(entries)} tools · 1–{size} on page 1 of {pages}"
                page.locator('nav.pager a[rel="next"]').click()
                page.wait_for_url(re.compile(r"/\?page=2$"))
                shown = page.locator("article.tile").evaluate_all(
                    "tiles => tiles.map(tile => tile.dataset.tool)"
                )
                assert shown == entries[size : 2 * size]
                page.locator('nav.pager a[rel="prev"]').click()
                page.wait_for_url(re.compile(r"/\?page=1$"))
                assert page.locator("article.tile").count() == size
                session.check()
            finally:
                session.context.close()
    finally:
        gateway.close()


def test_approve_a_pending_call_and_see_it_complete_on_the_agents_retry(session: Session) -> None:
    page = session.open("/approvals")
    assert page.locator("#inbox .empty").is_visible()
    session.shot("approvals-empty")
    request_id = session.pending()
    # The inbox picks the new request up by itself (polling), without a reload.
    card = page.locator(f'article[data-approval="{request_id}"]')
    card.wait_for(state="visible")
    assert page.locator("#pending-badge").inner_text() == "1"
    assert "high risk" in card.inner_text()
    session.shot("approvals-inbox")
    card.get_by_role("button", name="Allow once").click()
    page.wait_for_url(f"**/approvals/{request_id}")
    # Only the decision was recorded: nothing ran, the page says the agent's retry runs it.
    assert page.locator("#request-status").inner_text() == "approved"
    assert page.locator("#outcome").count() == 0
    note = page.locator("#runs-on-retry").inner_text()
    assert "agent-7 calls the tool again" in note and "Nothing ran here" in note
    session.shot("approval-approved")
    retry = session.gateway.call_sync(
        "ops:deploy", {"service": "api", "version": "2.0"}, agent="agent-7"
    )
    assert retry.status is CallStatus.OK  # the agent's retry runs the approved call
    assert retry.metadata["approval"] == {"id": request_id, "decision": "approve"}
    page = session.open(f"/approvals/{request_id}")
    assert page.locator("#outcome").get_attribute("data-status") == "ok"
    assert "api is now at 2.0" in page.locator("#outcome").inner_text()
    assert page.locator("#runs-on-retry").count() == 0
    session.shot("approval-completed")


def test_deny_a_pending_call(session: Session) -> None:
    request_id = session.pending(service="billing", version="0.1")
    page = session.open("/approvals")
    card = page.locator(f'article[data-approval="{request_id}"]')
    card.locator('input[name="message"]').fill("billing is frozen this week")
    card.get_by_role("button", name="Deny").click()
    page.wait_for_url(f"**/approvals/{request_id}")
    assert page.locator("#request-status").inner_text() == "denied"
    session.shot("approval-denied")
    retry = session.gateway.call_sync(
        "ops:deploy", {"service": "billing", "version": "0.1"}, agent="agent-7"
    )
    assert retry.code == "user_rejection" and "billing is frozen" in (retry.message or "")


def test_always_allow_lists_the_grant_in_settings(session: Session) -> None:
    request_id = session.pending()
    page = session.open("/approvals")
    page.locator(f'article[data-approval="{request_id}"]').get_by_role(
        "button", name="Always allow"
    ).click()
    page.wait_for_url(f"**/approvals/{request_id}")
    assert page.locator("#request-status").inner_text() == "approved"  # recorded, not run
    assert page.locator("#runs-on-retry").is_visible()
    page.get_by_role("link", name="Settings").click()
    row = page.locator("table.grants tr[data-grant]")
    assert row.count() == 1 and "ops:deploy" in row.inner_text()
    assert "by operator" in row.inner_text()
    session.shot("settings-grants")
    row.get_by_role("button", name="Revoke").click()
    assert page.locator("#notice").inner_text().endswith("grant revoked")
    assert page.locator("table.grants tr[data-grant]").count() == 0


def test_a_diff_visualization_is_rendered_in_colour(session: Session) -> None:
    page = session.open("/tools/demo:file_diff")
    page.locator("#arguments").fill('{"oldPath": "old.txt", "newPath": "new.txt"}')
    page.get_by_role("button", name="Call file_diff").click()
    outcome = page.locator("#outcome")
    outcome.wait_for(state="visible")
    assert outcome.get_attribute("data-status") == "ok"
    viz = outcome.locator('details[data-viz="diff"]')
    assert viz.is_visible()
    added = viz.locator("tr.line.add td.src")
    removed = viz.locator("tr.line.del td.src")
    assert [text.strip() for text in added.all_inner_texts()] == ["+BETA", "+epsilon"]
    assert [text.strip() for text in removed.all_inner_texts()] == ["-beta"]
    green = added.first.evaluate("cell => getComputedStyle(cell).backgroundColor")
    red = removed.first.evaluate("cell => getComputedStyle(cell).backgroundColor")
    assert green == "rgb(230, 246, 234)" and red == "rgb(253, 236, 236)"
    session.shot("diff-from-try-it")
    assert session.gateway.audit is not None and session.gateway.audit.flush(10)
    page = session.open("/audit")
    session.shot("audit")
    page.locator('tr[data-call] td a[href*="/audit/calls/"]').first.click()
    page.wait_for_url(re.compile(r"/audit/calls/"))
    assert page.locator('details[data-viz="diff"] tr.line.add').count() == 2
    session.shot("audit-call-diff")


def test_every_visualization_type_in_the_browser(session: Session, workspace: Path) -> None:
    gateway = session.gateway
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "diffs": (
            "demo:diff_texts",
            {"edits": [{"path": "a.py", "old": "x = 1\n", "new": "x = 2\n"}]},
        ),
        "code": ("demo:show_code", {"code": "def greet(name):\n    return f'hi {name}'\n"}),
        "table": ("demo:table", {"sort_by": "moons", "limit": 5}),
        "markdown": ("demo:render_markdown", {"text": "# Notes\n\n- one\n- **two**\n"}),
        "shell-output": ("demo:shell_echo", {"text": "hello", "stderr": "a warning"}),
        "todo-list": (
            "demo:todo",
            {"items": [{"content": "Write", "status": "completed"}, {"content": "Ship"}]},
        ),
        "file-list": ("demo:list_files", {}),
    }
    for tool_id, arguments in calls.values():
        outcome = gateway.call_sync(tool_id, arguments, workspace=workspace)
        assert outcome.status is CallStatus.OK, outcome.message
    assert gateway.audit is not None and gateway.audit.flush(10)
    for kind, (tool_id, _) in calls.items():
        page = session.open(f"/audit?tool={tool_id}")
        page.locator('tr[data-call] td a[href*="/audit/calls/"]').first.click()
        page.wait_for_url(re.compile(r"/audit/calls/"))
        assert page.locator(f'details[data-viz="{kind}"]').is_visible()
        session.shot(f"visualization-{kind}")
    assert page.locator(".todo li").count() == 0  # the last page was the file list
    page = session.open("/audit?tool=demo:show_code")
    page.locator('tr[data-call] td a[href*="/audit/calls/"]').first.click()
    page.wait_for_url(re.compile(r"/audit/calls/"))
    assert page.locator(".hl .k").first.inner_text() == "def"  # highlighted


def test_connect_a_capability(session: Session) -> None:
    secret = "crm-token-9f8e7d6c5b4a"
    page = session.open("/settings")
    card = page.locator('article[data-capability="crm"]')
    assert card.locator(".connection-state").inner_text() == "not connected"
    session.shot("settings")
    field = card.locator('input[name="secret.apiToken"]')
    assert field.get_attribute("type") == "password"
    field.fill(secret)
    card.locator('input[name="setting.region"]').fill("eu-north")
    card.get_by_role("button", name="Connect").click()
    assert page.locator("#notice").inner_text() == "Acme CRM: connected"
    card = page.locator('article[data-capability="crm"]')
    assert card.locator(".connection-state").inner_text() == "connected"
    assert card.locator('input[name="secret.apiToken"]').input_value() == ""
    assert secret not in page.content()
    session.shot("settings-connected")
    page = session.open("/")
    tile = page.locator('article.tile[data-tool="crm:lookup"]')
    assert "Acme CRM: connected" in tile.inner_text()
    assert tile.locator(".unavailable").count() == 0
    outcome = session.gateway.call_sync("crm:lookup", {"name": "Ada"})
    assert outcome.status is CallStatus.OK and outcome.content["region"] == "eu-north"


def test_scripts_written_by_a_tool_show_as_text(session: Session) -> None:
    page = session.open("/tools/evil:inject")
    assert "<script>window.__pwned = 1" in page.locator("h1").inner_text()
    assert "<script>window.__pwned = 2</script>" in page.locator(".description").inner_text()
    page.get_by_role("button", name="Call inject").click()
    page.locator("#outcome").wait_for(state="visible")
    markdown = page.locator('details[data-viz="markdown"]')
    assert "<img src=x" in markdown.inner_text()
    assert markdown.locator("img").count() == 0
    assert markdown.locator('a[href^="javascript:"]').count() == 0
    session.shot("escaping")
    page = session.open("/")
    tile = page.locator('article.tile[data-tool="evil:inject"]')
    assert "<script>" in tile.locator("h3").inner_text()
