"""A pre-started script's end without its interpreter's teardown: the runtime shims.

A pre-started python3 or node process has already started when its call comes, so what is left
of the call is the script's own work — and the end of the process. Ending an interpreter is
slow and runs no code of the script: python3 frees every module (2-3 ms here), node disposes V8
and joins its threads (3-5 ms). For the runtimes listed in :data:`SHIMS` the pre-started
process runs the unchanged script through a small shim (``toolgate/worker_helpers/prestart_*``):

* **python3** — ``python3 prestart_python.py SCRIPT``: the script runs as ``__main__`` with the
  ``sys.argv``, ``sys.path[0]``, globals and tracebacks of ``python3 SCRIPT``; its end is
  Python's own up to the teardown (the exit code of ``SystemExit`` or of an uncaught exception,
  non-daemon threads joined, every ``atexit`` handler, the script's globals cleared so their
  ``__del__`` and unclosed files run and flush, the standard streams flushed, 120 when that
  fails); then the process reports its exit code.
* **node** — ``node --require prestart_node.cjs SCRIPT``: after the last ``'exit'`` listener
  has run, the exit code is final and stdout and stderr are written (synchronous pipes); the
  shim reports the code. After an uncaught exception (whose
  message node prints after ``'exit'``) it stays out of the way. While the process waits for
  its input, the shim creates ``process.stdout``/``process.stderr`` and runs the stream, JSON
  and console code once on objects of its own, so that V8 has compiled it before the call.

Either way the shim closes stdout and stderr, then writes the exit code on the status pipe of
:func:`~toolgate.backends.processes.spawn_process` and waits there, alive, until the runner has
killed the process tree (so what the script started is still attached to it for the tree's
walk) and closed the pipe; the teardown never runs. The runner answers from the status, gives
the output its grace period as after any exit, and reaps the process in the background. A
process that ends before its input came (a script that never reads it) does not wait. A shim
that cannot report (the script closed the pipe, a process ended by a signal) changes nothing:
the call ends at the process's exit as always.

The shim moves the status pipe to a close-on-exec descriptor of its own and checks that it is
still that pipe before writing (a script may close descriptors and reuse the number); only the
process it started reports (not a forked child); node's ``process.emit`` wrapper stays the
outermost one. Every difference from a fresh run that is left is listed in the guide
(``docs/guides/processes.md``, "How a pre-started python3 or node script ends").

What is not kept: python3's teardown of *imported* modules (a library's global objects are not
finalized — Python does not promise it either), and node's native add-ons' exit hooks.
``PrestartSettings(fast_exit=False)`` (``processes.prestart.fast_exit: false``) turns this off.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["SHIMS", "shimmed_argv"]

_HELPERS = Path(__file__).resolve().parent.parent / "worker_helpers"

#: The shim of each runtime that has one, and the arguments that load it before the script.
SHIMS: dict[str, tuple[str, ...]] = {
    "python": (str(_HELPERS / "prestart_python.py"),),
    "node": ("--require", str(_HELPERS / "prestart_node.cjs")),
}


def shimmed_argv(runtime: str, argv: Sequence[str]) -> list[str] | None:
    """``argv`` (``[program, SCRIPT]`` of ``runtime``) with the runtime's shim loaded before the
    script, or ``None`` when the runtime has no shim or the command is not that shape."""
    shim = SHIMS.get(runtime)
    if shim is None or len(argv) != 2:
        return None
    return [argv[0], *shim, argv[1]]
