"""The web UI catalog's search box in a real browser (Debian chromium driven by Playwright):
results ranked by the tool search, with scores, and a clear message for a query with nothing to
search for (issue 14)."""

from __future__ import annotations

from urllib.parse import quote

import pytest

import test_web_ui_browser as browser_tests
from test_web_ui_browser import Session
from web_support import CHROMIUM

# The browser, console and workspace fixtures of the web UI's own browser tests.
browser = browser_tests.browser
session = browser_tests.session
workspace = browser_tests.workspace

playwright_api = pytest.importorskip("playwright.sync_api")

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=f"{CHROMIUM} is not installed (apt-get install chromium)"
    ),
    pytest.mark.slow,
]


def test_the_search_box_ranks_tools_with_scores(session: Session) -> None:
    page = session.open("/")
    everything = page.locator("article.tile").count()
    box = page.get_by_role("searchbox", name="Search tools")
    box.fill("compare two texts and show what changed")
    box.press("Enter")
    page.wait_for_url("**/?q=*")
    tiles = page.locator("article.tile")
    assert 0 < tiles.count() < everything
    assert tiles.first.get_attribute("data-tool") in {"demo:diff_text", "demo:diff_texts"}
    scores = [float(text.split()[1]) for text in page.locator(".badge.score").all_inner_texts()]
    assert len(scores) == tiles.count() and scores == sorted(scores, reverse=True)
    assert "Best matches for" in page.locator("section.namespace h2").first.inner_text()
    assert box.input_value() == "compare two texts and show what changed"
    session.shot("catalog-search")


def test_a_query_with_nothing_to_search_for_says_so(session: Session) -> None:
    page = session.open("/?q=" + quote("\x01\x02\u200b"))
    assert "query: is empty" in page.locator("#search-error").inner_text()
    assert page.locator("article.tile").count() == 0
    page = session.open("/?q=" + quote("ファイルを比較"))
    assert page.locator("article.tile").count() == 0
    assert "No tool matches" in page.locator("main").inner_text()
    session.shot("catalog-search-nothing")


def test_a_tool_added_while_the_page_is_open_is_found(session: Session) -> None:
    from toolgate import tool

    @tool(namespace="wx", effect="read_only")
    def tide_tables(harbour: str) -> str:
        """Tide tables for a harbour."""
        return harbour

    page = session.open("/?q=tide+harbour")
    assert page.locator("article.tile").count() == 0
    session.gateway.add(tide_tables)
    page.reload()
    assert page.locator("article.tile").first.get_attribute("data-tool") == "wx:tide_tables"
