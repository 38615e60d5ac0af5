"""Attacks on the OpenAI Agents SDK adapter (issue 28): hostile tool call ids, results the
model must read whole, and approvals that must stay with the call a person saw.

Each test drives a full run with the SDK's own scripted test model against a real gateway (SQLite
state and audit) and checks what ran, what the model read, and what toolgate recorded.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    Runner,
    RunResult,
    RunState,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrailData,
    UserError,
    set_tracing_disabled,
    tool_input_guardrail,
)
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool import ToolOutputImage

from integrations_support import AGENT, approval_gateway, sent_lines
from toolgate import tool
from toolgate.integrations import LocalGateway
from toolgate.integrations.keys import idempotency_key
from toolgate.integrations.openai_agents import (
    ApprovalPendingError,
    ToolgateTools,
    toolgate_tools,
)
from toolgate.model import ApprovalRequest, CallOutcome
from toolgate.model.content import ContentResult

set_tracing_disabled(True)

EMAIL = {"to": "bob@example.com", "body": "hi"}


def _model(*steps: list[Any]) -> ScriptedModel:
    return ScriptedModel([*steps, [assistant_message("done")]])


def _agent(tools: ToolgateTools, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="assistant", instructions="Help.", model=model, tools=list(tools.tools))


def _outputs(result: RunResult) -> list[Any]:
    return [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def _seen_by_model(model: ScriptedModel) -> str:
    return json.dumps([call.input for call in model.calls], default=str)


# -- idempotency keys ------------------------------------------------------------------------


async def test_a_call_id_with_a_colon_cannot_replay_another_sessions_call(
    tmp_path: Path,
) -> None:
    """Session ``team:7`` sends an email (approved, sent). In session ``team``, a model whose
    call id is ``7:call_1`` must not be handed that result as its own: its key was the same
    string ``team:7:call_1``, so its call was never put to a person, nothing was sent, and the
    model read "sent"."""
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id="team:7")
        agent = _agent(tools, _model([function_call("demo__send_email", EMAIL, call_id="call_1")]))
        state = (await Runner.run(agent, "email bob")).to_state()
        [item] = state.get_interruptions()
        await tools.approve(state, item, by="alice")
        assert _outputs(await Runner.run(agent, state)) == ["sent to bob@example.com"]

        other = await toolgate_tools(setup.tools, session_id="team")
        model = _model([function_call("demo__send_email", EMAIL, call_id="7:call_1")])
        result = await Runner.run(_agent(other, model), "email bob")
        # Another conversation's call: it waits for its own person.
        assert [i.call_id for i in result.interruptions] == ["7:call_1"]
        assert _outputs(result) == []
        assert sent_lines(setup) == ["bob@example.com|hi"]


def test_idempotency_keys_are_unambiguous() -> None:
    def key(session: str, call_id: str) -> str | None:
        return idempotency_key(session, "demo:note", call_id, {})

    assert key("team:7", "call_1") != key("team", "7:call_1")
    assert key("team:7", "call_1") != key("team:7", "call_2")
    long = key("s", "x" * 500)
    assert long is not None and len(long) <= 200 and long.startswith("sha256:")
    # A session and call id that spell a digest are not that digest.
    assert key("sha256", long.split(":", 1)[1]) != long


async def test_a_call_id_that_is_not_utf_8_does_not_crash_the_call(tmp_path: Path) -> None:
    """A JSON call id may hold a lone surrogate (``"\\udc80"`` is valid JSON). Handed on as
    the idempotency key, it made the gateway's SQLite store fail: ``Error [crashed]`` for a
    call that had nothing wrong with it."""
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id="conv-odd")
        model = _model([function_call("demo__note", {"text": "odd"}, call_id="n\udc80")])
        result = await Runner.run(_agent(tools, model), "note")
        assert _outputs(result) == ["noted odd"]
        assert sent_lines(setup) == ["note|odd"]
    for call_id in ("n\udc80", "x" * 500):
        key = idempotency_key("conv", "demo:note", call_id, {"text": "odd"})
        assert key is not None and key.encode("ascii")
        assert key == idempotency_key("conv", "demo:note", call_id, {"text": "odd"})


# -- a person's rejection --------------------------------------------------------------------


def _purge_tool(purged: list[str]) -> Any:
    @tool(namespace="ops", effect="local_write")
    def purge() -> str:
        """Purge the cache."""
        purged.append("purged")
        return "purged"

    return purge


async def test_rejecting_an_interruption_never_runs_the_call(tmp_path: Path) -> None:
    """The SDK pauses a call whose arguments it cannot read (here: none at all) without asking
    ``needs_approval``, so even a tool toolgate runs without a person shows up as an
    interruption. A person rejects it: ``tools.reject`` looked the call up by making it, which
    ran the tool, and then put an *approval* into the state."""
    purged: list[str] = []
    with approval_gateway(tmp_path) as setup:
        setup.gateway.add(_purge_tool(purged))
        tools = await toolgate_tools(setup.tools, session_id="conv-reject")
        model = _model([function_call("ops__purge", "", call_id="p1")])
        agent = _agent(tools, model)
        state = (await Runner.run(agent, "purge")).to_state()
        [item] = state.get_interruptions()
        await tools.reject(state, item, by="alice", message="not now")
        assert purged == []
        resumed = await Runner.run(agent, state)
        [output] = _outputs(resumed)
        assert output.startswith("Error [user_rejection]: ") and "alice: not now" in output
        assert purged == []


async def test_showing_or_syncing_an_interruption_never_runs_the_call(tmp_path: Path) -> None:
    """The same paused call, shown to the person (``approval_of``) and synced: both looked the
    request up by making the call, so the tool ran before anyone decided and before the SDK's
    guardrails — and a person's rejection afterwards found it done."""
    purged: list[str] = []
    with approval_gateway(tmp_path) as setup:
        setup.gateway.add(_purge_tool(purged))
        tools = await toolgate_tools(setup.tools, session_id="conv-show")
        model = _model([function_call("ops__purge", "", call_id="p1")])
        agent = _agent(tools, model)
        state = (await Runner.run(agent, "purge")).to_state()
        [item] = state.get_interruptions()
        assert await tools.approval_of(item) is None  # nothing in toolgate waits for a person
        assert purged == []
        # What needs_approval would have answered: no person; it runs in the resumed run.
        assert await tools.sync(state) == [] and purged == []
        assert _outputs(await Runner.run(agent, state)) == ["purged"]
        assert purged == ["purged"]


async def test_approving_such_a_call_runs_it_once_in_the_resumed_run(tmp_path: Path) -> None:
    purged: list[str] = []
    with approval_gateway(tmp_path) as setup:
        setup.gateway.add(_purge_tool(purged))
        tools = await toolgate_tools(setup.tools, session_id="conv-approve")
        model = _model([function_call("ops__purge", "", call_id="p1")])
        agent = _agent(tools, model)
        state = (await Runner.run(agent, "purge")).to_state()
        [item] = state.get_interruptions()
        assert await tools.approve(state, item, by="alice") is None
        assert purged == []  # it runs in the run, after the SDK's guardrails and hooks
        assert _outputs(await Runner.run(agent, state)) == ["purged"]
        assert purged == ["purged"]


async def test_a_security_check_asking_as_such_a_call_runs_is_put_to_the_person(
    tmp_path: Path,
) -> None:
    """Approved in the state with nothing in toolgate to decide, the call's security check asks
    a person as it runs: that is toolgate's own question, waited for like any other — not an
    SDK-only approval to refuse."""
    wiped: list[str] = []

    def check(payload: dict[str, Any]) -> dict[str, Any]:
        return {"allowed": False, "requiresApproval": True, "permissionType": "wipe"}

    @tool(namespace="ops", effect="local_write", security_check=check)
    def wipe() -> str:
        """Wipe the scratch folder."""
        wiped.append("wiped")
        return "wiped"

    with approval_gateway(tmp_path) as setup:
        setup.gateway.add(wipe)
        tools = await toolgate_tools(setup.tools, session_id="conv-wipe", approval_wait=30)
        agent = _agent(tools, _model([function_call("ops__wipe", "", call_id="w1")]))
        state = (await Runner.run(agent, "wipe")).to_state()
        assert await tools.sync(state) == [] and wiped == []

        async def person() -> None:
            approvals = setup.gateway.approvals
            assert approvals is not None
            while not approvals.pending():
                await asyncio.sleep(0.02)
            [pending] = approvals.pending()
            await setup.tools.decide(pending.id, "approve", by="alice")

        resumed, _ = await asyncio.gather(Runner.run(agent, state), person())
        assert _outputs(resumed) == ["wiped"] and wiped == ["wiped"]


# -- a saved state edited by an attacker (these held) --------------------------------------


async def test_an_approved_state_edited_to_another_call_id_does_not_run(tmp_path: Path) -> None:
    """A person approved call ``c1``; the saved state is edited so that the approved call is
    ``c2`` (and approved in the SDK). Toolgate has no decision for ``c2``: the run fails instead
    of sending, and the model never reads "pending"."""
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id="conv-edit")
        agent = _agent(tools, _model([function_call("demo__send_email", EMAIL, call_id="c1")]))
        state = (await Runner.run(agent, "email bob")).to_state()
        [item] = state.get_interruptions()
        await tools.approve(state, item, by="alice")
        edited = json.dumps(state.to_json()).replace('"c1"', '"c2"')
        fresh = await toolgate_tools(setup.tools, session_id="conv-edit")
        model = _model()
        agent = _agent(fresh, model)
        with pytest.raises(UserError) as raised:
            await Runner.run(agent, await RunState.from_json(agent, json.loads(edited)))
        assert isinstance(raised.value.__cause__, ApprovalPendingError)
        assert sent_lines(setup) == [] and not model.calls


# -- what the model reads --------------------------------------------------------------------

_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 20).decode()


async def test_beside_an_image_the_model_still_reads_every_other_block(tmp_path: Path) -> None:
    """With an image in the result, links, embedded text and audio reached the model as
    "[... content not shown]": the file the tool pointed to and the text it embedded were lost
    (without an image, the same result's text carries them)."""

    @tool(namespace="img", effect="read_only")
    def chart() -> ContentResult:
        """Draw the chart and link its data."""
        return ContentResult.from_mcp(
            [
                {"type": "text", "text": "the chart"},
                {"type": "image", "data": _PNG, "mimeType": "image/png"},
                {"type": "resource_link", "uri": "file:///data/q3.csv", "name": "q3.csv"},
                {
                    "type": "resource",
                    "resource": {"uri": "mem://notes", "text": "q3 up 4%"},
                },
                {"type": "audio", "data": _PNG, "mimeType": "audio/wav"},
            ]
        )

    with approval_gateway(tmp_path) as setup:
        setup.gateway.add(chart)
        tools = await toolgate_tools(setup.tools, session_id="conv-img")
        model = _model([function_call("img__chart", {}, call_id="i1")])
        result = await Runner.run(_agent(tools, model), "chart")
        [output] = _outputs(result)
        assert ToolOutputImage(image_url=f"data:image/png;base64,{_PNG}") in output
        seen = _seen_by_model(model)
        assert "file:///data/q3.csv" in seen and "q3 up 4%" in seen
        assert "[audio: audio/wav" in seen and "not shown" not in seen


# -- no call inside needs_approval (the early call it once made) ------------------------------


@tool_input_guardrail
def _nothing_to_bob(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
    if "bob@" in data.context.tool_arguments:
        return ToolGuardrailFunctionOutput.reject_content("no email to bob", output_info=None)
    return ToolGuardrailFunctionOutput.allow(output_info=None)


class _Recording(LocalGateway):
    """The real gateway, recording every call the adapter makes through it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    async def call(
        self, tool_id: str, arguments: Mapping[str, Any] | None = None, **options: Any
    ) -> CallOutcome:
        self.calls.append(tool_id)
        return await super().call(tool_id, arguments, **options)


class _GrantLandsMeanwhile(_Recording):
    """A person clicks "always allow" on another request of the same tool (the web UI, another
    process) just as the adapter asks about this call — after it could learn that the call
    would wait, before the call's own request is looked up — whichever question it asks
    first."""

    landed = False

    async def _land(self, tool_id: str) -> None:
        if self.landed or tool_id != "demo:send_email":
            return
        self.landed = True
        other = {"to": "carol@example.com", "body": "other"}
        pending = await LocalGateway.call(self, tool_id, other, session_id="o", tool_call_id="o1")
        assert pending.approval is not None
        await self.decide(pending.approval.id, "always", by="alice")

    async def approval_needed(self, tool_id: str, *, workspace: str | None = None) -> bool:
        needed = await super().approval_needed(tool_id, workspace=workspace)
        await self._land(tool_id)
        return needed

    async def request_approval(
        self, tool_id: str, arguments: Mapping[str, Any] | None = None, **options: Any
    ) -> ApprovalRequest | None:
        await self._land(tool_id)
        return await super().request_approval(tool_id, arguments, **options)


async def test_a_grant_landing_before_the_early_call_does_not_run_it_past_the_guardrails(
    tmp_path: Path,
) -> None:
    """The SDK's tool input guardrail refuses emails to Bob, and the model reads that refusal;
    the email must not go out. The adapter's early call in ``needs_approval`` (made to create the
    request) ran the call when a grant covered it by then — before the SDK's guardrails and
    ``on_tool_start`` hooks. Now ``needs_approval`` never calls: under the grant, nobody is
    asked and the call goes through the guardrails, which refuse it."""
    with approval_gateway(tmp_path) as setup:
        racing = _GrantLandsMeanwhile(setup.gateway, agent=AGENT)
        tools = await toolgate_tools(racing, session_id="conv-race")
        for function_tool in tools.tools:
            function_tool.tool_input_guardrails = [_nothing_to_bob]
        model = _model([function_call("demo__send_email", EMAIL, call_id="c1")])
        result = await Runner.run(_agent(tools, model), "email bob")
        assert racing.landed
        assert _outputs(result) == ["no email to bob"]
        assert sent_lines(setup) == [] and racing.calls == []


async def test_syncing_a_call_approved_in_toolgate_in_a_new_process_does_not_run_it(
    tmp_path: Path,
) -> None:
    """Paused, approved in toolgate (the web UI, the CLI), resumed in a new process: ``sync``
    found the request by making the call, which took the approval and ran the call there —
    before the SDK's guardrails, which refuse emails to Bob. Now it only finds the request;
    the resumed run's call goes through the guardrails, and the email never goes out."""
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id="conv-sync")
        for function_tool in tools.tools:
            function_tool.tool_input_guardrails = [_nothing_to_bob]
        model = _model([function_call("demo__send_email", EMAIL, call_id="c1")])
        state = (await Runner.run(_agent(tools, model), "email bob")).to_state()
        [item] = state.get_interruptions()
        shown = await tools.approval_of(item)
        assert shown is not None
        await setup.tools.decide(shown.id, "approve", by="alice")
        saved = state.to_json()

        recording = _Recording(setup.gateway, agent=AGENT)
        fresh = await toolgate_tools(recording, session_id="conv-sync")
        for function_tool in fresh.tools:
            function_tool.tool_input_guardrails = [_nothing_to_bob]
        agent = _agent(fresh, _model())
        restored = await RunState.from_json(agent, saved)
        [again] = restored.get_interruptions()
        assert (await fresh.approval_of(again)) is not None  # shown as approved, not taken
        assert await fresh.sync(restored) == []
        assert recording.calls == [] and sent_lines(setup) == []
        resumed = await Runner.run(agent, restored)
        assert _outputs(resumed) == ["no email to bob"]
        assert sent_lines(setup) == [] and recording.calls == []


async def test_the_approval_helpers_never_call_the_gateway(tmp_path: Path) -> None:
    """needs_approval, approval_of, approve, reject and sync only find or make requests; the
    only calls are the resumed runs' own, one per approved call, and each body runs once."""
    with approval_gateway(tmp_path) as setup:
        recording = _Recording(setup.gateway, agent=AGENT)
        tools = await toolgate_tools(recording, session_id="conv-helpers")
        calls = [
            function_call("demo__send_email", EMAIL, call_id="e1"),
            function_call("demo__charge", {"amount": 5}, call_id="e2"),
        ]
        agent = _agent(tools, _model(calls))
        state = (await Runner.run(agent, "both")).to_state()
        first, second = sorted(state.get_interruptions(), key=lambda item: item.call_id or "")
        assert recording.calls == []  # needs_approval made both requests, ran nothing
        assert sorted(item.call_id for item in await tools.sync(state)) == ["e1", "e2"]
        shown = await tools.approval_of(first)
        assert shown is not None and shown.status == "pending"
        await tools.approve(state, first, by="alice")
        await tools.reject(state, second, by="alice", message="no")
        assert recording.calls == [] and sent_lines(setup) == []
        resumed = await Runner.run(agent, state)
        outputs = _outputs(resumed)
        assert outputs[0] == "sent to bob@example.com"
        assert outputs[1].startswith("Error [user_rejection]: ")
        assert recording.calls == ["demo:send_email"]  # the rejected call is the SDK's to answer
        assert sent_lines(setup) == ["bob@example.com|hi"]
