"""The two names every adapter gives a framework's tool call when it hands it to the gateway.

* :func:`wire_call_id` — the framework's tool call id as the gateway is given it (its approval
  request is keyed by it, so a resumed run finds the request its paused run made).
* :func:`idempotency_key` — the call's idempotency key: the same on every resume of the run, so
  a call that already completed replays its outcome instead of running a side effect again.

Both inputs are text a model, a provider or a framework chose, so both are derived for an
attacker: a lone surrogate (valid in a provider's JSON as ``"\\udc80"``, not encodable as
UTF-8) never raises, an over-long id never reaches the gateway (its HTTP API takes at most 200
characters and would answer 422, ending the run), and no two different calls share a name.
Nothing here imports a framework: the adapters of :mod:`toolgate.integrations` all use it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["DIGEST_PREFIX", "MAX_KEY", "arguments_digest", "idempotency_key", "wire_call_id"]

#: The most characters of a tool call id or an idempotency key the gateway takes (as its HTTP
#: API's call body allows); a longer one is sent as its digest.
MAX_KEY: Final = 200

#: What a digested id or key starts with. A tool call id that itself starts with it is
#: digested too, so no id can pose as another id's digest.
DIGEST_PREFIX: Final = "sha256:"

#: Hex digits of the arguments' SHA-256 kept in a readable key (128 bits: no collision to find).
_ARGUMENTS_DIGITS: Final = 32


def _ascii_json(value: Any) -> str:
    """``value`` as canonical JSON made of ASCII only: sorted keys, no white space, every
    non-ASCII character (a lone surrogate too) as a ``\\u`` escape, so encoding never fails."""
    return json.dumps(
        value, ensure_ascii=True, sort_keys=True, separators=(",", ":"), default=_plain
    )


def _plain(value: Any) -> Any:
    # Frameworks hand over frozen or read-only views of the model's JSON arguments.
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _as_stored(text: str) -> str:
    """``text`` with each lone surrogate read as ``?`` — what a serializer that replaces what
    UTF-8 cannot encode stores (LangGraph's checkpointer does): the resumed run reads the id
    back from the checkpoint that way, and must name the same call as the paused run did."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _sha256(text: str) -> str:
    return DIGEST_PREFIX + hashlib.sha256(text.encode("ascii")).hexdigest()


def wire_call_id(tool_call_id: str | None) -> str | None:
    """The tool call id as the gateway is given it, ``None`` for none.

    The id itself when it is 1 to :data:`MAX_KEY` printable characters and does not start with
    :data:`DIGEST_PREFIX`; any other id (empty, too long, holding a control character) is
    ``sha256:`` and the SHA-256 of its ASCII JSON. A lone surrogate (valid in a provider's
    JSON as ``"\\udc80"``, not in UTF-8) counts as ``?``, as a checkpoint stores it. The same id
    always maps to the same value, so a resumed run finds the approval request of its paused
    run."""
    if tool_call_id is None:
        return None
    tool_call_id = _as_stored(tool_call_id)
    if (
        0 < len(tool_call_id) <= MAX_KEY
        and tool_call_id.isprintable()
        and not tool_call_id.startswith(DIGEST_PREFIX)
    ):
        return tool_call_id
    return _sha256(_ascii_json(tool_call_id))


def arguments_digest(arguments: Mapping[str, Any]) -> str | None:
    """The SHA-256 (hex) of the arguments' canonical ASCII JSON — the same for equal arguments
    whatever their key order — or ``None`` when they are not JSON (nothing to name them by)."""
    try:
        text = _ascii_json(arguments)
    except (TypeError, ValueError, RecursionError):  # not JSON, circular or nested too deep
        return None
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def idempotency_key(
    session_id: str | None,
    tool_id: str,
    tool_call_id: str | None,
    arguments: Mapping[str, Any],
) -> str | None:
    """The idempotency key of one framework tool call: the same whenever the same call is made
    again (a resumed run), different for any other call.

    It is the ASCII JSON array ``[session_id, tool_id, tool_call_id, arguments digest]`` — JSON
    keeps the parts apart, where a separator would let session ``a:b`` with call ``c`` and
    session ``a`` with call ``b:c`` share a key (the gateway scopes keys by agent and tool, not
    by session, so one conversation would replay another's outcome). The digest of the
    arguments (:func:`arguments_digest`) is part of it because providers reuse tool call ids
    (numbered per turn, or named after the tool): a later call under a reused id with other
    arguments is another call, which must run. A key longer than :data:`MAX_KEY` (or not
    printable) is ``sha256:`` and the SHA-256 of that array (a readable key starts with ``[``,
    so the two never meet).

    A lone surrogate in the session or the tool call id counts as ``?``, as a checkpoint
    stores it (see :func:`wire_call_id`); the arguments are digested as they are (the gateway
    refuses arguments holding one, so such a call never ran before a pause).

    ``None`` — no key, the call is not de-duplicated — when the call has no identity to keep
    across a resume: no session or no tool call id (a key then could be shared by two
    conversations), or arguments that are not JSON.
    """
    if not session_id or not tool_call_id:
        return None
    digest = arguments_digest(arguments)
    if digest is None:
        return None
    parts = [_as_stored(session_id), tool_id, _as_stored(tool_call_id), digest[:_ARGUMENTS_DIGITS]]
    key = _ascii_json(parts)
    # ASCII JSON leaves DEL as it is: the key is shown in the audit log, so unprintable goes too.
    return key if len(key) <= MAX_KEY and key.isprintable() else _sha256(key)
