"""Starting a gateway serves the tool folders as they are on disk at that moment, without reading
every folder a second time: folders whose fingerprint changed since the gateway was built are
read again before ``start`` returns, the others are not."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from folder_tools import clean_environ, write_tool
from gateway_support import gateway_with
from toolgate.errors import ErrorCode
from toolgate.formats.tool_folder import source as folder_source
from toolgate.formats.tool_folder.fingerprint import MAX_ENTRIES, fingerprint

ECHO = "cat >/dev/null; echo '{\"version\": %d}'"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the folders the tool-folder source reads, in order."""
    seen: list[str] = []
    real = folder_source.load_tool_folder

    def counting(folder: Path, **kwargs: object) -> object:
        seen.append(folder.name)
        return real(folder, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(folder_source, "load_tool_folder", counting)
    return seen


async def test_what_changed_between_building_and_starting_is_served_at_once(
    tmp_path: Path, reads: list[str]
) -> None:
    root = tmp_path / "tools"
    for name in ("kept", "gone", "tightened", "untouched"):
        write_tool(root, name, ECHO % 1)
    gateway = gateway_with(tool_folders=[root], environ=clean_environ())
    try:
        assert sorted(reads) == ["gone", "kept", "tightened", "untouched"]
        reads.clear()
        write_tool(root, "added", ECHO % 3)
        write_tool(root, "kept", ECHO % 4, timeout=5000)
        write_tool(root, "tightened", ECHO % 5, requireApproval=True)
        shutil.rmtree(root / "gone")
        async with gateway:
            # No waiting: the first call after start already sees the disk as it is.
            assert "local:gone" not in gateway.registry
            assert (await gateway.call("local:gone")).code == ErrorCode.TOOL_NOT_FOUND
            tightened = await gateway.call("local:tightened")
            assert tightened.code == ErrorCode.USER_REJECTION  # no approver here: denied
            assert gateway.get_tool("local:kept").timeout == 5.0
            assert (await gateway.call("local:added")).content == {"version": 3}
            assert (await gateway.call("local:kept")).content == {"version": 4}
            assert (await gateway.call("local:untouched")).content == {"version": 1}
        # Only the changed and new folders were read again.
        assert sorted(reads) == ["added", "kept", "tightened"]
    finally:
        gateway.close()


async def test_a_script_changed_in_place_is_read_again(tmp_path: Path, reads: list[str]) -> None:
    root = tmp_path / "tools"
    folder = write_tool(root, "echo", ECHO % 1)
    gateway = gateway_with(tool_folders=[root], environ=clean_environ())
    try:
        reads.clear()
        script = folder / "script.sh"
        stat = script.stat()
        script.write_text(ECHO % 2)
        # Even with its size and modification time put back, the change time moved.
        os.utime(script, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        async with gateway:
            assert (await gateway.call("local:echo")).content == {"version": 2}
        assert reads == ["echo"]
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


def test_a_fingerprint_changes_with_any_entry_and_is_refused_when_it_cannot_be_cheap(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "tool"
    (folder / "lib").mkdir(parents=True)
    (folder / "lib" / "helper.py").write_text("x = 1\n")
    first = fingerprint(folder)
    assert first is not None and fingerprint(folder) == first
    (folder / "lib" / "helper.py").write_text("x = 2\n")
    assert fingerprint(folder) != first
    second = fingerprint(folder)
    (folder / "lib" / "helper.py").chmod(0o700)
    assert fingerprint(folder) != second
    (folder / "dangling").symlink_to(tmp_path / "nowhere")
    assert fingerprint(folder) is None  # a broken link: read the folder again
    (folder / "dangling").unlink()
    for index in range(MAX_ENTRIES):
        (folder / f"file{index}").write_text("")
    assert fingerprint(folder) is None  # too large to be worth walking twice
    assert fingerprint(tmp_path / "missing") is None
