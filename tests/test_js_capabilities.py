"""A Jingle extension whose tools module is JavaScript runs in the JavaScript host with the
connection gating, secret masking and confirmation card of Python ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_support import HELLO, hello_server
from gateway_support import gateway_with
from js_support import js_runtime
from toolgate import ConfigError, Gateway
from toolgate.config import load_gateway
from toolgate.errors import ErrorCode
from toolgate.formats.capability.source import CapabilitySource
from toolgate.model import ApprovalRequest, CallOutcome, CallStatus, SideEffect
from toolgate.sandbox.runner import Sandbox
from toolgate.secrets import MemorySecretStore

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]
NOTION = Path(__file__).parent / "fixtures" / "js_capabilities" / "notion"
PROBE = Path(__file__).parent / "fixtures" / "js_capabilities" / "probe"
TOKEN = "secret_notion_token_1234"


def _connected() -> MemorySecretStore:
    return MemorySecretStore(
        {("notion", "accessToken"): TOKEN, ("notion", "apiBaseUrl"): "https://notion.example/v1"}
    )


def test_the_javascript_handlers_see_their_connection(tmp_path: Path) -> None:
    with gateway_with(secret_store=_connected(), audit_path=tmp_path / "a.db") as gateway:
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
    with gateway_with(secret_store=_connected(), audit_path=tmp_path / "a.db") as gateway:
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


# -- the operator's permissions (options.permissions of the sources: entry) ----------------------


@pytest.fixture
def server() -> Iterator[int]:
    with hello_server() as port:
        yield port


async def _resolver(host: str, port: int) -> list[str]:
    """The service's API host and a second host, both on the loopback stand-in server."""
    known = {"api.probe.test": ["127.0.0.1"], "other.probe.test": ["127.0.0.1"]}
    if host not in known:
        raise OSError(f"{host}: no such host (test resolver)")
    return known[host]


def _probe(
    tmp_path: Path,
    tool: str,
    options: dict[str, Any] | None,
    *,
    base: str = "http://api.probe.test",
    environ: dict[str, str] | None = None,
    grants: tuple[str, ...] = ("127.0.0.1/32",),
) -> CallOutcome:
    """One call of the probe capability's ``tool`` with ``options`` on its source entry; the
    audit record must agree with the outcome (and carry the same sandbox metadata)."""
    store = MemorySecretStore({("probe", "apiBaseUrl"): base})
    sandbox = Sandbox(cidr_grants={f"probe:{tool}": list(grants)}, resolver=_resolver)
    with gateway_with(
        secret_store=store, sandbox=sandbox, environ=environ or {}, audit_path=tmp_path / "a.db"
    ) as gateway:
        loaded = gateway.add_source(PROBE, options=options)
        assert loaded.diagnostics == [], loaded.diagnostics
        outcome = gateway.call_sync(f"probe:{tool}", {})
        assert gateway.audit is not None and gateway.audit.flush(10)
        [record] = gateway.audit.query(tool_id=f"probe:{tool}", limit=None)
    assert record.status == outcome.status
    assert record.message == outcome.message
    return outcome


def test_network_granted_fetch_reaches_the_granted_host_through_the_egress_proxy(
    tmp_path: Path, server: int
) -> None:
    options = {"permissions": {"network": [f"api.probe.test:{server}"]}}
    outcome = _probe(tmp_path, "search", options, base=f"http://api.probe.test:{server}")
    assert outcome.ok, outcome.message
    assert outcome.content == {"status": 200, "body": HELLO}
    sandbox = outcome.metadata["sandbox"]
    assert (sandbox["mode"], sandbox["runtime"]) == ("compartment", "ses")
    [event] = sandbox["egress"]
    assert (event["host"], event["port"], event["allowed"]) == ("api.probe.test", server, True)


def test_without_the_grant_fetch_fails_naming_the_permission(tmp_path: Path, server: int) -> None:
    outcome = _probe(tmp_path, "search", None, base=f"http://api.probe.test:{server}")
    assert outcome.is_error
    assert "fetch is not available: this tool's permissions do not grant 'network'" in (
        outcome.message or ""
    )
    assert "options.permissions" in (outcome.message or "")
    assert "egress" not in outcome.metadata["sandbox"]


def test_a_host_outside_the_grant_is_refused(tmp_path: Path, server: int) -> None:
    options = {"permissions": {"network": [f"api.probe.test:{server}"]}}
    outcome = _probe(tmp_path, "search", options, base=f"http://other.probe.test:{server}")
    assert outcome.is_error
    assert "refused by toolgate's egress proxy" in (outcome.message or "")
    assert "not in the tool's network permission" in (outcome.message or "").lower()
    [event] = outcome.metadata["sandbox"]["egress"]
    assert event["allowed"] is False and event["host"] == "other.probe.test"


def test_a_granted_host_on_a_private_address_needs_the_network_grant(
    tmp_path: Path, server: int
) -> None:
    options = {"permissions": {"network": [f"api.probe.test:{server}"]}}
    base = f"http://api.probe.test:{server}"
    outcome = _probe(tmp_path, "search", options, base=base, grants=())
    assert outcome.is_error and "loopback" in (outcome.message or "").lower()


def test_time_granted_and_withheld(tmp_path: Path) -> None:
    granted = _probe(tmp_path / "a", "now", {"permissions": {"time": True}})
    assert granted.ok, granted.message
    assert granted.content["now"] > 1_600_000_000_000
    withheld = _probe(tmp_path / "b", "now", {"permissions": {"network": [], "time": False}})
    assert withheld.is_error
    assert "Date.now() is not available: this tool's permissions do not grant 'time'" in (
        withheld.message or ""
    )


def test_env_holds_only_the_granted_keys(tmp_path: Path) -> None:
    environ = {"PROBE_REGION": "eu", "SECRET": "hidden"}
    granted = _probe(
        tmp_path / "a", "env", {"permissions": {"env": ["PROBE_REGION"]}}, environ=environ
    )
    assert granted.ok and granted.content == {"env": {"PROBE_REGION": "eu"}}
    withheld = _probe(tmp_path / "b", "env", None, environ=environ)
    assert withheld.ok and withheld.content == {"env": None}


def test_fs_reads_below_the_granted_prefix_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    options = {"permissions": {"fs": [str(data)]}}
    inside = _probe(tmp_path / "a", "read", options, base=str(data / "note.txt"))
    assert inside.ok and inside.content == {"text": "inside"}
    outside = _probe(tmp_path / "b", "read", options, base=str(tmp_path / "secret.txt"))
    assert outside.is_error and "outside the tool's fs permission" in (outside.message or "")
    withheld = _probe(tmp_path / "c", "read", None, base=str(data / "note.txt"))
    assert withheld.is_error and "no ctx.fs" in (withheld.message or "")


@pytest.mark.parametrize(
    ("permissions", "message"),
    [
        ("yes", r"options\.permissions must be a mapping"),
        ({"netwrok": ["api.notion.com"]}, r"unknown field 'netwrok'; did you mean 'network'"),
        ({"time": "yes"}, r"options\.permissions\.time: 'time' must be a boolean"),
        ({"network": "api.notion.com"}, r"options\.permissions\.network: must be a list"),
        (
            {"network": ["https://api.notion.com/v1"]},
            r"options\.permissions\.network\.0: .*not a host",
        ),
    ],
)
def test_a_malformed_permissions_option_names_the_field(
    tmp_path: Path, permissions: Any, message: str
) -> None:
    with Gateway() as gateway, pytest.raises(ConfigError, match=message):
        gateway.add_source(PROBE, options={"permissions": permissions})


def test_a_malformed_permissions_option_in_toolgate_yaml_names_the_source_entry(
    tmp_path: Path,
) -> None:
    config = tmp_path / "toolgate.yaml"
    config.write_text(
        f"sources:\n  - path: {PROBE / 'manifest.json'}\n"
        "    options:\n      permissions: {network: [api.notion.com], tiem: true}\n",
        encoding="utf-8",
    )
    environ = {"TOOLGATE_HOME": str(tmp_path / "home")}
    with pytest.raises(ConfigError, match=r"sources\[0\]: .*unknown field 'tiem'"):
        load_gateway(config, environ=environ)


def test_a_python_capability_is_not_affected_by_the_option() -> None:
    """The option is the JavaScript host's: a Python tools module runs as without it (in the
    gateway's process, with no sandbox metadata)."""
    python_notion = Path(__file__).parent / "fixtures" / "capabilities" / "notion"
    store = MemorySecretStore(
        {("notion", "accessToken"): TOKEN, ("notion", "apiBaseUrl"): "https://notion.example/v1"}
    )
    results = []
    for options in (None, {"permissions": {"network": ["api.notion.com"], "time": True}}):
        with Gateway(secret_store=store) as gateway:
            assert gateway.add_source(python_notion, options=options).diagnostics == []
            results.append(gateway.call_sync("notion:searchPages", {"query": "q", "limit": 1}))
    plain, granted = results
    assert plain.ok and granted.ok, (plain.message, granted.message)
    assert granted.content == plain.content
    assert "sandbox" not in granted.metadata and "sandbox" not in plain.metadata
