"""Runtimes outside the system folders: the real interpreter, found before the sandbox starts.

A compartment tool's runtime is found on ``PATH`` like a host tool's. On a developer machine that
is often not the interpreter but a *shim*: ``~/.pyenv/shims/python3`` is a bash script that runs
``~/.pyenv/libexec/pyenv exec python3``; asdf, mise, volta, rbenv and Homebrew's wrappers do the
same in their own ways. Inside the sandbox the shim's manager is not there (the user's home is
never bound), and the call used to end with ``exit 127`` and the shim's message.

How the real program is found, and why this way: a shim manager decides which interpreter runs
(pyenv's ``.python-version`` and ``PYENV_VERSION``, asdf's ``.tool-versions``, mise's config,
volta's pins…) and each decides differently, so reading shim scripts or asking each manager
(``pyenv which``, ``asdf which``) would cover only the managers known here, and only until they
change. Every runtime, once started, can say which program it is (``sys.executable``,
``process.execPath``, ``$BASH``, ``go env GOROOT``: :attr:`~toolgate.runtimes.Runtime.where`),
whatever chain of shims and wrappers led there. So the program is run once, outside the sandbox,
with that question:

* only for a program found on the tool's ``PATH`` (an absolute entry) under a runtime's name,
  never one inside the tool's own folder or the workspace (a ``PATH`` that leads there would
  otherwise run the tool's code on the host), and only when it is not already a native program
  inside the system folders (``/usr/bin/python3`` needs nothing);
* from ``/`` (no project's version file, no ``bunfig.toml`` of a tool folder), with only
  ``PATH``, ``HOME``, ``USER``, ``LOGNAME`` and the locale of the tool's environment, never a
  variable the tool declared; so the interpreter is the one the gateway's environment selects
  outside any project;
* cached per gateway process (a shim costs 0.1–0.3 s).

Its answer becomes the command's program, and its installation root
(:func:`~toolgate.sandbox.bwrap.install_root`: ``~/.pyenv/versions/3.11.7``, ``~/.nvm/versions/
node/v20.11.0``; for a virtual environment the environment and its base) is bound read-only, and
nothing more. Then the same question is asked *inside* a sandbox with those binds (and the
operator's ``sandbox.system_paths``): a runtime that needs more (Homebrew's own dynamic loader,
libraries elsewhere) answers differently or not at all, and is reported as not containable.

A runtime that cannot be contained (no answer, an answer that is not a native program, an
installation root that is or contains the gateway user's home folder or a kernel filesystem, a
failed start inside) makes its tools unavailable with the reason, at load and on ``toolgate
sandbox check``; it never runs into an ``exit 127``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..runtimes import Runtime, runtime_of_program
from .bwrap import SYSTEM_ROOTS, BwrapSpec, bwrap_argv, install_root, kernel_bind_problem

__all__ = [
    "ContainedProgram",
    "contain_program",
    "contained_before",
    "forget_programs",
    "resolved_folders",
]

#: Seconds a runtime may take to say which program it is (a cold shim manager is slow).
WHERE_TIMEOUT = 30.0
#: The variables of the tool's environment the question outside the sandbox is asked with.
WHERE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL")

_CACHE: dict[tuple[str | None, str, str, str, str, tuple[Path, ...]], ContainedProgram] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class ContainedProgram:
    """How a program runs in a sandbox."""

    program: str
    """The program to start (the real interpreter, when ``found`` was a shim)."""
    found: str
    """The program as found on ``PATH``."""
    read_only: tuple[Path, ...] = ()
    """The folders to bind read-only for it (its installation root)."""
    problem: str | None = None
    """Why it cannot run in a sandbox (``None``: it can), naming the runtime and the cause."""

    def describe(self) -> str:
        """One line for people (``toolgate sandbox check``)."""
        if self.problem is not None:
            return f"CANNOT be contained: {self.problem}"
        found = f" (found as {self.found})" if self.program != self.found else ""
        binds = ", ".join(map(str, self.read_only))
        return self.program + found + (f"; binds {binds} read-only" if binds else "")


def contain_program(
    bwrap: str | None,
    program: str,
    env: Mapping[str, str],
    *,
    sandbox_env: Mapping[str, str],
    system_paths: Sequence[Path] = (),
    untrusted: Sequence[Path] = (),
) -> ContainedProgram:
    """How ``program`` (a command's first word, as found on ``env``'s ``PATH``) runs in a
    sandbox started with ``bwrap`` (see the module documentation; ``None``: the Landlock layer,
    where it is not asked again inside). ``sandbox_env`` is the
    environment of a sandboxed process; ``system_paths`` the operator's extra read-only
    folders; a program inside one of the ``untrusted`` folders (the tool's own folder, the
    workspace) is never started outside the sandbox. Never raises: a program that cannot be
    contained carries its ``problem``."""
    cached = contained_before(bwrap, program, env, system_paths=system_paths, untrusted=untrusted)
    if cached is not None:
        return cached
    contained = _contain(bwrap, program, env, sandbox_env, system_paths)
    with _LOCK:
        _CACHE[_key(bwrap, program, env, system_paths)] = contained
    return contained


def contained_before(
    bwrap: str | None,
    program: str,
    env: Mapping[str, str],
    *,
    system_paths: Sequence[Path] = (),
    untrusted: Sequence[Path] = (),
) -> ContainedProgram | None:
    """What :func:`contain_program` answers without running anything (found before, or a
    program that is never asked), else ``None``."""
    if not os.path.isabs(program) or _inside(program, untrusted):
        # Found through a relative PATH entry, or the tool's own code: never run it outside
        # the sandbox to ask; it runs as it is, with its own folder bound.
        return _checked(program, program, install_root(program), None)
    with _LOCK:
        return _CACHE.get(_key(bwrap, program, env, system_paths))


def _inside(program: str, folders: Sequence[Path]) -> bool:
    spellings = {Path(os.path.abspath(program)), Path(os.path.realpath(program))}
    roots = {Path(os.path.realpath(folder)) for folder in folders} | {
        Path(os.path.abspath(folder)) for folder in folders
    }
    return any(root == p or root in p.parents for p in spellings for root in roots)


def _key(
    bwrap: str | None, program: str, env: Mapping[str, str], system_paths: Sequence[Path]
) -> tuple[str | None, str, str, str, str, tuple[Path, ...]]:
    path, home = env.get("PATH") or "", env.get("HOME") or ""
    return (bwrap, program, path, home, os.path.realpath(program), tuple(system_paths))


def resolved_folders() -> tuple[Path, ...]:
    """The folders of every runtime resolved so far (the real interpreter's folder and its
    installation root): the gateway runs them on the host, so they are among its own folders
    (:mod:`toolgate.path_policy`)."""
    with _LOCK:
        contained = list(_CACHE.values())
    found: list[Path] = []
    for item in contained:
        if os.path.isabs(item.program):
            found.append(Path(item.program).parent)
        found += item.read_only
    return tuple(dict.fromkeys(found))


def forget_programs() -> None:
    """Drop what was found (tests; an operator who changed the runtimes)."""
    with _LOCK:
        _CACHE.clear()


def _contain(
    bwrap: str | None,
    program: str,
    env: Mapping[str, str],
    sandbox_env: Mapping[str, str],
    system_paths: Sequence[Path],
) -> ContainedProgram:
    runtime = runtime_of_program(program)
    located = shutil.which(Path(program).name, path=env.get("PATH") or os.defpath)
    asks = (
        runtime is not None
        and runtime.where
        and located is not None
        and os.path.abspath(located) == os.path.abspath(program)
    )
    if not asks:
        # Not a runtime found on PATH (an os command's program, a binary script, the gateway's
        # own interpreter): its installation root, as before.
        return _checked(program, program, install_root(program), runtime)
    assert runtime is not None
    if _native(program) and _in_system_roots(program):
        return ContainedProgram(program, program)
    answer, failure = _ask(program, runtime, _where_env(env), "/")
    label = f"runtime '{runtime.name}' ({program})"
    if answer is None:
        return ContainedProgram(
            program, program, problem=f"{label} did not say which program it runs: {failure}"
        )
    real = runtime.where_program.format(answer)
    if not os.path.isabs(real) or not os.path.isfile(real) or not os.access(real, os.X_OK):
        return ContainedProgram(
            program,
            program,
            problem=f"{label} says it runs {real!r}, which is not an executable file",
        )
    if not _native(real):
        return ContainedProgram(
            program,
            program,
            problem=f"{label} runs {real}, which is not a native program (a script or a "
            "launcher) that a sandbox can start by itself",
        )
    roots = () if _in_system_roots(real) else tuple(install_root(real))
    checked = _checked(real, program, roots, runtime)
    if checked.problem is not None or not roots or bwrap is None:
        # No bubblewrap (the Landlock layer): the folders are granted, nothing else; a runtime
        # that needs more fails in the sandbox, it never gets more.
        return checked
    # The same question inside a sandbox with only these binds: proof that it is contained.
    inside = BwrapSpec(
        command=[real, *runtime.where],
        workspace=None,
        workspace_writable=False,
        ro_paths=[p for p in (*roots, *system_paths) if p.exists()],
    )
    answer_inside, failure = _ask_argv(bwrap_argv(bwrap, inside), dict(sandbox_env), None)
    if answer_inside != answer:
        binds = ", ".join(map(str, roots))
        why = failure or f"it says it runs {answer_inside!r} there"
        return ContainedProgram(
            real,
            program,
            roots,
            problem=f"{label} runs {real}, which does not start inside the sandbox with "
            f"{binds} bound read-only ({why}). Add the folders it needs to sandbox.system_paths "
            "in toolgate.yaml, or put a runtime installed under /usr first on PATH",
        )
    return checked


def _checked(
    program: str, found: str, roots: Sequence[Path], runtime: Runtime | None
) -> ContainedProgram:
    """``program`` with ``roots`` to bind, or its problem when a root must never be bound."""
    home = _home()
    label = f"runtime '{runtime.name}' ({found})" if runtime is not None else f"{found}"
    for root in roots:
        real = Path(os.path.realpath(root))
        if home is not None and (real == home or real in home.parents):
            return ContainedProgram(
                program,
                found,
                problem=f"{label} is installed in {root}, which is or contains the home folder "
                f"of the gateway's user ({home}), and a sandbox never binds that. Install it in "
                "a folder of its own (a version manager's per-version folder is fine), or put a "
                "runtime installed under /usr first on PATH",
            )
        if (why := kernel_bind_problem(root)) is not None:
            return ContainedProgram(
                program, found, problem=f"{label} cannot be bound into a sandbox: {why}"
            )
    return ContainedProgram(program, found, tuple(dict.fromkeys(roots)))


def _ask(
    program: str, runtime: Runtime, env: dict[str, str], cwd: str
) -> tuple[str | None, str | None]:
    return _ask_argv([program, *runtime.where], env, cwd)


def _ask_argv(
    argv: Sequence[str], env: dict[str, str], cwd: str | None
) -> tuple[str | None, str | None]:
    """The one line ``argv`` prints, or ``None`` and why not."""
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            timeout=WHERE_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, f"no answer within {WHERE_TIMEOUT:g} s"
    except OSError as exc:
        return None, f"it could not start: {exc.strerror or exc}"
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    if done.returncode != 0 or len(lines) != 1:
        stderr = done.stderr.decode("utf-8", "replace").strip()
        tail = stderr[-300:] or f"it printed {len(lines)} lines"
        return None, f"exit {done.returncode}: {tail}"
    return lines[0].strip(), None


def _where_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: env[name] for name in WHERE_ENV if name in env}


def _native(program: str) -> bool:
    """Whether the file ``program`` resolves to is an ELF executable (not a script)."""
    try:
        with open(os.path.realpath(program), "rb") as handle:
            return handle.read(4) == b"\x7fELF"
    except OSError:
        return False


def _in_system_roots(program: str) -> bool:
    """Whether ``program``, as given and as its real path, lies in the system folders."""
    spellings = {Path(os.path.abspath(program)), Path(os.path.realpath(program))}
    return all(
        any(p == Path(root) or Path(root) in p.parents for root in SYSTEM_ROOTS) for p in spellings
    )


def _home() -> Path | None:
    try:
        return Path(os.path.realpath(Path.home()))
    except RuntimeError:  # no home folder can be found for this user
        return None
