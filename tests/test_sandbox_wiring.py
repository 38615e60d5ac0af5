"""The process sandbox through the public surfaces: toolgate.yaml, tool folders and the CLI.

Every call goes through the installed ``toolgate`` console script with a real toolgate.yaml, so
what is tested is what a user gets: a folder tool that declares ``sandbox: compartment`` (or that
the operator's ``sandbox.default`` puts in a compartment) runs under bubblewrap.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from folder_tools import require_program
from toolgate.config.build import config_sandbox
from toolgate.config.files import load_config
from toolgate.formats.tool_folder.parse import load_tool_folder
from toolgate.model import SandboxMode
from toolgate.sandbox.host import probe_host

pytestmark = pytest.mark.slow

#: Reads a file and says whether it could (no "error" key: that would make it a tool error).
PEEK = """\
import json, sys
data = json.load(sys.stdin)
try:
    with open(data["path"]) as handle:
        print(json.dumps({"read": True, "text": handle.read()}))
except OSError as exc:
    print(json.dumps({"read": False, "why": str(exc)}))
"""


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host("bwrap")
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")


def _tool(root: Path, name: str, declaration: str = "") -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "peek.py").write_text(PEEK)
    (folder / "inside.txt").write_text("from the tool folder\n")
    (folder / "tool.md").write_text(
        f"---\nname: {name}\nscript: peek.py\nruntime: python\n{declaration}"
        "inputSchema:\n  type: object\n  properties:\n    path: {type: string}\n"
        "---\nRead a file.\n"
    )
    return folder


def _config(project: Path, extra: str = "") -> None:
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n" + textwrap.dedent(extra)
    )


def _call(
    run_cli: RunCli, tool: str, path: Path, project: Path, workspace: Path | None = None
) -> dict[str, Any]:
    """Call ``tool`` from ``project`` with a workspace next to it: these tools may write (the
    default of a tool folder), and a writable workspace holding the gateway's toolgate.yaml or
    tool folders is refused (see test_attack_paths.py)."""
    if workspace is None:
        workspace = project.parent / "workspace"
        workspace.mkdir(exist_ok=True)
    done = run_cli(
        "call", tool, "--json", "-a", json.dumps({"path": str(path)}), "--workspace", str(workspace)
    )
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file the host can read, outside the project, the workspace and the tool folder."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    secret = folder / "secret.txt"
    secret.write_text("host only\n")
    assert secret.read_text() == "host only\n"
    return secret


def test_a_folder_tool_declaring_compartment_runs_under_bwrap(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    _sandbox_works()
    folder = _tool(project / "tools", "peek", "sandbox: compartment\n")
    _config(project)

    denied = _call(run_cli, "t:peek", outside, project)
    assert denied["status"] == "ok", denied
    assert denied["content"]["read"] is False
    assert "No such file" in denied["content"]["why"]
    assert denied["metadata"]["sandbox"]["enforced"] is True
    assert denied["metadata"]["sandbox"]["mode"] == "compartment"

    # The gateway's own configuration is not visible.
    config = _call(run_cli, "t:peek", project / "toolgate.yaml", project)
    assert config["content"]["read"] is False or config["content"]["text"] == ""
    # Nor may the tool (which may write) have the project holding it and the tools as workspace.
    refused = _call(run_cli, "t:peek", outside, project, workspace=project)
    assert refused["code"] == "forbidden", refused
    assert "one of the gateway's own folders" in refused["message"]

    # The next call works normally: its own folder is readable.
    allowed = _call(run_cli, "t:peek", folder / "inside.txt", project)
    assert allowed["content"] == {"read": True, "text": "from the tool folder\n"}


def test_an_undeclared_folder_tool_stays_on_the_host(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    _tool(project / "tools", "peek")
    _config(project)
    outcome = _call(run_cli, "t:peek", outside, project)
    assert outcome["content"] == {"read": True, "text": "host only\n"}
    assert "sandbox" not in outcome.get("metadata", {})


def test_the_operator_default_puts_undeclared_folder_tools_in_a_compartment(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    _sandbox_works()
    _tool(project / "tools", "peek")
    _tool(project / "tools", "legacy", "sandbox: host\n")
    _config(
        project,
        """
        sandbox:
          default:
            tool-folder: compartment
        """,
    )
    outcome = _call(run_cli, "t:peek", outside, project)
    assert outcome["content"]["read"] is False
    assert outcome["metadata"]["sandbox"]["enforced"] is True

    # A declared 'host' does not take a tool out of the operator's format default (only
    # sandbox.namespaces can), so both tools are sandboxed.
    legacy = _call(run_cli, "t:legacy", outside, project)
    assert legacy["content"]["read"] is False


def test_a_bwrap_that_is_missing_makes_compartment_tools_unavailable(
    run_cli: RunCli, project: Path, outside: Path, tmp_path: Path
) -> None:
    _tool(project / "tools", "peek", "sandbox: compartment\n")
    _tool(project / "tools", "plain")
    _config(project, f"sandbox:\n  bwrap_path: {tmp_path / 'no-such-bwrap'}\n  layer: bubblewrap\n")

    done = run_cli("call", "t:peek", "--json", "-a", json.dumps({"path": str(outside)}))
    assert done.returncode != 0
    outcome = json.loads(done.stdout)
    assert outcome["status"] == "error"
    assert outcome["code"] == "unavailable"
    assert "bubblewrap was not found" in outcome["message"]
    assert "unsandboxed_host" in outcome["message"]

    listed = json.loads(run_cli("tools", "list", "--json").stdout)
    by_id = {item["id"]: item for item in listed}
    assert by_id["t:peek"]["available"] is False
    # A host-mode tool is not affected.
    assert by_id["t:plain"]["available"] is True
    assert _call(run_cli, "t:plain", outside, project)["content"]["read"] is True

    shown = json.loads(run_cli("tools", "show", "t:peek", "--json").stdout)
    assert shown["sandbox"] == {"mode": "compartment", "enforced": {"sandbox": "none"}}

    check = run_cli("sandbox", "check", "--json")
    assert check.returncode == 1
    assert json.loads(check.stdout)["compartment_tools"] == "are unavailable"


def test_an_unsandboxed_host_runs_compartment_tools_labelled(
    run_cli: RunCli, project: Path, outside: Path, tmp_path: Path
) -> None:
    _tool(project / "tools", "peek", "sandbox: compartment\n")
    _config(
        project,
        f"sandbox:\n  bwrap_path: {tmp_path / 'no-such-bwrap'}\n  layer: bubblewrap\n"
        "  unsandboxed_host: true\n",
    )
    outcome = _call(run_cli, "t:peek", outside, project)
    assert outcome["status"] == "ok"
    assert outcome["content"]["read"] is True
    assert outcome["metadata"]["sandbox"] == {
        "mode": "compartment",
        "enforced": False,
        "label": "unsandboxed-host",
    }
    shown = json.loads(run_cli("tools", "show", "t:peek", "--json").stdout)
    assert shown["sandbox"]["enforced"] == {"sandbox": "unsandboxed-host"}


def test_tools_show_says_what_is_enforced(run_cli: RunCli, project: Path) -> None:
    _sandbox_works()
    _tool(
        project / "tools",
        "peek",
        "sandbox: compartment\npermissions:\n  env: [API_TOKEN]\n  fs: [data]\n"
        "  network: [api.example.com]\n",
    )
    _tool(project / "tools", "plain")
    _config(project)

    shown = json.loads(run_cli("tools", "show", "t:peek", "--json").stdout)
    enforced = shown["sandbox"]["enforced"]
    assert shown["sandbox"]["mode"] == "compartment"
    assert enforced["sandbox"] == "compartment (bubblewrap)"
    assert enforced["network"] == "only via egress proxy to: api.example.com"
    assert enforced["environment"] == "declared keys only: API_TOKEN"
    data = project / "tools" / "peek" / "data"
    assert f"read-only: {data}" in enforced["filesystem"]
    assert "memory" in enforced

    text = run_cli("tools", "show", "t:peek").stdout
    assert "Sandbox" in text and "compartment (bubblewrap)" in text
    assert "api.example.com" in text

    host = json.loads(run_cli("tools", "show", "t:plain", "--json").stdout)
    assert host["sandbox"]["mode"] == "host"
    assert host["sandbox"]["enforced"]["sandbox"].startswith("host: no isolation")


def test_sandbox_check_is_a_command(run_cli: RunCli, project: Path) -> None:
    _sandbox_works()
    done = run_cli("sandbox", "check", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["compartment_tools"] == "run sandboxed"


def test_a_bad_sandbox_section_names_the_key(run_cli: RunCli, project: Path) -> None:
    _config(project, "sandbox:\n  default:\n    tool-folder: jail\n")
    done = run_cli("tools", "list")
    assert done.returncode != 0
    assert "sandbox" in done.stderr and "tool-folder" in done.stderr


def test_the_loader_reads_sandbox_and_permissions(tmp_path: Path) -> None:
    folder = _tool(
        tmp_path,
        "peek",
        "sandbox: compartment\nenv: [A]\npermissions:\n  env: [B, A]\n  fs: [data, /srv]\n"
        "  network: [API.Example.com.]\n  time: true\n",
    )
    loaded = load_tool_folder(folder)
    assert loaded.ok, loaded.diagnostics
    assert loaded.tool is not None
    spec = loaded.tool.sandbox
    assert spec.mode is SandboxMode.COMPARTMENT
    assert spec.permissions.network == ("api.example.com",)
    assert spec.permissions.fs == (str(folder.resolve() / "data"), "/srv")
    assert spec.permissions.time is True
    # A key granted by permissions.env is declared like those of env.
    assert loaded.tool.env == ("A", "B")

    default = load_tool_folder(_tool(tmp_path, "plain"))
    assert default.tool is not None and default.tool.sandbox.mode is SandboxMode.HOST


@pytest.mark.parametrize(
    ("declaration", "field", "says"),
    [
        ("sandbox: jail\n", "sandbox", "'compartment' or 'host'"),
        ("sandbox: compartment\npermissions: [fs]\n", "permissions", "must be an object"),
        ("permissions:\n  network: ['*']\n", "permissions/network/0", "not a valid host"),
    ],
)
def test_a_bad_sandbox_declaration_is_a_diagnostic(
    tmp_path: Path, declaration: str, field: str, says: str
) -> None:
    loaded = load_tool_folder(_tool(tmp_path, "peek", declaration))
    assert not loaded.ok
    assert any(d.field == field and says in d.message for d in loaded.errors), loaded.errors


def test_the_operator_namespace_setting_wins_over_the_declaration(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    _sandbox_works()
    _tool(project / "tools", "peek", "sandbox: compartment\n")
    _tool(project / "legacy", "old", "sandbox: compartment\n")
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        "  - path: legacy\n    namespace: legacy\n"
        "sandbox:\n  namespaces:\n    legacy: host\n"
    )
    assert _call(run_cli, "t:peek", outside, project)["content"]["read"] is False
    old = _call(run_cli, "legacy:old", outside, project)
    assert old["content"] == {"read": True, "text": "host only\n"}
    assert "sandbox" not in old.get("metadata", {})


def test_the_configured_sandbox_protects_the_gateway_state(tmp_path: Path) -> None:
    project = tmp_path / "p"
    project.mkdir()
    (project / "toolgate.yaml").write_text(
        "serve: {port: 8123}\naudit: {jsonl: audit.jsonl}\n"
        "sandbox:\n  network_grants: {api:x: [10.0.0.0/8]}\n"
    )
    home = tmp_path / "home"
    sandbox = config_sandbox(load_config(project / "toolgate.yaml"), home, serve_ports=[9001, 0])
    assert set(sandbox.protected) >= {
        home / ".env",
        home / "secrets",
        home / "toolgate.db",
        home / "toolgate.db-wal",
        home / "audit.db-shm",
        project / "toolgate.yaml",
        project / "audit.jsonl",
    }
    assert sandbox.deny_ports == (8123, 9001)
    assert sandbox.cidr_grants == {"api:x": ("10.0.0.0/8",)}


#: A security check that allows the call only when it cannot read the file it is given: run on the
#: host it would read it (and deny); in the tool's compartment it cannot (and allows).
CHECK_CANNOT_READ = """\
import json, sys
data = json.load(sys.stdin)
try:
    open(data["args"]["path"]).read()
    print(json.dumps({"allowed": False, "message": "the check could read " + data["args"]["path"]}))
except OSError:
    print(json.dumps({"allowed": True}))
"""


def test_a_compartment_tools_security_script_runs_in_its_sandbox(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    _sandbox_works()
    folder = _tool(
        project / "tools",
        "checked",
        "sandbox: compartment\nhasSecurityCheck: true\nsecurityScript: check.py\n",
    )
    (folder / "check.py").write_text(CHECK_CANNOT_READ)
    _config(project)
    outcome = _call(run_cli, "t:checked", outside, project)
    assert outcome["status"] == "ok", outcome  # the check ran sandboxed, so it allowed the call
    assert outcome["content"]["read"] is False


def test_a_host_tools_security_script_runs_on_the_host(
    run_cli: RunCli, project: Path, outside: Path
) -> None:
    folder = _tool(
        project / "tools", "checked", "hasSecurityCheck: true\nsecurityScript: check.py\n"
    )
    (folder / "check.py").write_text(CHECK_CANNOT_READ)
    _config(project)
    outcome = _call(run_cli, "t:checked", outside, project)
    assert outcome["status"] == "error", outcome
    assert "the check could read" in outcome["message"]
