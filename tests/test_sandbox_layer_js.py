"""The JavaScript host's outer layer under Landlock: where bubblewrap cannot start (here:
forced with ``sandbox.layer: landlock``), a compartment host without network permissions runs
inside the Landlock launcher, through ``Gateway.call_sync``."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway_support import gateway_with
from js_support import js_runtime, plugin_copy
from toolgate.formats.plugin.source import PluginSource
from toolgate.sandbox.landlock import MIN_ABI
from toolgate.sandbox.landlock_exec import abi_version
from toolgate.sandbox.runner import Sandbox
from toolgate.sandbox.settings import SandboxConfig

__all__ = ["js_runtime"]  # the fixture, used by name

PLUGIN = "@toolgate-test/probe"
pytestmark = [pytest.mark.usefixtures("js_runtime"), pytest.mark.slow]


def test_the_js_host_runs_inside_the_landlock_launcher(tmp_path: Path) -> None:
    if abi_version() < MIN_ABI:
        pytest.skip(f"this kernel's Landlock ABI is {abi_version()} (< {MIN_ABI})")
    pytest.importorskip("pyseccomp")
    data = tmp_path / "data"
    data.mkdir()
    (data / "note.txt").write_text("inside")
    (tmp_path / "sibling.txt").write_text("outside")
    folder = plugin_copy(tmp_path, "probe", permissions={"fs": [str(data)]})
    sandbox = Sandbox(SandboxConfig(layer="landlock"))
    with gateway_with(environ={}, sandbox=sandbox) as gateway:
        assert gateway.add_source(folder).diagnostics == []
        echo = gateway.call_sync(f"{PLUGIN}:echo", {"n": 1})
        read = gateway.call_sync(f"{PLUGIN}:read", {"path": str(data / "note.txt")})
        [source] = [s for s in gateway.declarations.sources if isinstance(s, PluginSource)]
        sibling = gateway.call_sync(f"{PLUGIN}:read", {"path": str(tmp_path / "sibling.txt")})
        pids = source.js_hosts.pids()
        assert len(pids) == 1  # one host per entry and permission set, as under bubblewrap
        # The process the gateway started is the launcher's supervisor; the host is its child.
        hosts = [
            int(child)
            for pid in pids
            for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
        seen = [
            (
                Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0],
                Path(f"/proc/{pid}/status").read_text(),
            )
            for pid in hosts
        ]
        assert len(seen) == 1
    assert echo.ok and read.ok, (echo.message, read.message)
    assert read.content == {"text": "inside"}
    assert not sibling.ok  # outside the declared prefix (the compartment refuses it first)
    assert echo.metadata["sandbox"]["process_sandbox"] == "landlock"
    # The supervisor's child became Node.js, with no_new_privs and a seccomp filter in force.
    for program, status in seen:
        assert program.endswith(b"node"), program
        assert "NoNewPrivs:\t1" in status
        assert "Seccomp:\t2" in status
