"""Attacks through the folders a user's programs load code from (issue 22, second review): a
writable workspace in a home's dot-folder (``~/.local/lib/pythonX.Y/site-packages``,
``~/.node_modules``, ``~/.cache``), a runtime's user folder (``~/go``), a ``node_modules``
folder, a workspace that lines up with the sandbox's ``HOME`` (``/tmp/.local`` when it was
``/tmp``) and a workspace whose links cannot be followed (``/proc/1/root/...``).

Every attack goes through ``toolgate call --workspace``, with ``HOME`` a folder of the test (the
gateway user's home as the gateway sees it), and each test checks the gateway keeps serving.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import RunCli
from folder_tools import require_program, write_tool
from toolgate.path_policy import PathPolicy, prefix_problem, workspace_problem
from toolgate.sandbox.host import probe_host
from toolgate.sandbox.runner import SANDBOX_HOME

pytestmark = pytest.mark.slow

#: Writes ``evil.pth`` into ``<workspace>/<sub>``: a ``.pth`` in a site folder runs at start.
PLANTER = """\
import json, os, sys
data = json.load(sys.stdin)
folder = os.path.join(data["workspacePath"], data.get("sub", ""))
try:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "evil.pth"), "w") as handle:
        handle.write("import os; os.environ['PLANTED'] = 'yes'\\n")
    print(json.dumps({"wrote": folder}))
except OSError as exc:
    print(json.dumps({"failed": str(exc)}))
"""

#: What a victim sees: whether a planted .pth ran, its HOME and its interpreter.
VICTIM = """\
import json, os, sys
print(json.dumps({
    "planted": os.environ.get("PLANTED"),
    "home": os.environ.get("HOME"),
    "executable": sys.executable,
    "version": "%d.%d" % sys.version_info[:2],
}))
"""

SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


@pytest.fixture(autouse=True)
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HOME`` of the gateway (the CLI's environment): a folder of the test, never /root.
    ``/usr/bin`` first on ``PATH``: tools run the system's python, whose user site is on."""
    home = tmp_path / "userhome"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    monkeypatch.delenv("GOPATH", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:" + os.environ.get("PATH", ""))
    return home


def _sandbox_works() -> None:
    require_program("bwrap")
    host = probe_host()
    if not host.works:
        pytest.skip(f"bubblewrap cannot sandbox here: {host.problem}")
    if host.process_limit is None:
        pytest.skip("this host cannot limit a sandbox's processes (root without a pids cgroup)")


def _project(project: Path) -> None:
    tools = project / "tools"
    write_tool(tools, "planter", PLANTER, runtime="python", sandbox="compartment")
    write_tool(tools, "victim", VICTIM, runtime="python", sandbox="compartment")
    write_tool(tools, "hostvictim", VICTIM, runtime="python", sandbox="host")
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n", encoding="utf-8"
    )


def _call(cli: RunCli, tool: str, workspace: Path | None, **arguments: Any) -> dict[str, Any]:
    args = ["call", tool, "--json", "-a", json.dumps(arguments)]
    if workspace is not None:
        args += ["--workspace", str(workspace)]
    done = cli(*args)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stdout, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout)
    return outcome


def _refused(outcome: dict[str, Any], says: str) -> None:
    assert outcome["status"] == "error", outcome
    assert outcome["code"] == "forbidden", outcome
    assert says in outcome["message"], outcome


def _still_serves(cli: RunCli, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    done = _call(cli, "t:planter", work, sub="x")
    assert done["status"] == "ok", done
    assert done["content"] == {"wrote": str(work / "x")}


def test_the_user_site_folder_is_not_a_writable_workspace_and_host_python_ignores_it(
    project: Path, run_cli: RunCli, fake_home: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    site = fake_home / ".local" / SITE
    site.mkdir(parents=True)
    for workspace in (site, fake_home / ".local"):
        _refused(_call(run_cli, "t:planter", workspace), "dot-folder of a home")
    assert not (site / "evil.pth").exists()
    _still_serves(run_cli, tmp_path)
    # Planted by hand (another way in): a host-mode python tool does not load it.
    done = _call(run_cli, "t:hostvictim", None)
    assert done["status"] == "ok", done
    version = done["content"]["version"]
    user_site = fake_home / ".local" / f"lib/python{version}/site-packages"
    user_site.mkdir(parents=True, exist_ok=True)
    (user_site / "evil.pth").write_text("import os; os.environ['PLANTED'] = 'yes'\n")
    control = subprocess.run(
        [done["content"]["executable"], "-c", "import os; print(os.environ.get('PLANTED'))"],
        env={"HOME": str(fake_home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    if control.stdout.strip() != "yes":
        pytest.skip("this python loads no user site folder even without PYTHONNOUSERSITE")
    done = _call(run_cli, "t:hostvictim", None)
    assert done["status"] == "ok", done
    assert done["content"]["planted"] is None, done
    _still_serves(run_cli, tmp_path)


@pytest.mark.parametrize(
    ("where", "says"),
    [
        (".node_modules", "dot-folder of a home"),
        (".node_libraries", "dot-folder of a home"),
        (".cache", "dot-folder of a home"),
        (".cache/go-build", "dot-folder of a home"),
        (".bun/install", "dot-folder of a home"),
        (".npm", "dot-folder of a home"),
        ("go", "a runtime's user code folder"),
        ("go/src/evil", "a runtime's user code folder"),
    ],
)
def test_a_runtimes_user_folder_in_the_home_is_not_a_writable_workspace(
    project: Path, run_cli: RunCli, fake_home: Path, tmp_path: Path, where: str, says: str
) -> None:
    _sandbox_works()
    _project(project)
    workspace = fake_home / where
    workspace.mkdir(parents=True)
    _refused(_call(run_cli, "t:planter", workspace), says)
    assert list(workspace.iterdir()) == []
    _still_serves(run_cli, tmp_path)


def test_a_node_modules_folder_is_not_a_writable_workspace(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    for workspace in (tmp_path / "app" / "node_modules", tmp_path / "app" / "node_modules" / "x"):
        workspace.mkdir(parents=True, exist_ok=True)
        _refused(_call(run_cli, "t:planter", workspace), "node_modules folder")
    assert not (tmp_path / "app" / "node_modules" / "evil.pth").exists()
    _still_serves(run_cli, tmp_path)


@pytest.fixture
def tmp_dot_local() -> Iterator[Path]:
    """``<temporary folder>/.local``: ``$HOME/.local`` of a sandbox whose HOME was /tmp."""
    folder = Path(tempfile.gettempdir()) / ".local"
    try:
        folder.mkdir()
    except FileExistsError:
        pytest.skip(f"{folder} exists already (not this test's to use)")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_workspace_at_tmp_dot_local_is_not_the_sandboxs_user_base(
    project: Path, run_cli: RunCli, tmp_dot_local: Path, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    done = _call(run_cli, "t:victim", tmp_dot_local)
    assert done["status"] == "ok", done
    version = done["content"]["version"]
    planted = _call(run_cli, "t:planter", tmp_dot_local, sub=f"lib/python{version}/site-packages")
    assert planted["status"] == "ok", planted  # an ordinary folder: the tool may write there
    # The victim, called with the same workspace, does not load what was planted.
    done = _call(run_cli, "t:victim", tmp_dot_local)
    assert done["status"] == "ok", done
    assert done["content"]["home"] == SANDBOX_HOME != str(tmp_dot_local.parent)
    assert done["content"]["planted"] is None, done
    _still_serves(run_cli, tmp_path)


def test_the_sandboxs_home_is_its_own_writable_tmpfs(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    _sandbox_works()
    script = (
        "import json, os\n"
        "home = os.environ['HOME']\n"
        "open(os.path.join(home, 'f'), 'w').write('x')\n"
        "print(json.dumps({'home': home, 'entries': sorted(os.listdir(home)),"
        " 'run': sorted(os.listdir('/run'))}))\n"
    )
    write_tool(project / "tools", "homer", script, runtime="python", sandbox="compartment")
    (project / "toolgate.yaml").write_text(
        "tool_folders:\n  - path: tools\n    namespace: t\n", encoding="utf-8"
    )
    work = tmp_path / "work"
    work.mkdir()
    for _ in range(2):  # a fresh, empty home in every call
        done = _call(run_cli, "t:homer", work)
        assert done["status"] == "ok", done
        assert done["content"] == {"home": SANDBOX_HOME, "entries": ["f"], "run": ["toolgate-home"]}


def test_a_workspace_whose_links_cannot_be_followed_is_refused_cleanly(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    link = tmp_path / "elsewhere"
    link.symlink_to("/proc/1/root/tmp")  # only its real path leads into /proc
    for workspace in (Path("/proc/1/root/tmp"), Path("/proc/self/root/tmp"), link):
        outcome = _call(run_cli, "t:planter", workspace)
        assert outcome["status"] == "error", outcome
        assert outcome["code"] == "forbidden", outcome
    _still_serves(run_cli, tmp_path)


def test_a_link_loop_as_workspace_is_refused_cleanly(
    project: Path, run_cli: RunCli, tmp_path: Path
) -> None:
    _sandbox_works()
    _project(project)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    outcome = _call(run_cli, "t:planter", loop / "x")
    assert outcome["status"] == "error", outcome
    _still_serves(run_cli, tmp_path)


def test_a_path_that_cannot_be_resolved_is_a_problem_not_an_exception(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # What realpath meets under /proc/<pid>/root of another process as a non-root user.
    def denied(path: Any, *args: Any, **kwargs: Any) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    work = tmp_path / "work"
    monkeypatch.setattr(os.path, "realpath", denied)
    problem = workspace_problem(work, PathPolicy(home=tmp_path / "userhome"))
    assert problem is not None
    assert "cannot be resolved: Permission denied" in problem
    assert prefix_problem(str(work)) is not None


def test_dot_folders_of_a_home_are_refused_as_fs_prefixes_and_writable_workspaces(
    fake_home: Path,
) -> None:
    policy = PathPolicy(home=fake_home)
    for inside in (".local/lib", ".node_modules", ".cache/go-build", ".bun", "go/pkg"):
        path = fake_home / inside
        assert prefix_problem(str(path), policy) is not None, inside
        assert workspace_problem(path, policy) is not None, inside
        # Read-only, the tool only reads what is there (credential folders stay refused).
        assert workspace_problem(path, policy, writable=False) is None, inside
    assert workspace_problem(fake_home / ".ssh", policy, writable=False) is not None
    assert workspace_problem(Path("/srv/app/node_modules/x"), policy) is not None
    assert prefix_problem("/srv/app/node_modules/x", policy) is None  # read-only: no planting
    assert workspace_problem(fake_home / "projects" / "x", policy) is None
    assert workspace_problem(fake_home / "projects" / ".venv", policy) is None  # not in the home
