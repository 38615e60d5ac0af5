# ruff: noqa: SIM105 - no contextlib: every import is paid by each tool process
"""Run an unchanged tool script as ``python3 SCRIPT`` would, and end it without the teardown.

The gateway starts a pre-started python3 tool as ``python3 THIS_FILE SCRIPT``. This file makes
the process the script's: ``sys.argv``, ``sys.path[0]`` and the ``__main__`` module are what
``python3 SCRIPT`` gives, and the script runs as ``__main__``. Its end is Python's own, in
Python's order: an uncaught exception prints its traceback and exits 1, ``SystemExit`` gives its
code, non-daemon threads are joined and every ``atexit`` handler runs. Then, instead of tearing
the interpreter down (freeing every module, 2-3 ms that no script can observe), it does what
Python's shutdown does that a script can observe — the script's own globals are cleared (their
``__del__`` methods run, unclosed files are flushed), the standard streams are flushed (a failure
is exit code 120) — closes its standard streams, writes its exit code on the status pipe the
gateway gave it (``TOOLGATE_STATUS_FD``) and waits there, alive, for the gateway to kill the
process tree (``os._exit`` if the pipe closes first). The gateway answers the call as soon as
that status and the end of the output arrive; the teardown never runs.

Not done, as Python does not promise it either: the teardown of *imported* modules (objects
that live in a library's globals are not finalized).
"""


def _run() -> None:
    # One function, and everything in it a local (imports included): the script's globals
    # replace this module's, as this module is ``__main__``; this frame outlives them.
    import _weakref
    import atexit
    import builtins
    import gc
    import os
    import sys
    from importlib.machinery import SourceFileLoader

    fd_text = os.environ.pop("TOOLGATE_STATUS_FD", "")
    status_fd = int(fd_text) if fd_text.isdigit() else -1
    status_id = None
    if status_fd >= 0:
        # Moved out of the script's way, to a high number never passed on to children (a script
        # that closes its descriptors and opens files may reuse the low one); recorded, so that
        # the status is written only into this very pipe.
        try:
            try:
                high = os.dup2(status_fd, 1000 + status_fd % 16, inheritable=False)
                os.close(status_fd)
                status_fd = high
            except OSError:  # a low limit of descriptors: where it is
                os.set_inheritable(status_fd, False)
            info = os.fstat(status_fd)
            status_id = (info.st_dev, info.st_ino)
        except OSError:
            status_fd = -1
    shim_pid = os.getpid()  # a forked child reports nothing: the status is this process's

    def _forget_status() -> None:
        nonlocal status_fd
        if status_fd >= 0 and os.getpid() != shim_pid:
            try:
                os.close(status_fd)
            except OSError:
                pass
            status_fd = -1

    os.register_at_fork(after_in_child=_forget_status)
    del sys.argv[0]
    # As given in sys.argv[0]; __file__ and tracebacks have it absolute, as Python does.
    script = os.path.abspath(sys.argv[0])
    # python3 SCRIPT puts the folder of the script (its symlinks resolved) first on sys.path.
    sys.path[0] = os.path.dirname(os.path.realpath(script))
    outcome = {"code": 0, "interrupted": False}
    # The interpreter's own objects are never garbage: the collection at the end then looks at
    # the script's objects only (1 ms less), as it finds the same garbage.
    gc.freeze()
    try:
        with open(script, "rb") as handle:
            source = handle.read()
    except OSError as exc:  # as Python says it, exit code 2
        print(
            f"{sys.orig_argv[0]}: can't open file {script!r}: [Errno {exc.errno}] {exc.strerror}",
            file=sys.stderr,
        )
        sys.stderr.flush()
        os._exit(2)
    # A __main__ module of its own, made after the freeze so that its globals can be collected.
    main = type(sys)("__main__")
    namespace = main.__dict__
    namespace.update(  # what Python's own __main__ holds when the script starts
        __annotations__={},
        __name__="__main__",
        __doc__=None,
        __package__=None,
        __loader__=SourceFileLoader("__main__", script),
        __spec__=None,
        __file__=script,
        __cached__=None,
        __builtins__=builtins,
    )
    sys.modules["__main__"] = main
    del main

    def _still_the_pipe() -> bool:
        try:
            info = os.fstat(status_fd)
        except OSError:
            return False
        return (info.st_dev, info.st_ino) == status_id

    def finish() -> None:
        # Registered before the script runs: called after every handler the script registers.
        # What the teardown does to the script's globals: the module leaves sys.modules, the
        # traceback kept for it and the exit handlers let go of it, and the garbage collector
        # finalizes what is left (every __del__ first, while the globals are still there).
        nonlocal namespace
        sys.last_type = sys.last_value = sys.last_traceback = None
        atexit._clear()
        sys.modules.pop("__main__", None)
        # Its loader, which only the globals hold, tells whether they outlive the collection.
        try:
            kept = _weakref.ref(namespace["__loader__"])
        except (KeyError, TypeError):
            kept = None
        del namespace
        gc.collect()
        loader = kept() if kept is not None else None
        if loader is not None:
            # Something still refers to them (a signal handler, a logging handler of a script's
            # class, sys.excepthook): as Python's teardown, clear them — names that begin with
            # "_" first, then the others, __builtins__ kept — and collect what is left.
            for held in gc.get_referrers(loader):
                if type(held) is dict and held.get("__loader__") is loader:
                    for underscore in (True, False):
                        for name in list(held):
                            if name != "__builtins__" and name.startswith("_") is underscore:
                                held[name] = None
                    break
            del loader, held
            gc.collect()
        code = outcome["code"]
        seen = set()
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            if stream is None or id(stream) in seen or getattr(stream, "closed", True):
                continue
            seen.add(id(stream))
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - as Python: the exit code becomes 120
                code = 120
        if outcome["interrupted"]:
            # An uncaught KeyboardInterrupt ends Python by SIGINT: a real signal, no status.
            import signal

            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        if status_fd >= 0 and os.getpid() == shim_pid and _still_the_pipe():
            # In a call the gateway has written the input and closed the pipe; a process that
            # ends before that (a script that never reads its input) ends at once, as always.
            in_call = True
            try:
                os.set_blocking(0, False)
                os.read(0, 1)
            except BlockingIOError:
                in_call = False
            except OSError:
                pass
            libc = None
            threads = sys.modules.get("threading")
            if in_call and threads is not None and threads.active_count() > 1:
                # Daemon threads still run. Python's teardown stops them (they never get the
                # GIL back); here the rest is done through libc with the GIL held, to the same
                # effect. (ctypes is imported only for such a script.)
                try:
                    import ctypes

                    libc = ctypes.PyDLL(None)  # its calls keep the GIL
                except (ImportError, OSError):
                    libc = None
            if libc is not None:
                libc.close(1)
                libc.close(2)
                line = b"%d\n" % (code & 0xFF)
                if libc.write(status_fd, line, len(line)) == len(line):
                    poll_fd = (ctypes.c_int * 2)(status_fd, 8)  # {fd, events=POLLERR, 0}
                    while libc.poll(poll_fd, 1, -1) == 0:
                        pass
                os._exit(code & 0xFF)
            for fd in (1, 2):
                try:
                    os.close(fd)
                except OSError:
                    pass
            try:
                os.write(status_fd, b"%d\n" % (code & 0xFF))
                if in_call:
                    # Then wait, alive, for the gateway to kill the tree (it closes this pipe
                    # once it has; the write end then reports an error): what the script
                    # started stays attached to this process meanwhile, so the gateway's walk
                    # of the tree finds it.
                    import select

                    waiting = select.poll()
                    waiting.register(status_fd, select.POLLERR)
                    while not waiting.poll():
                        pass
            except OSError:
                pass
        os._exit(code & 0xFF)

    atexit.register(finish)
    # The exit code of an end that does not come back here (an error in sys.excepthook).
    outcome["code"] = 1
    try:
        # Compiled here: a SyntaxError is printed as python3 SCRIPT prints it.
        code = compile(source, script, "exec", dont_inherit=True)
        del source
        exec(code, namespace)  # the tool's own script, as python3 SCRIPT runs it
    except SystemExit as exc:
        value = exc.code
        if value is None:
            outcome["code"] = 0
        elif isinstance(value, int):
            outcome["code"] = value
        else:  # as Python: the value is printed and the exit code is 1
            try:
                print(value, file=sys.stderr)
            except Exception:  # noqa: BLE001
                pass
            outcome["code"] = 1
    except BaseException as exc:  # noqa: BLE001 - printed and made the exit code, as Python
        # Without this file's frame: the traceback python3 SCRIPT prints.
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        exc.with_traceback(tb)  # what is printed is the exception's own traceback
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        outcome["interrupted"] = isinstance(exc, KeyboardInterrupt)
        try:
            sys.excepthook(type(exc), exc, tb)
        except SystemExit as hook_exit:  # as Python: the hook's exit is the process's
            outcome["interrupted"] = False
            value = hook_exit.code
            outcome["code"] = value if isinstance(value, int) else 0 if value is None else 1
        except BaseException as hook_exc:  # noqa: BLE001 - as Python reports it
            hook_tb = hook_exc.__traceback__
            hook_tb = hook_tb.tb_next if hook_tb is not None else None
            hook_exc.with_traceback(hook_tb)
            hook_exc.__context__ = None  # raised from C in python3 SCRIPT: no context
            try:
                print("Error in sys.excepthook:", file=sys.stderr)
                sys.__excepthook__(type(hook_exc), hook_exc, hook_tb)
                print("\nOriginal exception was:", file=sys.stderr)
                sys.__excepthook__(type(exc), exc, tb)
            except BaseException:  # noqa: BLE001
                pass
            del hook_exc, hook_tb
        del tb, exc
    else:
        outcome["code"] = 0


if __name__ == "__main__":  # never when imported
    _run()
