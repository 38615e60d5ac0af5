"""What a person sees before approving: title, risk label and facts (``buildConfirmation``).

Three sources, in order:

1. a Python ``build_confirmation(args)`` bound with the tool (returns a mapping with ``title``,
   ``risk``/``riskLabel`` and ``facts`` as ``[{label, value}]``);
2. the tool's static :class:`~toolgate.ConfirmationSpec`, whose title and fact values may be
   templates such as ``{{ args.repository }}``, rendered in Jinja2's sandbox (no attribute access
   to Python internals, no I/O);
3. defaults: the tool's title, a risk label from its side-effect level, and the arguments as facts.

A builder or template that fails is not an approval: it raises :class:`ConfirmationError` and the
call is denied.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..model import SideEffect, Tool
from ..python.binding import PythonBinding
from ..registry import RegisteredTool

__all__ = [
    "Confirmation",
    "ConfirmationError",
    "build_confirmation",
    "confirmation_builder",
    "risk_label",
]

_RISK_BY_LEVEL = {
    SideEffect.READ_ONLY: "low",
    SideEffect.LOCAL_WRITE: "low",
    SideEffect.EXTERNAL_WRITE: "medium",
    SideEffect.COMMUNICATION: "medium",
    SideEffect.FINANCIAL: "high",
    SideEffect.CODE_EXECUTION: "high",
    SideEffect.PRIVILEGED: "critical",
}
_MAX_FACT_CHARS = 500
_MAX_FACTS = 20


class ConfirmationError(Exception):
    """The confirmation could not be built; the call must be denied."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    """The confirmation shown to a person."""

    title: str
    risk: str
    facts: tuple[tuple[str, str], ...]


def risk_label(level: SideEffect) -> str:
    """The default risk label of a side-effect level."""
    return _RISK_BY_LEVEL[level]


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= _MAX_FACT_CHARS else text[: _MAX_FACT_CHARS - 1] + "…"


def _render(template: str, context: Mapping[str, Any]) -> str:
    if "{{" not in template and "{%" not in template:
        return template
    from jinja2 import StrictUndefined
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    environment = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    return environment.from_string(template).render(**context)


def _from_builder(result: Any) -> tuple[str | None, str | None, list[tuple[str, str]]]:
    if not isinstance(result, Mapping):
        raise ConfirmationError(
            f"build_confirmation must return a mapping, not {type(result).__name__}"
        )
    facts: list[tuple[str, str]] = []
    for index, fact in enumerate(result.get("facts") or ()):
        if not isinstance(fact, Mapping) or "label" not in fact:
            raise ConfirmationError(f"build_confirmation: facts[{index}] needs a label")
        facts.append((_text(fact["label"]), _text(fact.get("value", ""))))
    title = result.get("title")
    risk = result.get("risk", result.get("riskLabel"))
    return (
        None if title is None else _text(title),
        None if risk is None else _text(risk),
        facts,
    )


def build_confirmation(
    tool: Tool,
    arguments: Mapping[str, Any],
    *,
    builder: Callable[[Mapping[str, Any]], Any] | None = None,
) -> Confirmation:
    """The confirmation for a call of ``tool`` with ``arguments``.

    Raises :class:`ConfirmationError` when a builder raises or returns something unusable, or a
    template fails to render.
    """
    title: str | None = None
    risk: str | None = None
    facts: list[tuple[str, str]] = []
    spec = tool.approval.confirmation
    try:
        if builder is not None:
            title, risk, facts = _from_builder(builder(dict(arguments)))
        elif spec is not None:
            context = {"args": dict(arguments), "tool": {"id": tool.id, "title": tool.title}}
            title = None if spec.title is None else _render(spec.title, context)
            risk = spec.risk
            facts = [(fact.label, _text(_render(fact.value, context))) for fact in spec.facts]
    except ConfirmationError:
        raise
    except Exception as exc:
        raise ConfirmationError(
            f"the confirmation of {tool.id} could not be built ({type(exc).__name__}: {exc})"
        ) from exc
    if not facts:
        facts = [(name, _text(value)) for name, value in arguments.items()]
    return Confirmation(
        title=title or tool.display_title,
        risk=risk or risk_label(tool.side_effect),
        facts=tuple(facts[:_MAX_FACTS]),
    )


def confirmation_builder(entry: RegisteredTool) -> Callable[[Mapping[str, Any]], Any] | None:
    """The tool's own confirmation builder (``buildConfirmation``), when it has one."""
    binding = entry.binding
    return binding.build_confirmation if isinstance(binding, PythonBinding) else None
