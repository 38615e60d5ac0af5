"""`toolgate tools list` on a large catalog: past PLAIN_TABLE_ROWS tools the table is printed as
plain aligned columns (Rich measured every cell: about 6 s for 10,000 tools), with the same
rows, the same cells and the same lines after it as the Rich table."""

from __future__ import annotations

import io

from rich.console import Console

from toolgate import Gateway, tool
from toolgate.cli import catalog
from toolgate.cli.catalog import PLAIN_TABLE_ROWS, print_tool_table


def _gateway(count: int) -> Gateway:
    gateway = Gateway()

    def make(index: int) -> object:
        def handler(query: str) -> str:
            return query

        handler.__name__ = f"find_{index:04d}"
        handler.__doc__ = f"Find kind {index}."
        return tool(handler, namespace="big", effect="read_only")

    gateway.add([make(index) for index in range(count)])
    return gateway


def _printed(gateway: Gateway, *, plain_above: int) -> list[list[str]]:
    out = io.StringIO()
    console = Console(file=out, width=200, color_system=None)
    original = catalog.PLAIN_TABLE_ROWS
    catalog.PLAIN_TABLE_ROWS = plain_above
    try:
        statuses = {status.tool_id: status for status in gateway.statuses()}
        print_tool_table(gateway.entries(), console, statuses=statuses)
    finally:
        catalog.PLAIN_TABLE_ROWS = original
    return [line.split() for line in out.getvalue().splitlines() if line.strip()]


def test_a_large_catalog_prints_the_same_table_in_plain_columns() -> None:
    with _gateway(PLAIN_TABLE_ROWS + 1) as gateway:
        plain = _printed(gateway, plain_above=PLAIN_TABLE_ROWS)
        rich = _printed(gateway, plain_above=10**9)
    assert plain[0] == ["ID", "Title", "Side", "effect", "Approval", "Kind", "Source",
                        "Availability", "Phase"]  # fmt: skip
    # Every row and the count under the table, cell for cell; only the rule differs.
    assert [row for row in plain if not row[0].startswith("─")] == [
        row for row in rich if not row[0].startswith("─")
    ]
    assert plain[-1] == [str(PLAIN_TABLE_ROWS + 1), "tools"]
