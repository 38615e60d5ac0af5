"""``sources:`` in toolgate.yaml: files, folders and package folders in the declaration formats."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from toolgate.config import load_gateway, parse_config
from toolgate.errors import ConfigError

FIXTURES = Path(__file__).parent / "fixtures"


def _write_config(folder: Path, text: str) -> Path:
    path = folder / "toolgate.yaml"
    path.write_text(text)
    return path


def _gateway(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    config = _write_config(tmp_path, text)
    return load_gateway(
        config, environ={"TOOLGATE_HOME": str(tmp_path / "home")}, approver=None, audit="off"
    )


def test_a_short_path_entry_is_detected_and_loaded_relative_to_the_config(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "extension_info" / "maps", tmp_path / "maps")
    with _gateway(tmp_path, "sources:\n  - ./maps\n") as gateway:
        ids = {t.id for t in gateway.list_tools()}
        assert any(i.endswith(":showMapAtAddressAndZoom") for i in ids)
        assert gateway.get_tool(next(iter(ids))).source.format == "extension-info"


def test_a_package_entry_loads_the_folder_inside_an_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "site" / "acme_tools"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copytree(FIXTURES / "resources" / "folder", package / "resources")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with _gateway(
        tmp_path, "sources:\n  - package: acme_tools/resources\n    format: resource\n"
    ) as gateway:
        tools = gateway.list_tools()
        assert tools and all(t.source.format == "resource" for t in tools)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("- {path: ./x, package: y}", "give exactly one of path, package"),
        ("- {format: resource}", "give exactly one of path, package"),
        ("- {path: ./x, format: zip}", "must be one of auto, capability"),
        ("- {path: ./x, colour: red}", "colour"),
    ],
)
def test_a_malformed_entry_names_the_entry(entry: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config(f"sources:\n  {entry}\n")
    assert "sources" in str(caught.value)


def test_a_missing_path_names_the_entry_and_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sources\[0\]: .*missing\.yaml: no such file"):
        _gateway(tmp_path, "sources:\n  - ./missing.yaml\n")


def test_a_missing_package_names_the_entry(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sources\[0\]: .*no_such_pkg_xyz"):
        _gateway(tmp_path, "sources:\n  - package: no_such_pkg_xyz/tools\n")


def test_a_broken_declaration_is_a_diagnostic_and_the_rest_loads(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(
        "apiVersion: joch.dev/v1alpha1\nkind: Tool\nmetadata: {name: x}\nspec: {type: teleport}\n"
    )
    shutil.copytree(FIXTURES / "extension_info" / "maps", tmp_path / "maps")
    with _gateway(tmp_path, "sources:\n  - ./broken.yaml\n  - ./maps\n") as gateway:
        assert gateway.list_tools()
        problems = [str(d) for d in gateway.diagnostics()]
        assert any("broken.yaml" in p and "/spec/type" in p for p in problems)
