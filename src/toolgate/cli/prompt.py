"""The interactive terminal approver: show a confirmation with Rich and ask Allow once / Always
allow / Deny.

Everything shown comes from the :class:`~toolgate.ApprovalRequest` — title, risk label, the
call's one-line display (the tool's tile, e.g. ``Show Map Of "Cairo" At Zoom Level 12``), every
fact, the security script's message and permission type/key, the exact arguments as JSON, the
expiry. Text that came from the model (facts, arguments) is shown with control and format
characters escaped, so an argument cannot move the cursor, recolour the prompt or reorder it with
bidirectional overrides to make a call look harmless.

Answers: ``o`` / ``once`` → allow once, ``always`` (the whole word, so no slip of the Shift or
Caps Lock key makes a permanent grant) → always allow, ``d`` / ``deny`` → deny; anything else asks
again. End of input (Ctrl-D), Ctrl-C, and no answer before the request
expires all deny.
"""

from __future__ import annotations

import getpass
import json
import os
import sys
import time
import unicodedata
from collections.abc import Callable
from datetime import datetime
from typing import IO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..model import ApprovalRequest, ApprovalStatus, Decision

__all__ = [
    "PROMPT",
    "TerminalApprover",
    "arguments_json",
    "clean",
    "format_expiry",
    "format_time",
    "parse_answer",
    "print_confirmation",
    "risk_style",
]

#: The question asked after the confirmation.
PROMPT = "[o] Allow once  [always] Always allow  [d] Deny: "

_ANSWERS = {
    "o": Decision.APPROVE,
    "once": Decision.APPROVE,
    "always": Decision.ALWAYS,
    "d": Decision.DENY,
    "deny": Decision.DENY,
}
#: Unicode categories shown escaped: controls, format characters (bidirectional overrides,
#: zero-width characters), line and paragraph separators.
_ESCAPED = frozenset({"Cc", "Cf", "Zl", "Zp"})
_RISK_STYLES = {
    "low": "green",
    "medium": "yellow",
    "high": "bold red",
    "critical": "bold white on red",
}


def parse_answer(answer: str) -> Decision | None:
    """The decision a typed answer means, or ``None`` when it means none (ask again).

    Case does not matter; a permanent grant needs the whole word ``always``.
    """
    return _ANSWERS.get(answer.strip().lower())


def clean(text: str) -> str:
    """``text`` with control and format characters (escape sequences, carriage returns, new
    lines, bidirectional overrides, zero-width characters) shown as escapes such as ``\\x1b``."""
    out: list[str] = []
    for char in text:
        if unicodedata.category(char) in _ESCAPED:
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def risk_style(risk: str) -> str:
    """The Rich style of a risk label (unknown labels are bold)."""
    return _RISK_STYLES.get(risk.lower(), "bold")


def format_time(timestamp: float | None) -> str:
    """A Unix time as local ``YYYY-MM-DD HH:MM:SS`` (``-`` for ``None``)."""
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def format_expiry(expires_at: float | None, now: float, *, exact: bool = True) -> str:
    """``in 4m 59s (2025-01-02 13:45:10)``, ``expired (…)``, or ``never``; without ``exact``
    only ``in 4m 59s`` / ``expired``."""
    if expires_at is None:
        return "never"
    when = f" ({format_time(expires_at)})" if exact else ""
    if expires_at <= now:
        return f"expired{when}"
    return f"in {_duration(expires_at - now)}{when}"


def _json_escape(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def arguments_json(request: ApprovalRequest) -> str:
    """The arguments of the request as indented JSON (URL credentials masked), every control and
    format character written as a JSON escape (still valid JSON, and nothing the terminal would
    act on)."""
    text = json.dumps(request.shown_arguments(), indent=2, ensure_ascii=False, default=str)
    # json.dumps escapes U+0000-U+001F inside strings already; a raw new line is the layout.
    return "".join(
        _json_escape(char) if char != "\n" and unicodedata.category(char) in _ESCAPED else char
        for char in text
    )


def print_confirmation(
    request: ApprovalRequest,
    console: Console,
    *,
    now: float | None = None,
    heading: str = "",
    display: str | None = None,
) -> None:
    """Print what a person needs to decide ``request``: title, risk, the call's display, facts,
    security message, permission, request id, expiry, and the exact arguments as JSON.

    ``display`` is the call's one-line display (:func:`toolgate.render_display`); without it,
    the one stored with the request is shown, if any.
    """
    now = time.time() if now is None else now
    display = display or request.display
    console.print(
        Text.assemble(
            (heading or "Approval needed: ", "bold"),
            (clean(request.title), "bold"),
            "  ",
            (f"risk: {clean(request.risk)}", risk_style(request.risk)),
        ),
        soft_wrap=True,
    )
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    grid.add_row("Tool", Text(clean(request.tool_id)))
    if display:
        grid.add_row("Call", Text(clean(display), style="bold"))
    for label, value in request.shown_facts():
        grid.add_row(Text(clean(label)), Text(clean(value)))
    if request.security_message:
        grid.add_row("Security check", Text(clean(request.security_message), style="yellow"))
    if request.permission.type != "tool" or request.permission.key != "*":
        grid.add_row(
            "Permission",
            Text(f"{clean(request.permission.type)}: {clean(request.permission.key)}"),
        )
    if request.workspace:
        grid.add_row("Workspace", Text(clean(request.workspace)))
    if request.agent:
        grid.add_row("Agent", Text(clean(request.agent)))
    grid.add_row("Request", Text(request.id))
    if request.status is ApprovalStatus.PENDING:
        grid.add_row("Expires", Text(format_expiry(request.expires_at, now)))
    console.print(grid)
    console.print(Text("Arguments:", style="bold"))
    console.print(Text(arguments_json(request)), soft_wrap=True)


def _fd_of(stream: IO[str]) -> int | None:
    try:
        return stream.fileno() if os.name == "posix" and stream.isatty() else None
    except (AttributeError, OSError, ValueError):
        return None


def current_user() -> str:
    """The OS user name (who decided, when ``--by`` is not given)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return "unknown"


class TerminalApprover:
    """An approver that asks the person at the terminal.

    Use it as a gateway's approver (``Gateway(approver=TerminalApprover())`` with
    ``call(..., wait_for_approval=...)``) or call it directly with a request, as ``toolgate
    call`` does. It returns a :class:`~toolgate.Decision` with a message (``None`` unless there
    was no answer); end of input, Ctrl-C and no answer before the request expires deny.
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        stdin: IO[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """
        Args:
            console: Where the confirmation and the question go (default: stderr, so the
                command's own output stays alone on stdout).
            stdin: Where answers are read (default: ``sys.stdin``, the terminal). A terminal is
                read so that the wait ends when the request expires.
            clock: The time source (tests).
        """
        self.console = console if console is not None else Console(stderr=True, highlight=False)
        self.stdin = stdin
        self.clock = clock
        self.name = current_user()
        """Who decides: the gateway records it as the decider (the OS user name)."""

    def __call__(
        self, request: ApprovalRequest, *, display: str | None = None
    ) -> tuple[Decision, str | None]:
        """Show ``request`` (with the call's one-line ``display``, else the request's own) and
        return the person's decision (and why, when nobody answered)."""
        print_confirmation(request, self.console, now=self.clock(), display=display)
        return self.ask(deadline=request.expires_at)

    def ask(self, *, deadline: float | None = None) -> tuple[Decision, str | None]:
        """Ask until the answer means a decision; deny on end of input, Ctrl-C or the deadline."""
        while True:
            self.console.print(Text(PROMPT, style="bold"), end="")
            try:
                answer = self._read_line(deadline)
            except (EOFError, KeyboardInterrupt) as exc:
                reason = "interrupted" if isinstance(exc, KeyboardInterrupt) else "end of input"
                return self._no_answer(f"no answer at the terminal ({reason})")
            except TimeoutError:
                return self._no_answer("no answer at the terminal before the request expired")
            decision = parse_answer(answer)
            if decision is not None:
                return decision, None
            self.console.print(
                Text(
                    "Please answer o (allow once), always (always allow) or d (deny).",
                    style="yellow",
                )
            )

    def _no_answer(self, reason: str) -> tuple[Decision, str]:
        self.console.print()
        self.console.print(Text(f"Denied: {reason}.", style="red"))
        return Decision.DENY, reason

    def _read_line(self, deadline: float | None) -> str:
        stream = sys.stdin if self.stdin is None else self.stdin
        fd = _fd_of(stream)
        if fd is None:
            line = stream.readline()
            if not line:
                raise EOFError
            return line
        import select

        # A terminal in its usual (canonical) mode hands over one whole line per read, so the
        # descriptor is read directly: nothing is left in a buffer between questions.
        while True:
            remaining = None if deadline is None else deadline - self.clock()
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], None if remaining is None else remaining)
            if ready:
                break
        data = os.read(fd, 4096)
        if not data:
            raise EOFError
        return data.decode("utf-8", errors="replace")
