"""Attack review of the Helm chart (deploy/helm/toolgate) and its guide: an operator who gets the
values wrong, a newcomer who copy-pastes the guide, and someone in the cluster who may read
Deployments and pod logs but not Secrets (Kubernetes' ``view`` role). Each case renders the chart
with Helm's own engine, as ``helm install`` would."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from deploy_support import find, helm, manifests, pod_spec, render

KEY_SHA256 = hashlib.sha256(b"tg_review_key").hexdigest()
MINIMAL: dict[str, Any] = {"config": {"agents": {"bot": {"key_sha256": KEY_SHA256}}}}
#: Replicas on PostgreSQL, so that every object (the hook Job and its Secret too) is rendered.
REPLICAS: dict[str, Any] = {
    **MINIMAL,
    "replicaCount": 2,
    "database": {"url": "postgresql://toolgate:pw@db.internal:5432/toolgate"},
}
#: Kubernetes' limit for a DNS label, a label value and the name of a Job (the Job controller
#: puts the Job's name into its pods' ``job-name`` label).
LABEL_MAX = 63


def refusal(values: dict[str, Any], *, name: str = "tg") -> str:
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as refused:
        render(values, name=name)
    return str(refused.value)


# -- names -----------------------------------------------------------------------------------------


def test_a_long_release_name_gives_a_job_name_kubernetes_accepts() -> None:
    """Helm allows release names of 53 characters; the fullname is cut at 63, but the hook Job's
    ``-db-upgrade`` was added after the cut, so the API server refused the Job (its name becomes
    a label value) and every install failed."""
    objects = manifests(render(REPLICAS, name="r" * 53))
    (job,) = find(objects, "Job")
    assert len(job["metadata"]["name"]) <= LABEL_MAX, job["metadata"]["name"]
    assert job["metadata"]["name"].endswith("-db-upgrade")
    for obj in objects:
        assert len(obj["metadata"]["name"]) <= 253
        for value in (obj["metadata"].get("labels") or {}).values():
            assert len(value) <= LABEL_MAX, (obj["kind"], value)
    # The long-name release keeps its objects apart from a release whose name shares the prefix.
    other = manifests(render(REPLICAS, name="r" * 52 + "s"))
    assert find(other, "Job")[0]["metadata"]["name"] != job["metadata"]["name"]


def test_a_release_name_that_cannot_name_a_service_is_refused_by_name() -> None:
    """A Service's name must start with a letter (DNS-1035); Helm accepts "1tg" as a release name,
    and the API server would refuse the Service mid-install."""
    message = refusal(MINIMAL, name="1tg")
    assert "1tg-toolgate" in message and "start with a letter" in message
    assert "fullnameOverride" in message
    message = refusal({**MINIMAL, "fullnameOverride": "Toolgate_Prod"})
    assert "Toolgate_Prod" in message


# -- secrets that leak ---------------------------------------------------------------------------


def _secret_checksum(values: dict[str, Any]) -> str:
    (deployment,) = find(manifests(render(values)), "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    checksum: str = annotations["checksum/secret"]
    return checksum


def test_the_secret_checksum_is_not_a_fast_hash_of_the_secret_manifest() -> None:
    """Someone allowed to read Deployments but not Secrets sees ``checksum/secret``. When it is
    the SHA-256 of the rendered Secret (whose every other byte follows from the public chart and
    the release's name), a short database password is found offline at billions of guesses a
    second: render the Secret for each guess, hash it, compare."""
    checksum = _secret_checksum(REPLICAS)
    # The attacker's fast path: the chart's own Secret template, rendered for the guess.
    guesses = ["secret", "pw", "toolgate"]
    for guess in guesses:
        values = {
            **REPLICAS,
            "database": {"url": f"postgresql://toolgate:{guess}@db.internal:5432/toolgate"},
        }
        (secret_yaml,) = [
            text for path, text in render(values).items() if path.endswith("/secret.yaml")
        ]
        assert hashlib.sha256(secret_yaml.encode()).hexdigest() != checksum, (
            f"checksum/secret reveals the database password {guess!r}"
        )
    # Still a checksum: a changed secret rolls the pods, an unchanged one does not.
    assert _secret_checksum(REPLICAS) == checksum
    changed = {**REPLICAS, "database": {"url": "postgresql://toolgate:px@db.internal/toolgate"}}
    assert _secret_checksum(changed) != checksum


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("TOOLGATE_DATABASE_URL", "database.url"),
        ("TOOLGATE_REDIS_URL", "redis.url"),
        ("TOOLGATE_SECRETS_KEY", "secretsKey.value"),
        ("TOOLGATE_HOME", "home.mountPath"),
        ("HOME", "home.mountPath"),
    ],
)
def test_env_may_not_override_what_the_chart_sets(name: str, expected: str) -> None:
    """``env: [{name: TOOLGATE_DATABASE_URL, value: postgresql://…:password@…}]`` rendered a
    second entry after the chart's own: it won (the last one does), the password stood in the
    Deployment for ``kubectl describe`` and anyone who reads Deployments, and the migration Job,
    which does not get ``env``, migrated another database or none."""
    values = {**MINIMAL, "env": [{"name": name, "value": "postgresql://u:pw@elsewhere/x"}]}
    message = refusal(values)
    assert f"env[0]: {name}" in message and expected in message


@pytest.mark.parametrize(
    "values",
    [
        {**MINIMAL, "database": {"existingSecret": "toolgate-db\n      optional: true"}},
        {**MINIMAL, "redis": {"existingSecret": "r", "existingSecretKey": "url\n  x: y"}},
        {**MINIMAL, "secretsKey": {"existingSecret": "Key Store"}},
        {**MINIMAL, "image": {"repository": "registry.example.com/toolgate\n  x: y"}},
        {**MINIMAL, "home": {"mountPath": "/var/lib/toolgate\n  x: y"}},
        {**MINIMAL, "priorityClassName": "high\n      hostPID: true"},
        {**MINIMAL, "serviceAccount": {"name": "tg\n      hostNetwork: true"}},
        {**MINIMAL, "tmp": {"sizeLimit": "1Gi\n          medium: Memory"}},
    ],
    ids=[
        "secret-name",
        "secret-key",
        "secret-name-space",
        "image",
        "home",
        "priority",
        "service-account",
        "tmp-size",
    ],
)
def test_a_value_cannot_write_yaml_into_the_manifests(values: dict[str, Any]) -> None:
    """Values the templates write unquoted: a newline in them added fields to the pod (an
    ``existingSecret`` made the database URL ``optional: true``, so the pods started without it,
    each on SQLite of its own). They are refused by the schema instead."""
    assert "does not match pattern" in refusal(values)


# -- the guide, copy-pasted ----------------------------------------------------------------------


def _guide_blocks() -> tuple[str, str, str]:
    from doc_blocks import doc_block

    return (
        doc_block("kubernetes:make-key"),
        doc_block("kubernetes:helm-values"),
        doc_block("kubernetes:helm-install"),
    )


def test_the_guides_values_hold_no_agent_key_someone_else_knows() -> None:
    """The guide's values held the SHA-256 of "test" as the key of an agent labelled
    ``role: operator``: a newcomer who copied them deployed a gateway that takes the key "test"."""
    _, values_text, _ = _guide_blocks()
    hashes = re.findall(r"\b[0-9a-f]{64}\b", values_text)
    assert hashes == [], f"the guide's values name agent keys by hash: {hashes}"
    values = yaml.safe_load(values_text)
    message = refusal(values, name="toolgate")
    assert "no agent has a key_sha256" in message  # copied alone, it is refused, not served


def test_the_guides_key_and_install_commands_give_the_chart_the_readers_own_key() -> None:
    """The guide's commands, run: the key made by its block, its SHA-256 passed by the install
    command's ``--set-string``, renders a release that takes that key and no other."""
    make_key, values_text, install = _guide_blocks()
    shell = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", make_key + '\nprintf "%s\\n%s" "$KEY" "$KEY_SHA256"'],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    key, key_sha256 = shell.stdout.split("\n")
    assert key.startswith("tg_") and hashlib.sha256(key.encode()).hexdigest() == key_sha256
    sets = re.findall(r"--set-string ([\w.-]+)=\"?\$KEY_SHA256\"?", install)
    assert sets == ["config.agents.ci-bot.key_sha256"], install
    values = yaml.safe_load(values_text)
    values["config"]["agents"]["ci-bot"]["key_sha256"] = key_sha256
    objects = manifests(render(values, name="toolgate"))
    (config,) = [c for c in find(objects, "ConfigMap") if c["metadata"]["name"].endswith("config")]
    agents = yaml.safe_load(config["data"]["toolgate.yaml"])["agents"]
    assert [a.get("key_sha256") for a in agents.values()] == [key_sha256]
    assert find(objects, "Deployment")[0]["metadata"]["name"] == "toolgate"
    assert pod_spec(find(objects, "Job")[0])["containers"][0]["args"] == ["db", "upgrade"]


# -- PID 1 -----------------------------------------------------------------------------------------

#: A script tool that leaves a process behind: its child exits at once, the grandchild a moment
#: later, reparented to the container's PID 1.
ORPHANING_TOOL_MD = """---
name: orphan
script: script.py
runtime: python
inputSchema: {type: object}
outputSchema: {type: object, properties: {ok: {type: boolean}}}
---

Start a process that outlives the script.
"""
ORPHANING_SCRIPT = """import json, subprocess
subprocess.Popen(["sh", "-c", "sleep 0.2 &"])
print(json.dumps({"ok": True}))
"""


def _descendants(root: int) -> dict[int, str]:
    """Every descendant of ``root`` (pid -> state letter), from /proc."""
    parents: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()  # noqa: SIM115 - read once
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        parents[int(entry)] = (int(fields[1]), fields[0])
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, state) in parents.items():
            if ppid == parent and pid not in found:
                found[pid] = state
                frontier.append(pid)
    return found


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("tini") is None,
    reason="needs root and unshare(1) to give the pod's command a PID namespace of its own, and "
    "tini (Debian's package; .ci/run installs it), the command's PID 1",
)
def test_the_pods_pid_1_reaps_what_tools_leave_behind(tmp_path: Path) -> None:
    """In a container the command is PID 1, and every process whose parent exits is reparented
    to it. ``toolgate serve`` as PID 1 waits only for the children it started, so each call of a
    script tool that left a process behind left zombies in the pod for good, until the pod's
    process limit refused every fork. The rendered command runs here as PID 1 of a PID namespace
    of its own, as in a pod."""
    from deploy_support import PodFiles, containerfile_stages

    values = {
        **MINIMAL,
        "toolFolders": {"orphan": {"tool.md": ORPHANING_TOOL_MD, "script.py": ORPHANING_SCRIPT}},
    }
    objects = manifests(render(values))
    spec = pod_spec(find(objects, "Deployment")[0])
    container = spec["containers"][0]
    files = PodFiles(tmp_path, objects, spec)
    argv = files.argv(container)
    argv[argv.index("--port") + 1] = "0"
    stage = containerfile_stages()[-1]
    env = files.environment(stage.env(), container)
    env["COLUMNS"] = "500"
    pid_namespace = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
    server = subprocess.Popen(
        pid_namespace + argv,
        env=env,
        cwd=files.map(stage.last("WORKDIR") or "/"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        banner = ""
        while "on http://" not in banner:
            line = server.stdout.readline()
            assert line, banner + (server.stdout.read() or "")
            banner += line
        port = re.search(r"on http://0\.0\.0\.0:(\d+)", banner)
        assert port, banner
        key = "tg_review_key"
        for _ in range(3):
            answer = httpx2.post(
                f"http://127.0.0.1:{port.group(1)}/v1/tools/local:orphan/call",
                json={"arguments": {}},
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            ).json()
            assert answer["status"] == "ok", answer
        # The grandchildren exit after 0.2 s; a reaper collects them at once. Look until none is
        # left unreaped, for at most 10 seconds (zombies that nobody reaps never go).
        deadline = time.monotonic() + 10
        while True:
            zombies = [pid for pid, state in _descendants(server.pid).items() if state == "Z"]
            if not zombies or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert zombies == [], f"{len(zombies)} zombies under the pod's PID 1 ({argv[:3]})"
        assert server.poll() is None
    finally:
        # unshare(1) ignores SIGTERM while it waits: the pod's PID 1 (its child) gets it, as the
        # kubelet would send it.
        children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
        for pid in children.read_text().split() if children.exists() else []:
            os.kill(int(pid), signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
    # SIGTERM to PID 1 reached toolgate, which stopped cleanly.
    assert server.returncode == 0, server.stdout.read() if server.stdout else ""


# -- what the chart's tests let through (mutations that survived them) ----------------------------


def test_the_hook_secret_with_the_database_url_does_not_outlive_the_hooks() -> None:
    """A hook is no part of the release: ``helm uninstall`` leaves it. Without a delete policy
    the database URL and its password stayed in the namespace after every install."""
    (secret,) = find(manifests(render(REPLICAS)), "Secret", hook=True)
    policies = secret["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
    assert {"before-hook-creation", "hook-succeeded"} <= set(policies)


def test_home_and_tmp_are_the_volumes_the_values_name() -> None:
    """``TOOLGATE_HOME`` follows ``home.mountPath`` (the image's own is /var/lib/toolgate), and
    /tmp is a disk-backed emptyDir with its size limit (a tool filling it evicts the pod, it does
    not take the node's memory)."""
    values = {**MINIMAL, "home": {"mountPath": "/data", "volume": {"emptyDir": {}}}}
    spec = pod_spec(find(manifests(render(values)), "Deployment")[0])
    (container,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TOOLGATE_HOME"] == env["HOME"] == "/data" and env["TMPDIR"] == "/tmp"
    writable = {
        m["mountPath"]: m["name"] for m in container["volumeMounts"] if not m.get("readOnly")
    }
    assert writable == {"/data": "home", "/tmp": "tmp"}
    (tmp,) = [v for v in spec["volumes"] if v["name"] == "tmp"]
    assert tmp == {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}


def test_a_localhost_seccomp_profile_without_its_file_is_refused_by_name() -> None:
    """``seccompProfile: {type: Localhost}`` (the guide's way to allow user namespaces) without
    ``localhostProfile`` rendered, and the API server refused every pod at install."""
    values = {**MINIMAL, "securityContext": {"seccompProfile": {"type": "Localhost"}}}
    assert "localhostProfile" in refusal(values)
    profile = {"type": "Localhost", "localhostProfile": "profiles/toolgate-userns.json"}
    spec = pod_spec(
        find(
            manifests(render({**MINIMAL, "securityContext": {"seccompProfile": profile}})),
            "Deployment",
        )[0]
    )
    assert spec["securityContext"]["seccompProfile"] == profile


def test_the_migration_job_connects_as_the_server_does() -> None:
    """libpq reads TLS and credential settings from the environment (``PGSSLMODE``,
    ``PGSSLROOTCERT``, ``PGPASSWORD``…). Given in ``env``/``envFrom``, they reached the server but
    not the migration Job, which then connected another way (without TLS) or not at all."""
    values = {
        **REPLICAS,
        "env": [
            {"name": "PGSSLMODE", "value": "verify-full"},
            {
                "name": "PGPASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "pg", "key": "password"}},
            },
        ],
        "envFrom": [{"secretRef": {"name": "pg-settings"}}],
    }
    objects = manifests(render(values))
    server = pod_spec(find(objects, "Deployment")[0])["containers"][0]
    job = pod_spec(find(objects, "Job")[0])["containers"][0]
    for entry in values["env"]:
        assert entry in server["env"] and entry in job["env"], entry["name"]
    assert job["envFrom"] == server["envFrom"] == values["envFrom"]


def test_a_crash_looping_pod_does_not_block_a_node_drain() -> None:
    """With two replicas and ``maxUnavailable: 1``, one pod that never gets ready (a bad config,
    a database it cannot reach at start) counts as the one unavailable: the PodDisruptionBudget
    then refused to evict the other, healthy or not, and a node drain hung. Unhealthy pods may
    always be evicted (``unhealthyPodEvictionPolicy``, Kubernetes 1.27 or later)."""
    (pdb,) = find(manifests(render(REPLICAS)), "PodDisruptionBudget")
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert pdb["spec"]["maxUnavailable"] == 1
    assert find(manifests(render(MINIMAL)), "PodDisruptionBudget") == []  # one replica: none


# -- toolgate.yaml checked at install ------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"agent": {"bot": {"key_sha256": KEY_SHA256}}}, "'agent' not allowed"),
        ({**MINIMAL["config"], "serve": {"prot": 8470}}, "at '/config/serve'"),
        ({**MINIMAL["config"], "rate_limits": {"per_agent": "yes"}}, "per_agent"),
        ({"agents": {"bot": {"key_sha": KEY_SHA256}}}, "at '/config/agents/bot'"),
    ],
    ids=["misspelt-section", "misspelt-key", "wrong-type", "misspelt-agent-key"],
)
def test_a_toolgate_yaml_the_gateway_would_refuse_is_refused_at_install(
    config: dict[str, Any], expected: str
) -> None:
    """``config`` rendered into the ConfigMap whatever it held: a misspelt key passed
    ``helm install`` and every pod then exited 3 in a crash loop. The chart's schema holds
    toolgate.yaml's own (``toolgate config schema``), so Helm names the key at install."""
    assert expected in refusal({"config": config})


def test_the_charts_copy_of_the_toolgate_yaml_schema_is_this_toolgates() -> None:
    import json

    from deploy_support import CHART, chart_config_schema

    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["config"] == chart_config_schema(), (
        "deploy/helm/toolgate/values.schema.json's config is not this toolgate's schema of "
        "toolgate.yaml: regenerate it with python -c \"import sys; sys.path.insert(0, 'tests'); "
        'import deploy_support; deploy_support.write_chart_config_schema()"'
    )


# -- values that would leave the restricted standard without an error ----------------------------


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"home": {"volume": {"hostPath": {"path": "/"}}}}, "/home/volume"),
        ({"home": {"volume": {"emptyDir": {}, "hostPath": {"path": "/"}}}}, "/home/volume"),
        (
            {
                "podAnnotations": {
                    "container.apparmor.security.beta.kubernetes.io/toolgate": "unconfined"
                }
            },
            "/podAnnotations",
        ),
    ],
    ids=["host-path", "two-sources", "apparmor-unconfined"],
)
def test_values_cannot_take_the_pod_out_of_the_restricted_standard(
    values: dict[str, Any], expected: str
) -> None:
    """In a namespace that does not enforce the restricted standard nothing stops such a pod:
    ``home.volume: {hostPath: {path: /}}`` gave toolgate (and every tool it runs) the node's root
    file system, writable; an annotation ran it without AppArmor."""
    assert expected in refusal({**MINIMAL, **values})
    pvc = {"persistentVolumeClaim": {"claimName": "toolgate-home"}}
    spec = pod_spec(find(manifests(render({**MINIMAL, "home": {"volume": pvc}})), "Deployment")[0])
    assert {"name": "home", **pvc} in spec["volumes"]


def test_the_documented_persistent_volume_for_home_replaces_the_default() -> None:
    """Helm merges a map of the values with the default's: ``home.volume:
    {persistentVolumeClaim: …}`` (values.yaml's own example) kept the default ``emptyDir`` beside
    it, a volume of two sources that the API server refuses."""
    pvc = {"persistentVolumeClaim": {"claimName": "toolgate-home"}}
    spec = pod_spec(find(manifests(render({**MINIMAL, "home": {"volume": pvc}})), "Deployment")[0])
    (home,) = [v for v in spec["volumes"] if v["name"] == "home"]
    assert home == {"name": "home", **pvc}
    default = pod_spec(find(manifests(render(MINIMAL)), "Deployment")[0])
    assert {"name": "home", "emptyDir": {}} in default["volumes"]


def test_every_object_names_the_release_namespace() -> None:
    """``helm template -n tools … | kubectl apply -f -`` (and GitOps tools that apply the
    rendering) put objects without a namespace into the current context's, away from the Secrets
    they name and the address NOTES.txt gives."""
    for obj in manifests(render(REPLICAS, namespace="tools")):
        assert obj["metadata"].get("namespace") == "tools", (obj["kind"], obj["metadata"]["name"])
