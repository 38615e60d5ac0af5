"""Access policy: who may call what (``Tool.safety`` and ``Policy`` resources) — values only.

Agents are named ``name`` or ``namespace/name`` (Kubernetes style); a plain name is in the
namespace ``default``. A tool's ``safety.deniedNamespaces`` lists agent namespaces that may not call
it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "DEFAULT_AGENT_NAMESPACE",
    "AccessPolicy",
    "PolicyAction",
    "PolicyRule",
    "agent_namespace",
    "any_requires_approval",
]

DEFAULT_AGENT_NAMESPACE = "default"


def agent_namespace(agent: str | None) -> str:
    """The namespace of an agent name (``team/bot`` → ``team``; ``bot`` → ``default``)."""
    if agent is None or "/" not in agent:
        return DEFAULT_AGENT_NAMESPACE
    return agent.split("/", 1)[0]


class PolicyAction(StrEnum):
    """What a matching rule does."""

    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """``when`` all conditions hold, ``action`` applies.

    Conditions map a field to the values it may have (any of them): ``tool.id``,
    ``tool.namespace``, ``tool.sideEffect``, ``agent.name``, ``agent.namespace``.
    """

    when: Mapping[str, tuple[str, ...]]
    action: PolicyAction
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """A ``Policy`` resource: the agents it applies to, and its rules in declared order."""

    name: str
    rules: tuple[PolicyRule, ...]
    agents: tuple[str, ...] | None = None
    """Agent names it applies to; ``None`` (and no labels): every agent."""
    agent_labels: Mapping[str, str] = field(default_factory=dict)
    """A label selector (``matchLabels``) over the labels agents are configured with."""
    source: str | None = None
    """Where it was declared, for messages."""


def any_requires_approval(policies: Iterable[AccessPolicy]) -> bool:
    """True when a rule of any of ``policies`` requires approval (then every call is checked)."""
    return any(
        rule.action is PolicyAction.REQUIRE_APPROVAL for policy in policies for rule in policy.rules
    )
