"""Where a person decides a pending call: a web UI link that works, and the command that works.

A call pending approval tells the agent (and through it the person) where to decide. Under
``toolgate serve`` the web UI is the server answering the call, so its link always works. Under
``toolgate mcp`` (stdio) the web UI is only a guess — where ``serve:`` in ``toolgate.yaml`` says
``toolgate serve`` would listen — and often nothing runs there: a link to it would send the
person to a dead page. So a guessed address is checked (``GET /healthz``, answered by toolgate
without a key) before it is given, and the answer is remembered briefly: a server that starts
later is found on the next pending call, and one that answered is asked again after a while.

The command is written for the person's own shell, which is not the client's working folder or
environment: it names the configuration file the stdio process loaded (``--config``, absolute)
and its ``TOOLGATE_HOME`` when one was set, since the pending request lives in that home's store.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

__all__ = ["ApprovalDirections", "approval_command_prefix"]

#: How long a probe may take: a person is waiting for the agent's answer.
PROBE_TIMEOUT: Final = 1.0
#: How long a server that answered is believed to run on (one that did not is asked again on
#: the next pending call: it may have been started meanwhile, and a refused connection is cheap).
ANSWERING_FOR: Final = 30.0


def approval_command_prefix(
    config_path: Path | None, environ: Mapping[str, str] | None = None
) -> str:
    """``toolgate`` as the person must type it to reach this process's approvals: with the
    loaded configuration (absolute) and ``TOOLGATE_HOME`` when this process was given one."""
    environ = os.environ if environ is None else environ
    words = []
    home = environ.get("TOOLGATE_HOME")
    if home:
        words.append(f"TOOLGATE_HOME={shlex.quote(str(Path(home).expanduser().absolute()))}")
    words.append("toolgate")
    if config_path is not None:
        words.append(f"--config {shlex.quote(str(config_path.absolute()))}")
    return " ".join(words)


class ApprovalDirections:
    """The web UI base URL to link to (when it answers) and the CLI command prefix.

    ``checked=False`` (``toolgate serve``): the URL is this server's own and is always given.
    ``checked=True`` (``toolgate mcp``): given only while a toolgate server answers there.
    """

    def __init__(
        self, ui_url: str | None, *, checked: bool = False, command: str = "toolgate"
    ) -> None:
        self.ui_url = ui_url.rstrip("/") if ui_url else None
        self.checked = checked
        self.command = command
        self._answering = not checked
        self._until = 0.0

    @property
    def url(self) -> str | None:
        """The base URL to link to, as last found (see :meth:`refresh`)."""
        return self.ui_url if self._answering else None

    async def refresh(self) -> None:
        """Check a guessed address again when the last answer is old; never raises."""
        if not self.checked or self.ui_url is None or time.monotonic() < self._until:
            return
        self._answering = await _answers(self.ui_url)
        self._until = time.monotonic() + ANSWERING_FOR if self._answering else 0.0


async def _answers(base_url: str) -> bool:
    """Whether a toolgate server answers ``GET base_url/healthz`` (its JSON, not any page)."""
    import httpx  # the MCP SDK's own HTTP client; imported when a call first waits

    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT, trust_env=False) as client:
            response = await client.get(f"{base_url}/healthz")
            if response.status_code not in (200, 503):
                return False
            body = response.json()
    except (httpx.HTTPError, ValueError, OSError):
        return False
    return isinstance(body, dict) and "tools" in body and "status" in body
