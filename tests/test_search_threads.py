"""Tools registered from many threads while others search (issue 29): the registry checks a
tool's id and adds it in one step, and the sorted listing the search index follows is never one
that misses a tool added meanwhile."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from toolgate import Tool
from toolgate.errors import DuplicateToolError
from toolgate.registry import RegisteredTool, Registry
from toolgate.search.index import ToolIndex


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    # Threads switch every microsecond instead of every 5 ms, so the interleavings that
    # break a check-then-act come up in a few hundred operations.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _entry(tool_id: str) -> RegisteredTool:
    return RegisteredTool(
        Tool(id=tool_id, description="Send payroll mail.", input_schema={}), binding=None
    )


def _together(count: int, work: Callable[[int], None]) -> None:
    start = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        start.wait()
        try:
            work(n)
        except BaseException as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_one_of_many_threads_adding_the_same_id_wins_and_the_others_are_refused() -> None:
    for _ in range(30):
        registry = Registry()
        won: list[int] = []
        refused: list[int] = []

        def add(
            n: int,
            registry: Registry = registry,
            won: list[int] = won,
            refused: list[int] = refused,
        ) -> None:
            try:
                registry.add(_entry("t:tool"))
                won.append(n)
            except DuplicateToolError:
                refused.append(n)

        _together(8, add)
        assert len(won) == 1 and len(refused) == 7
        assert registry.version == 1  # one change, not one per thread that got past the check


def test_tools_added_while_others_search_are_all_found() -> None:
    # A listing sorted from the tools before an add, and stored after the add had cleared it,
    # stayed the registry's listing: the index took it with the new version and never saw
    # the tool.
    for _ in range(5):
        registry = Registry()
        index = ToolIndex(registry, semantic=False)

        def work(n: int, registry: Registry = registry, index: ToolIndex = index) -> None:
            for i in range(40):
                if n % 2:
                    registry.add(_entry(f"w{n}:tool_{i}"))
                else:
                    index.search("payroll mail", limit=1)

        _together(6, work)
        assert len(list(registry)) == len(registry) == 3 * 40
        for n in (1, 3, 5):
            hits = index.search(f"w{n}", limit=100, mode="lexical")
            assert len(hits) == 40, f"the index misses tools of w{n}"
