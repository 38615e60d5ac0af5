"""Extension info manifests bound to their implementations.

A manifest (:mod:`toolgate.formats.extension_info.parse`) says what each tool is called, what it
takes,
how its calls are displayed and which prompts should select it; it has no code. Each tool
``<id>`` of a manifest with ``ns`` becomes the tool ``<ns>:<id>``, implemented by exactly one of:

* **a Python handler**: in the Python files or modules named by the source option ``python``
  (default: ``<manifest name>.py`` beside the manifest, when it exists), the attribute named
  after the tool id — a function or a ``@tool`` function — or else a ``@tool`` function whose id
  is ``<ns>:<id>`` (for tool ids that are not Python identifiers). Its side-effect level,
  approval, secrets, timeout and output schema come from ``@tool``;
* **a tool folder** named after the tool id (``tool.md`` or ``tool.json`` plus a script, as in
  ``toolgate tools new``), inside the folder named by the option ``tool_folders`` (default: the
  manifest's folder). Its script, runtime, timeout, approval and security check are used; its
  ``name`` must be the tool id.

The manifest wins for what people and models see: the id, the title, the input schema (built
from ``schema.fields``), the tile display and the examples. The implementation's own input schema
must agree with ``schema.fields`` — every field is one of its inputs with a compatible type, and
everything it requires is a required field — otherwise the tool does not load; a tool with no
implementation, or with two, does not load either. Each problem is a diagnostic naming the file
and the JSON pointer.

``PATH`` is a manifest file, or a folder whose ``.json``/``.yaml``/``.yml`` files directly inside
are manifests (files in other formats are skipped). Relative paths in the options are relative to
the manifest's folder. :meth:`ExtensionInfoSource.validate` imports nothing: it checks the
manifests and any tool folders beside them. :meth:`ExtensionInfoSource.load` imports the Python
implementations (as ``python:`` entries of ``toolgate.yaml`` are imported), but runs no tool.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, ToolDefinitionError
from ...model import DisplaySpec, SourceFormat, Tool, ToolSource
from ...python import FunctionTool, PythonBinding, tool
from ...registry import RegisteredTool
from .._common.diagnostics import Diagnostic, Severity
from .._common.python_files import NotAModuleError, file_digest_name, import_file
from ..declarations import DeclarationSource, SourceContext, SourceLoad
from ..tool_folder.parse import load_tool_folder
from .parse import (
    ExtensionManifest,
    ExtensionTool,
    is_extension_info,
    load_extension_info,
    manifest_files,
    pointer,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = ["ExtensionInfoSource", "ExtensionOptions"]

_OPTION_KEYS = ("python", "tool_folders")


@dataclass(frozen=True, slots=True)
class ExtensionOptions:
    """The ``options`` of an ``extension-info`` entry of ``sources:`` in ``toolgate.yaml``."""

    python: tuple[str, ...] | None = None
    """Python files (``handlers.py``, relative to the manifest's folder) or importable module
    names holding the handlers; ``None``: ``<manifest name>.py`` beside the manifest, if any."""
    tool_folders: str | None = None
    """The folder holding tool folders named after tool ids; ``None``: the manifest's folder."""

    @classmethod
    def parse(cls, options: Mapping[str, Any], where: str) -> ExtensionOptions:
        """Check ``options``; raises :class:`ConfigError` naming ``where`` and the option."""
        for key in options:
            if key not in _OPTION_KEYS:
                raise ConfigError(
                    f"{where}: options: unknown option {key!r}; expected {', '.join(_OPTION_KEYS)}"
                )
        python = options.get("python")
        if isinstance(python, str):
            python = [python]
        if python is not None and (
            not isinstance(python, list)
            or not all(isinstance(item, str) and item.strip() for item in python)
        ):
            raise ConfigError(
                f"{where}: options.python must be a Python file or module name, or a list of them"
            )
        folders = options.get("tool_folders")
        if folders is not None and (not isinstance(folders, str) or not folders.strip()):
            raise ConfigError(f"{where}: options.tool_folders must be a folder path")
        return cls(None if python is None else tuple(python), folders)


class _Unbound(Exception):
    """A tool that cannot be bound; the message says why."""


class ExtensionInfoSource(DeclarationSource):
    """Extension Info manifests (a file or a folder of them) and their implementations."""

    format = SourceFormat.EXTENSION_INFO

    def __init__(self, path: Path, context: SourceContext, options: ExtensionOptions) -> None:
        super().__init__(str(path))
        self.path = path
        self.context = context
        self.options = options

    @classmethod
    def claims(cls, path: Path, document: Any) -> bool:
        """A document with ``ns`` and ``tools`` and none of the other formats' keys."""
        return is_extension_info(document)

    @classmethod
    def open(cls, path: Path, context: SourceContext, options: Mapping[str, Any]) -> Self:
        """A source for a manifest file or a folder of manifests (reads nothing yet)."""
        return cls(path, context, ExtensionOptions.parse(options, str(path)))

    @classmethod
    def validate(cls, path: Path) -> list[Diagnostic]:
        """Check the manifests at ``path`` and the tool folders beside them, importing nothing.

        A tool with neither a tool folder nor ``<manifest name>.py`` beside its manifest gets a
        warning: it loads only if the source's options name its implementation.
        """
        manifests, diagnostics = manifest_files(path)
        for manifest_path in manifests:
            loaded = load_extension_info(manifest_path)
            diagnostics.extend(loaded.diagnostics)
            if loaded.manifest is not None:
                diagnostics.extend(_check_beside(loaded.manifest))
        return diagnostics

    def load(self) -> SourceLoad:
        """Read every manifest and bind each tool to its implementation."""
        manifests, diagnostics = manifest_files(self.path)
        result = SourceLoad(diagnostics=diagnostics)
        modules: dict[str, ModuleType | str] = {}  # one import per reference and load
        for manifest_path in manifests:
            loaded = load_extension_info(manifest_path)
            result.diagnostics.extend(loaded.diagnostics)
            if loaded.manifest is not None:
                self._bind(loaded.manifest, modules, result)
        return result

    # -- binding -----------------------------------------------------------------------------

    def _python_refs(self, manifest: ExtensionManifest) -> tuple[str, ...]:
        if self.options.python is not None:
            return self.options.python
        default = manifest.path.with_suffix(".py")
        return (default.name,) if default.is_file() else ()

    def _tool_root(self, manifest: ExtensionManifest) -> Path:
        base = manifest.path.parent
        if self.options.tool_folders is None:
            return base
        return _relative(self.options.tool_folders, base)

    def _bind(
        self,
        manifest: ExtensionManifest,
        modules: dict[str, ModuleType | str],
        result: SourceLoad,
    ) -> None:
        loaded: list[tuple[str, ModuleType]] = []
        failed: list[str] = []
        for ref in self._python_refs(manifest):
            key, label = _module_key(ref, manifest.path.parent)
            if key not in modules:
                modules[key] = _import(ref, manifest.path.parent)
                if isinstance(modules[key], str):
                    result.diagnostics.append(
                        Diagnostic(_label_path(key, manifest), None, str(modules[key]))
                    )
            module = modules[key]
            if isinstance(module, str):
                failed.append(label)
            else:
                loaded.append((label, module))
        root = self._tool_root(manifest)
        for spec in manifest.tools:
            try:
                entry, problems = self._bind_tool(manifest, spec, loaded, root)
            except _Unbound as exc:
                note = f" (the Python code in {', '.join(failed)} did not load)" if failed else ""
                result.diagnostics.append(
                    Diagnostic(str(manifest.path), spec.pointer, f"{exc}{note}")
                )
                continue
            result.diagnostics.extend(problems)
            if entry is not None:
                result.entries.append(entry)

    def _bind_tool(
        self,
        manifest: ExtensionManifest,
        spec: ExtensionTool,
        modules: list[tuple[str, ModuleType]],
        root: Path,
    ) -> tuple[RegisteredTool | None, list[Diagnostic]]:
        handlers = [
            (label, handler)
            for label, module in modules
            for handler in _handlers(module, manifest.ns, spec.id)
        ]
        folder = _tool_folder(root, spec.id)
        found = [f"{label}:{_name(handler, spec.id)}" for label, handler in handlers]
        if folder is not None:
            found.append(f"the tool folder {folder}")
        if not found:
            where = ", ".join(label for label, _ in modules) or (
                f"{manifest.path.with_suffix('.py')} (or in the file or module the source option "
                "python names)"
            )
            raise _Unbound(
                f"the tool {spec.id!r} has no implementation: define a function {spec.id} in "
                f"{where}, or add a tool folder {root / spec.id} (tool.md and a script)"
            )
        if len(found) > 1:
            raise _Unbound(
                f"the tool {spec.id!r} is implemented more than once ({'; '.join(found)}); "
                "keep exactly one"
            )
        if folder is not None:
            return self._folder_tool(manifest, spec, folder)
        label, handler = handlers[0]
        return _python_tool(manifest, spec, handler, f"{label}:{_name(handler, spec.id)}")

    def _folder_tool(
        self, manifest: ExtensionManifest, spec: ExtensionTool, folder: Path
    ) -> tuple[RegisteredTool | None, list[Diagnostic]]:
        base, problems = _load_folder(manifest, spec, folder)
        if base is None:
            return None, problems
        definition = _manifest_tool(manifest, spec, base, own_description=base.name)
        if definition is None:
            problems.append(_invalid(manifest, spec))
            return None, problems
        availability = self.context.script_availability(definition)
        return RegisteredTool(definition, None, availability), problems


# -- paths -----------------------------------------------------------------------------------------


def _relative(ref: str, base: Path) -> Path:
    path = Path(ref).expanduser()
    return path if path.is_absolute() else base / path


def _tool_folder(root: Path, tool_id: str) -> Path | None:
    folder = root / tool_id
    try:
        declared = (folder / "tool.md").is_file() or (folder / "tool.json").is_file()
    except OSError:
        declared = True  # the folder loader reports why it cannot be read
    return folder if declared else None


def _check_beside(manifest: ExtensionManifest) -> list[Diagnostic]:
    """What :meth:`ExtensionInfoSource.validate` can say about implementations without imports:
    tool folders beside the manifest are loaded and compared; a tool with no folder and no
    default Python file beside the manifest gets a warning."""
    problems: list[Diagnostic] = []
    default_py = manifest.path.with_suffix(".py")
    for spec in manifest.tools:
        folder = _tool_folder(manifest.path.parent, spec.id)
        if folder is not None:
            problems.extend(_load_folder(manifest, spec, folder)[1])
        elif not default_py.is_file():
            problems.append(
                Diagnostic(
                    str(manifest.path),
                    spec.pointer,
                    f"no implementation beside the manifest (no {default_py.name}, no tool "
                    f"folder {spec.id}/): the tool loads only if the source's options "
                    "(python, tool_folders) name one",
                    Severity.WARNING,
                )
            )
    return problems


# -- tool folders ----------------------------------------------------------------------------------


def _load_folder(
    manifest: ExtensionManifest, spec: ExtensionTool, folder: Path
) -> tuple[Tool | None, list[Diagnostic]]:
    """The tool folder's tool (``None`` on any error) and every problem, agreement included."""
    loaded = load_tool_folder(folder, namespace=manifest.ns)
    # The manifest's title describes the tool when tool.md has no body: no need to warn.
    problems = [
        d
        for d in loaded.diagnostics
        if not (d.field == "description" and spec.title and d.severity is Severity.WARNING)
    ]
    base = loaded.tool
    if base is None:
        problems.append(
            Diagnostic(
                str(manifest.path),
                spec.pointer,
                f"its tool folder {folder} does not load (see the problems in that folder)",
            )
        )
        return None, problems
    declaration = base.source.location or str(folder)
    if base.name != spec.id:
        problems.append(
            Diagnostic(
                declaration,
                "name",
                f"the tool folder implements {manifest.ns}:{spec.id} ({manifest.path}), so its "
                f"name must be {spec.id!r}, not {base.name!r}",
            )
        )
        return None, problems
    problems.extend(_agreement(manifest, spec, base.input_schema, f"the tool folder {folder}"))
    failed = any(d.severity is Severity.ERROR for d in problems)
    return (None if failed else base), problems


# -- Python handlers -------------------------------------------------------------------------------


def _module_key(ref: str, base: Path) -> tuple[str, str]:
    """A cache key for a reference and the label diagnostics use for it."""
    if _is_file_ref(ref):
        path = _relative(ref, base).resolve()
        return str(path), str(path)
    return ref, ref


def _label_path(key: str, manifest: ExtensionManifest) -> str:
    return key if key.endswith(".py") else str(manifest.path)


def _is_file_ref(ref: str) -> bool:
    return ref.endswith(".py") or "/" in ref or "\\" in ref or ref.startswith(("~", "."))


def _import(ref: str, base: Path) -> ModuleType | str:
    """The module for a file or module reference, or why it cannot be loaded."""
    if not _is_file_ref(ref):
        try:
            return importlib.import_module(ref)
        except Exception as exc:  # noqa: BLE001 - any error in the module's own code
            return f"the Python module {ref!r} (option python) cannot be imported: {_reason(exc)}"
    path = _relative(ref, base).resolve()
    if not path.is_file():
        return f"the Python file {ref!r} (option python) does not exist: {path}"
    # A unique parent name per file keeps two handlers.py apart; executed afresh on every load,
    # so a reload sees edited code.
    try:
        return import_file(path, file_digest_name("_toolgate_extension", path))
    except NotAModuleError:
        return f"cannot load {path} as a Python module"
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - nor may a sys.exit() end the gateway
        return f"cannot be loaded: {_reason(exc)}"


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _handlers(module: ModuleType, ns: str, tool_id: str) -> list[Any]:
    """The attribute named ``tool_id``, or else the ``@tool`` functions whose id is
    ``<ns>:<tool_id>``."""
    attribute = getattr(module, tool_id, None) if tool_id.isidentifier() else None
    if attribute is not None:
        return [attribute]
    found: list[Any] = []
    for value in vars(module).values():
        ours = isinstance(value, FunctionTool) and value.tool.id == f"{ns}:{tool_id}"
        if ours and all(value is not other for other in found):
            found.append(value)
    return found


def _name(handler: Any, tool_id: str) -> str:
    """The handler's qualified name (the tool id for an attribute that is no function)."""
    func = handler.func if isinstance(handler, FunctionTool) else handler
    return str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or tool_id)


def _python_tool(
    manifest: ExtensionManifest, spec: ExtensionTool, handler: Any, label: str
) -> tuple[RegisteredTool | None, list[Diagnostic]]:
    if isinstance(handler, FunctionTool):
        base, binding = handler.tool, handler.binding
    elif inspect.isroutine(handler):
        try:
            wrapped = tool(handler)
        except ToolDefinitionError as exc:
            raise _Unbound(f"its handler {label} cannot be a tool: {exc.message}") from None
        base, binding = wrapped.tool, wrapped.binding
    else:
        raise _Unbound(
            f"its handler {label} is not a function or a @tool function "
            f"(it is a {type(handler).__name__})"
        )
    problems = _agreement(manifest, spec, base.input_schema, f"the handler {label}")
    if any(d.severity is Severity.ERROR for d in problems):
        return None, problems
    func = handler.func if isinstance(handler, FunctionTool) else handler
    fallback = str(getattr(func, "__name__", "tool")).replace("_", " ")
    definition = _manifest_tool(manifest, spec, base, own_description=fallback)
    if definition is None:
        problems.append(_invalid(manifest, spec))
        return None, problems
    assert isinstance(binding, PythonBinding)
    return RegisteredTool(definition, binding), problems


# -- agreement between the manifest and the implementation -------------------------------------


def _types(schema: Any, root: Mapping[str, Any], depth: int = 0) -> set[str] | None:
    """The JSON types a schema accepts; ``None`` when it does not say (any value, or too
    complex to tell), which counts as agreeing."""
    if not isinstance(schema, Mapping) or depth > 16:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, Mapping) else None
        return _types(target, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, (list, tuple)):
        return {item for item in kind if isinstance(item, str)}
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, (list, tuple)):
            found: set[str] = set()
            for branch in branches:
                types = _types(branch, root, depth + 1)
                if types is None:
                    return None
                found |= types
            return found
    return None


def schema_disagreements(
    declared: Mapping[str, Any], implemented: Mapping[str, Any], label: str
) -> list[tuple[Severity, tuple[str, ...], str]]:
    """Where an implementation's input schema disagrees with the manifest's ``schema.fields``:
    ``(severity, field path under schema/fields, message)``. Errors: a field the implementation
    does not take, a type it does not accept, an input it requires that is not a required field.
    Warning: an optional input that is not a field (it always keeps its default)."""
    fields: Mapping[str, Any] = declared.get("properties") or {}
    required_fields = set(declared.get("required") or ())
    inputs: Mapping[str, Any] = implemented.get("properties") or {}
    required_inputs = [str(name) for name in implemented.get("required") or ()]
    found: list[tuple[Severity, tuple[str, ...], str]] = []
    for name, field in fields.items():
        if name not in inputs:
            found.append(
                (
                    Severity.ERROR,
                    (name,),
                    f"{label} has no input {name!r}: every field must be one of its inputs",
                )
            )
            continue
        kind = str(field.get("type"))
        accepted = _types(inputs[name], implemented)
        if accepted is not None and not (
            kind in accepted or (kind == "integer" and "number" in accepted)
        ):
            found.append(
                (
                    Severity.ERROR,
                    (name,),
                    f"the field is {_a(kind)} here, but {label} takes "
                    f"{' or '.join(sorted(accepted)) or 'no value'} for {name!r}",
                )
            )
    for name in required_inputs:
        if name not in fields:
            found.append(
                (
                    Severity.ERROR,
                    (),
                    f"{label} requires {name!r}, which is not a field, so no call "
                    "could give it: declare the field, or give the input a default",
                )
            )
        elif name not in required_fields:
            found.append(
                (
                    Severity.ERROR,
                    (name,),
                    f"{label} requires {name!r}, but the field is optional: "
                    'add "required": true to the field, or give the input a default',
                )
            )
    for name in inputs:
        if name not in fields and name not in required_inputs:
            found.append(
                (
                    Severity.WARNING,
                    (),
                    f"{label} takes {str(name)!r}, which is not a field, so it "
                    "always keeps its default",
                )
            )
    return found


def _a(kind: str) -> str:
    return f"an {kind}" if kind[:1] in ("a", "e", "i", "o", "u") else f"a {kind}"


# -- the tool -------------------------------------------------------------------------------------


def _agreement(
    manifest: ExtensionManifest, spec: ExtensionTool, implemented: Mapping[str, Any], label: str
) -> list[Diagnostic]:
    return [
        Diagnostic(
            str(manifest.path), f"{spec.pointer}/schema/fields{pointer(*field)}", text, level
        )
        for level, field, text in schema_disagreements(spec.input_schema, implemented, label)
    ]


def _manifest_tool(
    manifest: ExtensionManifest, spec: ExtensionTool, base: Tool, *, own_description: str
) -> Tool | None:
    """``base`` (the implementation's tool) with everything the manifest declares.

    ``own_description`` is what ``base.description`` is when the implementation wrote none (a
    Python function's name, a tool folder's name); the manifest's title is used instead.
    """
    description = base.description.strip()
    if not description or description == own_description:
        description = spec.title or spec.id
    try:
        return dataclasses.replace(
            base,
            id=f"{manifest.ns}:{spec.id}",
            title=spec.title or base.title,
            description=description,
            input_schema=spec.input_schema,
            display=DisplaySpec(
                ui=spec.ui if spec.ui is not None else base.display.ui,
                examples=spec.examples or base.display.examples,
                dangerous=base.display.dangerous,
            ),
            source=ToolSource(SourceFormat.EXTENSION_INFO, str(manifest.path)),
        )
    except ValueError:
        return None


def _invalid(manifest: ExtensionManifest, spec: ExtensionTool) -> Diagnostic:
    return Diagnostic(
        str(manifest.path),
        spec.pointer,
        f"the tool id {manifest.ns}:{spec.id} is not valid (namespace and name must be "
        "non-empty and contain no white space)",
    )
