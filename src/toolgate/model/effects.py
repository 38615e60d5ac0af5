"""Side-effect levels and the mapping from every format's vocabulary onto them.

The seven levels are the ``sideEffects.level`` values of ``Tool`` resources. The other formats
describe effects in their own words; each is mapped here, in one place, and the table is
documented in ``docs/concepts/side-effects.md``:

=====================  =========================================================================
source                 level
=====================  =========================================================================
capability manifests'  ``read`` → read_only, ``write`` → external_write, ``external`` →
``access``             external_write (the format's words: "write: modify an external system",
                       "external: open external apps, websites, or workflows")
MCP annotations        ``readOnlyHint: true`` → read_only; otherwise ``openWorldHint: false`` →
(plugins, MCP)         local_write; otherwise external_write (MCP's defaults: a tool that is not
                       read-only is assumed destructive and open-world)
tool folders           ``dangerous: true`` → code_execution; otherwise local_write (a script that
                       runs on the host and writes at most local state). ``requireApproval`` sets
                       the approval requirement explicitly, it does not change the level.
=====================  =========================================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "SideEffect",
    "ToolHints",
    "level_from_access",
    "level_from_annotations",
    "level_from_dangerous",
    "requires_approval_by_default",
]


class SideEffect(StrEnum):
    """How much a tool can change the world (``sideEffects.level`` of ``Tool`` resources), mildest
    first."""

    READ_ONLY = "read_only"
    LOCAL_WRITE = "local_write"
    EXTERNAL_WRITE = "external_write"
    FINANCIAL = "financial"
    COMMUNICATION = "communication"
    CODE_EXECUTION = "code_execution"
    PRIVILEGED = "privileged"

    @property
    def writes(self) -> bool:
        """True for every level that may change state."""
        return self is not SideEffect.READ_ONLY


_ACCESS_TO_LEVEL = {
    "read": SideEffect.READ_ONLY,
    "write": SideEffect.EXTERNAL_WRITE,
    "external": SideEffect.EXTERNAL_WRITE,
}

# The resource format: "Each level has default approval policies". Reading and writing
# agent-owned local state run without a prompt; everything that reaches other people, money,
# code or infrastructure asks.
_APPROVAL_BY_DEFAULT = {
    SideEffect.READ_ONLY: False,
    SideEffect.LOCAL_WRITE: False,
    SideEffect.EXTERNAL_WRITE: True,
    SideEffect.FINANCIAL: True,
    SideEffect.COMMUNICATION: True,
    SideEffect.CODE_EXECUTION: True,
    SideEffect.PRIVILEGED: True,
}


def level_from_access(access: str) -> SideEffect:
    """Map a capability manifest's ``access`` value (``read`` / ``write`` / ``external``) to a
    level."""
    try:
        return _ACCESS_TO_LEVEL[access]
    except KeyError:
        expected = ", ".join(sorted(_ACCESS_TO_LEVEL))
        raise ValueError(f"access must be one of {expected}, not {access!r}") from None


def level_from_annotations(*, read_only: bool | None, open_world: bool | None = None) -> SideEffect:
    """Map MCP tool annotations (``readOnlyHint``, ``openWorldHint``) to a level."""
    if read_only:
        return SideEffect.READ_ONLY
    if open_world is False:
        return SideEffect.LOCAL_WRITE
    return SideEffect.EXTERNAL_WRITE


def level_from_dangerous(dangerous: bool) -> SideEffect:
    """Map a tool folder's ``dangerous`` flag to a level."""
    return SideEffect.CODE_EXECUTION if dangerous else SideEffect.LOCAL_WRITE


def requires_approval_by_default(level: SideEffect) -> bool:
    """Whether a call at this level asks a person when the tool says nothing about approval."""
    return _APPROVAL_BY_DEFAULT[level]


@dataclass(frozen=True, slots=True)
class ToolHints:
    """MCP-style behaviour hints. ``None`` means "not declared": derived from the level on export.

    Hints are descriptive only. They never relax a rule: the side-effect level and the approval
    spec decide what the gateway enforces.
    """

    read_only: bool | None = None
    """``readOnlyHint``: the tool does not modify its environment."""
    destructive: bool | None = None
    """``destructiveHint``: the tool may perform irreversible updates."""
    idempotent: bool | None = None
    """``idempotentHint``: repeating a call with the same arguments has no additional effect."""
    open_world: bool | None = None
    """``openWorldHint``: the tool interacts with entities outside the local environment."""

    def resolved(self, level: SideEffect) -> ToolHints:
        """Fill every undeclared hint from the level, so exporters always have four booleans."""
        read_only = level is SideEffect.READ_ONLY if self.read_only is None else self.read_only
        return ToolHints(
            read_only=read_only,
            destructive=(not read_only) if self.destructive is None else self.destructive,
            idempotent=read_only if self.idempotent is None else self.idempotent,
            open_world=(level is not SideEffect.LOCAL_WRITE)
            if self.open_world is None
            else self.open_world,
        )
