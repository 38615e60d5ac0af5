"""The web UI: the operator's console for the gateway, served at ``/`` by ``toolgate serve``.

Server-rendered pages (Jinja2, autoescaped) with a vendored htmx for polling; no build step:

* **Catalog** (``/``, ``/tools/<id>``): every tool as a tile, a page per tool with its schemas,
  health and recent calls, and a form to try a call.
* **Approvals** (``/approvals``, ``/approvals/<id>``): the pending requests with their
  confirmation and Allow once / Always allow / Deny, updated while the page is open.
* **Audit** (``/audit``, ``/audit/calls/<id>``): the calls, filtered and paged, and one call with
  its visualization rendered.
* **Settings** (``/settings``): connect capabilities, revoke grants, plugin alerts.

Build it with :func:`build_ui`; :mod:`toolgate.serve.web.security` says how forms are protected,
and :func:`identity_operator` who may use the console when the server has agent identities.
"""

from .app import build_ui
from .operator import identity_operator
from .security import (
    DEFAULT_ALLOWED_HOSTS,
    LOOPBACK_OPERATOR,
    OperatorCheck,
    SignInRequired,
    is_loopback,
    loopback_operator,
)

__all__ = [
    "DEFAULT_ALLOWED_HOSTS",
    "LOOPBACK_OPERATOR",
    "OperatorCheck",
    "SignInRequired",
    "build_ui",
    "identity_operator",
    "is_loopback",
    "loopback_operator",
]
