"""Jingle capabilities (seed 000): the manifest, its Python tools through the pipeline, and
connections (secrets per capability, availability, agent context)."""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from gateway_support import gateway_with
from toolgate import Gateway, ToolContext, tool
from toolgate.errors import ErrorCode
from toolgate.formats._common.diagnostics import Diagnostic, Severity
from toolgate.formats.capability.manifest import CapabilityManifest, read_manifest
from toolgate.formats.capability.source import CapabilitySource, Connection
from toolgate.formats.detect import detect_format, validate_path
from toolgate.model import ApprovalRequest, CallStatus, ImplementationKind, SideEffect, SourceFormat
from toolgate.secrets import MemorySecretStore

FIXTURES = Path(__file__).parent / "fixtures" / "capabilities"
NOTION = FIXTURES / "notion" / "manifest.yaml"
GITHUB = FIXTURES / "github" / "manifest.json"
NOTION_TOKEN = "secret_notion_token_1234"
GITHUB_TOKEN = "ghp_github_token_5678"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def connected_store() -> MemorySecretStore:
    return MemorySecretStore(
        {
            ("notion", "accessToken"): NOTION_TOKEN,
            ("notion", "apiBaseUrl"): "https://notion.example/v1",
            ("github", "token"): GITHUB_TOKEN,
        }
    )


def source_of(gateway: Gateway, index: int = 0) -> CapabilitySource:
    source = gateway.declarations.sources[index]
    assert isinstance(source, CapabilitySource)
    return source


def errors(diagnostics: list[Diagnostic]) -> list[tuple[str, str | None]]:
    return [(Path(d.path).name, d.field) for d in diagnostics if d.severity is Severity.ERROR]


# --- the seed's manifest ------------------------------------------------------------------------


def test_the_seed_manifest_is_read_as_the_seed_shows_it() -> None:
    check = read_manifest(NOTION)
    assert check.diagnostics == []
    assert check.manifest == CapabilityManifest(
        path=NOTION,
        id="notion",
        title="Notion",
        description="Notion workspace pages, data sources, tasks, and docs.",
        required_preferences=("accessToken",),
        public_preferences=("apiBaseUrl",),
        tool_names=("searchPages", "getPage", "addToPage"),
        guide="Use this capability for Notion work only after the user connects Notion.",
        main=(FIXTURES / "notion" / "tools.py").resolve(),
    )


def test_manifests_are_detected_and_validated_without_importing() -> None:
    assert detect_format(NOTION) == "capability"
    assert detect_format(GITHUB) == "capability"
    assert detect_format(FIXTURES / "notion") == "capability"  # the folder holding it
    # The broken module raises when imported: validating must not import it.
    assert validate_path(FIXTURES / "broken_module" / "manifest.yaml") == ("capability", [])


def test_the_seed_tools_load_with_every_field_mapped() -> None:
    with Gateway(secret_store=connected_store()) as gateway:
        load = gateway.add_source(NOTION)
        assert load.diagnostics == []
        tools = {entry.tool.name: entry.tool for entry in load.entries}
    assert list(tools) == ["searchPages", "getPage", "addToPage"]
    search, add = tools["searchPages"], tools["addToPage"]
    assert search.id == "notion:searchPages"
    assert search.kind is ImplementationKind.PYTHON
    assert search.side_effect is SideEffect.READ_ONLY  # access: read
    assert add.side_effect is SideEffect.EXTERNAL_WRITE  # access: write
    assert not search.requires_approval and add.requires_approval
    assert add.title == "Add to page"
    assert search.input_schema["required"] == ("query",)
    for item in tools.values():
        assert item.capability == "notion"
        assert item.secrets == ("accessToken",)
        assert item.config == ("apiBaseUrl",)
        assert item.source.format is SourceFormat.CAPABILITY
        assert item.source.location == str(NOTION.absolute())


# --- calls through the pipeline ----------------------------------------------------------------


def test_connected_tools_run_through_the_pipeline_with_their_secret_and_settings() -> None:
    with Gateway(secret_store=connected_store()) as gateway:
        gateway.add_source(NOTION)
        search = gateway.call_sync("notion:searchPages", {"query": "roadmap", "limit": 1})
        page = gateway.call_sync("notion:getPage", {"pageId": "p-7"})  # an async handler
        invalid = gateway.call_sync("notion:searchPages", {"query": "x", "limit": 99})
    assert search.status is CallStatus.OK, search.message
    assert search.content == {
        "pages": [{"id": "page-1", "title": "roadmap #1"}],
        "token_sha256": sha(NOTION_TOKEN),
        "secret_names": ["accessToken"],
        "api_base_url": "https://notion.example/v1",
        "capability": "notion",
    }
    assert page.status is CallStatus.OK, page.message
    assert page.content["id"] == "p-7" and page.content["token_sha256"] == sha(NOTION_TOKEN)
    assert invalid.code is ErrorCode.INVALID_ARGUMENTS  # the schema is the pipeline's


def test_a_write_asks_with_the_tools_own_confirmation() -> None:
    asked: list[ApprovalRequest] = []

    def approver(request: ApprovalRequest) -> str:
        asked.append(request)
        return "approve"

    with Gateway(secret_store=connected_store(), approver=approver) as gateway:
        gateway.add_source(NOTION)
        outcome = gateway.call_sync(
            "notion:addToPage", {"pageId": "p-1", "content": "hello"}, wait_for_approval=30
        )
    assert outcome.status is CallStatus.OK, outcome.message
    assert outcome.content["appended"] is True
    [request] = asked
    assert request.title == "Append to a Notion page"
    assert request.risk == "medium"
    assert request.facts == (("Page", "p-1"), ("Content", "hello"))


def test_without_an_approver_a_write_is_refused() -> None:
    with Gateway(secret_store=connected_store()) as gateway:
        gateway.add_source(NOTION)
        outcome = gateway.call_sync("notion:addToPage", {"pageId": "p", "content": "x"})
    assert outcome.code is ErrorCode.USER_REJECTION


# --- connections ----------------------------------------------------------------------------


def test_not_connected_tools_are_unavailable_with_the_settings_hint() -> None:
    with Gateway(secret_store=MemorySecretStore()) as gateway:
        gateway.add_source(NOTION)
        entries = gateway.entries()
        outcome = gateway.call_sync("notion:searchPages", {"query": "x"})
        phases = {status.tool_id: str(status.phase) for status in gateway.statuses()}
    assert [entry.available for entry in entries] == [False, False, False]
    assert outcome.status is CallStatus.ERROR
    assert outcome.code is ErrorCode.UNAVAILABLE
    assert outcome.message == (
        "Tool notion:searchPages is unavailable: the Notion extension is not connected "
        "(missing: accessToken). Ask the user to connect Notion in Settings "
        "(toolgate connect notion), then call this tool again."
    )
    assert set(phases.values()) == {"Unavailable"}


def test_connecting_a_running_gateway_makes_the_tools_available() -> None:
    store = MemorySecretStore()

    async def scenario() -> tuple[Any, Any, Any]:
        gateway = Gateway(secret_store=store)
        gateway.add_source(NOTION, options={"refresh_interval": 0})
        async with gateway:  # starts the sources
            source = source_of(gateway)
            before = await gateway.call("notion:getPage", {"pageId": "a"})
            assert source.refresh() is False  # nothing changed yet
            store.set("notion", "accessToken", NOTION_TOKEN)
            assert source.refresh() is True  # asks the running gateway to reload
            after = await gateway.call("notion:getPage", {"pageId": "a"})
            store.delete("notion", "accessToken")
            # Checked on every call too: disconnecting stops the tools before any refresh.
            gone = await gateway.call("notion:getPage", {"pageId": "a"})
            return before, after, gone

    before, after, gone = asyncio.run(scenario())
    assert before.code is ErrorCode.UNAVAILABLE
    assert after.status is CallStatus.OK, after.message
    assert after.content["token_sha256"] == sha(NOTION_TOKEN)
    assert gone.code is ErrorCode.UNAVAILABLE
    assert "ask the user to connect notion in settings" in gone.message.lower()


def test_a_running_gateway_notices_a_connection_by_itself() -> None:
    store = MemorySecretStore()

    async def scenario() -> bool:
        gateway = Gateway(secret_store=store)
        gateway.add_source(NOTION, options={"refresh_interval": 0.05})
        async with gateway:
            store.set("notion", "accessToken", NOTION_TOKEN)
            deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
            while time.monotonic() < deadline:
                if all(entry.available for entry in gateway.entries()):
                    return True
                await asyncio.sleep(0.05)
            return False

    assert asyncio.run(scenario())


def test_a_capability_without_required_secrets_is_always_connected() -> None:
    with Gateway() as gateway:  # no secret store at all
        gateway.add_source(FIXTURES / "broken_mismatch" / "manifest.yaml")
        outcome = gateway.call_sync("notion-mismatch:searchPages", {"query": "q"})
    assert outcome.status is CallStatus.OK and outcome.content == {"query": "q"}


def test_connection_state_in_the_source() -> None:
    store = MemorySecretStore()
    with Gateway(secret_store=store) as gateway:
        gateway.add_source(NOTION)
        source = source_of(gateway)
        [capability] = source.capabilities
        assert capability.connection == Connection("notion", "Notion", ("accessToken",))
        assert capability.tool_ids == ("notion:searchPages", "notion:getPage", "notion:addToPage")
        store.set("notion", "accessToken", NOTION_TOKEN)
        assert source.connection("notion") == Connection("notion", "Notion")
        assert source.connection("github") is None


# --- secrets reach only their capability -------------------------------------------------------


@tool(secrets=["accessToken", "token"])
def plain(ctx: ToolContext) -> dict[str, Any]:
    """A plain tool that declares the capabilities' secret names."""
    return {"secret_names": sorted(ctx.secrets)}


def test_secrets_reach_only_their_capabilitys_handlers() -> None:
    with Gateway(secret_store=connected_store()) as gateway:
        gateway.add_source(NOTION)
        gateway.add_source(GITHUB)
        gateway.add(plain, namespace="local")
        notion = gateway.call_sync("notion:searchPages", {"query": "q"})
        github = gateway.call_sync("github:whoAmI", {})
        other = gateway.call_sync("local:plain", {})
    assert notion.content["secret_names"] == ["accessToken"]
    assert notion.content["token_sha256"] == sha(NOTION_TOKEN)
    assert github.content == {
        "token_sha256": sha(GITHUB_TOKEN),
        "secret_names": ["token"],
        "config_names": [],
        "capability": "github",
    }
    assert other.status is CallStatus.OK and other.content == {"secret_names": []}


def test_secret_values_never_reach_results_errors_or_the_audit_log(tmp_path: Path) -> None:
    audit = tmp_path / "audit.db"
    with gateway_with(secret_store=connected_store(), audit_path=audit) as gateway:
        gateway.add_source(GITHUB)
        echoed = gateway.call_sync("github:echoToken", {})
        failed = gateway.call_sync("github:failWithToken", {})
        whoami = gateway.call_sync("github:whoAmI", {})
    assert echoed.status is CallStatus.OK
    assert echoed.content == {"token": "[REDACTED]", "note": "the token is [REDACTED]"}
    assert failed.code is ErrorCode.TOOL_ERROR
    assert failed.message is not None and "[REDACTED]" in failed.message
    assert GITHUB_TOKEN not in repr(failed)
    assert whoami.status is CallStatus.OK
    raw = b"".join(
        path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith("audit")
    )
    assert b"github:echoToken" in raw and b"github:whoAmI" in raw  # the calls were recorded
    assert GITHUB_TOKEN.encode() not in raw


def test_a_handler_gets_a_private_copy_of_the_input(tmp_path: Path) -> None:
    audit = tmp_path / "audit.db"
    with gateway_with(
        secret_store=connected_store(), audit_path=audit, approver=lambda r: "approve"
    ) as gw:
        gw.add_source(NOTION)
        outcome = gw.call_sync(
            "notion:addToPage", {"pageId": "p", "content": "original words"}, wait_for_approval=30
        )
    assert outcome.status is CallStatus.OK, outcome.message
    raw = b"".join(
        path.read_bytes() for path in tmp_path.iterdir() if path.name.startswith("audit")
    )
    assert b"original words" in raw and b"changed by the handler" not in raw
    assert NOTION_TOKEN.encode() not in raw


# --- agent context ------------------------------------------------------------------------------


def test_agent_context_gives_guides_and_connect_hints() -> None:
    store = MemorySecretStore({("github", "token"): GITHUB_TOKEN})
    with Gateway(secret_store=store) as gateway:
        gateway.add_source(NOTION)
        gateway.add_source(GITHUB)
        gateway.add_source(FIXTURES / "broken_module" / "manifest.yaml")  # no tools: left out
        text = gateway.agent_context(agent="assistant")
    assert text == (
        "Notion is not connected (tools notion:searchPages, notion:getPage, notion:addToPage): "
        "before reading or writing Notion data, ask the user to connect Notion in Settings "
        "(toolgate connect notion).\n\n"
        "GitHub (tools github:whoAmI, github:echoToken, github:failWithToken): "
        "Use GitHub tools for issues and repositories."
    )


def test_agent_context_gives_the_seed_guide_once_connected() -> None:
    with Gateway(secret_store=connected_store()) as gateway:
        gateway.add_source(NOTION)
        text = gateway.agent_context()
    assert text == (
        "Notion (tools notion:searchPages, notion:getPage, notion:addToPage): "
        "Use this capability for Notion work only after the user connects Notion."
    )


# --- broken declarations ------------------------------------------------------------------------


def test_bad_field_types_name_the_file_and_pointer() -> None:
    path = FIXTURES / "broken_types" / "manifest.json"
    name, diagnostics = validate_path(path)
    assert name == "capability"
    found = {(d.field, d.severity): d.message for d in diagnostics}
    assert all(d.path == str(path) for d in diagnostics)
    error, warning = Severity.ERROR, Severity.WARNING
    assert found == {
        ("/aiCapability/toolName", warning): "unknown field 'toolName' (ignored); did you mean "
        "'toolNames'?; expected one of id, title, description, requiredPreferenceNames, "
        "publicPreferenceNames, toolNames, guide",
        ("/aiCapability/id", error): "expected a string, got number 5",
        ("/aiCapability/title", error): "expected a non-empty string; got ''",
        ("/aiCapability/description", error): "expected a string, got array",
        ("/aiCapability/requiredPreferenceNames/1", error): "expected a preference name (a "
        "string), got number 3",
        ("/aiCapability/requiredPreferenceNames/2", error): "'accessToken' is listed twice "
        "(first at /aiCapability/requiredPreferenceNames/0)",
        ("/aiCapability/publicPreferenceNames", error): "expected an array of preference names, "
        "got string 'apiBaseUrl'",
        ("/aiCapability/toolNames", error): "expected an array of tool names, got string "
        "'searchPages'",
        ("/aiCapability/guide", error): "expected a string, got array",
        ("/main", error): "'../notion/tools.py' resolves to "
        f"{(FIXTURES / 'notion' / 'tools.py').resolve()}, outside the manifest's folder "
        f"{(FIXTURES / 'broken_types').resolve()}",
    }
    with Gateway() as gateway:
        load = gateway.add_source(path)
        assert load.entries == [] and gateway.entries() == []
        assert "Failed" in {str(status.phase) for status in gateway.statuses()}


@pytest.mark.parametrize(
    ("document", "field", "message"),
    [
        ("[1, 2]", None, "expected a JSON object with an 'aiCapability' object, got array"),
        ("aiCapability: notion\nmain: tools.py", "/aiCapability", "got string 'notion'"),
        ("aiCapability: {\n  id: 'a'\n", None, "not valid JSON or YAML: line"),
    ],
)
def test_documents_that_are_not_manifests(
    tmp_path: Path, document: str, field: str | None, message: str
) -> None:
    path = tmp_path / "manifest.yaml"
    path.write_text(document)
    [diagnostic] = read_manifest(path).diagnostics
    assert diagnostic.field == field and message in diagnostic.message


def test_a_preference_is_either_secret_or_public(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "notion" / "tools.py", tmp_path / "tools.py")
    path = tmp_path / "manifest.json"
    path.write_text(
        '{"aiCapability": {"id": "n", "title": "N", "description": "d", "toolNames": ["x"],'
        ' "requiredPreferenceNames": ["key"], "publicPreferenceNames": ["url", "key"]},'
        ' "main": "tools.py"}'
    )
    [diagnostic] = read_manifest(path).diagnostics
    assert diagnostic.field == "/aiCapability/publicPreferenceNames/1"
    assert "also in requiredPreferenceNames (/aiCapability/requiredPreferenceNames/0)" in (
        diagnostic.message
    )


def test_a_toolnames_mismatch_names_both_sides_and_loads_the_rest() -> None:
    path = FIXTURES / "broken_mismatch" / "manifest.yaml"
    module = (FIXTURES / "broken_mismatch" / "tools.py").resolve()
    with Gateway() as gateway:
        load = gateway.add_source(path)
        ids = [entry.tool.id for entry in gateway.entries()]
    assert ids == ["notion-mismatch:getPage", "notion-mismatch:searchPages"]
    [listed, defined] = load.diagnostics
    assert (listed.path, listed.field) == (str(path.absolute()), "/aiCapability/toolNames/2")
    assert listed.message == (
        f"'addToPage' is listed in toolNames but {module} defines no tool named 'addToPage' "
        "(it defines: searchPages, getPage, deletePage)"
    )
    assert (defined.path, defined.field) == (str(module), "/tools/2/name")
    assert defined.message == (
        f"tool 'deletePage' is not listed in toolNames of {path.absolute()} "
        "(/aiCapability/toolNames: searchPages, getPage, addToPage); it is not registered "
        "until the manifest lists it"
    )


def test_a_module_that_fails_to_import_is_a_diagnostic_and_the_gateway_keeps_serving() -> None:
    @tool
    def ping() -> str:
        """Still here."""
        return "pong"

    with Gateway() as gateway:
        gateway.add(ping, namespace="local")
        load = gateway.add_source(FIXTURES / "broken_module" / "manifest.yaml")
        outcome = gateway.call_sync("local:ping", {})
    [diagnostic] = load.diagnostics
    assert diagnostic.path == str((FIXTURES / "broken_module" / "tools.py").resolve())
    assert diagnostic.message == (
        "the tools module failed to import: ConnectionError: cannot reach the exploding "
        "service (tools.py, line 2)"
    )
    assert outcome.content == "pong"


def test_a_missing_module_is_reported_at_main() -> None:
    path = FIXTURES / "missing_module" / "manifest.yaml"
    [diagnostic] = validate_path(path)[1]
    assert diagnostic.field == "/main"
    assert diagnostic.message.startswith("'nowhere/tools.py' does not exist")


def test_bad_tool_definitions_are_reported_by_pointer_and_the_good_one_loads() -> None:
    with Gateway() as gateway:
        load = gateway.add_source(FIXTURES / "broken_tools" / "manifest.yaml")
        ids = [entry.tool.id for entry in gateway.entries()]
    assert ids == ["sloppy:fine"]
    messages = {d.field: d.message for d in load.diagnostics}
    assert messages == {
        "/tools/1/access": "expected one of read, write, external; got string 'delete'",
        "/tools/2/inputSchema/type": "expected 'object'; got string 'array'",
        "/tools/3/handler": "expected a function handler(input, ctx) (sync or async); got "
        "string 'handler'",
        "/tools/4/approval/required": "expected true or false; got string 'yes'",
        "/tools/5/approval/buildConfirmation": "expected a plain function "
        "build_confirmation(input) returning title, risk and facts; an async function",
    }


def test_a_changed_module_is_imported_again_on_reload(tmp_path: Path) -> None:
    folder = tmp_path / "ext"
    shutil.copytree(FIXTURES / "broken_mismatch", folder)
    manifest = folder / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace(", addToPage", ""))
    tools_py = folder / "tools.py"
    with Gateway() as gateway:
        load = gateway.add_source(manifest)
        assert [d.field for d in load.diagnostics] == ["/tools/2/name"]  # deletePage unlisted
        first = gateway.call_sync("notion-mismatch:searchPages", {"query": "a"})
        tools_py.write_text(tools_py.read_text().replace('{"query": input["query"]}', '"v2"'))
        gateway.declarations.reload(source_of(gateway))
        second = gateway.call_sync("notion-mismatch:searchPages", {"query": "a"})
    assert first.content == {"query": "a"} and second.content == "v2"


def test_a_folder_of_extensions_loads_every_manifest(tmp_path: Path) -> None:
    for name in ("notion", "github"):
        shutil.copytree(FIXTURES / name, tmp_path / name)
    with Gateway(secret_store=connected_store()) as gateway:
        load = gateway.add_source(tmp_path, format="capability")
        assert load.diagnostics == []
        assert {c.manifest.id for c in source_of(gateway).capabilities} == {"notion", "github"}
        assert len(gateway.entries()) == 6


def test_unknown_source_options_are_configuration_errors() -> None:
    from toolgate.errors import ConfigError

    with Gateway() as gateway, pytest.raises(ConfigError, match="unknown option 'refresh'"):
        gateway.add_source(NOTION, options={"refresh": 1})
    with Gateway() as gateway, pytest.raises(ConfigError, match="refresh_interval must be"):
        gateway.add_source(NOTION, options={"refresh_interval": -1})


def test_main_may_be_a_package_with_relative_imports(tmp_path: Path) -> None:
    package = tmp_path / "weather" / "weather_tools"
    package.mkdir(parents=True)
    (package / "client.py").write_text("def forecast(city):\n    return f'sunny in {city}'\n")
    (package / "__init__.py").write_text(
        "from .client import forecast\n\n"
        "tools = [{'name': 'forecast', 'description': 'Forecast.', 'access': 'read',\n"
        "          'inputSchema': {'type': 'object', 'properties': {'city': {'type': 'string'}}},\n"
        "          'handler': lambda input, ctx: forecast(input['city'])}]\n"
    )
    manifest = tmp_path / "weather" / "manifest.json"
    manifest.write_text(
        '{"aiCapability": {"id": "weather", "title": "Weather", "description": "Forecasts.",'
        ' "toolNames": ["forecast"]}, "main": "weather_tools"}'
    )
    with Gateway() as gateway:
        assert gateway.add_source(manifest).diagnostics == []
        outcome = gateway.call_sync("weather:forecast", {"city": "Oslo"})
    assert outcome.content == "sunny in Oslo"
