"""``@tool``: declare a Python function as a toolgate tool."""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ..errors import ToolDefinitionError
from ..model import (
    ApprovalSpec,
    ConfirmationSpec,
    DisplaySpec,
    IdempotencySpec,
    ImplementationKind,
    ObservabilitySpec,
    Permissions,
    PythonEntry,
    RateLimit,
    SafetySpec,
    SandboxMode,
    SandboxSpec,
    SecurityCheckSpec,
    SideEffect,
    SourceFormat,
    TileDisplay,
    Tool,
    ToolHints,
    ToolSource,
    level_from_access,
    level_from_annotations,
)
from ..model.permission_rules import env_name_refusal
from ..model.tool import DEFAULT_IDEMPOTENCY_WINDOW
from .binding import PythonBinding
from .off_loop import RUN_IN, RunIn, on_own_loop
from .schema import inspect_function

__all__ = ["FunctionTool", "tool"]

P = ParamSpec("P")
R = TypeVar("R")

#: The plugin format: "timeout … Defaults to 60000 (60 s)"; functions use the same default.
DEFAULT_FUNCTION_TIMEOUT = 60.0

_UNSAFE_NAMESPACE = re.compile(r"[\s:]+")


class FunctionTool(Generic[P, R]):
    """A decorated function: still callable as before, plus its ``tool`` and ``binding``."""

    def __init__(self, func: Callable[P, R], tool: Tool, binding: PythonBinding) -> None:
        self.func = func
        self.tool = tool
        self.binding = binding
        functools.update_wrapper(self, func)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.tool.id}>"


def _hints(annotations: Mapping[str, Any] | ToolHints | None) -> ToolHints:
    if annotations is None:
        return ToolHints()
    if isinstance(annotations, ToolHints):
        return annotations
    known = {"readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint", "title"}
    unknown = set(annotations) - known
    if unknown:
        raise ToolDefinitionError(
            f"annotations: unknown keys {sorted(unknown)}; expected some of {sorted(known)}"
        )
    return ToolHints(
        read_only=annotations.get("readOnlyHint"),
        destructive=annotations.get("destructiveHint"),
        idempotent=annotations.get("idempotentHint"),
        open_world=annotations.get("openWorldHint"),
    )


def _level(
    effect: SideEffect | str | None, access: str | None, hints: ToolHints, declared: bool
) -> SideEffect:
    given = [n for n, v in (("effect", effect), ("access", access)) if v is not None]
    if len(given) > 1:
        raise ToolDefinitionError("give either effect= or access=, not both")
    try:
        if effect is not None:
            return SideEffect(effect)
        if access is not None:
            return level_from_access(access)
    except ValueError as exc:
        raise ToolDefinitionError(str(exc)) from None
    if declared:
        return level_from_annotations(read_only=hints.read_only, open_world=hints.open_world)
    return SideEffect.LOCAL_WRITE


def _approval(
    approval: bool | ApprovalSpec | None, confirmation: ConfirmationSpec | None
) -> ApprovalSpec:
    if isinstance(approval, ApprovalSpec):
        if confirmation is not None:
            raise ToolDefinitionError("give the confirmation inside approval=ApprovalSpec(...)")
        return approval
    return ApprovalSpec(required=approval, confirmation=confirmation)


def _ui(ui: TileDisplay | Mapping[str, Any] | None) -> TileDisplay | None:
    if ui is None or isinstance(ui, TileDisplay):
        return ui
    from ..model import TileArg

    args = tuple(
        TileArg(name=name, prefix=spec.get("prefix"), suffix=spec.get("suffix"))
        for name, spec in (ui.get("args") or {}).items()
    )
    return TileDisplay(prefix=ui.get("prefix"), args=args, suffix=ui.get("suffix"))


@overload
def tool(func: Callable[P, R], /) -> FunctionTool[P, R]: ...


@overload
def tool(
    func: None = None,
    /,
    *,
    id: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    effect: SideEffect | str | None = None,
    access: str | None = None,
    annotations: Mapping[str, Any] | ToolHints | None = None,
    approval: bool | ApprovalSpec | None = None,
    confirmation: ConfirmationSpec | None = None,
    build_confirmation: Callable[[Mapping[str, Any]], Any] | None = None,
    security_check: Callable[..., Any] | None = None,
    timeout: float = DEFAULT_FUNCTION_TIMEOUT,
    output_schema: Mapping[str, Any] | None = None,
    env: Iterable[str] = (),
    secrets: Iterable[str] = (),
    config: Iterable[str] = (),
    capability: str | None = None,
    idempotent: bool | None = None,
    idempotency_key: str | None = None,
    idempotency_window: float = DEFAULT_IDEMPOTENCY_WINDOW,
    allowed_agents: Iterable[str] | None = None,
    denied_namespaces: Iterable[str] = (),
    calls_per_minute: int | None = None,
    calls_per_day: int | None = None,
    log_args: bool = True,
    log_result: bool = True,
    redact: Iterable[str] = (),
    examples: Iterable[str] = (),
    ui: TileDisplay | Mapping[str, Any] | None = None,
    dangerous: bool = False,
    sandbox: SandboxMode | str = SandboxMode.HOST,
    permissions: Permissions | None = None,
    run_in: RunIn = "loop",
) -> Callable[[Callable[P, R]], FunctionTool[P, R]]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    id: str | None = None,
    namespace: str | None = None,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    effect: SideEffect | str | None = None,
    access: str | None = None,
    annotations: Mapping[str, Any] | ToolHints | None = None,
    approval: bool | ApprovalSpec | None = None,
    confirmation: ConfirmationSpec | None = None,
    build_confirmation: Callable[[Mapping[str, Any]], Any] | None = None,
    security_check: Callable[..., Any] | None = None,
    timeout: float = DEFAULT_FUNCTION_TIMEOUT,
    output_schema: Mapping[str, Any] | None = None,
    env: Iterable[str] = (),
    secrets: Iterable[str] = (),
    config: Iterable[str] = (),
    capability: str | None = None,
    idempotent: bool | None = None,
    idempotency_key: str | None = None,
    idempotency_window: float = DEFAULT_IDEMPOTENCY_WINDOW,
    allowed_agents: Iterable[str] | None = None,
    denied_namespaces: Iterable[str] = (),
    calls_per_minute: int | None = None,
    calls_per_day: int | None = None,
    log_args: bool = True,
    log_result: bool = True,
    redact: Iterable[str] = (),
    examples: Iterable[str] = (),
    ui: TileDisplay | Mapping[str, Any] | None = None,
    dangerous: bool = False,
    sandbox: SandboxMode | str = SandboxMode.HOST,
    permissions: Permissions | None = None,
    run_in: RunIn = "loop",
) -> Any:
    """Declare a function as a tool. Use bare (``@tool``) or with options (``@tool(...)``).

    The input schema comes from the type hints (pydantic types, ``Annotated`` descriptions,
    defaults, enums, nested models) and the docstring (summary → description, ``Args:`` →
    per-parameter descriptions). A parameter annotated :class:`~toolgate.ToolContext` is filled by
    the host and hidden from the schema.

    The id is ``namespace:name``: ``id=`` sets it whole; otherwise ``name`` defaults to the
    function's name and ``namespace`` to the last part of its module's name. The side-effect level
    comes from ``effect=`` (a level name), ``access=`` (``read``/``write``/``external``, as in
    capability manifests) or MCP ``annotations=``; with none of them it is ``local_write``.

    ``run_in="thread"`` runs an async function on an event loop of its own in a thread of its
    own, instead of awaiting it on the gateway's loop: for async code that computes or blocks
    without awaiting, which would otherwise hold every other request (see
    :mod:`toolgate.python.off_loop`). Sync functions always run off the loop (in a worker
    thread) under the async API.
    """
    if run_in not in RUN_IN:
        raise ToolDefinitionError(f"run_in must be one of {list(RUN_IN)}, not {run_in!r}")

    def decorate(fn: Callable[..., Any]) -> FunctionTool[Any, Any]:
        if isinstance(fn, FunctionTool):
            raise ToolDefinitionError(f"{fn.tool.id} is already a tool")
        if not callable(fn):
            raise ToolDefinitionError(f"@tool needs a function, not {type(fn).__name__}")
        ref = f"{fn.__module__}:{fn.__qualname__}"
        signature = inspect_function(fn, description=description)
        tool_id = id or _default_id(fn, namespace, name)
        hints = _hints(annotations)
        names = tuple(env)
        _check_env(ref, "env", names)
        if permissions is not None:
            _check_env(ref, "permissions.env", permissions.env)
        try:
            definition = Tool(
                id=tool_id,
                title=title
                or (annotations.get("title") if isinstance(annotations, Mapping) else None),
                description=signature.description,
                input_schema=signature.input_schema,
                output_schema=output_schema
                if output_schema is not None
                else signature.output_schema,
                kind=ImplementationKind.PYTHON,
                entry=PythonEntry(ref, code_digest(fn)),
                timeout=timeout,
                side_effect=_level(effect, access, hints, annotations is not None),
                hints=hints,
                approval=_approval(approval, confirmation),
                security_check=None if security_check is None else SecurityCheckSpec(),
                sandbox=SandboxSpec(SandboxMode(sandbox), permissions or Permissions()),
                env=names,
                secrets=tuple(secrets),
                config=tuple(config),
                capability=capability,
                safety=SafetySpec(
                    allowed_agents=None if allowed_agents is None else tuple(allowed_agents),
                    denied_namespaces=tuple(denied_namespaces),
                    rate_limit=RateLimit(calls_per_minute, calls_per_day)
                    if calls_per_minute or calls_per_day
                    else None,
                ),
                idempotency=IdempotencySpec(idempotent, idempotency_key, idempotency_window),
                observability=ObservabilitySpec(log_args, log_result, tuple(redact)),
                display=DisplaySpec(ui=_ui(ui), examples=tuple(examples), dangerous=dangerous),
                source=ToolSource(SourceFormat.PYTHON, ref),
            )
        except ValueError as exc:
            raise ToolDefinitionError(f"{ref}: {exc}") from None
        call = fn
        if run_in == "thread" and inspect.iscoroutinefunction(fn):
            call = on_own_loop(fn, tool_id)
        binding = PythonBinding.for_function(
            call, signature, build_confirmation=build_confirmation, security_check=security_check
        )
        return FunctionTool(fn, definition, binding)

    if func is not None:
        return decorate(func)
    return decorate


def code_digest(fn: Callable[..., Any]) -> str | None:
    """A digest of a function's compiled code (bytecode, constants, names), nested code
    included; ``None`` for callables without Python code (builtins, C extensions)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        call = getattr(fn, "__call__", None)  # noqa: B004 - callable objects
        code = getattr(getattr(call, "__func__", None), "__code__", None)
    if code is None:
        return None
    hasher = hashlib.sha256()

    def feed(item: Any) -> None:
        if isinstance(item, types.CodeType):
            hasher.update(item.co_code)
            hasher.update(repr(item.co_names).encode())
            for const in item.co_consts:
                feed(const)
        else:
            hasher.update(repr(item).encode())

    feed(code)
    return hasher.hexdigest()


def _default_id(fn: Callable[..., Any], namespace: str | None, name: str | None) -> str:
    if namespace is None:
        module = fn.__module__.rpartition(".")[2]
        namespace = "main" if module == "__main__" else module
    namespace = _UNSAFE_NAMESPACE.sub("_", namespace.strip()) or "main"
    return f"{namespace}:{name or fn.__name__}"


def _check_env(ref: str, field: str, names: Iterable[str]) -> None:
    """Refuse a declared environment variable that makes a runtime load or run code (see
    :mod:`toolgate.model.permission_rules`), naming the function and the field."""
    for index, name in enumerate(names):
        refusal = env_name_refusal(name)
        if refusal is not None:
            raise ToolDefinitionError(f"{ref}: {field}[{index}]: {refusal}")
