"""When a call needs a person's approval, and the operator's say in it.

Precedence (documented in the README):

1. the side-effect level's default (``read_only``, ``local_write``: no; every other level: yes);
2. the tool's own declaration overrides it (``approval.required`` in a capability
   manifest, ``requireApproval`` in a tool folder or plugin, ``requiresApproval`` in a ``Tool``
   resource);
3. operator rules from ``toolgate.yaml`` — by tool id, namespace or level — can only make it
   stricter (``require: true``), unless a rule explicitly says ``override: true``, which lets
   ``require: false`` waive the tool's own requirement. When several rules match, the most
   specific wins (tool id, then namespace, then level); among equals, any ``require: true`` wins.
4. A security script's verdict that asks for a person (``allowed: false, requiresApproval:
   true``) always needs approval, whatever the rules say.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..model import SideEffect, Tool

__all__ = ["ApprovalPolicy", "ApprovalRule"]


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """One operator rule. Exactly one of ``tool``, ``namespace``, ``level`` selects the tools."""

    require: bool
    tool: str | None = None
    namespace: str | None = None
    level: SideEffect | None = None
    override: bool = False
    """Required for ``require: false`` to waive a requirement the tool itself declares."""

    def __post_init__(self) -> None:
        chosen = [name for name in ("tool", "namespace", "level") if getattr(self, name)]
        if len(chosen) != 1:
            raise ValueError("an approval rule selects by exactly one of tool, namespace, level")
        if self.level is not None:
            object.__setattr__(self, "level", SideEffect(self.level))  # "local_write" works too

    def specificity(self, tool: Tool) -> int | None:
        """How specifically this rule matches ``tool`` (higher wins), or ``None``."""
        if self.tool is not None:
            return 3 if self.tool == tool.id else None
        if self.namespace is not None:
            return 2 if self.namespace == tool.namespace else None
        return 1 if self.level is tool.side_effect else None


class ApprovalPolicy:
    """Decides whether calls of a tool need a person's approval."""

    def __init__(self, rules: Iterable[ApprovalRule] = ()) -> None:
        self.rules = tuple(rules)

    def requires_approval(self, tool: Tool) -> bool:
        """The tool's own answer, adjusted by the operator's rules."""
        own = tool.requires_approval
        matches = [
            (rank, rule) for rule in self.rules if (rank := rule.specificity(tool)) is not None
        ]
        if not matches:
            return own
        best = max(rank for rank, _ in matches)
        winners = [rule for rank, rule in matches if rank == best]
        if any(rule.require for rule in winners):
            return True
        # Every most-specific rule says "no approval": that relaxes only with an explicit override.
        return own and not all(rule.override for rule in winners)
