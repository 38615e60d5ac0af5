"""Where a pending call sends the person: the command for their own shell, and a web UI link
only when a toolgate server answers (``toolgate.serve.mcp.approval_link``)."""

from __future__ import annotations

import http.server
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_mcp_server_helpers import free_port
from toolgate.serve.mcp.approval_link import ApprovalDirections, approval_command_prefix


def test_the_command_names_the_home_and_config_quoted_for_a_shell(tmp_path: Path) -> None:
    folder = tmp_path / "my project"
    config = folder / "toolgate.yaml"
    home = tmp_path / "a home"
    prefix = approval_command_prefix(config, {"TOOLGATE_HOME": str(home)})
    assert prefix == (
        f"TOOLGATE_HOME={shlex.quote(str(home))} toolgate --config {shlex.quote(str(config))}"
    )
    assert shlex.split(prefix)[-2:] == ["--config", str(config)]
    assert approval_command_prefix(None, {}) == "toolgate"


@pytest.fixture
def not_toolgate() -> Iterator[str]:
    """An HTTP server that answers every GET with a page, as some other program on the port."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>not toolgate</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_a_guessed_address_is_linked_only_when_toolgate_answers(not_toolgate: str) -> None:
    nobody = ApprovalDirections(f"http://127.0.0.1:{free_port()}", checked=True)
    await nobody.refresh()
    assert nobody.url is None
    other = ApprovalDirections(not_toolgate, checked=True)
    await other.refresh()
    assert other.url is None  # a page, but not toolgate's /healthz
    own = ApprovalDirections("http://127.0.0.1:8470/", checked=False)
    await own.refresh()
    assert own.url == "http://127.0.0.1:8470"  # toolgate serve's own address is never probed
