"""The web UI over real HTTP (uvicorn on a loopback port): pages, decisions, audit, settings,
and the protections — CSRF, host check, operator check, headers, escaping."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.requests import Request

from test_audit import finished
from toolgate import Gateway
from toolgate.audit.log_base import COUNT_LIMIT
from toolgate.demo import tools as demo_tools
from toolgate.model import ApprovalStatus, CallStatus
from toolgate.serve.auth.identity import AgentIdentity, key_sha256, new_key
from toolgate.serve.web import build_ui, identity_operator
from web_support import Served, make_gateway, serve

_TOKEN = re.compile(r'<meta name="csrf-token" content="([0-9a-f]{64})">')


class Console:
    """A served console with its gateway and an HTTP client that keeps the session cookie."""

    def __init__(self, gateway: Gateway, served: Served) -> None:
        self.gateway = gateway
        self.served = served
        self.client = httpx2.Client(base_url=served.url, timeout=30, follow_redirects=True)

    def get(self, path: str, **kwargs: Any) -> httpx2.Response:
        return self.client.get(path, **kwargs)

    def token(self, path: str = "/") -> str:
        match = _TOKEN.search(self.get(path).text)
        assert match is not None, "the page carries no form token"
        return match.group(1)

    def post(
        self, path: str, data: dict[str, str], *, token: str | None = None, **kwargs: Any
    ) -> httpx2.Response:
        form = {"csrf_token": self.token() if token is None else token, **data}
        return self.client.post(path, data=form, **kwargs)

    def pending(self, tool_id: str = "ops:deploy", **arguments: Any) -> str:
        """Make a call that waits for approval; returns the request id."""
        outcome = self.gateway.call_sync(
            tool_id, arguments or {"service": "api", "version": "1.2.3"}, agent="agent-7"
        )
        assert outcome.status is CallStatus.PENDING_APPROVAL and outcome.approval is not None
        return outcome.approval.id


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gateway = make_gateway(tmp_path)
    yield gateway
    gateway.close()


def _console(gateway: Gateway, **options: Any) -> Iterator[Console]:
    with serve(build_ui(gateway, **options)) as served:
        console = Console(gateway, served)
        try:
            yield console
        finally:
            console.client.close()


@pytest.fixture
def console(gateway: Gateway) -> Iterator[Console]:
    yield from _console(gateway, page_size=5)


# -- catalog --------------------------------------------------------------------------------------


def test_catalog_shows_every_tool_as_a_tile_with_its_badges(console: Console) -> None:
    page = console.get("/")
    assert page.status_code == 200
    for entry in console.gateway.entries():
        assert f'data-tool="{entry.tool.id}"' in page.text
    assert len(demo_tools) + 3 <= page.text.count('class="tile ')
    deploy = _tile(page.text, "ops:deploy")
    assert "external write" in deploy and "needs approval" in deploy and "Ready" in deploy
    assert "python" in deploy
    assert (
        '<p class="display" title="how a call is shown">Deploy &#34;‹service›&#34; at version'
        in deploy
    )
    word_count = _tile(page.text, "demo:word_count")
    assert "no approval" in word_count and "tool-folder" in word_count


def test_catalog_tile_shows_the_connection_state_and_why_a_tool_cannot_run(
    console: Console,
) -> None:
    tile = _tile(console.get("/").text, "crm:lookup")
    assert "Acme CRM: not connected" in tile
    assert "Unavailable: the Acme CRM extension is not connected (missing: apiToken)" in tile
    assert "phase-unavailable" in tile


@pytest.mark.slow
def test_catalog_search_filters_tiles(console: Console) -> None:
    page = console.get("/", params={"q": "diff"}).text
    assert 'data-tool="demo:diff_text"' in page and 'data-tool="demo:file_diff"' in page
    assert 'data-tool="demo:add"' not in page


def test_tool_page_shows_description_schemas_stats_and_recent_calls(console: Console) -> None:
    console.gateway.call_sync("demo:add", {"a": 2, "b": 3}, agent="agent-1")
    console.gateway.call_sync("demo:add", {"a": "x", "b": 3}, agent="agent-1")
    assert console.gateway.audit is not None and console.gateway.audit.flush(10)
    page = console.get("/tools/demo:add").text
    assert "Add two integers and return their sum." in page
    assert "&#34;b&#34;" in page  # the input schema, as text
    assert "<dt>Calls (7 days)</dt><dd>2</dd>" in page
    assert "<dt>Failure rate</dt><dd>0.0 %</dd>" in page  # the caller's mistake is no failure
    assert page.count("/audit/calls/") == 2
    assert "invalid_arguments" in page


def test_unknown_tool_is_a_404_page(console: Console) -> None:
    page = console.get("/tools/demo:nope")
    assert page.status_code == 404 and "did you mean" in page.text


def test_try_it_calls_the_tool_as_the_console_agent(console: Console) -> None:
    page = console.post("/tools/demo:add", {"arguments": '{"a": 20, "b": 22}'})
    assert page.status_code == 200
    assert 'data-status="ok"' in page.text and '<pre class="content">42</pre>' in page.text
    assert page.text.count("/audit/calls/") == 1  # in "recent calls" at once
    assert console.gateway.audit is not None
    (record,) = console.gateway.audit.query(tool_id="demo:add")
    assert record.agent == "web-ui" and record.session == "web-ui"


@pytest.mark.slow
def test_try_it_reports_bad_json_and_bad_arguments(console: Console) -> None:
    page = console.post("/tools/demo:add", {"arguments": "{not json"})
    assert page.status_code == 400 and "not valid JSON" in page.text
    page = console.post("/tools/demo:add", {"arguments": "[1, 2]"})
    assert page.status_code == 400 and "must be a JSON object" in page.text
    page = console.post("/tools/demo:add", {"arguments": '{"a": "x", "b": 1}'})
    assert page.status_code == 200 and "invalid_arguments" in page.text
    assert "/a: &#34;x&#34; is not of type" in page.text


def test_try_it_on_a_tool_that_needs_approval_links_to_the_request(console: Console) -> None:
    page = console.post("/tools/ops:deploy", {"arguments": '{"service": "db", "version": "9"}'})
    (request,) = console.gateway.approvals.pending()  # type: ignore[union-attr]
    assert request.agent == "web-ui"
    assert f'href="/approvals/{request.id}"' in page.text


# -- approvals ------------------------------------------------------------------------------------


def test_inbox_shows_the_confirmation_and_the_exact_arguments(console: Console) -> None:
    request_id = console.pending(service="api<b>", version="1.2.3")
    page = console.get("/approvals").text
    card = page[page.index(f'data-approval="{request_id}"') :]
    assert "Deploy api&lt;b&gt; 1.2.3" in card and "high risk" in card
    assert "<dt>Service</dt><dd>api&lt;b&gt;</dd><dt>Version</dt><dd>1.2.3</dd>" in card
    assert "agent <strong>agent-7</strong>" in card
    assert "Deploy &#34;api&lt;b&gt;&#34; at version &#34;1.2.3&#34;" in card  # the display line
    assert "&#34;service&#34;: &#34;api&lt;b&gt;&#34;" in card  # exact arguments, escaped
    for decision in ("approve", "always", "deny"):
        assert f'name="decision" value="{decision}"' in card


@pytest.mark.slow
def test_allow_once_records_the_decision_and_the_agents_retry_runs_it(console: Console) -> None:
    request_id = console.pending()
    page = console.post(f"/approvals/{request_id}", {"decision": "approve"})
    assert page.status_code == 200  # after the redirect to the request's page
    assert page.url.path == f"/approvals/{request_id}"
    assert 'id="request-status">approved<' in page.text
    assert "decided <strong>Allow once</strong> by operator" in page.text
    # Only the decision was recorded: the page says the agent's retry runs it.
    [note] = re.findall(r'<p class="muted" id="runs-on-retry">(.*?)</p>', page.text, re.S)
    assert "agent-7 calls the tool again" in note and "Nothing ran here" in note
    assert "api is now at 1.2.3" not in page.text
    assert console.gateway.approvals.result(request_id) is None  # type: ignore[union-attr]
    assert console.gateway.approvals.grants() == []  # type: ignore[union-attr]
    assert f'data-approval="{request_id}"' not in console.get("/approvals").text
    # The agent's retry runs it, once; the request's page then shows its outcome.
    retried = console.gateway.call_sync(
        "ops:deploy", {"service": "api", "version": "1.2.3"}, agent="agent-7"
    )
    assert retried.status is CallStatus.OK and retried.metadata["approval"] == {
        "id": request_id,
        "decision": "approve",
    }
    outcome = console.gateway.approvals.result(request_id)  # type: ignore[union-attr]
    assert outcome is not None and outcome.status is CallStatus.OK
    shown = console.get(f"/approvals/{request_id}").text
    assert "api is now at 1.2.3" in shown  # the shell-output visualization
    assert 'id="runs-on-retry"' not in shown


@pytest.mark.slow
def test_deny_ends_the_call_with_the_message(console: Console) -> None:
    request_id = console.pending()
    page = console.post(f"/approvals/{request_id}", {"decision": "deny", "message": "not today"})
    assert 'id="request-status">denied<' in page.text and "Message: not today" in page.text
    outcome = console.gateway.approvals.result(request_id)  # type: ignore[union-attr]
    assert outcome is not None and outcome.code == "user_rejection"
    assert "not today" in (outcome.message or "")


@pytest.mark.slow
def test_always_allow_stores_a_grant_listed_and_revoked_in_settings(console: Console) -> None:
    request_id = console.pending()
    console.post(f"/approvals/{request_id}", {"decision": "always"})
    (grant,) = console.gateway.approvals.grants()  # type: ignore[union-attr]
    assert grant.tool_id == "ops:deploy" and grant.granted_by == "operator"
    settings = console.get("/settings").text
    assert f'data-grant="{grant.id}"' in settings
    # The grant covers the next call: it runs without asking.
    again = console.gateway.call_sync("ops:deploy", {"service": "x", "version": "2"})
    assert again.status is CallStatus.OK
    page = console.post(f"/settings/grants/{grant.id}/revoke", {})
    assert "grant revoked" in page.text and f'data-grant="{grant.id}"' not in page.text
    assert console.gateway.approvals.grants() == []  # type: ignore[union-attr]


def test_deciding_twice_is_a_409_with_the_reason(console: Console) -> None:
    request_id = console.pending()
    console.post(f"/approvals/{request_id}", {"decision": "deny"})
    page = console.post(f"/approvals/{request_id}", {"decision": "approve"})
    assert page.status_code == 409 and 'role="alert"' in page.text


def test_a_decision_must_be_one_of_the_three(console: Console) -> None:
    request_id = console.pending()
    page = console.post(f"/approvals/{request_id}", {"decision": "maybe"})
    assert page.status_code == 400
    assert console.gateway.approvals.get(request_id).status is ApprovalStatus.PENDING  # type: ignore[union-attr]


def test_unknown_approval_is_a_404_page(console: Console) -> None:
    assert console.get("/approvals/apr_nope").status_code == 404


def test_inbox_polling_answers_204_until_the_queue_changes(console: Console) -> None:
    first = console.get("/approvals/inbox", params={"seen": "x"})
    digest = re.search(r'data-digest="([0-9a-f]+)"', first.text)
    assert first.status_code == 200 and digest is not None
    unchanged = console.get("/approvals/inbox", params={"seen": digest.group(1)})
    assert unchanged.status_code == 204
    request_id = console.pending()
    changed = console.get("/approvals/inbox", params={"seen": digest.group(1)})
    assert changed.status_code == 200 and f'data-approval="{request_id}"' in changed.text
    badge = console.get("/approvals/count").text
    assert ">1</span>" in badge and "waiting" in badge


# -- audit ----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_audit_table_filters_by_tool_agent_and_status_and_pages(console: Console) -> None:
    gateway = console.gateway
    for n in range(7):
        gateway.call_sync("demo:add", {"a": n, "b": 1}, agent="alice")
    gateway.call_sync("demo:add", {"a": "bad", "b": 1}, agent="bob")
    gateway.call_sync("demo:diff_text", {"old": "a", "new": "b"}, agent="bob")
    assert gateway.audit is not None and gateway.audit.flush(10)
    page = console.get("/audit").text
    assert 'id="audit-total">9 calls · page 1 of 2' in page
    assert page.count("data-call=") == 5
    older = console.get("/audit", params={"page": "2"}).text
    assert older.count("data-call=") == 4
    past_the_end = console.get("/audit", params={"page": "999"}).text
    assert "9 calls · page 999 of 2" in past_the_end and 'rel="next"' not in past_the_end
    by_tool = console.get("/audit", params={"tool": "demo:diff_text"}).text
    assert "1 call<" in by_tool and "Diff two texts" in by_tool
    by_agent = console.get("/audit", params={"agent": "bob"}).text
    assert "2 calls" in by_agent
    by_code = console.get("/audit", params={"status": "invalid_arguments"}).text
    assert "1 call<" in by_code
    ok = console.get("/audit", params={"status": "ok", "agent": "alice", "range": "1h"}).text
    assert "7 calls" in ok
    future = console.get("/audit", params={"since": "2999-01-01T00:00:00"}).text
    assert "0 calls" in future
    assert "is not a date" in console.get("/audit", params={"until": "0001-01-01T00:00"}).text
    bad = console.get("/audit", params={"since": "yesterday", "page": "x"})
    assert bad.status_code == 200 and "is not a date and time" in bad.text


@pytest.mark.slow
def test_a_large_audit_log_shows_more_than_the_counted_and_pages_on(console: Console) -> None:
    audit = console.gateway.audit
    assert audit is not None
    now = time.time()
    for n in range(COUNT_LIMIT + 3):
        audit.observe(finished(tool_id="demo:add", started_at=now - n, call_id=f"c{n}"))
    assert audit.flush(60)
    first = console.get("/audit").text
    assert f'id="audit-total">more than {COUNT_LIMIT:,} calls · page 1 of 2000+' in first
    assert 'rel="next"' in first
    # Past the counted pages the table goes on to the oldest record, and ends there.
    last = console.get("/audit", params={"page": str(COUNT_LIMIT // 5 + 1)}).text
    assert last.count("data-call=") == 3 and 'rel="next"' not in last


def test_audit_call_page_needs_the_time_from_its_link(console: Console) -> None:
    assert console.get("/audit/calls/nope").status_code == 400
    assert console.get("/audit/calls/nope", params={"at": "1.5"}).status_code == 404


def _call_page(
    console: Console, tool_id: str, arguments: dict[str, Any], workspace: Path | None = None
) -> str:
    outcome = console.gateway.call_sync(tool_id, arguments, workspace=workspace)
    assert outcome.status is CallStatus.OK, outcome.message
    assert console.gateway.audit is not None and console.gateway.audit.flush(10)
    table = console.get("/audit", params={"tool": tool_id}).text
    link = re.search(r'href="(/audit/calls/[^"]+)"', table)
    assert link is not None
    page = console.get(link.group(1).replace("&amp;", "&"))
    assert page.status_code == 200
    return page.text


@pytest.mark.slow
def test_each_visualization_type_is_rendered_as_people_expect(
    console: Console, tmp_path: Path
) -> None:
    diff = _call_page(console, "demo:diff_text", {"old": "a\nb\nc\n", "new": "a\nB\nc\nd\n"})
    assert 'data-viz="diff"' in diff
    assert '<tr class="line del">' in diff and '<tr class="line add">' in diff
    assert '<span class="sign">+</span>B' in diff and '<span class="plus">+2</span>' in diff
    diffs = _call_page(
        console, "demo:diff_texts", {"edits": [{"path": "a.txt", "old": "x\n", "new": "y\n"}]}
    )
    assert 'data-viz="diffs"' in diffs and diffs.count('class="diff-file"') == 1
    code = _call_page(console, "demo:show_code", {"code": "def f():\n    return 1\n"})
    assert 'data-viz="code"' in code and 'class="hl"' in code
    assert '<span class="k">def</span>' in code  # highlighted by Pygments
    table = _call_page(console, "demo:table", {})
    assert 'data-viz="table"' in table and "<th>" in table
    markdown = _call_page(console, "demo:render_markdown", {"text": "# Title\n\n*fine*"})
    assert "<h1>Title</h1>" in markdown and "<em>fine</em>" in markdown
    shell = _call_page(console, "demo:shell_echo", {"text": "hello world", "stderr": "oops"})
    assert 'class="prompt">$</span>' in shell and "hello world" in shell
    assert '<pre class="stderr">oops</pre>' in shell
    items = [
        {"content": "Write it", "status": "completed"},
        {"content": "Ship it", "status": "pending", "priority": "high"},
    ]
    todo = _call_page(console, "demo:todo", {"items": items})
    assert 'data-viz="todo-list"' in todo and '<li class="todo-completed">' in todo
    assert "priority-high" in todo
    workspace = tmp_path / "workspace"
    (workspace / "src").mkdir(parents=True)
    (workspace / "README.md").write_text("hi", encoding="utf-8")
    files = _call_page(console, "demo:list_files", {}, workspace)
    assert 'data-viz="file-list"' in files and "<code>README.md</code>" in files
    assert "<h4>Folders</h4>" in files
    note = _call_page(console, "demo:word_count", {"path": "README.md"}, workspace)
    assert 'data-viz="none"' in note and "Counted 1 word in README.md." in note


# -- escaping -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_what_a_tool_wrote_renders_as_text_everywhere(console: Console) -> None:
    pages = [console.get("/").text, console.get("/tools/evil:inject").text]
    pages.append(console.post("/tools/evil:inject", {"arguments": "{}"}).text)
    pages.append(_call_page(console, "evil:inject", {}))
    for page in pages:
        assert "<script>window" not in page and "<img src=x" not in page
        assert 'href="javascript:' not in page
        assert "&lt;script&gt;window.__pwned = 1" in page
    # Only the console's own script tag is on the page.
    assert all(page.count("<script") == 1 for page in pages[:3])


# -- settings and connections ---------------------------------------------------------------------


@pytest.mark.slow
def test_connecting_a_capability_stores_the_secret_and_never_shows_it(console: Console) -> None:
    secret = "sk-live-0123456789abcdef"
    page = console.post(
        "/settings/connections/crm",
        {"secret.apiToken": secret, "setting.region": "eu-west"},
    )
    assert page.status_code == 200 and "Acme CRM: connected" in page.text
    assert secret not in page.text
    store = console.gateway.secrets.store
    assert store is not None and store.get("crm", "apiToken") == secret
    outcome = console.gateway.call_sync("crm:lookup", {"name": "Ada"})
    assert outcome.status is CallStatus.OK, outcome.message
    assert outcome.content["token_sha256"] == hashlib.sha256(secret.encode()).hexdigest()
    assert outcome.content["region"] == "eu-west"
    for path in ("/", "/settings", "/tools/crm:lookup", "/audit"):
        assert secret not in console.get(path).text
    settings = console.get("/settings").text
    assert 'value="eu-west"' in settings  # a public setting is shown; the secret is not
    assert 'placeholder="leave empty to keep the current value"' in settings


def test_connecting_without_the_required_secret_saves_nothing(console: Console) -> None:
    page = console.post("/settings/connections/crm", {"setting.region": "us"})
    assert page.status_code == 400 and "needs apiToken; nothing was saved" in page.text
    store = console.gateway.secrets.store
    assert store is not None and store.get("crm", "region") is None


def test_disconnecting_removes_the_secrets(console: Console) -> None:
    console.post("/settings/connections/crm", {"secret.apiToken": "tok-1234", "setting.region": ""})
    page = console.post("/settings/connections/crm/disconnect", {})
    assert "Acme CRM: disconnected" in page.text
    store = console.gateway.secrets.store
    assert store is not None and store.get("crm", "apiToken") is None
    assert console.gateway.call_sync("crm:lookup", {"name": "x"}).code == "unavailable"


def test_settings_list_plugin_alerts_diagnostics_and_audit_health(console: Console) -> None:
    page = console.get("/settings").text
    assert 'id="alerts"' in page and "No alerts." in page
    assert "Every declaration loaded." in page and "Healthy" in page
    assert console.post("/settings/connections/nope", {}).status_code == 404


# -- protections ----------------------------------------------------------------------------------


def test_pages_send_the_security_headers_and_a_strict_session_cookie(console: Console) -> None:
    page = console.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["cache-control"] == "no-store"
    cookie = page.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    script = console.get("/static/htmx.min.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert script.headers["cache-control"] == "no-cache" and "etag" in script.headers
    assert script.text.startswith("/*! htmx 2.0.11")
    again = console.get("/static/htmx.min.js", headers={"if-none-match": script.headers["etag"]})
    assert again.status_code == 304
    css = console.get("/assets/highlight.css").text.splitlines()
    assert css and all(rule.startswith(".hl") for rule in css)  # styles code blocks only


@pytest.mark.slow
def test_state_changes_need_a_same_origin_form_with_the_session_token(console: Console) -> None:
    request_id = console.pending()
    path = f"/approvals/{request_id}"
    token = console.token()
    refused = [
        console.client.post(path, data={"decision": "approve"}),  # no token
        console.post(path, {"decision": "approve"}, token="0" * 64),  # wrong token
        console.post(
            path, {"decision": "approve"}, token=token, headers={"origin": "http://evil.example"}
        ),
        console.post(
            path, {"decision": "approve"}, token=token, headers={"sec-fetch-site": "cross-site"}
        ),
        console.client.post(path, json={"decision": "approve", "csrf_token": token}),
    ]
    assert [r.status_code for r in refused] == [403, 403, 403, 403, 415]
    # Another browser (no session cookie) cannot reuse this browser's token.
    with httpx2.Client(base_url=console.served.url) as stranger:
        other = stranger.post(path, data={"decision": "approve", "csrf_token": token})
        assert other.status_code == 403
    too_big = console.post(path, {"decision": "approve", "message": "x" * 300_000}, token=token)
    assert too_big.status_code == 413
    assert console.gateway.approvals.get(request_id).status is ApprovalStatus.PENDING  # type: ignore[union-attr]
    accepted = console.post(
        path,
        {"decision": "deny"},
        token=token,
        headers={"origin": console.served.url, "sec-fetch-site": "same-origin"},
    )
    assert accepted.status_code == 200 and 'id="request-status">denied<' in accepted.text


def test_a_host_the_console_does_not_answer_to_is_refused(console: Console) -> None:
    rebound = console.get("/", headers={"host": f"evil.example:{console.served.port}"})
    assert rebound.status_code == 400 and "answers to" in rebound.text
    assert console.get("/", headers={"host": f"localhost:{console.served.port}"}).status_code == 200


def test_the_operator_check_decides_who_may_use_the_console(gateway: Gateway) -> None:
    def operator(request: Request) -> str | None:
        return "alice" if request.headers.get("x-operator-key") == "right" else None

    for console in _console(gateway, require_operator=operator):
        assert console.get("/").status_code == 403
        console.client.headers["x-operator-key"] = "right"
        request_id = console.pending()
        page = console.post(f"/approvals/{request_id}", {"decision": "approve"})
        assert "by alice" in page.text
        assert console.gateway.approvals.get(request_id).decided_by == "alice"  # type: ignore[union-attr]


def test_without_agent_keys_the_loopback_browser_is_the_operator(gateway: Gateway) -> None:
    identity = AgentIdentity()
    for console in _console(gateway, require_operator=identity_operator(identity)):
        # Without keys every agent is "default"; the person at the console is not.
        outcome = gateway.call_sync("ops:deploy", {"service": "a", "version": "1"})
        assert outcome.approval is not None and outcome.approval.agent is None
        page = console.post(f"/approvals/{outcome.approval.id}", {"decision": "approve"})
        assert "signed in as operator" in page.text and "by operator" in page.text


@pytest.mark.slow
def test_with_agent_keys_the_browser_signs_in_with_an_operator_key(gateway: Gateway) -> None:
    alice, bot = new_key(), new_key()
    identity = AgentIdentity(
        labels={"alice": {"role": "operator"}},
        config_keys={"alice": key_sha256(alice), "bot": key_sha256(bot)},
    )
    for console in _console(gateway, require_operator=identity_operator(identity)):
        challenge = console.get("/")
        assert challenge.status_code == 401
        assert challenge.headers["www-authenticate"].startswith("Basic realm=")
        assert console.get("/", auth=("x", "tg_wrong")).status_code == 401
        assert console.get("/", auth=("x", bot)).status_code == 403  # not an operator
        bearer = console.get("/", headers={"authorization": f"Bearer {alice}"})
        assert bearer.status_code == 200
        console.client.auth = httpx2.BasicAuth("alice", alice)
        assert "signed in as alice" in console.get("/").text
        theirs = console.pending()
        page = console.post(f"/approvals/{theirs}", {"decision": "approve"})
        assert "by alice" in page.text
        own = gateway.call_sync("ops:deploy", {"service": "b", "version": "2"}, agent="alice")
        assert own.approval is not None
        assert "another operator decides it" in console.get(f"/approvals/{own.approval.id}").text
        refused = console.post(f"/approvals/{own.approval.id}", {"decision": "approve"})
        assert refused.status_code == 403 and "cannot decide it itself" in refused.text
        assert gateway.approvals.get(own.approval.id).status is ApprovalStatus.PENDING  # type: ignore[union-attr]


def test_an_operator_check_that_fails_refuses(gateway: Gateway) -> None:
    def broken(request: Request) -> str | None:
        raise RuntimeError("the credential store is down")

    for console in _console(gateway, require_operator=broken):
        page = console.get("/")
        assert page.status_code == 403 and "operator check failed" in page.text


def test_an_unreadable_audit_log_leaves_the_catalog_working(console: Console) -> None:
    assert console.gateway.audit is not None
    console.gateway.audit.close()
    catalog = console.get("/")
    assert catalog.status_code == 200 and "health figures are unavailable" in catalog.text
    assert "phase-unavailable" in _tile(catalog.text, "crm:lookup")
    tool = console.get("/tools/demo:add")
    assert tool.status_code == 200 and "health figures are unavailable" in tool.text
    audit = console.get("/audit")
    assert audit.status_code == 503 and "The audit log cannot be read" in audit.text


@pytest.mark.slow
def test_bad_requests_never_take_the_console_down(console: Console) -> None:
    token = console.token()
    assert console.client.put("/approvals/x", content=b"x").status_code == 405
    assert console.client.post(
        "/tools/demo:add",
        content=b"csrf_token=" + token.encode() + b"&arguments=%ff%fe",
        headers={"content-type": "application/x-www-form-urlencoded"},
    ).status_code in (200, 400)
    assert console.get("/audit", params={"page": "9" * 40, "tool": "x" * 5000}).status_code == 200
    assert console.get("/tools/" + "%00" * 10).status_code == 404
    assert console.get("/approvals/inbox", params={"seen": "\x00"}).status_code == 200
    assert console.get("/").status_code == 200


def _tile(page: str, tool_id: str) -> str:
    start = page.index(f'data-tool="{tool_id}"')
    return page[start : page.index("</article>", start)]
