"""Exit codes, and the one function that maps every failure to an exit code and a message.

=====  ==========================================================================================
code   meaning
=====  ==========================================================================================
0      success
1      the call ended in an error outcome (``tool_error``, ``invalid_arguments``,
       ``tool_not_found``, ``user_rejection``…), ``tools show`` named an unknown tool, a
       tool-folder command failed: ``tools validate`` / ``tools install`` on a folder that does
       not load, ``tools install`` onto an installed tool without ``--force``, ``tools remove``
       of a tool that is not installed, ``tools new`` onto an existing folder; or ``approvals``
       / ``grants`` named an unknown, already decided or expired request, or an unknown grant
2      usage error: a bad option, ``--args`` that is not a JSON object, an unreadable args file,
       a PATH that is not a folder, a NAME that is a path
3      configuration error: a malformed ``toolgate.yaml``, a module that cannot be imported
4      the call is pending a person's approval: decide it with ``toolgate approvals``
=====  ==========================================================================================
"""

from __future__ import annotations

from enum import IntEnum

from rich.console import Console
from rich.text import Text

from ..errors import ConfigError, ToolgateError
from ..model import CallOutcome, CallStatus

__all__ = ["EXIT_CODES_HELP", "CliFailure", "CliUsageError", "ExitCode", "report"]


class ExitCode(IntEnum):
    """The process exit codes of ``toolgate``."""

    OK = 0
    CALL_FAILED = 1
    FAILED = 1
    """A command other than ``call`` could not do what was asked (same code as a failed call)."""
    USAGE = 2
    CONFIG = 3
    PENDING_APPROVAL = 4


#: The exit-code table for ``--help`` epilogs (``\b`` keeps click from re-wrapping it).
EXIT_CODES_HELP = (
    "Exit codes: 0 success · 1 the call ended in an error outcome, or the command failed (e.g. a "
    "tool folder that does not load) · 2 usage error (bad option, bad --args, a path that is not "
    "a folder) · 3 configuration error (toolgate.yaml, imports) · 4 pending approval."
)


class CliUsageError(Exception):
    """The command line itself is wrong (bad ``--args`` JSON, unreadable file, unknown format)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CliFailure(Exception):
    """A command could not do what was asked (exit code 1): a tool folder that does not load, a
    folder that already exists, a tool that is not installed. The details were printed already
    or are in the message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def report(problem: BaseException | CallOutcome, stderr: Console, *, quiet: bool = False) -> int:
    """Print what went wrong to ``stderr`` (unless ``quiet``) and return the exit code.

    The single place where failures become exit codes: call outcomes, configuration errors,
    usage errors and every other :class:`~toolgate.ToolgateError`.
    """
    if isinstance(problem, CallOutcome):
        if problem.status is CallStatus.OK:
            return ExitCode.OK
        if problem.status is CallStatus.PENDING_APPROVAL:
            code, label = ExitCode.PENDING_APPROVAL, "pending approval"
            message = problem.text
        else:
            code, label = ExitCode.CALL_FAILED, f"error [{problem.code}]"
            message = problem.message or ""
    elif isinstance(problem, CliUsageError):
        code, label, message = ExitCode.USAGE, "usage error", problem.message
    elif isinstance(problem, CliFailure):
        code, label, message = ExitCode.FAILED, "error", problem.message
    elif isinstance(problem, ConfigError):
        code, label, message = ExitCode.CONFIG, "configuration error", problem.message
    elif isinstance(problem, ToolgateError):
        code, label, message = ExitCode.CALL_FAILED, f"error [{problem.code}]", problem.message
    else:
        code, label, message = ExitCode.CALL_FAILED, "error", f"{type(problem).__name__}: {problem}"
    if not quiet:
        stderr.print(Text.assemble((f"{label}: ", "bold red"), message), soft_wrap=True)
    return code
