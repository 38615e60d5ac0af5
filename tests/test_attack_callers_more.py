"""More attacks by callers on what they may see and use (issue 22, found by the review of the
first fixes): a hidden tool told apart from a missing one by the ``Mcp-Param-*`` header check or
by progressive disclosure's suggestions, and a bearer token naming an API key's agent to take
over its idempotent outcomes and approvals.

Each attack goes through the surface an attacker uses — raw 2026-07-28 HTTP POSTs and the
official MCP SDK client against the served MCP endpoint, the HTTP API with an API key or a real
signed token (tests/oauth_support.py) — and each test checks that the attack fails, that no tool
ran for it, and that the gateway keeps serving.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import Field

from gateway_support import gateway_with
from http_api_support import live_server
from oauth_support import AuthorizationServer, authorization_server
from test_attack_callers import RESOURCE, SCOPES, Served, token
from toolgate import tool
from toolgate.config.schema import AuthConfig
from toolgate.secrets import MemorySecretStore
from toolgate.serve.app import SubApp, build_app, mcp_authenticator
from toolgate.serve.auth.identity import AgentIdentity, key_sha256
from toolgate.serve.auth.oauth import build_oauth
from toolgate.serve.mcp.http import McpHttp
from toolgate.stores.agent_keys import AgentKeyStore

pytestmark = pytest.mark.slow

#: Every run of a tool of this module (a refused call must leave no trace here).
RUNS: list[str] = []

ALICE_KEY = "tg_alice-more-attacks-0123456789abcdefghijklmnopqrs"
OPS_KEY = "tg_ops-more-attacks-0123456789abcdefghijklmnopqrstu"
RITA_KEY = "tg_rita-more-attacks-0123456789abcdefghijklmnopqrst"
MODERN = "2026-07-28"

Region = Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]


@tool(namespace="alpha", effect="read_only")
def zone(region: Region) -> str:
    """Alpha's zone (its region is mirrored into the Mcp-Param-Region header)."""
    RUNS.append("alpha:zone")
    return region


@tool(namespace="beta", effect="read_only")
def geo(region: Region) -> str:
    """Beta only: a token limited to alpha must not learn it exists, nor its parameters."""
    RUNS.append("beta:geo")
    return region


@tool(namespace="alpha", effect="read_only")
def payroll_report(item: str) -> str:
    """Produce the payroll report."""
    RUNS.append("alpha:payroll_report")
    return "alpha"


@tool(namespace="beta", effect="read_only")
def payroll_export(item: str) -> str:
    """Export the payroll (beta only)."""
    RUNS.append("beta:payroll_export")
    return "beta"


@tool(namespace="alpha", effect="local_write", idempotency_key="{{ args.ref }}")
def charge(ref: str, amount: int) -> dict[str, Any]:
    """Charge an amount once per reference (the key)."""
    RUNS.append(f"alpha:charge {ref} {amount}")
    return {"ref": ref, "charged": amount, "run": len(RUNS)}


@tool(namespace="alpha", effect="external_write", approval=True)
def transfer(amount: int) -> dict[str, int]:
    """Move money (a person approves every call)."""
    RUNS.append(f"alpha:transfer {amount}")
    return {"moved": amount}


@tool(namespace="alpha", effect="read_only", allowed_agents=["tess"])
def tess_only() -> str:
    """Only the agent tess (a token's agent claim) may see this."""
    RUNS.append("alpha:tess_only")
    return "tess"


@contextmanager
def serving(
    folder: Path,
    issuer: AuthorizationServer,
    tools: list[Any],
    *,
    progressive: bool = False,
    fast_path: bool = True,
    store: AgentKeyStore | None = None,
) -> Iterator[Served]:
    """``toolgate serve``'s app (HTTP API + MCP) over ``tools``, with API keys for alice and ops
    (an operator), the keys of ``store``, and ``auth:`` trusting ``issuer``."""
    folder.mkdir(parents=True, exist_ok=True)
    gateway = gateway_with(
        state_path=folder / "state.db",
        audit_path=folder / "audit.db",
        approver="queue",
        secret_store=MemorySecretStore(),
        environ={},
    )
    gateway.add(tools)
    if progressive:
        gateway.enable_progressive_disclosure(core=())
    identity = AgentIdentity(
        labels={"ops": {"role": "operator"}},
        config_keys={"alice": key_sha256(ALICE_KEY), "ops": key_sha256(OPS_KEY)},
        store=store,
    )
    auth = AuthConfig.model_validate({"resource": RESOURCE, "scopes": SCOPES, "issuer": issuer.url})
    oauth = build_oauth(auth, identity)
    mcp = McpHttp(
        gateway,
        authenticate=mcp_authenticator(oauth.callers.identify, oauth.metadata),
        fast_path=fast_path,
    )
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


def _modern_call(
    served: Served,
    credential: str,
    name: str,
    arguments: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> httpx2.Response:
    """A 2026-07-28 ``tools/call`` POST, as a client of that revision sends it."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": envelope},
    }
    return httpx2.post(
        served.url + "/mcp/",
        json=body,
        headers={
            "Authorization": f"Bearer {credential}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
            **(headers or {}),
        },
        timeout=60,
    )


def _shape(response: httpx2.Response, name: str) -> tuple[int, str]:
    return response.status_code, response.text.replace(name, "NAME")


# -- a hidden tool's existence and parameters do not leak through the Mcp-Param-* check ---------


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast-path", "sdk-only"])
def test_the_mcp_param_header_check_does_not_reveal_a_hidden_tool_or_its_parameters(
    issuer: AuthorizationServer, tmp_path: Path, fast_path: bool
) -> None:
    with serving(tmp_path, issuer, [zone, geo], fast_path=fast_path) as served:
        alpha = token(issuer, "tools.alpha")
        RUNS.clear()
        # Without the header, with a wrong one, with the right one: a hidden tool is answered
        # exactly as a missing one, never "Mcp-Param-Region header is missing/does not match".
        for headers in ({}, {"Mcp-Param-Region": "us"}, {"Mcp-Param-Region": "eu"}):
            hidden = _modern_call(served, alpha, "beta__geo", {"region": "eu"}, headers)
            missing = _modern_call(served, alpha, "beta__gex", {"region": "eu"}, headers)
            assert _shape(hidden, "beta__geo") == _shape(missing, "beta__gex"), hidden.text
            assert "Region" not in hidden.text and "-32020" not in hidden.text
            assert hidden.json()["error"]["code"] == -32602, hidden.text
        assert RUNS == []
        # The check itself still holds for a tool the token may call (the control)...
        unchecked = _modern_call(served, alpha, "alpha__zone", {"region": "eu"})
        assert unchecked.status_code == 400 and "Mcp-Param-Region" in unchecked.text
        assert RUNS == []
        # ...and the gateway keeps serving: with the header, the call runs.
        ok = _modern_call(
            served, alpha, "alpha__zone", {"region": "eu"}, {"Mcp-Param-Region": "eu"}
        )
        assert ok.status_code == 200 and ok.json()["result"]["isError"] is False, ok.text
        assert RUNS == ["alpha:zone"]
        # A token granted beta is checked for beta's headers (the check is per caller).
        both = token(issuer, "tools.alpha tools.beta")
        checked = _modern_call(served, both, "beta__geo", {"region": "eu"})
        assert checked.status_code == 400 and "Mcp-Param-Region" in checked.text


# -- progressive disclosure: one answer for hidden, unshown and missing tools -------------------


def test_under_progressive_disclosure_a_hidden_tool_is_suggested_against_as_a_missing_one(
    issuer: AuthorizationServer, tmp_path: Path
) -> None:
    alpha = token(issuer, "tools.alpha")

    async def attack(served: Served) -> None:
        async with served.mcp(alpha) as client:
            listed = [t.name for t in (await client.list_tools()).tools]
            assert listed == ["toolgate__search_tools"]

            async def refused() -> dict[str, str]:
                messages = {}
                for name in (
                    "beta:payroll_export",  # hidden from the token
                    "gamma:payroll_export",  # missing
                    "beta__payroll_export",
                    "gamma__payroll_export",
                ):
                    with pytest.raises(MCPError) as caught:
                        await client.call_tool(name, {"item": "x"})
                    messages[name] = caught.value.message.replace(name, "NAME")
                return messages

            before = await refused()
            assert len(set(before.values())) == 1, before
            found = await client.call_tool("toolgate__search_tools", {"query": "payroll"})
            assert "payroll_export" not in str(found.content)
            after = await refused()
            # Once the search showed alpha's report, every one of them gets the same
            # suggestion from the session's list: nothing tells the hidden tool apart.
            assert len(set(after.values())) == 1, after
            assert "alpha__payroll_report" in next(iter(after.values()))
            assert "beta" not in json.dumps(list(after.values()))
            assert RUNS == []
            ok = await client.call_tool("alpha__payroll_report", {"item": "x"})
            assert not ok.is_error and RUNS == ["alpha:payroll_report"]

    RUNS.clear()
    with serving(tmp_path, issuer, [payroll_report, payroll_export], progressive=True) as served:
        anyio.run(attack, served)


# -- a token does not become an API key's agent -------------------------------------------------


def _charge(served: Served, credential: str, amount: int) -> httpx2.Response:
    return served.call(credential, "alpha:charge", ref="k9", amount=amount)


def test_a_token_naming_an_api_keys_agent_neither_replays_nor_follows_its_calls(
    issuer: AuthorizationServer, tmp_path: Path
) -> None:
    tools = [charge, transfer, tess_only]
    with serving(tmp_path, issuer, tools) as served:
        RUNS.clear()
        mine = _charge(served, ALICE_KEY, 1)
        assert mine.status_code == 200 and mine.json()["status"] == "ok", mine.text
        pending = served.call(ALICE_KEY, "alpha:transfer", amount=3)
        assert pending.status_code == 202, pending.text
        approval_id = pending.json()["approval"]["id"]
        decided = served.post(
            f"/v1/approvals/{approval_id}/decision", OPS_KEY, {"decision": "approve"}
        )
        assert decided.status_code == 200 and RUNS == ["alpha:charge k9 1"]  # recorded only
        # A token whose sub is "alice": the agent of an API key. It is refused everywhere, so
        # it neither replays alice's stored outcome, nor conflicts with it, nor follows or
        # retries (runs) her approved call.
        impostor = token(issuer, "tools.all", sub="alice")

        def refused_everywhere() -> None:
            for response in (
                _charge(served, impostor, 1),
                _charge(served, impostor, 5),
                served.get(f"/v1/approvals/{approval_id}", impostor),
                served.call(impostor, "alpha:transfer", amount=3),
                served.get("/v1/me", impostor),
                _modern_call(served, impostor, "alpha__charge", {"ref": "k9", "amount": 1}),
            ):
                assert response.status_code == 401, response.text
                assert 'error="invalid_token"' in response.headers["www-authenticate"]
                assert "charged" not in response.text and "moved" not in response.text

        refused_everywhere()
        assert RUNS == ["alpha:charge k9 1"]
        # Alice's own retry (her key) runs the approved call, once; the impostor still
        # neither follows its outcome nor runs it again.
        ran = served.call(ALICE_KEY, "alpha:transfer", amount=3)
        assert ran.status_code == 200 and ran.json()["status"] == "ok", ran.text
        assert RUNS == ["alpha:charge k9 1", "alpha:transfer 3"]
        refused_everywhere()
        assert RUNS == ["alpha:charge k9 1", "alpha:transfer 3"]
        # A token naming an agent without a key is that agent: a rule naming it applies
        # (documented), and the key's idempotent outcome is not its own.
        tess = token(issuer, "tools.all", sub="tess")
        assert served.call(tess, "alpha:tess_only").json()["status"] == "ok"
        fresh = _charge(served, tess, 1).json()
        assert fresh["status"] == "ok" and fresh["metadata"]["idempotency"]["replayed"] is False
        assert fresh["call_id"] != mine.json()["call_id"]
        assert served.get(f"/v1/approvals/{approval_id}", tess).status_code == 404
        # The key keeps its own outcome, and keeps being served.
        again = _charge(served, ALICE_KEY, 1).json()
        assert again["metadata"]["idempotency"]["original_call_id"] == mine.json()["call_id"]
        assert served.call(ALICE_KEY, "alpha:charge", ref="k10", amount=2).json()["status"] == "ok"


def test_a_token_cannot_take_over_a_revoked_keys_agent_and_its_outcomes(
    issuer: AuthorizationServer, tmp_path: Path
) -> None:
    with AgentKeyStore(tmp_path / "toolgate.db") as store:
        store.add("rita", key_sha256(RITA_KEY), now=time.time())
        with serving(tmp_path / "serve", issuer, [charge], store=store) as served:
            RUNS.clear()
            hers = served.call(RITA_KEY, "alpha:charge", ref="k11", amount=1)
            assert hers.json()["status"] == "ok", hers.text
            # The key is revoked (toolgate agents revoke): its outcomes stay in the state
            # database for the idempotency window. A token naming rita must not collect them.
            store.revoke("rita", now=time.time())
            assert served.call(RITA_KEY, "alpha:charge", ref="k11", amount=1).status_code == 401
            impostor = token(issuer, "tools.alpha", sub="rita")
            taken = served.call(impostor, "alpha:charge", ref="k11", amount=1)
            assert taken.status_code == 401 and "charged" not in taken.text, taken.text
            assert RUNS == ["alpha:charge k11 1"]
            ok = served.call(ALICE_KEY, "alpha:charge", ref="k12", amount=1)
            assert ok.json()["status"] == "ok"
