"""Loading the access policies of ``policies:``: inline resources and YAML files of them."""

from __future__ import annotations

from pathlib import Path

from ..errors import ConfigError
from ..formats._common.safe_yaml import YamlError, load_yaml, split_yaml_documents
from ..formats.resource.policy import load_policy
from ..model.policy import AccessPolicy
from .files import LoadedConfig, _label, _read_text

__all__ = ["load_policies"]


def _file_policies(path: Path, file_label: str, where: str) -> list[AccessPolicy]:
    if not path.is_file():
        problem = "is not a file" if path.exists() else "no such file"
        raise ConfigError(f"{where}: {problem}: {path}")
    text = _read_text(path, f"{where}: {file_label}")
    found: list[AccessPolicy] = []
    documents = [(offset, doc) for offset, doc in split_yaml_documents(text) if doc.strip()]
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
