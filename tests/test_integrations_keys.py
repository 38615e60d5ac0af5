"""The tool call id and idempotency key every framework adapter gives a call
(``toolgate.integrations.keys``): stable across a resume, never shared by two calls, bounded,
ASCII, and never an exception whatever text the model or the provider chose."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from types import MappingProxyType
from typing import Any

import pytest

from toolgate.integrations.keys import (
    DIGEST_PREFIX,
    MAX_KEY,
    arguments_digest,
    idempotency_key,
    wire_call_id,
)

# -- the tool call id sent to the gateway --------------------------------------------------------


@pytest.mark.parametrize("call_id", ["call_1", "toolu_01AbC", "x" * MAX_KEY, "呼叫-1", "a b:c"])
def test_a_printable_id_up_to_the_limit_is_sent_as_it_is(call_id: str) -> None:
    assert wire_call_id(call_id) == call_id


@pytest.mark.parametrize(
    "call_id",
    ["", "x" * (MAX_KEY + 1), "call\n1", "call\x00", "call\x7f", "\udc80" * 300],
)
def test_any_other_id_is_sent_as_a_bounded_ascii_digest(call_id: str) -> None:
    sent = wire_call_id(call_id)
    assert sent is not None and sent.startswith(DIGEST_PREFIX)
    assert len(sent) <= MAX_KEY and sent.isascii() and sent.isprintable()
    assert sent == wire_call_id(call_id)  # the resumed run finds the same request


def test_a_lone_surrogate_counts_as_a_question_mark_as_a_checkpoint_stores_it() -> None:
    """LangGraph's checkpointer stores ``"n\\udfff"`` as ``"n?"``: the node run again on the
    resume reads that id, and must name the call the paused run named (else a call that
    finished before the pause runs again)."""
    assert wire_call_id("call-\ud800") == "call-?" == wire_call_id("call-?")
    for session, call_id in (("s", "n\udfff"), ("t-\ud800", "n")):
        stored = (session.replace("\ud800", "?"), call_id.replace("\udfff", "?"))
        key = idempotency_key(session, "demo:note", call_id, {"text": "once"})
        assert key == idempotency_key(*stored[:1], "demo:note", stored[1], {"text": "once"})
        assert key is not None and key.isascii()


def test_an_id_that_spells_a_digest_is_not_that_digest() -> None:
    long = "x" * 500
    digest = wire_call_id(long)
    assert digest is not None
    assert wire_call_id(digest) != digest
    assert wire_call_id(long) != wire_call_id(long + "x")


def test_no_id_is_no_id() -> None:
    assert wire_call_id(None) is None


# -- the idempotency key --------------------------------------------------------------------------


def test_the_same_call_gets_the_same_key_in_another_process() -> None:
    """The key is the documented array, so a run resumed by another process (another hash
    seed, another machine) finds the call's stored outcome."""
    arguments = {"to": "ann@example.com", "body": "hi"}
    key = idempotency_key("conv-1", "demo:send_email", "call_1", arguments)
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    expected = json.dumps(
        [
            "conv-1",
            "demo:send_email",
            "call_1",
            hashlib.sha256(canonical.encode()).hexdigest()[:32],
        ],
        separators=(",", ":"),
    )
    assert key == expected
    code = (
        "from toolgate.integrations.keys import idempotency_key as k;"
        "print(k('conv-1', 'demo:send_email', 'call_1', {'body': 'hi', 'to': 'ann@example.com'}))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert other.stdout.strip() == key


def test_argument_order_and_frozen_views_do_not_change_the_key() -> None:
    plain = idempotency_key("s", "demo:note", "c1", {"a": [1, {"b": 2}], "c": "x"})
    frozen = MappingProxyType({"c": "x", "a": (1, MappingProxyType({"b": 2}))})
    assert idempotency_key("s", "demo:note", "c1", frozen) == plain


def test_each_part_of_the_call_changes_the_key() -> None:
    base = ("s", "demo:note", "c1", {"text": "a"})
    variants: list[tuple[str, str, str, dict[str, Any]]] = [
        ("s2", "demo:note", "c1", {"text": "a"}),
        ("s", "demo:send_email", "c1", {"text": "a"}),
        ("s", "demo:note", "c2", {"text": "a"}),
        # A provider numbering its calls per turn: the same id, other arguments — another call.
        ("s", "demo:note", "c1", {"text": "b"}),
        ("s", "demo:note", "c1", {"text": "a", "extra": None}),
    ]
    keys = {idempotency_key(*base)} | {idempotency_key(*v) for v in variants}
    assert None not in keys and len(keys) == len(variants) + 1


def test_separators_in_the_ids_cannot_make_two_calls_one() -> None:
    """Joined with ``:`` (or any separator) these would spell the same key, and one
    conversation would replay another's outcome."""
    pairs = [
        ("a:b", "demo:note", "c"),
        ("a", "demo:note", "b:c"),
        ("a", "b:demo:note", "c"),
        ("a:demo:note:x", "demo:note", "y"),
        ("a", "demo:note", "x:demo:note:y"),
        ('a","demo:note","b', "demo:note", "c"),
        ("a", "demo:note", '","c'),
        ("a\\", "demo:note", "c"),
    ]
    keys = [idempotency_key(session, tool, call, {}) for session, tool, call in pairs]
    assert None not in keys and len(set(keys)) == len(pairs)


@pytest.mark.parametrize(
    ("session", "call_id", "arguments"),
    [
        ("s" * 1000, "c1", {}),
        ("s", "c" * 1000, {}),
        ("s", "call-\ud800", {}),  # a lone surrogate: valid JSON, not UTF-8
        ("s\udc80", "c1", {}),
        ("s", "c1", {"text": "\ud800", "\udc80": "key"}),
        ("s", "c\x7f", {}),
        ("s", "c\n1", {"text": "é" * 5000}),
    ],
)
def test_any_text_gives_a_bounded_printable_ascii_key(
    session: str, call_id: str, arguments: dict[str, Any]
) -> None:
    key = idempotency_key(session, "demo:note", call_id, arguments)
    assert key is not None and len(key) <= MAX_KEY
    assert key.isascii() and key.isprintable() and "\x00" not in key
    assert key == idempotency_key(session, "demo:note", call_id, arguments)


def test_a_digested_key_and_a_readable_key_never_meet() -> None:
    long = idempotency_key("s", "demo:note", "x" * 500, {})
    assert long is not None and long.startswith(DIGEST_PREFIX)
    assert long != idempotency_key("s", "demo:note", "x" * 501, {})
    # Every readable key is a JSON array: it starts with "[", a digest never does.
    readable = idempotency_key(DIGEST_PREFIX, "demo:note", long, {})
    assert readable is not None and readable.startswith("[") and readable != long


@pytest.mark.parametrize(("session", "call_id"), [(None, "c1"), ("", "c1"), ("s", None), ("s", "")])
def test_a_call_without_an_identity_gets_no_key(session: str | None, call_id: str | None) -> None:
    """Without a session, two conversations could share a key; without a tool call id, two
    different calls would."""
    assert idempotency_key(session, "demo:note", call_id, {}) is None


def test_arguments_that_are_not_json_give_no_key_rather_than_a_crash() -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(100_000):  # past the encoder's recursion limit
        inner["a"] = {}
        inner = inner["a"]
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for arguments in (deep, circular, {"when": object()}):
        assert arguments_digest(arguments) is None
        assert idempotency_key("s", "demo:note", "c1", arguments) is None


def test_the_arguments_digest_is_the_sha256_of_their_canonical_ascii_json() -> None:
    text = json.dumps({"b": "\ud800", "a": 1}, sort_keys=True, separators=(",", ":"))
    assert arguments_digest({"b": "\ud800", "a": 1}) == hashlib.sha256(text.encode()).hexdigest()
