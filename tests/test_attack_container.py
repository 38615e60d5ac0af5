"""The containment attacks against ``toolgate serve`` where production runs it (issue 30).

One real ``toolgate serve`` per layer, called over the HTTP API as an agent calls it:

- ``bubblewrap``: on this host, where bubblewrap works (the first layer);
- ``landlock``: on this host, with ``sandbox.layer: landlock`` (the second layer, forced);
- ``standin``: under the container stand-in (``tests/container_standin/launch.py``: Docker's
  default seccomp rules and capabilities), where bubblewrap cannot start and ``auto`` must
  fall back to the second layer by itself;
- ``restricted``: the stand-in as the Helm chart's pod runs it (Kubernetes' restricted Pod
  Security Standard): a non-root user (nobody), every capability dropped, its own files.

Under the stand-in, ``toolgate serve`` runs behind the image's PID 1, ``tini -s``.

The attacker is a compartment tool folder (``tests/container_standin/attack_probe.py``) with
one ``fs`` prefix; every attack is one call, and each test checks that it fails for the attacker
and that the gateway still serves. Network tools reach a loopback stand-in host through the
egress proxy (``sandbox.hosts`` and ``network_grants``); there is no internet here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from egress_support import HELLO, hello_server
from folder_tools import gone, require_program, write_tool
from js_support import js_runtime, plugin_copy

__all__ = ["js_runtime"]  # the fixture, used by name

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
LAUNCH = HERE / "container_standin" / "launch.py"
PROBE = (HERE / "container_standin" / "attack_probe.py").read_text()
TOOLGATE = str(Path(sys.executable).parent / "toolgate")
LAYERS = ("bubblewrap", "landlock", "standin", "restricted")
#: The user of the ``restricted`` layer (a pod's runAsUser): nobody.
POD_USER = 65534

#: Secrets the attacker must never see, each in one place the tool may not read.
SECRETS = {
    "sibling": "sibling-secret-5d2e",
    "shadow": "root:$6$shadow-secret-93af",
    "ssh": "-----BEGIN OPENSSH PRIVATE KEY----- ssh-secret-7c41",
    "environ": "gateway-environ-secret-e810",
    "config": "config-secret-2b77",
}
PLUGIN = "@toolgate-test/probe"
#: Environment variables that make a runtime load or run code.
INJECTIONS = ("LD_PRELOAD", "BASH_ENV", "PYTHONSTARTUP")


@dataclass
class Served:
    """A running gateway of one layer and the paths around it."""

    layer: str
    url: str
    process: subprocess.Popen[str]
    root: Path
    project: Path
    home: Path
    user_home: Path
    data: Path
    port: int
    hello: int
    check: subprocess.CompletedProcess[str]
    http: httpx.Client
    command: list[str]
    """How this layer's gateway runs ``toolgate`` (the stand-in, then the program)."""
    env: dict[str, str]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``toolgate ARGS`` as the gateway runs (same folder, environment and layer)."""
        return subprocess.run(
            [*self.command, *args], cwd=self.project, env=self.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Call ``tool`` over the HTTP API; the outcome as JSON."""
        response = self.http.post(f"/v1/tools/{tool}/call", json={"arguments": arguments})
        body: dict[str, Any] = response.json()
        return body

    def attack(self, op: str, tool: str = "t:probe", **arguments: Any) -> dict[str, Any]:
        """What the probe reports about one attack (it ran sandboxed, or the test fails)."""
        outcome = self.call(tool, op=op, **arguments)
        assert outcome.get("status") == "ok", json.dumps(outcome)
        assert outcome["metadata"]["sandbox"]["enforced"] is True, outcome["metadata"]
        content: dict[str, Any] = outcome["content"]
        return content

    def still_serves(self) -> None:
        """The gateway is alive and a normal call reads the granted file."""
        assert self.process.poll() is None, "the gateway died"
        assert self.http.get("/healthz").json()["status"] == "ok"
        granted = self.attack("read", path=str(self.data / "granted.txt"))
        assert granted == {"ok": True, "value": "granted data\n"}


def _layer_config(layer: str) -> str:
    if layer == "bubblewrap":
        return ""  # the default (auto): bubblewrap where it starts
    accept = "  accept_weaker:\n    t:net: landlock\n    '@toolgate-test/*': landlock\n"
    return (f"  layer: {layer if layer == 'landlock' else 'auto'}\n") + accept


def _world(root: Path, layer: str, hello: int, plugin: Path) -> tuple[Path, Path, Path, Path]:
    project, home, user_home, data = (root / n for n in ("project", "state", "user", "data"))
    for folder in (project, home, user_home / ".ssh", data, root / "data-private", root / "etc"):
        folder.mkdir(parents=True)
    (data / "granted.txt").write_text("granted data\n")
    (root / "data-private" / "secret.txt").write_text(SECRETS["sibling"])
    shadow = root / "etc" / "shadow"
    shadow.write_text(SECRETS["shadow"])
    shadow.chmod(0o600)
    key = user_home / ".ssh" / "id_ed25519"
    key.write_text(SECRETS["ssh"])
    key.chmod(0o600)
    tools = project / "tools"
    write_tool(
        tools, "probe", PROBE, runtime="python", sandbox="compartment",
        permissions={"fs": [str(data)]},
    )  # fmt: skip
    for name in ("net", "net2"):
        write_tool(
            tools, name, PROBE, runtime="python", sandbox="compartment",
            permissions={"network": [f"allowed.test:{hello}"]},
        )  # fmt: skip
    write_tool(
        tools, "bomb", PROBE, runtime="python", sandbox="compartment",
        script_name="forkbomb_4f1c.py",
    )  # fmt: skip
    write_tool(tools, "shell", "echo '{\"ok\": true}'\n", runtime="bash", sandbox="compartment")
    for key in INJECTIONS:
        write_tool(
            tools, key.lower(), PROBE, runtime="python", sandbox="compartment",
            permissions={"env": [key]},
        )  # fmt: skip
    (project / "toolgate.yaml").write_text(
        f"# {SECRETS['config']}\n"
        "tool_folders:\n  - path: tools\n    namespace: t\n"
        f"sources:\n  - path: {plugin}\n    format: plugin\n"
        "sandbox:\n"
        "  hosts:\n    allowed.test: [127.0.0.1]\n    other.test: [127.0.0.1]\n"
        "  network_grants:\n    t:net: [127.0.0.1/32]\n    t:net2: [127.0.0.1/32]\n"
        + _layer_config(layer)
    )
    return project, home, user_home, data


def _start(
    argv: list[str], project: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line)
        if "http://127.0.0.1:" in line:
            url = "http://" + line.split("http://", 1)[1].split()[0].rstrip("/.,")
            return process, url
    process.wait(30)
    raise AssertionError("toolgate serve did not start:\n" + "".join(seen))


@pytest.fixture(scope="module", params=LAYERS)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, js_runtime: Path
) -> Iterator[Served]:
    layer: str = request.param
    require_program("bwrap")
    if layer == "restricted":
        # Outside pytest's root-only folder, so that the pod's user can reach its files.
        root = Path(tempfile.mkdtemp(prefix="toolgate-restricted-"))
        root.chmod(0o755)
        request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))
    else:
        root = tmp_path_factory.mktemp(f"container-{layer}")
    entry = Path(TOOLGATE)
    with hello_server() as hello:
        plugin = plugin_copy(root, "probe", permissions={"fs": [str(root / "data")]})
        project, home, user_home, data = _world(root, layer, hello, plugin)
        env = {
            **os.environ,
            "TOOLGATE_HOME": str(home),
            "HOME": str(user_home),
            "GATEWAY_SECRET": SECRETS["environ"],
            # Set in the gateway's own environment: a tool must get none of them.
            "LD_PRELOAD": str(root / "evil.so"),
            "BASH_ENV": str(root / "bash_env.sh"),
            "PYTHONSTARTUP": str(root / "startup.py"),
        }
        (root / "bash_env.sh").write_text("echo INJECTED-BASH-ENV\n")
        (root / "startup.py").write_text("print('INJECTED-PYTHONSTARTUP')\n")
        # In a container, PID 1 is the image's init (``tini -s``, the chart's command too): it
        # reaps what a tool leaves behind under a layer without a PID namespace.
        init = ["tini", "-s", "--"] if layer in ("standin", "restricted") else []
        if init:
            require_program("tini")
        prefix = {
            "standin": [sys.executable, str(LAUNCH), "--", *init],
            "restricted": [
                sys.executable, str(LAUNCH), "--caps=none", f"--user={POD_USER}", "--", *init,
            ],
        }.get(layer, [])  # fmt: skip
        if layer == "restricted":
            # The pod's user runs toolgate from a Python it can read: this one may live in a
            # folder only root can enter (/root/.pyenv), so the system's, with these packages.
            # Its own folder: the gateway's program folder is never shown to a tool.
            bin_folder = Path(tempfile.mkdtemp(prefix="toolgate-pod-bin-"))
            bin_folder.chmod(0o755)
            request.addfinalizer(lambda: shutil.rmtree(bin_folder, ignore_errors=True))
            entry = bin_folder / "toolgate"
            entry.write_text(
                "#!/usr/bin/python3\nimport site, sys\n"
                f"for folder in {[p for p in sys.path if p.endswith('site-packages')]!r}:\n"
                "    site.addsitedir(folder)\n"
                "from toolgate.cli import main\nsys.exit(main())\n"
            )
            entry.chmod(0o755)
            env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
            runs = subprocess.run(
                [*prefix, str(entry), "--version"], env=env, capture_output=True, text=True,
                timeout=60,
            )  # fmt: skip
            if runs.returncode != 0:
                pytest.skip(
                    f"the pod's user (uid {POD_USER}) cannot run toolgate with the system's "
                    f"Python: {runs.stderr.strip()[-300:]}"
                )
            # The pod's files are its user's, the secrets included.
            for path in [root, *root.rglob("*")]:
                os.chown(path, POD_USER, POD_USER, follow_symlinks=False)
        program = str(entry)
        check = subprocess.run(
            [*prefix, program, "sandbox", "check"], cwd=project, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        process, url = _start([*prefix, program, "serve", "--port", "0"], project, env)
        try:
            with httpx.Client(base_url=url, timeout=120) as http:
                yield Served(
                    layer, url, process, root, project, home, user_home, data,
                    int(url.rsplit(":", 1)[1]), hello, check, http, [*prefix, program], env,
                )  # fmt: skip
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# -- the layer in use ----------------------------------------------------------------------------


def test_sandbox_check_names_the_layer_in_use(served: Served) -> None:
    report = served.check.stdout + served.check.stderr
    assert served.check.returncode == 0, report
    if served.layer == "bubblewrap":
        assert "\n  layer: bubblewrap\n" in report, report
        return
    # The second layer: check says so, and why bubblewrap is not used.
    assert report.startswith("Sandbox works: layer landlock + seccomp"), report
    why = {
        "landlock": "bubblewrap not used: sandbox.layer is 'landlock' in toolgate.yaml",
        "standin": "bubblewrap not used: bubblewrap cannot create a sandbox here (bwrap: No "
        "permissions to create new namespace",
    }[served.layer if served.layer != "restricted" else "standin"]
    assert why in report, report


def test_a_contained_call_reads_its_prefix_and_writes_its_own_tmp(served: Served) -> None:
    served.still_serves()
    name = f"attacker-was-here-{served.layer}-{os.getpid()}"
    wrote = served.attack("write_tmp", name=name)
    assert wrote["ok"] is True, wrote
    # Its temporary folder is its own: nothing reached the host's /tmp, whether the layer
    # gives it a tmpfs there (bubblewrap) or a scratch folder elsewhere (Landlock, which then
    # refuses the host's /tmp itself).
    assert not (Path("/tmp") / name).exists()
    literal = served.attack("write", path=f"/tmp/{name}")
    assert not (Path("/tmp") / name).exists(), literal
    assert served.attack("write_tmp", name=name + "-again")["ok"] is True


# -- the file system -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "where",
    ["sibling", "shadow", "real_shadow", "ssh", "home", "state", "config", "database", "tool"],
)
def test_reading_outside_the_declared_prefix_fails(served: Served, where: str) -> None:
    paths = {
        "sibling": served.root / "data-private" / "secret.txt",
        "shadow": served.root / "etc" / "shadow",
        "real_shadow": Path("/etc/shadow"),
        "ssh": served.user_home / ".ssh" / "id_ed25519",
        "home": served.user_home / ".ssh",
        "state": served.home,
        "config": served.project / "toolgate.yaml",
        "database": served.home,
        "tool": served.project / "tools" / "net" / "tool.md",
    }
    path = paths[where]
    if where == "database":
        found = sorted(p for p in served.home.rglob("*") if p.suffix in {".db", ".sqlite"})
        assert found, f"no database in {served.home}: {sorted(served.home.rglob('*'))}"
        path = found[0]
    op = "listdir" if path.is_dir() else "read"
    outcome = served.attack(op, path=str(path))
    assert outcome["ok"] is False, (where, outcome)
    assert not any(secret in json.dumps(outcome) for secret in SECRETS.values())
    served.still_serves()


@pytest.mark.parametrize("where", ["prefix", "sibling", "project", "state", "home", "var_tmp"])
def test_writing_outside_its_own_tmp_does_not_reach_the_host(served: Served, where: str) -> None:
    folder = {
        "prefix": served.data,
        "sibling": served.root / "data-private",
        "project": served.project,
        "state": served.home,
        "home": served.user_home,
        "var_tmp": Path("/var/tmp"),
    }[where]
    target = folder / f"planted-by-attacker-{served.layer}-{os.getpid()}"
    outcome = served.attack("write", path=str(target))
    try:
        # Under bubblewrap these test folders lie under /tmp, which is the sandbox's own
        # tmpfs: a write there may succeed and vanish with the call. What matters is the host.
        assert not target.exists(), (where, outcome)
        if where in {"prefix", "var_tmp"}:
            assert outcome["ok"] is False, (where, outcome)
    finally:
        target.unlink(missing_ok=True)
    served.still_serves()


@pytest.mark.parametrize("what", ["environ", "cmdline", "mem", "fd", "root"])
def test_the_gateways_proc_is_out_of_reach(served: Served, what: str) -> None:
    pid = served.process.pid
    op = "listdir" if what in {"fd", "root"} else "read"
    outcome = served.attack(op, path=f"/proc/{pid}/{what}")
    assert outcome["ok"] is False, (what, outcome)
    assert SECRETS["environ"] not in json.dumps(outcome)
    served.still_serves()


# -- processes -----------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["ptrace", "vm_read"])
def test_the_gateways_memory_is_out_of_reach(served: Served, op: str) -> None:
    outcome = served.attack(op, pid=served.process.pid)
    assert outcome["ok"] is False, outcome
    # EFAULT would mean the kernel let the attacker in and only the address was wrong.
    assert outcome["errno"] in {1, 3}, outcome  # EPERM, ESRCH
    served.still_serves()


def test_a_signal_to_the_gateway_does_not_reach_it(served: Served) -> None:
    outcome = served.attack("kill", pid=served.process.pid, signal=int(signal.SIGTERM))
    assert outcome["ok"] is False, outcome
    served.still_serves()


@pytest.mark.parametrize("op", ["unshare_user", "unshare_mount", "mount"])
def test_namespaces_and_mounts_are_refused_inside_the_tool(served: Served, op: str) -> None:
    outcome = served.attack(op)
    assert outcome["ok"] is False, outcome
    served.still_serves()


def _alive(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if name.encode() in (entry / "cmdline").read_bytes() and not gone(int(entry.name)):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_a_fork_bomb_ends_with_its_call_and_leaves_nothing(served: Served) -> None:
    outcome = served.call("t:bomb", op="fork_bomb")
    # Stopped by the process limit (the probe reports it) or killed with the call: either way
    # the call ends and nothing of it is left.
    assert outcome.get("status") in {"ok", "error"}, outcome
    if outcome["status"] == "ok":
        assert outcome["content"]["ok"] is False or "stopped" in outcome["content"]["value"]
    deadline = time.monotonic() + 30  # a hang guard: the sandbox is killed as the call ends
    while _alive("forkbomb_4f1c.py") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive("forkbomb_4f1c.py") == []
    served.still_serves()
    # Nothing of the bomb holds on to the process budget: the next call forks as usual.
    assert served.attack("children", count=16) == {"ok": True, "value": 16}


def test_a_detached_grandchild_dies_with_the_call(served: Served) -> None:
    outcome = served.attack("daemon", tool="t:bomb")
    assert outcome == {"ok": True, "value": "detached"}, outcome
    deadline = time.monotonic() + 30  # a hang guard: the call's processes are killed as it ends
    while _alive("forkbomb_4f1c.py") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive("forkbomb_4f1c.py") == []
    served.still_serves()


# -- the environment -----------------------------------------------------------------------------


def test_the_gateways_environment_does_not_reach_the_tool(served: Served) -> None:
    env = served.attack("env")["value"]
    assert SECRETS["environ"] not in json.dumps(env)
    for key in ("LD_PRELOAD", "BASH_ENV", "PYTHONSTARTUP"):
        assert key not in env, (key, env)
    assert str(served.user_home) not in json.dumps(env), env
    assert "INJECTED" not in json.dumps(served.call("t:shell")), "BASH_ENV ran"


@pytest.mark.parametrize("key", INJECTIONS)
def test_a_tool_declaring_a_code_loading_variable_is_refused(served: Served, key: str) -> None:
    outcome = served.call(f"t:{key.lower()}", op="env")
    assert outcome.get("code") == "tool_not_found", outcome
    listed = served.cli("tools", "list")
    assert f"'{key}' may not be declared" in listed.stdout + listed.stderr, listed


# -- the network ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target", ["gateway", "postgresql", "redis", "hello", "metadata", "undeclared"]
)
def test_direct_connections_fail(served: Served, target: str) -> None:
    host, port = {
        "gateway": ("127.0.0.1", served.port),
        "postgresql": ("127.0.0.1", 5432),
        "redis": ("127.0.0.1", 6379),
        "hello": ("127.0.0.1", served.hello),
        "metadata": ("169.254.169.254", 80),
        "undeclared": ("10.1.2.3", 443),
    }[target]
    for tool in ("t:probe", "t:net"):
        outcome = served.attack("connect", tool=tool, host=host, port=port)
        assert outcome["ok"] is False, (tool, target, outcome)
    served.still_serves()


@pytest.mark.parametrize("where", ["postgresql", "abstract"])
def test_unix_sockets_of_the_host_are_out_of_reach(served: Served, where: str) -> None:
    name = f"toolgate-attack-{served.layer}-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind("\0" + name)  # an abstract socket: no file a path rule could cover
        listener.listen(1)
        path = {"postgresql": "/var/run/postgresql/.s.PGSQL.5432", "abstract": "@" + name}
        if where == "postgresql" and not Path(path[where]).exists():
            pytest.skip("PostgreSQL's Unix socket is not at /var/run/postgresql here")
        for tool in ("t:probe", "t:net"):
            outcome = served.attack("unix", tool=tool, path=path[where])
            assert outcome["ok"] is False, (tool, where, outcome)
    served.still_serves()


def test_udp_does_not_leave_the_tool(served: Served) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        for tool in ("t:probe", "t:net"):
            served.attack("udp", tool=tool, host="127.0.0.1", port=port)
        listener.settimeout(1)  # the datagrams were sent (or not) before the calls returned
        with pytest.raises(TimeoutError):
            print("received:", listener.recvfrom(100))
    served.still_serves()


def test_a_tool_without_network_reaches_nothing_through_a_proxy(served: Served) -> None:
    outcome = served.attack("http", url=f"http://allowed.test:{served.hello}/")
    assert outcome["ok"] is False, outcome


def test_a_network_tool_reaches_its_declared_host_and_nothing_else(served: Served) -> None:
    allowed = served.call("t:net", op="http", url=f"http://allowed.test:{served.hello}/")
    assert allowed.get("status") == "ok", allowed
    assert allowed["content"] == {"ok": True, "value": HELLO}, allowed
    for url in (
        f"http://other.test:{served.hello}/",
        f"http://127.0.0.1:{served.hello}/",
        f"http://allowed.test:{served.port}/healthz",
        "http://allowed.test:5432/",
        "http://169.254.169.254/latest/meta-data/",
    ):
        refused = served.call("t:net", op="http", url=url)
        assert refused["content"]["ok"] is False, (url, refused)
        assert not any(e["allowed"] for e in refused["metadata"]["sandbox"]["egress"]), refused


def test_a_network_tool_needs_accept_weaker_under_landlock(served: Served) -> None:
    outcome = served.call("t:net2", op="http", url=f"http://allowed.test:{served.hello}/")
    if served.layer == "bubblewrap":
        assert outcome["content"] == {"ok": True, "value": HELLO}, outcome
        return
    # Landlock filters TCP by port, not by address: without the operator's word the tool is
    # unavailable, with the reason, and never runs.
    assert outcome.get("status") != "ok", outcome
    assert "accept_weaker" in json.dumps(outcome), outcome


# -- the JavaScript plugin host ------------------------------------------------------------------


def test_the_js_host_runs_with_its_outer_layer(served: Served) -> None:
    echo = served.call(f"{PLUGIN}:echo", n=1)
    assert echo.get("status") == "ok", echo
    read = served.call(f"{PLUGIN}:read", path=str(served.data / "granted.txt"))
    assert read.get("status") == "ok" and read["content"] == {"text": "granted data\n"}, read
    outer = echo["metadata"]["sandbox"].get("process_sandbox")
    assert outer == ("bwrap" if served.layer == "bubblewrap" else "landlock"), echo["metadata"]
    secret = served.call(f"{PLUGIN}:read", path=str(served.root / "data-private" / "secret.txt"))
    assert secret.get("status") != "ok" and SECRETS["sibling"] not in json.dumps(secret), secret


def test_the_gateway_kept_serving_the_whole_module(served: Served) -> None:
    served.still_serves()
