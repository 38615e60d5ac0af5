"""Who may use the console when the server has agent identities (``toolgate serve``).

:func:`identity_operator` turns an :class:`~toolgate.serve.auth.identity.AgentIdentity` into the
console's operator check:

* **No agent keys** (a loopback server): the person at a loopback browser is the operator,
  recorded as ``operator`` — not ``default``, the name every agent has then, so that the API's
  rule "nobody decides a request their own agent name made" leaves the console able to decide
  the requests of local agents.
* **Keys configured** (and always on a server listening beyond loopback): the browser signs in
  with HTTP Basic authentication — any user name, and an API key of an agent labelled
  ``role: operator`` as the password (scripts may send ``Authorization: Bearer <key>``). The
  operator is that agent. A missing or unknown key is answered with a 401 challenge (the
  browser asks), a key of an agent that is not an operator with 403.

Basic credentials, like cookies, are sent by the browser on its own: the console's forms stay
protected by their same-origin checks and session tokens (:mod:`.security`). Serve the console
over HTTPS when it is reachable beyond this machine, or the key crosses the network in clear.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from ..auth.identity import AgentIdentity, AuthenticationError
from .security import OperatorCheck, SignInRequired, loopback_operator

__all__ = ["identity_operator"]


@dataclass(frozen=True)
class _BearerConnection:
    """A request seen with its Basic password as a bearer key, for ``authenticate``."""

    headers: Mapping[str, str]
    client: Any


def _basic_password(header: str) -> str:
    try:
        decoded = base64.b64decode(header.split(None, 1)[1].strip(), validate=True)
        _, sep, password = decoded.decode("utf-8").partition(":")
    except (IndexError, ValueError, binascii.Error, UnicodeDecodeError):
        raise SignInRequired("the sign-in header is malformed; sign in again") from None
    if not sep or not password:
        raise SignInRequired("sign in with an operator's API key as the password")
    return password


def identity_operator(identity: AgentIdentity) -> OperatorCheck:
    """The console's operator check for ``identity`` (see the module docstring)."""

    def check(request: Request) -> str | None:
        header = request.headers.get("authorization")
        if header is None and not identity.keys_configured and not identity.require_keys:
            return loopback_operator(request)
        connection: Any = request
        if header is not None and header[:6].lower() == "basic ":
            key = _basic_password(header)
            connection = _BearerConnection({"authorization": f"Bearer {key}"}, request.client)
        try:
            agent = identity.authenticate(connection)
        except AuthenticationError as exc:
            raise SignInRequired(
                f"{exc.message} — in a browser, sign in with any user name and an operator's "
                "API key as the password"
            ) from None
        return agent if identity.is_operator(agent) else None

    return check
