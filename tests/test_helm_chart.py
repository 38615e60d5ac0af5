"""The Helm chart (deploy/helm/toolgate) rendered by Helm's own engine with default and custom
values: every manifest is valid against the Kubernetes schemas (strict), every pod is admitted by
the restricted Pod Security Standard, and values that would give a broken deployment are refused
with a message that names the value and the fix."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import yaml

from deploy_support import (
    CHART,
    KUBERNETES_VERSION,
    find,
    helm,
    manifests,
    pod_spec,
    render,
)

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (toolgate[test])"
)

KEY_SHA256 = hashlib.sha256(b"tg_bot_key").hexdigest()
#: The least a release needs: one agent key (serve listens beyond loopback in a pod).
MINIMAL: dict[str, Any] = {"config": {"agents": {"bot": {"key_sha256": KEY_SHA256}}}}
#: Replicas on PostgreSQL and Redis, with every optional part the chart has.
FULL: dict[str, Any] = {
    "replicaCount": 3,
    "config": {
        "agents": {
            "bot": {"key_sha256": KEY_SHA256},
            "ops": {"key_sha256": "0" * 64, "labels": {"role": "operator"}},
        },
        "rate_limits": {"per_agent": True},
    },
    "database": {"url": "postgresql://toolgate:pw@db.internal:5432/toolgate"},
    "redis": {"url": "redis://cache.internal:6379/0"},
    "secretsKey": {"value": "c2VjcmV0LWtleS1vZi10aGlydHktdHdvLWJ5dGVzISE="},
    "configFiles": {"policies.yaml": "[]\n", "my_tools.py": "from toolgate import tool\n"},
    "toolFolders": {"greet": {"tool.md": "---\nname: greet\n---\n", "script.py": "print('{}')\n"}},
    "userNamespaces": True,
    "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}},
    "env": [{"name": "OTEL_SERVICE_NAME", "value": "toolgate"}],
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "toolgate"}},
        }
    ],
}
EXISTING_SECRETS: dict[str, Any] = {
    "replicaCount": 2,
    "agentKeysInDatabase": True,
    "config": {},
    "database": {"existingSecret": "toolgate-db", "existingSecretKey": "url"},
    "redis": {"existingSecret": "toolgate-redis"},
    "secretsKey": {"existingSecret": "toolgate-key"},
}
RENDERINGS = {"minimal": MINIMAL, "full": FULL, "existing-secrets": EXISTING_SECRETS}


def refusal(values: dict[str, Any]) -> str:
    """The message of the chart's refusal to render ``values``."""
    with pytest.raises((helm.HelmRenderError, helm.HelmValuesError)) as refused:
        render(values)
    return str(refused.value)


@pytest.mark.parametrize("values", RENDERINGS.values(), ids=RENDERINGS.keys())
def test_every_manifest_is_valid_against_the_kubernetes_schemas(values: dict[str, Any]) -> None:
    objects = manifests(render(values))
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as error:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            raise AssertionError(f"{name}: {error.message} at {list(error.path)}") from None


def test_helm_lint_finds_nothing_in_strict_mode() -> None:
    report = helm.lint(CHART, MINIMAL, strict=True, kube_version=f"v{KUBERNETES_VERSION}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not problems and not report["errors"], report


def test_what_each_rendering_holds() -> None:
    minimal = manifests(render(MINIMAL))
    assert sorted(o["kind"] for o in minimal) == [
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceAccount",
    ]
    full = manifests(render(FULL))
    assert sorted(o["kind"] for o in full) == [
        "ConfigMap",
        "ConfigMap",
        "Deployment",
        "Job",
        "PodDisruptionBudget",
        "Secret",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    (deployment,) = find(full, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0}
    (pdb,) = find(full, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]


# -- the restricted Pod Security Standard --------------------------------------------------------
#
# Written from the standard's definition (kubernetes.io/docs/concepts/security/pod-security-
# standards, "Restricted", which includes "Baseline"), field by field, for the pod and each of its
# containers. A failing check names the rule.

RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Where ``spec`` (a pod spec) breaks the restricted Pod Security Standard."""
    found = []
    pod = spec.get("securityContext") or {}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            found.append(f"host namespaces: {host}")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume types: {volume['name']} is {kinds}")
    for sysctl in pod.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl['name']}")
    if pod.get("runAsUser") == 0:
        found.append("running as non-root user: pod runAsUser 0")
    if (pod.get("seLinuxOptions") or {}).get("user") or (pod.get("seLinuxOptions") or {}).get(
        "role"
    ):
        found.append("SELinux: pod sets user or role")
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        found.append("HostProcess: pod")
    containers = (
        spec.get("containers", [])
        + spec.get("initContainers", [])
        + spec.get("ephemeralContainers", [])
    )
    for container in containers:
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"privileged containers: {name}")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"HostProcess: {name}")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"host ports: {name}")
        if context.get("procMount", "Default") != "Default":
            found.append(f"/proc mount type: {name}")
        if (context.get("seLinuxOptions") or {}).get("user"):
            found.append(f"SELinux: {name} sets user")
        apparmor = (context.get("appArmorProfile") or pod.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            found.append(f"AppArmor: {name} {apparmor}")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(
                f"privilege escalation: {name} does not set allowPrivilegeEscalation false"
            )
        run_as_non_root = context.get("runAsNonRoot", pod.get("runAsNonRoot"))
        if run_as_non_root is not True:
            found.append(f"running as non-root: {name} (runAsNonRoot not true)")
        if context.get("runAsUser") == 0:
            found.append(f"running as non-root user: {name} runAsUser 0")
        seccomp = (context.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccomp: {name} has {seccomp}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"capabilities: {name} does not drop ALL")
        if set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"capabilities: {name} adds {capabilities['add']}")
    return found


def test_the_restricted_checks_catch_what_they_check() -> None:
    """The checker itself, on a pod that breaks each rule once: a check that cannot fail would
    let a weakened chart through."""
    bad = {
        "hostPID": True,
        "securityContext": {"runAsUser": 0, "sysctls": [{"name": "kernel.msgmax", "value": "1"}]},
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [
            {
                "name": "c",
                "ports": [{"containerPort": 80, "hostPort": 80}],
                "securityContext": {
                    "privileged": True,
                    "capabilities": {"add": ["SYS_ADMIN"]},
                    "seccompProfile": {"type": "Unconfined"},
                    "procMount": "Unmasked",
                },
            }
        ],
    }
    rules = {v.split(":")[0] for v in restricted_violations(bad)}
    assert rules == {
        "host namespaces",
        "volume types",
        "sysctls",
        "running as non-root user",
        "privileged containers",
        "host ports",
        "/proc mount type",
        "privilege escalation",
        "running as non-root",
        "seccomp",
        "capabilities",
    }


@pytest.mark.parametrize("values", RENDERINGS.values(), ids=RENDERINGS.keys())
def test_every_pod_is_admitted_by_the_restricted_pod_security_standard(
    values: dict[str, Any],
) -> None:
    objects = manifests(render(values))
    pods = find(objects, "Deployment") + find(objects, "Job")
    assert pods
    for obj in pods:
        spec = pod_spec(obj)
        assert restricted_violations(spec) == [], obj["metadata"]["name"]
        # Beyond the standard: a read-only root, writable only where a volume is mounted.
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert isinstance(container["securityContext"]["runAsUser"], int)
            mounted = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
            assert mounted == {"/tmp", "/var/lib/toolgate"}
        assert spec["automountServiceAccountToken"] is False


def test_user_namespaces_are_asked_for_only_when_set() -> None:
    for values, expected in ((MINIMAL, None), (FULL, False)):
        objects = manifests(render(values))
        for obj in find(objects, "Deployment") + find(objects, "Job"):
            assert pod_spec(obj).get("hostUsers") is expected


# -- the server's container ----------------------------------------------------------------------


def test_probes_ask_healthz_on_the_served_port_and_the_service_selects_only_servers() -> None:
    objects = manifests(render(FULL))
    (deployment,) = find(objects, "Deployment")
    (container,) = pod_spec(deployment)["containers"]
    (port,) = container["ports"]
    assert port == {"name": "http", "containerPort": 8470, "protocol": "TCP"}
    args = container["args"]
    assert args[args.index("--port") + 1] == "8470"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    (service,) = find(objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    selector = service["spec"]["selector"]
    server_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= server_labels.items()
    (job,) = find(objects, "Job")
    job_labels = job["spec"]["template"]["metadata"]["labels"]
    assert not selector.items() <= job_labels.items()  # the Service never sends to the Job's pod


def test_the_urls_and_key_reach_the_container_through_secrets_only() -> None:
    objects = manifests(render(FULL))
    (deployment,) = find(objects, "Deployment")
    (container,) = pod_spec(deployment)["containers"]
    env = {e["name"]: e for e in container["env"]}
    for name, key in (
        ("TOOLGATE_DATABASE_URL", "database-url"),
        ("TOOLGATE_REDIS_URL", "redis-url"),
        ("TOOLGATE_SECRETS_KEY", "secrets-key"),
    ):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": "tg-toolgate", "key": key}
    (config,) = [c for c in find(objects, "ConfigMap") if c["metadata"]["name"].endswith("config")]
    assert "pw@" not in str(config) and "cache.internal" not in str(config)

    objects = manifests(render(EXISTING_SECRETS))
    assert find(objects, "Secret") == []
    (deployment,) = find(objects, "Deployment")
    env = {e["name"]: e for e in pod_spec(deployment)["containers"][0]["env"]}
    assert env["TOOLGATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "toolgate-db",
        "key": "url",
    }
    assert env["TOOLGATE_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == "toolgate-redis"
    (job,) = find(objects, "Job")
    (job_env,) = [e for e in pod_spec(job)["containers"][0]["env"] if "valueFrom" in e]
    assert job_env["valueFrom"]["secretKeyRef"] == {"name": "toolgate-db", "key": "url"}


def test_the_migration_job_runs_db_upgrade_before_install_and_upgrade() -> None:
    objects = manifests(render(FULL))
    (job,) = find(objects, "Job", hook=True)
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    (container,) = pod_spec(job)["containers"]
    assert container["command"] + container["args"] == ["toolgate", "db", "upgrade"]
    # Its Secret is a hook too, made first: the release's own Secret does not exist yet.
    (secret,) = find(objects, "Secret", hook=True)
    assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        annotations["helm.sh/hook-weight"]
    )
    (url,) = [e for e in container["env"] if e["name"] == "TOOLGATE_DATABASE_URL"]
    ref = url["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "database-url"}
    assert "serviceAccountName" not in pod_spec(job)  # the release's is not there at pre-install
    assert find(manifests(render(MINIMAL)), "Job") == []  # SQLite: nothing to migrate


def test_a_config_change_rolls_the_pods_and_nothing_else_does() -> None:
    def checksums(values: dict[str, Any]) -> dict[str, str]:
        (deployment,) = find(manifests(render(values)), "Deployment")
        annotations: dict[str, str] = deployment["spec"]["template"]["metadata"]["annotations"]
        return annotations

    first = checksums(FULL)
    assert checksums(FULL) == first
    changed = {**FULL, "config": {**FULL["config"], "demo": True}}
    assert checksums(changed)["checksum/config"] != first["checksum/config"]
    folders = {**FULL, "toolFolders": {"greet": {"tool.md": "changed", "script.py": "x"}}}
    assert checksums(folders)["checksum/config"] != first["checksum/config"]
    key = {**FULL, "secretsKey": {"value": "b3RoZXI="}}
    assert checksums(key)["checksum/secret"] != first["checksum/secret"]
    assert checksums({**FULL, "logFormat": ""}) == first


def test_tool_folders_are_mounted_as_folders_and_named_in_toolgate_yaml() -> None:
    objects = manifests(render(FULL))
    (deployment,) = find(objects, "Deployment")
    (tools,) = [v for v in pod_spec(deployment)["volumes"] if v["name"] == "tools"]
    assert tools["configMap"]["items"] == [
        {"key": "greet.script.py", "path": "greet/script.py"},
        {"key": "greet.tool.md", "path": "greet/tool.md"},
    ]
    (config,) = [
        c for c in find(objects, "ConfigMap") if c["metadata"]["name"] == "tg-toolgate-config"
    ]
    toolgate_yaml = yaml.safe_load(config["data"]["toolgate.yaml"])
    assert toolgate_yaml["tool_folders"] == [{"path": "/srv/toolgate/tools", "namespace": "local"}]
    assert toolgate_yaml["rate_limits"] == {"per_agent": True}
    assert set(config["data"]) == {"toolgate.yaml", "policies.yaml", "my_tools.py"}


# -- what the chart refuses ----------------------------------------------------------------------


def test_the_default_values_are_refused_until_an_agent_has_a_key() -> None:
    message = refusal({})
    assert "config.agents: no agent has a key_sha256" in message
    assert "sha256sum" in message and "agentKeysInDatabase" in message
    oauth = {"issuer": "https://login.example.com", "resource": "https://toolgate.example.com"}
    render({"config": {"auth": oauth}})  # OAuth will do


def test_replicas_without_a_database_are_refused() -> None:
    message = refusal({**MINIMAL, "replicaCount": 3})
    assert "replicaCount is 3" in message
    assert "set database.url (or database.existingSecret)" in message
    # PostgreSQL alone is enough: the rate-limit counters then live there too.
    render({**MINIMAL, "replicaCount": 3, "database": {"url": "postgresql://db/toolgate"}})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {**MINIMAL, "config": {**MINIMAL["config"], "state": "postgresql://db/x"}},
            "config.state: give the URL as database.url",
        ),
        (
            {**MINIMAL, "config": {**MINIMAL["config"], "redis": "redis://r"}},
            "config.redis: give the URL as redis.url",
        ),
        (
            {**MINIMAL, "toolFolders": {"My.Tool": {"tool.md": ""}}},
            "toolFolders.My.Tool: a tool folder's name",
        ),
        (
            {**MINIMAL, "toolFolders": {"greet": {"sub/tool.md": ""}}},
            "toolFolders.greet.sub/tool.md: a file name",
        ),
        (
            {**MINIMAL, "toolFolders": {"greet": "tool.md"}},
            "at '/toolFolders/greet': got string, want object",
        ),
        ({**MINIMAL, "configFiles": {"toolgate.yaml": ""}}, "configFiles.toolgate.yaml"),
        ({"config": "agents: {}"}, "at '/config': got string, want object"),
        ({"agentKeysInDatabase": True}, "agentKeysInDatabase: true needs database.url"),
        ({**MINIMAL, "replicaCont": 3}, "additional properties 'replicaCont' not allowed"),
        ({**MINIMAL, "database": {"uri": "x"}}, "at '/database': additional properties 'uri'"),
        ({**MINIMAL, "replicaCount": "3"}, "at '/replicaCount': got string, want integer"),
        (
            {**MINIMAL, "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
            "seccompProfile/type",
        ),
    ],
    ids=[
        "state",
        "redis",
        "folder-name",
        "file-name",
        "folder-shape",
        "toolgate-yaml",
        "config-string",
        "keys-in-db",
        "misspelt-key",
        "misspelt-nested-key",
        "wrong-type",
        "unconfined",
    ],
)
def test_values_that_would_break_the_deployment_are_refused_by_name(
    values: dict[str, Any], expected: str
) -> None:
    assert expected in refusal(values)


# -- the values of the docs ----------------------------------------------------------------------


def test_the_values_of_the_kubernetes_guide_render_validate_and_make_a_valid_toolgate_yaml() -> (
    None
):
    from doc_blocks import marked_blocks
    from toolgate.config.files import parse_config

    (text,) = marked_blocks("kubernetes:helm-values").values()
    values = yaml.safe_load(text)
    # The key's hash comes with the guide's install command (--set-string), never in the block.
    values["config"]["agents"]["ci-bot"]["key_sha256"] = KEY_SHA256
    objects = manifests(render(values, name="toolgate"))
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    (deployment,) = find(objects, "Deployment")
    assert restricted_violations(pod_spec(deployment)) == []
    assert deployment["metadata"]["name"] == "toolgate"  # the names the guide's commands use
    (job,) = find(objects, "Job")
    assert job["metadata"]["name"] == "toolgate-db-upgrade"
    (config,) = [c for c in find(objects, "ConfigMap") if c["metadata"]["name"].endswith("config")]
    parse_config(config["data"]["toolgate.yaml"], label="the guide's toolgate.yaml")
