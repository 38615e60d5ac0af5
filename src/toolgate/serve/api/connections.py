"""Routes for operators: the connections of capabilities (their secrets and settings).

A capability (declared by a capability manifest) is connected when every
``requiredPreferenceNames`` secret is set in the gateway's secret store. Secrets can be written
here but are never read back: responses name them and say which are missing, nothing more.
After a change the capability's source is reloaded at once, so its tools become available (or
unavailable) without waiting for the periodic connection check.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from ...errors import ErrorCode
from ...formats.capability.connection_status import connection_status
from ...formats.capability.source import CapabilitySource, LoadedCapability
from ...gateway import Gateway
from ...secrets import SecretStore, SecretStoreError, store_names, store_problem
from .deps import ERRORS, Context, Operator
from .models import ConnectionList, ConnectionView, ConnectRequest
from .problems import ApiJSONResponse, ApiProblem, HttpErrorCode

__all__ = ["router"]

#: The longest secret or setting value accepted.
MAX_VALUE_CHARS = 16_384


def _row(
    source: CapabilitySource, capability: LoadedCapability, store: SecretStore
) -> dict[str, Any]:
    return {
        **connection_status(source, capability, store),
        "secrets": list(capability.manifest.required_preferences),
    }


router = APIRouter(prefix="/v1", responses=ERRORS)
"""The connection routes."""


def _capabilities(gateway: Gateway) -> list[tuple[CapabilitySource, LoadedCapability]]:
    return [
        (source, capability)
        for source in gateway.declarations.sources
        if isinstance(source, CapabilitySource)
        for capability in source.capabilities
    ]


def _store(gateway: Gateway) -> SecretStore:
    found = gateway.secrets.store
    if found is None:
        raise ApiProblem(
            409, ErrorCode.UNAVAILABLE, "this gateway has no secret store to connect with"
        )
    return found


def _find(gateway: Gateway, capability_id: str) -> tuple[CapabilitySource, LoadedCapability]:
    for source, capability in _capabilities(gateway):
        if capability.manifest.id == capability_id:
            return source, capability
    known = ", ".join(sorted(c.manifest.id for _, c in _capabilities(gateway))) or "none"
    raise ApiProblem(
        404,
        HttpErrorCode.NOT_FOUND,
        f"no capability {capability_id!r} is configured (known: {known})",
    )


def _reloaded(gateway: Gateway, source: CapabilitySource, capability_id: str) -> dict[str, Any]:
    # On the event loop, where every other reload of the registry happens.
    gateway.declarations.reload(source)
    _, capability = _find(gateway, capability_id)
    return _row(source, capability, _store(gateway))


@router.get("/connections", response_model=ConnectionList, summary="Capability connections")
def list_connections(who: Operator, context: Context) -> Response:
    """Every configured capability: connected or not, the secrets it is missing (names,
    never values), its settings, its tools, and where secrets are stored (operators)."""
    gateway = context.gateway
    secrets = gateway.secrets.store
    rows = [] if secrets is None else [_row(s, c, secrets) for s, c in _capabilities(gateway)]
    return ApiJSONResponse(
        {
            "connections": rows,
            "secret_store": {
                "description": None if secrets is None else secrets.description,
                "problem": store_problem(secrets),
            },
        }
    )


@router.post(
    "/connections/{capability_id}",
    response_model=ConnectionView,
    summary="Connect a capability",
)
async def connect_capability(
    capability_id: str, body: ConnectRequest, who: Operator, context: Context
) -> Response:
    """Store secrets and settings for a capability (values are never returned), then
    report whether it is connected. Every name must be one the manifest declares; an
    empty setting is removed; secrets already set may be left out (operators only)."""
    gateway = context.gateway
    source, capability = _find(gateway, capability_id)
    manifest = capability.manifest
    secrets = _store(gateway)
    known = (*manifest.required_preferences, *manifest.public_preferences)
    for name, value in body.values.items():
        if name not in known:
            raise ApiProblem(
                422,
                ErrorCode.INVALID_ARGUMENTS,
                f"{manifest.id} has no preference {name!r}; its preferences are "
                f"{', '.join(known) or 'none'}",
            )
        if len(value) > MAX_VALUE_CHARS or "\x00" in value:
            raise ApiProblem(422, ErrorCode.INVALID_ARGUMENTS, f"{name}: the value is not usable")
        if name in manifest.required_preferences and not value:
            raise ApiProblem(
                422, ErrorCode.INVALID_ARGUMENTS, f"{name} is a secret and cannot be empty"
            )

    def write() -> None:
        # Keyring writes may block (D-Bus): off the event loop.
        for name, value in body.values.items():
            if value:
                secrets.set(manifest.id, name, value)
            else:
                secrets.delete(manifest.id, name)

    try:
        await run_in_threadpool(write)
    except SecretStoreError as exc:
        raise ApiProblem(409, ErrorCode.UNAVAILABLE, exc.message) from None
    return ApiJSONResponse(_reloaded(gateway, source, capability_id))


@router.delete(
    "/connections/{capability_id}",
    response_model=ConnectionView,
    summary="Disconnect a capability",
)
async def disconnect_capability(capability_id: str, who: Operator, context: Context) -> Response:
    """Remove a capability's secrets and settings; its tools become unavailable
    (operators only)."""
    gateway = context.gateway
    source, capability = _find(gateway, capability_id)
    manifest = capability.manifest
    secrets = _store(gateway)

    def remove() -> None:
        names = dict.fromkeys(
            [
                *manifest.required_preferences,
                *manifest.public_preferences,
                *store_names(secrets, manifest.id),
            ]
        )
        for name in names:
            secrets.delete(manifest.id, name)

    try:
        await run_in_threadpool(remove)
    except SecretStoreError as exc:
        raise ApiProblem(409, ErrorCode.UNAVAILABLE, exc.message) from None
    return ApiJSONResponse(_reloaded(gateway, source, capability_id))
