"""Kubernetes-style resources: loading, mapping, diagnostics, functions, os commands, policies."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway_support import gateway_with
from toolgate import Gateway
from toolgate.errors import ConfigError
from toolgate.formats._common.diagnostics import Severity
from toolgate.formats.detect import detect_format, validate_path
from toolgate.formats.resource.parse import load_resources, parse_resources, tool_document
from toolgate.formats.resource.source import ResourceSource
from toolgate.model import (
    ImplementationKind,
    McpEntry,
    RestEndpoint,
    SandboxMode,
    SideEffect,
    SourceFormat,
)
from toolgate.model.policy import PolicyAction

FIXTURES = Path(__file__).parent / "fixtures" / "resources"
SEED = FIXTURES / "zendesk.yaml"


def _seed() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(SEED.read_text(encoding="utf-8"))
    return document


def _write(folder: Path, *documents: Any, name: str = "resources.yaml") -> Path:
    path = folder / name
    path.write_text(
        "\n---\n".join(yaml.safe_dump(d, sort_keys=False) for d in documents), encoding="utf-8"
    )
    return path


# -- the seed's example ------------------------------------------------------------------------


def test_the_seed_example_maps_every_field_onto_the_tool() -> None:
    loaded = load_resources(SEED)
    assert loaded.diagnostics == []
    (resource,) = loaded.tools
    tool = resource.tool
    assert resource.type == "rest"
    assert tool.id == "support-platform:zendesk.create_ticket"
    assert tool.namespace == "support-platform"
    assert tool.kind is ImplementationKind.REST
    assert tool.description == "Create a Zendesk support ticket on behalf of a customer."
    assert tool.entry == RestEndpoint(
        "POST",
        "https://example.zendesk.com/api/v2/tickets.json",
        auth_type="bearer",
        secret_ref="zendesk-api-token",
    )
    assert tool.secrets == ("zendesk-api-token",)  # so the audit log redacts the token
    assert tool.input_schema_dict()["required"] == ["subject", "body"]
    assert tool.output_schema_dict() == {
        "type": "object",
        "properties": {"ticketUrl": {"type": "string"}, "ticketId": {"type": "integer"}},
    }
    assert tool.side_effect is SideEffect.EXTERNAL_WRITE
    assert tool.idempotency.idempotent is False
    assert tool.hints.idempotent is False
    assert tool.approval.required is True
    assert tool.idempotency.key_template == "zendesk-{{ args.subject | hash }}"
    assert tool.safety.allowed_agents == ("support-triage", "support-escalation")
    assert tool.safety.denied_namespaces == ("sandbox",)
    assert tool.safety.rate_limit is not None
    assert (tool.safety.rate_limit.calls_per_minute, tool.safety.rate_limit.calls_per_day) == (
        10,
        500,
    )
    assert tool.observability.log_args and tool.observability.log_result
    assert tool.observability.redact_fields == ("args.body", "args.customer_email")
    assert tool.timeout == 30.0
    assert tool.source.format is SourceFormat.RESOURCE
    assert tool.source.location == str(SEED)


def test_status_is_an_output_and_ignored_on_input() -> None:
    document = _seed()
    without = copy.deepcopy(document)
    del without["status"]
    document["status"] = {"phase": "Failed", "anything": [1, 2, 3]}
    first = parse_resources(yaml.safe_dump(document), source="a.yaml").tools[0].tool
    second = parse_resources(yaml.safe_dump(without), source="a.yaml").tools[0].tool
    assert first == second


def test_a_tool_written_back_as_a_resource_loads_as_the_same_tool() -> None:
    tool = load_resources(SEED).tools[0].tool
    document = tool_document(tool, {"phase": "Ready", "totalCalls7d": 3, "failureRate7d": 0.0})
    assert document["status"]["totalCalls7d"] == 3
    again = parse_resources(yaml.safe_dump(document), source=str(SEED))
    assert again.diagnostics == []
    assert again.tools[0].tool == tool


def test_the_format_is_detected_and_validated_for_files_and_folders() -> None:
    assert detect_format(SEED) == "resource"
    assert detect_format(FIXTURES / "folder") == "resource"
    assert validate_path(SEED) == ("resource", [])
    name, problems = validate_path(FIXTURES / "folder")
    assert (name, problems) == ("resource", [])


def test_the_default_namespace_is_default(tmp_path: Path) -> None:
    document = _seed()
    del document["metadata"]["namespace"]
    (resource,) = load_resources(_write(tmp_path, document)).tools
    assert resource.tool.id == "default:zendesk.create_ticket"


def test_defaults_by_type(tmp_path: Path) -> None:
    document = _seed()
    del document["spec"]["sideEffects"]
    (resource,) = load_resources(_write(tmp_path, document)).tools
    # An undeclared REST tool is external_write: it asks for approval by default.
    assert resource.tool.side_effect is SideEffect.EXTERNAL_WRITE
    assert resource.tool.requires_approval


# -- diagnostics -------------------------------------------------------------------------------


def _set(document: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    target = document
    for part in parents:
        target = target[part]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value


_DELETE = object()
_URL = "https://example.zendesk.com/api/v2"

BROKEN = [
    ("apiVersion", "joch.dev/v2", "/apiVersion", "unsupported version"),
    ("kind", "Tol", "/kind", "did you mean 'Tool'"),
    ("spec.type", "grpc", "/spec/type", "expected one of function, rest, mcp, os"),
    ("spec.endpoint.method", "FETCH", "/spec/endpoint/method", "expected one of GET, POST"),
    (
        "spec.endpoint.url",
        "https://{subject}.zendesk.com/x",
        "/spec/endpoint/url",
        "placeholders may fill only the path and the query",
    ),
    (
        "spec.endpoint.url",
        f"{_URL}/t/{{ticket}}",
        "/spec/endpoint/url",
        "placeholder {ticket} must name a property of inputSchema",
    ),
    (
        "spec.endpoint.url",
        f"{_URL}/t/{{priority}}",
        "/spec/endpoint/url",
        "placeholder {priority} must name a required property",
    ),
    (
        "spec.endpoint.url",
        "https://user:pw@example.zendesk.com/x",
        "/spec/endpoint/url",
        "must not hold credentials",
    ),
    (
        "spec.endpoint.url",
        "ftp://example.com/x",
        "/spec/endpoint/url",
        "expected an absolute http or https URL",
    ),
    ("spec.endpoint.url", f"{_URL}/t/{{subject", "/spec/endpoint/url", "matching braces"),
    ("spec.endpoint.timeout", "soon", "/spec/endpoint/timeout", "expected a positive duration"),
    ("spec.endpoint.auth.type", "basic", "/spec/endpoint/auth/type", "expected one of bearer"),
    (
        "spec.endpoint.auth.secretRef.name",
        _DELETE,
        "/spec/endpoint/auth/secretRef/name",
        "is required",
    ),
    (
        "spec.endpoint.auth.secretRef.name",
        "has space",
        "/spec/endpoint/auth/secretRef/name",
        "expected a secret name",
    ),
    ("spec.description", _DELETE, "/spec/description", "is required"),
    ("spec.inputSchema.type", "array", "/spec/inputSchema/type", "expected 'object'"),
    (
        "spec.inputSchema.properties.subject.type",
        5,
        "/spec/inputSchema",
        "expected a valid JSON Schema",
    ),
    ("spec.inputSchema", _DELETE, "/spec/inputSchema", "is required"),
    (
        "spec.sideEffects.level",
        "dangerous",
        "/spec/sideEffects/level",
        "expected one of read_only, local_write",
    ),
    (
        "spec.sideEffects.requiresApproval",
        "yes",
        "/spec/sideEffects/requiresApproval",
        "expected true or false, got string 'yes'",
    ),
    (
        "spec.sideEffects.idempotencyKey",
        "x",
        "/spec/sideEffects/idempotencyKey",
        "did you mean 'idempotencyKeyTemplate'",
    ),
    (
        "spec.safety.rateLimit.callsPerMinute",
        0,
        "/spec/safety/rateLimit/callsPerMinute",
        "expected a whole number >= 1",
    ),
    (
        "spec.safety.allowedAgents",
        "support-triage",
        "/spec/safety/allowedAgents",
        "expected a list of strings",
    ),
    (
        "spec.observability.redactFields",
        ["body"],
        "/spec/observability/redactFields/0",
        "expected a path starting with 'args.' or 'result.'",
    ),
    ("spec.observability.logArgs", "no", "/spec/observability/logArgs", "expected true or false"),
    ("spec.saftey", {}, "/spec/saftey", "did you mean 'safety'"),
    ("spec.command", ["ls"], "/spec/command", "is only for type: os"),
    ("metadata.name", _DELETE, "/metadata/name", "is required"),
    ("metadata.namespace", "support platform", "/metadata/namespace", "expected letters, digits"),
    ("metadata.owner", "me", "/metadata/owner", "unknown field 'owner'"),
    ("statuz", {}, "/statuz", "unknown field 'statuz'"),
]


@pytest.mark.parametrize(("field", "value", "pointer", "expected"), BROKEN)
def test_a_broken_field_gives_a_precise_diagnostic(
    tmp_path: Path, field: str, value: Any, pointer: str, expected: str
) -> None:
    document = _seed()
    _set(document, field, value)
    path = _write(tmp_path, document)
    problems = [d for d in ResourceSource.validate(path) if d.severity is Severity.ERROR]
    assert problems, f"no error for {field}={value!r}"
    matching = [d for d in problems if d.field == f"document 1: {pointer}"]
    assert matching, [str(d) for d in problems]
    assert any(expected in d.message for d in matching), [str(d) for d in matching]
    assert all(d.path == str(path) for d in problems)
    # A resource that does not validate registers nothing.
    assert load_resources(path).tools == []


def test_http_with_a_token_warns(tmp_path: Path) -> None:
    document = _seed()
    document["spec"]["endpoint"]["url"] = "http://example.zendesk.com/api"
    problems = ResourceSource.validate(_write(tmp_path, document))
    assert [(d.severity, d.field) for d in problems] == [
        (Severity.WARNING, "document 1: /spec/endpoint/url")
    ]
    assert "unencrypted" in problems[0].message


def test_diagnostics_name_the_document_in_a_multi_document_file(tmp_path: Path) -> None:
    good = _seed()
    duplicate = _seed()
    other = _seed()
    other["metadata"]["name"] = "other"
    path = tmp_path / "many.yaml"
    path.write_text(
        "\n---\n".join(
            [
                yaml.safe_dump(good),
                "apiVersion: joch.dev/v1alpha1\nkind: Tool\nmetadata: {name: [unclosed\n",
                "just a string",
                yaml.safe_dump(duplicate),
                yaml.safe_dump(other),
                "# only a comment",
                "apiVersion: joch.dev/v1alpha1\nkind: Policy\nmetadata: {name: p}\nspec: {}\n",
            ]
        ),
        encoding="utf-8",
    )
    loaded = load_resources(path)
    # The good documents load even though others in the file are broken.
    assert [r.tool.name for r in loaded.tools] == ["zendesk.create_ticket", "other"]
    found = {(d.field or "").split(":")[0]: d.message for d in loaded.diagnostics}
    assert set(found) == {"document 2", "document 3", "document 4", "document 6"}
    assert "line" in found["document 2"]  # a YAML syntax error says where
    assert "expected a resource object" in found["document 3"]
    assert "already declared in" in found["document 4"]
    assert "not a valid Policy" in found["document 6"] and "rules" in found["document 6"]


def test_unknown_kinds_and_foreign_documents_are_diagnostics(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {"apiVersion": "joch.dev/v1alpha1", "kind": "Agent", "metadata": {"name": "a"}},
        {"apiVersion": "apps/v1", "kind": "Deployment"},
    )
    problems = load_resources(path).diagnostics
    assert [(d.field, d.severity) for d in problems] == [
        ("document 1: /kind", Severity.ERROR),
        ("document 2: /apiVersion", Severity.ERROR),
    ]
    assert "expected one of Tool, Policy, MCPServer" in problems[0].message
    assert "expected 'joch.dev/v1alpha1'" in problems[1].message


def test_mcp_server_documents_are_checked_in_this_format_notation(tmp_path: Path) -> None:
    server = {"apiVersion": "joch.dev/v1alpha1", "kind": "MCPServer", "metadata": {"name": "m"}}
    path = _write(tmp_path, _seed(), server)
    problems = ResourceSource.validate(path)
    assert problems, "an MCPServer without a spec must not pass"
    assert all((d.field or "").startswith("document 2") for d in problems), [
        str(d) for d in problems
    ]


def test_an_empty_folder_and_a_missing_path_are_diagnostics(tmp_path: Path) -> None:
    assert "no .yaml" in load_resources(tmp_path).diagnostics[0].message
    assert "no such file" in load_resources(tmp_path / "nope").diagnostics[0].message


def test_an_mcp_tool_reaches_the_mcp_servers_with_the_operator_fields(tmp_path: Path) -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "create_issue", "namespace": "dev"},
        "spec": {
            "type": "mcp",
            "mcpServerRef": {"name": "github", "toolName": "issues.create"},
            "safety": {"allowedAgents": ["triage"]},
        },
    }
    (resource,) = load_resources(_write(tmp_path, document)).tools
    ref = resource.tool
    assert ref.kind is ImplementationKind.MCP
    assert ref.entry == McpEntry("github", "issues.create")
    # Left to the server: the description and the input schema.
    assert (ref.description, ref.input_schema_dict()) == ("", {"type": "object"})
    assert not resource.declared_input_schema
    assert ref.side_effect is SideEffect.EXTERNAL_WRITE
    with Gateway() as gateway:
        load = gateway.add_source(tmp_path / "resources.yaml")
        entry = gateway.registry.get("dev:create_issue")
    # No MCPServer named github: the tool is listed, unavailable, and the file says why.
    assert entry is not None and entry.unavailable_reason is not None
    assert "github" in entry.unavailable_reason
    assert any("github" in d.message for d in load.diagnostics)


# -- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"hostmode": True}, "unknown option(s) hostmode"),
        ({"host_mode": "yes"}, "host_mode: expected true, false or a list of tool ids"),
        ({"endpoint_origins": {"https://a.example.com/api": "http://127.0.0.1:1"}}, "origins"),
        ({"endpoint_origins": {"https://a.example.com": "not a url"}}, "origins"),
        ({"reload_interval": -1}, "reload_interval"),
    ],
)
def test_bad_source_options_are_configuration_errors(
    options: dict[str, Any], expected: str
) -> None:
    with Gateway() as gateway, pytest.raises(ConfigError, match="options") as raised:
        gateway.add_source(SEED, options=options)
    assert expected in raised.value.message


# -- policies ----------------------------------------------------------------------------------


def test_a_file_of_tools_and_policies_yields_both() -> None:
    with Gateway() as gateway:
        load = gateway.add_source(FIXTURES / "orders.yaml")
    assert load.diagnostics == []
    assert [e.tool.id for e in load.entries] == ["orders:lookup_order"]
    (policy,) = load.policies
    assert policy.name == "interns-see-no-orders"
    assert policy.agents == ("intern-bot",)
    assert policy.rules[0].action is PolicyAction.DENY


def test_a_policy_deny_beats_the_tool_allow() -> None:
    # The tool allows intern-bot (safety.allowedAgents); the Policy in the same file denies it.
    with Gateway() as gateway:
        gateway.add_source(FIXTURES / "orders.yaml")
        allowed = gateway.call_sync(
            "orders:lookup_order", {"order_id": "A1"}, agent="support-triage"
        )
        denied = gateway.call_sync("orders:lookup_order", {"order_id": "A1"}, agent="intern-bot")
        assert allowed.status == "ok", allowed.message
        # Denied, the tool does not exist for intern-bot; the rule is for the operator only.
        assert denied.code == "tool_not_found"
        assert "interns" not in (denied.message or "")
        assert [t.id for t in gateway.list_tools(agent="intern-bot")] == []
        assert [t.id for t in gateway.list_tools(agent="support-triage")] == ["orders:lookup_order"]


def test_a_folder_loads_its_files_together() -> None:
    with Gateway() as gateway:
        load = gateway.add_source(FIXTURES / "folder")
        assert load.diagnostics == []
        assert sorted(e.tool.id for e in load.entries) == ["billing:basename", "billing:refund"]
        assert [p.name for p in load.policies] == ["no-money-for-bots"]
        # A dotted import path (posixpath:basename), bound like Gateway.add binds a function.
        outcome = gateway.call_sync("billing:basename", {"p": "/srv/data/report.csv"})
        assert outcome.content == "report.csv"


def test_a_tool_declared_in_two_files_of_a_folder_is_reported_once(tmp_path: Path) -> None:
    _write(tmp_path, _seed(), name="a.yaml")
    _write(tmp_path, _seed(), name="b.yaml")
    loaded = load_resources(tmp_path)
    assert len(loaded.tools) == 1
    (problem,) = loaded.diagnostics
    assert problem.path == str(tmp_path / "b.yaml")
    assert str(tmp_path / "a.yaml") in problem.message


# -- type: function ----------------------------------------------------------------------------


def test_a_function_tool_runs_with_the_resource_fields_authoritative() -> None:
    with Gateway() as gateway:
        gateway.add_source(FIXTURES / "orders.yaml")
        tool = gateway.get_tool("orders:lookup_order")
        assert tool.kind is ImplementationKind.PYTHON
        assert tool.description == "Look up an order and its shipping status."
        assert tool.side_effect is SideEffect.READ_ONLY
        assert tool.entry is not None and tool.entry.code_digest  # type: ignore[union-attr]
        ok = gateway.call_sync("orders:lookup_order", {"order_id": "A1"}, agent="support-triage")
        assert ok.content == {"orderId": "A1", "status": "shipped", "verbose": False}
        failed = gateway.call_sync(
            "orders:lookup_order", {"order_id": "boom"}, agent="support-triage"
        )
        assert failed.code == "tool_error"
        assert "the order service is down" in (failed.message or "")
        wrong = gateway.call_sync("orders:lookup_order", {"order_id": 5}, agent="support-triage")
        assert wrong.code == "invalid_arguments"


def test_a_decorated_function_is_bound_with_the_resource_description() -> None:
    with Gateway() as gateway:
        gateway.add_source(FIXTURES / "folder")
        tool = gateway.get_tool("billing:refund")
        assert tool.description == "Refund part of an order."
        assert tool.side_effect is SideEffect.FINANCIAL
        assert not tool.requires_approval
        outcome = gateway.call_sync("billing:refund", {"order_id": "A1", "amount": 2.5})
        assert outcome.content == {"orderId": "A1", "refunded": 2.5}


def _function_tool(folder: Path, function: str, schema: dict[str, Any] | None) -> Path:
    spec: dict[str, Any] = {"type": "function", "function": function, "description": "Look up."}
    if schema is not None:
        spec["inputSchema"] = schema
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "f", "namespace": "t"},
        "spec": spec,
    }
    return _write(folder, document)


def test_without_an_input_schema_the_signature_gives_it(tmp_path: Path) -> None:
    path = _function_tool(tmp_path, f"{FIXTURES / 'handlers.py'}:lookup_order", None)
    with Gateway() as gateway:
        gateway.add_source(path)
        schema = gateway.get_tool("t:f").input_schema_dict()
    assert schema["required"] == ["order_id"]
    assert set(schema["properties"]) == {"order_id", "verbose"}


@pytest.mark.parametrize(
    ("schema", "pointer", "expected"),
    [
        (
            {
                "type": "object",
                "required": ["order_id"],
                "properties": {"order_id": {"type": "string"}, "customer": {"type": "string"}},
            },
            "/spec/inputSchema/properties/customer",
            "has no parameter 'customer'",
        ),
        (
            {"type": "object", "properties": {"order_id": {"type": "string"}}},
            "/spec/inputSchema/required",
            "parameter 'order_id' of ",
        ),
    ],
)
def test_a_signature_that_does_not_match_the_schema_is_a_diagnostic(
    tmp_path: Path, schema: dict[str, Any], pointer: str, expected: str
) -> None:
    path = _function_tool(tmp_path, f"{FIXTURES / 'handlers.py'}:lookup_order", schema)
    with Gateway() as gateway:
        load = gateway.add_source(path)
        assert load.entries == []
        assert "t:f" not in gateway.registry
    (problem,) = load.diagnostics
    assert problem.field == f"document 1: {pointer}"
    assert expected in problem.message


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        ("./nope.py:f", "no such file"),
        ("json:no_such_function", "cannot import 'json:no_such_function'"),
        ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz:f'"),
        ("json:decoder", "is a module, not a function"),
    ],
)
def test_a_function_that_cannot_be_bound_is_a_diagnostic(
    tmp_path: Path, function: str, expected: str
) -> None:
    schema = {"type": "object", "properties": {}}
    path = _function_tool(tmp_path, function, schema)
    with Gateway() as gateway:
        load = gateway.add_source(path)
    assert load.entries == []
    messages = [d.message for d in load.diagnostics if d.field == "document 1: /spec/function"]
    assert any(expected in m for m in messages), [str(d) for d in load.diagnostics]


def test_validate_never_imports_the_function(tmp_path: Path) -> None:
    module = tmp_path / "loud.py"
    marker = tmp_path / "imported"
    module.write_text(f"open({str(marker)!r}, 'w').close()\ndef f() -> int:\n    return 1\n")
    path = _function_tool(tmp_path, "./loud.py:f", {"type": "object", "properties": {}})
    assert ResourceSource.validate(path) == []
    assert not marker.exists()
    with Gateway() as gateway:
        gateway.add_source(path)  # loading does import it
    assert marker.exists()


# -- type: os ----------------------------------------------------------------------------------

_ECHO = """\
#!{python}
import json, os, sys
payload = json.load(sys.stdin)
open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ran"), "w").close()
if payload.get("fail"):
    print("disk on fire", file=sys.stderr)
    sys.exit(3)
print(json.dumps({"got": payload["path"], "secretEnv": os.environ.get("TOP_SECRET")}))
"""


def _os_tools(folder: Path) -> Path:
    script = folder / "echo.py"
    script.write_text(_ECHO.replace("{python}", sys.executable), encoding="utf-8")
    script.chmod(0o755)
    documents = []
    for name in ("disk-usage", "other"):
        documents.append(
            {
                "apiVersion": "joch.dev/v1alpha1",
                "kind": "Tool",
                "metadata": {"name": name, "namespace": "ops"},
                "spec": {
                    "type": "os",
                    "description": "Report the disk usage of a path.",
                    # A relative program is relative to the resource file.
                    "command": ["./echo.py"],
                    "timeout": "20s",
                    "inputSchema": {
                        "type": "object",
                        "required": ["path"],
                        "properties": {"path": {"type": "string"}, "fail": {"type": "boolean"}},
                    },
                    "sideEffects": {"level": "read_only"},
                },
            }
        )
    return _write(folder, *documents)


def test_os_tools_do_not_run_unless_the_operator_opts_in_to_host_mode(tmp_path: Path) -> None:
    path = _os_tools(tmp_path)
    with Gateway() as gateway:
        gateway.add_source(path)
        entry = gateway.registry.get("ops:disk-usage")
        assert entry is not None and entry.unavailable_reason is not None
        assert "cannot sandbox" in entry.unavailable_reason
        assert "host_mode: true" in entry.unavailable_reason
        assert entry.tool.sandbox.mode is SandboxMode.COMPARTMENT
        outcome = gateway.call_sync("ops:disk-usage", {"path": "/tmp"})
        assert outcome.code == "unavailable"
        assert "host_mode" in (outcome.message or "")
    assert not (tmp_path / "ran").exists()


def test_os_tools_run_in_host_mode_like_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOP_SECRET", "gateway-only")
    path = _os_tools(tmp_path)
    with Gateway() as gateway:
        gateway.add_source(path, options={"host_mode": True})
        tool = gateway.get_tool("ops:disk-usage")
        assert tool.kind is ImplementationKind.OS
        assert tool.sandbox.mode is SandboxMode.HOST
        outcome = gateway.call_sync("ops:disk-usage", {"path": "/var"})
        assert outcome.status == "ok", outcome.message
        # Arguments arrive as JSON on stdin; the gateway's environment does not leak in.
        assert outcome.content == {"got": "/var", "secretEnv": None}
        failed = gateway.call_sync("ops:disk-usage", {"path": "/var", "fail": True})
        assert failed.code == "tool_error"
        assert "exited with code 3" in (failed.message or "")
        assert "disk on fire" in (failed.message or "")
    assert (tmp_path / "ran").exists()


def test_host_mode_can_name_single_tools(tmp_path: Path) -> None:
    path = _os_tools(tmp_path)
    with Gateway() as gateway:
        gateway.add_source(path, options={"host_mode": ["ops:disk-usage"]})
        assert gateway.call_sync("ops:disk-usage", {"path": "/"}).status == "ok"
        assert gateway.call_sync("ops:other", {"path": "/"}).code == "unavailable"


def test_an_os_command_that_is_not_installed_is_unavailable(tmp_path: Path) -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "ghost", "namespace": "ops"},
        "spec": {
            "type": "os",
            "description": "Nothing.",
            "command": ["no-such-program-xyz", "--flag"],
            "inputSchema": {"type": "object"},
        },
    }
    with Gateway() as gateway:
        gateway.add_source(_write(tmp_path, document), options={"host_mode": True})
        outcome = gateway.call_sync("ops:ghost", {})
    assert outcome.code == "unavailable"
    assert "'no-such-program-xyz' is not found on PATH" in (outcome.message or "")


def test_an_os_command_given_as_a_string_is_refused(tmp_path: Path) -> None:
    document = {
        "apiVersion": "joch.dev/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": "sh", "namespace": "ops"},
        "spec": {
            "type": "os",
            "description": "A shell line.",
            "command": "du -sh /",
            "inputSchema": {"type": "object"},
        },
    }
    (problem,) = ResourceSource.validate(_write(tmp_path, document))
    assert problem.field == "document 1: /spec/command"
    assert "list of strings (no shell runs it)" in problem.message


def test_the_catalog_shows_the_source_format(tmp_path: Path) -> None:
    with Gateway() as gateway:
        gateway.add_source(SEED)
        (entry,) = gateway.entries()
    assert entry.tool.source.format is SourceFormat.RESOURCE
    assert json.loads(json.dumps(str(entry.tool.source.format))) == "resource"


async def test_a_running_gateway_reloads_a_changed_resource_file(tmp_path: Path) -> None:
    import asyncio

    document = _seed()
    path = _write(tmp_path, document)
    gateway = gateway_with(secrets={"zendesk-api-token": "t0ken-for-reload"})
    gateway.add_source(path, options={"reload_interval": 0.05})
    await gateway.start()
    try:
        tool_id = "support-platform:zendesk.create_ticket"
        document["spec"]["description"] = "Open a ticket (edited)."
        document["metadata"]["name"] = "zendesk.open_ticket"
        _write(tmp_path, document)
        for _ in range(400):  # a bounded wait for the watch; no timing is asserted
            if tool_id not in gateway.registry:
                break
            await asyncio.sleep(0.025)
        assert tool_id not in gateway.registry
        edited = gateway.get_tool("support-platform:zendesk.open_ticket")
        assert edited.description == "Open a ticket (edited)."
    finally:
        await gateway.aclose()
