"""Jean2 tool folders: ``tool.md`` / ``tool.json`` into a Tool, every problem a diagnostic."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from folder_tools import WORD_COUNT_SCRIPT_TS, WORD_COUNT_TOOL_MD
from toolgate.formats._common.diagnostics import Diagnostic, Severity
from toolgate.formats.tool_folder.parse import TOOL_FOLDER_FIELDS, FolderLoad, load_tool_folder
from toolgate.model import (
    ApprovalSpec,
    DisplaySpec,
    ImplementationKind,
    ScriptEntry,
    SecurityCheckSpec,
    SideEffect,
    SourceFormat,
    ToolSource,
)


def script_entry(tool: Any) -> ScriptEntry:
    """The tool's script entry without its content digest (tested on its own)."""
    entry = tool.entry
    assert isinstance(entry, ScriptEntry) and entry.digest is not None
    return ScriptEntry(entry.path, entry.runtime)


# --- the seed's own examples, verbatim ------------------------------------------------------


MY_TOOL_MD = """\
---
name: my-tool
script: script.ts
runtime: bun
timeout: 30000
requireApproval: false
dangerous: false
hasSecurityCheck: false
inputSchema:
  type: object
  properties:
    path:
      type: string
      description: "The file path to process"
  required:
    - path
outputSchema:
  type: object
  properties:
    result:
      type: string
    error:
      type: string
---

Human-readable description of what this tool does and when to use it.
This body text is sent to the LLM as part of the tool definition —
it tells the model how and when to call your tool.

Be specific about:
- What the tool does
- When to use it vs. alternatives
- Any important constraints or gotchas
"""

MINIMAL_FRONT = """\
name: t
script: script.sh
runtime: bash
inputSchema:
  type: object
outputSchema:
  type: object
"""


def make_folder(
    root: Path,
    front: str = MINIMAL_FRONT,
    body: str = "Does a thing.",
    *,
    name: str = "tool",
    files: dict[str, str] | None = None,
) -> Path:
    """A tool folder with ``tool.md`` (front matter + body) and the given extra files."""
    folder = root / name
    folder.mkdir()
    (folder / "tool.md").write_text(f"---\n{front}---\n\n{body}\n", encoding="utf-8")
    for file_name, content in (files if files is not None else {"script.sh": "echo {}"}).items():
        (folder / file_name).write_text(content, encoding="utf-8")
    return folder


def front_with(**changes: Any) -> str:
    """The minimal front matter with fields replaced (``None`` removes one)."""
    import yaml

    data: dict[str, Any] = yaml.safe_load(MINIMAL_FRONT)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return yaml.safe_dump(data, sort_keys=False)


def errors(load: FolderLoad) -> list[Diagnostic]:
    return [d for d in load.diagnostics if d.severity is Severity.ERROR]


def warnings(load: FolderLoad) -> list[Diagnostic]:
    return [d for d in load.diagnostics if d.severity is Severity.WARNING]


def only_error(load: FolderLoad, field: str | None) -> Diagnostic:
    """The load failed with exactly one error, on ``field``, naming a file of the folder."""
    assert load.tool is None
    assert not load.ok
    found = errors(load)
    assert len(found) == 1, found
    error = found[0]
    assert error.field == field, error
    assert error.path.startswith(str(load.folder))
    return error


# --- the seed's examples --------------------------------------------------------------------


def test_seed_word_count_example_loads(tmp_path: Path) -> None:
    folder = tmp_path / "word-count"
    folder.mkdir()
    (folder / "tool.md").write_text(WORD_COUNT_TOOL_MD, encoding="utf-8")
    (folder / "script.ts").write_text(WORD_COUNT_SCRIPT_TS, encoding="utf-8")

    load = load_tool_folder(folder)

    assert load.ok and load.diagnostics == ()
    assert load.runtime == "bun"
    tool = load.tool
    assert tool is not None
    assert tool.id == "local:word-count"
    assert tool.name == "word-count" and tool.namespace == "local"
    assert tool.description == "Count words, lines, and characters in a file."
    assert tool.timeout == 10.0
    assert tool.kind is ImplementationKind.SCRIPT
    assert script_entry(tool) == ScriptEntry(
        path=str((folder / "script.ts").resolve()), runtime="bun"
    )
    assert tool.input_schema_dict() == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path to the file to count words in"}
        },
        "required": ["path"],
    }
    assert tool.output_schema_dict() == {
        "type": "object",
        "properties": {
            "words": {"type": "number"},
            "lines": {"type": "number"},
            "characters": {"type": "number"},
        },
    }
    assert tool.source == ToolSource(SourceFormat.TOOL_FOLDER, str(folder / "tool.md"))
    assert tool.security_check is None
    assert tool.env == ()
    assert tool.approval == ApprovalSpec()
    assert tool.side_effect is SideEffect.LOCAL_WRITE


def test_seed_full_format_example_maps_every_field(tmp_path: Path) -> None:
    folder = tmp_path / "my-tool"
    folder.mkdir()
    (folder / "tool.md").write_text(MY_TOOL_MD, encoding="utf-8")
    (folder / "script.ts").write_text("console.log('{}')\n", encoding="utf-8")

    load = load_tool_folder(folder, namespace="jean2")

    assert load.ok and load.diagnostics == ()
    tool = load.tool
    assert tool is not None
    assert tool.id == "jean2:my-tool"  # name
    assert script_entry(tool) == ScriptEntry(str((folder / "script.ts").resolve()), "bun")  # script
    assert load.runtime == "bun"  # runtime
    assert tool.timeout == 30.0  # timeout: 30000 ms
    assert tool.approval == ApprovalSpec(required=False)  # requireApproval: false
    assert tool.requires_approval is False
    assert tool.display == DisplaySpec(dangerous=False)  # dangerous: false
    assert tool.side_effect is SideEffect.LOCAL_WRITE
    assert tool.security_check is None  # hasSecurityCheck: false
    assert tool.input_schema_dict() == {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "The file path to process"}},
        "required": ["path"],
    }
    assert tool.output_schema_dict() == {
        "type": "object",
        "properties": {"result": {"type": "string"}, "error": {"type": "string"}},
    }
    assert tool.description.startswith("Human-readable description of what this tool does")
    assert tool.description.endswith("- Any important constraints or gotchas")
    assert "it tells the model how and when to call your tool." in tool.description


# --- defaults and each field ----------------------------------------------------------------


def test_defaults(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path))
    tool = load.tool
    assert tool is not None and load.diagnostics == ()
    assert tool.id == "local:t"
    assert tool.description == "Does a thing."
    assert tool.timeout == 30.0
    assert tool.approval == ApprovalSpec()
    assert tool.display == DisplaySpec()
    assert tool.side_effect is SideEffect.LOCAL_WRITE
    assert tool.security_check is None
    assert tool.env == ()
    assert script_entry(tool) == ScriptEntry(
        str((tmp_path / "tool" / "script.sh").resolve()), "bash"
    )


def test_security_defaults(tmp_path: Path) -> None:
    folder = make_folder(
        tmp_path,
        front_with(hasSecurityCheck=True),
        files={"script.sh": "", "security.ts": ""},
    )
    load = load_tool_folder(folder)
    assert load.tool is not None and load.diagnostics == ()
    assert load.tool.security_check == SecurityCheckSpec(
        script=str((folder / "security.ts").resolve()), timeout=10.0
    )


def test_security_fields(tmp_path: Path) -> None:
    folder = make_folder(
        tmp_path,
        front_with(hasSecurityCheck=True, securityScript="gate.py", securityTimeout=2500),
        files={"script.sh": "", "gate.py": ""},
    )
    load = load_tool_folder(folder)
    assert load.tool is not None and load.diagnostics == ()
    assert load.tool.security_check == SecurityCheckSpec(
        script=str((folder / "gate.py").resolve()), timeout=2.5
    )


def test_missing_security_script_is_a_warning(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, front_with(hasSecurityCheck=True))
    load = load_tool_folder(folder)
    assert load.tool is not None
    assert load.tool.security_check == SecurityCheckSpec(
        script=str((folder / "security.ts").resolve()), timeout=10.0
    )
    [warning] = warnings(load)
    assert warning.field == "securityScript"
    assert warning.path == str(folder / "tool.md")
    assert "security.ts" in warning.message and "fail" in warning.message


def test_security_script_escaping_the_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "outside.ts").write_text("")
    folder = make_folder(
        tmp_path, front_with(hasSecurityCheck=True, securityScript="../outside.ts")
    )
    error = only_error(load_tool_folder(folder), "securityScript")
    assert "outside the tool folder" in error.message


def test_security_fields_ignored_without_security_check(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, front_with(securityScript="gate.ts", securityTimeout=5))
    load = load_tool_folder(folder)
    assert load.tool is not None and load.tool.security_check is None
    assert sorted(w.field or "" for w in warnings(load)) == ["securityScript", "securityTimeout"]
    assert all("hasSecurityCheck" in w.message for w in warnings(load))


@pytest.mark.parametrize(
    ("field", "value", "check"),
    [
        ("timeout", 1500, lambda t: t.timeout == 1.5),
        ("timeout", 0.5, lambda t: t.timeout == 0.0005),
        ("requireApproval", True, lambda t: t.approval == ApprovalSpec(required=True)),
        ("requireApproval", False, lambda t: t.approval == ApprovalSpec(required=False)),
        (
            "dangerous",
            True,
            lambda t: (
                t.display.dangerous
                and t.side_effect is SideEffect.CODE_EXECUTION
                and t.requires_approval
            ),
        ),
        ("dangerous", False, lambda t: t.side_effect is SideEffect.LOCAL_WRITE),
        ("hasSecurityCheck", False, lambda t: t.security_check is None),
        ("env", ["MY_TOOL_CACHE_DIR", "_X1"], lambda t: t.env == ("MY_TOOL_CACHE_DIR", "_X1")),
        ("env", [], lambda t: t.env == ()),
        (
            "outputSchema",
            {"type": "string"},
            lambda t: t.output_schema_dict() == {"type": "string"},
        ),
        (
            "inputSchema",
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}},
            lambda t: t.input_schema["properties"]["n"]["minimum"] == 1,
        ),
        ("runtime", "python", lambda t: t.entry.runtime == "python"),
    ],
)
def test_valid_field_values(tmp_path: Path, field: str, value: Any, check: Any) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(**{field: value})))
    assert load.tool is not None, load.diagnostics
    assert load.diagnostics == ()
    assert check(load.tool)


@pytest.mark.parametrize("runtime", ["bun", "node", "python", "bash", "go", "binary", "powershell"])
def test_every_runtime_is_accepted(tmp_path: Path, runtime: str) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(runtime=runtime)))
    assert load.tool is not None and load.runtime == runtime
    assert isinstance(load.tool.entry, ScriptEntry) and load.tool.entry.runtime == runtime


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("name", 42, "must be a string"),
        ("name", "", "must not be empty"),
        ("name", "two words", "not a valid tool name"),
        ("name", "a:b", "not a valid tool name"),
        ("name", "a/b", "not a valid tool name"),
        ("script", ["x"], "must be a string"),
        ("runtime", 3, "must be a string"),
        ("runtime", "ruby", "unknown runtime 'ruby'"),
        ("runtime", "Bun", "unknown runtime 'Bun'"),
        ("inputSchema", "object", "must be a JSON Schema object"),
        ("inputSchema", {"type": "array"}, "must describe an object"),
        ("outputSchema", [1], "must be a JSON Schema object"),
        ("timeout", "fast", "must be a positive number of milliseconds"),
        ("timeout", 0, "must be a positive number of milliseconds"),
        ("timeout", -5, "must be a positive number of milliseconds"),
        ("timeout", True, "must be a positive number of milliseconds"),
        ("requireApproval", "yes", "must be a boolean"),
        ("requireApproval", 1, "must be a boolean"),
        ("dangerous", "true", "must be a boolean"),
        ("hasSecurityCheck", "no", "must be a boolean"),
        ("env", "X", "must be a list of variable names"),
        ("description", 5, "must be a string"),
    ],
)
def test_invalid_field_values(tmp_path: Path, field: str, value: Any, expected: str) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(**{field: value})))
    error = only_error(load, "inputSchema/type" if value == {"type": "array"} else field)
    assert error.path == str(tmp_path / "tool" / "tool.md")
    assert expected in error.message
    assert field in str(error)


def test_unknown_runtime_names_the_allowed_values(tmp_path: Path) -> None:
    error = only_error(
        load_tool_folder(make_folder(tmp_path, front_with(runtime="ruby"))), "runtime"
    )
    assert "bun, node, python, bash, go, binary, powershell" in error.message
    assert (
        load_tool_folder(make_folder(tmp_path, front_with(runtime="ruby"), name="b")).runtime
        is None
    )


def test_yaml_11_booleans_are_not_booleans(tmp_path: Path) -> None:
    front = MINIMAL_FRONT + "requireApproval: yes\n"
    error = only_error(load_tool_folder(make_folder(tmp_path, front)), "requireApproval")
    assert "must be a boolean" in error.message and "'yes'" in error.message


def test_security_type_errors(tmp_path: Path) -> None:
    front = front_with(hasSecurityCheck=True, securityTimeout="slow")
    folder = make_folder(tmp_path, front, files={"script.sh": "", "security.ts": ""})
    error = only_error(load_tool_folder(folder), "securityTimeout")
    assert "positive number of milliseconds" in error.message

    front = front_with(hasSecurityCheck=True, securityScript=7)
    folder = make_folder(tmp_path, front, name="b", files={"script.sh": "", "security.ts": ""})
    error = only_error(load_tool_folder(folder), "securityScript")
    assert "must be a string" in error.message


@pytest.mark.parametrize(
    ("env", "field", "expected"),
    [
        ([1], "env[0]", "must be strings"),
        (["OK", "1BAD"], "env[1]", "not a valid environment variable name"),
        (["A-B"], "env[0]", "not a valid environment variable name"),
        (["X Y"], "env[0]", "not a valid environment variable name"),
    ],
)
def test_invalid_env_entries(tmp_path: Path, env: list[Any], field: str, expected: str) -> None:
    error = only_error(load_tool_folder(make_folder(tmp_path, front_with(env=env))), field)
    assert expected in error.message


def test_duplicate_env_entry_is_a_warning(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(env=["A", "B", "A"])))
    assert load.tool is not None and load.tool.env == ("A", "B")
    [warning] = warnings(load)
    assert warning.field == "env[2]"


def test_null_optional_fields_count_as_absent(tmp_path: Path) -> None:
    front = MINIMAL_FRONT + "env:\ntimeout:\nrequireApproval:\n"
    load = load_tool_folder(make_folder(tmp_path, front))
    assert load.tool is not None and load.diagnostics == ()
    assert load.tool.env == () and load.tool.timeout == 30.0
    assert load.tool.approval == ApprovalSpec()


def test_missing_output_schema_is_a_warning(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(outputSchema=None)))
    assert load.tool is not None and load.tool.output_schema is None
    [warning] = warnings(load)
    assert warning.field == "outputSchema"
    assert warning.path == str(tmp_path / "tool" / "tool.md")


def test_empty_body_falls_back_to_the_name(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, body=""))
    assert load.tool is not None and load.tool.description == "t"
    [warning] = warnings(load)
    assert warning.field == "description" and "empty" in warning.message


def test_front_matter_description_is_used_when_the_body_is_empty(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(description="From front."), body=""))
    assert load.tool is not None and load.tool.description == "From front."
    assert load.diagnostics == ()


def test_front_matter_description_with_a_body_is_ignored(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(description="From front.")))
    assert load.tool is not None and load.tool.description == "Does a thing."
    [warning] = warnings(load)
    assert warning.field == "description" and "ignored" in warning.message


def test_crlf_and_bom(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    text = (folder / "tool.md").read_text(encoding="utf-8")
    (folder / "tool.md").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    load = load_tool_folder(folder)
    assert load.tool is not None and load.diagnostics == ()
    assert load.tool.description == "Does a thing."


def test_frozen_values(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(env=["A"])))
    assert load.tool is not None
    with pytest.raises(TypeError):
        load.tool.input_schema["type"] = "array"  # type: ignore[index]
    assert isinstance(load.diagnostics, tuple)
    assert isinstance(load.tool.env, tuple)


def test_known_fields() -> None:
    assert TOOL_FOLDER_FIELDS == (
        "name",
        "script",
        "runtime",
        "inputSchema",
        "outputSchema",
        "timeout",
        "requireApproval",
        "dangerous",
        "hasSecurityCheck",
        "securityScript",
        "securityTimeout",
        "env",
        "description",
        "sandbox",
        "permissions",
        "examples",
        "prestart",
        "protocol",
    )


# --- tool.json ------------------------------------------------------------------------------


def make_json_folder(root: Path, data: Any, *, raw: str | None = None) -> Path:
    folder = root / "jtool"
    folder.mkdir()
    (folder / "tool.json").write_text(raw if raw is not None else json.dumps(data), "utf-8")
    (folder / "script.ts").write_text("", encoding="utf-8")
    return folder


WORD_COUNT_JSON = {
    "name": "word-count",
    "description": "Count words, lines, and characters in a file.",
    "script": "script.ts",
    "runtime": "bun",
    "inputSchema": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
    "outputSchema": {"type": "object", "properties": {"words": {"type": "number"}}},
    "timeout": 10000,
    "requireApproval": True,
    "dangerous": True,
    "hasSecurityCheck": True,
    "securityScript": "script.ts",
    "securityTimeout": 3000,
    "env": ["API_BASE"],
}


def test_tool_json_equivalent(tmp_path: Path) -> None:
    folder = make_json_folder(tmp_path, WORD_COUNT_JSON)
    load = load_tool_folder(folder)
    assert load.diagnostics == ()
    tool = load.tool
    assert tool is not None
    script = str((folder / "script.ts").resolve())
    assert tool.id == "local:word-count"
    assert tool.description == "Count words, lines, and characters in a file."
    assert script_entry(tool) == ScriptEntry(script, "bun")
    assert tool.timeout == 10.0
    assert tool.approval == ApprovalSpec(required=True)
    assert tool.display == DisplaySpec(dangerous=True)
    assert tool.side_effect is SideEffect.CODE_EXECUTION
    assert tool.security_check == SecurityCheckSpec(script=script, timeout=3.0)
    assert tool.env == ("API_BASE",)
    assert tool.input_schema_dict() == WORD_COUNT_JSON["inputSchema"]
    assert tool.output_schema_dict() == WORD_COUNT_JSON["outputSchema"]
    assert tool.source == ToolSource(SourceFormat.TOOL_FOLDER, str(folder / "tool.json"))


def test_tool_json_without_description_warns(tmp_path: Path) -> None:
    data = {k: v for k, v in WORD_COUNT_JSON.items() if k != "description"}
    load = load_tool_folder(make_json_folder(tmp_path, data))
    assert load.tool is not None and load.tool.description == "word-count"
    [warning] = warnings(load)
    assert warning.field == "description"


def test_tool_json_not_an_object(tmp_path: Path) -> None:
    error = only_error(load_tool_folder(make_json_folder(tmp_path, None, raw="\n  [1, 2]")), None)
    assert "JSON object" in error.message and "line 2, column 3" in error.message
    assert error.path.endswith("tool.json")


def test_tool_json_syntax_error_has_line_and_column(tmp_path: Path) -> None:
    raw = '{\n  "name": "x",\n  "script": \n}'
    error = only_error(load_tool_folder(make_json_folder(tmp_path, None, raw=raw)), None)
    assert "invalid JSON at line 4, column 1" in error.message


def test_tool_json_duplicate_key_and_nan(tmp_path: Path) -> None:
    raw = '{"name": "a", "name": "b"}'
    error = only_error(load_tool_folder(make_json_folder(tmp_path, None, raw=raw)), None)
    assert "duplicate key 'name'" in error.message
    (tmp_path / "jtool" / "tool.json").write_text('{"timeout": NaN}')
    error = only_error(load_tool_folder(tmp_path / "jtool"), None)
    assert "NaN" in error.message


def test_tool_json_deep_nesting(tmp_path: Path) -> None:
    raw = '{"inputSchema": ' + "[" * 100_000 + "]" * 100_000 + "}"
    load = load_tool_folder(make_json_folder(tmp_path, None, raw=raw))
    only_error(load, None)


def test_both_files_use_tool_md_and_warn(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "tool.json").write_text("{}")
    load = load_tool_folder(folder)
    assert load.tool is not None
    assert load.tool.source.location == str(folder / "tool.md")
    [warning] = warnings(load)
    assert warning.path == str(folder / "tool.json")
    assert "tool.md" in warning.message


# --- error paths ----------------------------------------------------------------------------


def test_no_declaration(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    load = load_tool_folder(folder)
    error = only_error(load, None)
    assert error.path == str(folder)
    assert "tool.md" in error.message and "tool.json" in error.message


def test_folder_missing(tmp_path: Path) -> None:
    load = load_tool_folder(tmp_path / "nope")
    assert load.tool is None
    [error] = errors(load)
    assert error.path == str(tmp_path / "nope") and "does not exist" in error.message


def test_bad_yaml_reports_the_file_line(tmp_path: Path) -> None:
    front = "name: t\nscript: script.sh\ninputSchema: [1, 2\nruntime: bash\n"
    error = only_error(load_tool_folder(make_folder(tmp_path, front)), None)
    assert error.path == str(tmp_path / "tool" / "tool.md")
    assert "invalid YAML front matter" in error.message
    # The front matter starts on line 2 of tool.md; the error is on line 5 of the file.
    assert "line 5" in error.message


def test_duplicate_front_matter_key(tmp_path: Path) -> None:
    front = MINIMAL_FRONT + "name: other\n"
    error = only_error(load_tool_folder(make_folder(tmp_path, front)), None)
    assert "duplicate key 'name'" in error.message and "line 9" in error.message


def test_front_matter_not_closed(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "tool.md").write_text("---\nname: t\nscript: s.sh\n\nBody\n")
    error = only_error(load_tool_folder(folder), None)
    assert "not closed" in error.message and "tool.md" in error.message


def test_front_matter_missing(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "tool.md").write_text("# Just markdown\n")
    error = only_error(load_tool_folder(folder), None)
    assert "front matter" in error.message and "tool.md" in error.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("---\n---\nbody\n", "empty"),
        ("---\n- a\n---\nbody\n", "mapping"),
        ("---\nhello\n---\nbody\n", "mapping"),
    ],
)
def test_front_matter_not_a_mapping(tmp_path: Path, text: str, expected: str) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "tool.md").write_text(text)
    error = only_error(load_tool_folder(folder), None)
    assert expected in error.message


@pytest.mark.parametrize("field", ["name", "script", "runtime", "inputSchema"])
def test_missing_required_field(tmp_path: Path, field: str) -> None:
    error = only_error(load_tool_folder(make_folder(tmp_path, front_with(**{field: None}))), field)
    assert "required" in error.message


def test_missing_runtime_suggests_one(tmp_path: Path) -> None:
    error = only_error(load_tool_folder(make_folder(tmp_path, front_with(runtime=None))), "runtime")
    assert "script.sh suggests 'bash'" in error.message


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    front = "name: 1\nruntime: ruby\ntimeout: fast\n"
    load = load_tool_folder(make_folder(tmp_path, front))
    assert load.tool is None
    assert {d.field for d in errors(load)} == {
        "name",
        "script",
        "runtime",
        "inputSchema",
        "timeout",
    }


def test_invalid_input_schema_names_the_pointer(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"path": {"type": "strin"}}}
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    error = only_error(load, "inputSchema/properties/path/type")
    assert "/properties/path/type" in error.message
    assert "not a valid JSON Schema" in error.message


def test_invalid_output_schema_is_an_error(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(outputSchema={"type": 5})))
    error = only_error(load, "outputSchema/type")
    assert "not a valid JSON Schema" in error.message


def test_unknown_meta_schema_is_refused_without_fetching(tmp_path: Path) -> None:
    schema = {"$schema": "http://127.0.0.1:9/schema", "type": "object"}
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    error = only_error(load, "inputSchema/$schema")
    assert "unsupported $schema" in error.message


def test_known_meta_schema_is_accepted(tmp_path: Path) -> None:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    assert load.tool is not None and load.diagnostics == ()


def test_script_escaping_with_dotdot(tmp_path: Path) -> None:
    (tmp_path / "x.sh").write_text("echo pwned")
    error = only_error(
        load_tool_folder(make_folder(tmp_path, front_with(script="../x.sh"))), "script"
    )
    assert "outside the tool folder" in error.message
    assert error.path == str(tmp_path / "tool" / "tool.md")


def test_script_absolute_path(tmp_path: Path) -> None:
    outside = tmp_path / "x.sh"
    outside.write_text("echo pwned")
    load = load_tool_folder(make_folder(tmp_path, front_with(script=str(outside))))
    error = only_error(load, "script")
    assert "relative" in error.message


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_script_symlink_outside(tmp_path: Path) -> None:
    outside = tmp_path / "x.sh"
    outside.write_text("echo pwned")
    folder = make_folder(tmp_path, front_with(script="link.sh"))
    (folder / "link.sh").symlink_to(outside)
    error = only_error(load_tool_folder(folder), "script")
    assert "outside the tool folder" in error.message


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_script_symlink_inside_is_fine(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, front_with(script="link.sh"))
    (folder / "link.sh").symlink_to(folder / "script.sh")
    load = load_tool_folder(folder)
    assert load.tool is not None
    assert script_entry(load.tool) == ScriptEntry(str((folder / "script.sh").resolve()), "bash")


def test_script_in_subfolder_is_fine(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, front_with(script="bin/run.sh"), files={})
    (folder / "bin").mkdir()
    (folder / "bin" / "run.sh").write_text("")
    load = load_tool_folder(folder)
    assert load.tool is not None


def test_script_missing(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, files={})
    error = only_error(load_tool_folder(folder), "script")
    assert "does not exist" in error.message and "script.sh" in error.message


def test_script_is_a_folder(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, front_with(script="sub"), files={})
    (folder / "sub").mkdir()
    error = only_error(load_tool_folder(folder), "script")
    assert "not a file" in error.message


@pytest.mark.parametrize("script", [".", "", "a\x00b"])
def test_script_odd_values(tmp_path: Path, script: str) -> None:
    only_error(load_tool_folder(make_folder(tmp_path, front_with(script=script))), "script")


def test_unknown_field_is_a_warning(tmp_path: Path) -> None:
    front = MINIMAL_FRONT + "foo: 1\ninputschema: {}\n"
    load = load_tool_folder(make_folder(tmp_path, front))
    assert load.tool is not None
    found = warnings(load)
    assert [w.field for w in found] == ["foo", "inputschema"]
    assert "unknown field 'foo' (ignored); known fields: name, script" in found[0].message
    assert "did you mean 'inputSchema'" in found[1].message
    assert all(w.path == str(tmp_path / "tool" / "tool.md") for w in found)


def test_billion_laughs_front_matter(tmp_path: Path) -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    front = MINIMAL_FRONT + "\n".join(lines) + "\n"
    error = only_error(load_tool_folder(make_folder(tmp_path, front)), None)
    assert "alias" in error.message


def test_python_tag_front_matter(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    front = MINIMAL_FRONT + f"x: !!python/object/apply:os.system ['touch {marker}']\n"
    error = only_error(load_tool_folder(make_folder(tmp_path, front)), None)
    assert "python/object/apply:os.system" in error.message
    assert "line 9" in error.message
    assert not marker.exists()


def test_oversized_declaration(tmp_path: Path) -> None:
    folder = make_folder(tmp_path, body="x" * (1024 * 1024))
    error = only_error(load_tool_folder(folder), None)
    assert "larger than 1048576 bytes" in error.message


def test_not_utf8(tmp_path: Path) -> None:
    folder = make_folder(tmp_path)
    (folder / "tool.md").write_bytes(b"---\nname: caf\xe9\n---\n")
    error = only_error(load_tool_folder(folder), None)
    assert "UTF-8" in error.message


def test_bad_namespace_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        load_tool_folder(make_folder(tmp_path), namespace="has space")


def test_diagnostic_str_names_file_and_field(tmp_path: Path) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(timeout="fast")))
    [error] = errors(load)
    assert str(error).startswith(f"{tmp_path / 'tool' / 'tool.md'}: timeout: ")


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        (
            {"type": "object", "properties": {"a": {"$ref": "http://127.0.0.1:9/x.json"}}},
            "inputSchema/properties/a/$ref",
        ),
        ({"type": "object", "$ref": "other.json"}, "inputSchema/$ref"),
        (
            {"type": "object", "anyOf": [{"$dynamicRef": "https://example.com/s"}]},
            "inputSchema/anyOf/0/$dynamicRef",
        ),
    ],
)
def test_references_outside_the_schema_are_refused(
    tmp_path: Path, schema: dict[str, Any], field: str
) -> None:
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    error = only_error(load, field)
    assert "never fetches" in error.message


def test_local_references_and_ref_shaped_data_are_fine(tmp_path: Path) -> None:
    schema = {
        "type": "object",
        "$defs": {"name": {"type": "string"}},
        "properties": {
            "a": {"$ref": "#/$defs/name"},
            "b": {"const": {"$ref": "http://example.com"}},
            "$ref": {"type": "string"},
        },
    }
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    assert load.tool is not None and load.diagnostics == ()


def test_merge_key_in_front_matter_is_refused(tmp_path: Path) -> None:
    front = MINIMAL_FRONT + "base: &b {a: 1}\nextra:\n  <<: *b\n"
    error = only_error(load_tool_folder(make_folder(tmp_path, front)), None)
    assert "merge keys (<<) are not supported" in error.message
    assert "line 11, column 3" in error.message


# --- schemas that pass the meta-schema but cannot be compiled -------------------------------


@pytest.mark.parametrize("field", ["inputSchema", "outputSchema"])
def test_schema_that_cannot_compile_is_an_error(tmp_path: Path, field: str) -> None:
    schema = {"type": "object", "properties": {"x": {"$ref": "#/definitions/missing"}}}
    load = load_tool_folder(make_folder(tmp_path, front_with(**{field: schema})))
    error = only_error(load, field)
    assert f"'{field}' cannot be compiled" in error.message
    assert "/definitions/missing" in error.message
    assert "\n" not in error.message


def test_compile_error_names_where_in_the_schema(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": "("}}}
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    error = only_error(load, "inputSchema")
    assert "regex" in error.message and '["properties"]["x"]' in error.message


@pytest.mark.parametrize(
    "dialect",
    [
        "https://json-schema.org/draft-07/schema#",  # the meta-schema accepts it, compiling not
        "http://json-schema.org/schema#",
    ],
)
def test_meta_schema_the_gateway_cannot_compile_is_refused(tmp_path: Path, dialect: str) -> None:
    schema = {"$schema": dialect, "type": "object"}
    load = load_tool_folder(make_folder(tmp_path, front_with(inputSchema=schema)))
    error = only_error(load, "inputSchema/$schema")
    assert "unsupported $schema" in error.message


@pytest.mark.parametrize(
    "dialect",
    [
        "http://json-schema.org/draft-04/schema#",
        "http://json-schema.org/draft-06/schema",
        "http://json-schema.org/draft-07/schema#",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    ],
)
def test_every_known_meta_schema_is_accepted(tmp_path: Path, dialect: str) -> None:
    schema = {"$schema": dialect, "type": "object"}
    load = load_tool_folder(make_folder(tmp_path, front_with(outputSchema=schema)))
    assert load.tool is not None and load.diagnostics == ()


# --- the file system refusing access: a diagnostic, never an exception ----------------------


def deny(monkeypatch: pytest.MonkeyPatch, method: str, target: Path) -> None:
    """Make ``Path.<method>`` raise PermissionError for ``target`` (as a mode-000 folder does)."""
    original = getattr(Path, method)

    def denied(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self == target:
            raise PermissionError(13, "Permission denied", str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, method, denied)


def test_unreadable_folder_is_a_diagnostic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_folder(tmp_path)
    deny(monkeypatch, "stat", folder)
    error = only_error(load_tool_folder(folder), None)
    assert error.path == str(folder)
    assert "cannot access the tool folder: Permission denied" in error.message


@pytest.mark.parametrize("method", ["stat", "open"])
def test_unreadable_tool_md_is_a_diagnostic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    folder = make_folder(tmp_path)
    deny(monkeypatch, method, folder / "tool.md")
    error = only_error(load_tool_folder(folder), None)
    assert error.path == str(folder / "tool.md")
    assert "Permission denied" in error.message


def test_unreadable_tool_md_does_not_fall_back_to_tool_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_json_folder(tmp_path, WORD_COUNT_JSON)
    deny(monkeypatch, "stat", folder / "tool.md")
    error = only_error(load_tool_folder(folder), None)
    assert error.path == str(folder / "tool.md")
    assert "cannot access the file: Permission denied" in error.message


def test_unreadable_tool_json_is_a_diagnostic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_json_folder(tmp_path, WORD_COUNT_JSON)
    deny(monkeypatch, "stat", folder / "tool.json")
    error = only_error(load_tool_folder(folder), None)
    assert error.path == str(folder / "tool.json")
    assert "Permission denied" in error.message


def test_unreadable_script_is_a_diagnostic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_folder(tmp_path)
    script = (folder / "script.sh").resolve()
    deny(monkeypatch, "stat", script)
    error = only_error(load_tool_folder(folder), "script")
    assert error.path == str(folder / "tool.md")
    assert f"cannot access the script 'script.sh' ({script}): Permission denied" in error.message


def test_unreadable_security_script_is_a_diagnostic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    front = front_with(hasSecurityCheck=True, securityScript="check.sh")
    folder = make_folder(tmp_path, front, files={"script.sh": "", "check.sh": ""})
    check = (folder / "check.sh").resolve()
    deny(monkeypatch, "stat", check)
    error = only_error(load_tool_folder(folder), "securityScript")
    assert f"cannot access the security script 'check.sh' ({check})" in error.message
    assert "Permission denied" in error.message


@pytest.mark.parametrize("which", ["folder", "script"])
def test_unresolvable_paths_are_diagnostics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    folder = make_folder(tmp_path)
    target = folder if which == "folder" else folder.resolve() / "script.sh"
    deny(monkeypatch, "resolve", target)
    load = load_tool_folder(folder)
    assert load.tool is None
    assert any("Permission denied" in d.message for d in errors(load)), load.diagnostics


def test_mode_000_folder_is_a_diagnostic(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("running as root: DAC override makes file permissions moot")
    folder = make_folder(tmp_path)
    folder.chmod(0)
    try:
        load = load_tool_folder(folder)
    finally:
        folder.chmod(0o755)
    error = only_error(load, None)
    assert error.path == str(folder / "tool.md")
    assert "Permission denied" in error.message


def test_the_script_and_security_script_contents_are_part_of_the_definition(tmp_path: Path) -> None:
    front = MINIMAL_FRONT + "hasSecurityCheck: true\nsecurityScript: security.sh\n"
    folder = make_folder(tmp_path, front, files={"script.sh": "echo {}", "security.sh": "echo 1"})
    first = load_tool_folder(folder).tool
    (folder / "script.sh").write_text("echo '{\"changed\": true}'", encoding="utf-8")
    second = load_tool_folder(folder).tool
    (folder / "security.sh").write_text("echo 2", encoding="utf-8")
    third = load_tool_folder(folder).tool
    assert first is not None and second is not None and third is not None
    hashes = {first.definition_hash, second.definition_hash, third.definition_hash}
    assert len(hashes) == 3
