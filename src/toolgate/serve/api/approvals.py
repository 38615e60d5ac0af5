"""Routes for deciding approval requests and managing "always allow" grants.

Who may decide: operators (agents labelled ``role: operator``; without keys, the local
``default`` caller) — and never for a request their own agent name made, so an agent cannot
approve itself. An agent may follow its own request (``GET /v1/approvals/{id}``) while its
credentials let it see the tool. The run an approval starts is checked again as the agent that
asked, within the namespaces its credentials allowed then; a retry is checked with the retrying
caller's own credentials.
"""

# No ``from __future__ import annotations``: FastAPI reads the route annotations at runtime.

from fastapi import APIRouter
from starlette.responses import Response

from ...approvals import ApprovalService
from ...errors import ApprovalClosedError, ErrorCode
from ...gateway import Gateway
from ...model import ApprovalRequest, ApprovalStatus
from .deps import ERRORS, Agent, Caller, Context, Operator
from .models import ApprovalDetail, ApprovalList, DecisionRequest, DecisionResult, GrantList
from .problems import ApiJSONResponse, ApiProblem, HttpErrorCode
from .views import approval_view, grant_view, outcome_view

__all__ = ["router"]


router = APIRouter(prefix="/v1", responses=ERRORS)
"""The approval and grant routes."""


def _service(gateway: Gateway) -> ApprovalService:
    """The gateway's approvals, else the ``404`` of a gateway without them."""
    if gateway.approvals is None:
        raise ApiProblem(
            404,
            HttpErrorCode.NOT_FOUND,
            "approvals are not enabled on this gateway (it was built without an approver)",
        )
    return gateway.approvals


def _find(gateway: Gateway, request_id: str) -> ApprovalRequest:
    try:
        return _service(gateway).get(request_id)
    except ApprovalClosedError:
        raise ApiProblem(
            404, HttpErrorCode.NOT_FOUND, f"no approval request {request_id!r}"
        ) from None


def _follows(gateway: Gateway, who: Caller, request: ApprovalRequest) -> bool:
    """Whether an agent may follow ``request``: its own agent's, of a tool its credentials
    still let it see now (a token that lost the scope learns nothing of the call)."""
    if request.agent != who.agent:
        return False
    entry = gateway.registry.get(request.tool_id)
    return entry is not None and gateway.access.visible(entry.tool, who.agent, who.namespaces)


def _view(gateway: Gateway, request: ApprovalRequest) -> dict[str, object]:
    entry = gateway.registry.get(request.tool_id)
    return approval_view(request, None if entry is None else entry.tool)


@router.get("/approvals", response_model=ApprovalList, summary="Pending approval requests")
def list_approvals(who: Operator, context: Context) -> Response:
    """Requests waiting for a decision, oldest first (operators only)."""
    gateway = context.gateway
    found = [] if gateway.approvals is None else gateway.approvals.pending()
    return ApiJSONResponse({"approvals": [_view(gateway, request) for request in found]})


@router.get("/approvals/{approval_id}", response_model=ApprovalDetail, summary="Show a request")
def show_approval(approval_id: str, who: Agent, context: Context) -> Response:
    """A request in any state, with the call's outcome once decided. Operators see any
    request and its log; an agent sees only the requests its own calls made."""
    gateway = context.gateway
    request = _find(gateway, approval_id)
    if not who.operator and not _follows(gateway, who, request):
        raise ApiProblem(404, HttpErrorCode.NOT_FOUND, f"no approval request {approval_id!r}")
    service = _service(gateway)
    result = service.result(approval_id)
    return ApiJSONResponse(
        {
            "approval": _view(gateway, request),
            "outcome": None if result is None else outcome_view(result),
            "events": service.events(approval_id) if who.operator else [],
        }
    )


@router.post(
    "/approvals/{approval_id}/decision",
    response_model=DecisionResult,
    summary="Decide a request",
)
def decide_approval(
    approval_id: str, body: DecisionRequest, who: Operator, context: Context
) -> Response:
    """Record a decision: approve once, always allow (a grant stops asking for this tool in
    this workspace), or deny. Nothing runs here: the agent's next call of the tool with the
    same arguments runs an approved call, once, as that agent (or gets the refusal);
    ``GET /v1/approvals/{id}`` shows the outcome once it has run. Operators only, and never
    for a request of their own agent."""
    gateway = context.gateway
    request = _find(gateway, approval_id)
    if request.agent == who.agent:
        hint = (
            " Without agent keys every caller is 'default', so the API cannot tell you "
            "apart from the agent: decide it in the web UI or with 'toolgate approvals "
            f"approve {approval_id}', or give your agents keys (toolgate agents add NAME)."
            if who.agent == "default"
            else ""
        )
        raise ApiProblem(
            403,
            ErrorCode.FORBIDDEN,
            f"agent {who.agent!r} made this request and cannot decide it itself.{hint}",
        )
    if request.status is not ApprovalStatus.PENDING:
        raise ApiProblem(
            409,
            ErrorCode.APPROVAL_CLOSED,
            f"approval request {approval_id} is {request.status}, not pending",
        )
    service = _service(gateway)
    try:
        decided = service.decide(
            approval_id,
            body.decision,
            by=who.agent,
            message=body.message,
            grant_ttl=body.grant_ttl,
        )
    except ApprovalClosedError as exc:
        raise ApiProblem(409, ErrorCode.APPROVAL_CLOSED, str(exc)) from None
    result = service.result(approval_id)
    return ApiJSONResponse(
        {
            "approval": _view(gateway, decided),
            "outcome": None if result is None else outcome_view(result),
        }
    )


@router.get("/grants", response_model=GrantList, summary="Always-allow grants")
def list_grants(who: Operator, context: Context) -> Response:
    """Live "always allow" grants, newest first (operators only)."""
    approvals = context.gateway.approvals
    found = [] if approvals is None else approvals.grants()
    return ApiJSONResponse({"grants": [grant_view(grant) for grant in found]})


@router.delete(
    "/grants/{grant_id}",
    status_code=204,
    response_class=Response,
    summary="Revoke a grant",
)
def revoke_grant(grant_id: str, who: Operator, context: Context) -> Response:
    """Revoke a grant: calls it covered need approval again (operators only)."""
    if not _service(context.gateway).revoke(grant_id):
        raise ApiProblem(404, HttpErrorCode.NOT_FOUND, f"no live grant {grant_id!r}")
    return Response(status_code=204)
