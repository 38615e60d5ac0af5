"""toolgate's tools as LangChain ``BaseTool``s, with approvals as LangGraph interrupts.

:func:`toolgate_tools` lists the tools a :class:`~toolgate.integrations.base.ToolGateway` lets its
agent call and makes one :class:`ToolgateTool` per tool. Each tool's ``args_schema`` is the JSON
Schema exactly as declared (a dict: LangChain hands it to the model unchanged, no pydantic
model in between), and every call goes through the gateway with:

* ``session_id`` — the one given, else the LangGraph thread (``configurable.thread_id``);
* ``workspace`` — the adapter option;
* ``tool_call_id`` — the model's tool call id, so each tool call has its own approval request;
* ``idempotency_key`` — from the session, tool, tool call id and arguments
  (:mod:`toolgate.integrations.keys`): when LangGraph runs a node again after an interrupt,
  every tool of that node runs again, and the key makes the gateway replay a call that
  already finished instead of running it twice.

A call that waits for a person calls :func:`langgraph.types.interrupt` with an
:class:`approval payload <approval_payload>` (the approval's id, title, facts, tool, arguments and
tool call id). The value the graph is resumed with is the person's decision: ``"approve"``,
``"always"`` or ``"deny"``, or a dict ``{"decision": ..., "by": ..., "message": ...}``, or one
bound to its approval with ``"approval_id"`` (see :func:`decision_for`) — the only kind taken by
a call that shares its LangGraph task with other tool calls (a plain ``ToolNode`` reached by an
edge), where LangGraph hands a bare answer to whichever call asks first. The decision is recorded
in toolgate (audit, "always allow" grants) and the call is made again with the same tool call id:
an approved call runs once, a denied one reaches the model as an error ``ToolMessage``
(``Error [user_rejection]: ...``).

Outside LangGraph (``approvals="message"``, or a plain LangChain loop) a waiting call answers
with an error ``ToolMessage`` telling the model that it waits for a person; the model's later
call with the same arguments runs once the request is approved.

Also here: :func:`send_tool_calls`, an edge giving each tool call its own LangGraph task (each
waiting call its own interrupt), and :class:`ToolgateSearchTool` (``search_tools``).
:class:`toolgate.integrations.langchain.middleware.ToolgateMiddleware` (needs ``langchain``)
gives ``create_agent`` the conversation's tools at every model call, so tools found by a search
can be called mid-run.
"""

from ._approvals import (
    APPROVAL_PAYLOAD_TYPE,
    RESPONSE_SCHEMA,
    approval_payload,
    decision_for,
    is_toolgate_approval,
)
from ._graph import send_tool_calls
from ._search import SEARCH_TOOL_NAME, ToolgateSearchTool
from ._tools import ToolgateTool, atoolgate_tools, toolgate_tools

__all__ = [
    "APPROVAL_PAYLOAD_TYPE",
    "RESPONSE_SCHEMA",
    "SEARCH_TOOL_NAME",
    "ToolgateSearchTool",
    "ToolgateTool",
    "approval_payload",
    "atoolgate_tools",
    "decision_for",
    "is_toolgate_approval",
    "send_tool_calls",
    "toolgate_tools",
]
