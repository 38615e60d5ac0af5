"""``McpServer`` resources: upstream MCP servers whose tools are served through the gateway,
with pinned tool definitions."""
