"""The npm dependencies of the JavaScript tool host: pinned by toolgate, installed with ``npm ci``.

toolgate ships ``toolgate/js/package.json`` and ``package-lock.json`` (``ses`` and ``esbuild``
at exact versions). :func:`install` copies both into a folder of its own under
``$TOOLGATE_HOME/js/`` named after the lock file's digest and runs ``npm ci`` there (npm's normal
client, no other network); :func:`ensure_installed` does it on first use, saying so in the log,
and returns the folder. A toolgate upgrade with a new lock file installs next to the old one.

Node.js (``node``, 20 or later) and npm must be on ``PATH``; when they are not, or ``npm ci``
fails, :class:`JsRuntimeError` says so (a :class:`~toolgate.errors.ToolError`: a plugin that
needs the host is reported as not loaded, and the gateway keeps serving).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

from ..errors import ToolError

__all__ = [
    "HOST_FILES",
    "JsRuntimeError",
    "ensure_installed",
    "host_script",
    "install",
    "install_folder",
    "node_program",
    "toolgate_home",
]

log = logging.getLogger("toolgate.backends.js_install")

#: The JavaScript files of the host (in the ``toolgate.js`` folder of the Python package).
HOST_FILES: tuple[str, ...] = ("host.mjs", "capabilities.mjs", "fetch.mjs")
_MARKER = ".toolgate-installed"
_NPM_TIMEOUT = 600.0
MIN_NODE_MAJOR = 20


class JsRuntimeError(ToolError):
    """Node.js or the host's npm dependencies are missing or could not be installed."""


def toolgate_home() -> Path:
    """``$TOOLGATE_HOME`` (default ``~/.toolgate``)."""
    return Path(os.environ.get("TOOLGATE_HOME") or Path.home() / ".toolgate").expanduser()


def _package_dir() -> Path:
    return Path(str(resources.files("toolgate") / "js"))


def host_script() -> Path:
    """The host's entry script, ``toolgate/js/host.mjs``."""
    return _package_dir() / "host.mjs"


def install_folder(home: Path | None = None) -> Path:
    """Where the pinned dependencies of this toolgate's lock file are (or would be) installed:
    ``$TOOLGATE_JS_DIR`` (shared by several homes, e.g. a test run's) or ``$TOOLGATE_HOME/js``,
    then a folder named after the lock file's digest."""
    lock = (_package_dir() / "package-lock.json").read_bytes()
    digest = hashlib.sha256(lock).hexdigest()[:16]
    shared = os.environ.get("TOOLGATE_JS_DIR")
    base = (
        Path(shared).expanduser() if shared and home is None else (home or toolgate_home()) / "js"
    )
    return base / digest


def node_program() -> str:
    """The ``node`` program; raises :class:`JsRuntimeError` when there is none, or it is older
    than Node.js 20."""
    node = shutil.which("node")
    if node is None:
        raise JsRuntimeError(
            "Node.js is not installed (no 'node' on PATH): JavaScript and TypeScript plugins "
            f"need Node.js {MIN_NODE_MAJOR} or later (Debian: apt-get install nodejs npm)"
        )
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
        major = int(version.lstrip("v").split(".")[0])
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise JsRuntimeError(f"'{node} --version' failed: {exc}") from None
    if major < MIN_NODE_MAJOR:
        raise JsRuntimeError(
            f"Node.js {version} at {node} is too old: JavaScript and TypeScript plugins need "
            f"Node.js {MIN_NODE_MAJOR} or later"
        )
    return node


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """One installer at a time per folder (two gateways starting together)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{folder.name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def installed(folder: Path | None = None) -> bool:
    """Whether the pinned dependencies are installed in ``folder`` (default: this lock's)."""
    folder = folder or install_folder()
    return (folder / _MARKER).is_file() and (folder / "node_modules" / "ses").is_dir()


def install(home: Path | None = None, *, force: bool = False) -> Path:
    """Install the pinned dependencies with ``npm ci`` (unless they already are, or ``force``);
    return the folder. Raises :class:`JsRuntimeError` naming what failed."""
    folder = install_folder(home)
    node_program()
    npm = shutil.which("npm")
    if npm is None:
        raise JsRuntimeError(
            "npm is not installed (no 'npm' on PATH): it installs the JavaScript host's pinned "
            "dependencies (Debian: apt-get install npm)"
        )
    with _locked(folder):
        if installed(folder) and not force:
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _MARKER).unlink(missing_ok=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(_package_dir() / name, folder / name)
        # --ignore-scripts: nothing from the registry runs at install time (esbuild's binary
        # comes as its platform package, which needs no install script).
        command = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]
        try:
            done = subprocess.run(
                command, cwd=folder, capture_output=True, text=True, timeout=_NPM_TIMEOUT
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise JsRuntimeError(f"'npm ci' in {folder} failed: {exc}") from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-1500:]
            raise JsRuntimeError(
                f"'npm ci' in {folder} failed (exit code {done.returncode}): {tail}"
            )
        (folder / _MARKER).write_text("ok\n")
    return folder


def ensure_installed() -> Path:
    """The folder of the installed dependencies, installing them first when they are not
    (logged, since it takes a while and uses the network)."""
    folder = install_folder()
    if installed(folder):
        return folder
    log.warning(
        "installing the JavaScript host's pinned dependencies (ses, esbuild) with 'npm ci' into "
        "%s (first use; 'toolgate js install' does this ahead of time)",
        folder,
    )
    return install()
