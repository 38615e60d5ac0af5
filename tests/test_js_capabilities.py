"""A Jingle extension whose tools module is JavaScript runs in the JavaScript host with the
connection gating, secret masking and confirmation card of Python ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from js_support import js_runtime
from toolgate import Gateway
from toolgate.errors import ErrorCode
from toolgate.model import ApprovalRequest, CallStatus, SideEffect
from toolgate.sandbox.runner import Sandbox
from toolgate.secrets import MemorySecretStore
from toolgate.sources.capabilities import CapabilitySource

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = pytest.mark.usefixtures("js_runtime")
NOTION = Path(__file__).parent / "fixtures" / "js_capabilities" / "notion"
TOKEN = "secret_notion_token_1234"


def _connected() -> MemorySecretStore:
    return MemorySecretStore(
        {("notion", "accessToken"): TOKEN, ("notion", "apiBaseUrl"): "https://notion.example/v1"}
    )


def test_the_javascript_handlers_see_their_connection(tmp_path: Path) -> None:
    with Gateway(secret_store=_connected(), audit_path=tmp_path / "a.db") as gateway:
        loaded = gateway.add_source(NOTION)
        assert loaded.diagnostics == []
        assert gateway.registry.get("notion:searchPages").tool.side_effect is SideEffect.READ_ONLY
        outcome = gateway.call_sync("notion:searchPages", {"query": "plans", "limit": 1})
        page = gateway.call_sync("notion:getPage", {"pageId": "p-7"})
    assert outcome.ok, outcome.message
    assert outcome.content == {
        "pages": [{"id": "page-1", "title": "plans #1"}],
        "secretNames": ["accessToken"],
        "tokenTail": "1234",
        "apiBaseUrl": "https://notion.example/v1",
        "capability": "notion",
    }
    assert page.ok and page.content["id"] == "p-7"


def test_a_secret_in_a_javascript_error_is_masked(tmp_path: Path) -> None:
    with Gateway(secret_store=_connected(), audit_path=tmp_path / "a.db") as gateway:
        gateway.add_source(NOTION)
        outcome = gateway.call_sync("notion:getPage", {"pageId": "p", "leak": True})
        assert gateway.audit is not None and gateway.audit.flush(10)
        [record] = gateway.audit.query(tool_id="notion:getPage", limit=None)
    assert outcome.is_error and "auth failed with [REDACTED]" in (outcome.message or "")
    assert TOKEN not in (outcome.message or "") and TOKEN not in (record.message or "")


def test_not_connected_javascript_tools_are_unavailable() -> None:
    with Gateway(secret_store=MemorySecretStore()) as gateway:
        gateway.add_source(NOTION)
        outcome = gateway.call_sync("notion:searchPages", {"query": "x"})
    assert outcome.code is ErrorCode.UNAVAILABLE
    assert "connect" in (outcome.message or "").lower()


def test_a_write_asks_with_the_javascript_build_confirmation() -> None:
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> str:
        asked.append(request)
        return "approve"

    with Gateway(secret_store=_connected(), approver=approver) as gateway:
        gateway.add_source(NOTION)
        outcome = gateway.call_sync(
            "notion:addToPage", {"pageId": "p-1", "content": "hello"}, wait_for_approval=30
        )
    assert outcome.status is CallStatus.OK, outcome.message
    assert outcome.content["appended"] is True
    [request] = asked
    assert request.title == "Append to a Notion page"
    assert request.risk == "medium"
    assert request.facts == (("Page", "p-1"), ("Content", "hello"))


def test_the_javascript_handlers_run_in_bubblewrap_too_where_it_works(tmp_path: Path) -> None:
    sandbox = Sandbox()
    if not sandbox.host().works:
        pytest.skip(f"bubblewrap cannot sandbox here: {sandbox.host().problem}")
    with Gateway(secret_store=_connected(), sandbox=sandbox) as gateway:
        assert gateway.add_source(NOTION).diagnostics == []
        outcome = gateway.call_sync("notion:searchPages", {"query": "q", "limit": 1})
        [source] = gateway.declarations.sources
        assert isinstance(source, CapabilitySource)
        [pid] = source.js_hosts.pids()
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    assert outcome.ok, outcome.message
    assert program.endswith(b"bwrap")
