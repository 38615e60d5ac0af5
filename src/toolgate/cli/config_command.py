"""``toolgate config schema``: the JSON Schema of ``toolgate.yaml``, for editors and CI checks."""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

import json
from pathlib import Path
from typing import Annotated

import typer

from ..config.json_schema import config_json_schema
from .errors import EXIT_CODES_HELP, CliUsageError
from .options import print_json

__all__ = ["register"]

config_app = typer.Typer(
    help="The configuration file, toolgate.yaml.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
)


@config_app.command("schema")
def schema(
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the schema to this file instead of printing it.",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Print the JSON Schema (draft 2020-12) of toolgate.yaml.

    Point an editor at it to complete and check the file: with the YAML language server (VS Code's
    YAML extension, Neovim, JetBrains), put `# yaml-language-server: $schema=./toolgate.schema.json`
    on the first line of toolgate.yaml after `toolgate config schema -o toolgate.schema.json`.
    """
    document = config_json_schema()
    if output is None:
        print_json(document)
        return
    try:
        output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise CliUsageError(f"--output: cannot write {output}: {exc.strerror or exc}") from None
    typer.echo(f"wrote the toolgate.yaml schema to {output}", err=True)


def register(app: typer.Typer) -> None:
    """Add ``toolgate config``."""
    app.add_typer(config_app, name="config")
