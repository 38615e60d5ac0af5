"""The verdict of a security check (the security scripts of tool folders)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SecurityVerdict", "parse_verdict"]


@dataclass(frozen=True, slots=True)
class SecurityVerdict:
    """What a security check decided. The four outcomes:

    ========= ================= =====================================
    allowed   requiresApproval  result
    ========= ================= =====================================
    true      false             the tool runs
    false     false             blocked (``security_blocked``)
    true      true              the tool runs (no prompt needed)
    false     true              a person is asked
    ========= ================= =====================================
    """

    allowed: bool
    requires_approval: bool = False
    permission_type: str | None = None
    permission_key: str | None = None
    message: str | None = None

    @property
    def asks_a_person(self) -> bool:
        """True for the one outcome that needs a person: not allowed, but approvable."""
        return not self.allowed and self.requires_approval


def parse_verdict(value: Any) -> SecurityVerdict:
    """Read a verdict object; raise ``ValueError`` saying what is wrong with it."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a JSON object, got {type(value).__name__}")
    allowed = value.get("allowed")
    if not isinstance(allowed, bool):
        raise ValueError("'allowed' must be true or false")
    requires = value.get("requiresApproval", False)
    if not isinstance(requires, bool):
        raise ValueError("'requiresApproval' must be true or false")
    strings: dict[str, str | None] = {}
    for key in ("permissionType", "permissionKey", "message"):
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise ValueError(f"'{key}' must be a string")
        strings[key] = item
    return SecurityVerdict(
        allowed=allowed,
        requires_approval=requires,
        permission_type=strings["permissionType"],
        permission_key=strings["permissionKey"],
        message=strings["message"],
    )
