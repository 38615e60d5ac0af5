"""OAuth 2.1 with real parts: a real authorization server on loopback (tests/oauth_support.py),
a real ``toolgate serve`` subprocess configured with ``auth:``, and the official MCP client's
OAuth support completing the whole flow (metadata discovery, dynamic registration, PKCE,
``resource``) before it calls a tool.

Every attack is sent to the HTTP API and to the MCP endpoint, and must be refused with the
right status and without the tool running: ``t:record`` appends a line to a file each time it
runs, and the file is compared before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from oauth_support import (
    AuthorizationServer,
    authorization_server,
    hmac_with_public_key,
    tampered,
    unsigned,
)
from test_mcp_server_helpers import free_port

pytestmark = pytest.mark.slow

TOOLS = textwrap.dedent(
    '''\
    """Tools that record every run, so a refused call can be shown not to have run."""

    import os
    from pathlib import Path

    from toolgate import tool


    def _ran(what: str) -> None:
        with Path(os.environ["OAUTH_TEST_RUNS"]).open("a", encoding="utf-8") as runs:
            runs.write(what + "\\n")


    @tool(namespace="t", effect="read_only", title="Record a note")
    def record(note: str) -> str:
        """Record a note (each run appends a line to the runs file)."""
        _ran(f"t:{note}")
        return f"recorded {note}"


    @tool(namespace="ops", effect="read_only", title="Operations status")
    def status() -> str:
        """Report that operations are fine (and record the run)."""
        _ran("ops")
        return "ops ok"
    '''
)

ADMIN_KEY = "admin-key-for-the-oauth-tests"
SCOPES = {"tools.t": ["t"], "tools.ops": ["ops"], "tools.all": ["*"], "tools.admin": ["*"]}


@dataclass
class Toolgate:
    """A running ``toolgate serve`` and what the tests look at."""

    url: str
    runs_file: Path
    process: subprocess.Popen[str]

    def runs(self) -> list[str]:
        if not self.runs_file.exists():
            return []
        return self.runs_file.read_text(encoding="utf-8").splitlines()

    @property
    def mcp(self) -> str:
        return self.url + "/mcp"


def _write_config(folder: Path, port: int, auth: dict[str, Any]) -> Path:
    (folder / "oauth_tools.py").write_text(TOOLS, encoding="utf-8")
    config = {
        "python": ["./oauth_tools.py"],
        "agents": {
            "admin": {
                "labels": {"role": "operator"},
                "key_sha256": hashlib.sha256(ADMIN_KEY.encode()).hexdigest(),
            }
        },
        "auth": {"resource": f"http://127.0.0.1:{port}", **auth},
    }
    path = folder / "toolgate.yaml"
    path.write_text(json.dumps(config, indent=2), encoding="utf-8")  # JSON is YAML
    return path


def _start(folder: Path, auth: dict[str, Any]) -> Toolgate:
    """``toolgate serve`` with ``auth`` (its ``resource`` is the port it listens on)."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = _write_config(folder, port, auth)
    runs_file = folder / "runs.txt"
    env = {**os.environ, "TOOLGATE_HOME": str(folder / "home"), "OAUTH_TEST_RUNS": str(runs_file)}
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "toolgate"),
            *("serve", "--port", str(port), "--config", str(config)),
        ],
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
                assert json.load(response)["status"] == "ok"
            break
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                output = process.stdout.read() if process.stdout else ""
                process.kill()
                raise RuntimeError(f"toolgate serve did not start:\n{output}") from None
            time.sleep(0.2)
    return Toolgate(url, runs_file, process)


def _stop(running: Toolgate) -> None:
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(30) == 0


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthorizationServer]:
    with authorization_server() as server:
        yield server


@pytest.fixture(scope="module")
def toolgate(
    issuer: AuthorizationServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Toolgate]:
    running = _start(
        tmp_path_factory.mktemp("oauth"),
        # Refetch at once for an unknown key id, so the rotation test does not wait.
        {
            "issuer": issuer.url,
            "scopes": SCOPES,
            "operator_scope": "tools.admin",
            "jwks_refetch_seconds": 1,
        },
    )
    try:
        yield running
    finally:
        _stop(running)


# -- requests ------------------------------------------------------------------------------------


def _api_call(toolgate: Toolgate, token: str, note: str = "x") -> httpx2.Response:
    return httpx2.post(
        f"{toolgate.url}/v1/tools/t:record/call",
        json={"arguments": {"note": note}},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )


#: The 2026-07-28 per-request envelope: no session needed.
MCP_VERSION = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _mcp_post(toolgate: Toolgate, token: str, method: str, params: dict[str, Any]) -> Any:
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MCP_VERSION,
        "Mcp-Method": method,
    }
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    return httpx2.post(
        toolgate.mcp,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": {**params, "_meta": dict(ENVELOPE)},
        },
        headers=headers,
        timeout=30,
    )


def _mcp_call(toolgate: Toolgate, token: str, note: str = "x") -> httpx2.Response:
    return _mcp_post(
        toolgate, token, "tools/call", {"name": "t__record", "arguments": {"note": note}}
    )


def _challenge(response: httpx2.Response) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer k="v", …`` header."""
    header = response.headers["www-authenticate"]
    scheme, _, rest = header.partition(" ")
    assert scheme == "Bearer", header
    found: dict[str, str] = {}
    for part in rest.split('", '):
        name, _, value = part.partition("=")
        found[name.strip()] = value.strip().strip('"')
    return found


def _good(
    issuer: AuthorizationServer, toolgate: Toolgate, scope: str = "tools.t"
) -> dict[str, Any]:
    return issuer.claims(toolgate.url + "/mcp", scope)


# -- discovery -----------------------------------------------------------------------------------


def test_protected_resource_metadata_names_the_issuer_and_scopes(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    root = httpx2.get(toolgate.url + "/.well-known/oauth-protected-resource", timeout=30)
    mcp = httpx2.get(toolgate.url + "/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert root.status_code == mcp.status_code == 200
    assert root.json()["resource"] == toolgate.url
    assert mcp.json()["resource"] == toolgate.url + "/mcp"
    for document in (root.json(), mcp.json()):
        assert document["authorization_servers"] == [issuer.url]
        assert document["scopes_supported"] == sorted(SCOPES)
        assert document["bearer_methods_supported"] == ["header"]


def test_a_request_without_credentials_gets_the_challenge(toolgate: Toolgate) -> None:
    api = httpx2.get(toolgate.url + "/v1/tools", timeout=30)
    assert api.status_code == 401
    assert api.headers["content-type"] == "application/problem+json"
    assert _challenge(api)["resource_metadata"] == (
        toolgate.url + "/.well-known/oauth-protected-resource"
    )
    mcp = httpx2.post(
        toolgate.mcp,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"Accept": "application/json, text/event-stream"},
        timeout=30,
    )
    assert mcp.status_code == 401
    challenge = _challenge(mcp)
    assert challenge["resource_metadata"] == (
        toolgate.url + "/.well-known/oauth-protected-resource/mcp"
    )
    assert challenge["scope"] == "tools.admin tools.all tools.ops tools.t"


# -- the official MCP client ---------------------------------------------------------------------


class _Storage:
    """Tokens and the client registration, in memory (the SDK's ``TokenStorage``)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def _oauth_client(server_url: str) -> tuple[OAuthClientProvider, _Storage]:
    """The SDK's OAuth provider, with a "browser" that follows /authorize to its redirect."""
    storage = _Storage()
    answers: list[AuthorizationCodeResult] = []

    async def open_browser(authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=30) as browser:
            response = await browser.get(authorization_url)
        assert response.status_code == 302, response.text
        query = parse_qs(urlsplit(response.headers["location"]).query)
        answers.append(
            AuthorizationCodeResult(
                code=query["code"][0], state=query["state"][0], iss=query["iss"][0]
            )
        )

    async def redirected() -> AuthorizationCodeResult:
        return answers.pop()

    provider = OAuthClientProvider(
        server_url=server_url,
        client_metadata=OAuthClientMetadata(
            client_name="toolgate OAuth test",
            redirect_uris=["http://127.0.0.1:9/callback"],
            grant_types=["authorization_code"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=open_browser,
        callback_handler=redirected,
    )
    return provider, storage


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_mcp_client_authorizes_and_calls_a_tool(
    issuer: AuthorizationServer, toolgate: Toolgate, mode: str
) -> None:
    provider, storage = _oauth_client(toolgate.mcp)
    before = toolgate.runs()
    http = httpx2.AsyncClient(auth=provider, timeout=60)
    async with Client(streamable_http_client(toolgate.mcp, http_client=http), mode=mode) as mcp:
        names = {tool.name for tool in (await mcp.list_tools()).tools}
        result = await mcp.call_tool("t__record", {"note": f"via-{mode}"})
    assert {"t__record", "ops__status"} <= names
    assert not result.is_error
    assert toolgate.runs() == [*before, f"t:via-{mode}"]
    # The flow really ran: a registered client, and a token for this MCP endpoint.
    assert storage.client is not None and storage.client.client_id in issuer.clients
    assert storage.tokens is not None
    claims = issuer.issued[-1]
    assert claims["aud"] == toolgate.mcp
    assert claims["client_id"] == storage.client.client_id
    assert set(claims["scope"].split()) == set(SCOPES)


def test_the_token_names_the_agent(issuer: AuthorizationServer, toolgate: Toolgate) -> None:
    token = issuer.mint(_good(issuer, toolgate, "tools.t tools.ops"))
    me = httpx2.get(
        toolgate.url + "/v1/me", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    assert me.status_code == 200
    assert me.json()["agent"] == "alice" and me.json()["operator"] is False


def test_a_token_is_an_operator_by_the_operator_scope_only(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    def me(scope: str, subject: str) -> dict[str, Any]:
        token = issuer.mint(_good(issuer, toolgate, scope) | {"sub": subject})
        headers = {"Authorization": f"Bearer {token}"}
        return httpx2.get(toolgate.url + "/v1/me", headers=headers, timeout=30).json()

    # The name of a configured operator (admin, role: operator, an API key's agent) is not
    # enough: a token may not even be that agent...
    admin_token = issuer.mint(_good(issuer, toolgate, "tools.all") | {"sub": "admin"})
    for path in ("/v1/me", "/v1/audit"):
        refused = httpx2.get(
            toolgate.url + path, headers={"Authorization": f"Bearer {admin_token}"}, timeout=30
        )
        assert refused.status_code == 401 and "invalid_token" in refused.headers["www-authenticate"]
    # ...the operator scope is, whoever the token names; restricted to namespaces it is not.
    assert me("tools.admin", "alice")["operator"] is True
    assert me("tools.admin tools.t", "alice")["operator"] is True
    assert me("tools.t", "alice")["operator"] is False


def test_api_keys_keep_working_beside_oauth(toolgate: Toolgate) -> None:
    before = toolgate.runs()
    called = _api_call(toolgate, ADMIN_KEY, "by-key")
    assert called.status_code == 200 and called.json()["status"] == "ok"
    me = httpx2.get(
        toolgate.url + "/v1/me", headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    )
    assert me.json()["agent"] == "admin" and me.json()["operator"] is True
    assert toolgate.runs() == [*before, "t:by-key"]
    refused = _api_call(toolgate, "not-a-key")
    assert refused.status_code == 401


# -- attacks -------------------------------------------------------------------------------------


def _expired(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    now = int(time.time())
    return issuer.mint({**_good(issuer, toolgate), "iat": now - 900, "exp": now - 600})


def _not_yet_valid(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    return issuer.mint({**_good(issuer, toolgate), "nbf": int(time.time()) + 600})


def _wrong_audience(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    return issuer.mint({**_good(issuer, toolgate), "aud": "account"})


def _another_resource(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    # A token the same issuer made for another MCP server the user also uses.
    return issuer.mint({**_good(issuer, toolgate), "aud": "http://127.0.0.1:1/mcp"})


def _wrong_issuer(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    return issuer.mint({**_good(issuer, toolgate), "iss": "http://127.0.0.1:2"})


def _unsigned(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    return unsigned(_good(issuer, toolgate))


def _tampered(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    # A token for namespace "ops" widened to every scope, its signature kept.
    token = issuer.mint(_good(issuer, toolgate, "tools.ops"))
    return tampered(token, scope="tools.t tools.ops")


def _key_confusion(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    return hmac_with_public_key(
        _good(issuer, toolgate), issuer.public_pem(), issuer.signing_key.kid
    )


def _foreign_key(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    from joserfc.jwk import RSAKey

    stranger = RSAKey.generate_key(2048, parameters={"kid": "rsa-1"})  # a known kid, too
    return issuer.mint(_good(issuer, toolgate), key=stranger, alg="RS256")


def _no_agent(issuer: AuthorizationServer, toolgate: Toolgate) -> str:
    claims = _good(issuer, toolgate)
    del claims["sub"]
    return issuer.mint(claims)


ATTACKS: dict[str, Callable[[AuthorizationServer, Toolgate], str]] = {
    "expired": _expired,
    "not yet valid": _not_yet_valid,
    "wrong audience": _wrong_audience,
    "another resource": _another_resource,
    "wrong issuer": _wrong_issuer,
    "unsigned (alg none)": _unsigned,
    "tampered payload": _tampered,
    "HMAC with the public key": _key_confusion,
    "signed by a key the issuer does not publish": _foreign_key,
    "no agent claim": _no_agent,
}


@pytest.mark.parametrize("attack", ATTACKS)
@pytest.mark.parametrize("surface", ["api", "mcp"])
def test_attacks_are_refused_and_run_nothing(
    issuer: AuthorizationServer, toolgate: Toolgate, attack: str, surface: str
) -> None:
    token = ATTACKS[attack](issuer, toolgate)
    before = toolgate.runs()
    response = (_api_call if surface == "api" else _mcp_call)(toolgate, token, "attack")
    assert response.status_code == 401, response.text
    challenge = _challenge(response)
    assert challenge["error"] == "invalid_token"
    assert challenge["resource_metadata"].endswith(
        "/.well-known/oauth-protected-resource" + ("/mcp" if surface == "mcp" else "")
    )
    assert toolgate.runs() == before


def test_a_good_token_runs_the_tool_on_both_surfaces(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    # The attacks' control: the same request with an untouched token runs the tool.
    token = issuer.mint(_good(issuer, toolgate))
    before = toolgate.runs()
    api = _api_call(toolgate, token, "api")
    mcp = _mcp_call(toolgate, token, "mcp")
    assert api.status_code == 200 and api.json()["status"] == "ok", api.text
    assert mcp.status_code == 200 and '"isError":false' in mcp.text.replace(" ", ""), mcp.text
    assert toolgate.runs() == [*before, "t:api", "t:mcp"]


def test_a_scope_that_does_not_allow_the_namespace_hides_and_refuses_the_tool(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    token = issuer.mint(_good(issuer, toolgate, "tools.ops"))
    headers = {"Authorization": f"Bearer {token}"}
    before = toolgate.runs()
    listed = httpx2.get(toolgate.url + "/v1/tools", headers=headers, timeout=30)
    assert [row["id"] for row in listed.json()["tools"]] == ["ops:status"]
    shown = httpx2.get(toolgate.url + "/v1/tools/t:record", headers=headers, timeout=30)
    assert shown.status_code == 404
    api = _api_call(toolgate, token, "out-of-scope")
    assert api.status_code == 200 and api.json()["code"] == "tool_not_found", api.text
    mcp_list = _mcp_post(toolgate, token, "tools/list", {})
    assert "t__record" not in mcp_list.text and "ops__status" in mcp_list.text
    mcp = _mcp_call(toolgate, token, "out-of-scope")
    assert "Unknown tool: t__record" in mcp.text
    assert toolgate.runs() == before
    allowed = httpx2.post(
        toolgate.url + "/v1/tools/ops:status/call", json={}, headers=headers, timeout=30
    )
    assert allowed.json()["status"] == "ok"
    assert toolgate.runs() == [*before, "ops"]


def test_tool_search_shows_a_token_only_the_namespaces_it_may_use(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    headers = {"Authorization": f"Bearer {issuer.mint(_good(issuer, toolgate, 'tools.ops'))}"}
    found = httpx2.get(
        toolgate.url + "/v1/tools/search",
        params={"q": "record a note status"},
        headers=headers,
        timeout=30,
    )
    assert found.status_code == 200, found.text
    assert [row["id"] for row in found.json()["tools"]] == ["ops:status"]


def test_a_token_without_any_mapped_scope_is_insufficient(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    token = issuer.mint(_good(issuer, toolgate, "openid profile"))
    before = toolgate.runs()
    for response in (_api_call(toolgate, token), _mcp_call(toolgate, token)):
        assert response.status_code == 403, response.text
        challenge = _challenge(response)
        assert challenge["error"] == "insufficient_scope"
        assert challenge["scope"] == "tools.admin tools.all tools.ops tools.t"
    assert toolgate.runs() == before


def test_a_rotated_key_is_fetched_and_accepted(
    issuer: AuthorizationServer, toolgate: Toolgate
) -> None:
    first = _api_call(toolgate, issuer.mint(_good(issuer, toolgate)), "before-rotation")
    assert first.json()["status"] == "ok"
    fetched = issuer.jwks_requests
    time.sleep(1.1)  # past the refetch throttle (auth.jwks_refetch_seconds: 1)
    kid = issuer.rotate(kind="EC")
    token = issuer.mint(_good(issuer, toolgate))
    assert json.loads(_segment(token))["kid"] == kid
    after = _api_call(toolgate, token, "after-rotation")
    assert after.status_code == 200 and after.json()["status"] == "ok", after.text
    assert issuer.jwks_requests > fetched  # the new key id made toolgate fetch the keys again
    assert toolgate.runs()[-2:] == ["t:before-rotation", "t:after-rotation"]


def _segment(token: str) -> str:
    import base64

    header = token.split(".")[0]
    return base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)).decode()


def test_unreachable_keys_fail_closed(issuer: AuthorizationServer, tmp_path: Path) -> None:
    dead = free_port()  # nothing listens there
    running = _start(
        tmp_path,
        {"issuer": issuer.url, "jwks_uri": f"http://127.0.0.1:{dead}/jwks", "fetch_timeout": 2},
    )
    try:
        token = issuer.mint(issuer.claims(running.mcp, "tools.t"))
        api = _api_call(running, token)
        mcp = _mcp_call(running, token)
        assert api.status_code == 503, api.text
        assert api.json()["code"] == "unavailable"
        assert "signing keys are unavailable" in api.json()["detail"]
        assert str(dead) not in api.text  # no internal address for whoever sent the token
        assert mcp.status_code == 503, mcp.text
        assert "signing keys are unavailable" in mcp.json()["error"]["message"]
        assert running.runs() == []
        # API keys do not depend on the issuer.
        assert _api_call(running, ADMIN_KEY).json()["status"] == "ok"
    finally:
        _stop(running)
