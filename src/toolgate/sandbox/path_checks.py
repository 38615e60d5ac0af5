"""The path rule and the identity guard of a policy, worked out once and reused while valid.

Preparing a sandboxed call checks its workspace (as given, and as opened) and every declared
``fs`` prefix against the gateway's own folders, twice over: by text
(:mod:`toolgate.path_policy`, which resolves every folder of the policy again: a few hundred
``lstat`` calls) and by identity (:class:`~toolgate.sandbox.identity.IdentityGuard`, whose
construction walks the ancestry of every folder of the policy). That was most of the gateway's
own time in a fresh sandboxed call (about 2-3 ms of 3 on an idle 2-core machine, more under
load), and it is the same work every call as long as nothing it depends on changed.

:class:`PathChecks` keeps it, per :class:`~toolgate.path_policy.PathPolicy` value (which
folders are the gateway's: a folder added with :meth:`~toolgate.sandbox.runner.Sandbox.guard`,
a runtime resolved, a module imported from elsewhere is a new policy, checked from scratch):

* the work is used again only while its **stamp** is unchanged: the real location and the
  identity (``st_dev``, ``st_ino``, links followed, both read from one ``O_PATH`` descriptor) of
  every folder of the policy, of every protected path and of the gateway user's home (a missing
  one counts as missing: one that appears changes the stamp), the identity of every folder
  above them,
  the identity and modification time of ``/home`` (a home folder added or removed), and the
  variables the rule reads (``HOME``, ``PYTHONUSERBASE``, ``GOPATH``). A link re-pointed, a
  folder removed and made again, a home added: the stamp differs and everything is worked out
  again, and so does a folder moved with ``rename`` (which keeps its inode) or removed and
  made again elsewhere (which may get the same inode back). One descriptor per folder and one
  ``stat`` per folder above them, per call;
* a path that passes the text rule is remembered as passing, only for a path that *is* its own
  real path when it is checked (its real path is resolved again on every check, and a path with
  a link in it is never answered from memory): a folder that became a link since, or whose
  parent did, is a different path and is checked from scratch. The verdict is a function of
  that text and of the policy's folders, which the stamp covers. A refusal is never
  remembered: it may have been about a link swapped in for a moment;
* the identity guard of the policy (the identities of its folders and of their ancestors) is
  kept; the walk from the call's own descriptor up to the root
  (:meth:`~toolgate.sandbox.identity.IdentityGuard.problem`) is done on every call.

Never cached: opening the workspace and the prefixes (:class:`~toolgate.sandbox.bwrap.HeldPaths`)
and the real path of what was opened, the identity walk of each call's descriptors, the covers
of protected paths, the process's command line.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..path_policy import PathPolicy, prefix_problem, workspace_problem
from .identity import IdentityGuard

__all__ = ["CheckedPolicy", "PathChecks", "policy_stamp"]

#: Policies whose checks are kept at once (a gateway has one at a time, a few while it starts).
MAX_POLICIES = 4
#: Verdicts kept per policy (workspaces and prefixes; the oldest is dropped first).
MAX_VERDICTS = 512
#: The variables the text rule reads (the home folder, the runtimes' user folders).
RULE_VARIABLES = ("HOME", "PYTHONUSERBASE", "GOPATH")

Stamp = tuple[object, ...]


def _identity(path: Path | str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_dev, info.st_ino


def _located(path: Path | str) -> tuple[str, int, int] | None:
    """Where ``path`` really is (links followed) and its identity, from one descriptor so the
    two belong together. The identity alone is not enough: a folder moved with ``rename``
    keeps its inode, and one removed and made again elsewhere often gets the same number back
    (ext4 reuses them), so a re-pointed link would keep the stamp while the folder sits under
    another parent."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # no /proc: the slower resolution by name
            real = os.path.realpath(path)
    except OSError:
        return None
    finally:
        os.close(fd)
    return real, info.st_dev, info.st_ino


def _ancestry(located: Iterable[tuple[str, int, int] | None]) -> tuple[object, ...]:
    """The identity of every folder above the located folders (each once): the identity
    guard keeps the ancestors of the policy's folders, so a parent replaced under an unchanged
    path must change the stamp too."""
    above: set[str] = set()
    for entry in located:
        if entry is not None:
            above.update(str(parent) for parent in Path(entry[0]).parents)
    return tuple((folder, _identity(folder)) for folder in sorted(above))


def policy_stamp(policy: PathPolicy, protected: Sequence[Path]) -> Stamp:
    """What the checks of ``policy`` (with the ``protected`` paths) depend on, now (see the
    module documentation): equal stamps, equal answers."""
    folders = (*policy.state_folders, *policy.gateway_folders, *protected)
    try:
        homes = os.stat("/home")
        home_state: object = (homes.st_dev, homes.st_ino, homes.st_mtime_ns)
    except OSError:
        home_state = None
    variables = tuple(os.environ.get(name) for name in RULE_VARIABLES)
    user_home = policy.home or os.environ.get("HOME")
    located = tuple(_located(folder) for folder in folders)
    home = None if user_home is None else _located(user_home)
    return (variables, home_state, home, located, _ancestry((*located, home)))


class CheckedPolicy:
    """The checks of one policy in one state (its stamp): verdicts of the text rule and the
    identity guards, each worked out on first use."""

    def __init__(self, policy: PathPolicy, protected: Sequence[Path], stamp: Stamp) -> None:
        self.policy = policy
        self.protected = tuple(protected)
        self.stamp = stamp
        self._verdicts: OrderedDict[tuple[object, ...], str | None] = OrderedDict()
        self._guards: dict[bool, IdentityGuard] = {}
        self._lock = threading.Lock()

    def workspace_problem(self, workspace: Path, *, writable: bool) -> str | None:
        """:func:`~toolgate.path_policy.workspace_problem` of ``workspace`` under this policy."""
        return self._verdict(
            ("workspace", writable),
            workspace,
            lambda: workspace_problem(workspace, self.policy, writable=writable),
        )

    def prefix_problem(self, prefix: Path | str, *, own: Iterable[Path]) -> str | None:
        """:func:`~toolgate.path_policy.prefix_problem` of ``prefix`` under this policy."""
        owned = tuple(own)
        return self._verdict(
            ("fs", owned),
            Path(prefix),
            lambda: prefix_problem(prefix, self.policy, own=owned),
        )

    def guard(self, *, writable: bool) -> IdentityGuard:
        """The identity guard of this policy (of its read-only form for a read-only
        workspace), built once."""
        with self._lock:
            guard = self._guards.get(writable)
        if guard is None:
            policy = self.policy if writable else self.policy.read_only()
            guard = IdentityGuard((*policy.state_folders, *policy.gateway_folders), self.protected)
            with self._lock:
                guard = self._guards.setdefault(writable, guard)
        return guard

    def _verdict(
        self, kind: tuple[object, ...], path: Path, check: Callable[[], str | None]
    ) -> str | None:
        text = str(path)
        if not text.startswith("/"):
            return check()  # relative: the rule says why
        normal = os.path.normpath(text)
        try:
            real = os.path.realpath(normal)
        except (OSError, ValueError):
            real = None
        if real != normal:
            # A path with a link in it (or one that cannot be resolved): never from the cache,
            # its link may point elsewhere next time.
            return check()
        key = (*kind, normal)
        with self._lock:
            if key in self._verdicts:
                self._verdicts.move_to_end(key)
                return self._verdicts[key]
        # The rule resolves the path again itself, and a link that appeared in between is
        # checked too: a pass is a pass for ``normal`` itself, and is kept. A refusal may be
        # about that link, gone again by the next call: it is never kept (refusals are rare,
        # and worked out again each time).
        verdict = check()
        if verdict is None:
            with self._lock:
                self._verdicts[key] = verdict
                while len(self._verdicts) > MAX_VERDICTS:
                    self._verdicts.popitem(last=False)
        return verdict


class PathChecks:
    """The :class:`CheckedPolicy` of each policy a sandbox service checks against, valid while
    its stamp holds (see the module documentation)."""

    def __init__(self) -> None:
        self._checked: OrderedDict[tuple[PathPolicy, tuple[Path, ...]], CheckedPolicy] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    def of(self, policy: PathPolicy, protected: Sequence[Path]) -> CheckedPolicy:
        """The checks of ``policy`` as its folders are now (worked out again when they
        changed)."""
        key = (policy, tuple(protected))
        stamp = policy_stamp(policy, protected)
        with self._lock:
            checked = self._checked.get(key)
            if checked is not None and checked.stamp == stamp:
                self._checked.move_to_end(key)
                return checked
            checked = CheckedPolicy(policy, protected, stamp)
            self._checked[key] = checked
            self._checked.move_to_end(key)
            while len(self._checked) > MAX_POLICIES:
                self._checked.popitem(last=False)
            return checked

    def forget(self) -> None:
        """Drop every kept check (tests; an operator who changed the gateway's folders)."""
        with self._lock:
            self._checked.clear()
