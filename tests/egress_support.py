"""What the egress tests share: a loopback HTTP server standing in for an allowed host, and a
test resolver that maps the test host names to addresses (so no real DNS is needed)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: The body the stand-in host answers every GET with.
HELLO = "hello from the allowed host"

#: The test host names and the addresses the test resolver gives them.
TEST_HOSTS = {"allowed.test": ["127.0.0.1"], "private.test": ["10.1.2.3"]}


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = HELLO.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def hello_server() -> Iterator[int]:
    """A threaded HTTP server on 127.0.0.1 answering :data:`HELLO`; yields its port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(httpd.server_address[1])
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


async def test_resolver(host: str, port: int) -> list[str]:
    """The egress proxy's resolver for tests: :data:`TEST_HOSTS`, anything else unknown."""
    if host not in TEST_HOSTS:
        raise OSError(f"{host}: no such host (test resolver)")
    return TEST_HOSTS[host]


# Not a test, despite its name.
test_resolver.__test__ = False  # type: ignore[attr-defined]
