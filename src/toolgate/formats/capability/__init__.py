"""Capability manifests: a namespace of Python or JavaScript tools with a guide, its
connections and their secrets."""
