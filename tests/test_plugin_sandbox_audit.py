"""What a plugin tool's sandboxed worker enforced reaches its outcome and its audit record.

Compartment plugin tools run ``execute`` in the sandboxed worker through a Python binding; the
binding records ``metadata["sandbox"]`` (with the egress proxy's allowed and refused
connections) the way script tools do, through an internal keyword that only toolgate's own
bindings ask for. Real worker, real bubblewrap, real egress proxy (a loopback server reached
by a test resolver and an operator CIDR grant, as in ``test_sandbox_network``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_support import hello_server, test_resolver
from folder_tools import require_program
from gateway_support import gateway_with
from toolgate import Gateway, ToolContext, tool
from toolgate.audit import AuditRecord
from toolgate.model import CallOutcome
from toolgate.python import PythonBinding
from toolgate.registry import RegisteredTool
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

pytestmark = pytest.mark.slow

TOOL_ID = "@t/fetch:fetch"

INDEX = """\
import urllib.request


def execute(input, ctx):
    results = []
    for url in input.get("urls", []):
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                results.append({"ok": True, "body": response.read().decode()})
        except Exception as exc:
            results.append({"ok": False, "why": type(exc).__name__})
    return results


tools = [{
    "id": "fetch",
    "name": "Fetch",
    "annotations": {"readOnlyHint": True},
    "description": "Fetch URLs.",
    "parameters": {"type": "object", "properties": {"urls": {"type": "array"}}},
    "execute": execute,
}]
"""


@pytest.fixture
def server() -> Iterator[int]:
    with hello_server() as port:
        yield port


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host("bwrap")
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


def _plugin(root: Path, permissions: dict[str, Any]) -> Path:
    folder = root / "fetch-plugin"
    folder.mkdir()
    manifest = {
        "id": "@t/fetch",
        "provides": {"tools": {"entry": "index.py", "permissions": permissions}},
    }
    (folder / "pandora.json").write_text(json.dumps(manifest), encoding="utf-8")
    (folder / "index.py").write_text(INDEX, encoding="utf-8")
    return folder


def _audited(gateway: Gateway, outcome: CallOutcome) -> AuditRecord:
    """The audit record of ``outcome``, read back from the SQLite log."""
    assert gateway.audit is not None and gateway.audit.flush(10)
    records = gateway.audit.query(tool_id=outcome.tool_id, limit=None)
    [record] = [r for r in records if r.call_id == outcome.call_id]
    return record


def test_a_compartment_plugin_outcome_records_its_sandbox(tmp_path: Path) -> None:
    _sandbox_works()
    folder = _plugin(tmp_path, {})
    sandbox = Sandbox(SandboxConfig())
    with gateway_with(environ={}, sandbox=sandbox, audit_path=tmp_path / "audit.db") as gateway:
        gateway.add_source(folder)
        outcome = gateway.call_sync(TOOL_ID, {"urls": []})
        assert outcome.status == "ok", outcome.message
        assert outcome.content == []
        expected = {"mode": "compartment", "enforced": True, "egress": []}
        assert outcome.metadata["sandbox"] == expected
        assert _audited(gateway, outcome).metadata["sandbox"] == expected


def test_allowed_and_refused_connections_of_a_plugin_reach_the_audit_record(
    tmp_path: Path, server: int
) -> None:
    _sandbox_works()
    pytest.importorskip("toolgate.sandbox.egress")
    folder = _plugin(tmp_path, {"network": [f"allowed.test:{server}"]})
    sandbox = Sandbox(cidr_grants={TOOL_ID: ["127.0.0.1/32"]}, resolver=test_resolver)
    with gateway_with(environ={}, sandbox=sandbox, audit_path=tmp_path / "audit.db") as gateway:
        gateway.add_source(folder)
        urls = [f"http://allowed.test:{server}/", f"http://refused.test:{server}/"]
        outcome = gateway.call_sync(TOOL_ID, {"urls": urls})
        assert outcome.status == "ok", outcome.message
        allowed, refused = outcome.content
        assert allowed == {"ok": True, "body": "hello from the allowed host"}
        assert refused["ok"] is False
        events = outcome.metadata["sandbox"]["egress"]
        assert [(e["host"], e["port"], e["allowed"]) for e in events] == [
            ("allowed.test", server, True),
            ("refused.test", server, False),
        ]
        assert all(e["reason"] for e in events)
        record = _audited(gateway, outcome)
    assert record.metadata["sandbox"]["enforced"] is True
    # The same events, as JSON (the record's addresses are lists, the outcome's tuples).
    assert record.metadata["sandbox"]["egress"] == json.loads(json.dumps(events))
    assert [e["addresses"] for e in record.metadata["sandbox"]["egress"]] == [["127.0.0.1"], []]


def test_on_an_unsandboxed_host_a_plugin_outcome_carries_the_label(tmp_path: Path) -> None:
    # The operator's explicit choice: the worker runs on the host, like a script tool would,
    # and every outcome (and audit record) says so.
    folder = _plugin(tmp_path, {})
    config = SandboxConfig(
        bwrap_path=str(tmp_path / "no-bwrap"), layer="bubblewrap", unsandboxed_host=True
    )
    with gateway_with(
        environ={}, sandbox=Sandbox(config), audit_path=tmp_path / "audit.db"
    ) as gateway:
        gateway.add_source(folder)
        outcome = gateway.call_sync(TOOL_ID, {"urls": []})
        assert outcome.status == "ok", outcome.message
        expected = {"mode": "compartment", "enforced": False, "label": "unsandboxed-host"}
        assert outcome.metadata["sandbox"] == expected
        assert _audited(gateway, outcome).metadata["sandbox"] == expected


def test_an_internal_binding_records_into_the_outcome_metadata(tmp_path: Path) -> None:
    # The mechanism on its own, for both call paths: the calling thread (call_sync) and the
    # gateway's thread pool (call).
    @tool(namespace="internal")
    def note() -> str:
        """Note something in the metadata."""
        return "unused"

    def record(__toolgate_metadata__: dict[str, Any]) -> str:
        __toolgate_metadata__["note"] = {"written": True}
        return "noted"

    binding = PythonBinding(func=record, is_async=False, metadata_param="__toolgate_metadata__")
    with gateway_with(environ={}, audit_path=tmp_path / "audit.db") as gateway:
        gateway.registry.add(RegisteredTool(note.tool, binding, None))
        for outcome in (
            gateway.call_sync("internal:note", {}),
            asyncio.run(gateway.call("internal:note", {})),
        ):
            assert outcome.content == "noted"
            assert outcome.metadata["note"] == {"written": True}
            assert _audited(gateway, outcome).metadata["note"] == {"written": True}


def test_an_ordinary_tool_cannot_see_the_outcome_metadata(tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    @tool(namespace="user")
    def peek(ctx: ToolContext, metadata: dict[str, Any] | None = None) -> str:
        """Look for the gateway's metadata."""
        seen["metadata"] = metadata
        seen["context"] = {name for name in dir(ctx) if not name.startswith("_")}
        return "looked"

    assert peek.binding.metadata_param is None
    assert "metadata" in peek.tool.input_schema["properties"]  # an argument like any other
    with gateway_with(environ={}, audit_path=tmp_path / "audit.db") as gateway:
        gateway.add(peek)
        outcome = gateway.call_sync("user:peek", {})
        assert outcome.content == "looked"
    # Nothing but its own (absent) argument; the context has no metadata either.
    assert seen["metadata"] is None
    assert "metadata" not in seen["context"]
