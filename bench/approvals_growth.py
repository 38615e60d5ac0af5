"""What waiting approvals cost as they pile up: 1, 10 and 100 pending approval requests.

    python bench/approvals_growth.py                    # ~20 s
    python bench/approvals_growth.py --pending 1,10,100,1000 --runs 30

For each count, one gateway with the embedded SQLite state (approval requests in
``toolgate.db``) and audit log in a temporary folder, two tools — ``chat:send`` (needs approval)
and ``chat:read`` (does not) — and that many calls of ``chat:send`` by ten agents, each waiting
for a person's decision. Then, through the whole served app (Starlette's test client, no
socket), the median of ``--runs`` requests after a warm-up:

* ``floor: /healthz`` — the cheapest request the app answers;
* ``web /approvals`` — the web UI's approvals inbox (the operator's page of waiting requests);
* ``GET /v1/approvals`` — the HTTP API's list of pending requests (operators);
* ``call`` — ``POST /v1/tools/chat:read/call``: a call that needs no approval, while the others
  wait (it goes through every stage, the approval stage included).

Absolute times depend on the machine and its load; compare the rows of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from toolgate import (
    ApprovalSettings,
    AuditSettings,
    Gateway,
    GatewaySettings,
    StateSettings,
    tool,
)
from toolgate.model import CallStatus


@tool(namespace="chat", effect="external_write")
def send(text: str) -> str:
    """Send a message (needs a person's approval)."""
    return f"sent {text}"


@tool(namespace="chat", effect="read_only")
def read(channel: str) -> str:
    """Read a channel."""
    return f"nothing new in {channel}"


@contextmanager
def _gateway(pending: int) -> Iterator[Gateway]:
    with tempfile.TemporaryDirectory(prefix="toolgate-approvals-") as folder:
        settings = GatewaySettings(
            approvals=ApprovalSettings(max_pending_per_tool=None, max_pending_per_agent=None),
            state=StateSettings(path=Path(folder) / "toolgate.db"),
            audit=AuditSettings(path=Path(folder) / "audit.db"),
        )
        gateway = Gateway(settings, approver="queue")
        gateway.add([send, read])
        for index in range(pending):
            outcome = gateway.call_sync(
                "chat:send", {"text": f"message {index}"}, agent=f"agent{index % 10}"
            )
            if outcome.status is not CallStatus.PENDING_APPROVAL:
                raise RuntimeError(f"call {index} did not wait for approval: {outcome.message}")
        assert gateway.approvals is not None
        if len(gateway.approvals.pending()) != pending:
            raise RuntimeError("the pending requests are not all in the queue")
        try:
            yield gateway
        finally:
            gateway.close()


def _timed(runs: int, action: Callable[[], int]) -> dict[str, float]:
    """Median (and spread) in milliseconds of ``runs`` requests after a warm-up, with the
    bytes of the last answer."""
    size = action()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        size = action()
        times.append((time.perf_counter() - start) * 1000)
    return {
        "median": statistics.median(times),
        "min": min(times),
        "max": max(times),
        "bytes": size,
    }


def _row(pending: int, runs: int) -> dict[str, Any]:
    from toolgate.serve.app import build_app
    from toolgate.serve.web import build_ui

    with _gateway(pending) as gateway:
        app = build_app(
            gateway,
            authenticate=lambda _connection: "operator",
            is_operator=lambda _agent: True,
            ui=build_ui(gateway, require_operator=lambda _request: "operator", allowed_hosts=None),
            manage_gateway=False,
        )
        with TestClient(app, base_url="http://127.0.0.1") as http:

            def get(path: str, needle: str | None = None) -> Callable[[], int]:
                def action() -> int:
                    response = http.get(path)
                    response.raise_for_status()
                    if needle is not None and needle not in response.text:
                        raise RuntimeError(f"{path} does not show {needle!r}")
                    return len(response.content)

                return action

            def call() -> int:
                body = {"arguments": {"channel": "x"}}
                response = http.post("/v1/tools/chat:read/call", json=body)
                response.raise_for_status()
                if "nothing new" not in response.text:
                    raise RuntimeError(f"the call answered {response.text[:300]}")
                return len(response.content)

            def listed() -> int:
                response = http.get("/v1/approvals")
                response.raise_for_status()
                if len(response.json()["approvals"]) != pending:
                    raise RuntimeError("GET /v1/approvals does not list every pending request")
                return len(response.content)

            return {
                "pending": pending,
                "floor": _timed(runs, get("/healthz")),
                "web": _timed(runs, get("/approvals", f"message {pending - 1}")),
                "api": _timed(runs, listed),
                "call": _timed(runs, call),
            }


_COLUMNS = {
    "floor": "floor: /healthz",
    "web": "web /approvals",
    "api": "GET /v1/approvals",
    "call": "call (no approval needed)",
}


def _render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| pending | " + " | ".join(_COLUMNS.values()) + " |",
        "|---:|" + "---|" * len(_COLUMNS),
    ]
    for row in rows:
        cells = [f"{row['pending']:,}"]
        for key in _COLUMNS:
            figure = row[key]
            size = figure["bytes"]
            shown = f"{size / 1024:,.0f} KiB" if size >= 1024 else f"{size} B"
            cells.append(
                f"{figure['median']:.2f} ms ({figure['min']:.2f}–{figure['max']:.2f}), {shown}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", default="1,10,100", help="pending requests, by commas")
    parser.add_argument("--runs", type=int, default=20, help="timed requests per figure")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    options = parser.parse_args(argv)
    counts = [int(part) for part in options.pending.split(",") if part.strip()]
    rows = []
    for count in counts:
        print(f"{count:,} pending approvals…", file=sys.stderr, flush=True)
        rows.append(_row(count, options.runs))
    print(json.dumps(rows) if options.json else _render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
