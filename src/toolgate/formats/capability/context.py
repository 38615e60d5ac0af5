"""The ``ctx`` a capability's handler receives (public as :class:`toolgate.CapabilityContext`).

Its own module so that ``import toolgate`` does not load the capability source."""

from __future__ import annotations

from dataclasses import dataclass

from ...python.context import ToolContext

__all__ = ["CapabilityContext"]


@dataclass(frozen=True, slots=True)
class CapabilityContext(ToolContext):
    """The ``ctx`` a capability's handler receives: a :class:`ToolContext` whose ``secrets``
    are the capability's ``requiredPreferenceNames`` and whose ``config`` holds its
    ``publicPreferenceNames`` (as stored by ``toolgate connect``, over the gateway's
    ``config=``)."""

    capability: str = ""
    """The capability's id."""
    connected: bool = True
    """Whether every required secret is set (always true while a handler runs)."""
