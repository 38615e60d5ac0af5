"""The Authorize stage: who may call a tool (``safety`` and ``Policy`` resources).

Tool-level rules are minimum guarantees; policies add to them:

1. ``safety.allowedAgents``: only these agents may call (unset: any agent);
2. ``safety.deniedNamespaces``: no agent in these namespaces may call;
3. every ``Policy`` that applies to the agent, rules in declared order: a ``deny`` short-circuits
   (any deny wins over any allow); ``require: {approval: human}`` marks the call as needing a
   person's approval (the Approval stage acts on it);
4. the caller's credentials: an OAuth token's scopes allow some namespaces only (``namespaces``
   of the call), and a tool outside them is denied like any other.

The same decision filters listings, so an agent never sees a tool it cannot call — and a tool it
cannot see does not exist for it: the pipeline resolves such a call exactly like a call to a
tool that does not exist (``tool_not_found``, the same message, suggestions only among the tools
it may see). The audit log records the call as ``forbidden`` with the rule that refused it, for the
operator; the caller is never told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..errors import ErrorCode
from ..model import CallOutcome, Tool
from ..model.policy import AccessPolicy, PolicyAction, PolicyRule, agent_namespace
from ..registry import RegisteredTool
from .state import CallState, Handler, error_outcome

__all__ = [
    "POLICY_APPROVAL",
    "AccessDecision",
    "AccessRules",
    "AuthorizeStage",
    "unknown_tool_message",
]

#: Metadata key: the policy rule that requires a person's approval for this call.
POLICY_APPROVAL = "policy_requires_approval"


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """Whether an agent may call a tool, and what else a policy requires."""

    allowed: bool
    reason: str | None = None
    """For a denial: which rule denied. For approval: which rule requires it."""
    requires_approval: bool = False


def unknown_tool_message(name: str, suggestions: tuple[str, ...]) -> str:
    """What a caller is told about a tool that does not exist for it — one that does not exist,
    and one it may not see, alike (``suggestions``: only tools it may see)."""
    hint = (
        f" Did you mean: {', '.join(suggestions)}?"
        if suggestions
        else " List the available tools and use one of their names."
    )
    return f"There is no tool named {name!r}.{hint}"


#: Cached (tool, agent) decisions before the cache starts over (agents are few; this bounds it
#: when agent names come from callers).
_MAX_CACHED_DECISIONS = 4096


def _facts(tool: Tool, agent: str | None) -> dict[str, str]:
    return {
        "tool.id": tool.id,
        "tool.namespace": tool.namespace,
        "tool.sideEffect": str(tool.side_effect),
        "agent.name": agent or "",
        "agent.namespace": agent_namespace(agent),
    }


def _matches(rule: PolicyRule, facts: Mapping[str, str]) -> bool:
    return all(facts.get(key) in values for key, values in rule.when.items())


#: The gateway's own tools that every token may call whatever its scopes: their answers are
#: filtered by the caller's namespaces themselves (the search tool finds only tools it may call).
IN_EVERY_SCOPE = frozenset({"toolgate:search_tools"})


class AccessRules:
    """Evaluates tool safety declarations and operator policies."""

    def __init__(
        self,
        policies: Iterable[AccessPolicy] = (),
        *,
        agent_labels: Callable[[str | None], Mapping[str, str]] = lambda agent: {},
    ) -> None:
        self._policies = tuple(policies)
        self.agent_labels = agent_labels
        # (id(tool), agent) -> (tool, decision). A decision depends only on the tool, the agent
        # and the policies (labels are fixed per gateway), so it is computed once per pair; the
        # tool is kept in the value so that a recycled id() never returns a stale decision.
        self._decisions: dict[
            tuple[int, str | None, frozenset[str] | None], tuple[Tool, AccessDecision]
        ] = {}
        self.scoped = False
        """Whether calls may carry a namespace restriction (OAuth scopes): the Authorize stage
        then checks every tool. Set on the first such call (:meth:`Gateway.call`)."""

    @property
    def policies(self) -> tuple[AccessPolicy, ...]:
        """The operator's policies, in evaluation order."""
        return self._policies

    @policies.setter
    def policies(self, policies: Iterable[AccessPolicy]) -> None:
        self._policies = tuple(policies)
        self._decisions = {}  # every cached decision may change

    def _applies(self, policy: AccessPolicy, agent: str | None) -> bool:
        if policy.agents is not None and (agent or "") not in policy.agents:
            return False
        if policy.agent_labels:
            labels = self.agent_labels(agent)
            return all(labels.get(k) == v for k, v in policy.agent_labels.items())
        return True

    def guards(self, tool: Tool) -> bool:
        """Whether any rule may deny or mark calls of ``tool`` (else every caller may call it,
        and nothing needs deciding)."""
        safety = tool.safety
        return bool(
            self.policies
            or self.scoped
            or safety.allowed_agents is not None
            or safety.denied_namespaces
        )

    def hidden_by(
        self, tool: Tool, agent: str | None, namespaces: frozenset[str] | None = None
    ) -> str | None:
        """Why ``agent`` (with credentials allowing ``namespaces``) may not see ``tool`` — list
        it, be told about it, call it — or ``None`` when it may."""
        if namespaces is None and not self.guards(tool):
            return None
        decision = self.decide(tool, agent, namespaces)
        return None if decision.allowed else decision.reason or "access rules"

    def visible(
        self, tool: Tool, agent: str | None, namespaces: frozenset[str] | None = None
    ) -> bool:
        """Whether ``agent`` (with credentials allowing ``namespaces``) may see ``tool``."""
        return self.hidden_by(tool, agent, namespaces) is None

    def decide(
        self, tool: Tool, agent: str | None, namespaces: frozenset[str] | None = None
    ) -> AccessDecision:
        """The decision for ``agent`` calling ``tool`` (arguments never matter here), with
        credentials that allow only ``namespaces`` (``None``: any)."""
        key = (id(tool), agent, namespaces)
        cached = self._decisions.get(key)
        if cached is not None and cached[0] is tool:
            return cached[1]
        decision = self._decide(tool, agent, namespaces)
        if len(self._decisions) >= _MAX_CACHED_DECISIONS:
            self._decisions = {}
        self._decisions[key] = (tool, decision)
        return decision

    def _decide(
        self, tool: Tool, agent: str | None, namespaces: frozenset[str] | None
    ) -> AccessDecision:
        if (
            namespaces is not None
            and tool.namespace not in namespaces
            and tool.id not in IN_EVERY_SCOPE
        ):
            return AccessDecision(
                False,
                f"the caller's token does not grant the namespace {tool.namespace!r} (its scopes "
                "allow other namespaces only)",
            )
        safety = tool.safety
        who = agent or "(unnamed agent)"
        if safety.allowed_agents is not None and (agent or "") not in safety.allowed_agents:
            return AccessDecision(
                False, f"tool {tool.id} allows only listed agents, and {who} is not one of them"
            )
        namespace = agent_namespace(agent)
        if namespace in safety.denied_namespaces:
            return AccessDecision(
                False, f"tool {tool.id} may not be called by agents in namespace {namespace!r}"
            )
        facts = _facts(tool, agent)
        approval: str | None = None
        for policy in self.policies:
            if not self._applies(policy, agent):
                continue
            for index, rule in enumerate(policy.rules):
                if not _matches(rule, facts):
                    continue
                label = f"policy {policy.name!r} rule {index + 1}"
                because = f" ({rule.reason})" if rule.reason else ""
                if rule.action is PolicyAction.DENY:
                    return AccessDecision(False, f"denied by {label}{because}")
                approval = approval or f"required by {label}{because}"
        return AccessDecision(True, approval, requires_approval=approval is not None)


class AuthorizeStage:
    """Marks calls a policy requires approval for. Calls the agent may not make never get here
    (the pipeline resolves them as unknown tools); should one, it ends as ``tool_not_found``
    all the same."""

    name = "authorize"
    suspends = False

    def __init__(self, rules: AccessRules) -> None:
        self.rules = rules

    def applies_to(self, entry: RegisteredTool) -> bool:
        return self.rules.guards(entry.tool)

    async def __call__(self, state: CallState, proceed: Handler) -> CallOutcome:
        decision = self.rules.decide(state.tool, state.agent, state.namespaces)
        if not decision.allowed:
            # Fail closed if the rules changed since the call was resolved; still no word of
            # the tool or the rule to the caller.
            state.metadata.clear()
            return error_outcome(
                state,
                ErrorCode.TOOL_NOT_FOUND,
                unknown_tool_message(state.tool.id, ()),
                detail=f"refused: {decision.reason}",
            )
        if decision.requires_approval:
            state.metadata[POLICY_APPROVAL] = decision.reason
        return await proceed(state)
