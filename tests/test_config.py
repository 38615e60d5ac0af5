"""``toolgate.yaml``: finding it, parsing it, and building a Gateway from it."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from folder_tools import write_tool
from toolgate import ConfigError
from toolgate.backends.script import DEFAULT_MAX_OUTPUT
from toolgate.config import (
    MAX_CONFIG_BYTES,
    STATE_FILE_NAME,
    ScriptsConfig,
    find_config,
    load_config,
    load_gateway,
    parse_config,
    toolgate_home,
)
from toolgate.demo import TOOL_FOLDERS
from toolgate.errors import ErrorCode
from toolgate.formats.tool_folder.source import FolderRoot
from toolgate.model import CallStatus, SideEffect
from toolgate.pipeline.approval import DEFAULT_APPROVAL_TTL
from toolgate.pipeline.approval_policy import ApprovalRule

TOOLS_PY = '''
from toolgate import tool


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def plain(x: int) -> int:
    """A plain function."""
    return x * 2


pair = [add, echo]
'''


@pytest.fixture(autouse=True)
def restore_import_state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Loading a config puts its folder on sys.path and imports modules; undo both."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None) or ""
        if origin.startswith(str(tmp_path)) or name.startswith("_toolgate_file_"):
            del sys.modules[name]


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _ids(config_text: str, folder: Path, home: Path | None = None) -> list[str]:
    _write(folder, "toolgate.yaml", config_text)
    environ = {"TOOLGATE_HOME": str(home or folder / "no-home")}
    with load_gateway(cwd=folder, environ=environ) as gateway:
        return [tool.id for tool in gateway.list_tools()]


# -- finding the file ------------------------------------------------------------------------


def test_current_folder_wins_over_toolgate_home(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    in_home = _write(home, "toolgate.yaml", "demo: true\n")
    cwd.mkdir()
    environ = {"TOOLGATE_HOME": str(home)}
    assert find_config(cwd=cwd, environ=environ) == in_home
    in_cwd = _write(cwd, "toolgate.yaml", "")
    assert find_config(cwd=cwd, environ=environ) == in_cwd


def test_no_file_anywhere_is_an_empty_config(tmp_path: Path) -> None:
    loaded = load_config(cwd=tmp_path, environ={"TOOLGATE_HOME": str(tmp_path / "none")})
    assert loaded.path is None
    assert loaded.config.python == [] and loaded.config.demo is False
    with load_gateway(cwd=tmp_path, environ={"TOOLGATE_HOME": str(tmp_path)}) as gateway:
        assert gateway.list_tools() == []


def test_toolgate_home_defaults_to_dot_toolgate() -> None:
    assert toolgate_home({}) == Path("~/.toolgate").expanduser()
    assert toolgate_home({"TOOLGATE_HOME": "/srv/tg"}) == Path("/srv/tg")


def test_explicit_path_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.yaml: configuration file not found"):
        load_config(Path("missing.yaml"), cwd=tmp_path)


# -- python entries --------------------------------------------------------------------------


def test_every_python_entry_form(tmp_path: Path) -> None:
    package = f"cfgpkg_{tmp_path.name.replace('-', '_')}"
    _write(tmp_path / package, "__init__.py", "")
    _write(tmp_path / package, "mod.py", TOOLS_PY)
    _write(tmp_path / package, "listed.py", TOOLS_PY + "\ntools = [echo]\n")
    _write(tmp_path / "files", "local_tools.py", TOOLS_PY)
    config = f"""
python:
  - {package}.mod:add            # module:attr, a @tool function
  - module: {package}.mod:pair   # module:attr, a list
    namespace: pair
  - module: {package}.mod:plain  # module:attr, a plain function
    namespace: plain
  - module: {package}.listed     # module with a tools list
    namespace: listed
  - ./files/local_tools.py       # a file: every @tool in it
  - module: ./files/local_tools.py:plain
    namespace: fileplain
"""
    assert _ids(config, tmp_path) == [
        "fileplain:plain",
        "listed:echo",
        "local_tools:add",
        "local_tools:echo",
        "mod:add",
        "pair:add",
        "pair:echo",
        "plain:plain",
    ]


def test_file_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    config_dir = tmp_path / "conf"
    _write(config_dir, "t.py", TOOLS_PY)
    _write(config_dir, "toolgate.yaml", "python: [./t.py:echo]\n")
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    with load_gateway(config_dir / "toolgate.yaml", cwd=elsewhere) as gateway:
        tool = gateway.get_tool("t:echo")
        assert tool.source.location == f"{(config_dir / 't.py').resolve()}:echo"
        assert gateway.call_sync("t:echo", {"text": "hi"}).content == "hi"


def test_same_file_name_in_two_folders_does_not_collide(tmp_path: Path) -> None:
    _write(tmp_path / "a", "tools.py", TOOLS_PY)
    _write(tmp_path / "b", "tools.py", TOOLS_PY)
    config = "python:\n  - ./a/tools.py:add\n  - module: ./b/tools.py:add\n    namespace: b\n"
    assert _ids(config, tmp_path) == ["b:add", "tools:add"]


def test_demo_and_overflow_settings(tmp_path: Path) -> None:
    _write(tmp_path, "toolgate.yaml", "demo: true\noverflow: {limit: 100, preview: 10, dir: out}\n")
    with load_gateway(cwd=tmp_path, environ={"TOOLGATE_HOME": str(tmp_path / "h")}) as gateway:
        outcome = gateway.call_sync("demo:big_output", {"size": 101}, session_id="s")
        assert outcome.overflow is not None
        assert Path(outcome.overflow.path).parent == tmp_path / "out" / "s"
        assert outcome.text.startswith("line 00000\n\n[Output truncated")  # 10-char preview
        assert gateway.call_sync("demo:big_output", {"size": 100}).overflow is None


# -- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("python: [unclosed\n", r"^toolgate\.yaml: invalid YAML at line 2, column 1: "),
        ("- a\n- b\n", r"^toolgate\.yaml: the file must be a mapping of sections"),
        ("pyhton: []\n", r"^toolgate\.yaml: pyhton: unknown key; did you mean 'python'\?$"),
        ("python: [{namespace: x}]\n", r"^toolgate\.yaml: python\[0\]\.module: Field required"),
        (
            "python:\n  - a\n  - module: b\n    namspace: c\n",
            r"^toolgate\.yaml: python\[1\]\.namspace: unknown key",
        ),
        ("demo: maybe\n", r"^toolgate\.yaml: demo: Input should be a valid boolean"),
        (
            "overflow: {limit: 10, preview: 20}\n",
            r"^toolgate\.yaml: overflow: preview \(20\) must not exceed limit \(10\)$",
        ),
        ("overflow: {limit: 0}\n", r"^toolgate\.yaml: overflow\.limit: .*greater than or equal"),
        ("tool_folders: [{namespace: x}]\n", r"^toolgate\.yaml: tool_folders\[0\]\.path: Field"),
        (
            "tool_folders: [{path: ./t, namespace: 'a b'}]\n",
            r"^toolgate\.yaml: tool_folders\[0\]\.namespace: 'a b' is not a usable namespace",
        ),
        ("tool_folders: [{path: ./t, nmespace: a}]\n", r"tool_folders\[0\]\.nmespace: unknown"),
        ("scripts: {max_ouput: 1}\n", r"^toolgate\.yaml: scripts\.max_ouput: unknown key"),
        ("scripts: {max_output: 0}\n", r"^toolgate\.yaml: scripts\.max_output: .*greater"),
        ("scripts: {concurrency: -1}\n", r"^toolgate\.yaml: scripts\.concurrency: .*greater"),
        ("serve: {mcp_page_size: 0}\n", r"^toolgate\.yaml: serve\.mcp_page_size: .*greater"),
        (
            "scripts: {env_from_process: [A, 3]}\n",
            r"^toolgate\.yaml: scripts\.env_from_process: must be a list of variable names, or "
            r"true",
        ),
        ("scripts: {env_from_process: yes}\n", r"scripts\.env_from_process: must be a list"),
        ("a: &x [1]\nb: *x\nb: 2\n", r"^toolgate\.yaml: invalid YAML at line 3, .*duplicate key"),
    ],
)
def test_malformed_config_names_file_and_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("nope.mod", r"python\[0\]: cannot import 'nope\.mod': No module named 'nope'$"),
        ("./missing.py", r"python\[0\]: no such file: .*missing\.py$"),
        ("./t.py:nothing", r"python\[0\]: './t\.py:nothing': no attribute 'nothing'$"),
        (
            "./t.py:TOOLS",
            r"python\[0\]: './t\.py:TOOLS' is not a @tool function, .* \(it is a int\)$",
        ),
        ("./broken.py", r"python\[0\]: cannot load .*broken\.py: ZeroDivisionError"),
        ("json", r"python\[0\]: json has no @tool functions and no 'tools' list"),
    ],
)
def test_loading_errors_name_file_and_entry(tmp_path: Path, entry: str, message: str) -> None:
    _write(tmp_path, "t.py", TOOLS_PY + "\nTOOLS = 3\n")
    _write(tmp_path, "broken.py", "1 / 0\n")
    with pytest.raises(ConfigError, match=r"^toolgate\.yaml: " + message):
        _ids(f"python:\n  - {entry}\n", tmp_path)


def test_duplicate_tools_are_a_config_error(tmp_path: Path) -> None:
    _write(tmp_path, "t.py", TOOLS_PY)
    with pytest.raises(ConfigError, match=r"python\[1\]: tool 't:add' is declared twice"):
        _ids("python:\n  - ./t.py:add\n  - ./t.py:add\n", tmp_path)


def test_oversized_config_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "toolgate.yaml", "# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match="larger than 1,048,576 bytes"):
        load_config(cwd=tmp_path, environ={})


def test_yaml_is_parsed_safely(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid YAML"):
        parse_config("demo: !!python/object/apply:os.system ['echo hacked']\n")


# -- tool folders and scripts ------------------------------------------------------------------

ENV_PY = """\
import json, os, sys
json.load(sys.stdin)
print(json.dumps({name: os.environ.get(name) for name in ("FROM_FILE", "FROM_PROCESS")}))
"""


def test_tool_folder_roots_in_order_and_nothing_created(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    config = (
        "tool_folders:\n  - ./a\n  - path: b\n    namespace: team\n  - ./a   # twice: once\n"
        "demo: true\n"
    )
    _write(tmp_path, "toolgate.yaml", config)
    environ = {"TOOLGATE_HOME": str(home)}
    with load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="read") as gateway:
        assert gateway.audit is None  # no log yet: "read" creates none
        assert gateway.tool_folders.roots == (
            FolderRoot(home / "tools", "local"),
            FolderRoot(tmp_path / "a", "local"),
            FolderRoot(tmp_path / "b", "team"),
            FolderRoot(TOOL_FOLDERS, "demo"),
        )
        assert gateway.diagnostics() == []  # the demo folders load cleanly
        ids = {tool.id for tool in gateway.list_tools()}
        assert {"demo:word_count", "demo:file_diff", "demo:system_info", "demo:add"} <= ids
    assert not home.exists()


def test_a_folder_cannot_have_two_namespaces(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    _write(tmp_path, "toolgate.yaml", f"tool_folders: [{{path: {home / 'tools'}, namespace: x}}]\n")
    with pytest.raises(ConfigError, match=r"tool_folders\[0\]: .* already a tool folder with the "):
        load_gateway(cwd=tmp_path, environ={"TOOLGATE_HOME": str(home)})


def test_scripts_section(tmp_path: Path) -> None:
    assert parse_config("").scripts == ScriptsConfig(
        env_from_process=(), max_output=DEFAULT_MAX_OUTPUT, concurrency=None
    )
    assert DEFAULT_MAX_OUTPUT == 10 * 1024 * 1024
    parsed = parse_config("scripts: {env_from_process: [A, B], max_output: 10, concurrency: 2}")
    assert parsed.scripts == ScriptsConfig(
        env_from_process=("A", "B"), max_output=10, concurrency=2
    )
    assert parse_config("scripts: {env_from_process: true}").scripts.env_from_process is True


def test_scripts_read_home_env_file_and_allowed_process_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    write_tool(home / "tools", "env", ENV_PY, runtime="python", env=["FROM_FILE", "FROM_PROCESS"])
    (home / ".env").write_text("FROM_FILE=file-value\n", encoding="utf-8")
    monkeypatch.setenv("FROM_PROCESS", "process-value")
    environ = {"TOOLGATE_HOME": str(home)}

    def seen(config: str) -> object:
        _write(tmp_path, "toolgate.yaml", config)
        with load_gateway(cwd=tmp_path, environ=environ) as gateway:
            outcome = gateway.call_sync("local:env", {}, workspace=tmp_path)
            assert outcome.ok, outcome.text
            return json.loads(outcome.text)

    assert seen("") == {"FROM_FILE": "file-value", "FROM_PROCESS": None}
    allowed = seen("scripts: {env_from_process: [FROM_PROCESS]}\n")
    assert allowed == {"FROM_FILE": "file-value", "FROM_PROCESS": "process-value"}


def test_scripts_max_output_reaches_the_backend(tmp_path: Path) -> None:
    home = tmp_path / "home"
    write_tool(
        home / "tools", "loud", "import sys\nsys.stdout.write('x' * 100)\n", runtime="python"
    )
    _write(tmp_path, "toolgate.yaml", "scripts: {max_output: 50}\n")
    with load_gateway(cwd=tmp_path, environ={"TOOLGATE_HOME": str(home)}) as gateway:
        outcome = gateway.call_sync("local:loud", {}, workspace=tmp_path)
    assert not outcome.ok
    assert "more than 50 bytes" in outcome.text


# -- approval --------------------------------------------------------------------------------

APPROVAL_TOOLS_PY = '''
from toolgate import tool


@tool(effect="read_only")
def peek(text: str) -> str:
    """Read-only echo."""
    return text


@tool(effect="external_write")
def send(to: str) -> str:
    """Pretend to send."""
    return f"sent to {to}"
'''


def test_approval_section_defaults_and_rules() -> None:
    default = parse_config("").approval
    assert default.expires_after == DEFAULT_APPROVAL_TTL == 300
    assert default.rules == []
    parsed = parse_config(
        "approval:\n"
        "  expires_after: 60\n"
        "  rules:\n"
        "    - {tool: 'tools:send', require: false, override: true}\n"
        "    - {namespace: team, require: true}\n"
        "    - {level: read_only, require: true}\n"
    ).approval
    assert parsed.expires_after == 60
    assert parsed.approval_rules() == [
        ApprovalRule(require=False, tool="tools:send", override=True),
        ApprovalRule(require=True, namespace="team"),
        ApprovalRule(require=True, level=SideEffect.READ_ONLY),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "approval: {rules: [{require: true}]}",
            r"approval\.rules\[0\]: give exactly one of tool, namespace, level$",
        ),
        (
            "approval: {rules: [{require: true, level: read_only}, "
            "{tool: 'a:b', namespace: a, require: true}]}",
            r"approval\.rules\[1\]: give exactly one of tool, namespace, level "
            r"\(got tool, namespace\)",
        ),
        ("approval: {rules: [{level: read_only}]}", r"approval\.rules\[0\]\.require: Field req"),
        ("approval: {rules: [{level: sometimes, require: true}]}", r"rules\[0\]\.level: Input"),
        ("approval: {rules: [{tool: nocolon, require: true}]}", r"rules\[0\]\.tool: tool id"),
        ("approval: {rules: [{namespace: 'a b', require: true}]}", r"rules\[0\]\.namespace: "),
        ("approval: {rules: [{level: read_only, require: true, when: x}]}", r"\.when: unknown"),
        ("approval: {expires_after: 0}", r"approval\.expires_after: Input should be greater"),
        ("approval: {expires_after: soon}", r"approval\.expires_after: must be a number"),
        ("approval: {expires_after: true}", r"approval\.expires_after: must be a number"),
        ("approval: {expire_after: 5}", r"approval\.expire_after: unknown key"),
    ],
)
def test_approval_section_errors_name_the_field(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^toolgate\.yaml: .*" + message):
        parse_config(text)


def test_gateway_gets_the_approval_settings_and_keeps_state_in_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(tmp_path, "tools.py", APPROVAL_TOOLS_PY)
    _write(
        tmp_path,
        "toolgate.yaml",
        "python: [./tools.py]\n"
        "approval:\n  expires_after: 42\n  rules: [{level: read_only, require: true}]\n",
    )
    environ = {"TOOLGATE_HOME": str(home)}
    with load_gateway(cwd=tmp_path, environ=environ) as gateway:  # approver: the queue
        assert gateway.approvals is not None
        outcome = gateway.call_sync("tools:peek", {"text": "hi"}, workspace=tmp_path)
        assert outcome.status is CallStatus.PENDING_APPROVAL  # the rule made it ask
        assert outcome.approval is not None
        request = outcome.approval
        assert request.expires_at - request.created_at == pytest.approx(42)
    assert (home / STATE_FILE_NAME).is_file()
    # A new gateway (a restart) sees the same queue.
    with load_gateway(cwd=tmp_path, environ=environ) as gateway:
        assert gateway.approvals is not None
        assert [r.id for r in gateway.approvals.pending()] == [request.id]


def test_approver_callable_and_none(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(tmp_path, "tools.py", APPROVAL_TOOLS_PY)
    _write(tmp_path, "toolgate.yaml", "python: [./tools.py]\n")
    environ = {"TOOLGATE_HOME": str(home)}
    with load_gateway(cwd=tmp_path, environ=environ, approver=lambda request: "approve") as gw:
        outcome = gw.call_sync("tools:send", {"to": "x"}, wait_for_approval=10)
        assert outcome.ok, outcome.text
        assert outcome.content == "sent to x"
    with load_gateway(cwd=tmp_path, environ=environ, approver=None) as gateway:
        assert gateway.approvals is None
        denied = gateway.call_sync("tools:send", {"to": "x"})
        assert denied.code is ErrorCode.USER_REJECTION
        assert "no approver" in (denied.message or "")


# -- audit, policies, agents, rate limits --------------------------------------------------------

GUARDED_TOOLS_PY = '''
from toolgate import tool


@tool(effect="read_only")
def peek(text: str) -> str:
    """Read."""
    return text


@tool(effect="external_write")
def send(to: str) -> str:
    """Send."""
    return "sent to " + to
'''

POLICY_DOC = """\
apiVersion: joch.dev/v1alpha1
kind: Policy
metadata: {{name: {name}}}
spec:
  appliesTo: {applies}
  rules:
    - when: {{tool.sideEffect: external_write}}
      action: deny
"""


def test_guarantee_sections_default() -> None:
    config = parse_config("")
    assert config.audit.enabled is True
    assert config.audit.jsonl is None
    assert config.audit.retention_days == 30
    assert config.policies == []
    assert config.agents == {}
    assert config.rate_limits.per_agent is False


def test_guarantee_sections_parse() -> None:
    config = parse_config(
        "audit: {enabled: false, jsonl: ./a.jsonl, retention_days: null}\n"
        "agents:\n  intern: {labels: {team: interns}}\n  boss: {}\n"
        "rate_limits: {per_agent: true}\n"
        "policies:\n  - ./p.yaml\n  - {kind: Policy}\n"
    )
    assert (config.audit.enabled, config.audit.jsonl, config.audit.retention_days) == (
        False,
        "./a.jsonl",
        None,
    )
    assert config.agent_labels() == {"intern": {"team": "interns"}, "boss": {}}
    assert config.rate_limits.per_agent is True
    assert config.policies == ["./p.yaml", {"kind": "Policy"}]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("audit: {retension_days: 3}\n", r"audit\.retension_days: unknown key"),
        ("audit: {retention_days: soon}\n", r"audit\.retention_days: must be a number of days"),
        ("audit: {retention_days: 0}\n", r"audit\.retention_days: "),
        ("policies: [1]\n", r"policies\[0\]: must be a Policy resource \(a mapping\) or the path"),
        ("policies: {a: 1}\n", r"policies: "),
        ("agents: {intern: {label: {a: b}}}\n", r"agents\.intern\.label: unknown key"),
        ("rate_limits: {per_tool: true}\n", r"rate_limits\.per_tool: unknown key"),
    ],
)
def test_guarantee_section_errors(text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=rf"^toolgate\.yaml: {expected}"):
        parse_config(text)


def test_policies_inline_and_from_a_multi_document_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(tmp_path, "tools.py", GUARDED_TOOLS_PY)
    inline = POLICY_DOC.format(name="by-label", applies="{selector: {matchLabels: {team: t}}}")
    _write(
        tmp_path / "policies",
        "more.yaml",
        "# comment\n"
        + POLICY_DOC.format(name="by-name", applies="{agents: [bob]}")
        + "---\n"
        + POLICY_DOC.format(name="for-eve", applies="{agents: [eve]}")
        + "...\n",
    )
    indented = "\n".join("    " + line for line in inline.splitlines()).replace("    ", "  - ", 1)
    _write(
        tmp_path,
        "toolgate.yaml",
        "python: [./tools.py]\nagents:\n  ann: {labels: {team: t}}\n"
        f"policies:\n{indented}\n  - policies/more.yaml\n",
    )
    environ = {"TOOLGATE_HOME": str(home)}
    with load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="off") as gateway:
        assert [p.name for p in gateway.access.policies] == ["by-label", "by-name", "for-eve"]
        assert gateway.access.policies[0].source == "toolgate.yaml: policies[0]"
        assert gateway.access.policies[2].source == "policies/more.yaml (document 2)"
        for agent in ("ann", "bob", "eve"):
            assert [t.id for t in gateway.list_tools(agent=agent)] == ["tools:peek"]
            denied = gateway.call_sync("tools:send", {"to": "x"}, agent=agent)
            assert denied.code is ErrorCode.TOOL_NOT_FOUND  # hidden: it does not exist for them
        assert [t.id for t in gateway.list_tools(agent="zed")] == ["tools:peek", "tools:send"]
    assert not home.exists()


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            POLICY_DOC.format(name="a", applies="{agents: [x]}").replace("deny", "allow"),
            r"policies\[0\]: p\.yaml: spec\.rules\.0\.action: ",
        ),
        (
            POLICY_DOC.format(name="a", applies="{agents: [x]}") + "---\nkind: [\n",
            r"policies\[0\]: p\.yaml \(document 2\): invalid YAML at line 10",
        ),
        ("- 1\n", r"policies\[0\]: p\.yaml: a Policy document must be a mapping, not a list"),
        ("# nothing\n", r"policies\[0\]: p\.yaml holds no Policy documents"),
    ],
)
def test_policy_file_errors_name_the_file_and_field(
    tmp_path: Path, content: str, expected: str
) -> None:
    _write(tmp_path, "p.yaml", content)
    _write(tmp_path, "toolgate.yaml", "policies: [./p.yaml]\n")
    environ = {"TOOLGATE_HOME": str(tmp_path / "home")}
    with pytest.raises(ConfigError, match=rf"^toolgate\.yaml: {expected}"):
        load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="off")


def test_missing_policy_file_and_bad_inline_policy(tmp_path: Path) -> None:
    environ = {"TOOLGATE_HOME": str(tmp_path / "home")}
    _write(tmp_path, "toolgate.yaml", "policies: [./nope.yaml]\n")
    with pytest.raises(ConfigError, match=r"^toolgate\.yaml: policies\[0\]: no such file: "):
        load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="off")
    _write(tmp_path, "toolgate.yaml", "policies:\n  - {apiVersion: v1, kind: Policy}\n")
    with pytest.raises(ConfigError, match=r"^toolgate\.yaml: policies\[0\]: apiVersion: "):
        load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="off")


def test_audit_log_in_home_with_jsonl_and_per_agent_limits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(tmp_path, "tools.py", GUARDED_TOOLS_PY)
    _write(
        tmp_path,
        "toolgate.yaml",
        "python: [./tools.py]\naudit: {jsonl: logs.jsonl, retention_days: 7}\n"
        "rate_limits: {per_agent: true}\n",
    )
    environ = {"TOOLGATE_HOME": str(home)}
    with load_gateway(cwd=tmp_path, environ=environ, approver=None) as gateway:
        assert gateway.audit is not None
        assert gateway.audit.path == home / "audit.db"
        assert gateway.audit.jsonl_path == tmp_path / "logs.jsonl"
        assert gateway.audit.retention_days == 7
        assert gateway._rate_limits.per_agent is True
        assert gateway.call_sync("tools:peek", {"text": "hi"}, agent="a").ok
        gateway.audit.flush(5)
        assert [r.agent for r in gateway.audit.query()] == ["a"]
    assert len((tmp_path / "logs.jsonl").read_text(encoding="utf-8").splitlines()) == 1
    # "read" opens the existing log for statistics only: no retention, no JSON-lines copy.
    with load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="read") as gateway:
        assert gateway.audit is not None
        assert gateway.audit.retention_days is None and gateway.audit.jsonl_path is None
        assert gateway.status("tools:peek").total_calls_7d == 1
    with load_gateway(cwd=tmp_path, environ=environ, approver=None, audit="off") as gateway:
        assert gateway.audit is None


def test_audit_disabled_in_the_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(tmp_path, "toolgate.yaml", "audit: {enabled: false}\n")
    with load_gateway(cwd=tmp_path, environ={"TOOLGATE_HOME": str(home)}, approver=None) as gw:
        assert gw.audit is None
    assert not home.exists()
