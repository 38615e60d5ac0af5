"""Installing plugins from the npm registry or a folder into ``$TOOLGATE_HOME/plugins``.

:func:`install_plugin` packs the plugin with npm (``npm pack SPEC``: a registry spec such as
``@acme/weather@1.2.0``, a tarball, or a local folder), unpacks it into a staging folder, checks
its manifest (:func:`~toolgate.formats.plugin.manifest.load_plugin_manifest`) and, only when the
manifest
is valid, installs its npm dependencies inside it (``npm install --omit=dev --ignore-scripts``,
so they resolve within the plugin folder, as the JavaScript host requires) and moves it to
``$TOOLGATE_HOME/plugins/<folder>``, where every gateway built from the configuration loads it
(:func:`installed_plugins`). Nothing from the package runs while it is installed.
:func:`remove_plugin` takes it out again, by plugin id or folder name.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from ...backends.js_install import JsRuntimeError
from ...errors import ToolError
from .._common.diagnostics import Diagnostic
from .manifest import find_manifest, load_plugin_manifest

__all__ = [
    "InstalledPlugin",
    "PluginInstallError",
    "install_plugin",
    "installed_plugins",
    "plugins_folder",
    "remove_plugin",
]

_NPM_TIMEOUT = 600.0


class PluginInstallError(ToolError):
    """The plugin could not be installed or removed; the message says why."""

    def __init__(self, message: str, diagnostics: tuple[Diagnostic, ...] = ()) -> None:
        super().__init__(message)
        self.diagnostics = diagnostics


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """A plugin in ``$TOOLGATE_HOME/plugins``."""

    plugin_id: str
    folder: Path
    version: str | None = None


def plugins_folder(home: Path) -> Path:
    """``$TOOLGATE_HOME/plugins``."""
    return home / "plugins"


def installed_plugins(home: Path) -> list[InstalledPlugin]:
    """The plugin folders under ``$TOOLGATE_HOME/plugins`` whose manifest is valid (those a
    gateway loads), by folder name."""
    found: list[InstalledPlugin] = []
    root = plugins_folder(home)
    if not root.is_dir():
        return found
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        loaded = load_plugin_manifest(folder)
        if loaded.manifest is not None:
            found.append(InstalledPlugin(loaded.manifest.id, folder, loaded.manifest.version))
    return found


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise JsRuntimeError(
            "npm is not installed (no 'npm' on PATH): it installs plugins (Debian: apt-get "
            "install npm)"
        )
    return npm


def _run(command: list[str], cwd: Path, what: str) -> str:
    try:
        done = subprocess.run(
            command, cwd=cwd, capture_output=True, text=True, timeout=_NPM_TIMEOUT
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PluginInstallError(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        raise PluginInstallError(f"{what} failed (exit code {done.returncode}): {tail}")
    return done.stdout


def _folder_name(plugin_id: str) -> str:
    """A folder name for a plugin id (``@acme/weather`` → ``acme__weather``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "__", plugin_id.lstrip("@")).strip("._")
    return name or "plugin"


def _filter_reason(exc: tarfile.FilterError) -> str:
    """What is wrong with the entry ``tarfile``'s data filter refused."""
    if isinstance(exc, tarfile.AbsolutePathError):
        return "has an absolute path"
    if isinstance(exc, tarfile.OutsideDestinationError):
        return "would be written outside the package (its path climbs out with '..')"
    if isinstance(exc, tarfile.AbsoluteLinkError):
        return "is a link to an absolute path"
    if isinstance(exc, tarfile.LinkOutsideDestinationError):
        return "is a link that points outside the package"
    if isinstance(exc, tarfile.SpecialFileError):
        return "is a device, pipe or other special file"
    return f"is not allowed in a package ({exc})"


def _unpack(tarball: Path, into: Path) -> Path:
    """Extract an npm tarball (its files under ``package/``) safely; the package folder."""
    if not hasattr(tarfile, "data_filter"):
        raise PluginInstallError(
            "this Python cannot unpack archives safely (tarfile filters need Python 3.11.4 or "
            "later); install the plugin from a folder with 'sources:' instead"
        )
    try:
        with tarfile.open(tarball) as archive:
            # Every entry is checked before any is written: a package with one bad entry is
            # refused whole, naming it (the filter raises on the first; extracting with it
            # again below keeps the check where the files are written).
            for member in archive.getmembers():
                if member.name.startswith(("/", "\\")) or PureWindowsPath(member.name).drive:
                    # The data filter would strip the slash and unpack it inside: contained,
                    # but no packer writes one, so the package is refused as hostile.
                    raise tarfile.AbsolutePathError(member)
                tarfile.data_filter(member, str(into))
            archive.extractall(into, filter="data")  # no links out, no devices, no absolute paths
    except tarfile.FilterError as exc:
        entry = exc.tarinfo.name if exc.tarinfo is not None else "?"
        raise PluginInstallError(
            f"{tarball.name}: the entry {entry!r} {_filter_reason(exc)}, so the package was "
            "refused and nothing was installed"
        ) from None
    except (tarfile.TarError, OSError) as exc:
        raise PluginInstallError(
            f"{tarball.name} cannot be unpacked ({exc}); nothing was installed"
        ) from None
    package = into / "package"
    if not package.is_dir():
        raise PluginInstallError(f"{tarball.name} is not an npm package (no package/ folder)")
    return package


def install_plugin(spec: str, home: Path, *, replace: bool = False) -> InstalledPlugin:
    """Install the plugin ``spec`` (npm spec, tarball or folder) into ``$TOOLGATE_HOME/plugins``.

    Raises :class:`PluginInstallError` (with the manifest's diagnostics) when its manifest is
    invalid, it is installed already (unless ``replace``), or npm fails; nothing is left behind
    then."""
    npm = _npm()
    root = plugins_folder(home)
    local = Path(spec).expanduser()
    if not local.exists() and not _REGISTRY_SPEC.fullmatch(spec):
        # git, URL and file specs can run code while npm fetches or prepares them.
        raise PluginInstallError(
            f"{spec!r} is neither a local folder or tarball nor a package of the npm registry "
            "(name, name@version or @scope/name@range); git, URL and file specs are not installed"
        )
    root.mkdir(parents=True, exist_ok=True)
    target_spec = str(local.resolve()) if local.exists() else spec
    with tempfile.TemporaryDirectory(prefix=".install-", dir=root) as tmp:
        staging = Path(tmp)
        output = _run(
            [npm, "pack", target_spec, "--json", "--ignore-scripts", "--pack-destination", tmp],
            staging,
            f"npm pack {spec}",
        )
        try:
            filename = json.loads(output)[0]["filename"]
        except (ValueError, LookupError, TypeError):
            raise PluginInstallError(
                f"npm pack {spec}: unexpected output {output[:300]!r}"
            ) from None
        package = _unpack(staging / Path(filename).name, staging / "unpacked")
        manifest_path, problem = find_manifest(package)
        if manifest_path is None:
            raise PluginInstallError(
                f"{spec} is not a plugin: {problem.message if problem else 'no manifest'}"
            )
        loaded = load_plugin_manifest(package)
        if loaded.manifest is None:
            details = "; ".join(
                f"{Path(d.path).name}: {d.field + ': ' if d.field else ''}{d.message}"
                for d in loaded.diagnostics
            )
            raise PluginInstallError(
                f"{spec}: the plugin manifest is invalid, so it was not installed: {details}",
                loaded.diagnostics,
            )
        manifest = loaded.manifest
        target = root / _folder_name(manifest.id)
        if target.exists() and not replace:
            raise PluginInstallError(
                f"plugin {manifest.id} is installed already ({target}); remove it first "
                f"('toolgate plugins remove {manifest.id}')"
            )
        _refuse_npm_settings(package, spec)
        package_json = package / "package.json"
        if package_json.is_file() and _registry_dependencies(package_json, spec):
            _run(
                [npm, "install", "--omit=dev", "--ignore-scripts", "--no-audit", "--no-fund"],
                package,
                f"installing the npm dependencies of {manifest.id}",
            )
        if target.exists():
            shutil.rmtree(target)
        package.rename(target)
    return InstalledPlugin(manifest.id, target, manifest.version)


#: A package of the registry: ``name``, ``@scope/name``, each optionally ``@version-or-range``
#: (no ``:``, no ``/`` after the name: those would be git, URL or file specs).
_REGISTRY_SPEC = re.compile(r"(@[a-z0-9][\w.~-]*/)?[a-z0-9][\w.~-]*(@[^\s/:]+)?", re.IGNORECASE)

#: The dependency fields npm installs.
_DEPENDENCY_FIELDS = ("dependencies", "optionalDependencies", "peerDependencies")


def _refuse_npm_settings(package: Path, spec: str) -> None:
    """Refuse a package that ships npm settings: an ``.npmrc`` can make npm run programs while
    it installs (its ``git`` setting, say), whatever ``--ignore-scripts`` says."""
    found = [path.relative_to(package) for path in package.rglob(".npmrc")]
    if found:
        raise PluginInstallError(
            f"{spec}: the package holds npm settings ({', '.join(map(str, found))}), which can "
            "run programs while npm installs it; toolgate does not install such a package"
        )


def _registry_dependencies(package_json: Path, spec: str) -> bool:
    """Whether the package has npm dependencies to install; each must be a registry version
    or range (a git, URL, file or link dependency could run code while it is fetched)."""
    try:
        document = json.loads(package_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginInstallError(f"{spec}: package.json cannot be read: {exc}") from None
    found = False
    for field in _DEPENDENCY_FIELDS:
        dependencies = document.get(field) if isinstance(document, dict) else None
        if not dependencies:
            continue
        if not isinstance(dependencies, dict):
            raise PluginInstallError(f"{spec}: package.json: {field} is not an object")
        for name, wanted in dependencies.items():
            if not isinstance(wanted, str) or ":" in wanted or "/" in wanted:
                raise PluginInstallError(
                    f"{spec}: package.json: {field}.{name} is {wanted!r}, not a version of the "
                    "npm registry; git, URL, file and link dependencies are not installed"
                )
        found = True
    return found


def remove_plugin(name: str, home: Path) -> InstalledPlugin:
    """Remove the installed plugin whose id or folder name is ``name``; raises
    :class:`PluginInstallError` when there is none."""
    for plugin in installed_plugins(home):
        if name in (plugin.plugin_id, plugin.folder.name):
            shutil.rmtree(plugin.folder)
            return plugin
    folder = plugins_folder(home) / name
    if folder.is_dir() and folder.parent == plugins_folder(home) and not name.startswith("."):
        shutil.rmtree(folder)  # installed, but its manifest no longer loads
        return InstalledPlugin(name, folder)
    known = ", ".join(p.plugin_id for p in installed_plugins(home)) or "none"
    raise PluginInstallError(f"no installed plugin {name!r} (installed: {known})")
