"""The OAuth parts ``toolgate serve`` builds from ``auth:``: the token verifier, the callers
(API keys and tokens) and the resource metadata.

PyJWT (with ``cryptography``) checks the tokens; it is the ``oauth`` extra, imported only here and
only when ``auth:`` is configured, so ``import toolgate`` never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...config.schema import AuthConfig
from ...errors import ConfigError
from .identity import AgentIdentity
from .metadata import ResourceMetadata

if TYPE_CHECKING:
    from .callers import Callers

__all__ = ["OAuthParts", "build_oauth"]


@dataclass(frozen=True)
class OAuthParts:
    """What serving OAuth takes: who calls (``callers.identify``) and the metadata."""

    callers: Callers
    """API keys and bearer tokens (its module needs PyJWT, so it is imported on demand)."""
    metadata: ResourceMetadata


def build_oauth(config: AuthConfig, identity: AgentIdentity) -> OAuthParts:
    """The OAuth parts for ``auth:``; raises :class:`~toolgate.errors.ConfigError` when the
    ``oauth`` extra is not installed."""
    try:
        import cryptography  # noqa: F401 - PyJWT needs it for RSA and EC keys
        import jwt  # noqa: F401
    except ImportError:
        raise ConfigError(
            "auth: in toolgate.yaml needs PyJWT with cryptography: pip install 'toolgate[oauth]'"
        ) from None
    from .bearer import TokenVerifier
    from .callers import Callers

    return OAuthParts(Callers(identity, TokenVerifier(config)), ResourceMetadata(config))
