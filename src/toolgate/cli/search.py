"""``toolgate tools search`` and ``toolgate examples check``.

``tools search QUERY`` ranks the configured tools for a request in plain words (a table with
scores, or ``--json``); ``--explain`` says why each tool ranked where it did (the request's terms
found in it with their share of BM25, the similarity, the closest prompt example).
``examples check [PATH]`` runs every tool's prompt ``examples`` through
the search and reports, per tool, whether they rank it first and in the top 3 and which tools
take them instead; it exits with 1 when the share ranked first (or in the top 3) is below the
threshold, so CI catches two tools whose descriptions collide.
"""

# No ``from __future__ import annotations``: Typer reads the annotations at runtime.

from pathlib import Path
from typing import Annotated, Literal

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..errors import SearchQueryError
from ..gateway import Gateway
from ..gateway_settings import GatewaySettings, SourceSettings
from ..model.display import safe_text
from ..search.examples_check import ExamplesReport, check_examples
from ..search.hits import Explanation
from ..search.query import DEFAULT_LIMIT
from .errors import EXIT_CODES_HELP, CliUsageError
from .options import CliState, print_json

__all__ = ["EXIT_BELOW_THRESHOLD", "register"]

#: Exit code of ``examples check`` when the examples rank their tools less often than asked.
EXIT_BELOW_THRESHOLD = 1

Mode = Literal["lexical", "semantic", "fused"]

examples_app = typer.Typer(
    help="Check the tools' prompt examples against the search (a regression set for tool "
    "descriptions).",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
)

_MODE_HELP = "lexical, semantic or fused (default: fused with toolgate[search], else lexical)."


def _state(ctx: typer.Context) -> CliState:
    return ctx.find_object(CliState) or CliState()


def _mode(value: str | None) -> Mode | None:
    if value is None:
        return None
    if value not in ("lexical", "semantic", "fused"):
        raise CliUsageError(f"--mode: expected lexical, semantic or fused, not {value!r}")
    return value  # type: ignore[return-value]


def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What the tool should do.")],
    limit: Annotated[
        int, typer.Option("--limit", "-n", help="How many tools to show (1-100).")
    ] = DEFAULT_LIMIT,
    agent: Annotated[
        str | None,
        typer.Option("--agent", metavar="NAME", help="Only the tools this agent may call."),
    ] = None,
    mode: Annotated[str | None, typer.Option("--mode", help=_MODE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
    explain: Annotated[
        bool,
        typer.Option(
            "--explain",
            help="Say why each tool ranked where it did: the request's terms found in it with "
            "their share of BM25, the similarity, the closest prompt example.",
        ),
    ] = False,
) -> None:
    """Search the tools by what they should do: rank, id, title, score (and the lexical and
    semantic ranks when fused). Only available tools are shown; with --agent, only those that
    agent may call."""
    state = _state(ctx)
    chosen = _mode(mode)
    explained: list[Explanation] | None = None
    with state.open_gateway(approver=None, audit="off") as gateway:
        try:
            hits = gateway.search_tools(query, agent=agent, limit=limit, mode=chosen)
            if explain:
                explained = gateway.search_index.explain(query, hits, mode=chosen)
        except SearchQueryError as error:
            raise CliUsageError(str(error)) from None
        except RuntimeError as error:  # semantic ranking asked for without the extra
            raise CliUsageError(f"--mode: {error}") from None
        fallback = gateway.search_index.semantic_error
    if fallback is not None:  # on by default, but the model would not load: said, not hidden
        state.err.print(
            Text(f"warning: semantic search is off, searching by words only: {fallback}"),
            soft_wrap=True,
        )
    if as_json:
        print_json(
            [
                {
                    "rank": rank,
                    "id": hit.tool.id,
                    "title": hit.tool.display_title,
                    "description": hit.tool.description,
                    "score": hit.score,
                    "lexical_rank": hit.lexical_rank,
                    "semantic_rank": hit.semantic_rank,
                    **({} if explained is None else {"explain": explained[i].to_dict()}),
                }
                for i, (rank, hit) in enumerate(enumerate(hits, start=1))
            ]
        )
        return
    if not hits:
        state.out.print(Text(f"No tool matches {safe_text(query, 80)!r}."), soft_wrap=True)
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("#", "ID", "Title", "Score", "Lexical", "Semantic"):
        table.add_column(header, overflow="fold")
    for rank, hit in enumerate(hits, start=1):
        table.add_row(
            str(rank),
            Text(safe_text(hit.tool.id), style="bold"),
            Text(safe_text(hit.tool.display_title)),
            f"{hit.score:.4f}",
            "-" if hit.lexical_rank is None else str(hit.lexical_rank),
            "-" if hit.semantic_rank is None else str(hit.semantic_rank),
        )
    state.out.print(table)
    if explained is not None:
        for rank, why in enumerate(explained, start=1):
            _print_explanation(state, rank, why)


def _print_explanation(state: CliState, rank: int, why: Explanation) -> None:
    out = state.out
    out.print(Text(f"\n{rank}. {safe_text(why.tool_id)}  score {why.score:.4f}", style="bold"))
    out.print(Text(f"   score = {why.formula}", style="dim"), soft_wrap=True)
    if why.lexical_score is not None:
        found = ", ".join(f"{safe_text(term)} {share:.2f}" for term, share in why.terms)
        out.print(
            Text(f"   BM25 {why.lexical_score:.3f}: {found or 'no term of the request'}"),
            soft_wrap=True,
        )
    if why.semantic_score is not None:
        out.print(Text(f"   similarity {why.semantic_score:.3f}"))
    if why.example is not None and why.example_similarity is not None:
        out.print(
            Text(
                f"   closest example {safe_text(why.example)!r} "
                f"(similarity {why.example_similarity:.3f})"
            ),
            soft_wrap=True,
        )


def _load_path(gateway: Gateway, path: Path) -> None:
    """Load ``path``: a folder of tool folders, one tool folder, or a declaration source."""
    if not path.exists():
        raise CliUsageError(f"PATH: no such file or folder: {path}")
    if path.is_dir() and any(
        (child / name).is_file()
        for child in path.iterdir()
        if child.is_dir()
        for name in ("tool.md", "tool.json")
    ):
        gateway.add_tool_folder(path)
    elif path.is_dir() and any((path / name).is_file() for name in ("tool.md", "tool.json")):
        gateway.add_tool_folder(path.parent)
    else:
        gateway.add_source(path)


def check(
    ctx: typer.Context,
    path: Annotated[
        Path | None,
        typer.Argument(
            metavar="[PATH]",
            help="A folder of tool folders, a tool folder, or a declaration file or folder "
            "(capability, plugin, extension info, resources). Default: the configured tools.",
        ),
    ] = None,
    min_top1: Annotated[
        float,
        typer.Option("--min-top1", help="Fail below this share of examples ranked first."),
    ] = 0.9,
    min_top3: Annotated[
        float,
        typer.Option("--min-top3", help="Fail below this share of examples in the top 3."),
    ] = 1.0,
    mode: Annotated[str | None, typer.Option("--mode", help=_MODE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Run every tool's prompt examples through the search: per tool, how many rank it first
    and in the top 3, and which tools take its examples instead. Exit code 1 when the share
    ranked first is below --min-top1 or the share in the top 3 below --min-top3."""
    for name, value in (("--min-top1", min_top1), ("--min-top3", min_top3)):
        if not 0.0 <= value <= 1.0:
            raise CliUsageError(f"{name}: expected a share from 0 to 1, not {value}")
    chosen = _mode(mode)
    state = _state(ctx)
    gateway = (
        state.open_gateway(approver=None, audit="off")
        if path is None
        else Gateway(
            GatewaySettings(
                sources=SourceSettings(
                    semantic_search=None if chosen is None else chosen != "lexical"
                )
            )
        )
    )
    with gateway:
        if path is not None:
            _load_path(gateway, path.expanduser())
        try:
            report = check_examples(gateway.registry, gateway.search_index, mode=chosen)
        except RuntimeError as error:
            raise CliUsageError(f"--mode: {error}") from None
    passed = report.top1_rate >= min_top1 and report.top3_rate >= min_top3
    if as_json:
        print_json(
            {**report.as_json(), "min_top1": min_top1, "min_top3": min_top3, "passed": passed}
        )
    else:
        _print_report(state, report, min_top1, min_top3, passed)
    if not passed:
        raise typer.Exit(EXIT_BELOW_THRESHOLD)


def _print_report(
    state: CliState, report: ExamplesReport, min_top1: float, min_top3: float, passed: bool
) -> None:
    out = state.out
    if report.tools:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for header in ("Tool", "Examples", "Top 1", "Top 3", "Taken by"):
            table.add_column(header, overflow="fold")
        for tool in report.tools:
            bad = tool.top1 < tool.examples
            table.add_row(
                Text(safe_text(tool.tool_id), style="bold"),
                str(tool.examples),
                Text(f"{tool.top1}/{tool.examples}", style="yellow" if bad else "green"),
                f"{tool.top3}/{tool.examples}",
                ", ".join(f"{other} ({n})" for other, n in tool.confused_with.items()) or "-",
            )
        out.print(table)
        for tool in report.tools:
            for miss in tool.misses:
                where = "not in the top 10" if miss.rank is None else f"ranked {miss.rank}"
                out.print(
                    Text(
                        f"{tool.tool_id}: {safe_text(miss.example)!r} {where}; first: "
                        f"{miss.first or 'nothing'}"
                    ),
                    soft_wrap=True,
                )
    else:
        out.print("No tool declares prompt examples.")
    if report.without_examples:
        out.print(Text(f"{len(report.without_examples)} tools declare no examples.", style="dim"))
    verdict = "passed" if passed else "FAILED"
    out.print(
        Text(
            f"{report.examples} examples: {report.top1_rate:.1%} ranked first (min "
            f"{min_top1:.0%}), {report.top3_rate:.1%} in the top 3 (min {min_top3:.0%}): "
            f"{verdict}",
            style="green" if passed else "bold red",
        ),
        soft_wrap=True,
    )


examples_app.command("check", epilog=EXIT_CODES_HELP)(check)


def register(app: typer.Typer, tools_app: typer.Typer) -> None:
    """Add ``toolgate tools search`` and ``toolgate examples``."""
    tools_app.command("search", epilog=EXIT_CODES_HELP)(search)
    app.add_typer(examples_app, name="examples")
