"""What identifying the caller costs on the HTTP API's call path, API keys beside OAuth.

Drives the HTTP API's ASGI app in-process (no sockets, no load generator: only toolgate's own
work is timed) with ``POST /v1/tools/bench:add/call``, rows interleaved round by round:

* ``key``         — an API key, no ``auth:`` (the baseline: today's path);
* ``key+oauth``   — the same API key with ``auth:`` configured (keys and tokens side by side);
* ``token``       — an OAuth access token (RS256, checked against the issuer's key, which is
  already cached here: the steady state).

Run: ``python bench/auth_cost.py [--calls 3000] [--rounds 7]``. Prints the median µs per call of
each row and its ratio to ``key``. Run it with ``PYTHONPATH=<another checkout>/src`` to measure
that checkout's ``key`` row (rows its code cannot build are skipped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from toolgate import Gateway, tool
from toolgate.serve.api import build_api
from toolgate.serve.auth.identity import AgentIdentity, key_sha256

KEY = "bench-api-key"
RESOURCE = "https://toolgate.bench"
ISSUER = "https://issuer.bench"


@tool(namespace="bench", effect="read_only")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _gateway() -> Gateway:
    gateway = Gateway()
    gateway.add(add)
    return gateway


def _identity() -> AgentIdentity:
    return AgentIdentity(config_keys={"bench": key_sha256(KEY)})


def _rows() -> dict[str, tuple[App, str]]:
    rows: dict[str, tuple[App, str]] = {}
    identity = _identity()
    rows["key"] = (build_api(_gateway(), authenticate=identity.authenticate), KEY)
    try:
        from cryptography.hazmat.primitives.asymmetric import rsa
        from jwt import PyJWK
        from jwt import encode as jwt_encode

        from toolgate.config.schema import AuthConfig
        from toolgate.serve.auth.bearer import TokenVerifier
        from toolgate.serve.auth.callers import Callers
    except ImportError as exc:  # another checkout, without OAuth
        print(f"(rows with OAuth skipped: {exc})")
        return rows
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = PyJWK.from_dict({**json.loads(_public_jwk(private)), "kid": "bench", "alg": "RS256"})

    class CachedKeys:  # the issuer's key, already fetched (the steady state)
        async def key(self, kid: str | None) -> PyJWK | None:
            return public if kid == "bench" else None

    auth = AuthConfig(issuer=ISSUER, resource=RESOURCE)
    identity = _identity()
    callers = Callers(identity, TokenVerifier(auth, keys=CachedKeys()))  # type: ignore[arg-type]
    oauth_app = build_api(_gateway(), authenticate=identity.authenticate, identify=callers.identify)
    now = int(time.time())
    token = jwt_encode(
        {"iss": ISSUER, "aud": RESOURCE, "sub": "bench", "iat": now, "exp": now + 3600},
        private,
        algorithm="RS256",
        headers={"kid": "bench"},
    )
    rows["key+oauth"] = (oauth_app, KEY)
    rows["token"] = (oauth_app, token)
    return rows


def _public_jwk(private: Any) -> str:
    from jwt.algorithms import RSAAlgorithm

    return RSAAlgorithm.to_jwk(private.public_key())


async def _call(app: App, credential: str, body: bytes) -> int:
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/tools/bench:add/call",
        "raw_path": b"/v1/tools/bench:add/call",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1:8470"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"authorization", f"Bearer {credential}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8470),
    }
    status = 0

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _time(app: App, credential: str, calls: int, body: bytes) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        await _call(app, credential, body)
    return (time.perf_counter_ns() - start) / calls / 1000


async def main(calls: int, rounds: int) -> None:
    body = json.dumps({"arguments": {"a": 1, "b": 2}}).encode()
    rows = _rows()
    for name, (app, credential) in rows.items():
        status = await _call(app, credential, body)
        assert status == 200, f"{name}: HTTP {status}"
        await _time(app, credential, calls // 10 or 1, body)  # warm up
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, (app, credential) in rows.items():
            samples[name].append(await _time(app, credential, calls, body))
    baseline = statistics.median(samples["key"])
    print(f"{'row':<10} {'µs/call':>9} {'× key':>7}")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"{name:<10} {median:>9.1f} {median / baseline:>7.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    asyncio.run(main(options.calls, options.rounds))
