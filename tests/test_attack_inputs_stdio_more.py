"""More attacks on ``toolgate mcp`` through its stdin (issue 22, second review): a line that is not
UTF-8 (the SDK replaced the bad bytes with U+FFFD and ran the call), a batch (no answer at all:
the SDK takes one message a line) and a line with no end (held whole in memory).

Raw JSON-RPC to a real ``toolgate mcp`` process, as in ``test_attack_inputs_stdio``: each refused
line gets its error code, the tool did not run, and a good call on the same session works after
it. The line reader itself is tested on its limits with a small one.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import test_attack_inputs_stdio as stdio
from test_attack_inputs_stdio import META, Session, _call_line
from test_mcp_server_helpers import runs
from toolgate.serve.mcp.stdio import _CHUNK, MAX_LINE_BYTES, _LineReader, _TooLong

pytestmark = pytest.mark.slow

# The harness's fixtures: a ``toolgate mcp`` process and the file its tool notes its runs in.
env = stdio.env
log = stdio.log
session = stdio.session


def _send_bytes(session: Session, line: bytes) -> None:
    stdin = session.process.stdin
    assert stdin is not None
    stdin.flush()
    stdin.buffer.write(line + b"\n")
    stdin.buffer.flush()


def _error(answer: dict[str, object], code: int) -> str:
    assert set(answer) == {"jsonrpc", "id", "error"}, answer
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == code, answer
    message: str = error["message"]
    return message


# -- not UTF-8 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82"],
    ids=["invalid-byte", "overlong-slash", "encoded-surrogate", "truncated-sequence"],
)
def test_a_line_that_is_not_utf8_gets_a_parse_error_and_the_tool_does_not_run(
    session: Session, log: Path, bad: bytes
) -> None:
    line = _call_line(1, '{"path": "/safe/PLACE"}').encode().replace(b"PLACE", bad)
    _send_bytes(session, line)
    answer = session.answer()
    assert answer["id"] == 1  # the id is readable: the client's request is answered
    assert "not UTF-8" in _error(answer, -32700)
    assert runs(log) == []  # before, the call ran with U+FFFD in the path
    session.still_serves(2, log)


# -- batches -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "[" + _call_line(1, '{"path": "/batched"}') + "]",
        "[" + _call_line(1, '{"path": "/batched"}') + ", " + _call_line(9, '{"path": "/b"}') + "]",
        "[]",
    ],
    ids=["one-call", "two-calls", "empty"],
)
def test_a_batch_gets_an_invalid_request_error_and_nothing_runs(
    session: Session, log: Path, line: str
) -> None:
    session.send(line)
    answer = session.answer()
    assert answer["id"] is None
    assert "batches are not supported" in _error(answer, -32600)
    assert runs(log) == []  # before, no answer at all and nothing run
    session.still_serves(2, log)


# -- a line with no end ------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_line_longer_than_the_limit_gets_a_parse_error_naming_it(
    session: Session, log: Path
) -> None:
    padding = MAX_LINE_BYTES - len(_call_line(3, '{"path": ""}')) + 1
    line = _call_line(3, json.dumps({"path": "/" + "a" * padding}))
    assert len(line) > MAX_LINE_BYTES
    session.send(line)
    answer = session.answer()
    assert answer["id"] is None  # the line is dropped unread: no id is taken from it
    assert f"longer than {MAX_LINE_BYTES} bytes (16 MiB)" in _error(answer, -32700)
    assert runs(log) == []
    session.still_serves(4, log)


# -- the line reader ---------------------------------------------------------------------------


class _Wire(io.BytesIO):
    """A stream that notes how much the reader holds each time it reads."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.reader: _LineReader | None = None
        self.held: list[int] = []

    def read1(self, size: int = -1) -> bytes:
        if self.reader is not None:
            self.held.append(len(self.reader._buffer))
        return super().read1(min(size, 1000))


def _lines(data: bytes, limit: int) -> tuple[list[bytes | str], list[int]]:
    wire = _Wire(data)
    reader = wire.reader = _LineReader(wire, limit)
    out: list[bytes | str] = []
    while (item := reader.read_line()) is not None:
        out.append("too long" if isinstance(item, _TooLong) else item)
    return out, wire.held


def test_the_reader_keeps_lines_up_to_the_limit_and_drops_longer_ones() -> None:
    data = b"a" * 100 + b"\n" + b"b" * 101 + b"\r\n" + b"c" * 101 + b"\nlast"
    lines, _ = _lines(data, 100)
    assert lines == [b"a" * 100 + b"\n", "too long", "too long", b"last"]


def test_the_reader_holds_no_more_than_the_limit_and_a_chunk_of_an_endless_line() -> None:
    lines, held = _lines(b"x" * 50_000 + b"\n{}\n", 2_000)
    assert lines == ["too long", b"{}\n"]
    assert max(held) <= 2_000 + _CHUNK and max(held) < 50_000


def test_the_limit_is_documented_as_16_mib() -> None:
    assert MAX_LINE_BYTES == 16 * 1024 * 1024
    assert META  # the harness speaks the same protocol version
