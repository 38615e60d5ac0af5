"""Kubernetes-style ``Tool`` resources (REST, MCP, OS command and function types) and
``AccessPolicy`` documents."""
