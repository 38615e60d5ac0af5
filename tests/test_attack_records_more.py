"""More attacks on what the gateway records and returns (issue 22, after review): a hostile string
that made URL masking quadratic (the whole gateway froze while it ran), a redacted field with many
values that made every string slow, URL credentials written in forms the masker missed, a caller
confirming guessed pieces of a secret by the change in what comes back, and the short password of
a URL-shaped secret echoed alone.

Through :meth:`Gateway.call` with an audit log, then the records (and the audit files byte for
byte). A hang is caught by each test's timeout, far above what masking takes now and far below
what the quadratic masking took (the margins are in each test); nothing asserts a time.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from gateway_support import gateway_with
from toolgate import Gateway, ToolContext, tool
from toolgate.redaction import MARKER, MIN_URL_PART_LENGTH, record_masker

#: The gateway's credential, given to a tool as a secret.
API_KEY = "sk-proj-Q7xY3mN8pL2vR6tKw4Zs"
#: A secret that is a URL: its password is shorter than a piece (10 characters).
DB_URL = "postgres://app_user:Pa55word@db.internal:5432/app"


@tool(namespace="m", effect="read_only")
def echo(text: str) -> dict[str, str]:
    """Echo the text back (so it is in the result as well as in the arguments)."""
    return {"echo": text}


@tool(namespace="m", effect="read_only", redact=["args.words"])
def echo_words(words: list[str], text: str) -> dict[str, str]:
    """Echo a text; the words are redacted wherever they appear."""
    return {"echo": text}


@tool(namespace="m", effect="read_only", secrets=["api_key"])
def truncated(ctx: ToolContext, guess: str) -> dict[str, str]:
    """Return a truncated secret whatever the caller guessed (and its guess, echoed)."""
    key = ctx.secrets["api_key"]
    return {"prefix": key[:16], "middle": key[6:20], "guess": guess}


@tool(namespace="m", effect="read_only", secrets=["db_url"])
def db_parts(ctx: ToolContext) -> dict[str, Any]:
    """Return the parts of the database URL it was given (a badly written tool)."""
    url = urlsplit(ctx.secrets["db_url"])
    return {"password": url.password, "user": url.username, "note": f"pw={url.password}!"}


def _gateway(tmp_path: Path, **kwargs: Any) -> Gateway:
    gateway = gateway_with(
        audit_path=tmp_path / "audit.db",
        audit_jsonl=tmp_path / "audit.jsonl",
        overflow_limit=4 << 20,  # the hostile megabyte comes back whole
        spill_dir=tmp_path / "spill",
        **kwargs,
    )
    for item in (echo, echo_words, truncated, db_parts):
        gateway.add(item)
    return gateway


def _records(gateway: Gateway, tool_id: str) -> list[Any]:
    assert gateway.audit is not None
    gateway.audit.flush()
    return list(gateway.audit.query(tool_id=tool_id))


def _stored(tmp_path: Path) -> bytes:
    return b"\n".join(p.read_bytes() for p in sorted(tmp_path.glob("audit.*")) if p.is_file())


def _nowhere(stored: bytes, *texts: str) -> None:
    for text in texts:
        for form in (text.encode(), json.dumps(text).encode()[1:-1]):
            assert form not in stored, f"{text!r} was recorded"


# -- masking that froze the gateway -----------------------------------------------------------

#: Each took minutes of CPU at this length before (a scan from every start position to the end):
#: ``"a" * 50_000 + "@"`` alone took 2.6 s, and the time grows with the square of the length.
HOSTILE = [
    "a" * (1 << 20) + "@",
    "//" + "a" * (1 << 20) + "@",
    "?token=" * (1 << 17),
    "&" + "a" * (1 << 20),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "hostile", HOSTILE, ids=["letters-at", "slashes-letters-at", "tokens", "name"]
)
def test_a_megabyte_hostile_string_is_masked_in_linear_time(hostile: str) -> None:
    # Under 0.1 s of CPU now; about 18 minutes before (the quadratic scan of 1 MiB): the test's
    # timeout of 60 s is the guard.
    assert isinstance(record_masker().sub(hostile), str)


@pytest.mark.timeout(120)
async def test_a_tool_echoing_a_hostile_megabyte_does_not_stall_the_audit(tmp_path: Path) -> None:
    hostile = "https://" + "a" * (1 << 20) + "@"
    async with _gateway(tmp_path) as gateway:
        outcome = await gateway.call("m:echo", {"text": hostile})
        assert outcome.ok and outcome.content == {"echo": hostile}
        # The call after it is recorded too: the audit writer is not stuck masking the first.
        after = await gateway.call("m:echo", {"text": "https://bob:hunter2pass@db.test/"})
        assert after.ok
        records = _records(gateway, "m:echo")
        # Masking, recording and copying two megabytes: a few seconds at most on a busy machine;
        # the quadratic masking took minutes of CPU for each of them (the timeout is the guard).
    first, second = sorted(records, key=lambda record: record.time)
    # No credential in it, so nothing is masked; past audit.max_payload_bytes the record keeps
    # its size and a preview (issue 24).
    assert first.args["_truncated"] is True
    assert first.args["original_size"] == len(hostile) + len('{"text":""}')
    assert first.args["preview"].startswith('{"text":"https://aaaa')
    assert second.args == {"text": f"https://{MARKER}@db.test/"}
    _nowhere(_stored(tmp_path), "hunter2pass")


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_many_redacted_values_do_not_slow_every_string() -> None:
    rnd = random.Random(22)
    alphabet = string.ascii_letters + string.digits
    words = {"".join(rnd.choices(alphabet, k=8)) for _ in range(100_000)}
    masker = record_masker((), words)
    text = "".join(rnd.choices(alphabet + " ", k=1 << 20))
    # About 1.3 s of CPU now (and 4 s to build the masker). One alternation of the values
    # (before) took 5.8 s for the first 32 KiB of this text, and grows with its length: about
    # 180 s here, three times the test's timeout, which is the guard.
    masked = masker.sub(text)
    assert len(masked) <= len(text) + 16 * text.count(" ")


async def test_redacted_values_sent_to_a_tool_are_masked_in_its_echo(tmp_path: Path) -> None:
    words = [f"word{n:05d}" for n in range(5_000)]
    async with _gateway(tmp_path) as gateway:
        outcome = await gateway.call("m:echo_words", {"words": words, "text": "x word04999 y"})
        assert outcome.ok
        [record] = _records(gateway, "m:echo_words")
    assert record.args["words"] == MARKER
    assert record.result == {"echo": f"x {MARKER} y"}


# -- URL credentials in forms the masker missed -----------------------------------------------

URL_FORMS = {
    "json-escaped-slashes": ("https:\\/\\/alice:hunter2pass@db.example.test/x", "hunter2pass"),
    "go-json-ampersand": ("https://h.test/p?a=1\\u0026token=SECRETgo1234", "SECRETgo1234"),
    "array-name": ("https://h.test/p?api_key[]=SECRETarr1234", "SECRETarr1234"),
    "array-name-encoded": ("https://h.test/p?api_key%5B%5D=SECRETarr5678", "SECRETarr5678"),
    "scheme-relative": ("//alice:hunter2pass@host.test/x", "hunter2pass"),
    "nested-query": (
        "https://h.test/login?next=https%3A%2F%2Fx.test%2Fcb%3Fapi_key%3DSECRETnest1%26p%3D2",
        "SECRETnest1",
    ),
    "nested-userinfo": (
        "https://h.test/go?to=https%3A%2F%2Falice%3Ahunter2pass%40db.example.test",
        "hunter2pass",
    ),
    "semicolon-in-value": ("https://h.test/?token=abc;defSECRETPART", "defSECRETPART"),
    "passphrase": ("https://h.test/?passphrase=SECRETphrase1", "SECRETphrase1"),
}


@pytest.mark.parametrize(("url", "secret"), URL_FORMS.values(), ids=URL_FORMS.keys())
async def test_url_credentials_in_every_form_are_recorded_nowhere(
    tmp_path: Path, url: str, secret: str
) -> None:
    async with _gateway(tmp_path) as gateway:
        outcome = await gateway.call("m:echo", {"text": f"fetch {url} now"})
        assert outcome.ok
        [record] = _records(gateway, "m:echo")
    assert MARKER in record.args["text"] and MARKER in record.result["echo"]
    assert record.args["text"].endswith(" now")
    _nowhere(_stored(tmp_path), secret)


# -- a caller confirming guesses -------------------------------------------------------------


async def test_a_caller_guessing_pieces_of_a_secret_gets_the_same_answer_right_or_wrong(
    tmp_path: Path,
) -> None:
    guesses = {
        "right": API_KEY[:10],
        "wrong": "sk-proj-Zz",
        "right-longer": API_KEY[:12],
        "wrong-longer": "sk-proj-Q7xQ",
    }
    async with _gateway(tmp_path, secrets={"api_key": API_KEY}) as gateway:
        answers = {}
        for label, guess in guesses.items():
            outcome = await gateway.call("m:truncated", {"guess": guess})
            assert outcome.ok, outcome.message
            content = dict(outcome.content)
            assert content.pop("guess") == guess  # its own string comes back as sent
            answers[label] = content
        _records(gateway, "m:truncated")
    assert (
        answers["right"] == answers["wrong"] == answers["right-longer"] == answers["wrong-longer"]
    )
    assert answers["right"] == {"prefix": MARKER, "middle": MARKER}
    _nowhere(_stored(tmp_path), API_KEY, API_KEY[:16], API_KEY[6:20])


# -- the short password of a URL-shaped secret ------------------------------------------------


async def test_the_short_password_of_a_url_secret_is_masked_when_echoed_alone(
    tmp_path: Path,
) -> None:
    password = urlsplit(DB_URL).password
    assert password is not None and MIN_URL_PART_LENGTH <= len(password) < 10
    async with _gateway(tmp_path, secrets={"db_url": DB_URL}) as gateway:
        outcome = await gateway.call("m:db_parts", {})
        assert outcome.ok, outcome.message
        [record] = _records(gateway, "m:db_parts")
    assert outcome.content == {"password": MARKER, "user": MARKER, "note": f"pw={MARKER}!"}
    assert record.result == outcome.content
    _nowhere(_stored(tmp_path), password, "app_user")
