"""One gateway for every framework adapter's tests: the same tools, approvals in a queue, state
and audit in real SQLite files, and a log that proves how many times a side effect happened.

Tools (namespace ``demo``):

* ``demo:lookup(city)`` — read-only, no approval; answers ``"sunny in <city>"``;
* ``demo:send_email(to, body)`` — ``communication``: needs a person's approval; each run appends
  one line ``<to>|<body>`` to :attr:`Setup.sent_log` (count the lines: "the body ran once");
* ``demo:charge(amount)`` — ``financial``, needs approval; appends ``charge|<amount>``;
* ``demo:note(text)`` — ``local_write`` without approval, at most 2 calls a minute
  (``calls_per_minute=2``); appends ``note|<text>``;
* ``demo:report(rows)`` — read-only; returns ``rows`` lines of 200 characters each (an overflow
  when ``rows`` > 250) and a ``_visualization`` table the model must never see;
* ``demo:fail()`` — read-only; raises, so the outcome is an ``error`` with a code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway_support import gateway_with
from toolgate import Gateway, tool
from toolgate.integrations import LocalGateway

__all__ = ["AGENT", "Setup", "approval_gateway", "audit_records", "demo_tools", "sent_lines"]

#: The agent the adapters' tests call as.
AGENT = "planner"


def demo_tools(sent_log: Path) -> list[Any]:
    """The demo tools, their side effects written to ``sent_log``."""

    def record(line: str) -> None:
        with sent_log.open("a", encoding="utf-8") as log:
            log.write(line + "\n")

    @tool(namespace="demo", effect="read_only")
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        return f"sunny in {city}"

    @tool(namespace="demo", effect="communication")
    def send_email(to: str, body: str) -> str:
        """Send an email to one recipient."""
        record(f"{to}|{body}")
        return f"sent to {to}"

    @tool(namespace="demo", effect="financial")
    def charge(amount: int) -> str:
        """Charge the customer's card."""
        record(f"charge|{amount}")
        return f"charged {amount}"

    @tool(namespace="demo", effect="local_write", calls_per_minute=2)
    def note(text: str) -> str:
        """Write a note."""
        record(f"note|{text}")
        return f"noted {text}"

    @tool(namespace="demo", effect="read_only")
    def report(rows: int) -> dict[str, Any]:
        """A report of many rows."""
        lines = [f"{i:05d} " + "x" * 194 for i in range(rows)]
        return {
            "text": "\n".join(lines),
            "_visualization": {
                "type": "table",
                "columns": [{"key": "row", "label": "Row"}],
                "rows": [{"row": line[:5]} for line in lines[:3]],
            },
        }

    @tool(namespace="demo", effect="read_only")
    def fail() -> str:
        """Always fails."""
        raise RuntimeError("the demo tool failed on purpose")

    return [lookup, send_email, charge, note, report, fail]


@dataclass
class Setup:
    """An in-process gateway ready for an adapter, and where to look afterwards."""

    gateway: Gateway
    tools: LocalGateway
    """The gateway as adapters see it, calling as :data:`AGENT`."""
    sent_log: Path
    state_path: Path
    audit_path: Path


def audit_records(setup: Setup, **filters: Any) -> list[Any]:
    """The audit log's records (newest first) once every finished call is written."""
    audit = setup.gateway.audit
    assert audit is not None
    audit.flush(timeout=10)
    return audit.query(limit=None, **filters)


def sent_lines(setup: Setup) -> list[str]:
    """The side effects that happened, one line each, oldest first."""
    if not setup.sent_log.exists():
        return []
    return setup.sent_log.read_text(encoding="utf-8").splitlines()


@contextmanager
def approval_gateway(tmp_path: Path, *, agent: str = AGENT, **options: Any) -> Iterator[Setup]:
    """A gateway with the demo tools, a queue of approvals and SQLite state and audit files in
    ``tmp_path``; ``options`` are :func:`gateway_support.gateway_with` settings."""
    sent_log = tmp_path / "sent.log"
    state_path = tmp_path / "state.db"
    audit_path = tmp_path / "audit.db"
    with gateway_with(
        approver="queue",
        state_path=state_path,
        audit_path=audit_path,
        spill_dir=tmp_path / "spill",
        **options,
    ) as gateway:
        for function in demo_tools(sent_log):
            gateway.add(function)
        yield Setup(
            gateway=gateway,
            tools=LocalGateway(gateway, agent=agent),
            sent_log=sent_log,
            state_path=state_path,
            audit_path=audit_path,
        )
