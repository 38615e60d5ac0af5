"""Tool folders change while the gateway runs: add, change, break, delete — no restart."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from folder_tools import clean_environ, write_tool
from gateway_support import gateway_with
from toolgate import ErrorCode, tool

ECHO = "cat >/dev/null; echo '{\"version\": %d}'"


async def until(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    """Wait until ``condition()`` holds (the watcher works in the background)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the gateway did not pick up the change in time")
        await asyncio.sleep(0.05)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    return folder


@pytest.mark.slow
async def test_add_change_break_and_delete_are_picked_up_while_serving(root: Path) -> None:
    write_tool(root, "stable", ECHO % 0)
    async with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        assert (await gateway.call("local:stable")).content == {"version": 0}

        # add
        write_tool(root, "fresh", ECHO % 1)
        await until(lambda: "local:fresh" in gateway.registry)
        assert (await gateway.call("local:fresh")).content == {"version": 1}

        # change (the declaration and the script)
        write_tool(root, "fresh", ECHO % 2, timeout=5000)
        await until(lambda: gateway.get_tool("local:fresh").timeout == 5.0)
        assert (await gateway.call("local:fresh")).content == {"version": 2}

        # break: the tool goes away, the diagnostic stays visible, the others keep working
        (root / "fresh" / "tool.md").write_text("---\nname: [unclosed\n---\n", encoding="utf-8")
        await until(lambda: "local:fresh" not in gateway.registry)
        assert any("fresh" in d.path and "tool.md" in d.path for d in gateway.diagnostics())
        assert (await gateway.call("local:fresh")).code is ErrorCode.TOOL_NOT_FOUND
        assert (await gateway.call("local:stable")).content == {"version": 0}

        # mend it
        write_tool(root, "fresh", ECHO % 3)
        await until(lambda: "local:fresh" in gateway.registry)
        assert gateway.diagnostics() == []

        # delete
        shutil.rmtree(root / "fresh")
        await until(lambda: "local:fresh" not in gateway.registry)
        assert [t.id for t in gateway.list_tools()] == ["local:stable"]


async def test_the_periodic_rescan_catches_what_the_watcher_missed(root: Path) -> None:
    async with gateway_with(
        tool_folders=[root], environ=clean_environ(), rescan_interval=0.2
    ) as gateway:
        scans = gateway.tool_folders.scans
        await until(lambda: gateway.tool_folders.scans >= scans + 2)


def test_a_broken_folder_never_stops_the_others_from_loading(root: Path) -> None:
    write_tool(root, "good", ECHO % 1)
    bad = root / "bad"
    bad.mkdir()
    (bad / "tool.md").write_text("no front matter here", encoding="utf-8")
    hostile = root / "hostile"
    hostile.mkdir()
    laughs = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
    )
    (hostile / "tool.md").write_text(f"---\n{laughs}---\nboom\n", encoding="utf-8")
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        assert [t.id for t in gateway.list_tools()] == ["local:good"]
        paths = {Path(d.path).parent.name for d in gateway.diagnostics()}
        assert {"bad", "hostile"} <= paths


def test_two_folders_declaring_one_name(root: Path) -> None:
    write_tool(root, "a-folder", ECHO % 1, declared_name="same")
    write_tool(root, "b-folder", ECHO % 2, declared_name="same")
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        assert gateway.call_sync("local:same").content == {"version": 1}
        messages = [str(d) for d in gateway.diagnostics()]
        assert any("b-folder" in m and "already declared" in m for m in messages)


def test_a_python_tool_keeps_its_id_when_a_folder_claims_it(root: Path) -> None:
    @tool(id="local:shared")
    def shared() -> str:
        """Python wins: it was registered first."""
        return "python"

    write_tool(root, "shared", ECHO % 9, declared_name="shared")
    write_tool(root, "other", ECHO % 1)
    with gateway_with(environ=clean_environ()) as gateway:
        gateway.add(shared)
        report = gateway.add_tool_folder(root)
        assert report.added == ["local:other"]
        assert gateway.call_sync("local:shared").content == "python"
        assert any("already registered" in str(d) for d in gateway.diagnostics())


async def test_a_newcomer_cannot_take_over_a_running_tool(root: Path) -> None:
    write_tool(root, "zz-deploy", ECHO % 1, declared_name="deploy")
    async with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        assert (await gateway.call("local:deploy")).content == {"version": 1}
        write_tool(root, "aa-newcomer", ECHO % 666, declared_name="deploy")
        await until(lambda: any("aa-newcomer" in d.path for d in gateway.diagnostics()))
        assert (await gateway.call("local:deploy")).content == {"version": 1}
        [problem] = [d for d in gateway.diagnostics() if "aa-newcomer" in d.path]
        assert "already declared by the folder" in problem.message
        assert "zz-deploy" in problem.message


def test_a_folder_that_cannot_be_read_does_not_stop_the_others(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolgate.formats.tool_folder import source as tool_folders

    write_tool(root, "good", ECHO % 1)
    write_tool(root, "locked", ECHO % 2)
    real = tool_folders.load_tool_folder

    def load(folder: Path, **kwargs: object) -> object:
        if folder.name == "locked":
            raise PermissionError(13, "Permission denied", str(folder / "tool.md"))
        return real(folder, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tool_folders, "load_tool_folder", load)
    with gateway_with(tool_folders=[root], environ=clean_environ()) as gateway:
        assert [t.id for t in gateway.list_tools()] == ["local:good"]
        [problem] = gateway.diagnostics()
        assert "locked" in problem.path and "Permission denied" in problem.message
