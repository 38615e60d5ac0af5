"""An audit record keeps a bounded payload (issue 24).

A call with 1 MB of arguments (or a 1 MB result) used to be recorded whole. Past
``audit.max_payload_bytes`` the record holds a marker — ``{"_truncated": true,
"original_size": N, "preview": ...}`` — read back through the Python API and ``toolgate audit
list --json``; with ``audit.keep_full_payloads`` the whole value is in the file the marker names,
redacted like the record (a secret never reaches it unmasked).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from serve_support import TOOLGATE
from toolgate import Gateway, ToolContext, tool
from toolgate.config import build_gateway, load_config
from toolgate.model import CallStatus

SECRET = "sk-live-9f8e7d6c5b4a39281706"
BIG = 1_000_000


@tool(namespace="notes", effect="read_only", secrets=["API_KEY"])
def store(ctx: ToolContext, text: str) -> str:
    """Store a note and answer it back (the key is only used, never returned on purpose)."""
    assert ctx.secrets["API_KEY"]
    return text


def _record(gateway: Gateway) -> Any:
    assert gateway.audit is not None and gateway.audit.flush(10)
    (record,) = gateway.audit.query(tool_id="notes:store")
    return record


def test_a_megabyte_of_arguments_is_recorded_as_a_marker_with_its_size(tmp_path: Path) -> None:
    text = "a" * BIG + SECRET
    with gateway_with(
        audit_path=tmp_path / "audit.db",
        secrets={"API_KEY": SECRET},
        spill_dir=tmp_path / "spill",
    ) as gateway:
        gateway.add(store)
        outcome = gateway.call_sync("notes:store", {"text": text})
        assert outcome.status is CallStatus.OK, outcome.message
        record = _record(gateway)
    # The size of the redacted value's JSON, {"text":"aaa…***"}; the result is the model's
    # overflow preview (10,000 characters and a note), still over 8 KiB.
    assert record.args["_truncated"] is True
    assert record.args["original_size"] > BIG
    assert record.args["preview"].startswith('{"text":"aaaa')
    assert record.result["_truncated"] is True
    assert record.result["original_size"] > 8 * 1024
    for payload in (record.args, record.result):
        assert "full" not in payload  # not kept unless the operator asks
    assert len(json.dumps(record.to_dict())) < 4_000
    assert not (tmp_path / "spill" / "audit").exists()


def test_full_payloads_go_redacted_to_the_file_the_record_names(tmp_path: Path) -> None:
    text = "b" * BIG + SECRET
    with gateway_with(
        audit_path=tmp_path / "audit.db",
        secrets={"API_KEY": SECRET},
        spill_dir=tmp_path / "spill",
        audit_keep_full_payloads=True,
    ) as gateway:
        gateway.add(store)
        outcome = gateway.call_sync("notes:store", {"text": text})
        assert outcome.status is CallStatus.OK, outcome.message
        small = gateway.call_sync("notes:store", {"text": "short"})
        assert small.status is CallStatus.OK
        assert gateway.audit is not None and gateway.audit.flush(10)
        records = {r.call_id: r for r in gateway.audit.query(tool_id="notes:store")}
    big_record = records[outcome.call_id]
    full = Path(big_record.args["full"])
    assert full.parent == tmp_path / "spill" / "audit"
    assert oct(full.stat().st_mode & 0o777) == "0o600"
    kept = json.loads(full.read_text())
    assert kept["text"].startswith("b" * BIG)
    assert SECRET not in full.read_text(), "the secret reached the overflow file unmasked"
    assert len(full.read_text().encode()) == big_record.args["original_size"]
    result_file = Path(big_record.result["full"])
    assert SECRET not in result_file.read_text()
    # A small payload is kept as it is.
    assert records[small.call_id].args == {"text": "short"}


@pytest.mark.slow
def test_the_cli_reads_back_the_marker_with_the_configured_limit(
    project: Path, toolgate_home: Path
) -> None:
    (project / "notes.py").write_text(
        "from toolgate import tool\n\n"
        "@tool(namespace='notes', effect='read_only')\n"
        "def store(text: str) -> str:\n"
        '    """Store a note."""\n'
        "    return 'stored'\n"
    )
    (project / "toolgate.yaml").write_text(
        "python:\n  - ./notes.py\naudit:\n  max_payload_bytes: 1024\n"
    )
    gateway = build_gateway(load_config(project / "toolgate.yaml"), home=toolgate_home)
    with gateway:
        assert gateway.call_sync("notes:store", {"text": "c" * 5_000}).status is CallStatus.OK
        assert gateway.call_sync("notes:store", {"text": "c" * 900}).status is CallStatus.OK
    listed = subprocess.run(
        [TOOLGATE, "audit", "list", "--json"],
        cwd=project,
        env={**os.environ, "TOOLGATE_HOME": str(toolgate_home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    records = json.loads(listed.stdout)
    assert len(records) == 2
    whole, marker = sorted((r["args"] for r in records), key=lambda args: "_truncated" in args)
    assert whole == {"text": "c" * 900}  # under 1024 bytes: kept whole
    assert marker["_truncated"] is True
    assert marker["original_size"] == len(json.dumps({"text": "c" * 5_000}, separators=(",", ":")))
    assert marker["preview"].startswith('{"text":"ccc')


def test_a_huge_error_message_is_cut_like_the_detail(tmp_path: Path) -> None:
    """Found by the review: a tool raising an exception of 2 MB left a 2 MB ``message``."""

    @tool(namespace="notes", effect="read_only")
    def explode() -> str:
        """Fails with a very long message."""
        raise ValueError("\ud800" + "E" * 2_000_000)  # a lone surrogate too: still recorded

    with gateway_with(audit_path=tmp_path / "audit.db") as gateway:
        gateway.add(explode)
        assert gateway.call_sync("notes:explode").status is CallStatus.ERROR
        assert gateway.audit is not None and gateway.audit.flush(10)
        (record,) = gateway.audit.query(tool_id="notes:explode")
    assert len(record.message.encode()) < 9 * 1024
    assert "[truncated by toolgate: the message has" in record.message
    assert len(json.dumps(record.to_dict())) < 20_000
