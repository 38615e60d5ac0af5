"""Helpers every declaration format shares: diagnostics, strict JSON and YAML, field and
path helpers, prompt examples and the permission vocabulary."""
