"""``toolgate connect`` / ``disconnect`` / ``connections`` and the capability tools on the command
line: every command is its own process, secrets are typed at a real terminal (pexpect) or piped,
and are checked to appear nowhere but in the secret store."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from doc_blocks import doc_block

pytestmark = pytest.mark.slow

TOOLGATE = Path(sys.executable).parent / "toolgate"
FIXTURES = Path(__file__).parent / "fixtures" / "capabilities"
SECRET = "secret_typed_at_the_terminal_9f3k"
CONFIG = """\
sources:
  - path: ./extensions/notion/manifest.yaml
  - path: ./extensions/github/manifest.json
    format: capability
"""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose toolgate.yaml lists the Notion and GitHub capability manifests."""
    folder = tmp_path / "project"
    for name in ("notion", "github"):
        shutil.copytree(FIXTURES / name, folder / "extensions" / name)
    (folder / "toolgate.yaml").write_text(CONFIG, encoding="utf-8")
    return folder


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder


@pytest.fixture
def env(home: Path) -> dict[str, str]:
    values = {
        **os.environ,
        "TOOLGATE_HOME": str(home),
        "TOOLGATE_SECRET_STORE": "file",  # never the keyring of the machine running the tests
        "PYTHONIOENCODING": "utf-8",
    }
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "PYTHON_KEYRING_BACKEND"):
        values.pop(name, None)
    return values


def run(
    project: Path, env: dict[str, str], *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``toolgate ARGS`` with standard input a pipe (never a terminal)."""
    return subprocess.run(
        [str(TOOLGATE), *args],
        cwd=project,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def spawn(project: Path, env: dict[str, str], *args: str) -> Any:
    pexpect = pytest.importorskip("pexpect")
    return pexpect.spawn(
        str(TOOLGATE),
        list(args),
        cwd=str(project),
        env={**env, "TERM": "dumb"},
        encoding="utf-8",
        dimensions=(50, 160),
        timeout=60,
    )


def finish(child: Any) -> tuple[int, str]:
    import pexpect

    child.expect(pexpect.EOF)
    out: str = child.before
    child.close()
    return child.exitstatus, out


def all_bytes(*folders: Path) -> bytes:
    """Every file under the folders, concatenated (to search for a leaked secret)."""
    return b"".join(
        path.read_bytes() for folder in folders for path in folder.rglob("*") if path.is_file()
    )


def search(project: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(project, env, "call", "notion:searchPages", "--args", '{"query": "plans"}')


# --- the terminal -------------------------------------------------------------------------------


def test_connect_at_a_terminal_makes_the_tools_available(
    project: Path, home: Path, env: dict[str, str]
) -> None:
    before = search(project, env)
    assert before.returncode == 1
    assert "error [unavailable]" in before.stderr
    assert "Ask the user to connect Notion in Settings (toolgate connect notion)" in before.stderr

    child = spawn(project, env, "connect", "notion")
    child.expect(r"Connecting Notion \(notion\)")
    child.expect(r"accessToken \(secret, input hidden\): ")
    child.sendline(SECRET)
    child.expect(r"apiBaseUrl \(setting; Enter leaves it unset\): ")
    typed: str = child.before  # what the terminal showed after the secret was typed
    child.sendline("https://notion.example/v1")
    status, out = finish(child)
    assert status == 0, out
    assert SECRET not in typed + out  # hidden input: never echoed
    assert "connected: Notion (notion); tools available: notion:searchPages, notion:getPage" in out
    assert "Secrets are stored in the file" in out and "TOOLGATE_SECRET_STORE=file" in out

    after = search(project, env)
    content = json.loads(ok(after))
    assert content["token_sha256"] == sha(SECRET)
    assert content["api_base_url"] == "https://notion.example/v1"
    assert SECRET not in after.stdout + after.stderr

    listed = ok(run(project, env, "connections"))
    assert "notion" in listed and "not connected" in listed  # github still is not
    [notion_row] = [line for line in listed.splitlines() if line.strip().startswith("notion")]
    assert "connected" in notion_row and "not connected" not in notion_row
    assert "apiBaseUrl=https://notion.example/v1" in notion_row

    secrets = home / "secrets" / "secrets.json"
    assert SECRET in secrets.read_text()
    if os.name == "posix":
        assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
        assert stat.S_IMODE(secrets.parent.stat().st_mode) == 0o700
    audit = list(home.glob("audit.db*"))
    assert audit, "the calls were audited"
    assert SECRET.encode() not in all_bytes(project) + b"".join(p.read_bytes() for p in audit)


def test_reconnecting_keeps_values_on_enter_and_insists_on_a_missing_secret(
    project: Path, env: dict[str, str]
) -> None:
    child = spawn(project, env, "connect", "notion")
    child.expect(r"accessToken \(secret, input hidden\): ")
    child.sendline("")
    child.expect("accessToken is required to connect Notion.")
    child.expect(r"accessToken \(secret, input hidden\): ")
    child.sendline(SECRET)
    child.expect("apiBaseUrl")
    child.sendline("https://first.example")
    assert finish(child)[0] == 0

    again = spawn(project, env, "connect", "notion")
    again.expect(r"accessToken \(secret, input hidden; Enter keeps the current value\): ")
    again.sendline("")
    again.expect(r"apiBaseUrl \(setting\) \[https://first.example\]: ")
    again.sendline("")
    status, out = finish(again)
    assert status == 0, out
    content = json.loads(ok(search(project, env)))
    assert content["token_sha256"] == sha(SECRET)
    assert content["api_base_url"] == "https://first.example"


def test_an_interrupted_connect_stores_nothing(
    project: Path, home: Path, env: dict[str, str]
) -> None:
    child = spawn(project, env, "connect", "notion")
    child.expect(r"accessToken \(secret, input hidden\): ")
    child.sendline(SECRET)
    child.expect("apiBaseUrl")
    child.sendintr()
    status, _ = finish(child)
    assert status != 0
    assert not (home / "secrets" / "secrets.json").exists()


# --- without a terminal ---------------------------------------------------------------------


def test_without_a_terminal_connect_explains_how(project: Path, env: dict[str, str]) -> None:
    result = run(project, env, "connect", "notion")
    assert result.returncode == 2
    assert "standard input is not one" in result.stderr and "--stdin" in result.stderr


def test_connect_from_stdin_and_disconnect(project: Path, home: Path, env: dict[str, str]) -> None:
    lines = f"# from a script\naccessToken={SECRET}\napiBaseUrl=https://x.example\n"
    out = ok(run(project, env, "connect", "notion", "--stdin", stdin=lines))
    assert "connected: Notion (notion)" in out and SECRET not in out
    assert json.loads(ok(search(project, env)))["token_sha256"] == sha(SECRET)

    out = ok(run(project, env, "disconnect", "notion"))
    assert "Disconnected Notion (notion): removed accessToken, apiBaseUrl from the file" in out
    assert SECRET not in (home / "secrets" / "secrets.json").read_text()
    assert search(project, env).returncode == 1
    out = ok(run(project, env, "disconnect", "notion"))
    assert "Notion (notion) was not connected; nothing to remove." in out


def test_connect_settings_from_options(project: Path, env: dict[str, str]) -> None:
    lines = f"accessToken={SECRET}\n"
    args = ("connect", "notion", "--stdin", "--set", "apiBaseUrl=https://set.example")
    ok(run(project, env, *args, stdin=lines))
    assert json.loads(ok(search(project, env)))["api_base_url"] == "https://set.example"


@pytest.mark.parametrize(
    ("args", "stdin", "code", "message"),
    [
        (["--set", f"accessToken={SECRET}"], "", 2, "accessToken is a secret"),
        (["--stdin"], "apiBaseUrl=https://x\n", 1, "notion needs accessToken"),
        (["--stdin"], "password=x\n", 2, "notion has no preference 'password'"),
        (["--stdin"], "accessToken\n", 2, "expected NAME=VALUE"),
    ],
)
def test_connect_refuses_bad_input(
    project: Path,
    home: Path,
    env: dict[str, str],
    args: list[str],
    stdin: str,
    code: int,
    message: str,
) -> None:
    result = run(project, env, "connect", "notion", *args, stdin=stdin)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr
    assert not (home / "secrets" / "secrets.json").exists()


def test_unknown_capability_ids_list_the_known_ones(project: Path, env: dict[str, str]) -> None:
    for command in ("connect", "disconnect"):
        result = run(project, env, command, "jira")
        assert result.returncode == 1
        assert "unknown capability 'jira'; known: github, notion" in result.stderr


# --- listing --------------------------------------------------------------------------------


def test_connections_lists_status_and_never_secret_values(
    project: Path, env: dict[str, str]
) -> None:
    ok(run(project, env, "connect", "github", "--stdin", stdin=f"token={SECRET}\n"))
    listing = json.loads(ok(run(project, env, "connections", "--json")))
    rows = {row["id"]: row for row in listing["capabilities"]}
    assert rows["notion"]["connected"] is False and rows["notion"]["missing"] == ["accessToken"]
    assert rows["notion"]["settings"] == {"apiBaseUrl": None}
    assert rows["github"]["connected"] is True and rows["github"]["missing"] == []
    assert rows["github"]["tools"] == ["github:whoAmI", "github:echoToken", "github:failWithToken"]
    assert "the file" in listing["secret_store"]["description"]
    assert SECRET not in json.dumps(listing)
    text = ok(run(project, env, "connections"))
    assert "accessToken" in text and SECRET not in text
    assert "Secrets are stored in the file" in text


def test_no_capabilities_configured(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "toolgate.yaml").write_text("python: []\n")
    out = ok(run(tmp_path, env, "connections"))
    assert "No capabilities are configured" in out
    result = run(tmp_path, env, "connect", "notion")
    assert result.returncode == 1 and "no capability is configured" in result.stderr


def test_tools_list_and_validate_show_the_capability_format(
    project: Path, env: dict[str, str]
) -> None:
    rows = json.loads(ok(run(project, env, "tools", "list", "--json")))
    notion = {row["id"]: row for row in rows if row["id"].startswith("notion:")}
    assert set(notion) == {"notion:searchPages", "notion:getPage", "notion:addToPage"}
    assert {row["source_format"] for row in notion.values()} == {"capability"}
    table = ok(run(project, env, "tools", "list"))
    assert "capability" in table
    assert "notion:searchPages is unavailable: the Notion extension is not connected" in table

    manifest = project / "extensions" / "notion" / "manifest.yaml"
    out = ok(run(project, env, "validate", str(manifest)))
    assert f"{manifest}: capability declaration" in out and "OK: no problems found." in out
    broken = FIXTURES / "broken_types" / "manifest.json"
    result = run(project, env, "validate", str(broken))
    assert result.returncode == 1
    assert f"error: {broken}: /aiCapability/id: expected a string, got number 5" in result.stdout


def test_the_os_keyring_is_used_where_one_works(
    project: Path, home: Path, env: dict[str, str], tmp_path: Path
) -> None:
    keyring_file = tmp_path / "keyring.json"
    env = {
        **env,
        "PYTHON_KEYRING_BACKEND": "toolgate_test_keyring.FileKeyring",
        "PYTHONPATH": str(FIXTURES / "keyring_backend"),
        "TOOLGATE_TEST_KEYRING": str(keyring_file),
    }
    env.pop("TOOLGATE_SECRET_STORE")
    out = ok(run(project, env, "connect", "notion", "--stdin", stdin=f"accessToken={SECRET}\n"))
    assert "Secrets are stored in the OS keyring" in out and "an OS keyring works here" in out
    assert json.loads(keyring_file.read_text())["toolgate/notion"]["accessToken"] == SECRET
    assert not (home / "secrets").exists()
    assert json.loads(ok(search(project, env)))["token_sha256"] == sha(SECRET)
    ok(run(project, env, "disconnect", "notion"))
    assert json.loads(keyring_file.read_text())["toolgate/notion"] == {}


def test_help(project: Path, env: dict[str, str]) -> None:
    for command in ("connect", "disconnect", "connections"):
        assert "Usage: toolgate" in ok(run(project, env, command, "--help"))


# --- the documented example -----------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _doc_block(marker: str) -> str:
    return doc_block(f"capability:{marker}")


def test_the_documented_example_works_as_written(tmp_path: Path, env: dict[str, str]) -> None:
    folder = tmp_path / "documented"
    (folder / "extensions" / "acme").mkdir(parents=True)
    (folder / "extensions" / "acme" / "manifest.yaml").write_text(_doc_block("manifest.yaml"))
    (folder / "extensions" / "acme" / "tools.py").write_text(_doc_block("tools.py"))
    (folder / "toolgate.yaml").write_text(_doc_block("toolgate.yaml"))
    commands = [
        shlex.split(line.split(" # ")[0])[1:]
        for line in _doc_block("commands").splitlines()
        if line.strip()
    ]
    validate, call, connect, connections, call_again = commands
    assert "acme: capability declaration" in ok(run(folder, env, *validate)).replace(
        "extensions/acme/manifest.yaml", "acme"
    )
    before = run(folder, env, *call)
    assert before.returncode == 1
    assert (
        "Tool acme:searchNotes is unavailable: the Acme Notes extension is not connected "
        "(missing: apiKey). Ask the user to connect Acme Notes in Settings (toolgate connect "
        "acme), then call this tool again." in " ".join(before.stderr.split())
    )
    assert connect == ["connect", "acme"]
    ok(run(folder, env, *connect, "--stdin", stdin="apiKey=acme-key-123\n"))
    assert "connected" in ok(run(folder, env, *connections))
    after = json.loads(ok(run(folder, env, *call_again)))
    assert after == {
        "region": "eu",
        "notes": ["Gate codes for the office", "Gateway design review"],
        "authenticated": True,
    }
