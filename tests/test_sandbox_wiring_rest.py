"""REST tools and the operator's network grants (``sandbox.network_grants`` in toolgate.yaml).

A REST tool reaches public addresses only; a private one (here the loopback test server) needs
the operator's CIDR grant for that tool, and the gateway's own serve port stays refused even then.
Calls go through the installed ``toolgate`` console script with a real toolgate.yaml.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import RunCli
from toolgate.config.files import load_config
from toolgate.errors import ConfigError

pytestmark = pytest.mark.slow


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"hello": "from loopback"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    """A loopback HTTP server; yields its origin."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def _project(
    project: Path, origin: str, sandbox: dict[str, Any] | None = None, port: int = 0
) -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "hello", "namespace": "api"},
        "spec": {
            "type": "rest",
            "description": "Say hello.",
            "endpoint": {"method": "GET", "url": f"{origin}/hello"},
            "inputSchema": {"type": "object"},
            "sideEffects": {"level": "read_only"},
        },
    }
    (project / "api.yaml").write_text(yaml.safe_dump(document), encoding="utf-8")
    config: dict[str, Any] = {"sources": [{"path": "api.yaml"}]}
    if sandbox is not None:
        config["sandbox"] = sandbox
    if port:
        config["serve"] = {"port": port}
    (project / "toolgate.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")


def _call(run_cli: RunCli) -> dict[str, Any]:
    done = run_cli("call", "api:hello", "--json")
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


def test_a_rest_tool_cannot_reach_loopback_without_a_grant(
    run_cli: RunCli, project: Path, server: str
) -> None:
    _project(project, server)
    outcome = _call(run_cli)
    assert outcome["status"] == "error"
    assert outcome["code"] == "tool_error"
    assert "was not sent" in outcome["message"]
    assert "CIDR grant" in outcome["message"]


def test_the_operators_grant_lets_one_tool_reach_a_private_address(
    run_cli: RunCli, project: Path, server: str
) -> None:
    _project(project, server, {"network_grants": {"api:hello": ["127.0.0.1/32"]}})
    outcome = _call(run_cli)
    assert outcome["status"] == "ok", outcome
    assert outcome["content"] == {"hello": "from loopback"}
    shown = json.loads(run_cli("tools", "show", "api:hello", "--json").stdout)
    assert shown["sandbox"]["enforced"] == {
        "sandbox": "none: the gateway sends the request",
        "network": "public addresses only, checked at connect time and on every redirect; "
        "granted: 127.0.0.1/32",
    }

    # A grant for another tool does not count.
    _project(project, server, {"network_grants": {"api:other": ["127.0.0.1/32"]}})
    assert _call(run_cli)["status"] == "error"


def test_the_gateways_serve_port_is_refused_even_with_a_grant(
    run_cli: RunCli, project: Path, server: str
) -> None:
    port = int(server.rsplit(":", 1)[1])
    _project(project, server, {"network_grants": {"api:hello": ["127.0.0.1/32"]}}, port=port)
    outcome = _call(run_cli)
    assert outcome["status"] == "error"
    assert "was not sent" in outcome["message"]


@pytest.mark.parametrize(
    ("grants", "says"),
    [
        ({"api:hello": ["169.254.0.0/16"]}, "metadata"),
        ({"api:hello": ["not-a-network"]}, "not a network"),
        ({"hello": ["127.0.0.1/32"]}, "namespace:name"),
    ],
)
def test_a_bad_grant_is_a_configuration_error(
    project: Path, grants: dict[str, list[str]], says: str
) -> None:
    (project / "toolgate.yaml").write_text(
        yaml.safe_dump({"sandbox": {"network_grants": grants}}), encoding="utf-8"
    )
    with pytest.raises(ConfigError, match="network_grants") as caught:
        load_config(project / "toolgate.yaml")
    assert says in str(caught.value)


def test_sandbox_hosts_pin_a_name_and_the_pinned_address_is_checked_like_any(
    project: Path, server: str, run_cli: RunCli
) -> None:
    port = server.rsplit(":", 1)[1]
    origin = f"http://mirror.internal.test:{port}"
    # No DNS knows the name: pinned to the loopback server, and granted, it is reached.
    pinned = {"mirror.internal.test": ["127.0.0.1"]}
    _project(project, origin, {"hosts": pinned, "network_grants": {"api:hello": ["127.0.0.1/32"]}})
    outcome = _call(run_cli)
    assert outcome["status"] == "ok", outcome
    assert outcome["content"] == {"hello": "from loopback"}
    # Pinned but not granted: a private address stays closed.
    _project(project, origin, {"hosts": pinned})
    assert _call(run_cli)["status"] == "error"
    # Pinned to a metadata address: never, whatever the grants.
    metadata = {"mirror.internal.test": ["169.254.169.254"]}
    _project(project, origin, {"hosts": metadata, "network_grants": {"api:hello": ["10.0.0.0/8"]}})
    refused = _call(run_cli)
    assert refused["status"] == "error" and "169.254.169.254" in refused["message"], refused


def test_a_malformed_sandbox_host_is_a_configuration_error_naming_it(project: Path) -> None:
    config = project / "toolgate.yaml"
    config.write_text(yaml.safe_dump({"sandbox": {"hosts": {"a.test": ["nope"]}}}))
    with pytest.raises(ConfigError, match=r"sandbox.hosts.*a.test: 'nope' is not an IP address"):
        load_config(config)
