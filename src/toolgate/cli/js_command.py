"""``toolgate js install``: install the JavaScript tool host's pinned npm dependencies.

JavaScript and TypeScript plugins run on a Node.js host that needs ``ses`` and ``esbuild`` at
the versions toolgate pins in its lock file. The gateway installs them on first use; this
command does it ahead of time (a deployment step, or a machine without network at run time).
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

from typing import Annotated

import typer

from ..backends.js_install import JsRuntimeError, install
from .errors import EXIT_CODES_HELP, CliFailure
from .options import make_console

__all__ = ["register"]

js_app = typer.Typer(
    help="The Node.js host of JavaScript and TypeScript plugins and capability tools modules.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
)


@js_app.command("install", epilog=EXIT_CODES_HELP)
def install_command(
    force: Annotated[
        bool, typer.Option("--force", help="Reinstall even when they are installed.")
    ] = False,
) -> None:
    """Install the host's pinned npm dependencies (ses, esbuild) with 'npm ci' into
    $TOOLGATE_HOME/js."""
    try:
        folder = install(force=force)
    except JsRuntimeError as exc:
        raise CliFailure(str(exc)) from None
    make_console().print(f"The JavaScript host's dependencies are installed in {folder}")


def register(app: typer.Typer) -> None:
    """Add ``toolgate js``."""
    app.add_typer(js_app, name="js")
