"""toolgate for Pydantic AI: the gateway's tools as a toolset, approvals as deferred tools.

Install with ``pip install 'toolgate[pydantic-ai]'``. ::

    from pydantic_ai import Agent, DeferredToolRequests
    from toolgate.integrations import LocalGateway
    from toolgate.integrations.pydantic_ai import ToolgateToolset, record_decisions

    tools = LocalGateway(gateway, agent="planner")
    agent = Agent(model, toolsets=[ToolgateToolset(tools)], output_type=[str, DeferredToolRequests])
    result = await agent.run("...")
    if isinstance(result.output, DeferredToolRequests):          # a call waits for a person
        results = await record_decisions(tools, result.output, {...: "approve"}, by="alice")
        result = await agent.run(message_history=result.all_messages(),
                                 deferred_tool_results=results)

See ``docs/guides/pydantic-ai.md``.
"""

from ._decisions import DecisionValue, decisions_from_toolgate, record_decisions, toolgate_approvals
from ._results import METADATA_KEY
from ._toolset import ToolgateToolset

__all__ = [
    "METADATA_KEY",
    "DecisionValue",
    "ToolgateToolset",
    "decisions_from_toolgate",
    "record_decisions",
    "toolgate_approvals",
]
