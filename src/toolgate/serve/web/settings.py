"""Settings: connect capabilities (their secrets are written, never shown again), revoke
"always allow" grants, and see plugin alerts and declaration problems."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from ...errors import ToolgateError
from ...formats.capability.source import CapabilitySource, Connection, LoadedCapability
from ...secrets import SecretStore, store_names, store_problem
from .security import form_of
from .state import WebUi, path_to, ui_of

__all__ = ["routes"]

#: Form fields: ``secret.NAME`` for a required preference, ``setting.NAME`` for a public one.
SECRET_FIELD: Final = "secret."
SETTING_FIELD: Final = "setting."
#: The notices a redirect may ask the page to show (nothing else is echoed from the URL).
NOTICES: Final = {
    "connected": "connected",
    "still-missing": "saved, but still not connected",
    "disconnected": "disconnected",
    "revoked": "grant revoked",
    "revoke-failed": "no live grant has that id (already revoked or expired)",
}


@dataclass(frozen=True, slots=True)
class CapabilityRow:
    """One capability on the settings page. Holds which secrets are set, never their values."""

    source: CapabilitySource
    capability: LoadedCapability
    connection: Connection
    secrets_set: dict[str, bool]
    settings: dict[str, str | None]


def _capabilities(ui: WebUi) -> list[tuple[CapabilitySource, LoadedCapability]]:
    return [
        (source, capability)
        for source in ui.gateway.declarations.sources
        if isinstance(source, CapabilitySource)
        for capability in source.capabilities
    ]


def _rows(ui: WebUi) -> list[CapabilityRow]:
    """Every capability with its connection state now (reads the secret store)."""
    store = ui.gateway.secrets.store
    rows = []
    for source, capability in _capabilities(ui):
        manifest = capability.manifest
        connection = source.connection(manifest.id) or capability.connection
        rows.append(
            CapabilityRow(
                source=source,
                capability=capability,
                connection=connection,
                secrets_set={
                    name: store is not None and bool(store.get(manifest.id, name))
                    for name in manifest.required_preferences
                },
                settings={
                    name: None if store is None else store.get(manifest.id, name)
                    for name in manifest.public_preferences
                },
            )
        )
    return rows


def _store_info(ui: WebUi) -> dict[str, Any]:
    store = ui.gateway.secrets.store
    return {
        "description": None if store is None else store.description,
        "problem": store_problem(store),
    }


async def settings_page(
    request: Request, *, error: str | None = None, status_code: int = 200
) -> Response:
    ui = ui_of(request)
    approvals = ui.gateway.approvals
    rows = await ui.blocking(_rows, ui)
    grants = [] if approvals is None else await ui.blocking(approvals.grants)
    store = await ui.blocking(_store_info, ui)
    audit = ui.gateway.audit
    notice = NOTICES.get(request.query_params.get("notice", ""))
    return ui.page(
        request,
        "settings.html",
        {
            "nav": "settings",
            "rows": rows,
            "store": store,
            "grants": grants,
            "alerts": ui.gateway.alerts(),
            "diagnostics": ui.gateway.diagnostics(),
            "audit": None
            if audit is None
            else {"healthy": audit.healthy, "lost": audit.lost, "last_error": audit.last_error},
            "notice": notice,
            "notice_subject": request.query_params.get("subject", "")[:200] if notice else "",
            "error": error,
        },
        status_code=status_code,
    )


def _find(ui: WebUi, capability_id: str) -> tuple[CapabilitySource, LoadedCapability] | None:
    return next((pair for pair in _capabilities(ui) if pair[1].manifest.id == capability_id), None)


def _store_values(
    store: SecretStore, scope: str, values: dict[str, str], cleared: list[str]
) -> None:
    for name, value in values.items():
        store.set(scope, name, value)
    for name in cleared:
        store.delete(scope, name)


def _redirect(request: Request, notice: str, subject: str) -> Response:
    query = urlencode({"notice": notice, "subject": subject})
    return RedirectResponse(f"{path_to(request, 'settings')}?{query}", status_code=303)


async def connect(request: Request) -> Response:
    """Store the secrets and settings of the form, then reload the capability's source."""
    ui = ui_of(request)
    capability_id = request.path_params["capability_id"]
    found = _find(ui, capability_id)
    store = ui.gateway.secrets.store
    if found is None:
        return await settings_page(
            request, error=f"no capability has the id {capability_id!r}", status_code=404
        )
    if store is None:
        return await settings_page(
            request, error="this gateway has no secret store", status_code=409
        )
    source, capability = found
    manifest = capability.manifest
    form = form_of(request)
    secrets = {
        name: value
        for name in manifest.required_preferences
        if (value := form.get(SECRET_FIELD + name, ""))
    }
    missing = [
        name
        for name in manifest.required_preferences
        if name not in secrets and not await ui.blocking(store.get, manifest.id, name)
    ]
    if missing:
        return await settings_page(
            request,
            error=f"{manifest.title} needs {', '.join(missing)}; nothing was saved",
            status_code=400,
        )
    settings: dict[str, str] = {}
    cleared: list[str] = []
    for name in manifest.public_preferences:
        if SETTING_FIELD + name in form:
            value = form[SETTING_FIELD + name].strip()
            if value:
                settings[name] = value
            else:
                cleared.append(name)
    try:
        await ui.blocking(_store_values, store, manifest.id, {**secrets, **settings}, cleared)
    except (ToolgateError, OSError) as exc:
        return await settings_page(
            request, error=f"the secrets could not be stored: {exc}", status_code=500
        )
    ui.gateway.declarations.reload(source)
    connection = source.connection(manifest.id)
    connected = connection is not None and connection.connected
    return _redirect(request, "connected" if connected else "still-missing", manifest.title)


async def disconnect(request: Request) -> Response:
    """Remove the capability's secrets and settings; its tools become unavailable."""
    ui = ui_of(request)
    capability_id = request.path_params["capability_id"]
    found = _find(ui, capability_id)
    store = ui.gateway.secrets.store
    if found is None or store is None:
        return await settings_page(
            request, error=f"no connected capability has the id {capability_id!r}", status_code=404
        )
    source, capability = found
    manifest = capability.manifest
    names = [
        *manifest.required_preferences,
        *manifest.public_preferences,
        *await ui.blocking(store_names, store, manifest.id),
    ]
    try:
        await ui.blocking(_store_values, store, manifest.id, {}, list(dict.fromkeys(names)))
    except (ToolgateError, OSError) as exc:
        return await settings_page(
            request, error=f"the secrets could not be removed: {exc}", status_code=500
        )
    ui.gateway.declarations.reload(source)
    return _redirect(request, "disconnected", manifest.title)


async def revoke(request: Request) -> Response:
    ui = ui_of(request)
    approvals = ui.gateway.approvals
    grant_id = request.path_params["grant_id"]
    revoked = approvals is not None and await ui.blocking(approvals.revoke, grant_id)
    return _redirect(request, "revoked" if revoked else "revoke-failed", grant_id)


def routes() -> list[Route]:
    """The settings page's routes."""
    return [
        Route("/settings", settings_page, name="settings"),
        Route(
            "/settings/connections/{capability_id}",
            connect,
            methods=["POST"],
            name="connect",
        ),
        Route(
            "/settings/connections/{capability_id}/disconnect",
            disconnect,
            methods=["POST"],
            name="disconnect",
        ),
        Route("/settings/grants/{grant_id}/revoke", revoke, methods=["POST"], name="revoke"),
    ]
