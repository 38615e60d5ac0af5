"""The served surfaces: the MCP server (stdio and streamable HTTP), the HTTP API and the web UI.

Everything here talks to the :class:`~toolgate.Gateway` only; web framework and MCP SDK imports
stay inside this package.
"""
