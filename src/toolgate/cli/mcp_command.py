"""CLI commands of the served surfaces (being written in this change)."""

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
