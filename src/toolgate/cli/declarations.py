"""``toolgate validate PATH``: check a declaration in any format without running anything."""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from ..formats._common.diagnostics import Severity
from ..formats.detect import FORMATS, validate_path
from .errors import EXIT_CODES_HELP, CliFailure, CliUsageError
from .folders import print_diagnostics, validate_folder
from .options import CliState

__all__ = ["register"]

_FORMAT_NAMES = ", ".join(["tool-folder", *FORMATS])


def _is_tool_folder(path: Path) -> bool:
    return path.is_dir() and ((path / "tool.md").is_file() or (path / "tool.json").is_file())


def validate(
    ctx: typer.Context,
    path: Annotated[
        Path, typer.Argument(metavar="PATH", help="A declaration file or folder, in any format.")
    ],
    format_name: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="FORMAT",
            help=f"The format ({_FORMAT_NAMES}); detected from the content when not given.",
        ),
    ] = None,
) -> None:
    """Check a declaration without importing or running anything: a tool folder, a capability
    manifest, a plugin manifest, an extension info file, or Kubernetes-style resources.

    Prints the detected format and every problem as 'severity: file: field: message' (the field
    as a JSON pointer). Exits 0 when it loads (warnings allowed), 1 when it does not, 2 when PATH
    does not exist or FORMAT is unknown.
    """
    state = ctx.find_object(CliState) or CliState()
    if not path.exists():
        raise CliUsageError(f"PATH: no such file or folder: {path}")
    if format_name == "tool-folder" or (format_name is None and _is_tool_folder(path)):
        validate_folder(path, state.out)
        return
    if format_name is not None and format_name not in FORMATS:
        raise CliUsageError(f"--format: unknown format {format_name!r}; use one of {_FORMAT_NAMES}")
    detected, diagnostics = validate_path(path, format_name)
    if detected is not None:
        state.out.print(Text(f"{path}: {detected} declaration"), soft_wrap=True)
    print_diagnostics(diagnostics, state.out)
    errors = sum(1 for d in diagnostics if d.severity is Severity.ERROR)
    if errors:
        noun = "error" if errors == 1 else "errors"
        raise CliFailure(f"{path} does not load ({errors} {noun} above)")
    state.out.print(Text("OK: no problems found." if not diagnostics else "OK (warnings above)."))


def register(app: typer.Typer) -> None:
    """Add ``toolgate validate``."""
    app.command("validate", epilog=EXIT_CODES_HELP)(validate)
