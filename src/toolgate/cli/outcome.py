"""Print a call: its one-line display before it runs, then the content the model reads and what a
person sees."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ..model import CallOutcome
from .render import render_visualization

__all__ = ["DISPLAY_MARK", "overflow_note", "print_display", "print_outcome"]

#: What starts the display line of a call, so it reads as a heading rather than as output.
DISPLAY_MARK = "▸ "


def overflow_note(outcome: CallOutcome) -> str | None:
    """Where the full output of an overflowed call went, or ``None``."""
    if outcome.overflow is None:
        return None
    return (
        f"note: the output had {outcome.overflow.original_size:,} characters, over the overflow "
        f"limit; the model got a preview and the path. Full output: {outcome.overflow.path}"
    )


def print_display(display: str, console: Console) -> None:
    """Print a call's one-line display (:func:`toolgate.render_display`, already free of control
    characters) as a heading, unwrapped."""
    console.print(Text.assemble((DISPLAY_MARK, "dim"), (display, "bold")), soft_wrap=True)


def print_outcome(outcome: CallOutcome, console: Console) -> None:
    """Print ``outcome.text`` exactly, the overflow note, and the rendered visualization."""
    console.print(Text(outcome.text), soft_wrap=True)
    note = overflow_note(outcome)
    if note is not None:
        console.print(Text(note, style="yellow"), soft_wrap=True)
    if outcome.visualization is not None:
        console.print()
        render_visualization(outcome.visualization, console)
