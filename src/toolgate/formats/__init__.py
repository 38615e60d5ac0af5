"""Declaration formats: one subpackage per format, each holding its parsing, its tools, its source
(loading, watching, rescanning) and, where the format has one, its installer.

- ``tool_folder``: a folder with ``tool.md`` (or ``tool.json``) and a script in any language.
- ``python_function``: Python functions registered with ``@tool``.
- ``capability``: capability manifests (a namespace of Python or JavaScript tools with a guide).
- ``plugin``: plugin manifests (Python and JavaScript plugins, installed or in a folder).
- ``extension_info``: extension info schemas with prompt examples and a tile display.
- ``resource``: Kubernetes-style ``Tool`` resources (REST, MCP, OS command, function) and
  ``Policy`` documents.
- ``mcp_server``: ``MCPServer`` resources: upstream MCP servers whose tools are served.

Shared by all of them: ``_common`` (diagnostics, strict JSON and YAML, field helpers, the
permission vocabulary) and ``declarations`` (the base of every source). A format package never
imports another format package; inside a package the source sits above the parsing modules
(import-linter keeps both true). See ``docs/concepts/architecture.md``.
"""
