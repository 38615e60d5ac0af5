"""The HTTP API (FastAPI): tools, calls, exports, approvals, grants, audit, health, connections.

Build it with :func:`build_api`; ``toolgate serve`` mounts it with the MCP server and the web
UI (:func:`toolgate.serve.app.build_app`). FastAPI is imported only here.
"""

from __future__ import annotations

from .app import build_api
from .limits import ApiLimits
from .problems import PROBLEM_JSON, HttpErrorCode

__all__ = ["PROBLEM_JSON", "ApiLimits", "HttpErrorCode", "build_api"]
