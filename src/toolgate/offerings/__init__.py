"""Resources and prompts the gateway serves besides tools: the upstream MCP servers' (under their
namespaces) and its own declarations' (a capability's guide as a prompt), seen and read through
the same access rules as tools and audited like calls. See :mod:`.service` and :mod:`.uris`."""

from .service import (
    GUIDE_PROMPT,
    GatewayOfferings,
    OfferingAmbiguous,
    OfferingNotFound,
)
from .uris import WRAPPED_SCHEME, unwrap, wrap

__all__ = [
    "GUIDE_PROMPT",
    "WRAPPED_SCHEME",
    "GatewayOfferings",
    "OfferingAmbiguous",
    "OfferingNotFound",
    "unwrap",
    "wrap",
]
