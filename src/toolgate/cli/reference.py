"""The ``toolgate`` command line as a Click command, for the generated CLI reference
(mkdocs-click reads :data:`command`; the docs never keep a hand-written copy of the options)."""

import typer.main

from .app import app

__all__ = ["command"]

#: The whole ``toolgate`` command tree.
command = typer.main.get_command(app)
