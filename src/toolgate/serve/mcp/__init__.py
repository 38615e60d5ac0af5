"""The MCP surface: toolgate's tools served to MCP clients.

:mod:`.server` turns the gateway into an MCP server (tool listing, calls, search, approvals
through :mod:`.approvals`, tool-list change notifications through :mod:`.changes`); the two
transports carry it: :mod:`.stdio` (newline-delimited JSON-RPC on stdin/stdout, ``toolgate mcp``)
and :mod:`.http` (streamable HTTP at ``/mcp``, ``toolgate serve``), whose hot ``tools/call``
requests :mod:`.fast` answers without the SDK. Nothing is imported here, so importing one
transport does not load the other.
"""
