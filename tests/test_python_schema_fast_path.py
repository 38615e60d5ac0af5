"""The input schema of a function with JSON-native parameters is written without building a
pydantic model (the start of a catalog of thousands of tools): it must be pydantic's own, to the
byte, for every shape the fast path takes — and every other shape must still go to pydantic."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Optional, Union

import pytest
from pydantic import Field

from toolgate.errors import ToolDefinitionError
from toolgate.python import schema as schema_module
from toolgate.python.schema import inspect_function


def plain(query: str, limit: int = 10, exact: bool = False, ratio: float = 0.5) -> list[str]:
    """Find things.

    Args:
        query: Words to look for.
        limit: How many at most.
    """
    return []


def optionals(
    tags: list[str] | None = None,
    options: Optional[dict[str, Any]] = None,  # noqa: UP045 - the older spelling, on purpose
    either: Union[int, str] = 3,  # noqa: UP007
    nothing: None = None,
) -> None:
    """No docstring parameters."""


def literals(mode: Literal["fast", "slow"] = "fast", level: Literal[1, 2, 3] = 2) -> None:
    """Literals."""


def annotated(
    name: Annotated[str, "the name", "in full"],
    size: Annotated[int, "documented twice"] = 1,
) -> None:
    """Annotated.

    Args:
        size: The docstring wins over the annotation's text.
    """


def loose(anything, values: list, mapping: dict, unknown: Any = "x") -> None:  # type: ignore[no-untyped-def]
    """Unannotated and bare containers."""


def nested(matrix: list[list[float]], index: dict[str, list[int]] | None = None) -> None:
    """Nested containers."""


def nothing() -> None:
    """No parameters at all."""


def unicode_text(titre: str = "café ☕", empty: str = "") -> None:
    """Non-ASCII defaults."""


FAST = [plain, optionals, literals, annotated, loose, nested, nothing, unicode_text]


def _with_pydantic(func: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as patch:
        patch.setattr(schema_module, "_plain_parameter", lambda *args: None)
        return inspect_function(func, description=None).input_schema


@pytest.mark.parametrize("func", FAST, ids=lambda f: f.__name__)
def test_the_fast_path_writes_pydantics_schema_byte_for_byte(
    func: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = inspect_function(func, description=None)
    assert fast.arguments_model is None  # the fast path was taken: no model was built
    slow = _with_pydantic(func, monkeypatch)
    assert json.dumps(fast.input_schema) == json.dumps(slow)


def constrained(count: Annotated[int, Field(ge=1)] = 1) -> None:
    """A constraint: pydantic writes it."""


def with_field(count: int = Field(default=2, description="from Field")) -> None:
    """A Field default."""


def odd_default(values: list[int] = [1, 2], ratio: float = float("inf")) -> None:  # noqa: B006
    """Defaults the fast path does not write."""


@pytest.mark.parametrize("func", [constrained, with_field, odd_default], ids=lambda f: f.__name__)
def test_other_shapes_still_go_through_pydantic(func: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = schema_module._plain_schema
    monkeypatch.setattr(schema_module, "_plain_schema", lambda p: calls.append(p) or real(p))
    signature = inspect_function(func, description=None)
    assert calls == []
    assert signature.input_schema == _with_pydantic(func, monkeypatch)


def test_equal_annotations_written_in_another_order_keep_their_own_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # typing says Union[int, str] == Union[str, int] (and likewise for Literal): a cache keyed
    # on the annotation alone gave the second spelling the first one's schema.
    def first(x: Union[int, str], mode: Literal["a", "b"]) -> None:  # noqa: UP007
        """First."""

    def second(x: Union[str, int], mode: Literal["b", "a"]) -> None:  # noqa: UP007
        """Second."""

    inspect_function(first, description=None)
    fast = inspect_function(second, description=None).input_schema
    assert json.dumps(fast) == json.dumps(_with_pydantic(second, monkeypatch))
    assert fast["properties"]["mode"]["enum"] == ["b", "a"]


def named_default(default: int = 1, properties: list[str] | None = None) -> None:
    """Pydantic leaves what is under these two names unsorted."""


def test_parameters_pydantic_leaves_unsorted_go_through_pydantic(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = inspect_function(named_default, description=None).input_schema
    assert json.dumps(fast) == json.dumps(_with_pydantic(named_default, monkeypatch))


def test_a_malformed_annotation_is_a_tool_definition_error() -> None:
    def broken(x: dict[str]) -> None:  # type: ignore[type-arg]
        """dict takes two type arguments."""

    with pytest.raises(ToolDefinitionError, match="cannot build an input schema"):
        inspect_function(broken, description=None)
