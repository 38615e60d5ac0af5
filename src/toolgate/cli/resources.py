"""CLI commands of one declaration format (being written in this change)."""

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add this format's commands to ``app``."""
