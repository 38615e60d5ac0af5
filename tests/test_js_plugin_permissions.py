"""Each permission of a compartment tool, granted and withheld (seed 001, "Sandbox &
Permissions"), through ``Gateway.call_sync`` with real Node.js and SES."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from egress_support import HELLO, hello_server, test_resolver
from gateway_support import gateway_with
from js_support import js_runtime, plugin_copy
from toolgate.model import CallOutcome
from toolgate.sandbox.runner import Sandbox

__all__ = ["js_runtime"]  # the fixture, used by name

PLUGIN = "@toolgate-test/probe"
pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]


def _call(
    tmp_path: Path,
    tool: str,
    arguments: dict[str, Any],
    permissions: dict[str, Any],
    *,
    environ: dict[str, str] | None = None,
    sandbox: Sandbox | None = None,
) -> CallOutcome:
    folder = plugin_copy(tmp_path, "probe", permissions=permissions)
    with gateway_with(
        environ=environ or {}, sandbox=sandbox, audit_path=tmp_path / "a.db"
    ) as gateway:
        loaded = gateway.add_source(folder)
        assert loaded.diagnostics == [], loaded.diagnostics
        outcome = gateway.call_sync(f"{PLUGIN}:{tool}", arguments)
        assert gateway.audit is not None and gateway.audit.flush(10)
        [record] = gateway.audit.query(tool_id=outcome.tool_id, limit=None)
        assert record.status == outcome.status
    return outcome


def test_time_granted_gives_date_and_intl(tmp_path: Path) -> None:
    outcome = _call(tmp_path, "now", {}, {"time": True})
    assert outcome.ok, outcome.message
    assert outcome.content["now"] > 1_600_000_000_000
    assert outcome.content["year"] >= 2024 and outcome.content["fmt"] == "function"


def test_time_withheld_date_throws_naming_the_permission(tmp_path: Path) -> None:
    outcome = _call(tmp_path, "now", {}, {})
    assert outcome.is_error
    assert "Date.now() is not available: this tool's permissions do not grant 'time'" in (
        outcome.message or ""
    )


def test_random_granted_and_withheld(tmp_path: Path) -> None:
    granted = _call(tmp_path / "a", "random", {}, {"random": True})
    assert granted.ok and 0 <= granted.content["random"] < 1
    withheld = _call(tmp_path / "b", "random", {}, {})
    assert withheld.is_error and "do not grant 'random'" in (withheld.message or "")
    # Cryptographic randomness is never available, even with 'random'.
    crypto = _call(tmp_path / "c", "crypto", {}, {"random": True, "time": True})
    assert crypto.is_error and "getRandomValues" in (crypto.message or "")


def test_env_holds_only_the_declared_keys(tmp_path: Path) -> None:
    environ = {"DECLARED": "yes", "SECRET": "hidden"}
    declared = _call(
        tmp_path / "a", "env", {"key": "DECLARED"}, {"env": ["DECLARED"]}, environ=environ
    )
    assert declared.content == {"value": "yes", "keys": ["DECLARED"]}
    undeclared = _call(
        tmp_path / "b", "env", {"key": "SECRET"}, {"env": ["DECLARED"]}, environ=environ
    )
    assert undeclared.content == {"value": None, "keys": ["DECLARED"]}
    withheld = _call(tmp_path / "c", "env", {"key": "DECLARED"}, {}, environ=environ)
    assert withheld.content == {"value": None, "keys": []}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    (data / "escape.txt").symlink_to(tmp_path / "secret.txt")
    return data


def test_fs_reads_under_the_declared_prefixes_only(tmp_path: Path, files: Path) -> None:
    perms = {"fs": [str(files)]}
    inside = _call(tmp_path / "a", "read", {"path": str(files / "note.txt")}, perms)
    assert inside.ok and inside.content == {"text": "inside"}
    outside = _call(tmp_path / "b", "read", {"path": str(tmp_path / "secret.txt")}, perms)
    assert outside.is_error and "outside the tool's fs permission" in (outside.message or "")
    # A symlink inside the prefix that points outside is refused too.
    link = _call(tmp_path / "c", "read", {"path": str(files / "escape.txt")}, perms)
    assert link.is_error and "outside the tool's fs permission" in (link.message or "")
    dotdot = _call(tmp_path / "d", "read", {"path": f"{files}/../secret.txt"}, perms)
    assert dotdot.is_error


def test_fs_withheld_there_is_no_fs(tmp_path: Path, files: Path) -> None:
    outcome = _call(tmp_path, "read", {"path": str(files / "note.txt")}, {})
    assert outcome.is_error and "readFile" in (outcome.message or "")


@pytest.fixture
def server() -> Iterator[int]:
    with hello_server() as port:
        yield port


async def _resolver(host: str, port: int) -> list[str]:
    extra = {"loopback.test": ["127.0.0.1"], "metadata.test": ["169.254.169.254"]}
    return extra[host] if host in extra else await test_resolver(host, port)


def test_network_granted_reaches_the_declared_host_through_the_egress_proxy(
    tmp_path: Path, server: int
) -> None:
    sandbox = Sandbox(cidr_grants={f"{PLUGIN}:fetch": ["127.0.0.1/32"]}, resolver=_resolver)
    perms = {"network": [f"allowed.test:{server}"]}
    outcome = _call(
        tmp_path, "fetch", {"url": f"http://allowed.test:{server}/"}, perms, sandbox=sandbox
    )
    assert outcome.ok, outcome.message
    assert outcome.content == {"status": 200, "body": HELLO}
    # Where bubblewrap works the host runs inside it too, reaching the proxy by a bound socket.
    confined = "bwrap" if sandbox.host().works else None
    assert outcome.metadata["sandbox"].get("process_sandbox") == confined
    [event] = outcome.metadata["sandbox"]["egress"]
    assert (event["host"], event["port"], event["allowed"]) == ("allowed.test", server, True)


@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("undeclared.test", "not in the tool's network permission"),
        ("loopback.test", "loopback"),  # declared, but resolves to 127.0.0.1 (no grant)
        ("metadata.test", "metadata"),  # declared, resolves to the metadata address
    ],
)
def test_network_refusals_are_errors_with_the_proxy_reason(
    tmp_path: Path, server: int, host: str, reason: str
) -> None:
    sandbox = Sandbox(resolver=_resolver)
    perms = {"network": [f"loopback.test:{server}", f"metadata.test:{server}"]}
    outcome = _call(tmp_path, "fetch", {"url": f"http://{host}:{server}/"}, perms, sandbox=sandbox)
    assert outcome.is_error
    assert "refused by toolgate's egress proxy" in (outcome.message or "")
    assert reason in (outcome.message or "").lower()
    [event] = outcome.metadata["sandbox"]["egress"]
    assert event["allowed"] is False and event["host"] == host


def test_network_withheld_there_is_no_fetch(tmp_path: Path, server: int) -> None:
    outcome = _call(tmp_path, "fetch", {"url": f"http://allowed.test:{server}/"}, {})
    assert outcome.is_error and "fetch" in (outcome.message or "")
    assert "egress" not in outcome.metadata["sandbox"]


def test_fs_exists_does_not_tell_which_files_exist_outside_the_prefixes(
    tmp_path: Path, files: Path
) -> None:
    (files / "to-missing").symlink_to(tmp_path / "no-such-file")
    perms = {"fs": [str(files)]}
    answers = [
        _call(tmp_path / name, "exists", {"path": str(files / name)}, perms)
        for name in ("escape.txt", "to-missing")
    ]
    # Through a symlink leading out: the same refusal whether the file there exists or not.
    for answer in answers:
        assert answer.is_error and "outside the tool's fs permission" in (answer.message or "")
    inside = _call(tmp_path / "in", "exists", {"path": str(files / "nope.txt")}, perms)
    assert inside.ok and inside.content == {"exists": False}


@pytest.fixture
def redirecting() -> Iterator[int]:
    """``/hop`` redirects to ``other.test`` on the same port; ``/echo`` answers with the
    Authorization header it got."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/hop"):
                self.send_response(302)
                self.send_header("Location", f"http://other.test:{self.server.server_port}/echo")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = (self.headers.get("Authorization") or "none").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_port
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_credentials_never_follow_a_redirect_to_another_origin(
    tmp_path: Path, redirecting: int
) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return ["127.0.0.1"] if host in ("first.test", "other.test") else []

    grants = {f"{PLUGIN}:fetchAuth": ["127.0.0.1/32"]}
    sandbox = Sandbox(cidr_grants=grants, resolver=resolver)
    perms = {"network": [f"first.test:{redirecting}", f"other.test:{redirecting}"]}
    same = _call(
        tmp_path / "same",
        "fetchAuth",
        {"url": f"http://first.test:{redirecting}/echo"},
        perms,
        sandbox=sandbox,
    )
    assert same.ok and same.content["body"] == "Bearer probe-token", same.message
    moved = _call(
        tmp_path / "moved",
        "fetchAuth",
        {"url": f"http://first.test:{redirecting}/hop"},
        perms,
        sandbox=sandbox,
    )
    assert moved.ok, moved.message
    assert moved.content["url"] == f"http://other.test:{redirecting}/echo"
    assert moved.content["body"] == "none"  # the token stayed with first.test
