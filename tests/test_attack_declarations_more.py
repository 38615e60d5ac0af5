"""More attacks through what a declaration grants (issue 22, review of the merged fix).

* Environment names that still ran code or redirected trust after the first list: package
  managers and build tools (``YARN_*``, ``CARGO_*``, ``RUSTC_WRAPPER``, ``MAKEFLAGS``…), other
  programs' configuration (``HGRCPATH``, ``PSQLRC``, ``CURL_HOME``…), proxies, Kerberos, and the
  clients of daemons and clouds (``DOCKER_HOST``, ``KUBECONFIG``, ``AWS_CONFIG_FILE``).
* ``network`` entries the egress proxy refuses whatever is granted (cloud metadata, the
  unspecified address, multicast), and entries that do not show the host they grant (an invisible
  character, a spelling IDNA maps to another name).

Each is a declaration on disk checked through ``toolgate validate`` (every format for the names),
and the gateway keeps serving a clean tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import RunCli
from folder_tools import clean_environ, write_tool
from test_attack_declarations import FORMATS, OK_SCRIPT, _call, _declare, _ok_tool, _validate
from toolgate.backends.environment import DeniedEnvironmentError, ScriptEnvironment
from toolgate.model.hosts import parse_pattern
from toolgate.model.permission_rules import env_name_refusal

pytestmark = pytest.mark.slow

#: Names the review found accepted, each of which runs code, picks a program or configuration,
#: or redirects trust, traffic or the account a client acts as.
MORE_DENIED = [
    "YARN_YARN_PATH",
    "YARN_RC_FILENAME",
    "RUSTC_WRAPPER",
    "RUSTC",
    "CARGO_HOME",
    "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER",
    "RUSTFLAGS",
    "RUSTUP_TOOLCHAIN",
    "MAKEFILES",
    "MAKEFLAGS",
    "MFLAGS",
    "FPATH",
    "VIMINIT",
    "EXINIT",
    "MYVIMRC",
    "AWKLIBPATH",
    "AWKPATH",
    "HGRCPATH",
    "SVN_EDITOR",
    "PSQLRC",
    "MYSQL_HOME",
    "CURL_HOME",
    "WGETRC",
    "UV_INDEX_URL",
    "COREPACK_NPM_REGISTRY",
    "DOTNET_ROOT",
    "COMPlus_EnableDiagnostics",
    "LESS",
    "LESSKEYIN",
    "TERMINFO",
    "TERMINFO_DIRS",
    "INPUTRC",
    "SOCKS_PROXY",
    "socks5_proxy",
    "WSS_PROXY",
    "WS_PROXY",
    "NETRC",
    "KRB5_CONFIG",
    "KRB5CCNAME",
    "SSLKEYLOGFILE",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "KUBECONFIG",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CA_BUNDLE",
    "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES",
    "GO111MODULE",
    "PSModulePath",
]

#: Data a tool legitimately reads, under or next to a refused family: they still load.
STILL_ALLOWED = [
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_PROFILE",
    "DOCKER_USERNAME",
    "DOCKER_PASSWORD",
    "CARGO_REGISTRY_TOKEN",
    "RUST_LOG",
    "LESSON_ID",
    "GIT_AUTHOR_NAME",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_more_env_names_that_run_code_or_redirect_trust_do_not_validate_in_any_format(
    run_cli: RunCli, project: Path, fmt: str
) -> None:
    path, file, pointer = _declare(fmt, project, {"env": [*STILL_ALLOWED, *MORE_DENIED]})
    output = _validate(run_cli, path)
    for index, name in enumerate(MORE_DENIED, start=len(STILL_ALLOWED)):
        expected = f"error: {file}: {pointer}/env/{index}: {name!r} may not be declared"
        assert expected in output, (name, output)
    for name in STILL_ALLOWED:
        assert repr(name) not in output, name


def test_a_tool_folder_granting_docker_host_does_not_load_and_the_gateway_serves_on(
    run_cli: RunCli, project: Path, toolgate_home: Path
) -> None:
    folder = write_tool(
        toolgate_home / "tools", "pwn", OK_SCRIPT, sandbox="host", env=["DOCKER_HOST"]
    )
    (toolgate_home / ".env").write_text("DOCKER_HOST=unix:///var/run/docker.sock\n", "utf-8")
    _ok_tool(toolgate_home, sandbox="host")
    output = _validate(run_cli, folder)
    assert f"error: {folder / 'tool.md'}: env[0]: 'DOCKER_HOST' may not be declared" in output
    assert "which daemon, cluster or account" in output
    assert _call(run_cli, "local:pwn", project)["code"] == "tool_not_found"
    outcome = _call(run_cli, "local:ok", project)
    assert outcome["status"] == "ok" and outcome["content"] == {"fine": True}, outcome


@pytest.mark.parametrize("name", ["RUSTC_WRAPPER", "yarn_yarn_path", "KUBECONFIG"])
def test_the_environment_builder_refuses_the_new_names_too(name: str) -> None:
    """The second layer: a declaration built past the loaders is refused where the process
    environment is built."""
    assert env_name_refusal(name) is not None
    environment = ScriptEnvironment(process_env=clean_environ(**{name: "/tmp/x"}))
    with pytest.raises(DeniedEnvironmentError, match=name):
        environment.build([name], tool_id="local:x")


# -- network entries that could never work, or do not show what they grant ------------------------

NEVER_WORKS = {
    "169.254.169.254": "cloud metadata service",
    "169.254.169.254:80": "cloud metadata service",
    "[fd00:ec2::254]": "cloud metadata service",
    "[::ffff:169.254.169.254]": "cloud metadata service",
    "168.63.129.16": "cloud metadata service",
    "metadata.google.internal": "cloud metadata service",
    "Metadata.Google.Internal.": "cloud metadata service",
    "0.0.0.0": "the unspecified address",
    "0": "the unspecified address",
    "[::]:8080": "the unspecified address",
    "224.0.0.251": "multicast",
}

NOT_WHAT_IT_SHOWS = {
    "exa\u200bmple.com": "U+200B",
    "api.exa\u00admple.com": "U+00AD",
    "exam\u200dple.org:8443": "U+200D",
    "*.exa\u2060mple.org": "U+2060",
    "\u202eexample.com": "U+202E",
    "\uff45xample.com": "IDNA mapping turns it into 'example.com'",
    "example\u3002com": "IDNA mapping turns it into 'example.com'",
    "stra\u00dfe.de": "IDNA mapping turns it into 'strasse.de'",
}


def test_network_entries_the_proxy_always_refuses_or_that_hide_their_host_do_not_load(
    run_cli: RunCli, project: Path, toolgate_home: Path
) -> None:
    bad = {**NEVER_WORKS, **NOT_WHAT_IT_SHOWS}
    entries = list(bad)
    folder = write_tool(
        toolgate_home / "tools",
        "pwn",
        OK_SCRIPT,
        sandbox="compartment",
        permissions={"network": ["api.example.com", *entries]},
    )
    _ok_tool(toolgate_home)
    output = _validate(run_cli, folder)
    lines = {line.split(": network pattern ")[0]: line for line in output.splitlines()}
    for index, entry in enumerate(entries, start=1):
        line = lines.get(f"error: {folder / 'tool.md'}: permissions/network/{index}", "")
        assert bad[entry] in line, (entry, output)
        if entry in NEVER_WORKS:
            assert "could never work" in line, line
    assert "permissions/network/0" not in output  # the good entry is fine
    assert _call(run_cli, "local:pwn", project)["code"] == "tool_not_found"
    outcome = _call(run_cli, "local:ok", project)
    assert outcome["status"] == "ok", outcome


@pytest.mark.parametrize(
    ("entry", "canonical"),
    [
        ("API.Example.COM.", "api.example.com"),
        ("*.B\u00fccher.de:8443", "*.xn--bcher-kva.de:8443"),
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("127.0.0.1:8080", "127.0.0.1:8080"),  # loopback: an operator's grant may open it
        ("[::1]", "[::1]"),
        ("10.0.0.5", "10.0.0.5"),  # private: likewise
        ("169.254.1.1", "169.254.1.1"),  # link-local, not metadata
        ("*.google.internal", "*.google.internal"),
    ],
)
def test_entries_that_show_their_host_and_may_be_granted_still_load(
    entry: str, canonical: str
) -> None:
    assert str(parse_pattern(entry)) == canonical
