"""The Gateway: the composition root, and the one object every surface talks to."""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal

from ._loop_thread import LoopThread
from .approvals import ApprovalService, Approver
from .audit.acknowledgements import acknowledged, acknowledged_sync
from .backends import Backend, PythonBackend
from .backends.environment import ScriptEnvironment, credential_values, received_values
from .backends.python import ToolThreads
from .backends.script import ScriptBackend
from .backends.security import SecurityChecks
from .catalog import Addable, GatewayCatalog
from .formats.declarations import SourceContext, SourceSet
from .formats.tool_folder.source import FolderRoot, ToolFolderSource
from .gateway_approvals import GatewayApprovals, call_workspace
from .gateway_settings import GatewaySettings
from .gateway_upstreams import GatewayUpstreams
from .health import InMemoryStats, StatsSource, ToolStatus
from .model import ApprovalRequest, CallOutcome, CallStatus, ImplementationKind, Tool
from .model.policy import any_requires_approval
from .path_policy import program_folders
from .pipeline import Pipeline
from .pipeline.approval import ApprovalStage
from .pipeline.approval_keys import APPROVAL_DECISION, APPROVAL_TAKEN
from .pipeline.approval_policy import ApprovalPolicy
from .pipeline.audit_guard import AuditGuardStage, AuditReservationStage
from .pipeline.authorize import AccessRules, AuthorizeStage
from .pipeline.concurrency import ConcurrencyStage, ToolLoad
from .pipeline.confirmation import confirmation_builder
from .pipeline.execute import Executor
from .pipeline.observers import CallObserver, decided_call
from .pipeline.overflow import OverflowSpiller
from .pipeline.rate_limit import RateLimitStage
from .pipeline.security import SecurityCheckStage
from .pipeline.shaping import ResultShaper
from .pipeline.state import Stage
from .pipeline.state_stages import state_stages
from .redaction import record_masker, redact_values
from .registry import Registry
from .sandbox.runner import Sandbox
from .search import ToolIndex
from .search.disclosure import ProgressiveDisclosure
from .secrets import SecretResolver, SecretStore
from .stores.tool_pins import ToolPins
from .telemetry import Gauges, Telemetry

if TYPE_CHECKING:
    from .audit.log_base import AuditLog
    from .offerings import GatewayOfferings
    from .stores.sql import SqlDatabase

__all__ = ["Addable", "Gateway", "GatewaySettings"]


class Gateway(GatewayCatalog, GatewayApprovals, GatewayUpstreams):
    """Holds the tools and runs every call through the pipeline.

    ``await gateway.call(...)`` and ``gateway.call_sync(...)`` never raise for a failed call: they
    return a :class:`~toolgate.CallOutcome` whose ``status`` is ``ok``, ``error`` (with a stable
    ``code``) or ``pending_approval``.
    """

    def __init__(
        self,
        settings: GatewaySettings | None = None,
        *,
        tool_folders: Iterable[Path | str | FolderRoot] = (),
        approver: Approver | Literal["queue"] | None = None,
        secret_store: SecretStore | None = None,
        sandbox: Sandbox | None = None,
        telemetry: Telemetry | None = None,
        observers: Iterable[CallObserver] = (),
        state_database: SqlDatabase | None = None,
        clock: Callable[[], float] = time.time,
        stages: Iterable[Stage] = (),
    ) -> None:
        """
        Args:
            settings: Everything that is data — results, tool sources, the tools'
                environment, scripts, concurrency, approvals, access, audit, state — as a
                frozen :class:`~toolgate.GatewaySettings` (default: every group's defaults).
                ``toolgate.yaml`` becomes one (:func:`toolgate.config.build.build_gateway`).
            tool_folders: A shortcut for ``settings.sources.tool_folders`` (the one setting
                most programs give): folders whose sub-folders are tool folders (``tool.md``
                + script); plain paths get the namespace ``local``. Give one or the other.
            approver: Who decides calls that need approval. ``None`` (the default): nobody, so
                such calls are denied with ``user_rejection``. ``"queue"``: requests wait in
                :attr:`approvals` for a decision (CLI, HTTP, web UI). A callable (sync or async,
                taking the :class:`~toolgate.ApprovalRequest`, returning ``"approve"``,
                ``"always"`` or ``"deny"``): asked when a caller waits (``wait_for_approval``);
                requests also wait in the queue.
            secret_store: Where connection secrets live (capabilities' required preferences,
                resources' ``secretRef``); ``settings.environment.secrets`` are used first for
                the latter.
            sandbox: Runs compartment-mode scripts, ``os`` commands and plugin tools under
                bubblewrap; ``None``: none (such ``os``/plugin tools need ``host_mode``).
            telemetry: Traces and metrics of every call, e.g.
                :func:`toolgate.telemetry.from_environment` (OpenTelemetry configured by the
                ``OTEL_*`` variables); ``None`` (the default): none, at no cost per call.
                Closed with the gateway.
            observers: Told about every finished call, besides the audit log and statistics.
            state_database: The database several replicas share (a
                :class:`~toolgate.stores.postgres_db.PostgresDatabase` at the current schema):
                approvals, grants, idempotency records, accepted MCP tool definitions, the
                audit log and, without ``settings.state.redis_url``, rate-limit counters live
                there instead of ``settings.state.path``. Closed with the gateway.
            clock: Unix seconds, as the approval, idempotency and rate-limit stages and their
                stores read them (default :func:`time.time`). A seam for tests, which move a
                fake clock instead of waiting; Redis counters keep the server's time.
            stages: Pipeline stages to add, or to put in the place of the built-in stage of
                the same name (e.g. an ``idempotency`` stage with its own store); they run in
                the pipeline's fixed order (:data:`toolgate.pipeline.STAGE_ORDER`). A stage
                given here is the caller's to close.
        """
        settings = GatewaySettings() if settings is None else settings
        tool_folders = tuple(tool_folders)
        if tool_folders:
            if settings.sources.tool_folders:
                raise ValueError(
                    "Gateway: give tool_folders= or settings.sources.tool_folders, not both"
                )
            sources = dataclasses.replace(settings.sources, tool_folders=tool_folders)
            settings = dataclasses.replace(settings, sources=sources)
        self.settings = settings
        """The settings the gateway was built from."""
        results, source_settings, env = settings.results, settings.sources, settings.environment
        scripts_settings, access, audit, state = (
            settings.scripts,
            settings.access,
            settings.audit,
            settings.state,
        )
        self.registry = Registry()
        self.search_index = ToolIndex(self.registry, semantic=source_settings.semantic_search)
        """The tool search index; follows the registry."""
        self.disclosure: ProgressiveDisclosure | None = None
        """Progressive disclosure of the tools over MCP (``None``: every tool is listed)."""
        self.state_database = state_database
        """The database replicas share (``None``: this process's own SQLite state)."""
        state_file = None if state.path is None else Path(state.path).expanduser()
        self._concurrency = ConcurrencyStage(settings.concurrency)
        self._threads = ToolThreads(lambda tool: self._concurrency.slots(tool).running_limit)
        process_env = os.environ if env.environ is None else env.environ
        environment = ScriptEnvironment(
            env_file=None if env.env_file is None else Path(env.env_file),
            process_env=process_env,
            allow_from_process=env.env_from_process,
        )
        workdir = None if env.cwd is None else Path(env.cwd)
        self.secrets = SecretResolver(env.secrets, secret_store)
        """The secrets each tool receives (from the settings' ``secrets`` and the
        ``secret_store``)."""
        self._env = environment
        self.sandbox = sandbox
        """The process sandbox (``None``: none); ``tools show`` asks it what it enforces."""
        scripts = ScriptBackend(
            environment=environment,
            max_output=scripts_settings.max_output,
            cwd=workdir,
            sandbox=sandbox,
            prestart=scripts_settings.prestart,
            workers=scripts_settings.workers,
        )
        self._scripts = scripts
        self._backends: dict[ImplementationKind, Backend] = {
            ImplementationKind.PYTHON: PythonBackend(
                threads=self._threads,
                hold_slot=self._hold_slot,
                secrets=self.secrets,
                config=env.config,
                environ=process_env,
            ),
            ImplementationKind.SCRIPT: scripts,
        }
        spiller = OverflowSpiller(
            limit=results.overflow_limit,
            preview_chars=results.preview_chars,
            root=None if results.spill_dir is None else Path(results.spill_dir),
        )
        labels = dict(access.agent_labels)
        self.access = AccessRules(
            access.policies, agent_labels=lambda agent: labels.get(agent or "", {})
        )
        self.audit: AuditLog | None = None
        """The audit log, when ``settings.audit.path`` is given (in ``state_database`` when
        that is PostgreSQL: shared by the replicas, and durable — a call is answered once its
        record is committed)."""
        if audit.path is not None:
            from .audit import open_audit_log  # sqlite3 (or psycopg) only when auditing

            self.audit = open_audit_log(
                Path(audit.path).expanduser(),
                database=state_database,
                jsonl_path=None if audit.jsonl is None else Path(audit.jsonl).expanduser(),
                retention_days=audit.retention_days,
            )
            from .audit.payload_cap import PayloadCap

            self.audit.payload_cap = PayloadCap(
                max_bytes=audit.max_payload_bytes,
                keep_full=audit.keep_full_payloads,
                folder=spiller.root / "audit",
            )
        memory_stats = InMemoryStats() if self.audit is None else None
        self.stats: StatsSource = self.audit if self.audit is not None else memory_stats  # type: ignore[assignment]
        self._state = state_stages(
            state_file,
            state_database,
            redis_url=state.redis_url,
            approvals=approver is not None,
            per_agent=access.rate_limit_per_agent,
            lease_grace=state.idempotency_lease_grace,
            scrub=self._scrub,
            clock=clock,
        )
        store = self._state.approvals
        self._approval_stage = ApprovalStage(
            store=store,
            policy=ApprovalPolicy(settings.approvals.rules),
            settings=settings.approvals,
            builders=confirmation_builder,
            clock=clock,
            every_tool=any_requires_approval(self.access.policies),
            scrub=self._scrub,
        )
        built: list[Stage] = [
            *(
                ()
                if self.audit is None
                else (AuditGuardStage(self.audit), AuditReservationStage(self.audit))
            ),
            AuthorizeStage(self.access),
            self._state.rate_limits,
            self._state.idempotency,
            SecurityCheckStage(SecurityChecks.build(environment, workdir, sandbox)),
            self._approval_stage,
            self._concurrency,
        ]
        chosen = _with_replacements(built, stages)
        self._rate_limits = next(
            (s for s in chosen if isinstance(s, RateLimitStage)), self._state.rate_limits
        )
        # A rate-limited call retried after a person decided it was counted when it asked.
        self._rate_limits.already_counted = self._approval_stage.decided
        self.pipeline = Pipeline(
            self.registry,
            Executor(
                self._backends,
                ResultShaper(spiller),
                secret_values=lambda tool: credential_values(tool, self.secrets, environment),
            ),
            observers=[
                observer
                for observer in (
                    memory_stats,
                    self.audit,
                    *observers,
                    *(() if telemetry is None else telemetry.observers),
                )
                if observer is not None
            ],
            tracer=None if telemetry is None else telemetry.tracer,
            access=self.access,
            workspace_check=None if sandbox is None else sandbox.workspace_refusal,
            secret_values=lambda tool: received_values(tool, self.secrets, environment),
            stages=chosen,
        )
        self.approvals: ApprovalService | None = (
            None
            if store is None
            else ApprovalService(
                store=store,
                registry=self.registry,
                run=self._run_approved,
                approver=None if approver == "queue" else approver,
                clock=clock,
                on_denied=self._record_denial,
                scrub=self._scrub_by_id,
            )
        )
        """The approval queue and grants (``None`` when no approver is configured)."""
        self._loop_thread = LoopThread()
        roots = [
            root if isinstance(root, FolderRoot) else FolderRoot(Path(root))
            for root in source_settings.tool_folders
        ]
        home = None if source_settings.home is None else Path(source_settings.home).expanduser()
        if sandbox is not None:
            # Where the gateway loads tools and keeps its state: never a workspace, never an
            # ``fs`` prefix (a tool that could write there would add a tool run on the host).
            # Its home and spill folder are state, not even a read-only workspace.
            sandbox.guard([*(() if home is None else (home,)), spiller.root], state=True)
            sandbox.guard([root.path for root in roots])
            # The programs of the tools' own PATH, when it is not the gateway process's.
            tool_path = process_env.get("PATH")
            if tool_path is not None and tool_path != os.environ.get("PATH"):
                sandbox.guard(program_folders(tool_path))
        self.tool_folders = ToolFolderSource(
            self.registry,
            roots,
            availability=scripts.unavailable_reason,
            rescan_interval=source_settings.rescan_interval,
            confine_new=None if sandbox is None else sandbox.confine_new_folder,
        )
        if self.tool_folders.roots:
            self.tool_folders.scan()
        pins_file = state_file if state.pin_path is None else Path(state.pin_path).expanduser()
        self.tool_pins = ToolPins(pins_file, state_database)
        """The accepted definitions of upstream MCP tools (opened on first use)."""
        self.source_context = SourceContext(
            secrets=self.secrets,
            environ=process_env,
            script_availability=scripts.unavailable_reason,
            home=home,
            sandbox=sandbox,
            tool_pins=self.tool_pins,
            mcp_max_message=source_settings.mcp_max_message_bytes,
        )
        self._configured_policies = tuple(access.policies)
        self.declarations = SourceSet(
            self.registry, self._check, on_reload=self._sources_reloaded, pins=self.tool_pins
        )
        """The declaration sources (capabilities, plugins, extension info, resources)."""
        self.telemetry = telemetry
        """Traces and metrics of every call (``None``: none)."""
        if telemetry is not None:
            telemetry.bind(self.gauges())

    # -- observation ----------------------------------------------------------------------------

    def observe_calls(self, observer: CallObserver) -> None:
        """Tell ``observer`` about every call that ends from now on (besides the audit log,
        the statistics and the ``observers`` given at construction)."""
        self.pipeline.observers = (*self.pipeline.observers, observer)

    def state_health(self) -> dict[str, bool | None]:
        """Whether the shared state's services answer now: ``database`` (PostgreSQL) and
        ``redis``, each ``None`` when not configured."""
        database, limits = self.state_database, self._rate_limits
        return {
            "database": None if database is None else database.check(),
            "redis": bool(limits.storage.check()) if limits.in_redis else None,
        }

    def gauges(self) -> Gauges:
        """The gateway's current queue sizes, for metrics: approval requests waiting for a
        decision, and finished calls waiting for the audit log's writer."""
        return Gauges(
            approvals_pending=lambda: (
                0 if self.approvals is None else len(self.approvals.pending())
            ),
            audit_queue_depth=lambda: 0 if self.audit is None else self.audit.pending,
            tool_load=self._concurrency.loads,
        )

    def load(self, tool_id: str) -> ToolLoad | None:
        """The calls of a tool running and waiting for a slot now, its limits, and how many
        calls it refused with ``busy`` (``None``: it has not been called)."""
        return self._concurrency.load(tool_id)

    def status(self, tool_id: str) -> ToolStatus:
        """Health of one tool (see :meth:`GatewayCatalog.status`), with its :meth:`load`."""
        status = super().status(tool_id)
        load = self._concurrency.load(status.tool_id)
        return status if load is None else dataclasses.replace(status, load=load)

    def _hold_slot(self, tool_id: str) -> Any:
        # A sync Python call that timed out: its thread keeps the tool's slot until it returns.
        slots = self._concurrency.hold(tool_id)
        return None if slots is None else slots.release

    # -- declarations -------------------------------------------------------------------------

    def _sources_reloaded(self) -> None:
        # Policy resources loaded with the tools join the configured ones, and every compiled
        # plan is rebuilt, since whether a tool needs the access or approval stage may change.
        policies = (*self._configured_policies, *self.declarations.policies())
        if policies != self.access.policies:
            self.access.policies = policies
            self._approval_stage.every_tool = any_requires_approval(policies)
            self.pipeline.invalidate()

    # -- upstream MCP servers -------------------------------------------------------------------

    @functools.cached_property
    def offerings(self) -> GatewayOfferings:
        """The resources and prompts served besides tools (:mod:`toolgate.offerings`)."""
        from .offerings import GatewayOfferings

        return GatewayOfferings(self, self.pipeline.notify)

    # -- calls ----------------------------------------------------------------------------------

    async def call(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        workspace: Path | str | None = None,
        wait_for_approval: float | None = None,
        namespaces: frozenset[str] | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        """Call a tool through the whole pipeline and return its outcome (never raises).

        A call that needs approval returns ``pending_approval`` at once — unless
        ``wait_for_approval`` gives seconds to wait for a decision from the configured approver
        (or, with the queue, from whoever decides it); then the outcome is the call's own.
        ``namespaces`` restricts the call to tools of these namespaces (what the caller's OAuth
        scopes allow; ``None``: no restriction): another tool does not exist for this call
        (``tool_not_found``, as for a tool the access rules hide from ``agent``).

        ``tool_call_id`` is the id the agent's framework gave this call: the call then has its
        own approval request (two calls with equal arguments are asked for apart), and calling
        again with the same id after a pause finds it. ``idempotency_key`` names the call for
        de-duplication when the tool declares no key template: within the tool's window, the
        same key from the same agent replays the first outcome instead of running again
        (read-only tools always run).
        """
        self._scope_to(namespaces)
        outcome = await self._call(
            tool_id,
            arguments,
            agent=agent,
            session_id=session_id,
            workspace=workspace,
            namespaces=namespaces,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )
        self._disclose(outcome, agent, session_id)
        if (
            wait_for_approval is not None
            and outcome.status is CallStatus.PENDING_APPROVAL
            and outcome.approval is not None
            and self.approvals is not None
        ):
            if self.telemetry is None:
                decided = await self.approvals.wait(outcome.approval, wait_for_approval)
            else:
                with self.telemetry.approval_wait(outcome.approval):
                    decided = await self.approvals.wait(outcome.approval, wait_for_approval)
            if decided is not None:
                return decided
        return outcome

    def _disclose(self, outcome: CallOutcome, agent: str | None, session_id: str | None) -> None:
        """Under progressive disclosure, the tools a conversation's ``search_tools`` call found
        join its list (the conversation is the agent and session, on every surface)."""
        disclosure = self.disclosure
        if disclosure is not None and session_id is not None:
            disclosure.found_by(
                (agent, session_id),
                outcome.tool_id,
                outcome.status is CallStatus.OK,
                outcome.content,
            )

    async def _call(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None,
        *,
        agent: str | None,
        session_id: str | None,
        workspace: Path | str | None,
        metadata: Mapping[str, Any] | None = None,
        namespaces: frozenset[str] | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        prepared = self.pipeline.prepare(
            tool_id,
            arguments,
            agent=agent,
            session_id=session_id,
            workspace=call_workspace(workspace),
            inline=False,
            metadata=metadata,
            namespaces=namespaces,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )
        if isinstance(prepared, CallOutcome):
            return await acknowledged(self.audit, prepared)
        return await acknowledged(self.audit, await self.pipeline.run(*prepared))

    async def _run_approved(self, request: ApprovalRequest) -> CallOutcome:
        """Run the call a person just approved (the Approval stage takes the approval), as the
        agent that asked, within the namespaces its credentials allowed: the access rules and
        those namespaces are checked again, so an approval never widens what the caller may
        call."""
        return await self._call(
            request.tool_id,
            dict(request.arguments),
            agent=request.agent,
            session_id=request.session_id,
            workspace=request.workspace,
            namespaces=request.namespaces,
            metadata={
                APPROVAL_TAKEN: request.id,
                APPROVAL_DECISION: str(request.decision or "approve"),
            },
        )

    def _scrub(self, tool: Tool, value: dict[str, Any]) -> dict[str, Any]:
        """``value`` as a recorded store keeps it (an outcome kept for an idempotent replay or an
        approved call): the secrets ``tool`` received masked, in pieces and encoded too, and the
        credentials of every URL."""
        secrets = received_values(tool, self.secrets, self._env) if tool.secrets or tool.env else ()
        scrubbed: dict[str, Any] = redact_values(value, record_masker(secrets))
        return scrubbed

    def _scrub_by_id(self, tool_id: str, value: dict[str, Any]) -> dict[str, Any]:
        entry = self.registry.get(tool_id)
        if entry is None:
            scrubbed: dict[str, Any] = redact_values(value, record_masker())
            return scrubbed
        return self._scrub(entry.tool, value)

    def _record_denial(self, request: ApprovalRequest, outcome: CallOutcome) -> None:
        """Audit a pending call a person denied: its last record must say how it ended."""
        entry = self.registry.get(request.tool_id)
        tool = None if entry is None else entry.tool
        secrets = () if tool is None else received_values(tool, self.secrets, self._env)
        self.pipeline.notify(decided_call(request, outcome, tool, secrets))

    def call_sync(
        self,
        tool_id: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        agent: str | None = None,
        session_id: str | None = None,
        workspace: Path | str | None = None,
        wait_for_approval: float | None = None,
        tool_call_id: str | None = None,
        idempotency_key: str | None = None,
    ) -> CallOutcome:
        """:meth:`call` for synchronous code.

        A synchronous Python tool runs in the calling thread with no event loop involved; its
        timeout then cannot interrupt it, but a call that overruns still ends in ``timeout``.
        Everything else runs on the gateway's private event loop thread.
        """
        if wait_for_approval is not None and self.approvals is not None:
            return self._loop_thread.run(
                self.call(
                    tool_id,
                    arguments,
                    agent=agent,
                    session_id=session_id,
                    workspace=workspace,
                    wait_for_approval=wait_for_approval,
                    tool_call_id=tool_call_id,
                    idempotency_key=idempotency_key,
                )
            )
        prepared = self.pipeline.prepare(
            tool_id,
            arguments,
            agent=agent,
            session_id=session_id,
            workspace=call_workspace(workspace),
            inline=True,
            tool_call_id=tool_call_id,
            idempotency_key=idempotency_key,
        )
        if isinstance(prepared, CallOutcome):
            return acknowledged_sync(self.audit, prepared)
        plan, state = prepared
        if not state.inline:
            outcome = self._loop_thread.run(self.pipeline.run(plan, state))
        else:
            outcome = self.pipeline.run_inline(plan, state)
        self._disclose(outcome, agent, session_id)
        return acknowledged_sync(self.audit, outcome)

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start watching the tool folders, so changes apply without a restart, and start the
        processes of the script tools that pre-start (see :meth:`prestart_processes`)."""
        if self.tool_folders.roots:
            await self.tool_folders.start()
        await self.declarations.start()
        await self._scripts.prestart_processes(self.list_tools(), wait=True)

    def prestart_processes(self) -> int:
        """Start, now, the processes of every script tool that pre-starts (``prestart: true``
        or the ``prestart`` settings), for :meth:`call_sync`; return how many tools. (``async
        with gateway`` does this for calls made in its event loop.) Calls with a workspace get
        processes started in it from their second call on."""
        return self._loop_thread.run(self._scripts.prestart_processes(self.list_tools(), wait=True))

    async def aclose(self) -> None:
        """Stop watching and release the gateway's threads."""
        await self.tool_folders.stop()
        await self.declarations.aclose()
        await self._scripts.aclose()
        self.close()

    def close(self) -> None:
        """Release the gateway's threads and its state store. Calls still running in worker
        threads are not waited."""
        self.declarations.close()
        if self._loop_thread.started:
            # Its pre-started processes and workers are killed and reaped before it stops.
            self._loop_thread.run(self._scripts.aclose())
        self._scripts.close()  # and those of other event loops
        self._loop_thread.close()
        self._threads.shutdown()
        self._state.close()  # the gateway's own stores; stages given to it are the caller's
        if self.audit is not None:
            self.audit.close()  # flushes what is queued
        self.tool_pins.close()
        if self.state_database is not None:
            self.state_database.close()
        if self.telemetry is not None:
            self.telemetry.close()  # last: calls that ended while closing are still exported

    def __enter__(self) -> Gateway:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _with_replacements(built: list[Stage], given: Iterable[Stage]) -> list[Stage]:
    """``built`` with each stage of ``given`` in the place of the built stage of its name, or
    added when there is none."""
    replacing = {stage.name: stage for stage in given}
    kept = [replacing.pop(stage.name, stage) for stage in built]
    return [*kept, *replacing.values()]
