"""The worker protocol: a tool process that stays up and answers one JSON line per call.

A tool folder that declares ``protocol: worker`` (toolgate's extension of the format) is started
once and kept: the gateway writes each call's input — the same JSON object a one-shot script
reads on stdin — as one line on the worker's stdin, and the worker answers with one line on
stdout, the same JSON object a one-shot script prints (``error`` for a failure,
``_visualization`` for people).
Whatever it writes to stderr is kept as the tail shown when a call fails.

A worker answers one call at a time; calls of the same tool that arrive together get more
workers, up to the tool's concurrency. Workers are kept per working directory and environment
(which the format fixes per call), and an idle worker is stopped after
:attr:`WorkerSettings.idle_timeout` seconds.

A worker that breaks the protocol is never trusted again: it is killed with everything it
started, that call ends with an error that says what happened, and the next call gets a new
worker. That covers a worker that exits or crashes during a call, that answers something that
is not one JSON object on one line, that answers two lines, that writes more than the output cap
without a newline, that writes to stdout between calls, and that does not answer before the
call's timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ToolError
from .base import ToolTimeoutError
from .prestart import PoolKey
from .process_tree import ProcessTree

__all__ = ["CALL_FIELD", "WorkerPool", "WorkerProtocolError", "WorkerSettings"]

#: Seconds a worker that closed its stdout gets to finish writing its stderr (a crash's message).
_LAST_WORDS = 5.0

#: Characters of a worker's stderr kept for the message of a failed call.
_STDERR_TAIL = 2_000
#: Characters of a bad answer quoted in the error message.
_QUOTE = 200
#: The field of each input line naming the call; the answer must carry it back unchanged.
CALL_FIELD = "_call"
#: Queued instead of a line when the worker wrote past the output cap without a newline.
_OVERRUN = b"\0overrun"


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """How long idle workers are kept."""

    idle_timeout: float = 300.0
    """Seconds an idle worker waits for its next call before it is stopped."""


class WorkerProtocolError(ToolError):
    """The worker broke the protocol; it has been stopped."""


class _Worker:
    """One worker process and its three pipes."""

    def __init__(self, proc: asyncio.subprocess.Process, spawned: float, max_output: int) -> None:
        self.proc = proc
        self.spawned = spawned
        self._loop = asyncio.get_running_loop()
        self.idle_since = time.monotonic()
        self.broken: str | None = None
        self._waiting = False
        """Whether a call waits for an answer: a line at any other time breaks the protocol."""
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        """Answer lines as they come; ``None`` at the end of stdout."""
        self._stderr: deque[str] = deque()
        self._stderr_chars = 0
        self._max_output = max_output
        self._readers = [
            asyncio.ensure_future(self._read_stdout()),
            asyncio.ensure_future(self._read_stderr()),
        ]

    @classmethod
    async def start(cls, key: PoolKey, max_output: int) -> _Worker:
        spawned = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *key.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=dict(key.env),
                cwd=key.cwd,
                pass_fds=key.pass_fds,
                start_new_session=True,
                limit=max(max_output, 1024),
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ToolError(
                f"Tool {key.tool_id}'s worker could not be started: {key.argv[0]!r}: {reason}"
            ) from None
        return cls(proc, spawned, max_output)

    # -- one call ---------------------------------------------------------------------------------

    async def call(self, tool_id: str, line: bytes, call: str) -> Any:
        """Send one input line and return the parsed answer; raise ``ToolError`` if it breaks
        the protocol (then it is stopped)."""
        if not self._lines.empty():
            self._fail("wrote to stdout while it had no call")
            raise _Stale
        self._stderr.clear()
        self._stderr_chars = 0
        stdin = self.proc.stdin
        assert stdin is not None
        self._waiting = True
        try:
            stdin.write(line + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # it exited: the answer below is the end of its output
        try:
            return await self._answer(tool_id, call)
        finally:
            self._waiting = False

    async def _answer(self, tool_id: str, call: str) -> Any:
        answer = await self._lines.get()
        if answer is _OVERRUN:
            raise self._broken_error(
                tool_id, f"wrote more than {self._max_output:,} bytes without ending the line"
            )
        if answer is None:
            # Its last words (a runtime's fatal error) may still be in the stderr pipe: the
            # reader ends when the process has closed it, however slowly a crash unwinds.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._readers[1]), _LAST_WORDS)
            await self.wait_exited()
            raise self._broken_error(tool_id, self._exit_reason())
        # A second line in the same write is already buffered: let the reader queue it.
        for _ in range(3):
            await asyncio.sleep(0)
        if not self._lines.empty():
            raise self._broken_error(tool_id, "answered with more than one line")
        text = answer.decode("utf-8", errors="replace").strip()
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            shown = text[:_QUOTE] + ("…" if len(text) > _QUOTE else "")
            raise self._broken_error(
                tool_id, f"answered with something that is not a JSON object: {shown!r}"
            )
        # The answer must name the call it answers: a late answer to an earlier call (which
        # could hold another session's data) is never taken for this one.
        answered = parsed.pop(CALL_FIELD, None)
        if answered != call:
            what = "did not echo" if answered is None else "answered another call's"
            raise self._broken_error(tool_id, f"{what} {CALL_FIELD!r}")
        self.idle_since = time.monotonic()
        return parsed

    def _broken_error(self, tool_id: str, what: str) -> WorkerProtocolError:
        self._fail(what)
        tail = self.stderr_tail()
        detail = f"; its stderr: {tail}" if tail else ""
        return WorkerProtocolError(
            f"Tool {tool_id}'s worker {what}, so it was stopped (the next call starts a new "
            f"one){detail}"
        )

    def _exit_reason(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "closed its stdout without answering"
        if code < 0:
            return f"was killed by signal {-code} during the call"
        return f"exited with code {code} during the call"

    async def wait_exited(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` seconds) until the process has ended and was reaped."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout)

    # -- the pipes --------------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while True:
                # The reader's limit is the output cap: a longer line raises ValueError.
                line = await stdout.readline()
                if not line:
                    break
                if not self._waiting:
                    # Output no call asked for (a late second answer, a stray print): it must
                    # never reach the next call, so the worker is not trusted again.
                    self._fail("wrote to stdout while it had no call")
                    break
                self._lines.put_nowait(line)
        except (ValueError, asyncio.LimitOverrunError):
            self._lines.put_nowait(_OVERRUN)
        finally:
            self._lines.put_nowait(None)

    async def _read_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        while True:
            chunk = await stderr.read(65536)
            if not chunk:
                return
            text = chunk.decode("utf-8", errors="replace")
            self._stderr.append(text)
            self._stderr_chars += len(text)
            while self._stderr_chars > _STDERR_TAIL and len(self._stderr) > 1:
                self._stderr_chars -= len(self._stderr.popleft())

    def stderr_tail(self) -> str:
        text = "".join(self._stderr).strip()
        return text if len(text) <= _STDERR_TAIL else "…" + text[-_STDERR_TAIL:]

    # -- the end ----------------------------------------------------------------------------------

    def _fail(self, why: str) -> None:
        if self.broken is None:
            self.broken = why
        self.stop()

    def stop(self) -> None:
        """Kill the worker and everything it started (its session), and close its pipes.

        Safe from another thread (a gateway is closed from wherever its owner is): the kill is
        signals only, and the pipes are closed by the worker's own event loop.
        """
        with contextlib.suppress(Exception):
            ProcessTree(self.proc.pid, self.spawned).kill()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._close_pipes()
            return
        with contextlib.suppress(RuntimeError):  # its loop is closed: nothing left to do
            self._loop.call_soon_threadsafe(self._close_pipes)
        if not self._loop.is_running():
            # Nobody else will reap it: the loop that started it has stopped (uvloop reaps in
            # its loop), and the killed process would stay a zombie.
            _reap(self.proc.pid)

    def _close_pipes(self) -> None:
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        for reader in self._readers:
            if not reader.done():
                reader.cancel()

    @property
    def alive(self) -> bool:
        return self.broken is None and self.proc.returncode is None


class _Stale(Exception):
    """The worker was found broken before the call was sent; another one takes the call."""


@dataclass(slots=True)
class _Workers:
    idle: list[_Worker] = field(default_factory=list)
    busy: int = 0


class WorkerPool:
    """The workers of ``protocol: worker`` tools, by :class:`PoolKey`, in one event loop."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self._workers: dict[PoolKey, _Workers] = {}
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False
        self._stopped: list[_Worker] = []
        self._calls = 0

    async def call(
        self,
        key: PoolKey,
        payload: Mapping[str, Any],
        *,
        timeout: float,
        max_output: int,
    ) -> Any:
        """Run one call on an idle worker of ``key`` (or a new one) and return its answer.

        On a timeout, a cancellation or a broken protocol the worker is stopped, never reused.
        """
        self._calls += 1
        call = f"{self._calls}"
        line = json.dumps({**payload, CALL_FIELD: call}, ensure_ascii=False).encode("utf-8")
        workers = self._workers.setdefault(key, _Workers())
        while True:
            worker = self._idle_worker(workers)
            if worker is None:
                worker = await _Worker.start(key, max_output)
            workers.busy += 1
            try:
                answer = await asyncio.wait_for(worker.call(key.tool_id, line, call), timeout)
            except _Stale:
                continue  # it never saw this call: try the next one
            except TimeoutError:
                worker._fail("did not answer in time")
                self._reap_later(worker)
                raise ToolTimeoutError(
                    f"Tool {key.tool_id} did not finish in time and was stopped."
                ) from None
            except BaseException:
                worker.stop()  # cancelled, or broke the protocol: never reused
                self._reap_later(worker)
                raise
            finally:
                workers.busy -= 1
            if worker.alive and not self._closed:
                workers.idle.append(worker)
                self._schedule_sweep()
            else:
                worker.stop()
            return answer

    def _reap_later(self, worker: _Worker) -> None:
        """Keep a stopped worker until :meth:`aclose` waits for it (a process reaped after its
        event loop closed would warn); those already reaped are dropped."""
        self._stopped = [w for w in self._stopped if w.proc.returncode is None]
        self._stopped.append(worker)

    def _idle_worker(self, workers: _Workers) -> _Worker | None:
        while workers.idle:
            worker = workers.idle.pop()  # the most recently used: its caches are warm
            if worker.alive:
                return worker
            worker.stop()
        return None

    def worker_count(self, tool_id: str | None = None) -> int:
        """Live workers (of ``tool_id``, or in all), idle or busy."""
        return sum(
            len([w for w in workers.idle if w.alive]) + workers.busy
            for key, workers in self._workers.items()
            if tool_id is None or key.tool_id == tool_id
        )

    def pids(self) -> list[int]:
        """The process ids of the live idle workers (for diagnostics and tests)."""
        return [
            worker.proc.pid
            for workers in self._workers.values()
            for worker in workers.idle
            if worker.alive
        ]

    def close(self) -> None:
        """Stop every idle worker (busy ones are stopped when their call ends)."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for workers in list(self._workers.values()):
            while workers.idle:
                worker = workers.idle.pop()
                worker.stop()
                self._stopped.append(worker)

    async def aclose(self) -> None:
        """:meth:`close`, then wait until the stopped workers are reaped."""
        self.close()
        stopped, self._stopped = self._stopped, []
        await asyncio.gather(*(worker.wait_exited() for worker in stopped))

    def _schedule_sweep(self) -> None:
        if self._sweep is None and not self._closed:
            loop = asyncio.get_running_loop()
            self._sweep = loop.call_later(self.settings.idle_timeout, self._expire)

    def _expire(self) -> None:
        self._sweep = None
        cutoff = time.monotonic() - self.settings.idle_timeout
        left = False
        for key, workers in list(self._workers.items()):
            keep = []
            for worker in workers.idle:
                if worker.idle_since <= cutoff or not worker.alive:
                    worker.stop()
                else:
                    keep.append(worker)
            workers.idle = keep
            left = left or bool(keep)
            if not keep and not workers.busy:
                del self._workers[key]  # a key not in use any more (a one-off workspace)
        if left:
            self._schedule_sweep()


def _reap(pid: int, timeout: float = 2.0) -> None:
    """Wait (briefly) for the killed process ``pid`` and collect its exit status."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:  # reaped already (by the loop's watcher), or not ours
            return
        time.sleep(0.01)
