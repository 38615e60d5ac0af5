"""Attacks by callers on what they may see and use (issue 22): namespace and tool disclosure,
OAuth tokens that are not access tokens, API keys taken for tokens, approved calls run without
the caller's grants, idempotency keys shared across agents.

Each attack goes through the surface an attacker uses — the HTTP API with an API key or a real
signed token (tests/oauth_support.py signs with joserfc), the official MCP SDK client against the
served MCP endpoint, the CLI — and each test checks that the attack fails, that the tool did not
run, and that the gateway keeps serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from joserfc import jwt
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from gateway_support import gateway_with
from http_api_support import GITHUB, live_server
from oauth_support import AuthorizationServer, authorization_server
from toolgate import Gateway, tool
from toolgate._json import digest
from toolgate.config.schema import AuthConfig
from toolgate.model import ApprovalRequest, ApprovalStatus
from toolgate.model.policy import AccessPolicy, PolicyAction, PolicyRule
from toolgate.secrets import MemorySecretStore
from toolgate.serve.app import SubApp, build_app, mcp_authenticator
from toolgate.serve.auth.identity import AgentIdentity, key_sha256
from toolgate.serve.auth.oauth import build_oauth
from toolgate.serve.mcp.http import McpHttp

pytestmark = pytest.mark.slow

#: Every run of a tool, by id (a refused call must leave no trace here).
RUNS: list[str] = []

ALICE_KEY = "tg_alice-attack-key-0123456789abcdefghijklmnopqrstuv"
BOB_KEY = "tg_bob-attack-key-0123456789abcdefghijklmnopqrstuvwx"
OPS_KEY = "tg_ops-attack-key-0123456789abcdefghijklmnopqrstuvwx"
#: A key from toolgate.yaml with two dots in it (keys there may be any string).
CAROL_KEY = "carol.key-with.two-dots-0123456789"
KEYS = {"alice": ALICE_KEY, "bob": BOB_KEY, "ops": OPS_KEY, "carol": CAROL_KEY}
#: The agent the tokens name by default (no API key has it: a token naming one is refused).
TOKEN_AGENT = "tess"

#: What the tokens' ``aud`` names (checked against ``auth.resource``).
RESOURCE = "http://127.0.0.1:8470"
SCOPES = {"tools.alpha": ["alpha"], "tools.beta": ["beta"], "tools.all": ["*"]}


@tool(namespace="alpha", effect="read_only")
def lookup(item: str) -> str:
    """Look an item up."""
    RUNS.append("alpha:lookup")
    return f"found {item}"


@tool(namespace="alpha", effect="read_only", allowed_agents=["alice", "ops"])
def payroll() -> dict[str, int]:
    """Only alice and ops may see this."""
    RUNS.append("alpha:payroll")
    return {"total": 42}


@tool(namespace="beta", effect="read_only")
def bsecret() -> str:
    """Only tokens granted the beta namespace may see this."""
    RUNS.append("beta:bsecret")
    return "the beta secret"


@tool(namespace="alpha", effect="local_write", idempotency_key="{{ args.ref }}")
def charge(ref: str, amount: int) -> dict[str, Any]:
    """Charge an amount once per reference (the key)."""
    RUNS.append(f"alpha:charge {ref} {amount}")
    return {"ref": ref, "charged": amount, "run": len(RUNS)}


@tool(namespace="beta", effect="external_write", approval=True)
def transfer(amount: int) -> dict[str, int]:
    """Move money (a person approves every call)."""
    RUNS.append(f"beta:transfer {amount}")
    return {"moved": amount}


def _auth(**settings: Any) -> AuthConfig:
    return AuthConfig.model_validate(
        {"resource": RESOURCE, "scopes": SCOPES, "operator_scope": "tools.admin", **settings}
    )


class Served:
    """The gateway behind ``toolgate serve``'s app (HTTP API + MCP), with OAuth and API keys."""

    def __init__(self, url: str, gateway: Gateway) -> None:
        self.url = url
        self.gateway = gateway

    def post(self, path: str, credential: str, body: Any = None) -> httpx2.Response:
        return httpx2.post(
            self.url + path,
            json={} if body is None else body,
            headers={"Authorization": f"Bearer {credential}"},
            timeout=60,
        )

    def get(self, path: str, credential: str) -> httpx2.Response:
        return httpx2.get(
            self.url + path, headers={"Authorization": f"Bearer {credential}"}, timeout=60
        )

    def call(self, credential: str, tool_id: str, **arguments: Any) -> httpx2.Response:
        return self.post(f"/v1/tools/{tool_id}/call", credential, {"arguments": arguments})

    def mcp(self, credential: str) -> Client:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"}, timeout=60)
        return Client(streamable_http_client(self.url + "/mcp", http_client=http))


@contextmanager
def serving(folder: Path, issuer: AuthorizationServer, **auth: Any) -> Iterator[Served]:
    """The tools, the GitHub capability (its guide is in the agents' instructions), API keys
    for alice, bob, carol and ops (an operator), and ``auth:`` trusting ``issuer``."""
    folder.mkdir(parents=True, exist_ok=True)
    gateway = gateway_with(
        state_path=folder / "state.db",
        audit_path=folder / "audit.db",
        approver="queue",
        secret_store=MemorySecretStore(),
        environ={},
    )
    gateway.add([lookup, payroll, bsecret, charge, transfer])
    gateway.add_source(GITHUB)
    identity = AgentIdentity(
        labels={"ops": {"role": "operator"}},
        config_keys={name: key_sha256(key) for name, key in KEYS.items()},
    )
    oauth = build_oauth(_auth(issuer=issuer.url, **auth), identity)
    mcp = McpHttp(gateway, authenticate=mcp_authenticator(oauth.callers.identify, oauth.metadata))
    app = build_app(
        gateway,
        authenticate=identity.authenticate,
        is_operator=identity.is_operator,
        mcp=SubApp(mcp.app, mcp.lifespan),
        identify=oauth.callers.identify,
        resource_metadata=oauth.metadata,
    )
    try:
        with live_server(app) as server:
            yield Served(server.url, gateway)
    finally:
        gateway.close()


@pytest.fixture(scope="module")
def issuer() -> Iterator[AuthorizationServer]:
    with authorization_server() as server:
        yield server


@pytest.fixture(scope="module")
def served(
    issuer: AuthorizationServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("attack-callers"), issuer) as running:
        yield running


def token(
    issuer: AuthorizationServer,
    scope: str = "tools.alpha",
    *,
    header_typ: str | None = "at+jwt",
    **claims: Any,
) -> str:
    """A token the issuer really signed, for ``RESOURCE``, with this header ``typ`` (``None``:
    none) and claims (``sub`` names the agent; ``TOKEN_AGENT`` by default: a token may not name
    an API key's agent)."""
    claims.setdefault("sub", TOKEN_AGENT)
    key = issuer.signing_key
    header: dict[str, Any] = {"alg": "RS256", "kid": key.kid}
    if header_typ is not None:
        header["typ"] = header_typ
    return jwt.encode(header, issuer.claims(RESOURCE, scope, **claims), key)


def _keeps_serving(served: Served, credential: str) -> None:
    """The gateway still answers this caller's ordinary call."""
    RUNS.clear()
    ok = served.call(credential, "alpha:lookup", item="x")
    assert ok.status_code == 200 and ok.json()["status"] == "ok", ok.text
    assert RUNS == ["alpha:lookup"]


def _same_answer(hidden: dict[str, Any], missing: dict[str, Any], names: tuple[str, str]) -> None:
    """Two answers that differ only by the tool name asked for (and the call's id)."""

    def shape(body: dict[str, Any], name: str) -> str:
        body = {k: v for k, v in body.items() if k not in ("call_id", "duration", "instance")}
        return json.dumps(body, sort_keys=True).replace(name, "NAME")

    assert shape(hidden, names[0]) == shape(missing, names[1])


# -- a tool the caller may not see does not exist for it ---------------------------------------


def test_calling_a_tool_of_a_namespace_the_token_lacks_answers_as_for_no_tool(
    served: Served, issuer: AuthorizationServer
) -> None:
    alpha = token(issuer, "tools.alpha")
    RUNS.clear()
    hidden = served.call(alpha, "beta:bsecret")
    missing = served.call(alpha, "beta:bsecrex")
    assert hidden.status_code == missing.status_code == 200
    assert hidden.json()["code"] == "tool_not_found", hidden.text
    assert "namespace" not in hidden.text and "beta'" not in hidden.text
    _same_answer(hidden.json(), missing.json(), ("beta:bsecret", "beta:bsecrex"))
    assert RUNS == []
    _keeps_serving(served, alpha)


def test_a_misspelt_tool_suggests_no_tool_the_caller_may_not_see(
    served: Served, issuer: AuthorizationServer
) -> None:
    alpha = token(issuer, "tools.alpha")
    misspelt = served.call(alpha, "alpha:bsecre")
    assert misspelt.json()["code"] == "tool_not_found"
    assert "bsecret" not in misspelt.text, misspelt.text
    # The same misspelling by a token that may see beta is told of it (the control).
    everything = served.call(token(issuer, "tools.all"), "alpha:bsecre")
    assert "beta:bsecret" in everything.json()["message"]
    # GET /v1/tools/{id}: the same 404 for a hidden tool and a missing one, no hidden suggestion.
    shown = served.get("/v1/tools/beta:bsecret", alpha)
    absent = served.get("/v1/tools/beta:bsecrex", alpha)
    assert shown.status_code == absent.status_code == 404
    _same_answer(shown.json(), absent.json(), ("beta:bsecret", "beta:bsecrex"))
    near = served.get("/v1/tools/alpha:bsecre", alpha)
    assert near.status_code == 404 and "bsecret" not in near.text
    # Search and exports list nothing of beta either.
    found = served.get("/v1/tools/search?q=beta+secret", alpha)
    exported = served.get("/v1/export/openai", alpha)
    assert found.status_code == exported.status_code == 200
    assert "bsecret" not in found.text and "bsecret" not in exported.text
    _keeps_serving(served, alpha)


def test_a_tool_the_access_rules_hide_from_an_api_key_answers_as_for_no_tool(
    served: Served,
) -> None:
    RUNS.clear()
    hidden = served.call(BOB_KEY, "alpha:payroll")
    missing = served.call(BOB_KEY, "alpha:payrolx")
    assert hidden.json()["code"] == "tool_not_found", hidden.text
    assert "bob" not in hidden.text and "listed agents" not in hidden.text
    _same_answer(hidden.json(), missing.json(), ("alpha:payroll", "alpha:payrolx"))
    assert "payroll" not in served.call(BOB_KEY, "alpha:payrol").text
    assert served.get("/v1/tools/alpha:payroll", BOB_KEY).status_code == 404
    assert RUNS == []
    # alice may see it, and runs it.
    assert served.call(ALICE_KEY, "alpha:payroll").json()["status"] == "ok"
    _keeps_serving(served, BOB_KEY)


async def test_over_mcp_a_hidden_tool_is_an_unknown_tool_with_no_hidden_suggestion(
    served: Served, issuer: AuthorizationServer
) -> None:
    alpha = token(issuer, "tools.alpha")
    RUNS.clear()
    async with served.mcp(alpha) as client:
        listed = {item.name for item in (await client.list_tools()).tools}
        refused: list[str] = []
        for name in ("beta__bsecret", "beta__bsecrex", "alpha__bsecre"):
            with pytest.raises(MCPError) as raised:
                await client.call_tool(name, {})
            refused.append(raised.value.message)
        called = await client.call_tool("alpha__lookup", {"item": "y"})
    assert "beta__bsecret" not in listed and "alpha__lookup" in listed
    hidden, missing, misspelt = refused
    assert hidden.replace("beta__bsecret", "N") == missing.replace("beta__bsecrex", "N")
    assert "bsecret" not in misspelt.replace("alpha__bsecre", "")
    assert not called.is_error and RUNS == ["alpha:lookup"]


async def test_over_mcp_a_tool_the_access_rules_hide_is_unknown_to_an_api_key(
    served: Served,
) -> None:
    RUNS.clear()
    async with served.mcp(BOB_KEY) as client:
        with pytest.raises(MCPError) as hidden:
            await client.call_tool("alpha__payroll", {})
        with pytest.raises(MCPError) as missing:
            await client.call_tool("alpha__payrolx", {})
        assert not (await client.call_tool("alpha__lookup", {"item": "z"})).is_error
    assert hidden.value.message.replace("payroll", "N") == missing.value.message.replace(
        "payrolx", "N"
    )
    assert RUNS == ["alpha:lookup"]


HIDDEN_TOOLS = """\
from toolgate import tool


@tool(namespace="alpha", effect="read_only", allowed_agents=["alice"])
def payroll() -> str:
    \"\"\"Only alice.\"\"\"
    return "forty-two"
"""


def test_the_cli_calling_a_hidden_tool_as_an_agent_shows_nothing_of_it(
    run_cli: Any, project: Path
) -> None:
    (project / "hidden_tools.py").write_text(HIDDEN_TOOLS, encoding="utf-8")
    (project / "toolgate.yaml").write_text("python:\n  - ./hidden_tools.py\n", encoding="utf-8")
    hidden = run_cli("call", "alpha:payroll", "--agent", "bob", "--args", "{}")
    missing = run_cli("call", "alpha:payrolx", "--agent", "bob", "--args", "{}")
    assert hidden.returncode == missing.returncode == 1
    assert hidden.stdout == missing.stdout == ""
    assert hidden.stderr.replace("payroll", "N") == missing.stderr.replace("payrolx", "N")
    assert "alice" not in hidden.stderr
    allowed = run_cli("call", "alpha:payroll", "--agent", "alice", "--args", "{}")
    assert "forty-two" in allowed.stdout


def test_me_lists_no_capability_guide_of_a_namespace_the_token_lacks(
    served: Served, issuer: AuthorizationServer
) -> None:
    alpha = served.get("/v1/me", token(issuer, "tools.alpha"))
    everything = served.get("/v1/me", token(issuer, "tools.all"))
    assert alpha.status_code == everything.status_code == 200
    assert "github" in everything.json()["instructions"].lower()  # the control
    assert alpha.json()["instructions"] == "", alpha.text


async def test_mcp_instructions_hold_no_guide_of_a_namespace_the_token_lacks(
    served: Served, issuer: AuthorizationServer
) -> None:
    async with served.mcp(token(issuer, "tools.all")) as client:
        assert "github" in (client.instructions or "").lower()  # the control
    async with served.mcp(token(issuer, "tools.alpha")) as client:
        assert "github" not in (client.instructions or "").lower()
        assert not (await client.call_tool("alpha__lookup", {"item": "i"})).is_error


# -- OAuth: only access tokens, API keys as API keys ------------------------------------------


@pytest.mark.parametrize(
    ("typ", "claims"),
    [
        ("JWT", {"nonce": "n-0123", "at_hash": "x4Zk0sQ"}),  # an OpenID Connect ID token
        (None, {"nonce": "n-0123"}),
        (None, {"c_hash": "LDktKdoQak3Pk0cnXxCltA"}),
        ("JWT", {"typ": "ID", "azp": "toolgate"}),  # Keycloak's ID token
        ("logout+jwt", {"events": {"http://schemas.openid.net/event/backchannel-logout": {}}}),
        ("secevent+jwt", {}),
    ],
)
def test_an_id_token_or_another_jwt_with_the_right_audience_is_not_an_access_token(
    served: Served, issuer: AuthorizationServer, typ: str | None, claims: dict[str, Any]
) -> None:
    RUNS.clear()
    not_access = token(issuer, "tools.all", header_typ=typ, **claims)
    api = served.call(not_access, "alpha:lookup", item="x")
    assert api.status_code == 401, api.text
    assert 'error="invalid_token"' in api.headers["www-authenticate"]
    assert served.get("/v1/me", not_access).status_code == 401
    mcp = served.post("/mcp", not_access, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert mcp.status_code == 401
    assert RUNS == []
    # The access token the issuer types (and an untyped one without ID-token claims) still work.
    _keeps_serving(served, token(issuer, "tools.all"))
    _keeps_serving(served, token(issuer, "tools.all", header_typ="JWT"))


def test_with_require_at_jwt_only_a_token_typed_at_jwt_is_accepted(
    issuer: AuthorizationServer, tmp_path: Path
) -> None:
    with serving(tmp_path, issuer, require_at_jwt=True) as strict:
        RUNS.clear()
        for typ in (None, "JWT", "jwt"):
            refused = strict.call(
                token(issuer, "tools.all", header_typ=typ), "alpha:lookup", item="x"
            )
            assert refused.status_code == 401, (typ, refused.text)
            assert "at+jwt" in refused.headers["www-authenticate"]
        assert RUNS == []
        _keeps_serving(strict, token(issuer, "tools.all"))
        _keeps_serving(strict, token(issuer, "tools.all", header_typ="application/at+jwt"))
        _keeps_serving(strict, ALICE_KEY)


async def test_an_api_key_with_two_dots_is_checked_as_an_api_key_not_a_token(
    served: Served,
) -> None:
    assert CAROL_KEY.count(".") == 2
    me = served.get("/v1/me", CAROL_KEY)
    assert me.status_code == 200 and me.json()["agent"] == "carol", me.text
    _keeps_serving(served, CAROL_KEY)
    async with served.mcp(CAROL_KEY) as client:
        assert not (await client.call_tool("alpha__lookup", {"item": "k"})).is_error
    # A wrong key of the same shape is an unknown key, not a token to verify.
    wrong = served.get("/v1/me", CAROL_KEY + "x")
    assert wrong.status_code == 401, wrong.text
    assert "invalid_token" not in wrong.headers.get("www-authenticate", "")
    assert "API key" in wrong.json()["detail"]


# -- idempotency keys belong to the agent that sent them ---------------------------------------


def _charge(send: Any, credential: str, amount: int) -> dict[str, Any]:
    """Charge ``amount`` under the key ``k2`` as the owner of ``credential``; the outcome."""
    response = send(credential, "alpha:charge", ref="k2", amount=amount)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _agents_keep_their_own_keys(send: Any) -> None:
    """Bob and Alice both use the key ``k2``: neither gets the other's outcome or conflict."""
    RUNS.clear()
    bob = _charge(send, BOB_KEY, 1)
    assert bob["status"] == "ok", bob
    assert bob["metadata"]["idempotency"]["replayed"] is False
    # Alice, same key, Bob's very arguments: her own call runs; Bob's outcome is not hers.
    alice = _charge(send, ALICE_KEY, 1)
    assert alice["status"] == "ok", alice
    assert alice["metadata"]["idempotency"] == {"key": "k2", "replayed": False}
    assert RUNS == ["alpha:charge k2 1", "alpha:charge k2 1"]
    assert alice["content"]["run"] == 2 and bob["content"]["run"] == 1
    # Alice, same key, other arguments: a conflict with her own call, never naming Bob's.
    RUNS.clear()
    conflict = _charge(send, ALICE_KEY, 5)
    assert conflict["code"] == "idempotency_conflict", conflict
    assert alice["call_id"] in conflict["message"]
    assert bob["call_id"] not in json.dumps(conflict)
    # Each gets their own outcome back.
    mine = _charge(send, ALICE_KEY, 1)
    assert mine["content"] == alice["content"]
    assert mine["metadata"]["idempotency"]["original_call_id"] == alice["call_id"]
    his = _charge(send, BOB_KEY, 1)
    assert his["content"] == bob["content"]
    assert his["metadata"]["idempotency"]["original_call_id"] == bob["call_id"]
    # Bob's other arguments conflict with his call only.
    assert alice["call_id"] not in json.dumps(_charge(send, BOB_KEY, 7))
    assert RUNS == []


def test_an_idempotency_key_of_one_agent_neither_replays_nor_conflicts_for_another(
    served: Served,
) -> None:
    # SQLite state (the gateway's state_path), through the HTTP API with two agents' keys.
    _agents_keep_their_own_keys(served.call)
    _keeps_serving(served, ALICE_KEY)


def test_on_postgresql_an_idempotency_key_of_one_agent_is_not_another_agents() -> None:
    from fastapi.testclient import TestClient

    from http_api_support import ALICE_KEY as HTTP_ALICE_KEY
    from http_api_support import BOB_KEY as HTTP_BOB_KEY
    from http_api_support import LOCAL, make_app
    from postgres_support import upgraded_database

    pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    from toolgate.stores.postgres_db import PostgresDatabase

    keys = {ALICE_KEY: HTTP_ALICE_KEY, BOB_KEY: HTTP_BOB_KEY}
    with upgraded_database() as url:
        database = PostgresDatabase(url)
        with Gateway(state_database=database) as gateway:
            gateway.add([charge, lookup])
            with TestClient(make_app(gateway), client=LOCAL) as client:

                def send(credential: str, tool_id: str, **arguments: Any) -> Any:
                    return client.post(
                        f"/v1/tools/{tool_id}/call",
                        json={"arguments": arguments},
                        headers={"Authorization": f"Bearer {keys[credential]}"},
                    )

                _agents_keep_their_own_keys(send)
                ok = send(ALICE_KEY, "alpha:lookup", item="x")
                assert ok.json()["status"] == "ok"
        database.close()


# -- an approved call is handed only to a caller that may still see the tool -------------------


def _request_transfer(served: Served, credential: str, amount: int) -> str:
    """Call beta:transfer (it waits for a person); the approval request's id."""
    pending = served.call(credential, "beta:transfer", amount=amount)
    assert pending.status_code == 202, pending.text
    approval_id: str = pending.json()["approval"]["id"]
    return approval_id


def _approve(served: Served, approval_id: str) -> dict[str, Any]:
    decided = served.post(f"/v1/approvals/{approval_id}/decision", OPS_KEY, {"decision": "approve"})
    assert decided.status_code == 200, decided.text
    body: dict[str, Any] = decided.json()
    return body


def test_an_approved_call_is_not_handed_to_a_token_that_lost_the_scope(
    served: Served, issuer: AuthorizationServer
) -> None:
    both = token(issuer, "tools.alpha tools.beta")
    alpha_only = token(issuer, "tools.alpha")
    RUNS.clear()
    approval_id = _request_transfer(served, both, 11)
    assert RUNS == []
    # The request remembers the namespaces its credentials allowed; the run checks them.
    request = served.gateway.approvals.get(approval_id)  # type: ignore[union-attr]
    assert request.namespaces == frozenset({"alpha", "beta"})
    decided = _approve(served, approval_id)
    assert decided["approval"]["status"] == "approved" and decided["outcome"] is None
    assert RUNS == []  # the decision ran nothing: the agent's retry runs it
    # The same agent, its token now without beta: the retry neither runs the approved call nor
    # tells it anything of it, and neither does the lookup — as if the tool did not exist.
    retry = served.call(alpha_only, "beta:transfer", amount=11)
    assert retry.status_code == 200 and retry.json()["code"] == "tool_not_found", retry.text
    assert "moved" not in retry.text and approval_id not in retry.text
    lookup_refused = served.get(f"/v1/approvals/{approval_id}", alpha_only)
    assert lookup_refused.status_code == 404 and "approved" not in lookup_refused.text
    assert RUNS == []
    assert served.gateway.approvals.get(approval_id).status is ApprovalStatus.APPROVED  # type: ignore[union-attr]
    # With the scope, the same agent's retry runs it, once (the control), and follows it.
    ran = served.call(both, "beta:transfer", amount=11)
    assert ran.status_code == 200 and ran.json()["content"] == {"moved": 11}, ran.text
    assert RUNS == ["beta:transfer 11"]
    followed = served.get(f"/v1/approvals/{approval_id}", both)
    assert followed.status_code == 200 and followed.json()["outcome"]["content"] == {"moved": 11}
    # The token without beta still learns nothing of it, now that it ran.
    lookup_refused = served.get(f"/v1/approvals/{approval_id}", alpha_only)
    assert lookup_refused.status_code == 404 and "moved" not in lookup_refused.text
    # Nothing re-runs: the same call asks anew.
    again = served.call(both, "beta:transfer", amount=11)
    assert again.status_code == 202 and again.json()["approval"]["id"] != approval_id
    assert RUNS == ["beta:transfer 11"]
    _keeps_serving(served, alpha_only)


def test_another_caller_retrying_an_approved_call_does_not_get_it(
    served: Served, issuer: AuthorizationServer
) -> None:
    alice = token(issuer, "tools.alpha tools.beta")
    RUNS.clear()
    approval_id = _request_transfer(served, alice, 12)
    _approve(served, approval_id)
    assert RUNS == []  # the decision ran nothing
    # Bob (an API key) and dora (a token naming another agent) make the very same call: each
    # asks for approval of its own; neither runs tess's approved call nor sees her request.
    for other in (BOB_KEY, token(issuer, "tools.all", sub="dora")):
        again = served.call(other, "beta:transfer", amount=12)
        assert again.status_code == 202, again.text
        assert again.json()["approval"]["id"] != approval_id
        assert served.get(f"/v1/approvals/{approval_id}", other).status_code == 404
    assert RUNS == []
    assert served.gateway.approvals.get(approval_id).status is ApprovalStatus.APPROVED  # type: ignore[union-attr]
    # The call is tess's: her own retry runs it, once.
    ran = served.call(alice, "beta:transfer", amount=12)
    assert ran.status_code == 200 and ran.json()["content"] == {"moved": 12}, ran.text
    assert RUNS == ["beta:transfer 12"]
    _keeps_serving(served, BOB_KEY)


def test_running_an_approved_call_is_checked_again_as_the_caller_that_asked(
    tmp_path: Path,
) -> None:
    RUNS.clear()
    with gateway_with(state_path=tmp_path / "state.db", approver="queue") as gateway:
        gateway.add([transfer, lookup])
        service = gateway.approvals
        assert service is not None

        def ask(amount: int, namespaces: frozenset[str] | None) -> ApprovalRequest:
            pending = asyncio.run(
                gateway.call(
                    "beta:transfer", {"amount": amount}, agent="alice", namespaces=namespaces
                )
            )
            assert pending.approval is not None, pending
            return service.get(pending.approval.id)

        scoped = ask(13, frozenset({"beta"}))
        unscoped = ask(14, None)
        # Kept with the request (in the state database), read back as asked.
        assert scoped.namespaces == frozenset({"beta"}) and unscoped.namespaces is None
        # A request whose credentials did not allow the tool's namespace (one written by an
        # older gateway, or tampered with in the database) never runs.
        narrowed = dataclasses.replace(
            scoped,
            id="apr_" + "0" * 32,
            arguments={"amount": 15},
            arguments_digest=digest({"amount": 15}),
            namespaces=frozenset({"alpha"}),
        )
        service.store.create(narrowed)
        service.decide(narrowed.id, "approve", by="ops")
        assert RUNS == []  # the decision ran nothing
        # Run here explicitly, it runs as alice within the namespaces the request holds.
        refused = asyncio.run(service.run(narrowed.id))
        assert refused.code is not None and refused.code.value == "tool_not_found"
        assert RUNS == []
        # The tool is hidden from alice now (a policy added after she asked): nothing runs.
        gateway.access.policies = [
            AccessPolicy(
                name="no-transfers",
                agents=("alice",),
                rules=(PolicyRule(when={"tool.id": ("beta:transfer",)}, action=PolicyAction.DENY),),
            )
        ]
        gateway.pipeline.invalidate()
        for request in (scoped, unscoped):
            service.decide(request.id, "approve", by="ops")
            # Neither alice's retry nor an explicit run here runs the approved call.
            retry = asyncio.run(
                gateway.call(
                    "beta:transfer",
                    dict(request.arguments),
                    agent="alice",
                    namespaces=request.namespaces,
                )
            )
            assert retry.code is not None and retry.code.value == "tool_not_found"
            assert service.get(request.id).status is ApprovalStatus.APPROVED
            outcome = asyncio.run(service.run(request.id))
            assert outcome.code is not None and outcome.code.value == "tool_not_found"
        assert RUNS == []
        assert gateway.call_sync("alpha:lookup", {"item": "still"}, agent="alice").ok


def _stored_request(approval_id: str, namespaces: frozenset[str] | None) -> ApprovalRequest:
    now = time.time()
    return ApprovalRequest(
        id=approval_id,
        tool_id="beta:transfer",
        title="Transfer",
        risk="high",
        facts=(),
        arguments={"amount": 1},
        arguments_digest=digest({"request": approval_id}),
        definition_hash=transfer.tool.definition_hash,
        created_at=now,
        expires_at=now + 300,
        agent="alice",
        namespaces=namespaces,
    )


def test_an_approval_database_from_before_namespaces_upgrades(tmp_path: Path) -> None:
    from toolgate.stores.sqlite_approvals import SQLiteApprovalStore
    from toolgate.stores.sqlite_schema import SCHEMA_VERSION

    path = tmp_path / "state.db"
    with SQLiteApprovalStore(path) as store:
        store.create(_stored_request("apr_old", None))
    # Back to the schema before this change: no namespaces column, version one lower.
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE approvals DROP COLUMN namespaces")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION - 1}")
    conn.commit()
    conn.close()
    with SQLiteApprovalStore(path) as store:
        old = store.get("apr_old")
        store.create(_stored_request("apr_new", frozenset({"beta", "alpha"})))
        new = store.get("apr_new")
    assert old is not None and old.namespaces is None  # made unrestricted, read so
    assert new is not None and new.namespaces == frozenset({"alpha", "beta"})


def test_on_postgresql_approval_namespaces_persist_and_an_older_schema_upgrades() -> None:
    pytest.importorskip("psycopg", reason="toolgate[postgres] is not installed")
    from postgres_support import upgraded_database
    from toolgate.stores.postgres_db import PostgresDatabase
    from toolgate.stores.postgres_schema import SCHEMA_VERSION, upgrade
    from toolgate.stores.sql_approvals import SqlApprovalStore

    assert SCHEMA_VERSION >= 4
    with upgraded_database() as url:
        db = PostgresDatabase(url)
        try:
            store = SqlApprovalStore(db)
            store.create(_stored_request("apr_scoped", frozenset({"beta"})))
            scoped = store.get("apr_scoped")
            assert scoped is not None and scoped.namespaces == frozenset({"beta"})
            # A database at revision 0003 (before the column) with a request in it upgrades.
            with db.write() as conn:
                conn.execute("DELETE FROM approvals")
                conn.execute("ALTER TABLE approvals DROP COLUMN namespaces")
                # What later revisions made goes too, so the database is as 0003 left it.
                conn.execute("DROP TABLE IF EXISTS tool_pins, tool_pins_generation")
                conn.execute("UPDATE alembic_version SET version_num = '0003'")
                conn.execute(
                    "INSERT INTO approvals (id, tool_id, title, risk, facts, arguments, "
                    "arguments_digest, definition_hash, created_at, expires_at, agent, "
                    "permission_type, permission_key, status) VALUES ('apr_old', 'beta:transfer', "
                    "'t', 'high', '[]', '{}', 'd', 'h', 1, 2, 'alice', 'tool', '*', 'pending')"
                )
            assert upgrade(db) == (3, SCHEMA_VERSION)
            old = store.get("apr_old")
            assert old is not None and old.namespaces is None
        finally:
            db.close()
