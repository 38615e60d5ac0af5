"""Run one tool script as a subprocess: bytes in on stdin, bytes out, and nothing left behind.

Script tools (tool folders whose implementation is a program) run one process per call: the
arguments go in as one JSON object on stdin and the result comes back on stdout.
:func:`run_process` is the runner under them. It is plain bytes in, bytes out; encoding and
decoding JSON is the caller's business.

The contract
============

* The program gets exactly the environment it is given (``os.environ`` is never inherited), the
  working directory it is given, and ``stdin`` followed by end of file. A program that never
  reads its stdin is fine.
* stdout and stderr are read concurrently, each up to ``max_output`` bytes. A stream that goes
  past the cap ends the call (``output_exceeded``); what was read up to the cap is returned.
  Memory stays bounded by the caps plus one read chunk per stream.
* After ``timeout`` seconds the call ends (``timed_out``).
* **Nothing a tool started outlives its call.** When the call ends, whether the program exited,
  timed out, exceeded its output cap or the awaiting task was cancelled, every process it started
  that is still alive is killed with ``SIGKILL``: its process group, its descendants, including
  those that called ``setsid()`` or double-forked into the background. The program is always
  reaped, so no zombie is left either.
* A program that exits while a background process still holds its stdout or stderr open does not
  make the call wait for that process: after the program exits its output gets a short grace
  period (:data:`EXIT_GRACE`) to reach end of file, then the remaining processes are killed.

Pipes
=====

The runner makes the three pipes itself (``os.pipe``) and watches them with ``add_reader`` and
``add_writer`` instead of using asyncio's pipe transports: with those, ``Process.wait()`` also
waits for the pipes to close, so a background process holding stdout would hide the program's
exit. Here ``Process.wait()`` is the program's exit, reads are made one chunk at a time (a stream
stops being read the moment it passes its cap) and the runner can close its ends whenever it must.

Cleaning up (Linux)
===================

The program is started with ``start_new_session=True``, so it leads a new session and process
group; everything it forks stays in that group and session unless it calls ``setsid()`` or
``setpgid()``. Its descendants are found by scanning ``/proc`` and killed without ever signalling
a reused pid, by :mod:`toolgate.backends.process_tree` (see there for how).

A process whose parent exits is reparented to init and drops out of a walk from the program. To
still catch it, the runner *tracks* descendants while the program runs: a first snapshot
:data:`FIRST_SNAPSHOT` seconds after the start, then one every :data:`SNAPSHOT_INTERVAL` seconds,
each merged into the tracked set. A program that finishes before the first snapshot pays for no
polling at all. Scans are shared by concurrent calls: a snapshot reuses a scan of the process
table made less than :data:`~toolgate.backends.process_tree.SCAN_MAX_AGE` seconds earlier (and
after the call started).

At the end of the call the tree is frozen, then killed: ``SIGSTOP`` to the process group and to
every descendant found, until a fresh scan finds nothing new; then ``SIGKILL`` to all of them.

A process that escaped the walk but still holds stdout or stderr open is found by the pipe it
holds: when the output does not reach end of file :data:`HOLDER_SCAN_DELAY` seconds after the
kill (at once when the call is cancelled; always after a stream passed its cap, since it is not
read to the end), the runner looks through ``/proc/*/fd`` for the pipes and kills the holders and
what they started the same way. If end of file still does not come (a holder the runner may not
inspect), it closes its ends of the pipes after :data:`DRAIN_AFTER_KILL` seconds: the call always
returns.

Limits: a process that leaves the program's session, lets go of the output pipes *and* is
orphaned before the first snapshot (a daemon that double-forks and redirects its output within
the first 20 ms) cannot be linked to the call and escapes. Where that matters, run tools in a
container or a cgroup of their own.

Without ``/proc`` (macOS, BSD) the runner kills the process group only.

The status pipe
===============

A program started with ``status=True`` gets one more pipe, named to it by the environment
variable :data:`STATUS_ENV` (the runtime shims of :mod:`toolgate.backends.fast_exit` take it out
of the environment before the script runs). A program whose result is final — every exit
handler has run, its output is flushed and its stdout and stderr are closed — writes its exit
code there as one line (``"0\n"``) and waits, alive, until the runner closes the pipe. The
runner takes that line for the program's exit: the output gets its grace period as after an
exit, the tree is killed as always (the program still alive, so what it started is still
attached to it), then the pipe is closed, and the result carries the reported code; the killed
process is reaped in the background (:func:`reap_pending` waits for those). A first line that
is not an exit code, or none, changes nothing: the exit status comes from the process as usual.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import process_tree
from .process_status import STATUS_ENV, StatusPipe, reap_later, reap_pending
from .process_tree import ProcessTree, pipe_holders

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "STATUS_ENV",
    "ProcessResult",
    "ProcessStartError",
    "StartedProcess",
    "reap_pending",
    "run_process",
    "spawn_process",
]

#: Default cap per stream, in bytes.
DEFAULT_MAX_OUTPUT = 10 * 1024 * 1024
#: Seconds the output may take to reach end of file once the program itself has exited.
EXIT_GRACE = 0.2
#: Seconds to wait for end of file on the output after the tree was killed, before looking for
#: processes that hold the output pipes although the walk did not find them.
HOLDER_SCAN_DELAY = 0.1
#: Seconds to wait for end of file after that; then the runner closes its ends of the pipes.
DRAIN_AFTER_KILL = 0.5
#: Seconds after the start at which descendants are first recorded.
FIRST_SNAPSHOT = 0.02
#: Seconds between later records of the descendants.
SNAPSHOT_INTERVAL = 0.15

_CHUNK = 64 * 1024


class ProcessStartError(Exception):
    """The program could not be started (not found, permission denied, exec format error...)."""


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """What one run of a program produced."""

    #: The exit status; ``None`` when the program was ended by a signal (ours included).
    exit_code: int | None
    #: Standard output, at most ``max_output`` bytes (the first ones when it was cut).
    stdout: bytes
    #: Standard error, at most ``max_output`` bytes (the first ones when it was cut).
    stderr: bytes
    #: True when the program was still running at the timeout and was killed.
    timed_out: bool
    #: ``"stdout"`` or ``"stderr"`` when that stream went past the cap (the program was killed).
    output_exceeded: str | None
    #: Seconds from the start to the end of the call, cleanup included.
    duration: float
    #: The signal that ended the program, if one did.
    signal: int | None


async def run_process(
    argv: Sequence[str],
    *,
    stdin: bytes,
    env: Mapping[str, str],
    cwd: Path | None,
    timeout: float,
    max_output: int = DEFAULT_MAX_OUTPUT,
    pass_fds: Sequence[int] = (),
    status: bool = False,
) -> ProcessResult:
    """Run ``argv`` with ``stdin`` as its input and return what it wrote and how it ended.

    ``env`` is the complete environment of the program; ``cwd`` its working directory (``None``:
    the current one); ``pass_fds`` descriptors it inherits besides its pipes (a sandbox's
    ``--bind-fd`` folders). After ``timeout`` seconds, or as soon as stdout or stderr goes past
    ``max_output`` bytes, the program and everything it started is killed. When the call ends
    for any reason, including cancellation of the awaiting task, no process the program started
    is left running (see the module documentation for how, and for the limits). ``status``:
    give the program a status pipe (see the module documentation).

    Raises :class:`ProcessStartError` when the program cannot be started.
    """
    if max_output < 0:
        raise ValueError(f"max_output must be >= 0, not {max_output}")
    started = await spawn_process(argv, env=env, cwd=cwd, pass_fds=pass_fds, status=status)
    return await started.run(stdin, timeout=timeout, max_output=max_output)


async def spawn_process(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None,
    pass_fds: Sequence[int] = (),
    status: bool = False,
) -> StartedProcess:
    """Start ``argv`` with its three pipes, but give it no input yet.

    The program runs (an interpreter starts and imports) and then waits for its stdin until
    :meth:`StartedProcess.run` gives it one; :func:`run_process` is this plus that, at once.
    ``status``: give it a status pipe too (see the module documentation).
    Raises :class:`ProcessStartError` when the program cannot be started.
    """
    if not argv:
        raise ProcessStartError("cannot start a process: argv is empty")
    spawned = time.monotonic()
    stdin_read, stdin_write = os.pipe()
    stdout_read, stdout_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    child_ends = [stdin_read, stdout_write, stderr_write]
    parent_ends = [stdin_write, stdout_read, stderr_read]
    env = dict(env)
    inherited = tuple(pass_fds)
    status_fd = -1
    if status:
        status_fd, status_write = os.pipe()
        child_ends.append(status_write)
        parent_ends.append(status_fd)
        env[STATUS_ENV] = str(status_write)
        inherited += (status_write,)
    try:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin_read,
                stdout=stdout_write,
                stderr=stderr_write,
                env=env,
                cwd=cwd,
                start_new_session=True,
                pass_fds=inherited,
            )
        finally:
            for fd in child_ends:
                os.close(fd)
    except OSError as exc:
        _close_all(parent_ends)
        raise ProcessStartError(_start_error_message(argv, cwd, exc)) from exc
    except BaseException:
        _close_all(parent_ends)
        raise
    return StartedProcess(
        proc,
        spawned=spawned,
        stdin_fd=stdin_write,
        stdout_fd=stdout_read,
        stderr_fd=stderr_read,
        status_fd=status_fd,
    )


class StartedProcess:
    """A started program waiting for its input: used by exactly one :meth:`run`, or discarded.

    Everything :func:`run_process` promises holds for the run: the timeout counts from the
    moment :meth:`run` is called, and what the program started meanwhile belongs to the run's
    process tree (it is in the program's session).
    """

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        *,
        spawned: float,
        stdin_fd: int,
        stdout_fd: int,
        stderr_fd: int,
        status_fd: int = -1,
    ) -> None:
        self.pid = proc.pid
        """The program's process id."""
        self.spawned = spawned
        """When it was started (``time.monotonic()``)."""
        self._proc = proc
        self._fds: tuple[int, int, int, int] | None = (stdin_fd, stdout_fd, stderr_fd, status_fd)
        self._exit: asyncio.Future[int] = asyncio.ensure_future(proc.wait())
        self.setup: Any = None
        """What was prepared for the program (a warm sandbox's command), if anything."""
        self._release: Callable[[], Awaitable[None]] | None = None

    def attach(self, setup: Any, release: Callable[[], Awaitable[None]]) -> None:
        """Keep ``setup`` with the program; ``release`` undoes it once the program is done."""
        self.setup = setup
        self._release = release

    async def release(self) -> None:
        """Undo what was prepared for the program (after its run, or after discarding it)."""
        release, self._release = self._release, None
        if release is not None:
            await release()

    @property
    def exited(self) -> bool:
        """Whether the program has already ended (it will not read an input any more)."""
        return self._exit.done()

    async def run(self, stdin: bytes, *, timeout: float, max_output: int) -> ProcessResult:
        """Give the program ``stdin`` and supervise it to its end, as :func:`run_process`."""
        if max_output < 0:
            raise ValueError(f"max_output must be >= 0, not {max_output}")
        if self._fds is None:
            raise RuntimeError("this process was already used or discarded")
        stdin_fd, stdout_fd, stderr_fd, status_fd = self._fds
        self._fds = None
        call = _Call(
            self._proc,
            exit=self._exit,
            spawned=self.spawned,
            started=time.monotonic(),
            stdin_fd=stdin_fd,
            stdout_fd=stdout_fd,
            stderr_fd=stderr_fd,
            status_fd=status_fd,
            max_output=max_output,
        )
        return await call.run(stdin, timeout)

    async def wait_exited(self, timeout: float = 1.0) -> None:
        """Wait (at most ``timeout`` seconds) until the program has ended and was reaped."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._exit), timeout)

    def discard(self) -> None:
        """Kill the program and everything it started, and close the pipes (never used)."""
        fds, self._fds = self._fds, None
        if fds is None:
            return
        with contextlib.suppress(Exception):
            ProcessTree(self._proc.pid, self.spawned).kill()
        # Thread-safe (a gateway may be closed from another thread): signals and closing file
        # descriptors only; the event loop's child watcher reaps the process.
        _close_all([fd for fd in fds if fd >= 0])


def _start_error_message(argv: Sequence[str], cwd: Path | None, exc: OSError) -> str:
    reason = exc.strerror or str(exc)
    if exc.errno is not None and exc.errno in errno.errorcode:
        reason = f"{reason} ({errno.errorcode[exc.errno]})"
    filename = os.fsdecode(exc.filename) if exc.filename is not None else None
    if cwd is not None and filename == os.fspath(cwd) and filename != argv[0]:
        return f"cannot start {argv[0]!r}: working directory {filename!r}: {reason}"
    return f"cannot start {argv[0]!r}: {reason}"


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class _Stream:
    """One output pipe read into a capped buffer."""

    __slots__ = ("buffer", "done", "eof", "fd", "name")

    def __init__(self, name: str, fd: int) -> None:
        self.name = name
        self.fd = fd
        self.buffer = bytearray()
        #: True at end of file, or once the cap was passed (then no more is read).
        self.done = False
        #: True at end of file: no process holds the pipe any more.
        self.eof = False


class _Call:
    """The state of one :func:`run_process` call once the program runs."""

    def __init__(
        self,
        proc: asyncio.subprocess.Process,
        *,
        exit: asyncio.Future[int],
        spawned: float,
        started: float,
        stdin_fd: int,
        stdout_fd: int,
        stderr_fd: int,
        max_output: int,
        status_fd: int = -1,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._proc = proc
        # The timeout and the duration count from the call; the process tree from the spawn
        # (a pre-started program may have started processes before its input came).
        self._started = started
        self._max_output = max_output
        self._stdout = _Stream("stdout", stdout_fd)
        self._stderr = _Stream("stderr", stderr_fd)
        self._stdin_fd: int | None = stdin_fd
        self._stdin_data = memoryview(b"")
        self._exceeded: str | None = None
        self._wake: asyncio.Future[None] | None = None
        self._tree = ProcessTree(proc.pid, spawned)
        self._snapshot_handle: asyncio.TimerHandle | None = None
        self._exit = exit
        self._status = StatusPipe(self._loop, status_fd, self._notify) if status_fd >= 0 else None

    async def run(self, stdin: bytes, timeout: float) -> ProcessResult:
        try:
            self._start_io(stdin)
            if process_tree.HAVE_PROC:
                self._snapshot_handle = self._loop.call_later(FIRST_SNAPSHOT, self._snapshot)
            timed_out = await self._supervise(timeout)
            self._stop_snapshots()
            self._stop_stdin()
            self._tree.kill()
            await self._drain(HOLDER_SCAN_DELAY)
            self._kill_pipe_holders()
            await self._drain(DRAIN_AFTER_KILL)
        except BaseException:
            # Cancelled (or a bug): nothing may outlive the call, so kill, reap, re-raise.
            self._abort()
            await self._reap()
            raise
        finally:
            self._close_io()
        reported = self._reported()
        if reported is not None and not timed_out and self._exceeded is None:
            # The program's result was final when it reported it, and its tree was killed: it
            # is reaped in the background, not on the call's path.
            reap_later(self._loop, self._exit)
            returncode = reported
        else:
            returncode = await self._reap()
        return ProcessResult(
            exit_code=returncode if returncode >= 0 else None,
            stdout=bytes(self._stdout.buffer),
            stderr=bytes(self._stderr.buffer),
            timed_out=timed_out,
            output_exceeded=self._exceeded,
            duration=time.monotonic() - self._started,
            signal=-returncode if returncode < 0 else None,
        )

    # -- supervision -------------------------------------------------------------------------

    async def _supervise(self, timeout: float) -> bool:
        """Wait for the end of the program; return True when it timed out.

        Returns as soon as an output stream passed its cap; when the program exited and both
        streams reached end of file; when the program exited and the grace period for its output
        is over; or at the timeout.
        """
        deadline = self._started + timeout
        exited_at: float | None = None
        while True:
            if self._exceeded is not None:
                return False
            now = time.monotonic()
            if exited_at is None and (self._exit.done() or self._reported() is not None):
                exited_at = now
            if exited_at is not None:
                if self._stdout.done and self._stderr.done:
                    return False
                until = exited_at + EXIT_GRACE
                if now >= until:
                    return False
            else:
                if now >= deadline:
                    return True
                until = deadline
            wake = self._loop.create_future()
            self._wake = wake
            waitables: list[asyncio.Future[None] | asyncio.Future[int]] = [wake]
            if exited_at is None:
                waitables.append(self._exit)
            try:
                await asyncio.wait(
                    waitables, timeout=until - now, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                self._wake = None
                wake.cancel()

    def _notify(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    async def _drain(self, limit: float) -> None:
        """Let the output reach end of file (the writers were killed), for at most ``limit`` s."""
        if self._stdout.done and self._stderr.done:
            return
        until = time.monotonic() + limit
        while not (self._stdout.done and self._stderr.done):
            remaining = until - time.monotonic()
            if remaining <= 0:
                return
            wake = self._loop.create_future()
            self._wake = wake
            try:
                await asyncio.wait([wake], timeout=remaining)
            finally:
                self._wake = None
                wake.cancel()

    async def _reap(self) -> int:
        # The program is dead or dying: it leads its process group (a session leader cannot
        # leave it), which was sent SIGKILL. Not ``proc.kill()``: Popen polls first, which can
        # reap the child under the event loop's child watcher.
        # Shielded: if the task is cancelled (again) here, the wait goes on and the exit status
        # is still collected; the event loop's child watcher reaps the process either way.
        return await asyncio.shield(self._exit)

    def _abort(self) -> None:
        self._stop_snapshots()
        self._stop_stdin()
        with contextlib.suppress(Exception):
            self._tree.kill()
            # No waiting for end of file here: look for holders of the pipes at once.
            self._kill_pipe_holders()
        self._close_io()

    def _kill_pipe_holders(self) -> None:
        """Kill what still holds an output pipe although the walk did not find it.

        That is a process that left the session and was orphaned before it could be tracked;
        the pipe it inherited gives it away. Whatever it started is killed with it. Costs a look
        at every ``/proc/<pid>/fd`` (~2 ms for 100 processes), so only done when an output pipe
        has not reached end of file (or was not read to the end: the cap was passed).
        """
        if not process_tree.HAVE_PROC:
            return
        inodes = self._open_pipe_inodes()
        if inodes and self._tree.adopt(pipe_holders(inodes)):
            self._tree.kill()

    # -- descendants -------------------------------------------------------------------------

    def _snapshot(self) -> None:
        self._snapshot_handle = None
        if self._exit.done():
            return
        self._tree.snapshot()
        self._snapshot_handle = self._loop.call_later(SNAPSHOT_INTERVAL, self._snapshot)

    def _stop_snapshots(self) -> None:
        if self._snapshot_handle is not None:
            self._snapshot_handle.cancel()
            self._snapshot_handle = None

    # -- pipes -------------------------------------------------------------------------------

    def _start_io(self, stdin: bytes) -> None:
        for stream in (self._stdout, self._stderr):
            os.set_blocking(stream.fd, False)
            self._loop.add_reader(stream.fd, self._on_readable, stream)
        if self._status is not None:
            self._status.start()
        assert self._stdin_fd is not None
        os.set_blocking(self._stdin_fd, False)
        self._stdin_data = memoryview(stdin)
        self._write_stdin()
        if self._stdin_fd is not None:
            self._loop.add_writer(self._stdin_fd, self._write_stdin)

    def _write_stdin(self) -> None:
        fd = self._stdin_fd
        if fd is None:
            return
        while self._stdin_data:
            try:
                written = os.write(fd, self._stdin_data)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError:
                # BrokenPipeError, ConnectionResetError: the program does not read its stdin.
                break
            self._stdin_data = self._stdin_data[written:]
        self._stop_stdin()

    def _stop_stdin(self) -> None:
        fd = self._stdin_fd
        if fd is None:
            return
        self._stdin_fd = None
        self._stdin_data = memoryview(b"")
        self._loop.remove_writer(fd)
        with contextlib.suppress(OSError):
            os.close(fd)

    def _on_readable(self, stream: _Stream) -> None:
        try:
            data = os.read(stream.fd, _CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            stream.eof = True
            self._finish_stream(stream)
            return
        room = self._max_output - len(stream.buffer)
        if len(data) > room:
            stream.buffer += data[:room]
            if self._exceeded is None:
                self._exceeded = stream.name
            # Stop reading but keep the pipe open, so the writer blocks rather than dying of
            # SIGPIPE: it is killed by us and the result tells so.
            self._finish_stream(stream)
            return
        stream.buffer += data

    def _reported(self) -> int | None:
        """The exit code the program reported on its status pipe (``None``: none, not valid)."""
        return self._status.reported if self._status is not None else None

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.close()

    def _finish_stream(self, stream: _Stream) -> None:
        if not stream.done:
            stream.done = True
            self._loop.remove_reader(stream.fd)
            self._notify()

    def _open_pipe_inodes(self) -> set[int]:
        """The inodes of the output pipes that may still have a writer."""
        inodes: set[int] = set()
        for stream in (self._stdout, self._stderr):
            if stream.fd >= 0 and not stream.eof:
                with contextlib.suppress(OSError):
                    inodes.add(os.fstat(stream.fd).st_ino)
        return inodes

    def _close_io(self) -> None:
        self._stop_stdin()
        self._stop_status()  # after the tree's kill: a shim waiting on it ends now
        for stream in (self._stdout, self._stderr):
            if stream.fd < 0:
                continue
            if not stream.done:
                stream.done = True
                self._loop.remove_reader(stream.fd)
            with contextlib.suppress(OSError):
                os.close(stream.fd)
            stream.fd = -1
