"""A real ``toolgate serve`` with the adapters' demo tools, for the remote tests.

The same tools as :func:`integrations_support.demo_tools` (namespace ``demo``), loaded by the
server from a Python tools module its ``toolgate.yaml`` names; an API key for the agent
:data:`~integrations_support.AGENT` (``planner``), one for the operator ``ops`` (labelled
``role: operator``: it may decide approvals over HTTP) and one for ``reader`` (a Policy hides the
tools with side effects from it); approvals in the server's queue, state and
audit in SQLite under its own ``$TOOLGATE_HOME``. Decisions can be made as a person makes them,
with the real CLI against the same home and configuration.

One server per test module is enough and keeps the suite fast::

    from integrations_served import served_toolgate  # the module-scoped fixture

    @pytest.mark.slow
    def test_something(served_toolgate: ServedToolgate) -> None:
        ...

Each test should use its own arguments (or ``tool_call_id``) so that the approvals, grants and
idempotency keys of one test cannot answer another's calls; :meth:`ServedToolgate.sent_lines`
counts side effects, so filter them by what the test sent. ``demo:note`` allows 2 calls a minute
for the whole module.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from integrations_support import AGENT
from serve_support import TOOLGATE, serving
from toolgate import Client
from toolgate.serve.auth.identity import key_sha256, new_key

__all__ = ["OPERATOR", "READER", "ServedToolgate", "serve_demo", "served_toolgate"]

#: The operator agent's name (labelled ``role: operator``).
OPERATOR = "ops"

_TESTS = Path(__file__).resolve().parent

# The server imports the demo tools from the tests folder (PYTHONPATH), so both gateways run the
# very same functions; each run appends to the log the environment names.
_TOOLS_MODULE = """\
import os
from pathlib import Path

from integrations_support import demo_tools

lookup, send_email, charge, note, report, fail = demo_tools(
    Path(os.environ["TOOLGATE_DEMO_SENT_LOG"])
)
"""

#: An agent that may see only the tools without side effects beyond reading (a Policy denies
#: ``local_write``, ``communication`` and ``financial`` ones): for the access-rule tests.
READER = "reader"


def _config(keys: dict[str, str], extra: str) -> str:
    """``toolgate.yaml``: the tools module, the agents with their keys' hashes (written in the
    file, so no CLI process has to start before the server), the reader's Policy."""
    digest = {name: key_sha256(key) for name, key in keys.items()}
    return f"""\
python:
  - ./demo_tools.py
overflow:
  dir: ./spill
agents:
  {AGENT}:
    labels: {{team: demo}}
    key_sha256: {digest[AGENT]}
  {OPERATOR}:
    labels: {{role: operator}}
    key_sha256: {digest[OPERATOR]}
  {READER}:
    labels: {{team: readers}}
    key_sha256: {digest[READER]}
policies:
  - apiVersion: joch.dev/v1alpha1
    kind: Policy
    metadata: {{name: readers-only-read}}
    spec:
      appliesTo: {{selector: {{matchLabels: {{team: readers}}}}}}
      rules:
        - when: {{tool.sideEffect: [local_write, communication, financial]}}
          action: deny
          reason: readers only read
{extra}"""


@dataclass
class ServedToolgate:
    """A running ``toolgate serve`` with the demo tools, and how to act on it as a person."""

    url: str
    """Its base URL (``http://127.0.0.1:<port>``)."""
    agent_key: str
    """The API key of the agent ``planner``."""
    operator_key: str
    """The API key of the operator ``ops``."""
    reader_key: str
    """The API key of the agent ``reader`` (sees ``demo:lookup``, ``demo:report``,
    ``demo:fail`` only)."""
    home: Path
    """Its ``$TOOLGATE_HOME`` (state, audit, keys)."""
    folder: Path
    """The folder it runs in (``toolgate.yaml``, the tools module)."""
    sent_log: Path
    """One line per side effect of a demo tool (see :func:`integrations_support.demo_tools`)."""
    env: dict[str, str]
    pid: int

    def client(self, **options: Any) -> Client:
        """A :class:`toolgate.Client` calling as ``planner``, deciding (``decide``) as ``ops``;
        ``options`` go to the client (``key=served.reader_key``, ``approver_key=None``…)."""
        options.setdefault("key", self.agent_key)
        options.setdefault("approver_key", self.operator_key)
        return Client(self.url, **options)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real CLI, run as a person runs it next to the server (same home and config)."""
        return subprocess.run(
            [TOOLGATE, *args],
            cwd=self.folder,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def decide(
        self, approval_id: str, decision: str = "approve", *, message: str | None = None
    ) -> None:
        """Decide a pending request with the CLI: ``approve``, ``always`` (approve with
        ``--always``) or ``deny``; fails the test when the CLI refuses."""
        if decision == "deny":
            args = ["approvals", "deny", approval_id]
        elif decision in ("approve", "always"):
            args = ["approvals", "approve", approval_id, "--by", "alice"]
            if decision == "always":
                args.append("--always")
        else:
            raise ValueError(f"decision must be approve, always or deny, not {decision!r}")
        if message is not None:
            args += ["--message", message]
        done = self.cli(*args)
        assert done.returncode == 0, f"{shlex.join(args)}: {done.stdout}{done.stderr}"

    def approve(self, approval_id: str) -> None:
        """Approve once with the CLI."""
        self.decide(approval_id, "approve")

    def deny(self, approval_id: str, message: str | None = None) -> None:
        """Deny with the CLI."""
        self.decide(approval_id, "deny", message=message)

    def sent_lines(self) -> list[str]:
        """The side effects that happened, one line each, oldest first."""
        if not self.sent_log.exists():
            return []
        return self.sent_log.read_text(encoding="utf-8").splitlines()

    def audit(self, *, wait_for: int = 1, **filters: str) -> list[dict[str, Any]]:
        """The audit records matching ``filters`` (``tool`` — or ``tool_id``, as
        :func:`integrations_support.audit_records` names it —, ``agent``, ``status``, ``code``:
        the filters of ``GET /v1/audit``), newest first, as JSON objects (``tool_id``,
        ``agent``, ``status``, ``code``, ``approval_id``, ``approval_decision``,
        ``idempotency_key``…), read over the API as the operator. The server writes its audit
        log in the background, so this waits (up to 10 s) until at least ``wait_for`` records
        match."""
        if "tool_id" in filters:
            filters["tool"] = filters.pop("tool_id")
        query = urllib.parse.urlencode({**filters, "limit": "500"})
        request = urllib.request.Request(
            f"{self.url}/v1/audit?{query}",
            headers={"Authorization": f"Bearer {self.operator_key}"},
        )
        deadline = time.monotonic() + 10
        while True:
            with urllib.request.urlopen(request, timeout=10) as answer:
                records: list[dict[str, Any]] = json.load(answer)["records"]
            if len(records) >= wait_for or time.monotonic() > deadline:
                return records
            time.sleep(0.05)


@contextmanager
def serve_demo(folder: Path, *, extra_config: str = "") -> Iterator[ServedToolgate]:
    """Start ``toolgate serve`` in ``folder`` (created) with the demo tools and the three
    agents' keys; yield it once ``/healthz`` answers; stop it (SIGTERM, a clean exit checked)
    afterwards. ``extra_config`` is appended to ``toolgate.yaml`` (top-level sections such as
    ``search:``)."""
    folder.mkdir(parents=True, exist_ok=True)
    home = folder / "home"
    sent_log = folder / "sent.log"
    python_path = [str(_TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {
        **os.environ,
        "TOOLGATE_HOME": str(home),
        "TOOLGATE_DEMO_SENT_LOG": str(sent_log),
        "PYTHONPATH": os.pathsep.join(python_path),
    }
    (folder / "demo_tools.py").write_text(_TOOLS_MODULE, encoding="utf-8")
    keys = {name: new_key() for name in (AGENT, OPERATOR, READER)}
    (folder / "toolgate.yaml").write_text(_config(keys, extra_config), encoding="utf-8")
    with serving(folder, env) as (url, pid):
        yield ServedToolgate(
            url=url,
            agent_key=keys[AGENT],
            operator_key=keys[OPERATOR],
            reader_key=keys[READER],
            home=home,
            folder=folder,
            sent_log=sent_log,
            env=env,
            pid=pid,
        )


@pytest.fixture(scope="module")
def served_toolgate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedToolgate]:
    """One real ``toolgate serve`` with the demo tools for the whole test module."""
    with serve_demo(tmp_path_factory.mktemp("served")) as served:
        yield served
