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
      concurrency: 16            # processes of one tool at once (see concurrency: for all kinds)
    demo: true                   # also include the bundled demo tools (namespace ``demo``): the
                                 #   Python ones and the demo tool folders
    overflow:                    # context overflow protection: big content goes to a file
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
    policies:                    # access policies (``Policy`` resources), in order
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
order. Every immediate sub-folder is one tool (``tool.md`` or ``tool.json`` plus a script in
any runtime). A folder that does not load does not stop the others: its problems are the
gateway's diagnostics (``toolgate tools list`` prints them). Scripts read the variables they
declare in ``env`` from ``$TOOLGATE_HOME/.env``. A ``tool_folders`` entry that does not exist is
an error; a folder named twice is loaded once. Nothing is created when the gateway is built,
except the state database ``$TOOLGATE_HOME/toolgate.db`` (approval requests and "always allow"
grants, so they survive a restart) when approvals are on, and the audit log
``$TOOLGATE_HOME/audit.db`` when auditing is on (``audit.enabled``, the default) — with
``approver=None`` and ``audit="off"`` (or ``"read"`` and no log yet) nothing at all, unless an
MCP server lists its tools: their accepted definitions (pins) are kept in ``toolgate.db`` then.

Policies: each entry of ``policies:`` is either one inline ``Policy`` resource (Kubernetes-style)
or the path of a YAML file holding one or more of them, separated by ``---`` lines (see
:mod:`toolgate.formats.resource.policy` for the fields). They are read when the gateway is built
and layered
on the tools' own ``safety`` rules; a malformed one is a :class:`~toolgate.ConfigError` naming the
file, the document and the field.

The file is parsed with :func:`toolgate.formats._common.safe_yaml.load_yaml`: JSON-shaped values
only (no Python
tags), bounded aliases, size and depth, and a key written twice is an error naming both lines.

Every problem is a :class:`~toolgate.ConfigError` whose message names the file and the field, for
example ``toolgate.yaml: python[1]: cannot import 'nope.mod': No module named 'nope'``.
"""

from __future__ import annotations

from .build import (
    AUDIT_FILE_NAME,
    STATE_FILE_NAME,
    AuditMode,
    build_gateway,
    load_gateway,
    tool_folder_roots,
)
from .files import (
    CONFIG_FILE_NAME,
    MAX_CONFIG_BYTES,
    LoadedConfig,
    find_config,
    load_config,
    parse_config,
    toolgate_home,
)
from .policies import load_policies
from .schema import (
    AgentConfig,
    ApprovalConfig,
    ApprovalRuleEntry,
    AuditConfig,
    GatewayConfig,
    OverflowConfig,
    PythonSource,
    RateLimitsConfig,
    ScriptsConfig,
    ToolFolderEntry,
)

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
