"""The LangChain / LangGraph adapter, driven by LangChain's own fake chat model.

Every run is real: ``create_agent`` (one LangGraph task per tool call) or a hand-built graph with
one ``ToolNode`` task for all of a message's tool calls, an ``InMemorySaver`` checkpointer, the
in-process gateway of ``integrations_support`` with its SQLite state and audit, and the log that
counts side effects.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from pydantic import Field
from typing_extensions import TypedDict

from doc_blocks import doc_block
from integrations_served import ServedToolgate, served_toolgate
from integrations_support import AGENT, Setup, approval_gateway, audit_records, sent_lines
from toolgate import Client, tool
from toolgate.integrations import ToolSpec
from toolgate.integrations.langchain import (
    APPROVAL_PAYLOAD_TYPE,
    ToolgateTool,
    atoolgate_tools,
    decision_for,
    is_toolgate_approval,
    send_tool_calls,
    toolgate_tools,
)
from toolgate.integrations.langchain.middleware import ToolgateMiddleware
from toolgate.model.approval import ApprovalStatus
from toolgate.model.content import ContentResult

__all__ = ["served_toolgate"]  # the module's real toolgate serve, imported for pytest


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, answering from a script, remembering what it was shown."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)
    bound_names: list[list[str]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        # What a provider would be sent: LangChain's own conversion of each tool.
        self.bound[:] = [convert_to_openai_tool(t) for t in tools]
        self.bound_names.append(sorted(t["function"]["name"] for t in self.bound))
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def script(*turns: AIMessage | str) -> ScriptedModel:
    return ScriptedModel(messages=iter(turns))


def calls(*items: tuple[str, dict[str, Any], str]) -> AIMessage:
    """One model turn calling tools: (provider name, arguments, tool call id)."""
    return AIMessage(
        "", tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in items]
    )


EMAIL = ("demo__send_email", {"to": "ann@example.com", "body": "hi"}, "call_email")
CHARGE = ("demo__charge", {"amount": 5}, "call_charge")


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def tool_messages(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def interrupts_by_tool(result: dict[str, Any]) -> dict[str, Any]:
    return {i.value["tool"]: i for i in result.get("__interrupt__", ())}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with approval_gateway(tmp_path) as ready:
        yield ready


async def agent_for(setup: Setup, model: ScriptedModel, **options: Any) -> Any:
    tools = await atoolgate_tools(setup.tools, **options)
    return create_agent(model, tools, checkpointer=InMemorySaver())


def one_task_graph(model: ScriptedModel, tools: list[Any]) -> Any:
    """The classic graph: every tool call of a message runs in ONE ``ToolNode`` task, so a
    resume re-runs all of them."""
    bound = model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def per_call_graph(model: ScriptedModel, tools: list[Any]) -> Any:
    """A hand-built graph whose tool calls each run as their own task (``send_tool_calls``)."""
    bound = model.bind_tools(tools)

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", send_tool_calls, ["tools", END])
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=InMemorySaver())


def decisions_of(setup: Setup, tool_id: str) -> list[Any]:
    return [r for r in audit_records(setup, tool_id=tool_id) if r.agent == AGENT]


# -- tools as declared -----------------------------------------------------------------------


class Address(TypedDict):
    city: str
    zip: Annotated[str, Field(pattern=r"^[0-9]{5}$")]


@tool(namespace="shop", effect="read_only")
def ship(
    priority: Literal["low", "high"],
    count: Annotated[int, Field(ge=1, le=10)],
    address: Address,
) -> str:
    """Ship parcels to an address."""
    return f"{count} {priority} to {address['city']}"


async def test_the_model_sees_the_json_schema_as_declared(setup: Setup) -> None:
    setup.gateway.add(ship)
    declared = next(s for s in await setup.tools.list_tools() if s.id == "shop:ship").parameters
    assert declared["properties"]["priority"]["enum"] == ["low", "high"]
    model = script(
        calls(
            ("shop__ship", {"priority": "urgent", "count": 0, "address": {"city": "X"}}, "c1"),
            (
                "shop__ship",
                {"priority": "low", "count": 2, "address": {"city": "Oslo", "zip": "01234"}},
                "c2",
            ),
        ),
        "done",
    )
    agent = await agent_for(setup, model)
    result = await agent.ainvoke({"messages": [HumanMessage("ship")]}, thread("schema"))

    tool_ = next(t for t in await atoolgate_tools(setup.tools) if t.name == "shop__ship")
    # The tool holds the schema as declared; LangChain adds only the description.
    assert {k: v for k, v in tool_.tool_call_schema.items() if k != "description"} == declared
    sent = {t["function"]["name"]: t["function"]["parameters"] for t in model.bound}
    # What a provider is sent: LangChain inlines $ref/$defs and drops "title" annotations;
    # every validation keyword survives — enum, minimum/maximum, the nested object's pattern
    # and additionalProperties: false.
    address = {k: v for k, v in declared["$defs"]["Address"].items() if k != "title"}
    inlined = {k: v for k, v in declared.items() if k != "$defs"}
    inlined["properties"] = {**declared["properties"], "address": address}
    assert sent["shop__ship"] == inlined
    messages = tool_messages(result)
    # The gateway validates against the same schema: the model reads what was wrong.
    assert messages["c1"].status == "error"
    assert "Error [invalid_arguments]" in messages["c1"].content
    assert messages["c2"].status == "success" and messages["c2"].content == "2 low to Oslo"


async def test_only_the_agents_tools_are_listed(setup: Setup) -> None:
    @tool(namespace="ops", effect="read_only", allowed_agents=["someone-else"])
    def secret() -> str:
        """Not for the planner."""
        return "secret"

    setup.gateway.add(secret)
    names = {t.name for t in await atoolgate_tools(setup.tools)}
    assert "demo__send_email" in names and "ops__secret" not in names
    assert all(isinstance(t, ToolgateTool) for t in await atoolgate_tools(setup.tools))


# -- approvals through interrupt() -------------------------------------------------------------


async def test_a_waiting_call_interrupts_and_a_toolgate_decision_lets_it_run_once(
    setup: Setup,
) -> None:
    model = script(calls(EMAIL), "sent it")
    agent = await agent_for(setup, model, workspace=None)
    config = thread("t-approve")
    paused = await agent.ainvoke({"messages": [HumanMessage("mail ann")]}, config)

    (interrupt,) = paused["__interrupt__"]
    payload = interrupt.value
    assert is_toolgate_approval(interrupt) and payload["type"] == APPROVAL_PAYLOAD_TYPE
    assert payload["tool"] == "demo:send_email" and payload["tool_call_id"] == "call_email"
    # The fields of LangChain's per-call ToolApprovalRequest, and toolgate's own.
    assert payload["name"] == "demo__send_email"
    assert payload["args"] == {"to": "ann@example.com", "body": "hi"}
    assert "to: ann@example.com" in payload["description"]
    assert ["to", "ann@example.com"] in payload["facts"] and payload["title"]
    assert interrupt.response_schema["properties"]["type"]["enum"] == [
        "approve",
        "always",
        "reject",
    ]
    request = setup.gateway.approvals.get(payload["approval_id"])
    assert request.status is ApprovalStatus.PENDING
    assert request.agent == AGENT and request.session_id == "t-approve"
    assert sent_lines(setup) == []

    # A person approves in toolgate (as the CLI, API or web UI would); the graph is resumed
    # with a value that says otherwise: toolgate's decision, made first, stands.
    setup.gateway.approvals.decide(payload["approval_id"], "approve", by="alice")
    done = await agent.ainvoke(Command(resume="deny"), config)

    assert sent_lines(setup) == ["ann@example.com|hi"]
    message = tool_messages(done)["call_email"]
    assert message.status == "success" and message.content == "sent to ann@example.com"
    assert done["messages"][-1].content == "sent it"
    decided = setup.gateway.approvals.get(payload["approval_id"])
    assert decided.decided_by == "alice" and str(decided.decision) == "approve"
    (ran,) = [r for r in decisions_of(setup, "demo:send_email") if r.status == "ok"]
    assert ran.approval_id == payload["approval_id"] and ran.session == "t-approve"
    assert ran.approval_decision == "approve"


async def test_the_resume_value_is_recorded_in_toolgate(setup: Setup) -> None:
    agent = await agent_for(setup, script(calls(EMAIL), "ok"))
    config = thread("t-resume")
    paused = await agent.ainvoke({"messages": [HumanMessage("mail")]}, config)
    approval_id = paused["__interrupt__"][0].value["approval_id"]

    await agent.ainvoke(Command(resume={"decision": "approve", "by": "bob"}), config)

    request = setup.gateway.approvals.get(approval_id)
    assert request.decided_by == "bob" and str(request.decision) == "approve"
    assert sent_lines(setup) == ["ann@example.com|hi"]
    (ran,) = [r for r in decisions_of(setup, "demo:send_email") if r.status == "ok"]
    assert ran.approval_id == approval_id and ran.approval_decision == "approve"


async def test_a_denial_reaches_the_model_as_an_error_and_is_audited(setup: Setup) -> None:
    model = script(calls(EMAIL), "I will not send it")
    agent = await agent_for(setup, model)
    config = thread("t-deny")
    await agent.ainvoke({"messages": [HumanMessage("mail")]}, config)

    done = await agent.ainvoke(
        Command(resume={"decision": "deny", "by": "carol", "message": "not today"}), config
    )

    message = tool_messages(done)["call_email"]
    assert message.status == "error"
    assert "Error [user_rejection]" in message.content and "not today" in message.content
    assert message.artifact["toolgate"]["code"] == "user_rejection"
    assert sent_lines(setup) == []
    assert any("user_rejection" in str(m.content) for m in model.seen[-1])
    assert any(r.code == "user_rejection" for r in decisions_of(setup, "demo:send_email"))


async def test_always_allow_means_the_next_run_does_not_pause(setup: Setup) -> None:
    agent = await agent_for(setup, script(calls(EMAIL), "ok", calls(EMAIL), "again"))
    await agent.ainvoke({"messages": [HumanMessage("mail")]}, thread("t-always-1"))
    await agent.ainvoke(Command(resume="always"), thread("t-always-1"))
    assert not await setup.tools.approval_needed("demo:send_email")

    second = await agent.ainvoke({"messages": [HumanMessage("again")]}, thread("t-always-2"))

    assert "__interrupt__" not in second
    assert tool_messages(second)["call_email"].status == "success"
    assert sent_lines(setup) == ["ann@example.com|hi", "ann@example.com|hi"]


async def test_a_human_in_the_loop_style_answer_is_taken(setup: Setup) -> None:
    """What a client made for HumanInTheLoopMiddleware's per-call approvals sends."""
    agent = await agent_for(setup, script(calls(EMAIL), "ok"))
    config = thread("t-hitl")
    await agent.ainvoke({"messages": [HumanMessage("mail")]}, config)

    edited = await agent.ainvoke(Command(resume={"type": "edit", "edited_action": {}}), config)
    assert "changed arguments are a new call" in edited["__interrupt__"][0].value["problem"]
    done = await agent.ainvoke(
        Command(resume={"type": "reject", "message": "wrong person"}), config
    )

    message = tool_messages(done)["call_email"]
    assert message.status == "error" and "wrong person" in message.content
    assert "Error [user_rejection]" in message.content and sent_lines(setup) == []


async def test_a_bad_resume_value_asks_again(setup: Setup) -> None:
    agent = await agent_for(setup, script(calls(EMAIL), "ok"))
    config = thread("t-bad")
    await agent.ainvoke({"messages": [HumanMessage("mail")]}, config)

    again = await agent.ainvoke(Command(resume="maybe"), config)

    (interrupt,) = again["__interrupt__"]
    assert "is not a decision" in interrupt.value["problem"]
    assert sent_lines(setup) == []
    await agent.ainvoke(Command(resume="approve"), config)
    assert sent_lines(setup) == ["ann@example.com|hi"]


async def test_a_resume_value_cannot_decide_another_sessions_approval(setup: Setup) -> None:
    other = await setup.tools.call(
        "demo:charge", {"amount": 9}, session_id="someone-else", tool_call_id="x"
    )
    assert other.approval is not None
    agent = await agent_for(setup, script(calls(EMAIL), "ok"))
    config = thread("t-foreign")
    await agent.ainvoke({"messages": [HumanMessage("mail")]}, config)

    again = await agent.ainvoke(
        Command(resume={"approval_id": other.approval.id, "decision": "approve"}), config
    )

    assert "another agent or session" in again["__interrupt__"][0].value["problem"]
    assert setup.gateway.approvals.get(other.approval.id).status is ApprovalStatus.PENDING


# -- parallel approvals: each tool call its own request and its own decision ------------------


async def test_parallel_approvals_resumed_in_the_opposite_order(setup: Setup) -> None:
    agent = await agent_for(setup, script(calls(EMAIL, CHARGE), "done"))
    config = thread("t-parallel")
    paused = await agent.ainvoke({"messages": [HumanMessage("both")]}, config)
    found = interrupts_by_tool(paused)
    a, b = found["demo:send_email"], found["demo:charge"]
    assert a.id != b.id and a.value["approval_id"] != b.value["approval_id"]

    done = await agent.ainvoke(Command(resume={b.id: "deny", a.id: "approve"}), config)

    messages = tool_messages(done)
    assert messages["call_email"].status == "success"
    assert "Error [user_rejection]" in messages["call_charge"].content
    assert sent_lines(setup) == ["ann@example.com|hi"]
    approvals = setup.gateway.approvals
    assert str(approvals.get(a.value["approval_id"]).decision) == "approve"
    assert str(approvals.get(b.value["approval_id"]).decision) == "deny"


async def test_parallel_approvals_resumed_one_at_a_time_b_first(setup: Setup) -> None:
    agent = await agent_for(setup, script(calls(EMAIL, CHARGE), "done"))
    config = thread("t-one-by-one")
    paused = await agent.ainvoke({"messages": [HumanMessage("both")]}, config)
    found = interrupts_by_tool(paused)
    a, b = found["demo:send_email"], found["demo:charge"]

    half = await agent.ainvoke(Command(resume={b.id: "approve"}), config)

    assert [i.value["approval_id"] for i in half["__interrupt__"]] == [a.value["approval_id"]]
    assert sent_lines(setup) == ["charge|5"]
    done = await agent.ainvoke(Command(resume={half["__interrupt__"][0].id: "deny"}), config)
    messages = tool_messages(done)
    assert messages["call_charge"].status == "success"
    assert "Error [user_rejection]" in messages["call_email"].content
    assert sent_lines(setup) == ["charge|5"]


async def test_one_tool_node_task_routes_bound_decisions_by_approval(setup: Setup) -> None:
    """A plain ToolNode runs both calls in one task and LangGraph hands resume values out by
    order of ``interrupt()`` calls (they race): decisions bound with ``decision_for`` still
    reach their own approval, whichever call receives them."""
    wanted = {"demo:send_email": "deny", "demo:charge": "approve"}
    for round_ in range(3):
        model = script(calls(EMAIL, CHARGE), "done")
        graph = one_task_graph(model, await atoolgate_tools(setup.tools))
        config = thread(f"t-one-task-{round_}")
        result = await graph.ainvoke({"messages": [HumanMessage("both")]}, config)
        for _ in range(6):
            if not result.get("__interrupt__"):
                break
            result = await graph.ainvoke(
                Command(
                    resume={
                        i.id: decision_for(i, wanted[i.value["tool"]], by="dora")
                        for i in result["__interrupt__"]
                    }
                ),
                config,
            )
        messages = tool_messages(result)
        assert messages["call_charge"].status == "success"
        assert "Error [user_rejection]" in messages["call_email"].content
    assert sent_lines(setup) == ["charge|5"] * 3


async def test_send_tool_calls_gives_each_call_its_own_interrupt(setup: Setup) -> None:
    graph = per_call_graph(script(calls(EMAIL, CHARGE), "done"), await atoolgate_tools(setup.tools))
    config = thread("t-per-call")
    paused = await graph.ainvoke({"messages": [HumanMessage("both")]}, config)
    found = interrupts_by_tool(paused)
    a, b = found["demo:send_email"], found["demo:charge"]

    done = await graph.ainvoke(Command(resume={b.id: "approve", a.id: "deny"}), config)

    messages = tool_messages(done)
    assert messages["call_charge"].status == "success"
    assert "Error [user_rejection]" in messages["call_email"].content
    assert sent_lines(setup) == ["charge|5"]


async def test_a_sibling_tool_in_the_same_node_does_not_run_twice(setup: Setup) -> None:
    note = ("demo__note", {"text": "n1"}, "call_note")
    model = script(calls(note, EMAIL), "done")
    graph = one_task_graph(model, await atoolgate_tools(setup.tools))
    config = thread("t-sibling")
    paused = await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert paused["__interrupt__"] and sent_lines(setup) == ["note|n1"]

    # The resume runs the whole ToolNode again: the note's call replays its first outcome.
    # (Two calls share the task, so the answer names its approval.)
    (waiting,) = paused["__interrupt__"]
    assert waiting.value["bound_decision_required"] is True
    done = await graph.ainvoke(Command(resume=decision_for(waiting, "approve")), config)

    assert sent_lines(setup) == ["note|n1", "ann@example.com|hi"]
    messages = tool_messages(done)
    assert messages["call_note"].content == "noted n1"
    assert messages["call_note"].artifact["toolgate"]["metadata"]["idempotency"]["replayed"]


async def test_a_resume_repeated_twice_runs_the_tool_once(setup: Setup) -> None:
    model = script(calls(EMAIL), "done", "done again")
    graph = one_task_graph(model, await atoolgate_tools(setup.tools))
    config = thread("t-twice")
    await graph.ainvoke({"messages": [HumanMessage("mail")]}, config)
    paused_at = (await graph.aget_state(config)).config

    await graph.ainvoke(Command(resume="approve"), config)
    # Resume the same interrupted checkpoint a second time (LangGraph's time travel).
    again = await graph.ainvoke(Command(resume="approve"), paused_at)

    assert sent_lines(setup) == ["ann@example.com|hi"]
    assert tool_messages(again)["call_email"].content == "sent to ann@example.com"


def test_the_sync_path_pauses_and_resumes(setup: Setup) -> None:
    tools = toolgate_tools(setup.tools)
    agent = create_agent(script(calls(EMAIL), "ok"), tools, checkpointer=InMemorySaver())
    config = thread("t-sync")
    paused = agent.invoke({"messages": [HumanMessage("mail")]}, config)
    assert paused["__interrupt__"][0].value["tool"] == "demo:send_email"

    done = agent.invoke(Command(resume="approve"), config)

    assert tool_messages(done)["call_email"].content == "sent to ann@example.com"
    assert sent_lines(setup) == ["ann@example.com|hi"]


async def test_idempotency_keys_of_different_calls_never_collide(setup: Setup) -> None:
    """Joined with ':' these two calls' session, tool and call id would read the same."""
    tools = {t.name: t for t in await atoolgate_tools(setup.tools)}
    note = tools["demo__note"]
    for session, call_id in (("a", "x:demo:note:y"), ("a:demo:note:x", "y")):
        graph = one_task_graph(
            script(calls(("demo__note", {"text": "same"}, call_id)), "ok"), [note]
        )
        result = await graph.ainvoke({"messages": [HumanMessage("n")]}, thread(session))
        assert tool_messages(result)[call_id].content == "noted same"
    assert sent_lines(setup) == ["note|same", "note|same"]


def test_a_long_thread_id_still_makes_a_bounded_key(setup: Setup) -> None:
    agent = create_agent(
        script(calls(EMAIL), "ok"), toolgate_tools(setup.tools), checkpointer=InMemorySaver()
    )
    config = thread("t" * 1000)
    agent.invoke({"messages": [HumanMessage("mail")]}, config)
    agent.invoke(Command(resume="approve"), config)
    (ran,) = [r for r in decisions_of(setup, "demo:send_email") if r.status == "ok"]
    assert ran.idempotency_key is not None and len(ran.idempotency_key) <= 200
    assert sent_lines(setup) == ["ann@example.com|hi"]


# -- results as the model should see them -------------------------------------------------------


async def test_a_rate_limit_reaches_the_model_with_its_code(setup: Setup) -> None:
    notes = [("demo__note", {"text": f"n{i}"}, f"call_n{i}") for i in range(3)]
    model = script(calls(notes[0]), calls(notes[1]), calls(notes[2]), "stop")
    agent = await agent_for(setup, model)

    result = await agent.ainvoke({"messages": [HumanMessage("notes")]}, thread("t-rate"))

    messages = tool_messages(result)
    assert messages["call_n2"].status == "error"
    assert messages["call_n2"].content.startswith("Error [rate_limited]")
    assert len(sent_lines(setup)) == 2


async def test_an_unknown_tool_is_tool_not_found(setup: Setup) -> None:
    model = script(calls(("demo__lookup", {"city": "Oslo"}, "c1")), "ok")
    agent = await agent_for(setup, model)
    # The tool went away after the list was made (another process changed the gateway).
    assert setup.gateway.registry.remove("demo:lookup")

    result = await agent.ainvoke({"messages": [HumanMessage("weather")]}, thread("t-gone"))

    message = tool_messages(result)["c1"]
    assert message.status == "error" and message.content.startswith("Error [tool_not_found]")


async def test_an_overflow_shows_the_preview_and_never_the_visualization(setup: Setup) -> None:
    model = script(calls(("demo__report", {"rows": 300}, "c1")), "read it")
    agent = await agent_for(setup, model)

    result = await agent.ainvoke({"messages": [HumanMessage("report")]}, thread("t-big"))

    message = tool_messages(result)["c1"]
    assert message.status == "success"
    assert (
        message.content.startswith('{"text": "00000 ')
        and "Output truncated by toolgate" in message.content
    )
    artifact = message.artifact["toolgate"]
    assert artifact["visualization"]["type"] == "table" and artifact["overflow"]["path"]
    shown = json.dumps([m.content for m in model.seen[-1]])
    assert "_visualization" not in shown and '"Row"' not in shown
    assert "Output truncated by toolgate" in shown


async def test_a_failing_tool_is_an_error_message_with_its_code(setup: Setup) -> None:
    model = script(calls(("demo__fail", {}, "c1")), "oh")
    agent = await agent_for(setup, model)
    result = await agent.ainvoke({"messages": [HumanMessage("fail")]}, thread("t-fail"))
    message = tool_messages(result)["c1"]
    assert message.status == "error" and message.content.startswith("Error [")
    assert message.artifact["toolgate"]["code"] == message.content[7:].split("]")[0]


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(16))).decode()


@tool(namespace="pics", effect="read_only")
def picture() -> Any:
    """A picture with a caption, as an MCP upstream answers."""
    return ContentResult.from_mcp(
        [
            {"type": "text", "text": "A chart:"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "resource_link", "uri": "demo://r/1", "name": "data"},
        ]
    )


async def test_images_reach_the_model_as_langchain_image_blocks(setup: Setup) -> None:
    setup.gateway.add(picture)
    model = script(calls(("pics__picture", {}, "c1")), "nice")
    agent = await agent_for(setup, model)

    result = await agent.ainvoke({"messages": [HumanMessage("draw")]}, thread("t-image"))

    message = tool_messages(result)["c1"]
    assert message.status == "success"
    text, image, link = message.content
    assert text == {"type": "text", "text": "A chart:"}
    assert image == {"type": "image", "base64": PNG, "mime_type": "image/png"}
    assert link["type"] == "text" and "demo://r/1" in link["text"]


# -- create_agent middleware: the tool list per step ------------------------------------------


async def test_the_middleware_lets_a_search_widen_the_tools_mid_run(setup: Setup) -> None:
    setup.gateway.enable_progressive_disclosure(core=["demo:lookup"])
    model = script(calls(("search_tools", {"query": "send an email"}, "s1")), calls(EMAIL), "sent")
    agent = create_agent(
        model, middleware=[ToolgateMiddleware(setup.tools)], checkpointer=InMemorySaver()
    )
    config = thread("t-disclosure")

    paused = await agent.ainvoke({"messages": [HumanMessage("mail ann")]}, config)

    first, second = model.bound_names
    assert "search_tools" in first and "demo__lookup" in first
    assert "demo__send_email" not in first and "demo__send_email" in second
    found = json.loads(tool_messages(paused)["s1"].content)
    assert "demo__send_email" in [row["name"] for row in found]
    # Only this conversation's list grew.
    assert "demo:send_email" not in {s.id for s in await setup.tools.list_tools(session_id="x")}
    assert paused["__interrupt__"][0].value["tool"] == "demo:send_email"

    done = await agent.ainvoke(Command(resume="approve"), config)

    assert tool_messages(done)["call_email"].content == "sent to ann@example.com"
    assert sent_lines(setup) == ["ann@example.com|hi"]


async def test_the_middleware_answers_an_invented_tool_with_tool_not_found(setup: Setup) -> None:
    model = script(
        calls(("demo__teleport", {}, "c1"), ("search_tools", {"query": "x", "limit": 99}, "c2")),
        "ok",
    )
    agent = create_agent(
        model, middleware=[ToolgateMiddleware(setup.tools)], checkpointer=InMemorySaver()
    )

    result = await agent.ainvoke({"messages": [HumanMessage("go")]}, thread("t-invented"))

    messages = tool_messages(result)
    assert messages["c1"].status == "error"
    assert messages["c1"].content.startswith("Error [tool_not_found]")
    assert messages["c2"].content.startswith("Error [invalid_arguments]")


def test_the_middleware_works_from_synchronous_code(setup: Setup) -> None:
    model = script(calls(("demo__lookup", {"city": "Oslo"}, "c1")), "ok")
    agent = create_agent(
        model, middleware=[ToolgateMiddleware(setup.tools)], checkpointer=InMemorySaver()
    )
    result = agent.invoke({"messages": [HumanMessage("weather")]}, thread("t-mw-sync"))
    assert tool_messages(result)["c1"].content == "sunny in Oslo"
    assert "demo__send_email" in model.bound_names[0]


# -- without LangGraph ----------------------------------------------------------------------------


async def test_plain_langchain_answers_that_the_call_waits_for_a_person(setup: Setup) -> None:
    tools = {t.name: t for t in await atoolgate_tools(setup.tools, session_id="chat-1")}
    send = tools["demo__send_email"]
    name, args, _ = EMAIL

    first = await send.ainvoke({"name": name, "args": args, "id": "t1", "type": "tool_call"})

    assert isinstance(first, ToolMessage) and first.status == "error"
    assert "needs a person's approval" in first.content
    approval_id = first.artifact["toolgate"]["approval_id"]
    setup.gateway.approvals.decide(approval_id, "approve", by="erin")
    # The model calls again later (a new tool call id): the approved request runs, once.
    second = await send.ainvoke({"name": name, "args": args, "id": "t2", "type": "tool_call"})
    assert second.status == "success" and sent_lines(setup) == ["ann@example.com|hi"]


async def test_approvals_message_mode_never_interrupts(setup: Setup) -> None:
    agent = await agent_for(setup, script(calls(EMAIL), "waiting"), approvals="message")
    result = await agent.ainvoke({"messages": [HumanMessage("mail")]}, thread("t-msg"))
    assert "__interrupt__" not in result
    assert "needs a person's approval" in tool_messages(result)["call_email"].content


def test_the_gateway_must_be_a_tool_gateway() -> None:
    with pytest.raises(TypeError, match="ToolGateway"):
        ToolgateTool(
            name="x",
            description="x",
            args_schema={"type": "object"},
            spec=ToolSpec(id="x:y", name="x__y", description="x", parameters={}),
            gateway=object(),
        )


def test_decision_for_takes_only_toolgate_interrupts() -> None:
    with pytest.raises(ValueError, match="toolgate approval"):
        decision_for({"type": "other"}, "approve")
    # LangChain's own per-call approvals have the same type, and no toolgate approval.
    with pytest.raises(ValueError, match="toolgate approval"):
        decision_for({"type": APPROVAL_PAYLOAD_TYPE, "tool_call_id": "c", "name": "x"}, "approve")
    payload = {"type": APPROVAL_PAYLOAD_TYPE, "gateway": "toolgate", "approval_id": "a"}
    with pytest.raises(ValueError, match="not a decision"):
        decision_for(payload, "yes")
    assert decision_for(payload, "always", by="x") == {
        "approval_id": "a",
        "decision": "always",
        "by": "x",
    }


# -- the documentation's example -----------------------------------------------------------------


def test_the_documented_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "langchain_example"}
    exec(compile(doc_block("integrations.langchain.example"), "langchain.md", "exec"), namespace)
    assert namespace["SENT"] == ["ann@example.com: Your order shipped."]


async def test_the_sync_listing_works_inside_a_running_loop(setup: Setup) -> None:
    # A synchronous caller inside async code (a notebook cell, a sync callback): the listing
    # runs on a thread of its own instead of failing on the running loop.
    tools = toolgate_tools(setup.tools)
    assert {t.name for t in tools} >= {"demo__send_email", "demo__lookup"}
    lookup = next(t for t in tools if t.name == "demo__lookup")
    assert lookup.invoke({"city": "Oslo"}) == "sunny in Oslo"


# -- against a real toolgate serve, through toolgate.Client --------------------------------------


@pytest.fixture
async def remote(served_toolgate: ServedToolgate) -> AsyncIterator[Client]:
    async with Client(
        served_toolgate.url,
        key=served_toolgate.agent_key,
        approver_key=served_toolgate.operator_key,
    ) as client:
        yield client


def remote_sent(served: ServedToolgate, marker: str) -> list[str]:
    return [line for line in served.sent_lines() if marker in line]


@pytest.mark.slow
async def test_remote_a_cli_approval_resumes_the_graph_and_the_call_runs_once(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    email = ("demo__send_email", {"to": "rita@example.com", "body": "remote cli"}, "call_r1")
    model = script(calls(email), "done", "done again")
    graph = one_task_graph(model, await atoolgate_tools(remote))
    config = thread("remote-cli")
    paused = await graph.ainvoke({"messages": [HumanMessage("mail rita")]}, config)
    payload = paused["__interrupt__"][0].value
    assert payload["tool"] == "demo:send_email" and payload["tool_call_id"] == "call_r1"
    paused_at = (await graph.aget_state(config)).config

    served_toolgate.approve(payload["approval_id"])  # a person, with the real CLI
    done = await graph.ainvoke(Command(resume="approve"), config)
    # The same interrupted checkpoint resumed a second time.
    await graph.ainvoke(Command(resume="approve"), paused_at)

    assert tool_messages(done)["call_r1"].content == "sent to rita@example.com"
    assert remote_sent(served_toolgate, "remote cli") == ["rita@example.com|remote cli"]
    request = await remote.approval(payload["approval_id"])
    assert request.agent == AGENT and request.session_id == "remote-cli"
    records = served_toolgate.audit(tool="demo:send_email", agent=AGENT, status="ok")
    ran = [r for r in records if r["approval_id"] == payload["approval_id"]]
    assert [r["approval_decision"] for r in ran] == ["approve"]


@pytest.mark.slow
async def test_remote_parallel_decisions_resumed_in_the_opposite_order(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    email = ("demo__send_email", {"to": "sam@example.com", "body": "remote pair"}, "call_r2")
    charge = ("demo__charge", {"amount": 4242}, "call_r3")
    agent = create_agent(
        script(calls(email, charge), "done"),
        await atoolgate_tools(remote),
        checkpointer=InMemorySaver(),
    )
    config = thread("remote-pair")
    found = interrupts_by_tool(await agent.ainvoke({"messages": [HumanMessage("x")]}, config))
    a, b = found["demo:send_email"], found["demo:charge"]

    done = await agent.ainvoke(
        Command(resume={b.id: "approve", a.id: {"decision": "deny", "message": "no"}}), config
    )

    messages = tool_messages(done)
    assert messages["call_r3"].content == "charged 4242"
    assert messages["call_r2"].status == "error"
    assert "Error [user_rejection]" in messages["call_r2"].content
    assert remote_sent(served_toolgate, "4242") == ["charge|4242"]
    assert remote_sent(served_toolgate, "remote pair") == []
    # Over HTTP the gateway records the operator key's agent as the decider.
    assert (await remote.approval(b.value["approval_id"])).decided_by == "ops"
    assert served_toolgate.audit(tool="demo:send_email", agent=AGENT, code="user_rejection")


@pytest.mark.slow
async def test_remote_without_an_operator_key_the_person_decides_in_toolgate(
    served_toolgate: ServedToolgate,
) -> None:
    email = ("demo__send_email", {"to": "tom@example.com", "body": "remote nokey"}, "call_r4")
    async with Client(served_toolgate.url, key=served_toolgate.agent_key) as client:
        agent = create_agent(
            script(calls(email), "done"),
            await atoolgate_tools(client),
            checkpointer=InMemorySaver(),
        )
        config = thread("remote-nokey")
        await agent.ainvoke({"messages": [HumanMessage("x")]}, config)

        again = await agent.ainvoke(Command(resume="approve"), config)

        (interrupt,) = again["__interrupt__"]
        assert "operator" in interrupt.value["problem"]
        assert remote_sent(served_toolgate, "remote nokey") == []
        served_toolgate.approve(interrupt.value["approval_id"])
        done = await agent.ainvoke(Command(resume="approve"), config)
    assert tool_messages(done)["call_r4"].content == "sent to tom@example.com"
    assert remote_sent(served_toolgate, "remote nokey") == ["tom@example.com|remote nokey"]


@pytest.mark.slow
def test_remote_the_sync_api_keeps_the_client_on_one_loop(served_toolgate: ServedToolgate) -> None:
    client = Client(served_toolgate.url, key=served_toolgate.agent_key)
    tools = toolgate_tools(client)
    agent = create_agent(
        script(
            calls(("demo__lookup", {"city": "Oslo"}, "c1")),
            calls(("demo__lookup", {"city": "Rome"}, "c2")),
            "ok",
        ),
        tools,
        checkpointer=InMemorySaver(),
    )
    done = agent.invoke({"messages": [HumanMessage("weather")]}, thread("remote-sync"))
    messages = tool_messages(done)
    assert messages["c1"].content == "sunny in Oslo" and messages["c2"].content == "sunny in Rome"


def test_a_sync_call_from_the_adapters_own_loop_fails_instead_of_hanging() -> None:
    from toolgate.integrations.langchain._sync import run_sync

    async def nested() -> None:
        run_sync(asyncio.sleep(0))

    with pytest.raises(RuntimeError, match="adapter's own event loop"):
        run_sync(nested())
