"""Tool folders: a folder with ``tool.md`` (or ``tool.json``) and a script in any language."""
