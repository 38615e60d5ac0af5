"""The script runtimes of tool folders.

=========== ============================================== ==============================
runtime     command                                        typical script
=========== ============================================== ==============================
bun         ``bun run --config=/dev/null --no-env-file      TypeScript with Bun APIs
            --no-install SCRIPT``
node        ``node SCRIPT``                                JavaScript
python      ``python3 SCRIPT`` with ``PYTHONNOUSERSITE=1``  Python 3
bash        ``bash SCRIPT``                                shell
go          ``go run SCRIPT`` with ``GO111MODULE=off``,    Go source
            ``GOWORK=off``, ``GOTOOLCHAIN=local``
binary      ``SCRIPT``                                     a compiled executable
powershell  ``pwsh -NoProfile -File SCRIPT``               PowerShell
=========== ============================================== ==============================

**Nothing is read from the workspace.** A script's working directory is the call's workspace, a
folder other tools (and the agent) may have written into. A runtime that read its configuration
or code from its working directory would run what was planted there, with this tool's rights and,
for a host-mode tool, on the host. So each runtime is started so that it does not:

* bun reads ``bunfig.toml`` (whose ``preload`` runs code) and ``.env`` files from its working
  directory, and resolves auto-installed packages against the ``package.json`` there: it is
  started with an empty configuration (``--config=/dev/null``), no ``.env`` loading and no
  auto-install. A tool's packages are in its own folder's ``node_modules``.
* ``go run`` compiles the script inside the module (``go.mod``, ``go.work``, ``vendor/``) found
  from its working directory, whose ``replace`` directives swap in other code, whose ``toolchain``
  line (Go 1.21+) picks another compiler and whose ``godebug`` lines change the program's
  defaults: it runs in GOPATH mode (``GO111MODULE=off``), never reading a ``go.mod`` or
  ``go.work``, and never switches toolchains (``GOTOOLCHAIN=local``). A go tool imports the
  standard library (or packages the operator installed in ``GOPATH``).
* ``python3 SCRIPT`` puts the script's folder, not the working directory, on ``sys.path``,
  and never the user's site folder (``PYTHONNOUSERSITE=1``: a ``.pth`` file there runs at
  every start);
  ``node SCRIPT`` resolves modules from the script's folder; bash and a binary read nothing at
  start (``BASH_ENV`` may not be declared); ``pwsh`` skips the profiles.
* ``PATH`` never holds an empty or relative entry (one that would find commands in the working
  directory): :class:`~toolgate.backends.environment.ScriptEnvironment` drops them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RUNTIMES", "Runtime", "runtime_for_extension", "runtime_of_program"]


@dataclass(frozen=True, slots=True)
class Runtime:
    """How to run a script of one kind."""

    name: str
    executable: str | None
    """The program looked up on ``PATH``; ``None`` for ``binary`` (the script runs itself)."""
    prefix: tuple[str, ...]
    """Arguments between the program and the script (``run`` for bun, ``-File`` for pwsh)."""
    install_hint: str
    where: tuple[str, ...] = ()
    """Arguments that make the program print, on one line, which program really runs once any
    shim or wrapper in front of it has done its work (``python3 -I -c 'import sys;
    print(sys.executable)'``); ``()``: it cannot say. See :mod:`toolgate.sandbox.programs`."""
    where_program: str = "{}"
    """How the printed line becomes the program's path (``go env GOROOT`` prints a folder)."""
    settings: tuple[tuple[str, str], ...] = ()
    """Environment variables the program always runs with, over any other value: they stop it
    reading configuration from its working directory (``GO111MODULE=off`` for go)."""

    def argv(self, script: Path, *, resolved: str | None = None) -> list[str]:
        """The command line that runs ``script`` (``resolved`` is the program's full path)."""
        if self.executable is None:
            return [str(script)]
        return [resolved or self.executable, *self.prefix, str(script)]

    def locate(self, path: str | None) -> str | None:
        """The program's full path on the given ``PATH``, or ``None`` when it is not installed."""
        if self.executable is None:
            return ""
        return shutil.which(self.executable, path=path if path is not None else os.defpath)

    def unavailable_reason(self, script: Path, path: str | None) -> str | None:
        """Why scripts of this runtime cannot run on this host now, or ``None`` when they can."""
        if self.executable is None:
            if not os.access(script, os.X_OK):
                return (
                    f"the script {script.name} is not executable; runtime 'binary' runs it "
                    f"directly (chmod +x {script.name})"
                )
            return None
        if self.locate(path) is None:
            return (
                f"runtime '{self.name}' is not installed: '{self.executable}' was not found on "
                f"PATH. {self.install_hint}"
            )
        return None


#: bun's options that stop it reading ``bunfig.toml`` and ``.env`` from its working directory.
_BUN_NO_WORKSPACE = ("--config=/dev/null", "--no-env-file")

RUNTIMES: dict[str, Runtime] = {
    runtime.name: runtime
    for runtime in (
        Runtime(
            "bun",
            "bun",
            # bunfig.toml (its preload runs code), .env files and package.json are otherwise
            # read from the working directory: the workspace.
            ("run", *_BUN_NO_WORKSPACE, "--no-install"),
            "Install Bun (for example `npm install -g bun`).",
            (*_BUN_NO_WORKSPACE, "-e", "console.log(process.execPath)"),
        ),
        Runtime(
            "node",
            "node",
            (),
            "Install Node.js (for example `apt-get install nodejs`).",
            ("-e", "console.log(process.execPath)"),
        ),
        Runtime(
            "python",
            "python3",
            (),
            "Install Python 3.",
            ("-I", "-c", "import sys; print(sys.executable)"),
            "{}",
            # The user site folder (~/.local/lib/pythonX.Y/site-packages) runs the .pth files
            # found there at start: no tool loads the user's own packages.
            (("PYTHONNOUSERSITE", "1"),),
        ),
        Runtime("bash", "bash", (), "Install bash.", ("-c", 'echo "$BASH"')),
        Runtime(
            "go",
            "go",
            ("run",),
            "Install Go (for example `apt-get install golang-go`).",
            ("env", "GOROOT"),
            "{}/bin/go",
            # go.mod / go.work / vendor/ are otherwise found from the working directory.
            (("GO111MODULE", "off"), ("GOWORK", "off"), ("GOTOOLCHAIN", "local")),
        ),
        Runtime("binary", None, (), "Make the script executable."),
        Runtime(
            "powershell",
            "pwsh",
            ("-NoProfile", "-File"),
            "Install PowerShell 7 (`pwsh`).",
            ("-NoLogo", "-NoProfile", "-NonInteractive", "-Command", "[Environment]::ProcessPath"),
        ),
    )
}

_BY_EXTENSION = {
    ".ts": "bun",
    ".tsx": "bun",
    ".js": "node",
    ".mjs": "node",
    ".cjs": "node",
    ".py": "python",
    ".sh": "bash",
    ".bash": "bash",
    ".go": "go",
    ".ps1": "powershell",
}


def runtime_of_program(program: str) -> Runtime | None:
    """The runtime whose program ``program`` is by its name (``/usr/bin/python3.11`` → python),
    if any; ``None`` for any other program."""
    name = Path(program).name
    for runtime in RUNTIMES.values():
        executable = runtime.executable
        if executable is not None and (name == executable or name.startswith(executable + ".")):
            return runtime
    return None


def runtime_for_extension(script: str) -> str | None:
    """The runtime a script's file name suggests (``security.ts`` → bun), if any."""
    return _BY_EXTENSION.get(Path(script).suffix.lower())
