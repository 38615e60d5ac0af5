"""What a declaration may never be granted: environment names that run code, and ``network``
entries the egress proxy would refuse. One list, checked by every loader and again where a process
environment is built.

**Environment names.** A tool declares the variables it reads (a tool folder's ``env``, any
format's ``permissions.env``, ``@tool(env=...)``); their values come from ``$TOOLGATE_HOME/.env``
(or the gateway's environment, when the operator allows it) and are put into the environment of the
process that runs the tool. Some names are not data but instructions to the program that starts:
``BASH_ENV`` makes bash run a file before the script, ``LD_PRELOAD`` makes the dynamic linker load
a library into every program, ``PYTHONPATH`` / ``NODE_OPTIONS`` make the interpreter import or
``--require`` code first. Inside a sandbox the processes that start first are toolgate's own —
``prlimit``, the egress bridge, the Python worker that confines a plugin — and an ``os`` tool's
command is the operator's choice; a declared name of this kind would run other code inside them, so
it is refused as an error, whatever its value. The list (:data:`DENIED_ENV_NAMES`,
:data:`DENIED_ENV_PREFIXES`) covers:

* names that load or run code in a runtime: the dynamic linker and glibc (``LD_*``, ``DYLD_*``,
  ``GCONV_PATH``, ``GLIBC_TUNABLES``, ``MALLOC_*``…), shells (``BASH_ENV``, ``ENV``,
  ``BASH_FUNC_*``, ``SHELLOPTS``, ``BASHOPTS``, ``PS0``-``PS4``, ``PROMPT_COMMAND``, ``IFS``,
  ``CDPATH``, ``ZDOTDIR``…), interpreters and their package managers (``PYTHON*``, ``PIP_*``,
  ``NODE_OPTIONS``, ``NODE_PATH``, ``NPM_CONFIG_*``, ``BUN_*``, ``DENO_*``, ``PERL*``,
  ``RUBY*``, ``GEM_*``, ``BUNDLE_*``, ``LUA_*``, ``PHPRC``, Java's ``JAVA_*``, ``_JAVA_OPTIONS``,
  ``JDK_JAVA_OPTIONS``, ``CLASSPATH``, ``MAVEN_OPTS``, ``GRADLE_OPTS``, .NET's startup hooks and
  profilers, Go's ``GOFLAGS``, ``GOROOT``, ``GOTOOLCHAIN``…, ``CGO_*``, ``CC``, ``CXX``, Rust's
  ``RUSTC*``, ``RUSTFLAGS``, ``RUSTUP_*`` and ``CARGO_*``, ``YARN_*``, ``UV_*``, ``COREPACK_*``,
  ``DOTNET_*``, ``COMPLUS_*``, make's ``MAKEFILES``, ``MAKEFLAGS`` and ``MFLAGS``, awk's
  ``AWKPATH`` and ``AWKLIBPATH``, vim's ``VIMINIT``, ``EXINIT`` and ``MYVIMRC``, PowerShell's
  ``PSMODULEPATH``), git (every ``GIT_*`` but the author and committer identity:
  ``GIT_SSH_COMMAND``, ``GIT_PAGER``, ``GIT_CONFIG_*``, ``GIT_DIR`` — a repository's config runs
  programs — and the rest), programs that other programs start (``SHELL``, ``EDITOR``,
  ``VISUAL``, ``PAGER``, ``BROWSER``, ``LESSOPEN``, ``SSH_ASKPASS``, ``SVN_EDITOR``…);
* names that choose which program or which configuration runs: ``PATH``, ``HOME``,
  ``XDG_CONFIG_*`` (dotfiles such as ``.gitconfig`` and ``.npmrc`` run programs), ``TMPDIR`` and
  the rest of glibc's list of variables it drops for set-user-ID programs, the configuration files
  of other programs (``HGRCPATH``, ``PSQLRC``, ``MYSQL_HOME``, ``CURL_HOME``, ``WGETRC``,
  ``INPUTRC``, ``LESS``, ``LESSKEY*``, ``TERMINFO*``), ``GO111MODULE``;
* names that redirect trust or traffic: CA bundles (``SSL_CERT_FILE``, ``SSL_CERT_DIR``,
  ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, ``NODE_EXTRA_CA_CERTS``, ``AWS_CA_BUNDLE``,
  ``NODE_TLS_REJECT_UNAUTHORIZED``), ``OPENSSL_CONF`` (which loads engines, i.e. code), proxies
  (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``, ``SOCKS*_PROXY``, ``WS_PROXY``,
  ``WSS_PROXY``: the sandbox sets its own to reach the egress proxy), the SSH agent
  (``SSH_AUTH_SOCK``: the gateway user's keys), ``NETRC``, Kerberos (``KRB5*``: the gateway
  user's tickets, and a configuration that loads plugins), ``SSLKEYLOGFILE`` (writes the keys of
  every TLS session);
* names that choose which daemon, cluster or account a client acts on, with whose credentials —
  and whose configuration runs credential helpers: ``DOCKER_*`` (but ``DOCKER_USERNAME`` and
  ``DOCKER_PASSWORD``, which docker itself does not read), ``CONTAINER_HOST``, ``KUBECONFIG``
  (``exec`` plugins), ``AWS_CONFIG_FILE`` and ``AWS_SHARED_CREDENTIALS_FILE``
  (``credential_process``), ``GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES``.
  ``GOOGLE_APPLICATION_CREDENTIALS`` is allowed: it names a key file the operator gives a tool,
  as a token is given (a credential configuration that runs a program needs
  ``GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES`` too, which is refused), and a compartment tool
  reads the file only if it is also in its ``fs``;
* the gateway's own settings (``TOOLGATE_*``: ``TOOLGATE_SECRETS_KEY`` decrypts every secret).

Names are compared case-insensitively (npm reads ``npm_config_*``, curl reads ``https_proxy``).
A tool that needs such a setting sets it itself, in its script, where it is visible; a CA bundle
or a library path belongs in the tool's folder. This is a list of known names, not a proof: the
sandbox (no host files beyond the declared ones, no network beyond the egress proxy) is what
bounds a tool that finds another one.

**Network entries** are parsed by :func:`toolgate.model.hosts.parse_pattern`, the parser the
egress proxy uses, so an entry loads only if the proxy will enforce it as written
(:func:`network_entry`). The loaders also refuse what the proxy refuses whatever an operator
grants — a cloud metadata service, the unspecified address, multicast — since such an entry could
never work (:func:`toolgate.model.hosts.never_granted_refusal`).
"""

from __future__ import annotations

from collections.abc import Iterable

from .hosts import never_granted_refusal, parse_pattern

__all__ = [
    "ALLOWED_GIT_NAMES",
    "ALLOWED_NAMES",
    "DENIED_ENV_NAMES",
    "DENIED_ENV_PREFIXES",
    "env_name_refusal",
    "env_refusal",
    "network_entry",
    "refused_env_names",
]

_CODE = "it makes a runtime load or run other code"
_SHELL = "it makes the shell run code or change what a script's commands do"
_PROGRAM = "it chooses which program or configuration runs"
_TRUST = "it redirects which certificates are trusted or where traffic goes"
_GATEWAY = "it is the gateway's own setting (TOOLGATE_*), never a tool's"
_CONTROL = (
    "it chooses which daemon, cluster or account a client acts on, and with it a configuration "
    "that runs credential helpers"
)

#: Exact names (upper case) a declaration may not list, with the reason an error gives.
_NAMES: dict[str, str] = {
    **dict.fromkeys(
        (
            # glibc: code and data it loads, and what it drops for set-user-ID programs
            "GCONV_PATH",
            "GETCONF_DIR",
            "GLIBC_TUNABLES",
            "HOSTALIASES",
            "LOCALDOMAIN",
            "LOCPATH",
            "NIS_PATH",
            "NLSPATH",
            "RESOLV_HOST_CONF",
            "RES_OPTIONS",
            "TZDIR",
            # interpreters and package managers
            "NODE_OPTIONS",
            "NODE_PATH",
            "NODE_REPL_EXTERNAL_MODULE",
            "PHPRC",
            "PHP_INI_SCAN_DIR",
            "TCLLIBPATH",
            "R_PROFILE",
            "R_PROFILE_USER",
            "R_ENVIRON",
            "R_ENVIRON_USER",
            "R_LIBS",
            "R_LIBS_USER",
            "_JAVA_OPTIONS",
            "JDK_JAVA_OPTIONS",
            "CLASSPATH",
            "MAVEN_OPTS",
            "GRADLE_OPTS",
            "DOTNET_STARTUP_HOOKS",
            "COR_ENABLE_PROFILING",
            "COR_PROFILER",
            "COR_PROFILER_PATH",
            "GOFLAGS",
            "GOROOT",
            "GOPATH",
            "GOENV",
            "GOWORK",
            "GOTOOLCHAIN",
            "GOTOOLDIR",
            "GOPROXY",
            "GONOPROXY",
            "GOPRIVATE",
            "GOINSECURE",
            "GOSUMDB",
            "GONOSUMDB",
            "GOCACHE",
            "GOMODCACHE",
            "GOEXPERIMENT",
            "CC",
            "CXX",
            "CPP",
            "CARGO",
            "MAKEFILES",
            "MAKEFLAGS",
            "MFLAGS",
            "AWKPATH",
            "AWKLIBPATH",
            "VIMINIT",
            "GVIMINIT",
            "EXINIT",
            "MYVIMRC",
            "PSMODULEPATH",
            "GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES",
            "LUA_INIT",
            "OPENSSL_CONF",
            "OPENSSL_ENGINES",
            "OPENSSL_MODULES",
        ),
        _CODE,
    ),
    **dict.fromkeys(
        (
            "BASH_ENV",
            "ENV",
            "SHELLOPTS",
            "BASHOPTS",
            "PS0",
            "PS1",
            "PS2",
            "PS3",
            "PS4",
            "PROMPT_COMMAND",
            "IFS",
            "CDPATH",
            "GLOBIGNORE",
            "BASH_XTRACEFD",
            "BASH_LOADABLES_PATH",
            "ZDOTDIR",
            "FPATH",
        ),
        _SHELL,
    ),
    **dict.fromkeys(
        (
            "PATH",
            "HOME",
            "TMPDIR",
            "SHELL",
            "EDITOR",
            "VISUAL",
            "PAGER",
            "MANPAGER",
            "BROWSER",
            "LESSOPEN",
            "LESSCLOSE",
            "SSH_ASKPASS",
            "SSH_ASKPASS_REQUIRE",
            "SUDO_ASKPASS",
            "SVN_EDITOR",
            "HGEDITOR",
            "HGRCPATH",
            "PSQLRC",
            "MYSQL_HOME",
            "CURL_HOME",
            "WGETRC",
            "INPUTRC",
            "LESS",
            "GO111MODULE",
        ),
        _PROGRAM,
    ),
    **dict.fromkeys(
        (
            "SSL_CERT_FILE",
            "SSL_CERT_DIR",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "NODE_EXTRA_CA_CERTS",
            "NODE_TLS_REJECT_UNAUTHORIZED",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "FTP_PROXY",
            "NO_PROXY",
            "SOCKS_PROXY",
            "SOCKS4_PROXY",
            "SOCKS5_PROXY",
            "WS_PROXY",
            "WSS_PROXY",
            "SSH_AUTH_SOCK",
            "AWS_CA_BUNDLE",
            "NETRC",
            "SSLKEYLOGFILE",
        ),
        _TRUST,
    ),
    **dict.fromkeys(
        (
            "CONTAINER_HOST",
            "KUBECONFIG",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
        ),
        _CONTROL,
    ),
}

#: Prefixes (upper case): every name that starts with one is refused, with the reason given.
_PREFIXES: dict[str, str] = {
    **dict.fromkeys(
        (
            "LD_",
            "DYLD_",
            "MALLOC_",
            "PYTHON",
            "PIP_",
            "NPM_CONFIG_",
            "BUN_",
            "DENO_",
            "PERL",
            "RUBY",
            "GEM_",
            "BUNDLE_",
            "LUA_",
            "JAVA_",
            "CORECLR_",
            "CGO_",
            "GIT_",
            "RUSTC",
            "RUSTDOC",
            "RUSTFLAGS",
            "RUSTUP_",
            "CARGO_",
            "YARN_",
            "UV_",
            "COREPACK_",
            "DOTNET_",
            "COMPLUS_",
        ),
        _CODE,
    ),
    "BASH_FUNC_": _SHELL,
    "XDG_CONFIG_": _PROGRAM,
    "LESSKEY": _PROGRAM,
    "TERMINFO": _PROGRAM,
    "KRB5": _TRUST,
    "DOCKER_": _CONTROL,
    "TOOLGATE_": _GATEWAY,
}

#: ``GIT_*`` names that only set an identity: the one exception to the ``GIT_`` prefix.
ALLOWED_GIT_NAMES: frozenset[str] = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_COMMITTER_DATE",
    }
)

#: Names under a refused prefix that only carry data: an identity, or a credential the program
#: that reads it uses as one (docker itself does not read ``DOCKER_USERNAME``/``_PASSWORD``;
#: ``CARGO_REGISTRY_TOKEN`` is the token ``cargo publish`` sends).
ALLOWED_NAMES: frozenset[str] = ALLOWED_GIT_NAMES | {
    "DOCKER_USERNAME",
    "DOCKER_PASSWORD",
    "CARGO_REGISTRY_TOKEN",
}

#: Exact environment variable names no declaration may list (compared in upper case).
DENIED_ENV_NAMES: frozenset[str] = frozenset(_NAMES)
#: Prefixes of environment variable names no declaration may list (compared in upper case).
DENIED_ENV_PREFIXES: tuple[str, ...] = tuple(_PREFIXES)


def env_name_refusal(name: str) -> str | None:
    """Why a declaration may not list the environment variable ``name``; ``None`` when it may."""
    upper = name.upper()
    reason = _NAMES.get(upper)
    if reason is None and upper not in ALLOWED_NAMES:
        reason = next((why for prefix, why in _PREFIXES.items() if upper.startswith(prefix)), None)
    if reason is None:
        return None
    return (
        f"{name!r} may not be declared: {reason}. Remove it; a tool that needs such a setting "
        "sets it itself, in its own code"
    )


def refused_env_names(names: Iterable[str]) -> tuple[str, ...]:
    """The names among ``names`` that no declaration may list, in order."""
    return tuple(name for name in names if env_name_refusal(name) is not None)


def env_refusal(tool_id: str, names: Iterable[str]) -> str | None:
    """Why ``tool_id`` may not run with the declared environment ``names`` (``None``: it may).

    The second layer behind the loaders: a tool whose declaration slipped past them (built in
    code, or by a loader that forgot the check) is refused before any process starts."""
    refused = list(dict.fromkeys(refused_env_names(names)))
    if not refused:
        return None
    return (
        f"{tool_id} declares environment variables that make a runtime load or run code or "
        f"redirect trust ({', '.join(refused)}); it never runs with them. Remove them from its "
        "declaration"
    )


def network_entry(text: str) -> str:
    """The canonical form of one ``network`` entry, as the egress proxy will enforce it.

    Raises :class:`ValueError` saying what is wrong and what to write, for anything the proxy
    would refuse: a URL or path, a bare ``*``, ``*.`` or ``*:*``, a wildcard over a top-level
    domain or over an IP address (``*.127.0.0.1``), an empty host, a port out of range, a host
    that is not the one it shows (an invisible character, a spelling IDNA maps to another name);
    and for what the proxy refuses whatever is granted, so the entry could never work: a cloud
    metadata service, the unspecified address, multicast."""
    pattern = parse_pattern(text)
    refusal = never_granted_refusal(pattern)
    if refusal is not None:
        raise ValueError(refusal)
    return str(pattern)
