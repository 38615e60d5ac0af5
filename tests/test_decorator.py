"""``@tool``: schemas from type hints and docstrings, options, and the tool context."""

from __future__ import annotations

import enum
import logging
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from gateway_support import gateway_with
from toolgate import (
    FunctionTool,
    Gateway,
    SideEffect,
    ToolContext,
    ToolDefinitionError,
    tool,
)


class Priority(enum.Enum):
    LOW = "low"
    HIGH = "high"


class Address(BaseModel):
    city: str
    zip: str | None = None


class Reply(BaseModel):
    text: str


class Forecast(TypedDict):
    city: str
    celsius: float


@tool
def plain(a: int, b: int = 2) -> int:
    """Add two numbers.

    Longer explanation for the model.

    Args:
        a: The first addend.
        b: The second addend.
    """
    return a + b


def test_bare_decorator_keeps_the_function_callable_and_builds_the_schema() -> None:
    assert isinstance(plain, FunctionTool)
    assert plain(1, 2) == 3
    assert plain.tool.id == "test_decorator:plain"
    assert plain.tool.description == "Add two numbers.\n\nLonger explanation for the model."
    schema = plain.tool.input_schema_dict()
    assert schema == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The first addend."},
            "b": {"type": "integer", "description": "The second addend.", "default": 2},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert plain.tool.timeout == 60.0
    assert plain.tool.side_effect is SideEffect.LOCAL_WRITE


def test_rich_types_enums_nested_models_literals_and_annotated_descriptions() -> None:
    @tool(namespace="crm", name="create", title="Create contact", effect="external_write")
    def create(
        name: Annotated[str, "Full name of the contact"],
        priority: Priority,
        address: Address,
        tags: list[str] | None = None,
        channel: Literal["email", "sms"] = "email",
        age: Annotated[int, Field(ge=0, le=150, description="Age in years")] = 30,
    ) -> dict[str, Any]:
        """Create a CRM contact."""
        return {}

    schema = create.tool.input_schema_dict()
    props = schema["properties"]
    assert create.tool.id == "crm:create" and create.tool.title == "Create contact"
    assert props["name"] == {"type": "string", "description": "Full name of the contact"}
    assert props["priority"] == {"$ref": "#/$defs/Priority"}
    assert schema["$defs"]["Priority"]["enum"] == ["low", "high"]
    assert props["address"] == {"$ref": "#/$defs/Address"}
    assert schema["$defs"]["Address"]["required"] == ["city"]
    assert props["channel"]["enum"] == ["email", "sms"] and props["channel"]["default"] == "email"
    assert props["age"]["minimum"] == 0 and props["age"]["maximum"] == 150
    assert props["age"]["description"] == "Age in years"
    assert sorted(schema["required"]) == ["address", "name", "priority"]
    assert create.tool.side_effect is SideEffect.EXTERNAL_WRITE
    assert create.tool.requires_approval is True


def test_parameters_named_like_pydantic_internals_are_fine() -> None:
    @tool(namespace="x")
    def odd(schema: str, model_config: int = 1, json: bool = False) -> str:
        """Odd names."""
        return f"{schema}-{model_config}-{json}"

    assert set(odd.tool.input_schema["properties"]) == {"schema", "model_config", "json"}
    with Gateway() as gateway:
        gateway.add(odd)
        assert gateway.call_sync("x:odd", {"schema": "s", "model_config": 2}).content == "s-2-False"


def test_converted_arguments_reach_the_function_as_their_declared_types() -> None:
    seen: dict[str, Any] = {}

    @tool(namespace="crm")
    def convert(priority: Priority, address: Address) -> str:
        """Convert."""
        seen.update(priority=priority, address=address)
        return "ok"

    with Gateway() as gateway:
        gateway.add(convert)
        outcome = gateway.call_sync(
            "crm:convert", {"priority": "high", "address": {"city": "Cairo"}}
        )
    assert outcome.ok, outcome.message
    assert seen["priority"] is Priority.HIGH
    assert seen["address"] == Address(city="Cairo")


def test_structured_return_types_declare_an_output_schema_and_are_dumped() -> None:
    @tool(namespace="w", effect="read_only")
    def forecast(city: str) -> Forecast:
        """Forecast."""
        return {"city": city, "celsius": 21.5}

    @tool(namespace="w")
    async def reply(text: str) -> Reply:
        """Reply."""
        return Reply(text=text.upper())

    assert forecast.tool.output_schema is not None
    assert forecast.tool.output_schema["required"] == ("city", "celsius")
    with Gateway() as gateway:
        gateway.add(forecast, reply)
        assert gateway.call_sync("w:forecast", {"city": "Oslo"}).content == {
            "city": "Oslo",
            "celsius": 21.5,
        }
        assert gateway.call_sync("w:reply", {"text": "hi"}).content == {"text": "HI"}


def test_context_parameter_is_hidden_from_the_schema_and_filled_by_the_host(
    tmp_path: Path,
) -> None:
    captured: list[ToolContext] = []

    @tool(namespace="ctx", secrets=["API_TOKEN"], config=["base_url"], env=["MY_VAR"])
    def whoami(ctx: ToolContext, greeting: str = "hi") -> str:
        """Who am I."""
        captured.append(ctx)
        ctx.logger.info("called")
        return f"{greeting} {ctx.agent}"

    assert "ctx" not in whoami.tool.input_schema["properties"]
    gateway = gateway_with(
        secrets={"API_TOKEN": "t0k3n", "OTHER_SECRET": "nope"},
        config={"base_url": "https://x", "unrelated": 1},
        environ={"MY_VAR": "v", "PATH": "/bin", "AWS_SECRET": "no"},
    )
    with gateway:
        gateway.add(whoami)
        outcome = gateway.call_sync(
            "ctx:whoami", {}, agent="support-bot", session_id="s1", workspace=tmp_path
        )
    assert outcome.content == "hi support-bot"
    ctx = captured[0]
    assert (ctx.agent, ctx.session_id, ctx.workspace) == ("support-bot", "s1", tmp_path)
    assert ctx.tool_id == "ctx:whoami" and ctx.call_id == outcome.call_id
    assert dict(ctx.secrets) == {"API_TOKEN": "t0k3n"}  # only what the tool declared
    assert dict(ctx.config) == {"base_url": "https://x"}
    assert dict(ctx.env) == {"MY_VAR": "v"}
    assert isinstance(ctx.logger, logging.Logger)


async def test_async_tools_get_the_context_too() -> None:
    @tool(namespace="ctx")
    async def session(ctx: ToolContext) -> str | None:
        """Session id."""
        return ctx.session_id

    async with Gateway() as gateway:
        gateway.add(session)
        assert (await gateway.call("ctx:session", session_id="abc")).content == "abc"


def test_level_from_access_and_annotations() -> None:
    @tool(namespace="j", access="read")
    def reader() -> None:
        """Read."""

    @tool(namespace="p", annotations={"readOnlyHint": False, "openWorldHint": False})
    def local() -> None:
        """Local."""

    @tool(namespace="p", annotations={"readOnlyHint": True, "title": "Weather"})
    def weather() -> None:
        """Weather."""

    assert reader.tool.side_effect is SideEffect.READ_ONLY
    assert local.tool.side_effect is SideEffect.LOCAL_WRITE
    assert weather.tool.side_effect is SideEffect.READ_ONLY
    assert weather.tool.title == "Weather"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"effect": "read_only", "access": "read"}, "either effect= or access="),
        ({"access": "delete"}, "access must be one of"),
        ({"effect": "nuclear"}, "nuclear"),
        ({"annotations": {"readOnly": True}}, "unknown keys"),
        ({"timeout": -1}, "timeout must be positive"),
        ({"id": "no-namespace"}, "namespace:name"),
    ],
)
def test_bad_options_raise_a_definition_error_that_names_the_problem(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolDefinitionError, match=message):

        @tool(**kwargs)
        def f() -> None:
            """F."""


def test_var_args_and_positional_only_parameters_are_rejected() -> None:
    with pytest.raises(ToolDefinitionError, match=r"\*args or \*\*kwargs"):

        @tool
        def star(*items: int) -> None:
            """Star."""

    with pytest.raises(ToolDefinitionError, match="positional-only"):

        @tool
        def pos(a: int, /) -> None:
            """Pos."""


def test_unresolvable_hint_names_the_function() -> None:
    with pytest.raises(ToolDefinitionError, match="cannot resolve type hints"):

        @tool
        def broken(a: NotDefinedAnywhere) -> None:  # type: ignore[name-defined]  # noqa: F821
            """Broken."""


def test_missing_docstring_falls_back_to_the_name() -> None:
    @tool(namespace="x")
    def fetch_page(url: str) -> str:
        return url

    assert fetch_page.tool.description == "fetch page"


def test_explicit_description_and_display_options() -> None:
    @tool(
        namespace="maps",
        description="Show a map.",
        examples=["Show map of cairo"],
        ui={"prefix": "Show Map", "args": {"address": {"prefix": "Of"}}},
        dangerous=True,
        calls_per_minute=10,
        redact=["args.address"],
        idempotency_key="{{ args.address }}",
    )
    def show_map(address: str) -> str:
        """Ignored docstring."""
        return address

    t = show_map.tool
    assert t.description == "Show a map."
    assert t.display.examples == ("Show map of cairo",)
    assert t.display.ui is not None and t.display.ui.prefix == "Show Map"
    assert t.display.ui.args[0].name == "address" and t.display.ui.args[0].prefix == "Of"
    assert t.display.dangerous is True
    assert t.safety.rate_limit is not None and t.safety.rate_limit.calls_per_minute == 10
    assert t.observability.redact_fields == ("args.address",)
    assert t.idempotency.key_template == "{{ args.address }}"


def test_decorating_twice_is_an_error() -> None:
    with pytest.raises(ToolDefinitionError, match="already a tool"):
        tool(plain)  # type: ignore[call-overload]


def test_a_summary_that_wraps_stays_one_paragraph() -> None:
    @tool(namespace="x")
    def send(to: str) -> str:
        """Send a short message to someone (a demo: nothing is
        sent anywhere; the receipt says what would have been).

        It needs a person's approval first.

        Args:
            to: Who the message is for.
        """
        return to

    @tool(namespace="x")
    def numpy_style(to: str) -> str:
        """Send a message to someone, in a summary that
        wraps too.

        Parameters
        ----------
        to : str
            Who it is for.
        """
        return to

    assert send.tool.description == (
        "Send a short message to someone (a demo: nothing is\n"
        "sent anywhere; the receipt says what would have been).\n\n"
        "It needs a person's approval first."
    )
    wrapped = "Send a message to someone, in a summary that\nwraps too."
    assert numpy_style.tool.description == wrapped
    assert send.tool.input_schema["properties"]["to"]["description"] == "Who the message is for."
