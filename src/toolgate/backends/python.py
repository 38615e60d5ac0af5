"""Runs Python-function tools in-process."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from ..invocation import Invocation
from ..python.binding import PythonBinding
from ..python.context import ToolContext
from ..registry import RegisteredTool
from ..secrets import SecretResolver
from .base import ArgumentConversionError

__all__ = ["PythonBackend"]


def _conversion_message(exc: ValidationError) -> str:
    return "; ".join(
        "/" + "/".join(str(p) for p in err["loc"]) + f": {err['msg']}" for err in exc.errors()
    )


class PythonBackend:
    """Calls the bound function with keyword arguments (and a :class:`ToolContext` if asked;
    toolgate's own bindings may also ask for the outcome metadata, see
    :attr:`PythonBinding.metadata_param`).

    Async functions are awaited on the caller's loop. Sync functions run in a worker thread of the
    gateway's pool through the async API, or in the calling thread through ``call_sync``. Python
    cannot stop a thread: when a sync function overruns its timeout the call returns ``timeout``
    and the thread is left to finish in the background.
    """

    def __init__(
        self,
        *,
        threads: ThreadPoolExecutor,
        secrets: SecretResolver | None = None,
        config: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._threads = threads
        self._secrets = secrets or SecretResolver(None, None)
        self._config = config or {}
        self._environ = environ or {}

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        binding: PythonBinding = entry.binding
        return not binding.is_async

    def _context(self, invocation: Invocation) -> ToolContext:
        tool = invocation.tool
        return ToolContext(
            tool_id=tool.id,
            call_id=invocation.call_id,
            agent=invocation.agent,
            namespaces=invocation.namespaces,
            session_id=invocation.session_id,
            workspace=invocation.workspace,
            config=MappingProxyType({k: self._config[k] for k in tool.config if k in self._config}),
            secrets=MappingProxyType(self._secrets.for_tool(tool) if tool.secrets else {}),
            env=MappingProxyType({k: self._environ[k] for k in tool.env if k in self._environ}),
            logger=logging.getLogger(f"toolgate.tool.{tool.id}"),
        )

    def _kwargs(self, invocation: Invocation) -> dict[str, Any]:
        binding: PythonBinding = invocation.entry.binding
        if binding.arguments_model is None:
            kwargs = dict(invocation.arguments)
        else:
            try:
                model = binding.arguments_model.model_validate(invocation.arguments)
            except ValidationError as exc:
                raise ArgumentConversionError(_conversion_message(exc)) from None
            names = binding.field_names or {}
            kwargs = {names[field]: getattr(model, field) for field in names}
        if binding.context_param is not None:
            kwargs[binding.context_param] = self._context(invocation)
        # Set only on toolgate's own bindings (see PythonBinding.metadata_param): the one check
        # ordinary tools pay for it.
        if binding.metadata_param is not None:
            kwargs[binding.metadata_param] = invocation.metadata
        return kwargs

    @staticmethod
    def _result(binding: PythonBinding, result: Any) -> Any:
        if binding.result_adapter is not None and not isinstance(result, dict):
            return binding.result_adapter.dump_python(result, mode="json")
        return result

    async def run(self, invocation: Invocation) -> Any:
        binding: PythonBinding = invocation.entry.binding
        kwargs = self._kwargs(invocation)
        if binding.is_async:
            return self._result(binding, await binding.func(**kwargs))
        context = contextvars.copy_context()
        call = functools.partial(context.run, binding.func, **kwargs)
        result = await asyncio.get_running_loop().run_in_executor(self._threads, call)
        return self._result(binding, result)

    def run_inline(self, invocation: Invocation) -> Any:
        binding: PythonBinding = invocation.entry.binding
        return self._result(binding, binding.func(**self._kwargs(invocation)))
