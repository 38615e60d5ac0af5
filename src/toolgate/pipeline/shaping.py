"""Result shaping: what the model sees, what people see, and what is checked.

Order (the tool folder format's rules for visualizations and context overflow, for every tool):

1. results that are models are dumped to JSON values;
2. ``_visualization`` is removed from the model-facing content and validated for people
   (an invalid one is dropped and the reason kept for the operator: a display bug must not fail
   the call);
3. the bookkeeping keys ``_persisted``, ``_filePath``, ``_originalSize`` are removed;
4. the content is checked against the output schema (``invalid_output``);
5. content over the overflow limit is spilled to a file and replaced by a preview and a note.

A result made of content blocks (:class:`~toolgate.model.content.ContentResult`, from an MCP
upstream) goes through the same steps on its parts: the bookkeeping keys leave its
``structuredContent``, which is what the output schema checks; secrets are masked in the text of
its blocks; binary blocks are bounded one by one and together, and the overflow rule applies to
the whole model-facing text of the result (:mod:`toolgate.pipeline.content_shaping`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from .._json import thaw, to_text
from ..errors import ErrorCode
from ..model import CallOutcome, CallStatus, InvalidVisualization, validate_visualization
from ..model.content import ContentError, ContentResult
from ..redaction import Masker, redact_values
from .content_shaping import spill_blocks
from .overflow import OverflowSpiller
from .state import CallState, error_outcome
from .validation import SchemaValidator

__all__ = ["ResultShaper"]

VISUALIZATION_KEY = "_visualization"
_BOOKKEEPING_KEYS = frozenset({VISUALIZATION_KEY, "_persisted", "_filePath", "_originalSize"})


# One encoder for all calls: json.dumps with options builds a new encoder every time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_INT64 = 1 << 63


def _is_small_scalar(value: Any) -> bool:
    kind = type(value)
    if value is None or kind is bool:
        return True
    if kind is int:
        return bool(-_INT64 <= value < _INT64)
    return kind is float and math.isfinite(value)


def _jsonable(result: Any) -> Any:
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    return result


class ResultShaper:
    """Turns a tool's raw result into the outcome the caller receives."""

    def __init__(self, spiller: OverflowSpiller) -> None:
        self.spiller = spiller
        self._output_validators: dict[str, tuple[Any, SchemaValidator]] = {}

    def _output_validator(self, state: CallState) -> SchemaValidator | None:
        tool = state.tool
        if tool.output_schema is None:
            return None
        cached = self._output_validators.get(tool.id)
        if cached is not None and cached[0] is tool:
            return cached[1]
        # ``format`` is not checked in a result: it describes the tool's own values, and
        # Python's (a naive datetime has no offset) need not meet RFC 3339 to be useful.
        validator = SchemaValidator(
            tool.output_schema, f"{tool.id}: output schema", check_formats=False
        )
        self._output_validators[tool.id] = (tool, validator)
        return validator

    def shape(
        self, state: CallState, result: Any, duration: float, *, masker: Masker | None = None
    ) -> CallOutcome:
        """Shape an ``ok`` result, or return ``invalid_output``. ``masker`` masks what the
        caller must not receive (the gateway's secrets) in the content and the visualization —
        before an overflow is spilled, so the file holds no more than the preview."""
        content = _jsonable(result)
        visualization: Mapping[str, Any] | None = None
        detail: str | None = None
        rich = content if isinstance(content, ContentResult) else None
        if rich is not None:
            # The structured part is the JSON result: checked, and its bookkeeping removed.
            # Thawed whole: a nested frozen mapping is not JSON to the schema validator.
            content = None if rich.structured is None else thaw(rich.structured)
        if isinstance(content, dict) and not _BOOKKEEPING_KEYS.isdisjoint(content):
            raw_visualization = content.get(VISUALIZATION_KEY)
            content = {k: v for k, v in content.items() if k not in _BOOKKEEPING_KEYS}
            if raw_visualization is not None:
                try:
                    visualization = validate_visualization(raw_visualization)
                except InvalidVisualization as exc:
                    detail = f"visualization dropped: {exc}"

        validator = self._output_validator(state)
        if validator is not None:
            problems = validator.problems(content)
            if problems:
                listed = "\n".join(f"- {p}" for p in problems)
                return error_outcome(
                    state,
                    ErrorCode.INVALID_OUTPUT,
                    f"Tool {state.tool.id} returned a result that does not match its output "
                    f"schema:\n{listed}\nThe result was discarded; this is a fault of the tool, "
                    "not of your arguments.",
                    duration=duration,
                )

        if masker is not None:
            content = redact_values(content, masker)
            if visualization is not None:
                visualization = redact_values(visualization, masker)

        if rich is not None:
            return self._shape_blocks(
                state, rich, content, visualization, detail, duration, masker=masker
            )

        overflow = None
        if isinstance(content, str):
            text = content
        elif _is_small_scalar(content):
            # The text is only needed to measure it: a bool, a finite float or a machine-sized
            # int cannot come near the limit, so skip encoding it (the hot path of tiny tools).
            text = ""
        else:
            try:
                text = _ENCODER.encode(content)
            except (TypeError, ValueError):
                # Not plain JSON (dates, sets, NaN…): hand the model the lenient rendering, and
                # keep the content consistent with it.
                try:
                    text = to_text(content)
                    content = json.loads(text)
                except (TypeError, ValueError) as exc:  # circular references, mostly
                    return error_outcome(
                        state,
                        ErrorCode.INVALID_OUTPUT,
                        f"Tool {state.tool.id} returned a value that cannot be sent as JSON "
                        f"({exc}).",
                        duration=duration,
                    )
        if self.spiller.exceeds(text):
            spilled = self.spiller.spill(text, session_id=state.session_id, call_id=state.call_id)
            state.full_content = content
            content, overflow = spilled.preview, spilled.overflow

        return CallOutcome(
            status=CallStatus.OK,
            tool_id=state.tool.id,
            call_id=state.call_id,
            content=content,
            visualization=visualization,
            overflow=overflow,
            duration=duration,
            detail=detail,
            metadata=state.metadata,
        )

    def _shape_blocks(
        self,
        state: CallState,
        rich: ContentResult,
        structured: Any,
        visualization: Mapping[str, Any] | None,
        detail: str | None,
        duration: float,
        *,
        masker: Masker | None,
    ) -> CallOutcome:
        """The outcome of a result made of content blocks: ``structured`` is its checked,
        masked ``structuredContent``; the blocks are masked, then spilled where too large."""
        rich = ContentResult(rich.blocks, structured)
        if masker is not None:
            rich = rich.map_text(masker.sub)
        try:
            shaped = spill_blocks(
                rich, self.spiller, session_id=state.session_id, call_id=state.call_id
            )
        except ContentError as exc:
            return error_outcome(
                state,
                ErrorCode.INVALID_OUTPUT,
                f"Tool {state.tool.id} returned content that cannot be passed on: {exc}.",
                duration=duration,
            )
        if shaped.overflow is not None:
            # The audit log reads the whole result from here (its record form, without base64),
            # to learn the values its redact paths catch in the structuredContent.
            state.full_content = rich
        return CallOutcome(
            status=CallStatus.OK,
            tool_id=state.tool.id,
            call_id=state.call_id,
            content=shaped.result,
            visualization=visualization,
            overflow=shaped.overflow,
            duration=duration,
            detail=detail,
            metadata=state.metadata,
        )
