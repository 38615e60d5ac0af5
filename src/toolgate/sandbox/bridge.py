"""The network bridge inside a sandbox: ``127.0.0.1:<port>`` → the call's egress proxy socket.

This file is a standalone program (standard library only, no toolgate imports): it runs INSIDE the
tool's network namespace, where the only interface is loopback, as the parent of the tool::

    python3 -I -S -c <this source> <socket> <port> -- <command> [args...]

It listens on ``127.0.0.1:<port>``, forwards every TCP connection to the Unix socket of the egress
proxy (bind-mounted into the sandbox), starts the tool with ``HTTP_PROXY``, ``HTTPS_PROXY``,
``http_proxy``, ``https_proxy`` and ``ALL_PROXY`` pointing at that port, and exits with the
tool's exit code (128 + N when a signal N ended it). The tool runs in its own process group,
which is killed when the tool exits or when the bridge is asked to stop (SIGTERM, SIGINT,
SIGHUP), so no child of the tool outlives the bridge; a grandchild that calls ``setsid()`` escapes
the group but not the sandbox's PID namespace, which ends with it.

:func:`bridge_argv` (for the gateway) passes the source with ``-c`` so nothing has to be mounted.
It uses the C modules (``_socket``, ``_thread``, ``_signal``) and ``fork``/``exec`` rather than
``socket``, ``threading`` and ``subprocess``: their imports cost more than the rest of its start.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # no stub; 'signal' would import enum
import _socket
import _thread
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # no typing import at run time: the bridge starts with every call
    from collections.abc import Sequence

__all__ = ["bridge_argv", "main"]

_CHUNK = 65536


def bridge_argv(
    python: str, socket_in_sandbox: str, port: int, command: Sequence[str]
) -> list[str]:
    """The command line that runs the bridge with ``python`` (an interpreter visible inside the
    sandbox), forwarding ``127.0.0.1:port`` to ``socket_in_sandbox`` and running ``command``."""
    if not command:
        raise ValueError("the bridge needs a command to run")
    if not 0 < port < 65536:
        raise ValueError(f"bridge port {port} is not a TCP port")
    from pathlib import Path  # here, not at the top: the bridge itself starts faster without it

    source = Path(__file__).read_text(encoding="utf-8")
    return [python, "-I", "-S", "-c", source, socket_in_sandbox, str(port), "--", *command]


def _pump(src: _socket.socket, dst: _socket.socket, done: _thread.LockType | None) -> None:
    try:
        while True:
            data = src.recv(_CHUNK)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:  # noqa: SIM105 - contextlib would cost the bridge an import
            dst.shutdown(_socket.SHUT_WR)  # pass the half-close on
        except OSError:
            pass
        if done is not None:
            done.release()


def _serve_one(client: _socket.socket, path: str) -> None:
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    done = _thread.allocate_lock()
    done.acquire()
    _thread.start_new_thread(_pump, (upstream, client, done))
    _pump(client, upstream, None)
    done.acquire()  # the way back has finished too
    client.close()
    upstream.close()


def _accept_loop(listener: _socket.socket, path: str) -> None:
    while True:
        try:
            fd, _address = listener._accept()  # type: ignore[attr-defined]  # not in the stub
        except OSError:
            return
        client = _socket.socket(fileno=fd)
        _thread.start_new_thread(_serve_one, (client, path))


def _kill_group(pid: int) -> None:
    try:  # noqa: SIM105 - contextlib would cost the bridge an import
        os.killpg(pid, _signal.SIGKILL)
    except OSError:
        pass  # already gone


def _spawn(command: list[str], env: dict[str, str]) -> int:
    """Start ``command`` in a new session (its own process group); the child's pid."""
    pid = os.fork()
    if pid == 0:  # the child: only async-signal-safe work until exec (no threads run yet)
        try:
            os.setsid()
            os.execvpe(command[0], command, env)
        except OSError as exc:
            os.write(2, f"cannot start {command[0]!r}: {exc}\n".encode(errors="replace"))
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    return pid


def main(argv: Sequence[str]) -> int:
    """Run the bridge (``argv`` without the program name); returns the tool's exit code."""
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: bridge <socket> <port> -- <command> [args...]\n")
        return 2
    path, port_text, command = argv[0], argv[1], list(argv[3:])
    if not port_text.isdigit() or not 0 < int(port_text) < 65536 or not command:
        sys.stderr.write(f"bridge: bad port {port_text!r} or no command\n")
        return 2
    port = int(port_text)
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    proxy = f"http://127.0.0.1:{port}"
    env = dict(os.environ)
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        env[key] = proxy
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    # Listening before the fork: the tool's first connection cannot race the bridge. The
    # listener is not inherited (Python sockets are close-on-exec).
    pid = _spawn(command, env)
    _thread.start_new_thread(_accept_loop, (listener, path))

    def stop(signum: int, _frame: object) -> None:
        _kill_group(pid)
        os._exit(128 + signum)

    for signum in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(signum, stop)
    _, status = os.waitpid(pid, 0)
    _kill_group(pid)  # children the tool left in its group
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    os._exit(main(sys.argv[1:]))
