"""The Idempotency stage: a repeated key replays the first call's outcome instead of running again.

A tool opts in with an ``idempotencyKeyTemplate`` (Python: ``idempotency_key=``), rendered in
Jinja2's immutable sandbox over ``args`` (the call's arguments), ``agent``, ``session`` and
``tool`` (the tool id), with ``StrictUndefined`` and the filters ``hash`` (SHA-256 hex of the
value's canonical JSON), ``lower`` and ``default`` (and Jinja's other builtins). ``agent`` and
``session`` are undefined for a call without them, like a missing argument: write
``{{ agent | default('anonymous') }}``. Keys are scoped per tool and per agent: the same key
sent by two agents names two calls — one agent's outcome is never replayed to another, nor does
one agent's key conflict with another's (a template need not name ``{{ agent }}`` for that).
Within the tool's window (default 24 h, counted from the first call), for one agent:

* the first call with a key takes it and runs; its final outcome — ``ok`` or ``error``, errors
  included — is stored (``pending_approval`` is not final: the key is given up so the retry after
  the decision runs);
* a later call with the same key and the same arguments (by digest) gets the stored outcome,
  with ``metadata["idempotency"] = {"key", "replayed": True, "original_call_id"}``;
* a call with the same key while the first still runs waits for it and gets its outcome (in this
  process it is woken when the first ends; a call in another process sharing the SQLite store
  polls), for at most the tool's timeout plus the lease grace (:data:`LEASE_GRACE`, 30 s) —
  the first call's *lease*;
* a call with the same key after the first call's lease has passed without an outcome (its
  process was killed, or the machine stopped, in the middle of the call) is
  ``outcome_unknown``: the first call started — its claim was committed before the tool ran —
  and nobody knows whether the tool took effect. The message names that call and when it
  started, and the answer is kept for the rest of the window, so every retry with the key gets
  it (``metadata["idempotency"]`` has ``original_call_id`` and ``started_at``). Only a tool
  declared ``idempotent: true`` (re-running it is harmless, by its own word) is run again
  instead: the retry takes the key;
* the same key with different arguments is ``idempotency_conflict``; the tool does not run.

A ``running`` record is kept for the whole window (not only the lease), so that a retry long
after a crash still learns of it. The owner is judged gone from the record's ``created_at`` plus
the lease, computed by the process that looks.

A template that cannot be rendered stops the call before the tool runs: ``invalid_arguments``
when this call's values are the problem (an undefined variable such as a missing optional
argument, a type error, an empty key) — the caller can fix it — and ``unavailable`` when the
declaration is (a syntax error or a sandbox violation), since no call can succeed until the tool
is fixed.

Tools declared ``idempotent: true`` without a key template are not de-duplicated: repeating such
a call is harmless by the tool's own word, so every call runs.

A caller may name its call instead (``Gateway.call(idempotency_key=...)``, ``"idempotency_key"``
in an HTTP call's body; the framework adapters pass their run's tool call id): for a tool that
declares no template and may change something (any side-effect level but ``read_only``), that key
is used exactly like a rendered one — per tool and per agent, the same rules above, the call's
workspace counting as one of its arguments (the same key for another workspace is a conflict,
not a replay of what ran elsewhere). A tool's own
template wins over the caller's key (its author knows what makes two calls the same), and a
read-only tool runs every time (repeating it changes nothing).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from .._json import canonical_json, digest, thaw
from ..errors import ErrorCode
from ..model import CallOutcome, CallStatus, Overflow, SideEffect, Tool
from ..model.content import content_fields, content_from_fields
from ..registry import RegisteredTool
from ..stores.idempotency import (
    IdempotencyRecord,
    IdempotencyStatus,
    IdempotencyStore,
    MemoryIdempotencyStore,
)
from .key_templates import KeyTemplateError, compile_fast, render_error
from .key_templates import template as compiled_template
from .state import CallState, Handler, error_outcome

__all__ = ["LEASE_GRACE", "IdempotencyStage", "KeyTemplateError", "render_key"]

#: Seconds beyond a tool's timeout that a running call holds its key (and others wait for it).
LEASE_GRACE: Final = 30.0
#: First and longest pause between two looks at a key held by another process (seconds).
_POLL_FIRST: Final = 0.01
_POLL_MAX: Final = 0.5

log = logging.getLogger("toolgate.pipeline.idempotency")


# Simple templates → their compiled renderer (None: the template needs Jinja).
_fast: dict[str, Callable[[Mapping[str, Any]], str | None] | None] = {}


def _fast_render(source: str, arguments: Mapping[str, Any]) -> str | None:
    if source not in _fast:
        _fast[source] = compile_fast(source) if len(_fast) < 4096 else None
    render = _fast[source]
    return None if render is None else render(arguments)


def render_key(
    template: str,
    *,
    arguments: Mapping[str, Any],
    agent: str | None,
    session: str | None,
    tool_id: str,
) -> str:
    """Render an idempotency key template. Raises :class:`KeyTemplateError`."""
    fast = _fast_render(template, arguments)
    if fast is not None and fast.strip():
        return fast.strip()
    # No copy: the immutable sandbox refuses to modify the arguments.
    context: dict[str, Any] = {"args": arguments, "tool": tool_id}
    if agent is not None:
        context["agent"] = agent
    if session is not None:
        context["session"] = session
    try:
        key = compiled_template(template).render(context)
    except Exception as exc:
        raise render_error(exc) from exc
    key = key.strip()
    if not key:
        raise KeyTemplateError(
            "its idempotency key rendered empty for these arguments; pass the argument the key "
            "is built from",
            ErrorCode.INVALID_ARGUMENTS,
        )
    return key


def call_lease(tool: Tool, grace: float) -> float:
    """Seconds a call holds its key before it counts as cut off: the longest it may wait for a
    concurrency slot (the tool's timeout), its run (the timeout again) and ``grace``."""
    return 2 * tool.timeout + grace


def stored_key(agent: str | None, key: str) -> str:
    """The key as stored: the rendered ``key`` scoped to the calling ``agent``, so that no
    agent ever takes, replays or conflicts with another's (one unambiguous string, for every
    store's ``(tool_id, key)``)."""
    return canonical_json(["agent", agent, key])


def outcome_to_record(outcome: CallOutcome) -> dict[str, Any]:
    """The JSON-ready part of a final outcome that a replay hands over again."""
    record: dict[str, Any] = {
        "status": str(outcome.status),
        "call_id": outcome.call_id,
        **content_fields(outcome.content),
        "code": None if outcome.code is None else str(outcome.code),
        "message": outcome.message,
        "duration": outcome.duration,
    }
    if outcome.visualization is not None:
        record["visualization"] = thaw(outcome.visualization)
    if outcome.overflow is not None:
        record["overflow"] = {
            "path": outcome.overflow.path,
            "original_size": outcome.overflow.original_size,
        }
    return record


def outcome_from_record(
    stored: Mapping[str, Any], *, tool_id: str, call_id: str, metadata: Mapping[str, Any]
) -> CallOutcome:
    """A stored outcome, handed to the call ``call_id`` that replays it."""
    code = stored.get("code")
    overflow = stored.get("overflow")
    return CallOutcome(
        status=CallStatus(stored.get("status", "error")),
        tool_id=tool_id,
        call_id=call_id,
        content=content_from_fields(stored),
        code=None if code is None else ErrorCode(code),
        message=stored.get("message"),
        visualization=stored.get("visualization"),
        overflow=None
        if overflow is None
        else Overflow(path=str(overflow["path"]), original_size=int(overflow["original_size"])),
        duration=float(stored.get("duration", 0.0)),
        metadata=metadata,
    )


class IdempotencyStage:
    """Replays, waits for, or refuses calls whose idempotency key is already taken."""

    name = "idempotency"
    # Never awaits when nothing waits; when a call must wait for another and runs inline
    # (``call_sync`` without an event loop) it blocks its own thread instead of suspending.
    suspends = False

    def __init__(
        self,
        store: IdempotencyStore | None = None,
        *,
        clock: Callable[[], float] = time.time,
        lease_grace: float = LEASE_GRACE,
        scrub: Callable[[Tool, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """
        Args:
            store: Where keys and outcomes live (default: in memory, for this stage's lifetime).
            clock: Unix seconds, for windows and leases.
            lease_grace: Seconds beyond the tool's timeout a running call holds its key, and
                the longest another call with the key waits for it.
            scrub: Masks the secrets a tool received in an outcome before it is kept (a tool
                that echoes its token must not leave it in the state database).
        """
        self.store: IdempotencyStore = MemoryIdempotencyStore() if store is None else store
        self.clock = clock
        self.lease_grace = lease_grace
        self.scrub = scrub
        # Keys running in this process → the signal their waiters wait on (made by the first
        # waiter: a call nobody waits for makes none).
        self._signals: dict[tuple[str, str], concurrent.futures.Future[None] | None] = {}
        self._signals_lock = threading.Lock()

    @classmethod
    def sqlite(
        cls,
        path: Path | str,
        *,
        clock: Callable[[], float] = time.time,
        scrub: Callable[[Tool, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> IdempotencyStage:
        """A stage whose keys and outcomes persist in the SQLite database at ``path``."""
        from ..stores.sqlite_idempotency import SQLiteIdempotencyStore

        return cls(SQLiteIdempotencyStore(path), clock=clock, scrub=scrub)

    def close(self) -> None:
        """Release the store."""
        self.store.close()

    def applies_to(self, entry: RegisteredTool) -> bool:
        tool = entry.tool
        return bool(tool.idempotency.key_template) or tool.side_effect is not SideEffect.READ_ONLY

    @staticmethod
    def _keyed(state: CallState) -> tuple[str, str] | None:
        """The call's key and the digest of what it names, or ``None`` when the call has no
        key: the tool's template rendered (raises :class:`KeyTemplateError`), else the caller's
        key for a tool that may change something."""
        tool = state.tool
        template = tool.idempotency.key_template
        if template:
            key = render_key(
                template,
                arguments=state.arguments,
                agent=state.agent,
                session=state.session_id,
                tool_id=tool.id,
            )
            return key, digest(state.arguments)
        if state.idempotency_key is None or tool.side_effect is SideEffect.READ_ONLY:
            return None
        # The workspace is part of what a caller's key names: the same key and arguments for
        # another folder are another call (a conflict), never a replay of what ran elsewhere.
        # (A template cannot name the workspace; its digest stays as it was.)
        workspace = None if state.workspace is None else str(state.workspace)
        return state.idempotency_key, digest(["caller-key", workspace, state.arguments])

    def would_replay(self, state: CallState) -> bool:
        """Whether this call would end here now, before the stages after this one (the
        approval stage): its key is held by an earlier call, whose outcome it replays (or waits
        for), or which it reports (another call's arguments: a conflict; an owner gone:
        ``outcome_unknown``). Only looks: nothing is claimed."""
        try:
            keyed = self._keyed(state)
        except KeyTemplateError:
            return False  # the call ends here too, refused; nobody is asked either way
        if keyed is None:
            return False
        tool = state.tool
        held = self.store.get(tool.id, stored_key(state.agent, keyed[0]), now=self.clock())
        if held is None:
            return False
        if held.status is IdempotencyStatus.DONE:
            return True
        # Running: waited for and replayed — unless its owner is gone and the tool is declared
        # idempotent, when this call takes the key and runs (and may ask).
        gone = self.clock() >= held.created_at + call_lease(tool, self.lease_grace)
        return not (gone and tool.idempotency.idempotent is True)

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        tool = state.tool
        if state.idempotency_key is None and not tool.idempotency.key_template:
            return await proceed(state)  # most calls of a tool that may change something
        try:
            keyed = self._keyed(state)
        except KeyTemplateError as exc:
            return error_outcome(
                state,
                exc.code,
                f"Tool {tool.id} did not run: {exc.message}.",
                detail=f"idempotencyKeyTemplate: {tool.idempotency.key_template}",
            )
        if keyed is None:
            return await proceed(state)
        key, arguments_digest = keyed
        scoped = stored_key(state.agent, key)
        lease = call_lease(tool, self.lease_grace)
        # The running record outlives the lease (a crash must still be known to a late retry),
        # and never ends before it (a short window must not free a key its owner still runs).
        keep = max(tool.idempotency.window, lease)
        deadline = time.monotonic() + lease
        pause = _POLL_FIRST
        while True:
            now = self.clock()
            mine = IdempotencyRecord(
                tool_id=tool.id,
                key=scoped,
                arguments_digest=arguments_digest,
                call_id=state.call_id,
                status=IdempotencyStatus.RUNNING,
                created_at=now,
                expires_at=now + keep,
            )
            held = self.store.claim(mine, now=now)
            if held is None:
                return await self._run(state, proceed, mine, key)
            if held.arguments_digest != arguments_digest:
                return self._conflict(state, key, held)
            if held.status is IdempotencyStatus.DONE and held.outcome is not None:
                if held.outcome.get("code") == ErrorCode.OUTCOME_UNKNOWN.value:
                    return self._unknown(state, key, held)
                return self._replay(state, key, held)
            if now >= held.created_at + lease:
                # The owner's lease passed without an outcome: its process is gone.
                unknown = self._owner_gone(state, key, held)
                if unknown is not None:
                    return unknown
                continue  # the record changed meanwhile (or was given up): look again
            # Another call holds the key and is running: wait for it, then look again.
            remaining = min(deadline - time.monotonic(), held.created_at + lease - now)
            if deadline - time.monotonic() <= 0:
                return error_outcome(
                    state,
                    ErrorCode.IDEMPOTENCY_CONFLICT,
                    f"Tool {tool.id} did not run: an earlier call with the same idempotency key "
                    f"({held.call_id}) is still running. Call again later with the same "
                    "arguments to receive its result.",
                )
            with self._signals_lock:
                slot = (tool.id, scoped)
                signal = None
                if slot in self._signals:
                    signal = self._signals[slot]
                    if signal is None:
                        signal = self._signals[slot] = concurrent.futures.Future()
            if signal is None:  # held by another process (or just finishing): poll
                wait, pause = min(pause, remaining), min(pause * 2, _POLL_MAX)
            else:
                wait = remaining
            await _wait(signal, wait, inline=state.inline)

    async def _run(
        self, state: CallState, proceed: Handler, mine: IdempotencyRecord, key: str
    ) -> CallOutcome:
        """Run the call that took the key; store its final outcome; wake the waiters."""
        slot = (mine.tool_id, mine.key)
        with self._signals_lock:
            self._signals[slot] = None
        state.metadata["idempotency"] = {"key": key, "replayed": False}
        try:
            try:
                outcome = await proceed(state)
            except BaseException:
                self.store.release(mine.tool_id, mine.key, call_id=mine.call_id)
                raise
            self._settle(state, mine, outcome)
            return outcome
        finally:
            with self._signals_lock:
                signal = self._signals.pop(slot, None)
            if signal is not None:
                signal.set_result(None)

    def _settle(self, state: CallState, mine: IdempotencyRecord, outcome: CallOutcome) -> None:
        """Keep a final outcome for the window; give the key up for a pending one."""
        try:
            if outcome.status is CallStatus.PENDING_APPROVAL or state.refused_before_run:
                # Nothing ran (it waits for a person, or was refused busy or for want of an
                # audit record): the retry must be free to run it.
                self.store.release(mine.tool_id, mine.key, call_id=mine.call_id)
                return
            window = state.tool.idempotency.window
            # ``if_running``: an outcome settled meanwhile as unknown (this call overran its
            # lease) stays the one answer every retry gets.
            self.store.complete(
                mine.tool_id,
                mine.key,
                call_id=mine.call_id,
                outcome=self._kept(state.tool, outcome_to_record(outcome)),
                expires_at=mine.created_at + window,
                if_running=True,
            )
        except Exception:
            # The tool ran: its outcome goes to the caller even if it cannot be kept.
            log.exception(
                "could not store the outcome of call %s for idempotency key %r of %s",
                mine.call_id,
                mine.key,
                mine.tool_id,
            )
            with suppress(Exception):
                self.store.release(mine.tool_id, mine.key, call_id=mine.call_id)

    def _kept(self, tool: Tool, record: dict[str, Any]) -> dict[str, Any]:
        if self.scrub is None:
            return record
        # Always: besides the tool's secrets, the credentials of any URL are masked.
        return self.scrub(tool, record)

    def _owner_gone(
        self, state: CallState, key: str, held: IdempotencyRecord
    ) -> CallOutcome | None:
        """Settle a key whose owner died mid-call: ``outcome_unknown`` for every retry in the
        window, or — for a tool whose re-run is harmless — give the key up so this call can take
        it. ``None`` when the record changed meanwhile (look again)."""
        tool = state.tool
        if tool.idempotency.idempotent is True:
            # Of two retries racing here, one deletes the dead record; the next claim decides
            # which of them runs (the other waits for it).
            self.store.release(tool.id, held.key, call_id=held.call_id, if_running=True)
            log.warning(
                "call %s of %s with idempotency key %r started at %s and never finished; the "
                "tool is declared idempotent, so call %s runs it again",
                held.call_id,
                tool.id,
                key,
                _iso(held.created_at),
                state.call_id,
            )
            return None
        unknown = self._unknown(state, key, held)
        record = outcome_to_record(unknown)
        record["call_id"] = held.call_id
        settled = self.store.complete(
            tool.id,
            held.key,
            call_id=held.call_id,
            outcome=record,
            expires_at=held.created_at + tool.idempotency.window,
            if_running=True,
        )
        if not settled:
            return None
        log.warning(
            "call %s of %s with idempotency key %r started at %s and never finished (its "
            "gateway stopped); its retries are answered outcome_unknown",
            held.call_id,
            tool.id,
            key,
            _iso(held.created_at),
        )
        return unknown

    @staticmethod
    def _unknown(state: CallState, key: str, held: IdempotencyRecord) -> CallOutcome:
        """``outcome_unknown`` about the call that took ``key`` and never finished: the same
        answer, built from the kept record, for every retry in the window."""
        started = _iso(held.created_at)
        state.metadata["idempotency"] = {
            "key": key,
            "replayed": False,
            "original_call_id": held.call_id,
            "started_at": started,
        }
        return error_outcome(
            state,
            ErrorCode.OUTCOME_UNKNOWN,
            f"Tool {state.tool.id} did not run: an earlier call with the same idempotency key "
            f"{key!r} (call {held.call_id}, started {started}) was cut off before it finished — "
            "the gateway running it stopped — so it may or may not have taken effect. Check "
            "whether it did before you act on it; for a new attempt, use a new idempotency key "
            "(change the values the key is built from).",
        )

    @staticmethod
    def _replay(state: CallState, key: str, held: IdempotencyRecord) -> CallOutcome:
        state.metadata["idempotency"] = {
            "key": key,
            "replayed": True,
            "original_call_id": held.call_id,
        }
        assert held.outcome is not None
        return outcome_from_record(
            held.outcome, tool_id=state.tool.id, call_id=state.call_id, metadata=state.metadata
        )

    @staticmethod
    def _conflict(state: CallState, key: str, held: IdempotencyRecord) -> CallOutcome:
        state.metadata["idempotency"] = {"key": key, "original_call_id": held.call_id}
        return error_outcome(
            state,
            ErrorCode.IDEMPOTENCY_CONFLICT,
            f"Tool {state.tool.id} did not run: its idempotency key {key!r} was already used by "
            f"call {held.call_id} with different arguments. Repeat that call's arguments exactly "
            "to get its result, or change the values the key is built from for a new call.",
        )


async def _wait(
    signal: concurrent.futures.Future[None] | None, timeout: float, *, inline: bool
) -> None:
    """Wait until ``signal`` is set or ``timeout`` passes, without cancelling ``signal`` (other
    callers wait on it too). ``inline``: block this thread, there is no event loop to yield to."""
    if inline:
        if signal is None:
            time.sleep(timeout)
        else:
            with suppress(concurrent.futures.TimeoutError):
                signal.result(timeout)
        return
    if signal is None:
        await asyncio.sleep(timeout)
        return
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: concurrent.futures.Future[None]) -> None:
        with suppress(RuntimeError):  # the waiter's loop is already closed
            loop.call_soon_threadsafe(_resolve, waiter)

    signal.add_done_callback(wake)
    with suppress(TimeoutError):
        await asyncio.wait_for(waiter, timeout)


def _iso(moment: float) -> str:
    """Unix seconds as ISO 8601 in UTC (``2025-01-31T12:00:00.123Z``)."""
    text = datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
