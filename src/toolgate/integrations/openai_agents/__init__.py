"""toolgate tools for the OpenAI Agents SDK (``pip install 'toolgate[openai-agents]'``).

:func:`toolgate_tools` turns what a :class:`~toolgate.integrations.base.ToolGateway` lets its
agent call into the SDK's ``FunctionTool`` values. Every call goes through the gateway (access
rules, approvals, security checks, rate limits, idempotency, result shaping, audit) with the
session, the workspace, the SDK's tool call id and an idempotency key made of both.

Approvals are the SDK's own human-in-the-loop, with toolgate as the authority:

* ``needs_approval`` asks the gateway for the call's approval request
  (:meth:`ToolGateway.request_approval`), which finds or makes it without ever running the
  call: no prompt when nobody would be asked (an "always allow" grant covers the tool), and
  otherwise the pending request is in toolgate's queue (web UI, CLI, HTTP API) while the run
  is paused with the call among ``result.interruptions``. The call itself runs only in the
  SDK's invocation, after its guardrails and hooks; so do the helpers below, which find a
  request the same way and never run a call.
* The SDK calls nothing when ``RunState.approve``/``reject`` is used, so the decision is
  written to toolgate by :meth:`ToolgateTools.approve` / :meth:`ToolgateTools.reject` (which
  then update the state), and a decision made in toolgate is brought into the state by
  :meth:`ToolgateTools.sync`. Toolgate's decision wins: a request already decided there is
  mirrored into the state whatever the application asked.
* The resumed run retries the call with the same tool call id: an approved call runs once, and
  a denied one reaches the model as the SDK's rejection message, worded as toolgate words
  ``user_rejection``.

The SDK is imported here only: ``import toolgate`` never loads it.
"""

from .calls import ApprovalPendingError, model_output
from .tools import ToolgateTools, toolgate_tools

__all__ = [
    "ApprovalPendingError",
    "ToolgateTools",
    "model_output",
    "toolgate_tools",
]
