"""Which sandbox layer compartment tools run under here, and what it enforces for a tool.

``sandbox.layer`` (:class:`~toolgate.sandbox.settings.SandboxConfig`):

* ``auto`` (default): bubblewrap when its probe starts a sandbox
  (:func:`~toolgate.sandbox.host.probe_host`); else the Landlock layer when it works
  (:func:`~toolgate.sandbox.landlock.probe_landlock`: a container whose seccomp profile refuses
  user namespaces); else none;
* ``bubblewrap`` / ``landlock``: that layer only (fail closed: when it does not work, none).

With no layer, compartment tools are unavailable (or run on the host, labelled, when the
operator set ``unsandboxed_host``), as before. :func:`weaker_permissions` says which declared
permissions of a tool a layer does not enforce (:data:`~toolgate.sandbox.landlock.ENFORCEMENT`):
such a tool is unavailable under it unless ``sandbox.accept_weaker`` names the layer for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import Tool
from .host import HostCapabilities, probe_host
from .landlock import ENFORCEMENT, PERMISSIONS, LandlockCapabilities, probe_landlock
from .settings import SandboxConfig

__all__ = ["LayerChoice", "choose_layer", "declared_permissions", "weaker_permissions"]


@dataclass(frozen=True, slots=True)
class LayerChoice:
    """The layer in use and why."""

    name: str | None
    """``"bubblewrap"``, ``"landlock"`` or ``None`` (no layer works here)."""
    host: HostCapabilities | None
    """bubblewrap's probe (``None`` when the configuration forces Landlock)."""
    landlock: LandlockCapabilities | None
    """Landlock's probe (``None`` when bubblewrap was chosen or forced)."""
    why_not_bubblewrap: str | None = None
    """Why bubblewrap is not in use (``None`` when it is)."""

    @property
    def problem(self) -> str | None:
        """Why no layer works here, and how to fix it (``None`` when one does)."""
        if self.name is not None:
            return None
        parts = []
        if self.host is not None and self.host.problem:
            parts.append(f"bubblewrap: {self.host.problem}")
        if self.landlock is not None and self.landlock.problem:
            parts.append(f"landlock: {self.landlock.problem}")
        return "; ".join(parts) or "no sandbox layer works here"

    @property
    def process_limit(self) -> str | None:
        """How the chosen layer enforces the process count (``None``: it does not)."""
        if self.name == "bubblewrap" and self.host is not None:
            return self.host.process_limit
        if self.name == "landlock" and self.landlock is not None:
            return self.landlock.process_limit
        return None


def choose_layer(config: SandboxConfig) -> LayerChoice:
    """The layer compartment tools run under with ``config`` here (probes are cached)."""
    if config.layer == "landlock":
        found = probe_landlock(config.pids_cgroup)
        return LayerChoice(
            "landlock" if found.works else None,
            None,
            found,
            "sandbox.layer is 'landlock' in toolgate.yaml",
        )
    host = probe_host(config.bwrap_path, config.pids_cgroup)
    if host.works:
        return LayerChoice("bubblewrap", host, None)
    if config.layer == "bubblewrap":
        return LayerChoice(None, host, None, host.problem)
    found = probe_landlock(config.pids_cgroup)
    return LayerChoice("landlock" if found.works else None, host, found, host.problem)


def declared_permissions(tool: Tool) -> tuple[str, ...]:
    """The aspects of :data:`~toolgate.sandbox.landlock.PERMISSIONS` that hold for ``tool``:
    those it declares (``fs``, ``env``, ``network``) and those every tool has."""
    perms = tool.sandbox.permissions
    declared = {
        "fs": bool(perms.fs),
        "env": bool(perms.env or tool.env),
        "network": bool(perms.network),
    }
    return tuple(name for name in PERMISSIONS if declared.get(name, True))


def weaker_permissions(tool: Tool, layer: str) -> tuple[str, ...]:
    """The aspects of ``tool`` (:func:`declared_permissions`) that ``layer`` does not enforce."""
    table = ENFORCEMENT[layer]
    return tuple(name for name in declared_permissions(tool) if not table[name][0])
