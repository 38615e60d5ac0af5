"""Build a tool's JSON Schemas from a Python function's signature, type hints and docstring."""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, get_args, get_origin, get_type_hints

import docstring_parser
import docstring_parser.google
import typing_extensions
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from ..errors import ToolDefinitionError
from .context import ToolContext

__all__ = ["FunctionSignature", "inspect_function"]

# Values that arrive from JSON already in the type the function expects; for parameters of only
# these types the pipeline skips pydantic conversion (it is the hot path).
_JSON_NATIVE: frozenset[Any] = frozenset({str, int, float, bool, dict, list, Any, type(None)})


class _NoFieldTitles(GenerateJsonSchema):
    """Pydantic titles every field after its name; models do not need that noise."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class FunctionSignature:
    """What ``@tool`` learned from a function."""

    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    context_param: str | None
    """Name of the ``ToolContext`` parameter, if any."""
    arguments_model: type[BaseModel] | None
    """Set when some argument needs converting from JSON (models, enums, dates…)."""
    field_names: dict[str, str]
    """Internal model field name → parameter name."""
    result_adapter: TypeAdapter[Any] | None
    """Set when the return annotation is a model whose values must be dumped to JSON."""


def _is_json_native(annotation: Any) -> bool:
    if annotation in _JSON_NATIVE or annotation is inspect.Parameter.empty:
        return True
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        return _is_json_native(get_args(annotation)[0])
    if origin in (list, dict, typing.Union) or str(origin) == "<class 'types.UnionType'>":
        return all(_is_json_native(a) for a in get_args(annotation))
    if origin is typing.Literal:
        return all(
            isinstance(a, (str, int, float, bool)) or a is None for a in get_args(annotation)
        )
    return False


def _field(
    annotation: Any, default: Any, description: str | None, alias: str
) -> tuple[Any, FieldInfo]:
    """Turn ``Annotated[T, "text"]`` and docstring text into a pydantic ``Field``.

    Fields get internal names and the parameter name as alias, so that no parameter (``schema``,
    ``json``, ``model_config``…) can shadow pydantic's own attributes.
    """
    field_info: FieldInfo | None = default if isinstance(default, FieldInfo) else None
    if get_origin(annotation) is typing.Annotated:
        base, *extras = get_args(annotation)
        texts = [e for e in extras if isinstance(e, str)]
        others = [e for e in extras if not isinstance(e, str)]
        if texts and description is None:
            description = " ".join(texts)
        annotation = typing.Annotated[(base, *others)] if others else base
    if field_info is None:
        # Only pass what is known: an explicit ``description=None`` would override a
        # description given inside ``Annotated[..., Field(description=...)]``.
        if description:
            return annotation, Field(default=default, alias=alias, description=description)
        return annotation, Field(default=default, alias=alias)
    overrides: dict[str, Any] = {"alias": alias}
    if field_info.description is None and description:
        overrides["description"] = description
    return annotation, FieldInfo.merge_field_infos(field_info, **overrides)


#: Default values the fast path writes as pydantic would (anything else goes through pydantic).
_PLAIN_DEFAULTS = (str, int, float, bool, type(None))


def _type_schema(annotation: Any) -> str:
    """The JSON Schema of one JSON-native type, as JSON text (cached: a catalog repeats the
    same few types thousands of times)."""
    # Keyed on the spelling too: typing compares Union[int, str] equal to Union[str, int], and
    # Literal["a", "b"] to Literal["b", "a"], but their schemas list them in written order.
    # A class is its own spelling (and repr() of 30,000 annotations was a tenth of a second).
    spelling = annotation if isinstance(annotation, type) else repr(annotation)
    return _cached_type_schema(spelling, annotation)


@functools.lru_cache(maxsize=1024)
def _cached_type_schema(spelling: object, annotation: Any) -> str:
    return json.dumps(TypeAdapter(annotation).json_schema(schema_generator=_NoFieldTitles))


#: Parameter names whose schema pydantic leaves unsorted (it does not sort what is under a key
#: named so): those signatures go through pydantic.
_UNSORTED_NAMES = frozenset({"properties", "default"})


def _plain_parameter(annotation: Any, default: Any, description: str | None) -> Any:
    """``(type, description)`` when the parameter's schema can be written without building a
    model — a JSON-native type, at most ``Annotated`` with text, and a plain default — else
    ``None``."""
    if isinstance(default, FieldInfo) or not (
        default is ... or isinstance(default, _PLAIN_DEFAULTS)
    ):
        return None
    if isinstance(default, float) and not math.isfinite(default):
        return None
    if get_origin(annotation) is typing.Annotated:
        base, *extras = get_args(annotation)
        if not all(isinstance(extra, str) for extra in extras):
            return None
        if extras and description is None:
            description = " ".join(extras)
        annotation = base
    if not _is_json_native(annotation):
        return None
    try:
        hash(annotation)
    except TypeError:
        return None
    return annotation, description


def _plain_schema(parameters: list[tuple[str, Any, Any, str | None]]) -> dict[str, Any]:
    """The input schema of parameters that :func:`_plain_parameter` accepted: what pydantic's
    model schema gives (keys sorted, properties in parameter order), without building the model
    — about a tenth of the time, which is most of starting a catalog of thousands of tools."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, annotation, default, description in parameters:
        field: dict[str, Any] = json.loads(_type_schema(annotation))
        if default is ...:
            required.append(name)
        else:
            field["default"] = default
        if description:
            field["description"] = description
        properties[name] = {key: field[key] for key in sorted(field)}
    schema: dict[str, Any] = {"additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = required
    schema["type"] = "object"
    return schema


#: A line only the other docstring styles give meaning to: reST and Epydoc fields (``:param``,
#: ``@param``), numpydoc section underlines and directives (``-----``, ``.. deprecated::``).
_OTHER_STYLE_LINE = re.compile(r"^(?:[:@-]|\.\.)", re.MULTILINE)


def parse_docstring(text: str) -> docstring_parser.Docstring:
    """``docstring_parser.parse(text)``, sooner for a Google-style docstring.

    The automatic parse runs all four styles and keeps the first with the most entries; a text
    with no line that reST, Epydoc or numpydoc reads gives them no entry, so the Google parse
    wins whenever it finds one (``Args:``…) — it is then the answer, without the other three.
    Anything else is parsed the automatic way.
    """
    if _OTHER_STYLE_LINE.search(inspect.cleandoc(text)) is None:
        try:
            parsed = docstring_parser.google.parse(text)
        except docstring_parser.ParseError:
            parsed = None
        if parsed is not None and parsed.meta:
            return parsed
    return docstring_parser.parse(text)


def inspect_function(func: Callable[..., Any], *, description: str | None) -> FunctionSignature:
    """Read a function's signature into schemas. Raises :class:`ToolDefinitionError` on misuse."""
    where = f"{getattr(func, '__module__', '?')}:{getattr(func, '__qualname__', repr(func))}"
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as exc:  # NameError for unresolvable forward references, mostly
        raise ToolDefinitionError(f"{where}: cannot resolve type hints ({exc})") from exc
    doc = parse_docstring(inspect.getdoc(func) or "")
    param_docs = {p.arg_name: p.description for p in doc.params}

    fields: dict[str, Any] = {}
    names: dict[str, str] = {}
    plain: list[tuple[str, Any, Any, str | None]] | None = []
    context_param: str | None = None
    native = True
    for index, param in enumerate(inspect.signature(func).parameters.values()):
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext or (
            get_origin(annotation) is typing.Annotated and get_args(annotation)[0] is ToolContext
        ):
            context_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"{where}: parameter {param.name!r}: tools take named parameters only, "
                "not *args or **kwargs"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"{where}: parameter {param.name!r} is positional-only; tools are called with "
                "keyword arguments"
            )
        native = native and _is_json_native(annotation)
        default = ... if param.default is inspect.Parameter.empty else param.default
        internal = f"p{index}"
        fields[internal] = (annotation, default, param_docs.get(param.name), param.name)
        names[internal] = param.name
        if plain is not None:
            simple = (
                None
                if param.name in _UNSORTED_NAMES
                else _plain_parameter(annotation, default, param_docs.get(param.name))
            )
            if simple is None:
                plain = None
            else:
                plain.append((param.name, simple[0], default, simple[1]))

    model: type[BaseModel] | None = None
    if native and plain is not None:
        # JSON-native parameters need no conversion, so no model: only its schema, written
        # directly (tests/test_python_schema_fast_path.py checks it is pydantic's, byte for byte).
        try:
            schema = _plain_schema(plain)
        except Exception as exc:  # a malformed annotation (dict[str]): as pydantic's path says
            raise ToolDefinitionError(f"{where}: cannot build an input schema ({exc})") from exc
    else:
        try:
            # Fields only now: most signatures take the path above and need none.
            definitions: dict[str, Any] = {
                internal: _field(*spec) for internal, spec in fields.items()
            }
            model = create_model(
                f"{getattr(func, '__name__', 'tool')}_arguments",
                __config__=ConfigDict(extra="forbid", populate_by_name=False),
                **definitions,
            )
            schema = model.model_json_schema(by_alias=True, schema_generator=_NoFieldTitles)
        except Exception as exc:
            raise ToolDefinitionError(f"{where}: cannot build an input schema ({exc})") from exc
        schema.pop("title", None)
        schema.setdefault("properties", {})
        schema["additionalProperties"] = False

    text = description
    if text is None:
        parts = [doc.short_description, doc.long_description]
        # The parser's "short description" is the first line only: a summary that wraps goes on
        # in the "long" one, and must stay one paragraph (no blank line put in the middle).
        separator = "\n\n" if doc.blank_after_short_description else "\n"
        text = separator.join(p for p in parts if p)
    if not text:
        text = getattr(func, "__name__", "tool").replace("_", " ")

    output_schema, result_adapter = _output_schema(hints.get("return"), where)
    return FunctionSignature(
        description=text.strip(),
        input_schema=schema,
        output_schema=output_schema,
        context_param=context_param,
        arguments_model=None if native else model,
        field_names=names,
        result_adapter=result_adapter,
    )


def _output_schema(
    annotation: Any, where: str
) -> tuple[dict[str, Any] | None, TypeAdapter[Any] | None]:
    """Structured return types (pydantic models, TypedDicts) declare the output schema."""
    if annotation is None:
        return None, None
    structured = (
        inspect.isclass(annotation) and issubclass(annotation, BaseModel)
    ) or typing_extensions.is_typeddict(annotation)
    if not structured:
        return None, None
    try:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        schema = adapter.json_schema(schema_generator=_NoFieldTitles)
    except Exception as exc:
        raise ToolDefinitionError(f"{where}: cannot build an output schema ({exc})") from exc
    return schema, adapter
