"""The Pydantic AI adapter: full agent runs driven by Pydantic AI's own ``FunctionModel`` over
the demo gateway (``integrations_support``), paused by toolgate's approvals and resumed with
``DeferredToolResults`` — decided in toolgate, through the framework, or through the CLI.

Every run is real: the framework's run loop, the gateway's pipeline, SQLite state and audit.
"Ran once" is counted in the demo tools' side-effect log, never inferred.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import (
    BinaryImage,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from doc_blocks import doc_block
from integrations_served import ServedToolgate, served_toolgate
from integrations_support import (
    AGENT,
    Setup,
    approval_gateway,
    audit_records,
    sent_lines,
)
from toolgate import Client
from toolgate.client import ApproverKeyRequiredError
from toolgate.integrations.keys import idempotency_key
from toolgate.integrations.pydantic_ai import (
    ToolgateToolset,
    decisions_from_toolgate,
    record_decisions,
    toolgate_approvals,
)
from toolgate.integrations.pydantic_ai._results import tool_result
from toolgate.model import CallOutcome, CallStatus
from toolgate.model.content import ContentResult, parse_blocks

Call = tuple[str, dict[str, Any], str]

__all__ = ["served_toolgate"]  # the fixture, imported for pytest


class Script:
    """A ``FunctionModel`` function: response *n* of the conversation makes ``steps[n]``'s tool
    calls, and once the steps are done it answers ``"done"``. It keeps what the model was shown:
    each tool return's text by tool call id, and the tool names of every request."""

    def __init__(self, *steps: list[Call]) -> None:
        self.steps = steps
        self.seen: dict[str, tuple[str, str]] = {}
        self.tool_lists: list[list[str]] = []
        self.shown: list[str] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.tool_lists.append(sorted(tool.name for tool in info.function_tools))
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in message.parts:
                    if isinstance(part, ToolReturnPart):
                        # As sent to the model (a failure wrapped in {"error": ...}), and bare.
                        self.shown.append(part.model_response_str())
                        text = part.model_response_str(wrap_if_error=False)
                        self.seen[part.tool_call_id] = (str(part.outcome), text)
        step = sum(isinstance(message, ModelResponse) for message in messages)
        if step < len(self.steps):
            return ModelResponse(
                parts=[
                    ToolCallPart(name, args, tool_call_id=call_id)
                    for name, args, call_id in self.steps[step]
                ]
            )
        return ModelResponse(parts=[TextPart("done")])


def agent_for(toolset: ToolgateToolset, script: Script, **options: Any) -> Agent[None, Any]:
    return Agent(
        FunctionModel(script),
        toolsets=[toolset],
        output_type=[str, DeferredToolRequests],
        **options,
    )


EMAIL: Call = ("demo__send_email", {"to": "bob@example.com", "body": "hello"}, "call-1")


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    with approval_gateway(tmp_path) as made:
        yield made


async def paused(setup: Setup, script: Script, **toolset: Any) -> tuple[Agent[None, Any], Any]:
    """Run until the first pause; the run must end with the email waiting for approval."""
    agent = agent_for(ToolgateToolset(setup.tools, **toolset), script)
    result = await agent.run("email bob")
    assert isinstance(result.output, DeferredToolRequests)
    assert [call.tool_call_id for call in result.output.approvals] == ["call-1"]
    assert sent_lines(setup) == []
    return agent, result


def approval_id(result: Any, tool_call_id: str = "call-1") -> str:
    return str(result.output.metadata[tool_call_id]["toolgate"]["approval_id"])


# -- approve --------------------------------------------------------------------------------------


async def test_approved_in_toolgate_resumes_and_runs_once(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    facts = toolgate_approvals(result.output)["call-1"]
    assert facts["tool_id"] == "demo:send_email"
    assert ["to", "bob@example.com"] in facts["facts"]

    setup.gateway.approvals.decide(facts["approval_id"], "approve", by="alice")
    results = await decisions_from_toolgate(setup.tools, result.output)
    resumed = await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

    assert resumed.output == "done"
    assert script.seen["call-1"] == ("success", "sent to bob@example.com")
    assert sent_lines(setup) == ["bob@example.com|hello"]
    (ran,) = [r for r in audit_records(setup, tool_id="demo:send_email") if r.status == "ok"]
    assert (ran.agent, ran.approval_decision, ran.approval_id) == (
        AGENT,
        "approve",
        facts["approval_id"],
    )
    assert setup.gateway.approvals.get(facts["approval_id"]).decided_by == "alice"


async def test_framework_approval_is_recorded_in_toolgate(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script, decided_by="support-desk")
    # The application answers in the framework only: toolgate hears it from the toolset.
    plain = DeferredToolResults(approvals={"call-1": True})
    await agent.run(message_history=result.all_messages(), deferred_tool_results=plain)

    assert sent_lines(setup) == ["bob@example.com|hello"]
    request = setup.gateway.approvals.get(approval_id(result))
    assert (request.decision, request.decided_by) == ("approve", "support-desk")
    (ran,) = [r for r in audit_records(setup, tool_id="demo:send_email") if r.status == "ok"]
    assert (ran.agent, ran.approval_decision) == (AGENT, "approve")


async def test_framework_approval_in_another_process_needs_the_deferral_metadata(
    setup: Setup,
) -> None:
    script = Script([EMAIL])
    _, result = await paused(setup, script)
    requests = result.output
    # A fresh toolset never raised the request: a bare True does not tell it which request the
    # person saw, so the run pauses again on the same request and nothing runs.
    fresh = agent_for(ToolgateToolset(setup.tools), script)
    bare = requests.build_results(approvals={"call-1": True})
    again = await fresh.run(message_history=result.all_messages(), deferred_tool_results=bare)
    assert isinstance(again.output, DeferredToolRequests)
    assert approval_id(again) == approval_id(result)
    assert sent_lines(setup) == []

    with_metadata = requests.build_results(approvals={"call-1": True}, metadata=requests.metadata)
    other = agent_for(ToolgateToolset(setup.tools), script)
    await other.run(message_history=result.all_messages(), deferred_tool_results=with_metadata)
    assert sent_lines(setup) == ["bob@example.com|hello"]
    assert setup.gateway.approvals.get(approval_id(result)).decided_by == "pydantic-ai"


async def test_record_decisions_names_the_person(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    results = await record_decisions(setup.tools, result.output, {"call-1": "approve"}, by="alice")
    assert results.answered_by == {"call-1": "alice"}
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

    assert sent_lines(setup) == ["bob@example.com|hello"]
    assert setup.gateway.approvals.get(approval_id(result)).decided_by == "alice"


async def test_a_resume_repeated_runs_the_tool_once(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    results = await record_decisions(setup.tools, result.output, {"call-1": True}, by="alice")
    history = result.all_messages()
    for _ in range(2):  # the same resume twice (a retried request, a second worker)
        resumed = await agent.run(message_history=history, deferred_tool_results=results)
        assert resumed.output == "done"
        assert script.seen["call-1"] == ("success", "sent to bob@example.com")
    # A fresh toolset (another process) resuming the same pause finds the same outcome too.
    again = agent_for(ToolgateToolset(setup.tools), script)
    await again.run(message_history=history, deferred_tool_results=results)

    assert sent_lines(setup) == ["bob@example.com|hello"]
    replays = [r for r in audit_records(setup, tool_id="demo:send_email") if r.status == "ok"]
    assert sum(not (r.metadata.get("idempotency") or {}).get("replayed") for r in replays) == 1


async def test_parallel_calls_each_get_their_own_request(setup: Setup) -> None:
    to_bob = ("demo__send_email", {"to": "bob@example.com", "body": "same"}, "p-1")
    to_bob_again = ("demo__send_email", {"to": "bob@example.com", "body": "same"}, "p-2")
    charge = ("demo__charge", {"amount": 5}, "p-3")
    script = Script([to_bob, to_bob_again, charge])
    agent = agent_for(ToolgateToolset(setup.tools), script)
    result = await agent.run("three things")
    requests = result.output
    assert sorted(call.tool_call_id for call in requests.approvals) == ["p-1", "p-2", "p-3"]
    ids = {tcid: facts["approval_id"] for tcid, facts in toolgate_approvals(requests).items()}
    assert len(set(ids.values())) == 3  # equal arguments, two calls: two requests

    # Decided in the opposite order, one of them denied.
    setup.gateway.approvals.decide(ids["p-3"], "approve", by="alice")
    setup.gateway.approvals.decide(ids["p-2"], "deny", by="alice")
    setup.gateway.approvals.decide(ids["p-1"], "approve", by="alice")
    results = await decisions_from_toolgate(setup.tools, requests)
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

    assert sorted(sent_lines(setup)) == ["bob@example.com|same", "charge|5"]
    assert script.seen["p-1"] == ("success", "sent to bob@example.com")
    assert script.seen["p-2"][0] == "denied"
    assert script.seen["p-3"] == ("success", "charged 5")


async def test_changed_arguments_are_asked_for_again(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    results = await record_decisions(setup.tools, result.output, {"call-1": "approve"}, by="alice")
    changed = {"to": "eve@example.com", "body": "hello"}
    results.approvals["call-1"] = ToolApproved(override_args=changed)
    again = await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

    assert isinstance(again.output, DeferredToolRequests)  # toolgate approved other arguments
    assert approval_id(again) != approval_id(result)
    assert toolgate_approvals(again.output)["call-1"]["facts"][0] == ["to", "eve@example.com"]
    assert sent_lines(setup) == []


# -- deny -----------------------------------------------------------------------------------------


async def test_denied_through_the_helper_reaches_the_model_as_a_rejection(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    results = await record_decisions(
        setup.tools, result.output, {"call-1": "deny"}, by="alice", message="not to bob"
    )
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

    outcome, text = script.seen["call-1"]
    assert outcome == "denied"
    assert text.startswith(
        "Error [user_rejection]: The call to demo:send_email was denied by alice"
    )
    assert "not to bob" in text
    assert sent_lines(setup) == []
    denied = [r for r in audit_records(setup, tool_id="demo:send_email") if r.status == "error"]
    assert [(r.agent, r.code, r.approval_decision) for r in denied] == [
        (AGENT, "user_rejection", "deny")
    ]


async def test_framework_denial_is_recorded_in_toolgate(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    denial = DeferredToolResults(approvals={"call-1": ToolDenied("Bob is on leave")})
    await agent.run(message_history=result.all_messages(), deferred_tool_results=denial)

    assert script.seen["call-1"] == ("denied", "Bob is on leave")
    assert sent_lines(setup) == []
    request = setup.gateway.approvals.get(approval_id(result))
    assert (request.decision, request.decided_by) == ("deny", "pydantic-ai")
    assert request.decision_message == "Bob is on leave"
    (denied,) = [r for r in audit_records(setup, tool_id="demo:send_email") if r.status == "error"]
    assert (denied.agent, denied.code) == (AGENT, "user_rejection")


async def test_a_reused_tool_call_id_is_a_new_request(setup: Setup) -> None:
    # Some models repeat tool call ids (TestModel names its calls after the tool): the denial
    # of the first call must not be taken for an answer to the second.
    first = ("demo__send_email", {"to": "bob@example.com", "body": "first"}, "dup")
    second = ("demo__send_email", {"to": "bob@example.com", "body": "second"}, "dup")
    script = Script([first], [second])
    agent = agent_for(ToolgateToolset(setup.tools), script)
    result = await agent.run("email bob twice")
    denial = DeferredToolResults(approvals={"dup": ToolDenied("not the first")})
    result = await agent.run(message_history=result.all_messages(), deferred_tool_results=denial)
    assert isinstance(result.output, DeferredToolRequests)  # the second call waits
    second_id = approval_id(result, "dup")

    approve = DeferredToolResults(approvals={"dup": True})
    await agent.run(message_history=result.all_messages(), deferred_tool_results=approve)
    assert sent_lines(setup) == ["bob@example.com|second"]
    assert setup.gateway.approvals.get(second_id).decision == "approve"


async def test_a_toolgate_denial_wins_over_a_framework_approval(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    setup.gateway.approvals.decide(approval_id(result), "deny", by="security", message="no")

    # Both ways the framework can approve: through the helper, and plainly.
    results = await record_decisions(setup.tools, result.output, {"call-1": "approve"}, by="alice")
    assert isinstance(results.approvals["call-1"], ToolDenied)
    assert results.metadata["call-1"]["toolgate"]["by"] == "security"
    plain = DeferredToolResults(approvals={"call-1": True})
    for answer in (results, plain):
        await agent.run(message_history=result.all_messages(), deferred_tool_results=answer)
        outcome, text = script.seen["call-1"]
        assert "Error [user_rejection]" in text and "denied by security" in text, outcome

    assert sent_lines(setup) == []
    assert setup.gateway.approvals.get(approval_id(result)).decided_by == "security"


# -- always allow ---------------------------------------------------------------------------------


async def test_always_allow_means_the_next_run_does_not_pause(setup: Setup) -> None:
    script = Script([EMAIL])
    agent, result = await paused(setup, script)
    results = await record_decisions(setup.tools, result.output, {"call-1": "always"}, by="alice")
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)
    assert len(setup.gateway.approvals.grants()) == 1

    second = Script([("demo__send_email", {"to": "carol@example.com", "body": "hi"}, "call-2")])
    again = await agent_for(ToolgateToolset(setup.tools), second).run("email carol")
    assert again.output == "done"
    assert second.seen["call-2"] == ("success", "sent to carol@example.com")
    assert sent_lines(setup) == ["bob@example.com|hello", "carol@example.com|hi"]
    decisions = [
        (r.status, r.approval_decision) for r in audit_records(setup, tool_id="demo:send_email")
    ]
    assert decisions == [("ok", "granted"), ("ok", "always"), ("pending_approval", "pending")]


# -- waiting for toolgate, inline -----------------------------------------------------------------


async def test_inline_handler_waits_for_a_decision_made_in_toolgate(setup: Setup) -> None:
    script = Script([EMAIL])
    tools = setup.tools

    async def decide_when_asked() -> None:
        while not setup.gateway.approvals.pending():
            await asyncio.sleep(0.01)
        (request,) = setup.gateway.approvals.pending()
        setup.gateway.approvals.decide(request.id, "approve", by="alice")

    handler = HandleDeferredToolCalls(
        handler=lambda ctx, requests: decisions_from_toolgate(
            tools, requests, wait=30, poll_interval=0.01
        )
    )
    agent = agent_for(ToolgateToolset(tools), script, capabilities=[handler])
    deciding = asyncio.create_task(decide_when_asked())
    result = await agent.run("email bob")
    await deciding

    assert result.output == "done"
    assert sent_lines(setup) == ["bob@example.com|hello"]


async def test_decisions_from_toolgate_leaves_an_undecided_call_pending(setup: Setup) -> None:
    _, result = await paused(setup, Script([EMAIL]))
    results = await decisions_from_toolgate(setup.tools, result.output)
    assert results.approvals == {}


# -- what the model reads -------------------------------------------------------------------------


async def test_rate_limit_reaches_the_model_with_its_code(setup: Setup) -> None:
    notes = [("demo__note", {"text": f"n{i}"}, f"note-{i}") for i in range(3)]
    script = Script(*[[note] for note in notes])
    result = await agent_for(ToolgateToolset(setup.tools), script).run("take notes")

    assert result.output == "done"
    assert script.seen["note-0"] == ("success", "noted n0")
    outcome, text = script.seen["note-2"]
    assert (outcome, text.split(":")[0]) == ("failed", "Error [rate_limited]")
    assert sent_lines(setup) == ["note|n0", "note|n1"]


async def test_unknown_tools(setup: Setup) -> None:
    # A name never listed: the framework answers the model itself; nothing reaches toolgate.
    script = Script([("demo__launch", {}, "x-1")], [("demo__lookup", {"city": "Oslo"}, "x-2")])
    toolset = ToolgateToolset(setup.tools)
    agent = agent_for(toolset, script)
    await agent.run("go")
    assert "demo__launch" in script.seen["x-1"][1]
    assert audit_records(setup, tool_id="demo:launch") == []

    # A tool that goes away after it was listed: toolgate's own tool_not_found.
    def vanish(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        setup.gateway.remove("demo:lookup")
        return gone(messages, info)

    gone = Script([("demo__lookup", {"city": "Oslo"}, "x-3")])
    await Agent(
        FunctionModel(vanish), toolsets=[toolset], output_type=[str, DeferredToolRequests]
    ).run("go")
    outcome, text = gone.seen["x-3"]
    assert (outcome, text.split(":")[0]) == ("failed", "Error [tool_not_found]")


async def test_overflow_preview_and_note_never_the_visualization(setup: Setup) -> None:
    script = Script(
        [("demo__report", {"rows": 300}, "r-1")], [("demo__report", {"rows": 3}, "r-2")]
    )
    result = await agent_for(ToolgateToolset(setup.tools), script).run("report")

    _, big = script.seen["r-1"]
    assert big.startswith('{"text": "00000 xxx') and len(big) < 300 * 200 / 4
    assert big.endswith("read that file if you need the rest.]")
    assert all("_visualization" not in text and '"columns"' not in text for text in script.shown)
    # The application still has it, beside the return, in metadata the model never sees.
    (small,) = _returns(result, "r-2")
    assert small.metadata["toolgate"]["visualization"]["type"] == "table"
    (overflowed,) = _returns(result, "r-1")
    assert overflowed.metadata["toolgate"]["overflow"]["original_size"] > 300 * 200


def _returns(result: Any, tool_call_id: str) -> list[ToolReturnPart]:
    return [
        part
        for message in result.all_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart) and part.tool_call_id == tool_call_id
    ]


def test_images_go_to_the_model_as_binary_content() -> None:
    # An MCP upstream's image block (the demo tools return none): the model gets the picture
    # itself beside toolgate's text, which notes it; a broken block stays only a note.
    png = base64.b64encode(b"\x89PNG pretend").decode()
    blocks = [
        {"type": "text", "text": "the chart"},
        {"type": "image", "data": png, "mimeType": "image/png"},
    ]
    outcome = CallOutcome(
        status=CallStatus.OK,
        tool_id="up:chart",
        call_id="c",
        content=ContentResult(parse_blocks(blocks)),
    )
    returned = tool_result(outcome)
    text, image = returned.return_value
    assert text == outcome.text and "image/png" in text
    assert isinstance(image, BinaryImage)
    assert (image.data, image.media_type) == (b"\x89PNG pretend", "image/png")


async def test_invalid_arguments_ask_the_model_to_correct_them(setup: Setup) -> None:
    script = Script(
        [("demo__lookup", {"town": "Oslo"}, "i-1")], [("demo__lookup", {"city": "Oslo"}, "i-2")]
    )
    result = await agent_for(ToolgateToolset(setup.tools), script).run("weather")
    assert result.output == "done"
    outcome, text = script.seen["i-1"]
    assert outcome == "retried" and "Error [invalid_arguments]" in text
    assert script.seen["i-2"] == ("success", "sunny in Oslo")


async def test_schemas_are_listed_as_declared(setup: Setup) -> None:
    script = Script()
    await agent_for(ToolgateToolset(setup.tools), script).run("hi")
    specs = {spec.name: spec for spec in await setup.tools.list_tools()}
    assert script.tool_lists[0] == sorted(specs)
    toolset = ToolgateToolset(setup.tools)
    listed = await toolset.get_tools(_context())
    for name, tool in listed.items():
        assert tool.tool_def.parameters_json_schema == dict(specs[name].parameters)
        assert tool.tool_def.description == specs[name].description


def _context() -> Any:
    from pydantic_ai import RunContext
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import RunUsage

    return RunContext(deps=None, model=TestModel(), usage=RunUsage(), conversation_id="s-1")


# -- progressive disclosure -----------------------------------------------------------------------


async def test_a_tool_found_by_search_joins_the_list_mid_run(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        setup.gateway.enable_progressive_disclosure(core=["demo:lookup"])
        script = Script(
            [("toolgate__search_tools", {"query": "write a note"}, "s-1")],
            [("demo__note", {"text": "found"}, "s-2")],
        )
        result = await agent_for(ToolgateToolset(setup.tools), script).run("note it")

        assert result.output == "done"
        assert "demo__note" not in script.tool_lists[0]
        assert "demo__note" in script.tool_lists[1]
        assert script.seen["s-2"] == ("success", "noted found")
        assert sent_lines(setup) == ["note|found"]


# -- keys and arguments ---------------------------------------------------------------------------


def test_idempotency_keys_are_bounded_and_stable() -> None:
    key = idempotency_key("s", "demo:note", "c1", {"text": "a"})
    assert key == idempotency_key("s", "demo:note", "c1", {"text": "a"})
    assert key is not None and json.loads(key)[:3] == ["s", "demo:note", "c1"]
    assert key != idempotency_key("s", "demo:note", "c1", {"text": "b"})
    long = idempotency_key("s" * 300, "demo:note", "c\n1", {})
    assert long is not None and len(long) <= 200 and long.startswith("sha256:")
    assert idempotency_key("s", "demo:note", None, {}) is None


async def test_wrong_arguments_are_named(setup: Setup) -> None:
    with pytest.raises(TypeError, match="ToolGateway"):
        ToolgateToolset(object())  # type: ignore[arg-type]
    _, result = await paused(setup, Script([EMAIL]))
    with pytest.raises(ValueError, match="does not wait for approval"):
        await record_decisions(setup.tools, result.output, {"other": True}, by="alice")
    with pytest.raises(ValueError, match="must be 'approve'"):
        await record_decisions(setup.tools, result.output, {"call-1": "yes"}, by="alice")  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="by must name"):
        await record_decisions(setup.tools, result.output, {"call-1": True}, by=" ")
    assert setup.gateway.approvals.get(approval_id(result)).status == "pending"


# -- the CLI --------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_approved_with_the_cli(tmp_path: Path, run_cli: Any, toolgate_home: Path) -> None:
    with approval_gateway(tmp_path / "gateway") as setup:
        script = Script([EMAIL])
        agent, result = await paused(setup, script)
        # The CLI reads the same state file the in-process gateway writes.
        (toolgate_home / "toolgate.db").symlink_to(setup.state_path)
        done = await asyncio.to_thread(
            run_cli, "approvals", "approve", approval_id(result), "--by", "carol"
        )
        assert done.returncode == 0, done.stdout + done.stderr

        results = await decisions_from_toolgate(setup.tools, result.output)
        await agent.run(message_history=result.all_messages(), deferred_tool_results=results)
        assert sent_lines(setup) == ["bob@example.com|hello"]
        (ran,) = [r for r in audit_records(setup, tool_id="demo:send_email") if r.status == "ok"]
        assert (ran.agent, ran.approval_decision) == (AGENT, "approve")
        assert setup.gateway.approvals.get(approval_id(result)).decided_by == "carol"


# -- the documented example -----------------------------------------------------------------------


def test_documented_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__doc_example__"}
    exec(
        compile(doc_block("integrations.pydantic_ai.example"), "pydantic-ai.md", "exec"), namespace
    )
    sent = (tmp_path / "sent.log").read_text(encoding="utf-8").splitlines()
    assert sent == ["bob@example.com|Lunch at noon?"]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(
        "send_email [['to', 'bob@example.com'], ['body', 'Lunch at noon?']] apr_"
    )
    assert printed[-1] == "Done: sent to bob@example.com"


# -- against a real toolgate serve, through toolgate.Client --------------------------------------


@pytest.fixture
async def remote(served_toolgate: ServedToolgate) -> AsyncIterator[Client]:
    """The agent's client: its key only (it cannot decide its own calls)."""
    async with Client(served_toolgate.url, key=served_toolgate.agent_key) as client:
        yield client


def _email(marker: str, call_id: str) -> Call:
    return ("demo__send_email", {"to": "bob@example.com", "body": marker}, call_id)


def _sent(served: ServedToolgate, marker: str) -> list[str]:
    return [line for line in served.sent_lines() if line.endswith("|" + marker)]


async def _paused_remote(remote: Client, script: Script) -> tuple[Agent[None, Any], Any]:
    agent = agent_for(ToolgateToolset(remote), script)
    result = await agent.run("email bob")
    assert isinstance(result.output, DeferredToolRequests)
    return agent, result


@pytest.mark.slow
async def test_remote_approved_with_the_cli_resumes_and_runs_once(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    marker = "remote approved with the cli"
    script = Script([_email(marker, "r-call-1")])
    agent, result = await _paused_remote(remote, script)
    assert _sent(served_toolgate, marker) == []

    served_toolgate.approve(approval_id(result, "r-call-1"))  # a person, with the CLI
    results = await decisions_from_toolgate(remote, result.output)
    history = result.all_messages()
    for _ in range(2):  # resumed twice: still one email
        resumed = await agent.run(message_history=history, deferred_tool_results=results)
        assert resumed.output == "done"
        assert script.seen["r-call-1"] == ("success", "sent to bob@example.com")

    assert _sent(served_toolgate, marker) == [f"bob@example.com|{marker}"]
    records = served_toolgate.audit(tool="demo:send_email", agent=AGENT, status="ok", wait_for=1)
    ran = [r for r in records if r["approval_id"] == approval_id(result, "r-call-1")]
    assert [r["approval_decision"] for r in ran] == ["approve"]


@pytest.mark.slow
async def test_remote_denial_recorded_by_an_operator_client_reaches_the_model(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    marker = "remote denied by the operator"
    script = Script([_email(marker, "r-call-2")])
    agent, result = await _paused_remote(remote, script)
    async with Client(
        served_toolgate.url,
        key=served_toolgate.agent_key,
        approver_key=served_toolgate.operator_key,
    ) as operator:
        results = await record_decisions(
            operator, result.output, {"r-call-2": "deny"}, by="alice", message="not now"
        )
    await agent.run(message_history=result.all_messages(), deferred_tool_results=results)

    outcome, text = script.seen["r-call-2"]
    assert outcome == "denied" and text.startswith("Error [user_rejection]") and "not now" in text
    assert _sent(served_toolgate, marker) == []
    records = served_toolgate.audit(tool="demo:send_email", agent=AGENT, code="user_rejection")
    assert approval_id(result, "r-call-2") in [r["approval_id"] for r in records]


@pytest.mark.slow
async def test_remote_framework_approval_needs_an_operator_key(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    marker = "remote approved in the framework"
    script = Script([_email(marker, "r-call-3")])
    agent, result = await _paused_remote(remote, script)
    plain = DeferredToolResults(approvals={"r-call-3": True})
    # The agent's own key may not approve its calls: the resume says so and nothing runs.
    with pytest.raises(ApproverKeyRequiredError, match="operator"):
        await agent.run(message_history=result.all_messages(), deferred_tool_results=plain)
    assert _sent(served_toolgate, marker) == []

    async with Client(
        served_toolgate.url,
        key=served_toolgate.agent_key,
        approver_key=served_toolgate.operator_key,
    ) as trusted:
        toolset = ToolgateToolset(trusted)
        agent = agent_for(toolset, script)
        with_metadata = result.output.build_results(
            approvals={"r-call-3": True}, metadata=result.output.metadata
        )
        await agent.run(message_history=result.all_messages(), deferred_tool_results=with_metadata)
    assert _sent(served_toolgate, marker) == [f"bob@example.com|{marker}"]
    decided = await remote.approval(approval_id(result, "r-call-3"))
    assert decided.decided_by == "ops"  # the server names the operator key's agent
