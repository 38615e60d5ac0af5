"""How soon a caller waiting for approval sees a decision made by another process (issue 23).

A gateway on an embedded SQLite state file makes a request and waits for it
(``call(..., wait_for_approval=…)``); a second Python process — what ``toolgate approvals approve``
is, minus its start-up — records the decision in the same file. Measured: from the decision's
commit (its ``decided_at``) to the waiting call's return, which includes running the tool.
Baseline in the same run: the same decision made in the waiting process itself, and the bare
poll interval. The agent's *retry* (the common path) reads the store on every call, so it sees a
decision at once; this row is about callers that wait.

    python bench/approval_notice.py            # 20 rounds each (~10 s)
    python bench/approval_notice.py --rounds 50
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from toolgate import Gateway, GatewaySettings, StateSettings, tool
from toolgate.approvals import POLL_INTERVAL

DECIDER = """
import sys, time
from toolgate.model import Decision
from toolgate.stores.sqlite_approvals import SQLiteApprovalStore
path, request_id = sys.argv[1], sys.argv[2]
with SQLiteApprovalStore(path) as store:
    store.decide(request_id, Decision.APPROVE, decided_by="bench", message=None, now=time.time())
"""


@tool(namespace="bench", effect="external_write")
def send(text: str) -> str:
    """Send a message (nothing leaves the machine)."""
    return text


async def _round(gateway: Gateway, state: Path, text: str, *, elsewhere: bool) -> float:
    approvals = gateway.approvals
    assert approvals is not None
    pending = await gateway.call("bench:send", {"text": text})
    assert pending.approval is not None
    request_id = pending.approval.id
    waiting = asyncio.ensure_future(approvals.wait(pending.approval, 30))
    await asyncio.sleep(0.05)  # the waiter is polling
    if elsewhere:
        await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", DECIDER, str(state), request_id], check=True
        )
    else:
        approvals.decide(request_id, "approve", by="bench")
    outcome = await waiting
    returned = time.time()
    assert outcome is not None and outcome.ok, outcome
    decided_at = approvals.get(request_id).decided_at
    assert decided_at is not None
    return (returned - decided_at) * 1000


async def _measure(rounds: int) -> dict[str, list[float]]:
    figures: dict[str, list[float]] = {"same process": [], "another process": []}
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "toolgate.db"
        with Gateway(GatewaySettings(state=StateSettings(path=state)), approver="queue") as gateway:
            gateway.add(send)
            for index in range(rounds):
                for name, elsewhere in (("same process", False), ("another process", True)):
                    figures[name].append(
                        await _round(gateway, state, f"{name} {index}", elsewhere=elsewhere)
                    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    figures = asyncio.run(_measure(rounds))
    print(f"decision → waiting call returns (ms, {rounds} rounds; poll {POLL_INTERVAL * 1000:g})")
    print(f"{'decided in':<16} {'min':>7} {'median':>7} {'max':>7}")
    for name, values in figures.items():
        print(f"{name:<16} {min(values):7.1f} {statistics.median(values):7.1f} {max(values):7.1f}")


if __name__ == "__main__":
    main()
