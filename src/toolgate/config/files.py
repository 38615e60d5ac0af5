"""Finding, reading and parsing ``toolgate.yaml``, and ``$TOOLGATE_HOME``."""

from __future__ import annotations

import os
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from .._spelling import did_you_mean
from ..errors import ConfigError
from ..formats._common.safe_yaml import YamlError, load_yaml
from .schema import GatewayConfig

__all__ = [
    "CONFIG_FILE_NAME",
    "MAX_CONFIG_BYTES",
    "LoadedConfig",
    "find_config",
    "load_config",
    "parse_config",
    "toolgate_home",
]

#: The file name looked for in the current folder and in ``$TOOLGATE_HOME``.
CONFIG_FILE_NAME = "toolgate.yaml"
#: Larger files are refused before parsing (a config file is a few kilobytes).
MAX_CONFIG_BYTES = 1024 * 1024


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


def _members(annotation: Any) -> list[Any]:
    """The types a field's annotation allows, without ``Annotated`` and ``None``."""
    if get_origin(annotation) is Annotated:
        return _members(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [member for arg in get_args(annotation) for member in _members(arg)]
    return [] if annotation is type(None) else [annotation]


def _inside(annotation: Any, part: int | str) -> Any:
    """The type of ``part`` (a key, an index) of a value of type ``annotation``, or ``None``."""
    for member in _members(annotation):
        origin, args = get_origin(member), get_args(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            field = member.model_fields.get(part) if isinstance(part, str) else None
            if field is not None:
                return field.annotation
        elif isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
            return args[1]
        elif isinstance(origin, type) and issubclass(origin, Sequence) and args:
            return args[0] if isinstance(part, int) else None
    return None


def _known_keys(where: tuple[int | str, ...]) -> tuple[str, ...]:
    """The keys the section at ``where`` (a pydantic error's location) accepts; empty when it
    is not a section of toolgate.yaml's own."""
    annotation: Any = GatewayConfig
    for part in where:
        annotation = _inside(annotation, part)
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return tuple(member.model_fields)
    return ()


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    """What to say of the unknown key at ``loc``: the key it most likely misspells, else the
    keys that section takes."""
    known = _known_keys(loc[:-1])
    key = loc[-1] if loc else ""
    hint = did_you_mean(key, known) if isinstance(key, str) else ""
    if hint:
        return f"unknown key{hint}"
    if known:
        return f"unknown key (check the spelling); the keys here are {', '.join(known)}"
    return "unknown key (check the spelling)"


def _validation_message(label: str, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        message = error["msg"]
        if error["type"] == "extra_forbidden":
            message = _unknown_key(tuple(error["loc"]))
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
