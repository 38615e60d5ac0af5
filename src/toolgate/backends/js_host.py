"""The JavaScript tool host: one warm Node.js process per plugin entry and permission set.

The host (``toolgate/js/host.mjs``) loads a plugin entry or a capability's tools module written
in JavaScript or TypeScript (types stripped by esbuild, no build step) and answers one JSON line
per request (the worker protocol of :mod:`toolgate.backends.workers`, whose pool runs it: a
process that crashes, breaks the protocol or misses its deadline is killed and the next call
starts a fresh one). In ``compartment`` mode it runs ``lockdown()`` (SES) and evaluates the entry
in one ``Compartment`` whose globals are the plugin format's safe list plus what the permissions
grant; in ``host`` mode it imports the entry as a plain Node.js module (full access).

:class:`JsHostSpec` says what one process runs; its environment carries only what the host
needs (``PATH``, the spec, the dependencies' folder and the operator's ``NODE_EXTRA_CA_CERTS``),
never the gateway's environment: ``ctx.env`` is the snapshot of the declared keys inside the spec.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ToolError
from ..model import Permissions
from ..sandbox.bwrap import BwrapSpec, HeldPaths, bwrap_argv
from ..sandbox.landlock import LandlockSpec, hold_system, landlock_argv, refuse_protected
from ..sandbox.orphans import adopt_orphans
from ..sandbox.programs import contain_program
from ..sandbox.runner import SANDBOX_ENV, SandboxUnavailableError
from ..sandbox.seccomp import SeccompUnavailableError
from .js_install import JsRuntimeError, ensure_installed, host_script, node_program
from .prestart import PoolKey
from .workers import WorkerPool, WorkerSettings

if TYPE_CHECKING:
    from ..sandbox.runner import Sandbox

__all__ = [
    "JsConfinement",
    "JsHostError",
    "JsHostSpec",
    "JsHosts",
    "confirm_once",
    "describe_entry",
]

#: Megabytes of JavaScript heap a host process may use, unless the sandbox's limits say.
DEFAULT_HEAP_MB = 512
#: Bytes one answer line may hold.
MAX_ANSWER = 16 * 1024 * 1024


class JsHostError(ToolError):
    """The plugin's code failed (at load or in ``execute``), as the host reported it."""


@dataclass(frozen=True, slots=True)
class JsConfinement:
    """The process sandbox a compartment host also runs in (defence in depth, where bubblewrap
    works): no network namespace access but the egress sockets, no writes, only the plugin, the
    host's code and packages, Node.js and the declared ``fs`` prefixes visible (read-only)."""

    bwrap: str | None
    """The bubblewrap program (``None`` under the Landlock layer)."""
    protected: tuple[Path, ...] = ()
    """The gateway's state, hidden again wherever a bind would expose it."""
    egress_dir: Path | None = None
    """The private folder the calls' egress sockets are made in, bound into the sandbox."""
    sandbox: Sandbox | None = field(default=None, compare=False, repr=False)
    """The running gateway's sandbox: each ``fs`` prefix is checked against its folders
    (:meth:`~toolgate.sandbox.runner.Sandbox.held_prefixes`) whenever a host process's
    command line is made; one refused makes the host refuse to start."""
    where: str = "permissions.fs"
    """Where the ``fs`` prefixes were granted (``…/pandora.json: permissions.fs``)."""
    layer: str = "bubblewrap"
    """``bubblewrap``, or ``landlock`` (:mod:`toolgate.sandbox.landlock`: the host's folders
    read(+execute) only, no socket, no writes; for hosts without network permissions)."""


@dataclass(frozen=True, slots=True)
class JsHostSpec:
    """What one host process runs: an entry, its mode, permissions and the snapshots."""

    plugin_id: str
    root: Path
    """The plugin folder: imports must stay inside it."""
    entry: Path
    mode: str
    """``compartment`` or ``host``."""
    permissions: Permissions
    env: Mapping[str, str] = field(default_factory=dict)
    """The declared environment keys that were set at load (``ctx.env``)."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """``ctx.pluginConfig`` of ``resolveTools``."""
    generation: str = ""
    """Changes with every load of the plugin, so edited code never reuses an old process."""
    kind: str = "plugin"
    """What the entry is (a value the host reads; the names are those of the formats' origin
    projects): ``plugin``, a plugin entry (tools with ``execute``, ``resolveTools``), or
    ``capability``, a capability's tools module (``handler``, ``approval.buildConfirmation``)."""
    confinement: JsConfinement | None = None
    """Run the host inside bubblewrap too (``None``: the compartment alone)."""
    heap_mb: int = DEFAULT_HEAP_MB
    """V8's heap limit: a plugin that allocates without end crashes its own host process (the
    call fails, the next one gets a fresh process) before it can exhaust the machine."""

    def as_json(self) -> str:
        perms = self.permissions
        return json.dumps(
            {
                "pluginId": self.plugin_id,
                "kind": self.kind,
                "root": str(self.root),
                "entry": str(self.entry),
                "mode": self.mode,
                "permissions": {
                    "time": perms.time,
                    "random": perms.random,
                    "network": list(perms.network),
                    "env": list(perms.env),
                    "fs": [str(prefix) for prefix in perms.fs],
                },
                "env": dict(self.env),
                "config": dict(self.config),
            },
            sort_keys=True,
        )

    @property
    def label(self) -> str:
        """How messages name the host process (``@acme/hello entry index.ts``)."""
        return f"{self.plugin_id} entry {self.entry.name}"

    def key(
        self, tool_id: str, *, leave_out_refused: bool = False, held: HeldPaths | None = None
    ) -> PoolKey:
        """The worker-pool key of this spec's process (``tool_id`` names it in messages).

        An ``fs`` prefix the running gateway refuses makes it raise
        :class:`~toolgate.sandbox.runner.SandboxUnavailableError`; with ``leave_out_refused``
        (a process that only lists the entry's tools) such a prefix is not bound instead, and
        the registry makes the tools that declare it unavailable with the reason. With
        ``held``, the checked prefixes stay open there and are bound from their descriptors
        (the key's :attr:`~PoolKey.pass_fds`): the caller keeps ``held`` open as long as a
        process may be started from the key."""
        node, folder = _runtime()
        # Host mode: a plain Node.js process with the gateway's environment (full access).
        env = dict(os.environ) if self.mode != "compartment" else {}
        env |= {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TOOLGATE_JS_SPEC": self.as_json(),
            "TOOLGATE_JS_MODULES": str(folder),
        }
        if os.environ.get("NODE_EXTRA_CA_CERTS"):
            env["NODE_EXTRA_CA_CERTS"] = os.environ["NODE_EXTRA_CA_CERTS"]
        argv: tuple[str, ...] = (node, f"--max-old-space-size={self.heap_mb}", str(host_script()))
        if self.confinement is not None and self.mode == "compartment":
            ca_file = env.get("NODE_EXTRA_CA_CERTS")
            argv = tuple(_confined_argv(self, argv, folder, ca_file, leave_out_refused, held))
        return PoolKey(
            tool_id=tool_id,
            argv=argv,
            env=tuple(sorted(env.items())),
            cwd=str(self.root),
            definition=self.generation,
            pass_fds=held.fds if held is not None else (),
        )


_RUNTIME: tuple[str, Path] | None = None


def _confined_argv(
    spec: JsHostSpec,
    command: tuple[str, ...],
    modules: Path,
    ca_file: str | None,
    leave_out_refused: bool = False,
    held: HeldPaths | None = None,
) -> list[str]:
    confinement = spec.confinement
    assert confinement is not None
    package = host_script().parent.parent  # host.mjs imports ../worker_helpers
    # Node.js behind a shim (asdf, mise, volta…) runs as the real program, with only its
    # installation root bound; one that cannot be contained is refused with the reason.
    node = contain_program(
        confinement.bwrap, command[0], os.environ, sandbox_env=SANDBOX_ENV, untrusted=[spec.root]
    )
    if node.problem is not None:
        raise JsRuntimeError(f"the JavaScript host cannot run in a sandbox: {node.problem}")
    command = (node.program, *command[1:])
    read_only = [spec.root, package, modules, *node.read_only]
    prefixes = _checked_prefixes(spec, leave_out_refused, held)
    if confinement.layer == "landlock":
        code = [*read_only, *([Path(ca_file)] if ca_file else [])]
        return _landlocked_argv(spec, command, code, prefixes, held)
    read_only += prefixes
    if ca_file:
        read_only.append(Path(ca_file))
    egress = confinement.egress_dir
    assert confinement.bwrap is not None
    return bwrap_argv(
        confinement.bwrap,
        BwrapSpec(
            command=command,
            workspace=None,
            workspace_writable=False,
            ro_paths=[path for path in read_only if path.exists()],
            protected=confinement.protected,
            network=bool(spec.permissions.network),
            extra_binds=[(egress, egress)] if egress is not None else [],
            held=held.held if held is not None else {},
        ),
    )


def _landlocked_argv(
    spec: JsHostSpec,
    command: tuple[str, ...],
    code: list[Path],
    prefixes: list[Path],
    held: HeldPaths | None,
) -> list[str]:
    """The Landlock launcher's command line around the host (:mod:`toolgate.sandbox.landlock`):
    the system, Node.js, the host's code and the plugin read(+execute), the ``fs`` prefixes
    read-only, nothing writable, no socket. Every folder is opened here and ruled by its
    descriptor, so the descriptors must stay open while a process may start: ``held`` (the
    pool key's)."""
    if held is None:
        # A key only compared, never started (JsHosts' "plain" key, one per entry and
        # permission set): the descriptors' numbers depend on what else is open, so each is
        # written as the path it stands for. A process started from it fails in the launcher
        # (a path is not a descriptor), before anything runs.
        with HeldPaths() as mine:
            for path in prefixes:  # checked already (and closed)
                mine.hold(path)
            argv = _landlocked_argv(spec, command, code, prefixes, mine)
            paths = {str(fd): str(path) for path, fd in mine.held.items()}
        options = ("--exec", "--read", "--write", "--dev")
        end = argv.index("--")  # the launcher's own options end here; the command follows
        return [
            paths.get(word, word) if 0 < index < end and argv[index - 1] in options else word
            for index, word in enumerate(argv)
        ]
    confinement = spec.confinement
    assert confinement is not None and confinement.sandbox is not None
    exec_fds, dev_fds = hold_system(held, network=False)
    for path in code:
        if path.exists():
            exec_fds.append(held.fd(held.hold(path)))
    granted = [held.hold(path) for path in code if path.exists()]
    refuse_protected(spec.label, [*granted, *prefixes], confinement.protected)
    landlocked = LandlockSpec(
        command=command,
        exec_fds=exec_fds,
        read_fds=[held.fd(path) for path in prefixes],
        dev_fds=dev_fds,
        # A long-lived host: no CPU-time limit (as under bubblewrap); V8's heap limit holds.
        limits=None,
    )
    # No PID namespace: what the host leaves behind goes to PID 1, maybe the gateway itself.
    adopt_orphans()
    try:
        return landlock_argv(sys.executable, landlocked)
    except SeccompUnavailableError as exc:
        raise JsRuntimeError(f"the JavaScript host cannot run in a sandbox: {exc}") from None


def _checked_prefixes(
    spec: JsHostSpec, leave_out_refused: bool = False, held: HeldPaths | None = None
) -> list[Path]:
    """The ``fs`` prefixes of ``spec`` that exist, as the real paths of what was opened and
    checked against the running gateway's folders, by the path rule and by identity (the same
    check as a script tool's prefixes). Raises
    :class:`~toolgate.sandbox.runner.SandboxUnavailableError` naming the manifest field, or
    with ``leave_out_refused`` leaves a refused prefix out. The descriptors stay open in
    ``held`` when given (closed at once otherwise)."""
    confinement = spec.confinement
    assert confinement is not None
    sandbox = confinement.sandbox
    if sandbox is None:
        return [Path(prefix) for prefix in spec.permissions.fs]
    own, where = [spec.root], confinement.where
    with HeldPaths() as mine:
        target = held if held is not None else mine
        if not leave_out_refused:
            return sandbox.held_prefixes(
                spec.label, spec.permissions.fs, target, own=own, where=where
            )
        found: list[Path] = []
        for prefix in spec.permissions.fs:
            with contextlib.suppress(SandboxUnavailableError):
                found += sandbox.held_prefixes(spec.label, [prefix], target, own=own, where=where)
        return found


def _runtime() -> tuple[str, Path]:
    """``node`` and the dependencies' folder, found (and installed) once per gateway process:
    a warm call must not pay for ``node --version``."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = (node_program(), ensure_installed())
    return _RUNTIME


def _answer(answer: Any, what: str) -> Any:
    if not isinstance(answer, Mapping):
        raise JsHostError(f"{what}: the JavaScript host answered {answer!r:.200}")
    if "error" in answer:
        raise JsHostError(f"{what}: {answer['error']}")
    return answer


def describe_entry(spec: JsHostSpec, timeout: float) -> Mapping[str, Any]:
    """``{"tools": [...], "alerts": [...]}`` of the entry: each tool's declarative fields, and
    which functions it has (``execute: true``). Runs a host process of its own (loading is
    synchronous); raises :class:`JsRuntimeError` without Node.js or the dependencies and
    :class:`JsHostError` when the entry fails to load."""
    return _one_shot(spec, {"op": "describe"}, timeout, f"loading {spec.entry}")


def confirm_once(
    spec: JsHostSpec, tool_name: str, arguments: Mapping[str, Any], timeout: float
) -> Any:
    """What ``approval.buildConfirmation(input)`` of ``tool_name`` returns, from a host
    process of its own (the approval step asks synchronously, and rarely)."""
    request = {"op": "confirm", "tool": tool_name, "input": dict(arguments)}
    answer = _one_shot(spec, request, timeout, f"buildConfirmation of {tool_name}")
    return answer.get("result")


def _one_shot(
    spec: JsHostSpec, request: Mapping[str, Any], timeout: float, what: str
) -> Mapping[str, Any]:
    line = json.dumps({**request, "_call": "once"}) + "\n"
    with HeldPaths() as held:
        key = spec.key(spec.label, leave_out_refused=True, held=held)
        try:
            done = subprocess.run(
                key.argv,
                input=line,
                capture_output=True,
                text=True,
                env=dict(key.env),
                cwd=key.cwd,
                timeout=timeout,
                pass_fds=key.pass_fds,
            )
        except subprocess.TimeoutExpired:
            raise JsHostError(f"{what} did not finish within {timeout:g} s") from None
        except OSError as exc:
            raise JsRuntimeError(f"the JavaScript host could not be started: {exc}") from None
    first = done.stdout.strip().splitlines()[:1]
    try:
        answer = json.loads(first[0]) if first else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = done.stderr.strip()[-1500:]
        raise JsHostError(
            f"the JavaScript host exited with code {done.returncode} during {what}"
            + (f": {tail}" if tail else "")
        )
    answer.pop("_call", None)
    checked: Mapping[str, Any] = _answer(answer, what)
    return checked


class JsHosts:
    """The warm host processes of one source, per event loop (like the script backend's)."""

    def __init__(self, settings: WorkerSettings | None = None) -> None:
        self.settings = settings or WorkerSettings()
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WorkerPool] = (
            weakref.WeakKeyDictionary()
        )
        # A warm call must not rebuild its key (the spec's JSON, bubblewrap's command line):
        # kept per spec object (held, so its id is not reused), with the descriptors its
        # bubblewrap binds (open while a process may be started from the key).
        self._keys: dict[int, tuple[JsHostSpec, PoolKey]] = {}
        # Specs whose processes are interchangeable (one per entry and permission set) share
        # one key and its descriptors: the key without descriptors → (key, descriptors).
        self._shared: dict[PoolKey, tuple[PoolKey, HeldPaths]] = {}
        # The descriptors of the keys dropped at the last clear-out: closed at the next one
        # (a call that began before it may still start a process from its key) or at close.
        self._retired: list[HeldPaths] = []

    def pool(self) -> WorkerPool:
        """The pool of the running event loop."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = WorkerPool(self.settings)
        return pool

    async def execute(
        self,
        spec: JsHostSpec,
        tool_id: str,
        local_id: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float,
        egress: str | None = None,
        ctx: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run ``execute`` of ``local_id`` on a warm host of ``spec``; its result. Raises
        :class:`JsHostError` for what the plugin threw, ``ToolTimeoutError`` past ``timeout``
        (the process is killed; the next call starts a new one)."""
        cached = self._keys.get(id(spec))
        if cached is None:
            if len(self._keys) > 1024:  # specs of many reloads ago
                self._retire()
            # One process per entry (and permission set), whichever of its tools is called.
            plain = spec.key(spec.label)  # checks the prefixes (and closes them)
            shared = self._shared.get(plain)
            if shared is None:
                held = HeldPaths()
                try:
                    shared = (spec.key(spec.label, held=held), held)
                except BaseException:
                    held.close()
                    raise
                self._shared[plain] = shared
            cached = self._keys[id(spec)] = (spec, shared[0])
        key = cached[1]
        payload: dict[str, Any] = {
            "op": "execute",
            "tool": local_id,
            "input": dict(arguments),
            "egress": egress,
        }
        if ctx is not None:
            payload["ctx"] = dict(ctx)
        answer = await self.pool().call(key, payload, timeout=timeout, max_output=MAX_ANSWER)
        return _answer(answer, f"Tool {tool_id}").get("result")

    def _retire(self) -> None:
        """Drop the cached keys; close the descriptors of those dropped the time before."""
        for held in self._retired:
            held.close()
        self._retired = [held for _, held in self._shared.values()]
        self._shared.clear()
        self._keys.clear()

    def _close_held(self) -> None:
        self._retire()
        self._retire()

    def pids(self) -> list[int]:
        """The process ids of the idle host processes, in every loop."""
        return [pid for pool in list(self._pools.values()) for pid in pool.pids()]

    def worker_count(self) -> int:
        """Live host processes, in every loop."""
        return sum(pool.worker_count() for pool in list(self._pools.values()))

    async def aclose(self) -> None:
        """Stop the host processes of the running event loop and wait until they are reaped."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.aclose()
        if not self._pools:
            self._close_held()

    def close(self) -> None:
        """Stop every idle host process; those of a loop running in another thread are reaped
        there (a process reaped after its loop closed would warn)."""
        for loop, pool in list(self._pools.items()):
            if loop.is_running() and not _in_loop(loop):
                future = asyncio.run_coroutine_threadsafe(pool.aclose(), loop)
                with contextlib.suppress(Exception):
                    future.result(timeout=5)
            else:
                pool.close()
        self._pools.clear()
        self._close_held()


def _in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
