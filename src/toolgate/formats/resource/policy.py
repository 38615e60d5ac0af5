"""``Policy`` resources → :class:`~toolgate.model.policy.AccessPolicy` values.

::

    apiVersion: joch.dev/v1alpha1
    kind: Policy
    metadata: {name: no-external-writes-for-interns}
    spec:
      appliesTo:
        agents: [intern-bot]                     # names; or
        selector: {matchLabels: {team: interns}} # a label selector
      rules:                                     # evaluated in declared order
        - when: {tool.sideEffect: external_write}
          action: deny
          reason: interns do not write to external systems
        - when: {tool.namespace: [billing, payroll]}
          require: {approval: human}

Condition fields: ``tool.id``, ``tool.namespace``, ``tool.sideEffect``, ``agent.name``,
``agent.namespace``; a value or a list of values (any matches). Every problem is a ``ValueError``
naming the resource and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ...model.policy import AccessPolicy, PolicyAction, PolicyRule

__all__ = ["CONDITION_FIELDS", "POLICY_API_VERSION", "load_policy"]

POLICY_API_VERSION = "joch.dev/v1alpha1"
CONDITION_FIELDS = frozenset(
    {"tool.id", "tool.namespace", "tool.sideEffect", "agent.name", "agent.namespace"}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Selector(_Strict):
    match_labels: dict[str, str] = Field(alias="matchLabels")


class _AppliesTo(_Strict):
    agents: list[str] | None = None
    selector: _Selector | None = None


class _Require(_Strict):
    approval: Literal["human"]


class _Rule(_Strict):
    when: dict[str, str | list[str]]
    action: Literal["deny"] | None = None
    require: _Require | None = None
    reason: str | None = None

    @model_validator(mode="after")
    def _one_effect(self) -> _Rule:
        if (self.action is None) == (self.require is None):
            raise ValueError("give either action: deny or require: {approval: human}")
        unknown = set(self.when) - CONDITION_FIELDS
        if unknown:
            raise ValueError(
                f"unknown condition {sorted(unknown)}; use {', '.join(sorted(CONDITION_FIELDS))}"
            )
        if not self.when:
            raise ValueError("when needs at least one condition")
        return self


class _Spec(_Strict):
    applies_to: _AppliesTo = Field(default_factory=_AppliesTo, alias="appliesTo")
    rules: list[_Rule] = Field(min_length=1)


class _Metadata(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)


class _Policy(_Strict):
    api_version: Literal["joch.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Policy"]
    metadata: _Metadata
    spec: _Spec


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def load_policy(data: Mapping[str, Any], *, source: str) -> AccessPolicy:
    """Validate one ``Policy`` resource; raise ``ValueError`` naming ``source`` and the field."""
    try:
        parsed = _Policy.model_validate(dict(data))
    except ValidationError as exc:
        problems = "; ".join(f"{_where(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{source}: {problems}") from None
    rules = tuple(
        PolicyRule(
            when={
                key: tuple(value) if isinstance(value, list) else (value,)
                for key, value in rule.when.items()
            },
            action=PolicyAction.DENY if rule.action == "deny" else PolicyAction.REQUIRE_APPROVAL,
            reason=rule.reason,
        )
        for rule in parsed.spec.rules
    )
    applies = parsed.spec.applies_to
    return AccessPolicy(
        name=parsed.metadata.name,
        rules=rules,
        agents=None if applies.agents is None else tuple(applies.agents),
        agent_labels={} if applies.selector is None else dict(applies.selector.match_labels),
        source=source,
    )
