"""Starting a gateway does not read every tool folder a second time before it serves: the
folders were read when it was built, and what changed since is caught up in the background."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from folder_tools import clean_environ, write_tool
from gateway_support import gateway_with

ECHO = "cat >/dev/null; echo '{\"version\": %d}'"


async def until(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the gateway did not catch up in time")
        await asyncio.sleep(0.05)


async def test_what_changed_between_building_and_starting_is_caught_up(tmp_path: Path) -> None:
    root = tmp_path / "tools"
    write_tool(root, "kept", ECHO % 1)
    write_tool(root, "gone", ECHO % 2)
    gateway = gateway_with(tool_folders=[root], environ=clean_environ())
    try:
        assert gateway.tool_folders.scans == 1  # read once, when built
        write_tool(root, "added", ECHO % 3)
        write_tool(root, "kept", ECHO % 4, timeout=5000)
        shutil.rmtree(root / "gone")
        async with gateway:
            # Started without a second synchronous read; the catch-up follows in the background.
            await until(lambda: "local:added" in gateway.registry)
            await until(lambda: "local:gone" not in gateway.registry)
            assert gateway.get_tool("local:kept").timeout == 5.0
            assert (await gateway.call("local:added")).content == {"version": 3}
            assert (await gateway.call("local:kept")).content == {"version": 4}
    finally:
        gateway.close()


async def test_a_gateway_whose_folders_were_never_read_reads_them_on_start(
    tmp_path: Path,
) -> None:
    from toolgate.formats.tool_folder.source import FolderRoot, ToolFolderSource
    from toolgate.registry import Registry

    root = tmp_path / "tools"
    write_tool(root, "one", ECHO % 1)
    source = ToolFolderSource(Registry(), [FolderRoot(root)], availability=lambda _tool: None)
    assert source.scans == 0
    await source.start()
    try:
        assert source.scans == 1  # read before start returned
        assert "local:one" in source.registry
    finally:
        await source.stop()
