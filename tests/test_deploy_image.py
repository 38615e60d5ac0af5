"""The Containerfile's promises, read from its instructions (this machine cannot pull a base
image, so the image itself is not built here; docs/guides/containers.md says what was built
elsewhere): a non-root numeric user, the ``toolgate`` entry point, a health check on ``/healthz``,
the port and paths the Helm chart uses, and Node.js only in the ``js`` target. Then the image's
``ENTRYPOINT`` + ``CMD`` with its ``ENV`` run as a process on this machine, with toolgate.yaml
where the chart mounts it, and the ``HEALTHCHECK`` command asked against it."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy_support import CHART, VENV_BIN, Stage, containerfile_stages, require_program

KEY = "tg_image_test_key"


def stages() -> dict[str, Stage]:
    return {stage.name: stage for stage in containerfile_stages()}


def chart_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def test_the_default_target_is_the_last_stage_and_both_targets_share_one_base() -> None:
    ordered = containerfile_stages()
    assert ordered[-1].name == "toolgate"
    named = stages()
    assert named["toolgate"].parent is named["base"]
    assert named["js"].parent is named["base"]
    assert named["base"].base == named["build"].base == "${PYTHON_IMAGE}"


@pytest.mark.parametrize("target", ["toolgate", "js"])
def test_each_target_runs_as_the_charts_numeric_non_root_user(target: str) -> None:
    user = stages()[target].last("USER")
    assert user is not None and re.fullmatch(r"\d+:\d+", user), user
    uid, gid = (int(part) for part in user.split(":"))
    assert uid != 0 and gid != 0
    security = chart_values()["securityContext"]
    assert (uid, gid) == (security["runAsUser"], security["runAsGroup"])


def test_entrypoint_cmd_port_and_paths_match_the_chart() -> None:
    image = stages()["toolgate"]
    # tini is PID 1: it reaps what tools leave behind and passes signals on to toolgate.
    assert image.exec_form("ENTRYPOINT") == ["tini", "-s", "--", "toolgate"]
    cmd = image.exec_form("CMD")
    values = chart_values()
    assert cmd[0] == "serve"
    assert cmd[cmd.index("--config") + 1] == "/etc/toolgate/toolgate.yaml"
    port = cmd[cmd.index("--port") + 1]
    assert image.last("EXPOSE") == port == str(values["containerPort"])
    env = image.env()
    assert env["TOOLGATE_HOME"] == values["home"]["mountPath"] == image.last("WORKDIR")
    assert env["PATH"].split(":")[0] == "/opt/toolgate/bin"
    assert json.loads(image.last("VOLUME") or "[]") == [env["TOOLGATE_HOME"]]


def test_the_healthcheck_asks_healthz_with_python() -> None:
    healthcheck = stages()["toolgate"].last("HEALTHCHECK")
    assert healthcheck is not None
    command = json.loads(healthcheck.split("CMD", 1)[1])
    assert command[:2] == ["python3", "-c"]
    assert "/healthz" in command[2] and ":8470/" in command[2]


def test_node_is_only_in_the_js_target() -> None:
    def installs_node(stage: Stage) -> bool:
        return any(
            re.search(r"\bnodejs\b|\bnpm\b|--from=node", value)
            for instruction, value in stage.all_instructions()
            if instruction in ("RUN", "COPY")
        )

    named = stages()
    assert not installs_node(named["toolgate"])
    assert installs_node(named["js"])
    assert named["js"].env()["TOOLGATE_JS_DIR"].startswith("/opt/")  # baked in: a read-only root


def test_bubblewrap_is_installed_in_the_base() -> None:
    runs = [v for i, v in stages()["base"].instructions if i == "RUN"]
    assert any("bubblewrap" in run for run in runs)
    assert any(re.search(r"\btini\b", run) for run in runs)  # the ENTRYPOINT's init


def test_the_landlock_layer_can_work_in_the_image() -> None:
    """Under the chart's RuntimeDefault seccomp profile bubblewrap cannot start; the second layer
    needs the 'landlock' extra (pyseccomp) in the virtual environment and libseccomp in the base."""
    text = Path(CHART.parents[2] / "Containerfile").read_text()
    extras = re.search(r"^ARG EXTRAS=(\S+)$", text, re.MULTILINE)
    assert extras is not None and "landlock" in extras.group(1).split(",")
    runs = [v for i, v in stages()["base"].instructions if i == "RUN"]
    assert any(re.search(r"\blibseccomp2\b", run) for run in runs)


@pytest.mark.slow
def test_the_images_command_serves_a_mounted_config_and_passes_its_healthcheck(
    tmp_path: Path,
) -> None:
    image = stages()["toolgate"]
    # The image's paths on this machine: the config mount, the home volume, the venv.
    mounts = {
        "/etc/toolgate": tmp_path / "etc",
        "/var/lib/toolgate": tmp_path / "home",
        "/opt/toolgate/bin": VENV_BIN,
        "/tmp": tmp_path / "tmp",
    }
    for folder in mounts.values():
        folder.mkdir(exist_ok=True)
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    (mounts["/etc/toolgate"] / "toolgate.yaml").write_text(
        f"agents:\n  bot:\n    key_sha256: {digest}\n"
    )

    def mapped(value: str) -> str:
        for path, folder in mounts.items():
            if value == path or value.startswith(path + "/"):
                return str(folder) + value[len(path) :]
        return value

    env = {key: mapped(value) for key, value in image.env().items()}
    env["PATH"] = ":".join(mapped(part) for part in env["PATH"].split(":"))
    env["TMPDIR"] = str(mounts["/tmp"])
    env["COLUMNS"] = "500"  # the banner on one line, however long this machine's paths are
    entrypoint = image.exec_form("ENTRYPOINT")
    require_program(entrypoint[0])
    argv = [mapped(word) for word in entrypoint + image.exec_form("CMD")]
    argv[entrypoint.index("toolgate")] = str(VENV_BIN / "toolgate")
    argv[argv.index("--port") + 1] = "0"  # this machine's port 8470 may be taken
    workdir = mapped(image.last("WORKDIR") or "/")
    process = subprocess.Popen(
        argv, env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        match = re.search(r"from (\S+) on http://0\.0\.0\.0:(\d+)", banner)
        if not match:
            process.kill()
            raise AssertionError(banner + process.stdout.read())
        assert match.group(1) == str(mounts["/etc/toolgate"] / "toolgate.yaml")
        healthcheck = image.last("HEALTHCHECK") or ""
        command = json.loads(healthcheck.split("CMD", 1)[1])
        command[2] = command[2].replace(":8470/", f":{match.group(2)}/")
        command[0] = str(VENV_BIN / "python3")
        # The HEALTHCHECK succeeds once the server answers (it starts listening before that).
        for _ in range(100):
            checked = subprocess.run(command, env=env, capture_output=True, timeout=30)
            if checked.returncode == 0:
                break
            time.sleep(0.2)
        assert checked.returncode == 0, checked.stderr
        assert sorted(p.name for p in mounts["/var/lib/toolgate"].iterdir()) >= ["audit.db"]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
    assert process.returncode == 0
