"""Runs Python-function tools in-process."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from ..call_state import CallState
from ..model import Tool
from ..python.binding import PythonBinding
from ..python.context import ToolContext
from ..python.off_loop import ABANDONED
from ..registry import RegisteredTool
from ..secrets import SecretResolver
from .base import ArgumentConversionError

__all__ = ["PythonBackend", "ToolThreads"]


def _conversion_message(exc: ValidationError) -> str:
    return "; ".join(
        "/" + "/".join(str(p) for p in err["loc"]) + f": {err['msg']}" for err in exc.errors()
    )


class ToolThreads:
    """The worker threads of synchronous Python tools: each tool has its own executor, created on
    its first call through the async API and sized to the tool's running limit.

    Why not one shared pool: with one pool a flood of calls to one slow tool takes every thread,
    and an unrelated tool's call waits behind them (measured before this: 300 calls to a
    ``time.sleep(3)`` tool made another tool answer in 25 s). A pool sized to the sum of every
    tool's limit would isolate them as well, but must be resized as tools come and go; an
    executor per tool is sized once, and starts its threads only as its calls need them (an
    idle tool costs no thread). Since a call's slot is held until its thread returns (see
    :meth:`PythonBackend.run`), a tool never has more work than threads: its executor never
    queues, and no tool can take another's threads.
    """

    def __init__(self, size: Callable[[Tool], int]) -> None:
        """``size``: the number of threads a tool may use (its running limit)."""
        self._size = size
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._lock = threading.Lock()
        self._closed = False

    def executor(self, tool: Tool) -> ThreadPoolExecutor:
        """The executor of ``tool``'s calls."""
        executor = self._executors.get(tool.id)
        if executor is None:
            with self._lock:
                if self._closed:
                    raise RuntimeError("the gateway is closed")
                executor = self._executors.get(tool.id)
                if executor is None:
                    executor = self._executors[tool.id] = ThreadPoolExecutor(
                        max(1, self._size(tool)), thread_name_prefix=f"toolgate-{tool.id}"
                    )
        return executor

    def threads(self, tool_id: str) -> int:
        """Threads started for ``tool_id`` so far (busy or idle)."""
        executor = self._executors.get(tool_id)
        return 0 if executor is None else len(executor._threads)

    def shutdown(self) -> None:
        """Stop every executor; calls still running in their threads are not waited for."""
        with self._lock:
            self._closed = True
            executors, self._executors = list(self._executors.values()), {}
        for executor in executors:
            executor.shutdown(wait=False, cancel_futures=True)


class PythonBackend:
    """Calls the bound function with keyword arguments (and a :class:`ToolContext` if asked;
    toolgate's own bindings may also ask for the outcome metadata, see
    :attr:`PythonBinding.metadata_param`).

    Async functions are awaited on the caller's loop. Sync functions run in a worker thread of the
    tool's own executor (:class:`ToolThreads`) through the async API, or in the calling thread
    through ``call_sync``. Python cannot stop a thread: when a sync function overruns its timeout
    the call returns ``timeout`` and the thread is left to finish in the background — holding
    the call's concurrency slot (``hold_slot``) until it returns, so a hanging tool cannot pile
    up threads past its limit.
    """

    def __init__(
        self,
        *,
        threads: ToolThreads,
        hold_slot: Callable[[str], Callable[[], None] | None] = lambda tool_id: None,
        secrets: SecretResolver | None = None,
        config: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        """
        Args:
            threads: The tools' worker threads.
            hold_slot: Takes one more slot of a tool and returns what gives it back (``None``:
                the tool has no limit); called when a call ends while its thread still runs.
        """
        self._threads = threads
        self._hold_slot = hold_slot
        self._secrets = secrets or SecretResolver(None, None)
        self._config = config or {}
        self._environ = environ or {}

    def can_run_inline(self, entry: RegisteredTool) -> bool:
        binding: PythonBinding = entry.binding
        return not binding.is_async

    def _context(self, state: CallState) -> ToolContext:
        tool = state.tool
        return ToolContext(
            tool_id=tool.id,
            call_id=state.call_id,
            agent=state.agent,
            namespaces=state.namespaces,
            session_id=state.session_id,
            workspace=state.workspace,
            config=MappingProxyType({k: self._config[k] for k in tool.config if k in self._config}),
            secrets=MappingProxyType(self._secrets.for_tool(tool) if tool.secrets else {}),
            env=MappingProxyType({k: self._environ[k] for k in tool.env if k in self._environ}),
            logger=logging.getLogger(f"toolgate.tool.{tool.id}"),
        )

    def _kwargs(self, state: CallState) -> dict[str, Any]:
        binding: PythonBinding = state.entry.binding
        if binding.arguments_model is None:
            kwargs = dict(state.arguments)
        else:
            try:
                model = binding.arguments_model.model_validate(state.arguments)
            except ValidationError as exc:
                raise ArgumentConversionError(_conversion_message(exc)) from None
            names = binding.field_names or {}
            kwargs = {names[field]: getattr(model, field) for field in names}
        if binding.context_param is not None:
            kwargs[binding.context_param] = self._context(state)
        # Set only on toolgate's own bindings (see PythonBinding.metadata_param): the one check
        # ordinary tools pay for it.
        if binding.metadata_param is not None:
            kwargs[binding.metadata_param] = state.metadata
        return kwargs

    @staticmethod
    def _result(binding: PythonBinding, result: Any) -> Any:
        if binding.result_adapter is not None and not isinstance(result, dict):
            return binding.result_adapter.dump_python(result, mode="json")
        return result

    async def run(self, state: CallState) -> Any:
        binding: PythonBinding = state.entry.binding
        kwargs = self._kwargs(state)
        if binding.is_async:
            if getattr(binding.func, "runs_off_loop", False):
                return self._result(binding, await self._off_loop(state, binding, kwargs))
            return self._result(binding, await binding.func(**kwargs))
        context = contextvars.copy_context()
        call = functools.partial(context.run, binding.func, **kwargs)
        work = self._threads.executor(state.tool).submit(call)
        try:
            result = await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            # A timeout (or the caller) cancelled the call. Work that has not started is
            # dropped; work that has keeps its thread, so it keeps its slot until it returns.
            if not work.cancel():
                release = self._hold_slot(state.tool.id)
                if release is not None:
                    work.add_done_callback(functools.partial(_released, release))
            raise
        return self._result(binding, result)

    async def _off_loop(
        self, state: CallState, binding: PythonBinding, kwargs: dict[str, Any]
    ) -> Any:
        """An async tool on a thread of its own (``run_in="thread"``): a thread that goes on
        after its call was cancelled keeps the call's slot until it returns."""

        def abandoned(finished: Future[None]) -> None:
            release = self._hold_slot(state.tool.id)
            if release is not None:
                finished.add_done_callback(functools.partial(_released, release))

        token = ABANDONED.set(abandoned)
        try:
            return await binding.func(**kwargs)
        finally:
            ABANDONED.reset(token)

    def run_inline(self, state: CallState) -> Any:
        # The caller's own thread: it counts as running (the Concurrency stage holds the slot
        # until this returns) and needs no thread of the gateway.
        binding: PythonBinding = state.entry.binding
        return self._result(binding, binding.func(**self._kwargs(state)))


def _released(release: Callable[[], None], work: Future[Any]) -> None:
    release()
