"""toolgate inside agent frameworks: adapters that run every tool call through the gateway.

Each framework has its own module, behind its own extra, and nothing here imports a framework:

* :mod:`toolgate.integrations.pydantic_ai` (``toolgate[pydantic-ai]``),
* :mod:`toolgate.integrations.openai_agents` (``toolgate[openai-agents]``),
* :mod:`toolgate.integrations.langchain` (``toolgate[langchain]``).

Every adapter talks to a :class:`~toolgate.integrations.base.ToolGateway`: an in-process
:class:`~toolgate.Gateway` wrapped by :class:`~toolgate.integrations.base.LocalGateway`, or a
running ``toolgate serve`` through :class:`toolgate.Client` — the same methods either way.
"""

from .base import LocalGateway, ToolGateway, ToolSpec

__all__ = ["LocalGateway", "ToolGateway", "ToolSpec"]
