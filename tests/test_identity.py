"""Agent identity: API keys (stored hashed), the default agent, operators, safe binding, and the
``toolgate agents`` commands."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from conftest import RunCli
from toolgate.config import parse_config
from toolgate.errors import ConfigError
from toolgate.serve.auth.identity import (
    DEFAULT_AGENT,
    AgentIdentity,
    AuthenticationError,
    UnsafeBindError,
    check_bind,
    fingerprint,
    is_loopback_address,
    is_loopback_host,
    key_sha256,
    new_key,
)
from toolgate.stores.agent_keys import AgentKeyExistsError, AgentKeyStore


@dataclass
class Peer:
    """What ``authenticate`` reads of a request: its headers and its client address."""

    headers: dict[str, str] = field(default_factory=dict)
    host: str | None = "127.0.0.1"

    @property
    def client(self) -> Any:
        return None if self.host is None else SimpleNamespace(host=self.host, port=50000)


def bearer(key: str, host: str = "127.0.0.1") -> Peer:
    return Peer({"authorization": f"Bearer {key}"}, host)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with AgentKeyStore(tmp_path / "toolgate.db") as keys:
        yield keys


# -- keys -----------------------------------------------------------------------------------------


def test_new_keys_are_random_prefixed_and_stored_as_hashes() -> None:
    keys = {new_key() for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert key.startswith("tg_") and len(key) >= 40
        digest = key_sha256(key)
        assert re.fullmatch(r"[0-9a-f]{64}", digest)
        assert key not in digest
        assert fingerprint(digest) == "sha256:" + digest[:12]


def test_the_key_store_keeps_hashes_rotates_and_revokes(tmp_path: Path) -> None:
    path = tmp_path / "toolgate.db"
    key = new_key()
    with AgentKeyStore(path) as store:
        start = store.generation()
        added, replaced = store.add("ci-bot", key_sha256(key), now=100.0)
        assert replaced is None
        assert store.generation() != start
        with pytest.raises(AgentKeyExistsError, match="--replace"):
            store.add("ci-bot", key_sha256(new_key()), now=101.0)
        rotated, old = store.add("ci-bot", key_sha256(new_key()), now=102.0, replace=True)
        assert old is not None and old.id == added.id
        assert [k.id for k in store.list_keys()] == [rotated.id]
        assert len(store.list_keys(include_revoked=True)) == 2
    # Another process (a new connection) sees the same keys, and nothing but hashes is kept.
    with AgentKeyStore(path) as again:
        assert [k.agent for k in again.list_keys()] == ["ci-bot"]
        revoked = again.revoke("ci-bot", now=103.0)
        assert [k.revoked_at for k in revoked] == [103.0]
        assert again.list_keys() == []
        assert again.revoke("ci-bot", now=104.0) == []
    dump = "\n".join(sqlite3.connect(path).iterdump())
    assert key not in dump


@pytest.mark.parametrize("name", ["", "../x", "a b", "-dash", "x" * 65, "ü"])
def test_the_key_store_refuses_unusable_names(store: AgentKeyStore, name: str) -> None:
    with pytest.raises(ValueError, match="agent name"):
        store.add(name, key_sha256(new_key()), now=1.0)


# -- authenticating -------------------------------------------------------------------------------


def test_without_keys_every_loopback_caller_is_the_default_agent() -> None:
    identity = AgentIdentity()
    assert not identity.keys_configured
    assert identity.authenticate(Peer()) == DEFAULT_AGENT
    assert identity.authenticate(Peer(host="::1")) == DEFAULT_AGENT
    assert identity.is_operator(DEFAULT_AGENT)


@pytest.mark.parametrize("host", ["10.0.0.7", "192.168.1.2", "testclient", None])
def test_without_keys_other_clients_are_refused(host: str | None) -> None:
    with pytest.raises(AuthenticationError, match="same machine"):
        AgentIdentity().authenticate(Peer(host=host))


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "127.0.0.1:8470"},
        {"host": "localhost:8470", "origin": "http://localhost:8470"},
        {"host": "[::1]:8470", "origin": "http://[::1]:8470", "sec-fetch-site": "same-origin"},
        {"host": "LOCALHOST", "origin": "http://127.0.0.1:3000"},
    ],
)
def test_without_keys_local_programs_and_local_pages_are_answered(
    headers: dict[str, str],
) -> None:
    assert AgentIdentity().authenticate(Peer(headers)) == DEFAULT_AGENT


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        ({"host": "evil.example:8470"}, "DNS-rebinding"),
        ({"host": "["}, "DNS-rebinding"),
        ({"host": "127.0.0.1:8470", "origin": "https://evil.example"}, "other sites"),
        ({"host": "127.0.0.1:8470", "origin": "null"}, "other sites"),
        ({"host": "127.0.0.1:8470", "sec-fetch-site": "cross-site"}, "other sites"),
    ],
)
def test_without_keys_pages_of_other_sites_are_refused(
    headers: dict[str, str], reason: str
) -> None:
    # The user's browser is a loopback client: a page elsewhere must not use it to reach us.
    with pytest.raises(AuthenticationError, match=reason):
        AgentIdentity().authenticate(Peer(headers))


def test_with_keys_the_key_is_what_counts() -> None:
    key = new_key()
    identity = AgentIdentity(config_keys={"bot": key_sha256(key)})
    remote = Peer({"authorization": f"Bearer {key}", "host": "gateway.example:8470"}, "10.2.3.4")
    assert identity.authenticate(remote) == "bot"


def test_without_keys_a_presented_key_is_still_checked() -> None:
    # A revoked key must not silently keep working as the default agent.
    with pytest.raises(AuthenticationError, match="not valid"):
        AgentIdentity().authenticate(bearer(new_key()))


def test_configured_keys_identify_agents_and_everything_else_is_refused() -> None:
    alice, bob = new_key(), new_key()
    identity = AgentIdentity(
        labels={"alice": {"role": "operator"}, "bob": {"team": "interns"}},
        config_keys={"alice": key_sha256(alice), "bob": key_sha256(bob)},
    )
    assert identity.keys_configured
    assert identity.authenticate(bearer(alice)) == "alice"
    assert identity.authenticate(bearer(bob, host="10.1.2.3")) == "bob"
    assert identity.authenticate(Peer({"authorization": f"bearer   {bob}  "})) == "bob"
    for peer, reason in [
        (Peer(), "requires an API key"),
        (Peer({"authorization": f"Basic {alice}"}), "Bearer <key>"),
        (Peer({"authorization": "Bearer"}), "Bearer <key>"),
        (bearer(alice + "x"), "not valid"),
        (bearer("x" * 10_000), "not valid"),
        (bearer("tg_\x01"), "not valid"),
    ]:
        with pytest.raises(AuthenticationError, match=reason):
            identity.authenticate(peer)
    assert identity.is_operator("alice")
    assert not identity.is_operator("bob")
    assert not identity.is_operator(DEFAULT_AGENT)  # keys exist: nobody is "default" any more
    assert identity.agents() == ["alice", "bob"]


def test_stored_keys_take_effect_and_are_revoked_at_the_next_request(
    store: AgentKeyStore,
) -> None:
    identity = AgentIdentity(store=store)
    assert identity.authenticate(Peer()) == DEFAULT_AGENT
    key = new_key()
    store.add("ci-bot", key_sha256(key), now=1.0)
    assert identity.authenticate(bearer(key)) == "ci-bot"
    with pytest.raises(AuthenticationError):
        identity.authenticate(Peer())  # keys exist now: the default agent is gone
    store.revoke("ci-bot", now=2.0)
    with pytest.raises(AuthenticationError, match="not valid"):
        identity.authenticate(bearer(key))


def test_a_server_that_requires_keys_fails_closed_when_none_are_left(
    store: AgentKeyStore,
) -> None:
    key = new_key()
    store.add("ci-bot", key_sha256(key), now=1.0)
    identity = AgentIdentity(store=store)
    assert check_bind("0.0.0.0", identity) is False
    assert identity.require_keys
    store.revoke("ci-bot", now=2.0)
    with pytest.raises(AuthenticationError, match="requires an API key"):
        identity.authenticate(Peer())
    assert not identity.is_operator(DEFAULT_AGENT)


# -- binding --------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"])
def test_loopback_hosts_need_no_keys(host: str) -> None:
    assert is_loopback_host(host)
    identity = AgentIdentity()
    assert check_bind(host, identity) is True
    assert not identity.require_keys


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "192.168.0.10"])
def test_other_addresses_without_keys_are_refused(host: str) -> None:
    assert not is_loopback_host(host)
    with pytest.raises(UnsafeBindError, match="no agent keys") as caught:
        check_bind(host, AgentIdentity())
    assert isinstance(caught.value, ConfigError)  # the CLI exits 3 with this message
    assert "toolgate agents add" in caught.value.message


def test_loopback_addresses() -> None:
    assert is_loopback_address("::ffff:127.0.0.1")
    assert not is_loopback_address("::ffff:10.0.0.1")
    assert not is_loopback_address("")
    assert not is_loopback_address("localhost")  # clients are addresses, not names


# -- configuration --------------------------------------------------------------------------------


def test_agents_may_carry_a_key_hash_in_toolgate_yaml() -> None:
    digest = key_sha256(new_key())
    config = parse_config(
        "agents:\n  ops:\n    labels: {role: operator}\n"
        f"    key_sha256: SHA256:{digest.upper()}\n"
    )
    assert config.agents["ops"].key_sha256 == digest
    assert config.agents["ops"].operator
    with pytest.raises(ConfigError, match=r"agents\.ops\.key_sha256: .*64 hex digits"):
        parse_config("agents:\n  ops:\n    key_sha256: tg_not-a-hash\n")


def test_the_serve_section_is_checked() -> None:
    config = parse_config("serve:\n  host: 127.0.0.1\n  port: 0\n  max_body_bytes: 4096\n")
    assert (config.serve.port, config.serve.max_body_bytes) == (0, 4096)
    with pytest.raises(ConfigError, match=r"serve\.port"):
        parse_config("serve:\n  port: 70000\n")
    with pytest.raises(ConfigError, match=r"serve\.hots: unknown key"):
        parse_config("serve:\n  hots: 0.0.0.0\n")


# -- the agents commands --------------------------------------------------------------------------


@pytest.mark.slow
def test_agents_add_prints_the_key_once_and_stores_only_its_hash(
    run_cli: RunCli, toolgate_home: Path
) -> None:
    added = run_cli("agents", "add", "ci-bot")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    assert re.fullmatch(r"tg_[A-Za-z0-9_-]{40,}", key), added.stdout
    assert "not shown again" in added.stderr and "role: operator" in added.stderr
    digest = key_sha256(key)
    assert fingerprint(digest) in added.stderr

    listed = run_cli("agents", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [row["name"] for row in rows] == ["ci-bot"]
    assert rows[0]["keys"][0]["fingerprint"] == fingerprint(digest)
    assert rows[0]["keys"][0]["source"] == "store"
    assert key not in listed.stdout
    table = run_cli("agents", "list")
    assert "ci-bot" in table.stdout and fingerprint(digest) in table.stdout
    assert key not in table.stdout

    with AgentKeyStore(toolgate_home / "toolgate.db") as store:
        assert [k.key_sha256 for k in store.list_keys()] == [digest]
    dump = "\n".join(sqlite3.connect(toolgate_home / "toolgate.db").iterdump())
    assert key not in dump


@pytest.mark.slow
def test_agents_add_twice_needs_replace_and_revoke_ends_it(run_cli: RunCli) -> None:
    first = run_cli("agents", "add", "ci-bot").stdout.strip()
    again = run_cli("agents", "add", "ci-bot")
    assert again.returncode == 1
    assert "--replace" in again.stderr
    rotated = run_cli("agents", "add", "ci-bot", "--replace")
    assert rotated.returncode == 0, rotated.stderr
    assert rotated.stdout.strip() != first
    assert "replacing " + fingerprint(key_sha256(first)) in rotated.stderr

    revoked = run_cli("agents", "revoke", "ci-bot")
    assert revoked.returncode == 0, revoked.stderr
    assert fingerprint(key_sha256(rotated.stdout.strip())) in revoked.stdout
    assert json.loads(run_cli("agents", "list", "--json").stdout) == []
    twice = run_cli("agents", "revoke", "ci-bot")
    assert twice.returncode == 1
    assert "no key" in twice.stderr


@pytest.mark.slow
def test_agents_add_refuses_a_bad_name(run_cli: RunCli) -> None:
    result = run_cli("agents", "add", "../etc")
    assert result.returncode == 2
    assert "agent name" in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_agents_list_merges_toolgate_yaml_and_the_store(run_cli: RunCli, project: Path) -> None:
    digest = key_sha256(new_key())
    (project / "toolgate.yaml").write_text(
        "agents:\n"
        "  ops:\n    labels: {role: operator}\n"
        f"  reader:\n    labels: {{team: docs}}\n    key_sha256: {digest}\n"
    )
    assert run_cli("agents", "add", "ops").returncode == 0
    rows = {row["name"]: row for row in json.loads(run_cli("agents", "list", "--json").stdout)}
    assert rows["ops"]["operator"] is True
    assert rows["ops"]["keys"][0]["source"] == "store"
    assert rows["reader"]["operator"] is False
    assert rows["reader"]["keys"] == [
        {"fingerprint": fingerprint(digest), "source": "toolgate.yaml", "created_at": None}
    ]
    # A key kept in toolgate.yaml is removed there, not by revoke.
    result = run_cli("agents", "revoke", "reader")
    assert result.returncode == 1
    assert "agents.reader.key_sha256" in result.stderr


@pytest.mark.slow
def test_agents_list_without_any_agent_creates_nothing(
    run_cli: RunCli, toolgate_home: Path
) -> None:
    result = run_cli("agents", "list")
    assert result.returncode == 0
    assert "No agents" in result.stdout
    assert not (toolgate_home / "toolgate.db").exists()


class _Recording(dict[str, str]):
    """Headers that remember every name looked up."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)


def test_authenticate_reads_only_the_headers_the_call_path_decodes() -> None:
    # The HTTP API's call path hands authenticate only these headers, decoded from the scope: a
    # header read here and missing there would be silently absent on the hottest route.
    from toolgate.serve.api.calls import _IDENTITY_HEADERS

    decoded = set(_IDENTITY_HEADERS.values())
    key = new_key()
    cases = [
        (AgentIdentity(), {"host": "127.0.0.1:8470", "origin": "http://127.0.0.1:8470"}),
        (AgentIdentity(), {"host": "127.0.0.1:8470", "sec-fetch-site": "same-origin"}),
        (AgentIdentity(), {"host": "evil.example"}),
        (AgentIdentity(config_keys={"bot": key_sha256(key)}), {"authorization": f"Bearer {key}"}),
        (AgentIdentity(config_keys={"bot": key_sha256(key)}), {}),
    ]
    for identity, headers in cases:
        recording = _Recording(headers)
        peer = Peer()
        peer.headers = recording
        with contextlib.suppress(AuthenticationError):
            identity.authenticate(peer)
        assert recording.read <= decoded, recording.read - decoded
