"""The call pipeline through the public API: every stage and every error code it can produce."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from toolgate import (
    CallStatus,
    DuplicateToolError,
    ErrorCode,
    Gateway,
    Tool,
    ToolDefinitionError,
    ToolError,
    ToolNotFoundError,
    tool,
)
from toolgate.errors import ERROR_DESCRIPTIONS
from toolgate.registry import RegisteredTool


@tool(namespace="math", effect="read_only")
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(namespace="math", effect="read_only")
async def add_async(a: int, b: int) -> int:
    """Add two integers, asynchronously."""
    await asyncio.sleep(0)
    return a + b


@pytest.fixture
def gateway() -> Any:
    with Gateway() as gw:
        gw.add(add, add_async)
        yield gw


# -- resolve ---------------------------------------------------------------------------------------


def test_unknown_tool_is_tool_not_found_with_the_closest_ids(gateway: Gateway) -> None:
    outcome = gateway.call_sync("math:ad", {"a": 1, "b": 2})
    assert outcome.status is CallStatus.ERROR and outcome.code is ErrorCode.TOOL_NOT_FOUND
    assert "math:add" in (outcome.message or "")
    bare = gateway.call_sync("add_asink", {})
    assert "math:add_async" in (bare.message or "")
    nothing = gateway.call_sync("zzzz:qqqq", {})
    assert "List the available tools" in (nothing.message or "")


def test_provider_safe_names_resolve_to_the_tool(gateway: Gateway) -> None:
    assert gateway.call_sync("math__add", {"a": 2, "b": 3}).content == 5


def test_get_tool_raises_lookup_error_subclass(gateway: Gateway) -> None:
    with pytest.raises(ToolNotFoundError) as info:
        gateway.get_tool("math:sub")
    assert isinstance(info.value, LookupError)
    assert info.value.code is ErrorCode.TOOL_NOT_FOUND
    assert gateway.get_tool("math:add").id == "math:add"


def test_unavailable_tool_does_not_run(gateway: Gateway) -> None:
    ran: list[int] = []

    @tool(namespace="svc")
    def needs_token() -> None:
        """Needs a token."""
        ran.append(1)

    gateway.registry.add(
        RegisteredTool(needs_token.tool, needs_token.binding, "connect Notion in Settings")
    )
    outcome = gateway.call_sync("svc:needs_token", {})
    assert outcome.code is ErrorCode.UNAVAILABLE
    assert "connect Notion in Settings" in (outcome.message or "")
    assert ran == []


# -- registration ----------------------------------------------------------------------------------


def test_duplicate_id_names_both_sources(gateway: Gateway) -> None:
    @tool(id="math:add")
    def other_add(a: int) -> int:
        """Another add."""
        return a

    with pytest.raises(DuplicateToolError) as info:
        gateway.add(other_add)
    message = str(info.value)
    assert "math:add" in message
    assert "test_pipeline:add" in message and "other_add" in message
    assert isinstance(info.value, ValueError)


def test_namespace_override_and_plain_functions(gateway: Gateway) -> None:
    def shout(text: str) -> str:
        """Shout."""
        return text.upper()

    added = gateway.add(shout, namespace="words")
    assert [t.id for t in added] == ["words:shout"]
    assert gateway.call_sync("words:shout", {"text": "hi"}).content == "HI"


def test_model_values_with_a_handler() -> None:
    definition = Tool(
        id="ext:echo",
        description="Echo the text.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    )
    with Gateway() as gateway:
        gateway.add(definition, handler=lambda text: text)
        assert gateway.call_sync("ext:echo", {"text": "x"}).content == "x"
        with pytest.raises(ToolDefinitionError, match="needs a handler"):
            gateway.add(Tool(id="ext:other", description="d", input_schema={"type": "object"}))


def test_invalid_json_schema_is_rejected_at_registration() -> None:
    broken = Tool(
        id="ext:broken",
        description="d",
        input_schema={"type": "object", "properties": {"a": {"type": "nope"}}},
    )
    with (
        Gateway() as gateway,
        pytest.raises(ToolDefinitionError, match=r"ext:broken: input schema"),
    ):
        gateway.add(broken, handler=lambda a: a)


# -- validate --------------------------------------------------------------------------------------


def test_invalid_arguments_name_every_field_by_pointer_and_the_tool_does_not_run() -> None:
    calls: list[Any] = []

    @tool(namespace="crm")
    def create(name: str, age: int, tags: list[str]) -> None:
        """Create."""
        calls.append(1)

    with Gateway() as gateway:
        gateway.add(create)
        outcome = gateway.call_sync("crm:create", {"age": "old", "tags": ["a", 3], "extra": True})
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS
    message = outcome.message or ""
    assert "/name: required field is missing" in message
    assert '/age: "old" is not of type "integer"' in message
    assert "/tags/1: 3 is not of type" in message
    assert "/extra: unexpected field" in message
    assert "call it again" in message
    assert calls == []


@pytest.mark.parametrize("arguments", [[1, 2], "a=1", 3])
def test_arguments_that_are_not_an_object(gateway: Gateway, arguments: Any) -> None:
    outcome = gateway.call_sync("math:add", arguments)
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS
    assert "must be a JSON object" in (outcome.message or "")


def test_non_json_values_from_python_are_invalid_not_a_crash(gateway: Gateway) -> None:
    outcome = gateway.call_sync("math:add", {"a": {1, 2}, "b": 1})
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS


def test_huge_values_are_shortened_in_the_message(gateway: Gateway) -> None:
    outcome = gateway.call_sync("math:add", {"a": "x" * 100_000, "b": 1})
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS
    assert len(outcome.message or "") < 1_000


def test_the_validator_is_compiled_once_per_tool_definition(gateway: Gateway) -> None:
    [stage] = [s for s in gateway.pipeline.stages if s.name == "validate_arguments"]
    first = stage.validator_for(add.tool)  # type: ignore[attr-defined]
    gateway.call_sync("math:add", {"a": 1, "b": 2})
    assert stage.validator_for(add.tool) is first  # type: ignore[attr-defined]


# -- execute ---------------------------------------------------------------------------------------


async def test_sync_and_async_tools_through_both_apis(gateway: Gateway) -> None:
    assert (await gateway.call("math:add", {"a": 1, "b": 2})).content == 3
    assert (await gateway.call("math:add_async", {"a": 1, "b": 2})).content == 3
    assert gateway.call_sync("math:add_async", {"a": 2, "b": 2}).content == 4


async def test_sync_tools_run_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    @tool(namespace="t")
    def where() -> None:
        """Where am I."""
        seen.append(threading.get_ident())
        time.sleep(0.2)

    async with Gateway() as gateway:
        gateway.add(where)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            for _ in range(10):
                await asyncio.sleep(0.01)
                ticks += 1

        await asyncio.gather(gateway.call("t:where"), ticker())
    assert seen and seen[0] != loop_thread
    assert ticks == 10  # the loop kept running while the tool slept


def test_call_sync_runs_a_sync_tool_in_the_calling_thread(gateway: Gateway) -> None:
    seen: list[int] = []

    @tool(namespace="t")
    def where() -> None:
        """Where am I."""
        seen.append(threading.get_ident())

    gateway.add(where)
    gateway.call_sync("t:where")
    assert seen == [threading.get_ident()]


async def test_call_sync_works_inside_a_running_loop_for_async_tools(gateway: Gateway) -> None:
    assert gateway.call_sync("math:add_async", {"a": 5, "b": 5}).content == 10


async def test_async_timeout_cancels_the_work() -> None:
    state = {"cancelled": False, "finished": False}

    @tool(namespace="t", timeout=0.1)
    async def slow() -> None:
        """Slow."""
        try:
            await asyncio.sleep(10)
            state["finished"] = True
        except asyncio.CancelledError:
            state["cancelled"] = True
            raise

    async with Gateway() as gateway:
        gateway.add(slow)
        outcome = await gateway.call("t:slow")
    assert outcome.code is ErrorCode.TIMEOUT
    assert "0.1 s" in (outcome.message or "")
    assert state == {"cancelled": True, "finished": False}
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_sync_timeout_through_the_async_api() -> None:
    @tool(namespace="t", timeout=0.1)
    def slow() -> None:
        """Slow."""
        time.sleep(0.5)

    async with Gateway() as gateway:
        gateway.add(slow)
        outcome = await gateway.call("t:slow")
    assert outcome.code is ErrorCode.TIMEOUT


def test_sync_timeout_through_call_sync_ends_in_timeout() -> None:
    @tool(namespace="t", timeout=0.05)
    def slow() -> str:
        """Slow."""
        time.sleep(0.15)
        return "late"

    with Gateway() as gateway:
        gateway.add(slow)
        outcome = gateway.call_sync("t:slow")
    assert outcome.code is ErrorCode.TIMEOUT and outcome.content is None


async def test_a_tool_raising_timeout_error_itself_is_a_tool_error() -> None:
    @tool(namespace="t")
    async def upstream() -> None:
        """Upstream."""
        raise TimeoutError("upstream API timed out")

    async with Gateway() as gateway:
        gateway.add(upstream)
        outcome = await gateway.call("t:upstream")
    assert outcome.code is ErrorCode.TOOL_ERROR
    assert "upstream API timed out" in (outcome.message or "")


async def test_caller_cancellation_propagates() -> None:
    @tool(namespace="t")
    async def slow() -> None:
        """Slow."""
        await asyncio.sleep(10)

    async with Gateway() as gateway:
        gateway.add(slow)
        task = asyncio.create_task(gateway.call("t:slow"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


@pytest.mark.parametrize(
    ("exception", "expected"),
    [
        (ValueError("bad input"), "ValueError: bad input"),
        (SystemExit(3), "SystemExit: 3"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (RuntimeError(), "RuntimeError: (no message)"),
    ],
)
@pytest.mark.parametrize("use_async", [False, True])
async def test_exceptions_are_contained_as_tool_error(
    exception: BaseException, expected: str, use_async: bool
) -> None:
    if use_async:

        @tool(namespace="t")
        async def fails() -> None:
            """Fails."""
            raise exception

    else:

        @tool(namespace="t")
        def fails() -> None:
            """Fails."""
            raise exception

    async with Gateway() as gateway:
        gateway.add(fails)
        for outcome in (await gateway.call("t:fails"), gateway.call_sync("t:fails")):
            assert outcome.code is ErrorCode.TOOL_ERROR
            assert expected in (outcome.message or "")
            assert "Traceback" not in (outcome.message or "")  # never sent to the model
            assert outcome.detail is not None and "Traceback" in outcome.detail


def test_tool_error_message_is_passed_verbatim(gateway: Gateway) -> None:
    @tool(namespace="t")
    def missing() -> None:
        """Missing."""
        raise ToolError("File not found: notes.txt")

    gateway.add(missing)
    outcome = gateway.call_sync("t:missing")
    assert outcome.code is ErrorCode.TOOL_ERROR
    assert outcome.message == "File not found: notes.txt"


def test_argument_conversion_failure_is_invalid_arguments() -> None:
    from pydantic import BaseModel, field_validator

    class Even(BaseModel):
        n: int

        @field_validator("n")
        @classmethod
        def even(cls, value: int) -> int:
            if value % 2:
                raise ValueError("must be even")
            return value

    def half(value: Even) -> int:
        """Half."""
        return value.n // 2

    half.__annotations__["value"] = Even
    with Gateway() as gateway:
        gateway.add(half, namespace="t")
        assert gateway.call_sync("t:half", {"value": {"n": 4}}).content == 2
        outcome = gateway.call_sync("t:half", {"value": {"n": 3}})
    assert outcome.code is ErrorCode.INVALID_ARGUMENTS
    assert "/value/n" in (outcome.message or "") and "must be even" in (outcome.message or "")


# -- output ----------------------------------------------------------------------------------------


def test_output_schema_violation_is_invalid_output() -> None:
    @tool(
        namespace="t",
        output_schema={
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
    )
    def count(good: bool) -> dict[str, Any]:
        """Count."""
        return {"count": 3} if good else {"count": "three"}

    with Gateway() as gateway:
        gateway.add(count)
        assert gateway.call_sync("t:count", {"good": True}).content == {"count": 3}
        outcome = gateway.call_sync("t:count", {"good": False})
    assert outcome.code is ErrorCode.INVALID_OUTPUT
    assert "/count" in (outcome.message or "")


def test_unserializable_results_are_invalid_output_not_a_crash() -> None:
    @tool(namespace="t")
    def loop() -> dict[str, Any]:
        """Loop."""
        value: dict[str, Any] = {}
        value["self"] = value
        return value

    with Gateway() as gateway:
        gateway.add(loop)
        outcome = gateway.call_sync("t:loop")
    assert outcome.code is ErrorCode.INVALID_OUTPUT


def test_non_json_results_are_rendered_leniently() -> None:
    import datetime

    @tool(namespace="t")
    def when() -> dict[str, Any]:
        """When."""
        return {"at": datetime.date(2026, 1, 2), "tags": {"x"}}

    with Gateway() as gateway:
        gateway.add(when)
        outcome = gateway.call_sync("t:when")
    assert outcome.ok and outcome.content == {"at": "2026-01-02", "tags": ["x"]}


def test_gateway_failure_is_crashed_and_the_gateway_keeps_serving(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    shaper = gateway.pipeline.executor.shaper

    def explode(*args: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setattr(shaper, "shape", explode)
    outcome = gateway.call_sync("math:add", {"a": 1, "b": 2})
    assert outcome.code is ErrorCode.CRASHED
    assert "not caused by your arguments" in (outcome.message or "")
    assert outcome.detail is not None and "RuntimeError: bug" in outcome.detail
    monkeypatch.undo()
    assert gateway.call_sync("math:add", {"a": 1, "b": 2}).content == 3


def test_every_error_code_is_documented() -> None:
    assert set(ERROR_DESCRIPTIONS) == set(ErrorCode)


def test_outcome_text_and_dict_for_errors(gateway: Gateway) -> None:
    outcome = gateway.call_sync("math:add", {"a": 1})
    assert outcome.text.startswith("Error [invalid_arguments]:")
    data = outcome.to_dict()
    assert data["status"] == "error" and data["code"] == "invalid_arguments"


async def test_the_deadline_counts_from_the_start_even_if_the_first_step_blocks() -> None:
    @tool(namespace="t", timeout=0.1)
    async def blocks_then_waits() -> str:
        """Blocks, then waits briefly."""
        time.sleep(0.15)  # a synchronous first step already past the deadline
        # Counted from the start, the deadline has passed: the call is cancelled here. Counted
        # from this suspension (the bug), it would be 0.1 s away and the tool would finish.
        await asyncio.sleep(0.05)
        return "late"

    async with Gateway() as gateway:
        gateway.add(blocks_then_waits)
        outcome = await gateway.call("t:blocks_then_waits")
    assert outcome.code is ErrorCode.TIMEOUT


async def test_errors_after_suspension_and_values_sent_back_flow_through() -> None:
    @tool(namespace="t")
    async def waits_then_fails() -> None:
        """Waits, then fails."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[int] = loop.create_future()
        loop.call_soon(future.set_result, 41)
        value = await future
        raise ToolError(f"got {value + 1}")

    async with Gateway() as gateway:
        gateway.add(waits_then_fails)
        outcome = await gateway.call("t:waits_then_fails")
    assert outcome.code is ErrorCode.TOOL_ERROR and outcome.message == "got 42"


async def test_a_tool_that_swallows_the_cancellation_still_ends_timeout() -> None:
    @tool(namespace="t", timeout=0.05)
    async def stubborn() -> str:
        """Stubborn."""
        try:
            await asyncio.sleep(1)
        except asyncio.CancelledError:
            return "finished anyway"
        return "slept"

    async with Gateway() as gateway:
        gateway.add(stubborn)
        outcome = await gateway.call("t:stubborn")
        # It returned, but past its deadline: never reported ok (issue 24).
        assert outcome.code is ErrorCode.TIMEOUT and outcome.content is None
        await asyncio.sleep(0.01)  # no stray cancellation hits the caller afterwards
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/a.json"}}},
            "remote references are not allowed",
        ),
        ({"$schema": "https://example.com/my-dialect", "type": "object"}, "is not a JSON Schema"),
    ],
)
def test_schemas_never_make_the_gateway_fetch_a_url(schema: dict[str, Any], message: str) -> None:
    declared = Tool(id="ext:remote", description="d", input_schema=schema)
    with Gateway() as gateway, pytest.raises(ToolDefinitionError, match=message):
        gateway.add(declared, handler=lambda a=None: a)
        gateway.call_sync("ext:remote", {"a": 1})


def test_tools_that_need_approval_are_denied_while_no_approver_is_configured() -> None:
    ran: list[str] = []

    @tool(namespace="crm", effect="external_write")
    def create_ticket(subject: str) -> str:
        """Create a ticket."""
        ran.append(subject)
        return "created"

    @tool(namespace="crm", effect="external_write", approval=False)
    def create_draft(subject: str) -> str:
        """Create a draft (declared safe to run without a prompt)."""
        ran.append(subject)
        return "drafted"

    @tool(namespace="crm", effect="read_only", approval=True)
    def read_secret_notes() -> str:
        """Read notes that a person must release."""
        ran.append("notes")
        return "notes"

    with Gateway() as gateway:
        gateway.add(create_ticket, create_draft, read_secret_notes)
        denied = gateway.call_sync("crm:create_ticket", {"subject": "x"})
        assert denied.code is ErrorCode.USER_REJECTION
        assert "Tell the user" in (denied.message or "")
        assert gateway.call_sync("crm:read_secret_notes").code is ErrorCode.USER_REJECTION
        assert gateway.call_sync("crm:create_draft", {"subject": "y"}).content == "drafted"
        # Invalid arguments are reported before anyone would be asked.
        invalid = gateway.call_sync("crm:create_ticket", {"subject": 1})
        assert invalid.code is ErrorCode.INVALID_ARGUMENTS
    assert ran == ["y"]
