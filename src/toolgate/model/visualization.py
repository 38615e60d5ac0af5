"""The nine ``_visualization`` types a tool may return for people, validated with pydantic.

A tool may return ``_visualization`` next to its content. It is for people only: validated here,
kept on the outcome, rendered by the CLI and web UI, and never sent to the model.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic.alias_generators import to_camel

__all__ = [
    "VISUALIZATION_TYPES",
    "InvalidVisualization",
    "validate_visualization",
]


class _Model(BaseModel):
    # Wire names are camelCase (``oldStart``, ``exitCode``); unknown keys are dropped.
    # defer_build: the schemas are built on first validation, not at ``import toolgate``.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
        frozen=True,
        defer_build=True,
    )


class _Base(_Model):
    title: str | None = None
    collapsed: bool | None = None


class DiffChange(_Model):
    type: Literal["added", "removed", "context", "unchanged"]
    content: str
    old_line_number: int | None = None
    new_line_number: int | None = None


class DiffHunk(_Model):
    old_start: int = Field(ge=0)
    old_lines: int = Field(ge=0)
    new_start: int = Field(ge=0)
    new_lines: int = Field(ge=0)
    changes: list[DiffChange]


class DiffVisualization(_Base):
    type: Literal["diff"]
    path: str
    language: str | None = None
    hunks: list[DiffHunk]
    additions: int | None = Field(default=None, ge=0)
    deletions: int | None = Field(default=None, ge=0)


class DiffsVisualization(_Base):
    type: Literal["diffs"]
    items: list[DiffVisualization]


class CodeVisualization(_Base):
    type: Literal["code"]
    path: str | None = None
    content: str
    language: str | None = None
    created: bool | None = None
    line_count: int | None = Field(default=None, ge=0)
    highlight_lines: list[int] | None = None


class FileEntry(_Model):
    path: str
    action: str | None = None
    line: int | None = None


class FileGroup(_Model):
    label: str
    icon: str | None = None
    files: list[FileEntry]


class FileListVisualization(_Base):
    type: Literal["file-list"]
    groups: list[FileGroup]
    total: int | None = Field(default=None, ge=0)


class TableColumn(_Model):
    key: str
    label: str
    width: str | None = None


class TableVisualization(_Base):
    type: Literal["table"]
    columns: list[TableColumn]
    rows: list[dict[str, Any]]
    total_rows: int | None = Field(default=None, ge=0)


class MarkdownVisualization(_Base):
    type: Literal["markdown"]
    content: str
    source_url: str | None = None


class ShellOutputVisualization(_Base):
    type: Literal["shell-output"]
    command: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None


class TodoItem(_Model):
    content: str
    status: Literal["pending", "in_progress", "completed", "cancelled"]
    priority: Literal["high", "medium", "low"] | None = None


class TodoListVisualization(_Base):
    type: Literal["todo-list"]
    items: list[TodoItem]


class NoneVisualization(_Base):
    type: Literal["none"]
    message: str | None = None


Visualization = Annotated[
    DiffVisualization
    | DiffsVisualization
    | CodeVisualization
    | FileListVisualization
    | TableVisualization
    | MarkdownVisualization
    | ShellOutputVisualization
    | TodoListVisualization
    | NoneVisualization,
    Field(discriminator="type"),
]

#: The nine type names, in the order the tool folder format lists them.
VISUALIZATION_TYPES = (
    "diff",
    "diffs",
    "code",
    "file-list",
    "table",
    "markdown",
    "shell-output",
    "todo-list",
    "none",
)


@functools.cache
def _adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Visualization)


class InvalidVisualization(ValueError):
    """A ``_visualization`` value does not match any of the nine types."""


def validate_visualization(value: Any) -> dict[str, Any]:
    """Validate a ``_visualization`` and return it normalized (camelCase keys, no nulls).

    Raises :class:`InvalidVisualization` with every problem, each named by its path.
    """
    if not isinstance(value, Mapping):
        raise InvalidVisualization(f"_visualization must be an object, not {type(value).__name__}")
    kind = value.get("type")
    if kind not in VISUALIZATION_TYPES:
        raise InvalidVisualization(
            f"_visualization.type must be one of {', '.join(VISUALIZATION_TYPES)}; got {kind!r}"
        )
    try:
        model = _adapter().validate_python(dict(value))
    except ValidationError as exc:
        problems = "; ".join(
            "_visualization." + ".".join(str(p) for p in err["loc"][1:]) + f": {err['msg']}"
            for err in exc.errors()
        )
        raise InvalidVisualization(problems) from None
    normalized: dict[str, Any] = model.model_dump(by_alias=True, exclude_none=True)
    return normalized
