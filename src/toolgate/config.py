"""The gateway configuration file, ``toolgate.yaml``: where the tools come from.

Where it is found (the first that exists wins):

1. the path given with ``--config PATH`` (or ``config_path=``); it must exist;
2. ``toolgate.yaml`` in the current folder;
3. ``$TOOLGATE_HOME/toolgate.yaml`` (``TOOLGATE_HOME`` defaults to ``~/.toolgate``).

When none exists the configuration is empty: a gateway with no tools.

The schema (every section optional; unknown keys are errors, so typos are reported)::

    python:                      # Python tools
      - myapp.tools:add          # module:attr - a @tool function, a plain function,
                                 #   or a list/tuple of them (attr may be dotted)
      - myapp.tools              # module - its ``tools`` list, else every @tool in it
      - ./my_tools.py            # a .py file (relative to this file's folder);
      - ./my_tools.py:add        #   ``file.py:attr`` picks one attribute
      - module: myapp.more       # the long form of any of the above, with
        namespace: more          #   optional re-homing of every tool in that namespace
    tool_folders:                # folders whose sub-folders are tool folders (tool.md + script)
      - ./tools                  # relative to this file's folder; tools get namespace ``local``
      - path: ~/shared-tools     # the long form, with another namespace
        namespace: shared
    scripts:                     # how script tools (tool folders) run
      env_from_process: [GITHUB_TOKEN]  # declared ``env`` names that may also come from the
                                 #   gateway's own environment (``true``: any declared name);
                                 #   by default they come only from $TOOLGATE_HOME/.env
      max_output: 10485760       # bytes of stdout (and of stderr) a script may write (10 MiB)
      concurrency: 32            # processes of one tool that may run at once
    demo: true                   # also include the bundled demo tools (namespace ``demo``): the
                                 #   Python ones and the demo tool folders
    overflow:                    # context overflow protection (Jean2)
      limit: 50000               # characters of content above which it is saved to a file
      preview: 10000             # characters the model still sees of it
      dir: ./spill               # where the files go (default: <tmp>/toolgate)
    approval:                    # human approval (see toolgate.pipeline.approval_policy)
      expires_after: 300         # seconds a request waits for a decision before it expires
      rules:                     # operator rules; each selects by exactly one of tool,
        - tool: tools:send       #   namespace, level. The most specific match wins (tool,
          require: true          #   then namespace, then level). They can only make approval
        - level: read_only       #   stricter, unless ``override: true`` lets ``require: false``
          require: true          #   waive what a tool declares itself
        - namespace: trusted
          require: false
          override: true
    audit:                       # the audit log: one redacted record per call
      enabled: true              # (default) records go to $TOOLGATE_HOME/audit.db
      jsonl: ./audit.jsonl       # also append every record to this JSON-lines file
      retention_days: 30         # records older than this are deleted (null: keep forever)
    policies:                    # access policies (Joch ``Policy`` resources), in order
      - apiVersion: joch.dev/v1alpha1   # inline: one Policy resource
        kind: Policy
        metadata: {name: no-external-writes-for-interns}
        spec:
          appliesTo: {selector: {matchLabels: {team: interns}}}
          rules:
            - when: {tool.sideEffect: external_write}
              action: deny
              reason: interns do not write to external systems
      - ./policies.yaml          # a file of one or more Policy documents (``---`` between
                                 #   them), relative to this file's folder
    agents:                      # agents by name, with the labels policies select them by
      intern-bot:
        labels: {team: interns}
    rate_limits:
      per_agent: false           # count tools' callsPerMinute/callsPerDay per agent too

The folder holding the file is put at the front of ``sys.path``, so modules next to it import as
they would with ``python -m``.

Tool folders: ``$TOOLGATE_HOME/tools`` is always the first one (namespace ``local``; ``toolgate
tools install`` and ``toolgate tools new`` put tools there), then the ``tool_folders`` entries in
order. Every immediate sub-folder is one tool (Jean2 seed: ``tool.md`` or ``tool.json`` plus a
script in any runtime). A folder that does not load does not stop the others: its problems are the
gateway's diagnostics (``toolgate tools list`` prints them). Scripts read the variables they
declare in ``env`` from ``$TOOLGATE_HOME/.env``. A ``tool_folders`` entry that does not exist is
an error; a folder named twice is loaded once. Nothing is created when the gateway is built,
except the state database ``$TOOLGATE_HOME/toolgate.db`` (approval requests and "always allow"
grants, so they survive a restart) when approvals are on, and the audit log
``$TOOLGATE_HOME/audit.db`` when auditing is on (``audit.enabled``, the default) — with
``approver=None`` and ``audit="off"`` (or ``"read"`` and no log yet) nothing at all.

Policies: each entry of ``policies:`` is either one inline Joch ``Policy`` resource or the path of
a YAML file holding one or more of them, separated by ``---`` lines (see
:mod:`toolgate.loaders.policy` for the fields). They are read when the gateway is built and layered
on the tools' own ``safety`` rules; a malformed one is a :class:`~toolgate.ConfigError` naming the
file, the document and the field.

The file is parsed with :func:`toolgate.loaders.load_yaml`: JSON-shaped values only (no Python
tags), bounded aliases, size and depth, and a key written twice is an error naming both lines.

Every problem is a :class:`~toolgate.ConfigError` whose message names the file and the field, for
example ``toolgate.yaml: python[1]: cannot import 'nope.mod': No module named 'nope'``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .approvals import Approver
from .backends.processes import DEFAULT_MAX_OUTPUT
from .errors import ConfigError, ToolgateError
from .gateway import Gateway
from .loaders import YamlError, load_yaml
from .loaders.policy import load_policy
from .model import SideEffect, SourceFormat, Tool, ToolSource, split_tool_id
from .model.policy import AccessPolicy
from .pipeline.approval import DEFAULT_APPROVAL_TTL
from .pipeline.approval_policy import ApprovalRule
from .pipeline.overflow import DEFAULT_OVERFLOW_LIMIT, DEFAULT_PREVIEW_CHARS
from .python import FunctionTool, tool
from .sources import FolderRoot

__all__ = [
    "AUDIT_FILE_NAME",
    "CONFIG_FILE_NAME",
    "MAX_CONFIG_BYTES",
    "STATE_FILE_NAME",
    "AgentConfig",
    "ApprovalConfig",
    "ApprovalRuleEntry",
    "AuditConfig",
    "AuditMode",
    "GatewayConfig",
    "LoadedConfig",
    "OverflowConfig",
    "PythonSource",
    "RateLimitsConfig",
    "ScriptsConfig",
    "ToolFolderEntry",
    "build_gateway",
    "find_config",
    "load_config",
    "load_gateway",
    "load_policies",
    "parse_config",
    "tool_folder_roots",
    "toolgate_home",
]

#: The file name looked for in the current folder and in ``$TOOLGATE_HOME``.
CONFIG_FILE_NAME = "toolgate.yaml"
#: The SQLite database in ``$TOOLGATE_HOME`` holding approval requests and grants.
STATE_FILE_NAME = "toolgate.db"
#: The SQLite audit log in ``$TOOLGATE_HOME`` (one redacted record per call).
AUDIT_FILE_NAME = "audit.db"
#: Larger files are refused before parsing (a config file is a few kilobytes).
MAX_CONFIG_BYTES = 1024 * 1024

AuditMode = Literal["write", "read", "off"]
"""How :func:`build_gateway` uses the audit log: ``"write"`` records every call; ``"read"`` opens
an existing log for statistics only (creates nothing, prunes nothing); ``"off"`` ignores it."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PythonSource(_Section):
    """One entry of ``python:``: a module, a ``module:attr`` or a ``.py`` file."""

    module: str = Field(min_length=1)
    """``pkg.mod``, ``pkg.mod:attr``, ``path/to/file.py`` or ``path/to/file.py:attr``."""
    namespace: str | None = Field(default=None, min_length=1)
    """Re-home every tool of this entry in this namespace."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        # ``- myapp.tools:add`` is the short form of ``- module: myapp.tools:add``.
        return {"module": value} if isinstance(value, str) else value


class OverflowConfig(_Section):
    """``overflow:``: when content is saved to a file instead of sent whole (Jean2 seed)."""

    limit: int = Field(default=DEFAULT_OVERFLOW_LIMIT, ge=1)
    """Characters of model-facing content above which it is spilled to a file."""
    preview: int = Field(default=DEFAULT_PREVIEW_CHARS, ge=0)
    """Characters of spilled content the model still sees."""
    dir: str | None = None
    """Where spilled content is written (relative to the config file's folder)."""

    @model_validator(mode="after")
    def _preview_fits(self) -> OverflowConfig:
        if self.preview > self.limit:
            raise ValueError(f"preview ({self.preview}) must not exceed limit ({self.limit})")
        return self


def _valid_namespace(value: str) -> str:
    try:
        split_tool_id(f"{value}:x")
    except ValueError:
        raise ValueError(
            f"{value!r} is not a usable namespace (no white space, no trailing colon)"
        ) from None
    return value


class ToolFolderEntry(_Section):
    """One entry of ``tool_folders:``: a folder whose sub-folders are tool folders."""

    path: str = Field(min_length=1)
    """The folder (``~`` expanded; relative to the config file's folder)."""
    namespace: str = Field(default="local", min_length=1)
    """The namespace of its tools (ids ``namespace:name``)."""

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        # ``- ./tools`` is the short form of ``- path: ./tools``.
        return {"path": value} if isinstance(value, str) else value

    @field_validator("namespace")
    @classmethod
    def _valid_folder_namespace(cls, value: str) -> str:
        return _valid_namespace(value)


class ScriptsConfig(_Section):
    """``scripts:``: how script tools (tool folders) run."""

    env_from_process: tuple[str, ...] | bool = ()
    """Declared ``env`` names that may also come from the gateway's environment (``True``: any);
    by default a script's variables come only from ``$TOOLGATE_HOME/.env``."""
    max_output: int = Field(default=DEFAULT_MAX_OUTPUT, ge=1)
    """Bytes of stdout (and of stderr) a script may write before it is stopped."""
    concurrency: int = Field(default=32, ge=1)
    """Processes of one script tool that may run at once."""

    @field_validator("env_from_process", mode="before")
    @classmethod
    def _names_or_true(cls, value: Any) -> Any:
        # One clear message instead of pydantic's per-member union errors.
        if isinstance(value, bool):
            return value
        if isinstance(value, (list, tuple)) and all(
            isinstance(item, str) and item for item in value
        ):
            return tuple(value)
        raise ValueError("must be a list of variable names, or true for any declared variable")


class ApprovalRuleEntry(_Section):
    """One entry of ``approval.rules:``: which tools it selects and whether they need approval."""

    tool: str | None = Field(default=None, min_length=1)
    """A tool id (``namespace:name``)."""
    namespace: str | None = Field(default=None, min_length=1)
    """Every tool of a namespace."""
    level: SideEffect | None = None
    """Every tool of a side-effect level (``read_only`` … ``privileged``)."""
    require: bool
    """Whether the selected tools need a person's approval."""
    override: bool = False
    """Let ``require: false`` waive a requirement the tool declares itself."""

    @field_validator("tool")
    @classmethod
    def _valid_tool_id(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                split_tool_id(value)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("namespace")
    @classmethod
    def _valid_rule_namespace(cls, value: str | None) -> str | None:
        return None if value is None else _valid_namespace(value)

    @model_validator(mode="after")
    def _one_selector(self) -> ApprovalRuleEntry:
        chosen = [name for name in ("tool", "namespace", "level") if getattr(self, name)]
        if len(chosen) != 1:
            given = f" (got {', '.join(chosen)})" if chosen else ""
            raise ValueError(f"give exactly one of tool, namespace, level{given}")
        return self

    def to_rule(self) -> ApprovalRule:
        """The :class:`~toolgate.pipeline.approval_policy.ApprovalRule` this entry declares."""
        return ApprovalRule(
            require=self.require,
            tool=self.tool,
            namespace=self.namespace,
            level=self.level,
            override=self.override,
        )


class ApprovalConfig(_Section):
    """``approval:``: how long requests wait, and the operator's approval rules."""

    expires_after: float = Field(default=DEFAULT_APPROVAL_TTL, gt=0)
    """Seconds a request waits for a decision before it expires."""
    rules: list[ApprovalRuleEntry] = Field(default_factory=list)
    """Per tool, namespace or level; see :mod:`toolgate.pipeline.approval_policy`."""

    @field_validator("expires_after", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("must be a number of seconds")
        return value

    def approval_rules(self) -> list[ApprovalRule]:
        """The rules, in file order."""
        return [entry.to_rule() for entry in self.rules]


class AuditConfig(_Section):
    """``audit:``: the audit log (one redacted record per call) in ``$TOOLGATE_HOME/audit.db``."""

    enabled: bool = True
    """Record every call (the default)."""
    jsonl: str | None = Field(default=None, min_length=1)
    """Also append every record to this JSON-lines file (relative to the config file's folder)."""
    retention_days: float | None = Field(default=30, gt=0)
    """Days records are kept (``null``: forever)."""

    @field_validator("retention_days", mode="before")
    @classmethod
    def _days(cls, value: Any) -> Any:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError("must be a number of days, or null to keep records forever")
        return value


class AgentConfig(_Section):
    """One entry of ``agents:``: the labels policies select the agent by."""

    labels: dict[str, str] = Field(default_factory=dict)


class RateLimitsConfig(_Section):
    """``rate_limits:``: how the tools' ``callsPerMinute`` / ``callsPerDay`` are counted."""

    per_agent: bool = False
    """Count each agent's calls separately (default: all agents' calls of a tool together)."""


def _policy_entry(value: Any) -> Any:
    if isinstance(value, str):
        if not value.strip():
            raise ValueError("a policy file path must not be empty")
        return value
    if isinstance(value, dict):
        return value
    raise ValueError(
        "must be a Policy resource (a mapping) or the path of a YAML file of Policy documents"
    )


class GatewayConfig(_Section):
    """The whole ``toolgate.yaml``."""

    python: list[PythonSource] = Field(default_factory=list)
    """Python modules, attributes and files that hold tools."""
    tool_folders: list[ToolFolderEntry] = Field(default_factory=list)
    """Folders of tool folders (besides ``$TOOLGATE_HOME/tools``, which is always used)."""
    scripts: ScriptsConfig = Field(default_factory=ScriptsConfig)
    demo: bool = False
    """Include the bundled demo tools."""
    overflow: OverflowConfig = Field(default_factory=OverflowConfig)
    approval: ApprovalConfig = Field(default_factory=ApprovalConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    policies: list[Annotated[Any, BeforeValidator(_policy_entry)]] = Field(default_factory=list)
    """Inline Joch ``Policy`` resources (mappings) and paths of YAML files holding them."""
    agents: dict[str, AgentConfig] = Field(default_factory=dict)
    """Agents by name, with their labels (for policies selecting agents by label)."""
    rate_limits: RateLimitsConfig = Field(default_factory=RateLimitsConfig)

    def agent_labels(self) -> dict[str, dict[str, str]]:
        """The labels of every declared agent, by name."""
        return {name: dict(agent.labels) for name, agent in self.agents.items()}


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A parsed configuration and where it came from."""

    config: GatewayConfig
    path: Path | None = None
    """The absolute path of the file, or ``None`` when no file exists (empty configuration)."""
    label: str = CONFIG_FILE_NAME
    """How messages name the file: relative to the current folder when inside it."""

    @property
    def folder(self) -> Path:
        """The folder relative paths resolve against (the current folder without a file)."""
        return Path.cwd() if self.path is None else self.path.parent


def toolgate_home(environ: Mapping[str, str] | None = None) -> Path:
    """``$TOOLGATE_HOME``, or ``~/.toolgate``."""
    env = os.environ if environ is None else environ
    value = env.get("TOOLGATE_HOME")
    return Path(value).expanduser() if value else Path("~/.toolgate").expanduser()


def find_config(
    *, cwd: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path | None:
    """The configuration file in use: ``./toolgate.yaml``, else ``$TOOLGATE_HOME/toolgate.yaml``."""
    for folder in ((cwd or Path.cwd()), toolgate_home(environ)):
        candidate = folder / CONFIG_FILE_NAME
        if candidate.is_file():
            return candidate.absolute()
    return None


def _label(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd.absolute()))
    except ValueError:
        return str(path)


def _field(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _validation_message(label: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key (check the spelling)"
        elif error["type"] == "value_error" and "error" in error.get("ctx", {}):
            message = str(error["ctx"]["error"])
        problems.append(f"{label}: {_field(error['loc'])}: {message}")
    return "\n".join(problems)


def parse_config(text: str, label: str = CONFIG_FILE_NAME) -> GatewayConfig:
    """Parse the text of a ``toolgate.yaml``. Raises :class:`ConfigError` naming the field."""
    try:
        data = load_yaml(text, source=label)
    except YamlError as exc:
        where = f" at {exc.location.removesuffix(': ')}" if exc.line is not None else ""
        raise ConfigError(f"{label}: invalid YAML{where}: {exc.problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{label}: the file must be a mapping of sections (python:, tool_folders:, scripts:, "
            f"demo:, overflow:, approval:, audit:, policies:, agents:, rate_limits:), not a "
            f"{type(data).__name__}"
        )
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_validation_message(label, exc)) from None


def load_config(
    config_path: Path | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> LoadedConfig:
    """Find and parse the configuration (an empty one when there is no file).

    ``config_path`` overrides the search and must exist.
    """
    cwd = cwd or Path.cwd()
    if config_path is not None:
        path = config_path if config_path.is_absolute() else cwd / config_path
        if not path.is_file():
            raise ConfigError(f"{config_path}: configuration file not found")
    else:
        found = find_config(cwd=cwd, environ=environ)
        if found is None:
            return LoadedConfig(GatewayConfig())
        path = found
    label = _label(path, cwd)
    text = _read_text(path, label)
    return LoadedConfig(parse_config(text, label), path.absolute(), label)


def _read_text(path: Path, label: str) -> str:
    """A small UTF-8 file's text (at most :data:`MAX_CONFIG_BYTES`); raises ``ConfigError``."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{label}: cannot read the file: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{label}: the file is larger than {MAX_CONFIG_BYTES:,} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{label}: the file is not UTF-8 text ({exc.reason})") from None


# -- policies ------------------------------------------------------------------------------------

_DOCUMENT_START = re.compile(r"^---(?:[ \t]+(.*))?$")


def _yaml_documents(text: str) -> list[tuple[int, str]]:
    """Split a multi-document YAML text on its ``---`` lines: ``(first line offset, text)``.

    A document's own content after ``---`` on the marker line stays part of that document.
    """
    documents: list[tuple[int, list[str]]] = [(0, [])]
    for number, line in enumerate(text.splitlines()):
        match = _DOCUMENT_START.match(line.rstrip("\r"))
        if match is None:
            documents[-1][1].append(line)
            continue
        rest = (match.group(1) or "").strip()
        if rest and not rest.startswith("#"):
            documents.append((number, [rest]))
        else:
            documents.append((number + 1, []))
    return [(offset, "\n".join(lines)) for offset, lines in documents]


def _file_policies(path: Path, file_label: str, where: str) -> list[AccessPolicy]:
    if not path.is_file():
        problem = "is not a file" if path.exists() else "no such file"
        raise ConfigError(f"{where}: {problem}: {path}")
    text = _read_text(path, f"{where}: {file_label}")
    found: list[AccessPolicy] = []
    documents = [(offset, doc) for offset, doc in _yaml_documents(text) if doc.strip()]
    for number, (offset, document) in enumerate(documents, start=1):
        source = f"{file_label} (document {number})" if len(documents) > 1 else file_label
        try:
            data = load_yaml(document, source=file_label, line_offset=offset)
        except YamlError as exc:
            at = f" at {exc.location.removesuffix(': ')}" if exc.line is not None else ""
            raise ConfigError(f"{where}: {source}: invalid YAML{at}: {exc.problem}") from None
        if data is None:
            continue
        if not isinstance(data, dict):
            raise ConfigError(
                f"{where}: {source}: a Policy document must be a mapping, not a "
                f"{type(data).__name__}"
            )
        try:
            found.append(load_policy(data, source=source))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    if not found:
        raise ConfigError(f"{where}: {file_label} holds no Policy documents")
    return found


def load_policies(loaded: LoadedConfig) -> list[AccessPolicy]:
    """The access policies of ``policies:``, in order: inline resources and those of each file
    (paths relative to the config file's folder; messages name them that way too).

    Raises :class:`ConfigError` naming the file, the entry (and document) and the field.
    """
    label, folder = loaded.label, loaded.folder
    found: list[AccessPolicy] = []
    for index, entry in enumerate(loaded.config.policies):
        where = f"{label}: policies[{index}]"
        if isinstance(entry, str):
            path = Path(entry).expanduser()
            path = path if path.is_absolute() else folder / path
            found.extend(_file_policies(path, _label(path, folder), where))
            continue
        try:
            found.append(load_policy(entry, source=where))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return found


# -- building the gateway ------------------------------------------------------------------------


def _is_file_ref(ref: str) -> bool:
    return ref.endswith(".py") or "/" in ref or "\\" in ref or ref.startswith(("~", "."))


def _split_ref(ref: str) -> tuple[str, str | None]:
    """``target`` and the optional attribute after the last colon (``file.py:attr``)."""
    head, sep, attr = ref.rpartition(":")
    # "C:\tools\x.py" has a colon too: only split when the part after it names an attribute.
    if sep and head and attr and all(part.isidentifier() for part in attr.split(".")):
        return head, attr
    return ref, None


def _load_file(path: Path, where: str) -> ModuleType:
    if not path.is_file():
        raise ConfigError(f"{where}: no such file: {path}")
    # A unique parent name per file keeps two ``tools.py`` apart; the last part stays the file's
    # stem, so ``@tool`` functions default to the namespace ``my_tools`` for ``my_tools.py``.
    digest = hashlib.sha256(str(path).encode("utf-8")).hexdigest()[:12]
    name = f"_toolgate_file_{digest}.{path.stem}"
    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{where}: cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConfigError(f"{where}: cannot load {path}: {type(exc).__name__}: {exc}") from exc
    return module


def _import(module_name: str, where: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"{where}: cannot import {module_name!r}: {detail}") from exc


def _module_tools(module: ModuleType, where: str) -> list[Any]:
    listed = getattr(module, "tools", None)
    if isinstance(listed, (list, tuple)):
        return list(listed)
    found: list[Any] = []
    for value in vars(module).values():
        if isinstance(value, FunctionTool) and all(value is not f for f in found):
            found.append(value)
    if not found:
        raise ConfigError(
            f"{where}: {module.__name__.rpartition('.')[2]} has no @tool functions and no "
            "'tools' list; name one with 'module:attr'"
        )
    return found


def _attribute(module: ModuleType, attr: str, ref: str, where: str) -> Any:
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ConfigError(f"{where}: {ref!r}: no attribute {part!r}") from None
    if isinstance(value, (list, tuple)) or callable(value):
        return value
    raise ConfigError(
        f"{where}: {ref!r} is not a @tool function, a function, or a list of them "
        f"(it is a {type(value).__name__})"
    )


def _located(item: Any, path: Path, where: str) -> Any:
    """Point the tool's ``source`` at the file (its module name is an internal one)."""
    if isinstance(item, (list, tuple)):
        return [_located(each, path, where) for each in item]
    if not isinstance(item, FunctionTool):
        if not callable(item) or isinstance(item, Tool):
            return item  # Gateway.add reports what it cannot register
        try:
            item = tool(item)
        except ToolgateError as exc:
            raise ConfigError(f"{where}: {exc.message}") from exc
    qualname = getattr(item.func, "__qualname__", item.tool.name)
    located = dataclasses.replace(
        item.tool, source=ToolSource(SourceFormat.PYTHON, f"{path}:{qualname}")
    )
    return FunctionTool(item.func, located, item.binding)


def _source_tools(source: PythonSource, folder: Path, where: str) -> list[Any]:
    target, attr = _split_ref(source.module)
    path: Path | None = None
    if _is_file_ref(target):
        path = Path(target).expanduser()
        path = (path if path.is_absolute() else folder / path).resolve()
        module = _load_file(path, where)
    else:
        module = _import(target, where)
    if attr is None:
        items = _module_tools(module, where)
    else:
        items = [_attribute(module, attr, source.module, where)]
    return items if path is None else [_located(item, path, where) for item in items]


def tool_folder_roots(
    loaded: LoadedConfig, *, home: Path | None = None, include_demo: bool = False
) -> list[FolderRoot]:
    """The tool-folder roots, in order: ``$TOOLGATE_HOME/tools`` (namespace ``local``), the
    ``tool_folders`` entries, then the bundled demo tool folders (namespace ``demo``) when
    ``demo: true`` or ``include_demo``.

    Raises :class:`ConfigError` for a configured folder that does not exist. Creates nothing.
    """
    config, label, folder = loaded.config, loaded.label, loaded.folder
    home = toolgate_home() if home is None else home
    roots = [FolderRoot(home / "tools", "local")]
    for index, entry in enumerate(config.tool_folders):
        path = Path(entry.path).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_dir():
            problem = "is not a folder" if path.exists() else "no such folder"
            raise ConfigError(f"{label}: tool_folders[{index}]: {problem}: {path}")
        # The same folder named twice (or $TOOLGATE_HOME/tools itself) would declare every tool
        # in it twice: once is enough, under one namespace.
        same = next((r for r in roots if r.path.resolve() == path.resolve()), None)
        if same is None:
            roots.append(FolderRoot(path, entry.namespace))
        elif same.namespace != entry.namespace:
            raise ConfigError(
                f"{label}: tool_folders[{index}]: {path} is already a tool folder with the "
                f"namespace {same.namespace!r}"
            )
    if config.demo or include_demo:
        from .demo import TOOL_FOLDERS

        roots.append(FolderRoot(TOOL_FOLDERS, "demo"))
    return roots


def build_gateway(
    loaded: LoadedConfig,
    *,
    include_demo: bool = False,
    home: Path | None = None,
    approver: Approver | Literal["queue"] | None = "queue",
    audit: AuditMode = "write",
) -> Gateway:
    """Build a :class:`Gateway` holding the configured tools.

    ``include_demo`` adds the bundled demo tools even when the file does not ask for them.
    ``home`` is ``$TOOLGATE_HOME`` (default :func:`toolgate_home`): its ``tools`` folder is always
    a tool-folder root, its ``.env`` holds the variables scripts declare, and its
    ``toolgate.db`` the approval requests and grants, so they outlive the process.
    ``approver`` decides calls that need approval (see :class:`Gateway`): ``"queue"`` (the
    default) keeps them pending for ``toolgate approvals`` (or any other surface) to decide;
    ``None`` denies them and opens no database.
    ``audit`` (when ``audit.enabled``, the default): ``"write"`` records every call in
    ``$TOOLGATE_HOME/audit.db`` (and the ``audit.jsonl`` file) and takes the tools' statistics
    from it; ``"read"`` opens that log only when it exists, for statistics, and creates or prunes
    nothing (for commands that call no tool); ``"off"`` keeps statistics in memory.
    Raises :class:`ConfigError` naming the file and the entry for every problem.
    """
    config, label, folder = loaded.config, loaded.label, loaded.folder
    home = toolgate_home() if home is None else home
    roots = tool_folder_roots(loaded, home=home, include_demo=include_demo)
    policies = load_policies(loaded)
    spill = config.overflow.dir
    audit_path: Path | None = None
    audit_jsonl: Path | None = None
    if config.audit.enabled and audit != "off":
        audit_path = home / AUDIT_FILE_NAME
        if audit == "read" and not audit_path.is_file():
            audit_path = None
        if audit == "write" and config.audit.jsonl is not None:
            audit_jsonl = folder / Path(config.audit.jsonl).expanduser()
    gateway = Gateway(
        overflow_limit=config.overflow.limit,
        preview_chars=config.overflow.preview,
        spill_dir=None if spill is None else folder / Path(spill).expanduser(),
        tool_folders=roots,
        env_file=home / ".env",
        env_from_process=config.scripts.env_from_process,
        script_max_output=config.scripts.max_output,
        script_concurrency=config.scripts.concurrency,
        approver=approver,
        approval_ttl=config.approval.expires_after,
        approval_rules=config.approval.approval_rules(),
        state_path=None if approver is None else home / STATE_FILE_NAME,
        policies=policies,
        agent_labels=config.agent_labels(),
        audit_path=audit_path,
        audit_jsonl=audit_jsonl,
        audit_retention_days=config.audit.retention_days if audit == "write" else None,
        rate_limit_per_agent=config.rate_limits.per_agent,
    )
    try:
        if config.python and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        for index, source in enumerate(config.python):
            where = f"{label}: python[{index}]"
            items = _source_tools(source, folder, where)
            try:
                gateway.add(items, namespace=source.namespace)
            except ToolgateError as exc:
                raise ConfigError(f"{where}: {exc.message}") from exc
        if config.demo or include_demo:
            from .demo import tools as demo_tools

            try:
                gateway.add(demo_tools)
            except ToolgateError as exc:
                raise ConfigError(f"{label}: demo: {exc.message}") from exc
    except BaseException:
        gateway.close()
        raise
    return gateway


def load_gateway(
    config_path: Path | None = None,
    *,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
    include_demo: bool = False,
    approver: Approver | Literal["queue"] | None = "queue",
    audit: AuditMode = "write",
) -> Gateway:
    """Find the configuration, load it, and build a :class:`Gateway` from it.

    ``approver`` and ``audit`` are passed to :func:`build_gateway`. Raises
    :class:`ConfigError` (naming the file and the field) when anything is wrong.
    """
    return build_gateway(
        load_config(config_path, cwd=cwd, environ=environ),
        include_demo=include_demo,
        home=toolgate_home(environ),
        approver=approver,
        audit=audit,
    )
