"""The OpenAI Agents SDK adapter, driven by the SDK's own scripted test model (no network):
full runs that pause for a person, resume from the SDK's RunState (also through its JSON), and
show the tool body ran once and the audit log holds the agent and the decision."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, RunResult, RunState, UserError, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool import ToolOutputImage, ToolOutputText

from doc_blocks import doc_block
from gateway_support import gateway_with
from integrations_served import ServedToolgate, served_toolgate
from integrations_support import (
    AGENT,
    Setup,
    approval_gateway,
    audit_records,
    demo_tools,
    sent_lines,
)
from toolgate import Client, tool
from toolgate.integrations import LocalGateway
from toolgate.integrations.keys import idempotency_key
from toolgate.integrations.openai_agents import (
    ApprovalPendingError,
    ToolgateTools,
    toolgate_tools,
)
from toolgate.integrations.openai_agents.calls import parse_arguments
from toolgate.model.content import ContentResult
from toolgate.search.disclosure import ProgressiveDisclosure

set_tracing_disabled(True)

__all__ = ["served_toolgate"]  # the fixture, imported for pytest

SESSION = "conv-1"
EMAIL = {"to": "bob@example.com", "body": "hi"}


def _calls(*calls: tuple[str, dict[str, Any], str]) -> list[Any]:
    return [function_call(name, args, call_id=call_id) for name, args, call_id in calls]


def _model(*steps: list[Any]) -> ScriptedModel:
    """A model that answers each turn with the next step, then says "done"."""
    return ScriptedModel([*steps, [assistant_message("done")]])


def _agent(tools: ToolgateTools, model: ScriptedModel) -> Agent[Any]:
    return Agent(name="assistant", instructions="Help.", model=model, tools=list(tools.tools))


def _outputs(result: RunResult) -> list[ToolCallOutputItem]:
    return [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def _seen_by_model(model: ScriptedModel) -> str:
    """Everything the model was sent as input, as JSON text."""
    return json.dumps([call.input for call in model.calls], default=str)


async def _paused_email(setup: Setup) -> tuple[ToolgateTools, Agent[Any], RunResult]:
    tools = await toolgate_tools(setup.tools, session_id=SESSION)
    model = _model(_calls(("demo__send_email", EMAIL, "c1")))
    agent = _agent(tools, model)
    result = await Runner.run(agent, "email bob")
    assert [item.call_id for item in result.interruptions] == ["c1"]
    assert sent_lines(setup) == []
    return tools, agent, result


async def test_tools_are_the_agents_with_their_schema_as_declared(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        specs = {spec.name: spec for spec in await setup.tools.list_tools()}
        by_name = {t.name: t for t in tools.tools}
        assert set(by_name) == set(specs)
        for name, function_tool in by_name.items():
            assert function_tool.params_json_schema == dict(specs[name].parameters)
            assert function_tool.strict_json_schema is False


async def test_approved_in_toolgate_the_resumed_run_sends_once(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools, agent, result = await _paused_email(setup)
        # The request is in toolgate's queue while the run is paused: a person decides there.
        [pending] = setup.gateway.approvals.pending()  # type: ignore[union-attr]
        assert pending.tool_id == "demo:send_email" and pending.agent == AGENT
        setup.gateway.approvals.decide(pending.id, "approve", by="alice")  # type: ignore[union-attr]
        state = result.to_state()
        assert await tools.sync(state) == []
        resumed = await Runner.run(agent, state)
        assert resumed.final_output == "done"
        assert [o.output for o in _outputs(resumed)] == ["sent to bob@example.com"]
        assert sent_lines(setup) == ["bob@example.com|hi"]
        records = audit_records(setup, agent=AGENT, tool_id="demo:send_email")
        assert any(r.status == "ok" for r in records)
        assert all(r.session == SESSION for r in records)
        assert any(r.approval_decision == "approve" and r.status == "ok" for r in records)
        assert (await setup.tools.approval(pending.id)).decided_by == "alice"


async def test_approved_through_the_sdk_helper_records_the_person(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools, agent, result = await _paused_email(setup)
        state = result.to_state()
        [item] = state.get_interruptions()
        decided = await tools.approve(state, item, by="alice")
        assert decided is not None and decided.decided_by == "alice"
        resumed = await Runner.run(agent, state)
        assert resumed.final_output == "done"
        assert sent_lines(setup) == ["bob@example.com|hi"]
        request = await setup.tools.approval(decided.id)
        assert request.decided_by == "alice"


async def test_denied_the_model_reads_the_sdk_rejection_and_nothing_is_sent(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        model = _model(_calls(("demo__send_email", EMAIL, "c1")))
        agent = _agent(tools, model)
        result = await Runner.run(agent, "email bob")
        state = result.to_state()
        [item] = state.get_interruptions()
        await tools.reject(state, item, by="alice", message="not to bob")
        resumed = await Runner.run(agent, state)
        assert sent_lines(setup) == []
        [output] = _outputs(resumed)
        assert output.output.startswith("Error [user_rejection]: ")
        assert "denied by alice: not to bob" in output.output
        assert "denied by alice: not to bob" in _seen_by_model(model)
        records = audit_records(setup, agent=AGENT, tool_id="demo:send_email")
        assert any(r.code == "user_rejection" for r in records), records


async def test_denied_in_toolgate_sync_puts_the_rejection_in_the_state(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools, agent, result = await _paused_email(setup)
        [pending] = setup.gateway.approvals.pending()  # type: ignore[union-attr]
        setup.gateway.approvals.decide(pending.id, "deny", by="carol")  # type: ignore[union-attr]
        state = result.to_state()
        assert await tools.sync(state) == []
        # The SDK's approve comes too late: toolgate's denial stands.
        [item] = state.get_interruptions()
        assert (await tools.approve(state, item, by="mallory")).decided_by == "carol"  # type: ignore[union-attr]
        resumed = await Runner.run(agent, state)
        assert sent_lines(setup) == []
        [output] = _outputs(resumed)
        assert "denied by carol" in output.output


async def test_two_parallel_calls_each_have_their_request_decided_in_reverse_order(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        model = _model(
            _calls(
                ("demo__send_email", {"to": "a@example.com", "body": "x"}, "p1"),
                ("demo__send_email", {"to": "b@example.com", "body": "x"}, "p2"),
            )
        )
        agent = _agent(tools, model)
        result = await Runner.run(agent, "email both")
        state = result.to_state()
        items = {item.call_id: item for item in state.get_interruptions()}
        assert set(items) == {"p1", "p2"}
        assert len(setup.gateway.approvals.pending()) == 2  # type: ignore[union-attr]
        second = await tools.reject(state, items["p2"], by="alice")
        first = await tools.approve(state, items["p1"], by="alice")
        assert first is not None and second is not None and first.id != second.id
        assert dict(first.arguments)["to"] == "a@example.com"
        resumed = await Runner.run(agent, state)
        outputs = {o.raw_item["call_id"]: o.output for o in _outputs(resumed)}
        assert outputs["p1"] == "sent to a@example.com"
        assert outputs["p2"].startswith("Error [user_rejection]: ")
        assert sent_lines(setup) == ["a@example.com|x"]


async def test_always_allow_the_second_run_does_not_pause(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools, agent, result = await _paused_email(setup)
        state = result.to_state()
        [item] = state.get_interruptions()
        await tools.approve(state, item, by="alice", always=True)
        await Runner.run(agent, state)
        assert not await setup.tools.approval_needed("demo:send_email")
        second = _agent(tools, _model(_calls(("demo__send_email", EMAIL, "c2"))))
        again = await Runner.run(second, "email bob again")
        assert again.interruptions == [] and again.final_output == "done"
        assert sent_lines(setup) == ["bob@example.com|hi", "bob@example.com|hi"]


async def test_a_state_through_json_resumes_in_a_fresh_setting_and_runs_once(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        _, agent, result = await _paused_email(setup)
        saved = json.dumps(result.to_state().to_json())

        async def fresh() -> tuple[ToolgateTools, Agent[Any], RunState[Any, Any]]:
            # A new process: new tools, a new agent, the state from JSON only.
            tools = await toolgate_tools(setup.tools, session_id=SESSION)
            agent = _agent(tools, _model())
            return tools, agent, await RunState.from_json(agent, json.loads(saved))

        tools, agent, state = await fresh()
        [item] = state.get_interruptions()
        assert [i.call_id for i in await tools.sync(state)] == ["c1"]  # nobody decided yet
        assert len(setup.gateway.approvals.pending()) == 1  # type: ignore[union-attr]
        await tools.approve(state, item, by="alice")
        approved = json.dumps(state.to_json())
        resumed = await Runner.run(agent, state)
        assert resumed.final_output == "done"
        assert sent_lines(setup) == ["bob@example.com|hi"]
        # The approved state resumed twice more, each time in a fresh setting: still sent once.
        for _ in range(2):
            tools = await toolgate_tools(setup.tools, session_id=SESSION)
            agent = _agent(tools, _model())
            again = await Runner.run(agent, await RunState.from_json(agent, json.loads(approved)))
            assert [o.output for o in _outputs(again)] == ["sent to bob@example.com"]
        assert sent_lines(setup) == ["bob@example.com|hi"]


async def test_a_paused_state_resumed_again_after_its_call_ran_asks_nobody(
    tmp_path: Path,
) -> None:
    """Approved in toolgate, the saved paused state is resumed in a new process (the email is
    sent), then resumed again from the same saved state: ``sync`` must find that the call
    already ran under its idempotency key — not put a new request to a person — and the
    second run replays the result."""
    with approval_gateway(tmp_path) as setup:
        tools, _, result = await _paused_email(setup)
        [item] = result.interruptions
        shown = await tools.approval_of(item)
        assert shown is not None
        await setup.tools.decide(shown.id, "approve", by="alice")
        saved = json.dumps(result.to_state().to_json())
        for _ in range(2):
            fresh = await toolgate_tools(setup.tools, session_id=SESSION)
            agent = _agent(fresh, _model())
            state = await RunState.from_json(agent, json.loads(saved))
            assert await fresh.sync(state) == []
            assert setup.gateway.approvals.pending() == []  # type: ignore[union-attr]
            resumed = await Runner.run(agent, state)
            assert [o.output for o in _outputs(resumed)] == ["sent to bob@example.com"]
        assert sent_lines(setup) == ["bob@example.com|hi"]


@contextmanager
def _gateway_in_cli_home(home: Path) -> Iterator[Setup]:
    """The demo gateway with its state where ``toolgate`` commands with ``TOOLGATE_HOME=home``
    find it (``toolgate.db``), so a person can decide with the CLI."""
    home.mkdir()
    setup_paths = {"state_path": home / "toolgate.db", "audit_path": home / "audit.db"}
    with gateway_with(approver="queue", spill_dir=home / "spill", **setup_paths) as gateway:
        for function in demo_tools(home / "sent.log"):
            gateway.add(function)
        yield Setup(gateway, LocalGateway(gateway, agent=AGENT), home / "sent.log", **setup_paths)


@pytest.mark.slow  # a CLI process (~1 s to import)
async def test_approved_with_the_cli_then_resumed_from_json(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with _gateway_in_cli_home(home) as setup:
        _, agent, result = await _paused_email(setup)
        saved = json.dumps(result.to_state().to_json())
        [pending] = setup.gateway.approvals.pending()  # type: ignore[union-attr]
        done = subprocess.run(
            [sys.executable, "-m", "toolgate", "approvals", "approve", pending.id, "--by", "dana"],
            env={**os.environ, "TOOLGATE_HOME": str(home)},
            cwd=home,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        agent = _agent(tools, _model())
        state = await RunState.from_json(agent, json.loads(saved))
        assert await tools.sync(state) == []
        resumed = await Runner.run(agent, state)
        assert [o.output for o in _outputs(resumed)] == ["sent to bob@example.com"]
        assert sent_lines(setup) == ["bob@example.com|hi"]
        assert (await setup.tools.approval(pending.id)).decided_by == "dana"
        records = audit_records(setup, agent=AGENT, tool_id="demo:send_email")
        assert any(r.approval_id == pending.id and r.status == "ok" for r in records)


async def test_a_rate_limit_reaches_the_model_with_its_code(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        notes = [("demo__note", {"text": f"n{i}"}, f"n{i}") for i in range(3)]
        model = _model(*[_calls(note) for note in notes])
        result = await Runner.run(_agent(tools, model), "take notes")
        outputs = [o.output for o in _outputs(result)]
        assert outputs[:2] == ["noted n0", "noted n1"]
        assert outputs[2].startswith("Error [rate_limited]: ")
        assert "Error [rate_limited]: " in _seen_by_model(model)
        assert sent_lines(setup) == ["note|n0", "note|n1"]


async def test_a_tool_the_gateway_no_longer_knows_is_tool_not_found(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        setup.gateway.registry.remove("demo:lookup")
        model = _model(_calls(("demo__lookup", {"city": "Oslo"}, "l1")))
        result = await Runner.run(_agent(tools, model), "weather?")
        [output] = _outputs(result)
        assert output.output.startswith("Error [tool_not_found]: ")


async def test_an_overflow_shows_the_preview_and_keeps_the_visualization_from_the_model(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        model = _model(_calls(("demo__report", {"rows": 300}, "r1")))
        result = await Runner.run(_agent(tools, model), "report")
        [output] = _outputs(result)
        assert "00000 " in output.output and len(output.output) < 300 * 200
        seen = _seen_by_model(model)
        assert "_visualization" not in seen and '"columns"' not in seen
        assert output.custom_data is not None
        assert output.custom_data["toolgate"]["visualization"]["type"] == "table"


async def test_an_image_reaches_the_model_as_the_sdks_image_output(tmp_path: Path) -> None:
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"0" * 20).decode()

    @tool(namespace="img", effect="read_only")
    def chart() -> ContentResult:
        """Draw the chart."""
        image = {"type": "image", "data": png, "mimeType": "image/png"}
        return ContentResult.from_mcp([{"type": "text", "text": "the chart"}, image])

    with approval_gateway(tmp_path) as setup:
        setup.gateway.add(chart)
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        model = _model(_calls(("img__chart", {}, "i1")))
        result = await Runner.run(_agent(tools, model), "chart")
        [output] = _outputs(result)
        assert output.output == [
            ToolOutputText(text="the chart"),
            ToolOutputImage(image_url=f"data:image/png;base64,{png}"),
        ]
        # The model's next input carries the image as an image part, not as text.
        sent = _seen_by_model(model)
        assert "input_image" in sent and f"data:image/png;base64,{png}" in sent


async def test_an_error_keeps_its_code(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        tools = await toolgate_tools(setup.tools, session_id=SESSION)
        model = _model(_calls(("demo__fail", {}, "f1")))
        result = await Runner.run(_agent(tools, model), "fail")
        [output] = _outputs(result)
        assert output.output.startswith("Error [tool_error]: ")


async def test_the_sdks_approve_alone_fails_the_run_instead_of_showing_pending(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        _, agent, result = await _paused_email(setup)
        state = result.to_state()
        [item] = state.get_interruptions()
        state.approve(item)  # the SDK only: toolgate has no decision
        # The SDK wraps what a tool raises in its UserError, which fails the run.
        with pytest.raises(UserError) as raised:
            await Runner.run(agent, state)
        cause = raised.value.__cause__
        assert isinstance(cause, ApprovalPendingError) and cause.tool_id == "demo:send_email"
        assert sent_lines(setup) == []


def _asking_write_tool(written: list[str]) -> Any:
    """``fs:write``: needs no approval by its level, but its security check asks a person as
    the call runs (what ``approval_needed`` cannot see ahead)."""

    def check(payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "allowed": False,
            "requiresApproval": True,
            "permissionType": "file_write",
            "permissionKey": payload["path"],
        }

    @tool(namespace="fs", effect="local_write", security_check=check)
    def write(path: str) -> str:
        """Write a file."""
        written.append(path)
        return f"wrote {path}"

    return write


async def test_a_security_check_asking_as_the_call_runs_waits_for_the_person(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        written: list[str] = []
        setup.gateway.add(_asking_write_tool(written))
        tools = await toolgate_tools(setup.tools, session_id=SESSION, approval_wait=30)
        model = _model(_calls(("fs__write", {"path": "/etc/hosts"}, "w1")))

        async def person() -> None:
            while not setup.gateway.approvals.pending():  # type: ignore[union-attr]
                await asyncio.sleep(0.02)
            [pending] = setup.gateway.approvals.pending()  # type: ignore[union-attr]
            await setup.tools.decide(pending.id, "approve", by="alice")

        result, _ = await asyncio.gather(Runner.run(_agent(tools, model), "write"), person())
        [output] = _outputs(result)
        assert output.output == "wrote /etc/hosts" and written == ["/etc/hosts"]
        assert "pending" not in _seen_by_model(model).lower()


async def test_a_security_check_nobody_answers_fails_the_run_not_the_model(
    tmp_path: Path,
) -> None:
    with approval_gateway(tmp_path) as setup:
        written: list[str] = []
        setup.gateway.add(_asking_write_tool(written))
        tools = await toolgate_tools(setup.tools, session_id=SESSION, approval_wait=0)
        model = _model(_calls(("fs__write", {"path": "/etc/hosts"}, "w1")))
        with pytest.raises(UserError) as raised:
            await Runner.run(_agent(tools, model), "write")
        cause = raised.value.__cause__
        assert isinstance(cause, ApprovalPendingError) and cause.call_id == "w1"
        assert written == [] and len(model.calls) == 1


async def test_search_adds_the_found_tools_mid_run(tmp_path: Path) -> None:
    with approval_gateway(tmp_path) as setup:
        setup.gateway.disclosure = ProgressiveDisclosure(core=["demo:note"])
        tools = await toolgate_tools(setup.tools, session_id=SESSION, search=True)
        assert {t.name for t in tools.tools} == {"demo__note", "toolgate_search_tools"}
        model = _model(
            _calls(("toolgate_search_tools", {"query": "weather in a city"}, "s1")),
            _calls(("demo__lookup", {"city": "Oslo"}, "l1")),
        )
        agent = _agent(tools, model)
        result = await Runner.run(agent, "weather?")
        found, answer = [o.output for o in _outputs(result)]
        assert "demo__lookup" in found and answer == "sunny in Oslo"
        assert "demo__lookup" in [t.name for t in agent.tools]


def test_idempotency_keys_are_bounded_and_stable() -> None:
    assert idempotency_key("s", "demo:note", "c1", {}) == idempotency_key(
        "s", "demo:note", "c1", {}
    )
    long = idempotency_key("s", "demo:note", "x" * 500, {})
    assert long is not None and len(long) <= 200
    assert long == idempotency_key("s", "demo:note", "x" * 500, {})
    assert long != idempotency_key("s", "demo:note", "x" * 501, {})


def test_the_documented_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = compile(doc_block("integrations.openai_agents.example"), "openai-agents.md", "exec")
    exec(code, {"__name__": "__main__"})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("waiting: ") and "bob@example.com" in printed[0]
    assert printed[-1] == "Sent."


# -- against a real toolgate serve, through toolgate.Client ------------------------------------
# One server for this module (served_toolgate is module-scoped). Each test uses its own call
# ids and arguments: approvals, grants and idempotency keys live as long as the server.


@pytest.fixture
async def remote(served_toolgate: ServedToolgate) -> AsyncIterator[Client]:
    async with Client(
        served_toolgate.url,
        key=served_toolgate.agent_key,
        approver_key=served_toolgate.operator_key,
    ) as client:
        yield client


def _remote_sent(served: ServedToolgate, marker: str) -> list[str]:
    return [line for line in served.sent_lines() if marker in line]


async def _remote_paused(
    remote: Client, session: str, email: dict[str, str], call_id: str
) -> tuple[ToolgateTools, Agent[Any], RunState[Any, Any], str]:
    tools = await toolgate_tools(remote, session_id=session)
    agent = _agent(tools, _model(_calls(("demo__send_email", email, call_id))))
    result = await Runner.run(agent, "email")
    [item] = result.interruptions
    request = await tools.approval_of(item)
    assert request is not None and request.agent == AGENT
    return tools, agent, result.to_state(), request.id


@pytest.mark.slow
async def test_remote_approved_with_the_cli_resumed_from_json_runs_once(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    email = {"to": "ada@example.com", "body": "remote cli"}
    _, _, state, approval_id = await _remote_paused(remote, "r-cli", email, "rc1")
    saved = json.dumps(state.to_json())
    assert _remote_sent(served_toolgate, "remote cli") == []
    served_toolgate.approve(approval_id)  # a person, with the CLI next to the server
    for _ in range(2):  # resumed twice, each time as in a new process
        tools = await toolgate_tools(remote, session_id="r-cli")
        agent = _agent(tools, _model())
        state = await RunState.from_json(agent, json.loads(saved))
        assert await tools.sync(state) == []
        resumed = await Runner.run(agent, state)
        assert [o.output for o in _outputs(resumed)] == ["sent to ada@example.com"]
    assert _remote_sent(served_toolgate, "remote cli") == ["ada@example.com|remote cli"]
    records = served_toolgate.audit(tool="demo:send_email", agent=AGENT, status="ok")
    assert any(r.get("approval_id") == approval_id for r in records), records


@pytest.mark.slow
async def test_remote_approved_and_denied_through_the_sdk_helpers(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    email = {"to": "bo@example.com", "body": "remote helper"}
    tools, agent, state, approval_id = await _remote_paused(remote, "r-sdk", email, "rs1")
    [item] = state.get_interruptions()
    decided = await tools.approve(state, item, by="alice")
    assert decided is not None and decided.decided_by == "ops"  # the operator key decides
    resumed = await Runner.run(agent, state)
    assert resumed.final_output == "done"
    assert _remote_sent(served_toolgate, "remote helper") == ["bo@example.com|remote helper"]

    email = {"to": "cy@example.com", "body": "remote denied"}
    tools, agent, state, approval_id = await _remote_paused(remote, "r-sdk", email, "rs2")
    [item] = state.get_interruptions()
    await tools.reject(state, item, by="alice", message="not today")
    resumed = await Runner.run(agent, state)
    [output] = _outputs(resumed)
    assert output.output.startswith("Error [user_rejection]: ") and "not today" in output.output
    assert _remote_sent(served_toolgate, "remote denied") == []
    records = served_toolgate.audit(tool="demo:send_email", code="user_rejection")
    assert any(r.get("approval_id") == approval_id for r in records), records


@pytest.mark.slow
async def test_remote_always_allow_then_no_pause(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    # demo:charge only here: its grant lasts as long as the server.
    tools = await toolgate_tools(remote, session_id="r-always")
    agent = _agent(tools, _model(_calls(("demo__charge", {"amount": 7}, "ra1"))))
    state = (await Runner.run(agent, "charge")).to_state()
    [item] = state.get_interruptions()
    await tools.approve(state, item, by="alice", always=True)
    await Runner.run(agent, state)
    again = _agent(tools, _model(_calls(("demo__charge", {"amount": 8}, "ra2"))))
    result = await Runner.run(again, "charge again")
    assert result.interruptions == [] and [o.output for o in _outputs(result)] == ["charged 8"]
    assert _remote_sent(served_toolgate, "charge|") == ["charge|7", "charge|8"]


@pytest.mark.slow
async def test_remote_results_rate_limit_unknown_tool_and_overflow(
    served_toolgate: ServedToolgate, remote: Client
) -> None:
    tools = await toolgate_tools(remote, session_id="r-results")
    notes = [_calls(("demo__note", {"text": f"remote n{i}"}, f"rn{i}")) for i in range(3)]
    report = _calls(("demo__report", {"rows": 300}, "rr1"))
    model = _model(*notes, report)
    result = await Runner.run(_agent(tools, model), "notes and a report")
    outputs = [o.output for o in _outputs(result)]
    assert outputs[2].startswith("Error [rate_limited]: ")
    assert "00000 " in outputs[3] and '"columns"' not in _seen_by_model(model)
    # The reader's access rules hide demo:send_email: the gateway answers tool_not_found.
    async with Client(served_toolgate.url, key=served_toolgate.reader_key) as reader:
        hidden = ToolgateTools(
            reader, await remote.list_tools(), session_id="r-reader", approval_wait=0
        )
        email = {"to": "di@example.com", "body": "remote hidden"}
        model = _model(_calls(("demo__send_email", email, "rh1")))
        result = await Runner.run(_agent(hidden, model), "email")
        [output] = _outputs(result)
        assert output.output.startswith("Error [tool_not_found]: ")
    assert _remote_sent(served_toolgate, "remote hidden") == []


def test_model_arguments_that_are_not_an_object_are_refused_not_raised() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("") == {}
    for hostile in ("[1]", "nope", "[" * 100_000 + "]" * 100_000, '"text"'):
        assert parse_arguments(hostile) is None
