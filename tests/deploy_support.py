"""The deployment artefacts as the tests read them: the Helm chart rendered by Helm's own engine
(helm-python-sdk, offline), the rendered manifests checked against the Kubernetes schemas
(kubernetes-validate), the Containerfile's stages, and a rendered pod run as real processes on
this machine with its mounts mapped onto temporary folders.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "toolgate"
CONTAINERFILE = ROOT / "Containerfile"
#: The Kubernetes version whose schemas the manifests are checked against (strict: no unknown
#: fields). The chart asks for 1.25 or later; the newest schemas kubernetes-validate ships are
#: 1.37's, and the fields the chart uses are unchanged between the two.
KUBERNETES_VERSION = "1.37.0"
#: The venv's bin folder: where the image's /opt/toolgate/bin (its venv) is on this machine.
VENV_BIN = Path(sys.executable).parent

helm = pytest.importorskip(
    "helm_python", reason="helm-python-sdk is not installed (toolgate[test])"
)


def render(values: dict[str, Any], *, name: str = "tg", namespace: str = "tools") -> dict[str, str]:
    """The chart's templates rendered with ``values`` (template path -> text), as `helm template`
    would, without a cluster."""
    chart = helm.Chart.load(CHART)
    rendered: dict[str, str] = chart.render(values, name=name, namespace=namespace)
    return rendered


def manifests(rendered: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object of a rendering (NOTES.txt and empty documents left out)."""
    objects = []
    for path, text in sorted(rendered.items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def find(
    objects: list[dict[str, Any]], kind: str, *, hook: bool | None = None
) -> list[dict[str, Any]]:
    """The objects of ``kind`` (only hooks, or none, when ``hook`` says)."""
    found = [o for o in objects if o["kind"] == kind]
    if hook is not None:
        found = [o for o in found if ("helm.sh/hook" in _annotations(o)) == hook]
    return found


def _annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod template's spec of a Deployment or Job."""
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


# -- the Containerfile ---------------------------------------------------------------------------


@dataclass
class Stage:
    """One ``FROM`` of the Containerfile, with what it inherits from a parent stage."""

    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)
    parent: Stage | None = None

    def all_instructions(self) -> list[tuple[str, str]]:
        inherited = self.parent.all_instructions() if self.parent else []
        return inherited + self.instructions

    def last(self, instruction: str) -> str | None:
        values = [v for i, v in self.all_instructions() if i == instruction]
        return values[-1] if values else None

    def env(self) -> dict[str, str]:
        """The image's environment (``ENV K=V ...`` lines, later ones win)."""
        env: dict[str, str] = {}
        for instruction, value in self.all_instructions():
            if instruction == "ENV":
                for word in shlex.split(value):
                    key, _, val = word.partition("=")
                    env[key] = val
        return env

    def exec_form(self, instruction: str) -> list[str]:
        """An ``ENTRYPOINT``/``CMD`` in exec (JSON) form; a shell form is an error."""
        value = self.last(instruction)
        assert value is not None, f"{self.name} has no {instruction}"
        words = json.loads(value)
        assert isinstance(words, list), f"{instruction} must be in exec form (a JSON list)"
        return words


def containerfile_stages() -> list[Stage]:
    """The Containerfile's stages in order; the last one is what a plain build gives."""
    parser = pytest.importorskip("dockerfile_parse", reason="dockerfile-parse is not installed")
    with CONTAINERFILE.open("rb") as file:
        structure = parser.DockerfileParser(fileobj=file).structure
    stages: list[Stage] = []
    for item in structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "FROM":
            words = value.split()
            base, name = words[0], words[2] if len(words) == 3 else str(len(stages))
            parent = next((s for s in stages if s.name == base), None)
            stages.append(Stage(name, base, parent=parent))
        elif instruction != "COMMENT" and stages:
            stages[-1].instructions.append((instruction, value))
    return stages


# -- a rendered pod as processes on this machine -------------------------------------------------


class PodFiles:
    """A pod's volumes on this machine: each mount path of the container mapped onto a folder of
    ``root``, filled as the kubelet would fill it (ConfigMap and Secret keys as files, their
    ``items`` as paths; emptyDir empty), and the image's own paths mapped likewise."""

    def __init__(self, root: Path, objects: list[dict[str, Any]], spec: dict[str, Any]) -> None:
        self.root = root
        self.objects = objects
        self.mounts: dict[str, Path] = {}
        self._written: list[Path] = []
        container = spec["containers"][0]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            folder = root / mount["mountPath"].strip("/").replace("/", "_")
            folder.mkdir(parents=True)
            self._fill(folder, volumes[mount["name"]])
            self.mounts[mount["mountPath"]] = folder
        # The image's venv is this machine's venv.
        self.mounts["/opt/toolgate/bin"] = VENV_BIN
        # Files name the pod's paths (toolgate.yaml's tool_folders): mapped too, once all are known.
        for path in self._written:
            path.write_text(self._map_text(path.read_text()))

    def _object(self, kind: str, name: str) -> dict[str, Any]:
        for obj in self.objects:
            if obj["kind"] == kind and obj["metadata"]["name"] == name:
                return obj
        raise AssertionError(f"the pod refers to {kind} {name!r}, which the chart did not render")

    def _fill(self, folder: Path, volume: dict[str, Any]) -> None:
        if "configMap" in volume:
            source = volume["configMap"]
            data = dict(self._object("ConfigMap", source["name"]).get("data") or {})
        elif "secret" in volume:
            source = volume["secret"]
            encoded = self._object("Secret", source["secretName"]).get("data") or {}
            data = {k: base64.b64decode(v).decode() for k, v in encoded.items()}
        else:
            assert "emptyDir" in volume, f"volume {volume['name']}: no stand-in for its type"
            return
        items = source.get("items") or [{"key": key, "path": key} for key in data]
        for item in items:
            target = folder / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[item["key"]])
            self._written.append(target)

    def _map_text(self, text: str) -> str:
        """``text`` with each mounted path that appears in it as a whole path mapped (in one
        pass: a mapped path, itself under /tmp, is never mapped again)."""
        paths = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
        pattern = r"(?<![\w/.])(" + paths + r")(?=/|\b|$)"
        return re.sub(pattern, lambda match: str(self.mounts[match.group(1)]), text)

    def map(self, value: str) -> str:
        """``value`` with a mounted path (or a path inside one) replaced by its folder here."""
        for mount_path in sorted(self.mounts, key=len, reverse=True):
            if value == mount_path or value.startswith(mount_path + "/"):
                return str(self.mounts[mount_path]) + value[len(mount_path) :]
        return value

    def secret_value(self, ref: dict[str, str]) -> str:
        encoded = self._object("Secret", ref["name"])["data"][ref["key"]]
        return base64.b64decode(encoded).decode()

    def config_value(self, ref: dict[str, str]) -> str:
        value: str = self._object("ConfigMap", ref["name"])["data"][ref["key"]]
        return value

    def environment(self, image_env: dict[str, str], container: dict[str, Any]) -> dict[str, str]:
        """The container's environment: the image's ``ENV``, then the pod's ``env`` with its
        Secret and ConfigMap references resolved; every path mapped onto this machine."""
        env = dict(image_env)
        for entry in container.get("env", []):
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            elif "secretKeyRef" in entry["valueFrom"]:
                env[entry["name"]] = self.secret_value(entry["valueFrom"]["secretKeyRef"])
            else:
                env[entry["name"]] = self.config_value(entry["valueFrom"]["configMapKeyRef"])
        mapped = {key: self.map(value) for key, value in env.items()}
        if "PATH" in mapped:
            mapped["PATH"] = ":".join(self.map(part) for part in mapped["PATH"].split(":"))
        return mapped

    def argv(self, container: dict[str, Any]) -> list[str]:
        """``command`` + ``args`` with paths mapped, the program found as the image would."""
        command = container["command"]
        require_program(command[0])
        words = [self.map(word) for word in command + container.get("args", [])]
        # The program, or the program an init (tini --) starts.
        if "toolgate" in command:
            words[command.index("toolgate")] = str(VENV_BIN / "toolgate")
        return words


def require_program(program: str) -> None:
    """Skip, saying how to install it, when the image's PID 1 (tini) is not on this machine."""
    if program != "toolgate" and shutil.which(program) is None:
        pytest.skip(f"{program} is not installed: apt-get install {program} (.ci/run does)")


def manifest_documents(objects: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each object with a short name for messages (``Kind/name``)."""
    for obj in objects:
        yield f"{obj['kind']}/{obj['metadata']['name']}", obj


# -- toolgate.yaml's schema in the chart's ------------------------------------------------------


def chart_config_schema() -> dict[str, Any]:
    """toolgate.yaml's JSON Schema (``toolgate config schema``) as the chart's values.schema.json
    holds it under ``config``: its definitions kept beside it, and references rewritten to reach
    them from the root of the chart's schema (draft 7, which has every keyword it uses)."""
    from toolgate.config.json_schema import config_json_schema

    schema = dict(config_json_schema())
    schema.pop("$schema", None)
    schema.pop("$id", None)
    text = json.dumps(schema).replace('"#/$defs/', '"#/properties/config/$defs/')
    rewritten: dict[str, Any] = json.loads(text)
    rewritten["description"] = (
        "toolgate.yaml as YAML (docs/guides/configuration.md); its schema is toolgate config schema"
    )
    return rewritten


def write_chart_config_schema() -> None:
    """Put :func:`chart_config_schema` into the chart's values.schema.json."""
    path = CHART / "values.schema.json"
    schema = json.loads(path.read_text())
    schema["properties"]["config"] = chart_config_schema()
    path.write_text(json.dumps(schema, indent=2) + "\n")
