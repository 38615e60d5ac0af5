"""Host names, allowlists and IP address classes for tool egress (issue 8, "Network").

Three things, shared by the egress proxy of sandboxed tools (:mod:`toolgate.sandbox.egress`) and
the in-process HTTP transport of REST tools (:mod:`toolgate.backends.rest_transport`):

* **Host names** are normalized before anything compares them: surrounding brackets removed,
  lower case, IDNA (the ``idna`` codec, as the loaders use), one trailing dot removed. A host that
  is an IP address in any spelling a C library or a browser would accept — ``2130706433``,
  ``0x7f000001``, ``0177.0.0.1``, ``127.1``, ``[::ffff:127.0.0.1]`` — is recognised as that
  address, never sent to a resolver as a name.
* **Allowlists** (a tool's ``network`` permission; parsed by :mod:`toolgate.model.hosts`, which the
  loaders use too, and re-exported here): ``api.example.com`` matches that name only,
  ``*.example.org`` matches any name *below* ``example.org`` (not ``example.org`` itself). A bare
  ``*``, a wildcard over a top-level domain (``*.com``) or over digits, and a wildcard anywhere but
  in front are refused when the list is parsed. Without a port a pattern allows ports 443 and 80;
  ``host:port`` allows that port only.
* **Address classes** come from an explicit table (below), not only from
  :attr:`ipaddress.IPv4Address.is_global`: IPv6 forms that carry an IPv4 address (IPv4-mapped,
  IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo) are classified by the IPv4 address they
  embed, and IPv6 outside global unicast ``2000::/3`` is never public. Only ``public`` addresses
  may be reached by default; an operator's CIDR grant may open loopback, private, link-local and
  reserved ranges for one tool, never a cloud metadata address, an unspecified address or
  multicast.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Collection, Iterable, Mapping, Sequence

from ..model.hosts import (
    DEFAULT_PORTS,
    METADATA_NETWORKS,
    HostPattern,
    IPAddress,
    embedded_ipv4,
    host_allowed,
    normalize_host,
    parse_allowlist,
    parse_ip_host,
    parse_pattern,
)

__all__ = [
    "DEFAULT_PORTS",
    "SERVER_GRANT_NAMESPACE",
    "AddressClass",
    "EgressRefusedError",
    "HostPattern",
    "IPAddress",
    "IPNetwork",
    "address_verdict",
    "classify",
    "host_allowed",
    "normalize_host",
    "parse_allowlist",
    "parse_cidr_grants",
    "parse_ip_host",
    "parse_pattern",
    "tool_grant",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class EgressRefusedError(PermissionError):
    """A destination the tool may not reach; the message says why and what would allow it."""


class AddressClass(enum.Enum):
    """What an IP address is, for egress decisions (worst class wins for embedded forms)."""

    PUBLIC = "public"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link-local"
    METADATA = "metadata"
    UNSPECIFIED = "unspecified"
    MULTICAST = "multicast"
    RESERVED = "reserved"


#: Classes a CIDR grant can never open: metadata services hand out cloud credentials, and the
#: unspecified address and multicast are not destinations at all (0.0.0.0 reaches this host).
NEVER_GRANTED: frozenset[AddressClass] = frozenset(
    {AddressClass.METADATA, AddressClass.UNSPECIFIED, AddressClass.MULTICAST}
)


def _table(*rows: tuple[str, AddressClass]) -> tuple[tuple[IPNetwork, AddressClass], ...]:
    return tuple((ipaddress.ip_network(net), cls) for net, cls in rows)


# Cloud metadata endpoints (toolgate.model.hosts.METADATA_NETWORKS: the loaders refuse them too).
# Checked first.
_METADATA = _table(*((net, AddressClass.METADATA) for net in METADATA_NETWORKS))

# IPv4 special-purpose registry (RFC 6890 and successors), the ranges that matter for egress.
_IPV4 = _table(
    ("0.0.0.0/32", AddressClass.UNSPECIFIED),
    ("0.0.0.0/8", AddressClass.RESERVED),  # "this network"
    ("10.0.0.0/8", AddressClass.PRIVATE),
    ("100.64.0.0/10", AddressClass.PRIVATE),  # carrier-grade NAT
    ("127.0.0.0/8", AddressClass.LOOPBACK),
    ("169.254.0.0/16", AddressClass.LINK_LOCAL),
    ("172.16.0.0/12", AddressClass.PRIVATE),
    ("192.0.0.0/24", AddressClass.RESERVED),  # IETF protocol assignments
    ("192.0.2.0/24", AddressClass.RESERVED),  # documentation TEST-NET-1
    ("192.31.196.0/24", AddressClass.RESERVED),  # AS112
    ("192.52.193.0/24", AddressClass.RESERVED),  # AMT
    ("192.88.99.0/24", AddressClass.RESERVED),  # 6to4 relay anycast (deprecated)
    ("192.168.0.0/16", AddressClass.PRIVATE),
    ("192.175.48.0/24", AddressClass.RESERVED),  # AS112 direct delegation
    ("198.18.0.0/15", AddressClass.RESERVED),  # benchmarking
    ("198.51.100.0/24", AddressClass.RESERVED),  # documentation TEST-NET-2
    ("203.0.113.0/24", AddressClass.RESERVED),  # documentation TEST-NET-3
    ("224.0.0.0/4", AddressClass.MULTICAST),
    ("240.0.0.0/4", AddressClass.RESERVED),  # includes 255.255.255.255 broadcast
)

# IPv6: everything outside 2000::/3 is non-public (see classify); these are the finer rows.
_IPV6 = _table(
    ("::/128", AddressClass.UNSPECIFIED),
    ("::1/128", AddressClass.LOOPBACK),
    ("100::/64", AddressClass.RESERVED),  # discard-only
    ("100:0:0:1::/64", AddressClass.RESERVED),  # dummy prefix
    ("2001::/23", AddressClass.RESERVED),  # IETF protocol assignments (Teredo handled before)
    ("2001:db8::/32", AddressClass.RESERVED),  # documentation
    ("3fff::/20", AddressClass.RESERVED),  # documentation
    ("5f00::/16", AddressClass.RESERVED),  # SRv6 SIDs
    ("fc00::/7", AddressClass.PRIVATE),  # unique local
    ("fe80::/10", AddressClass.LINK_LOCAL),
    ("fec0::/10", AddressClass.PRIVATE),  # site-local (deprecated)
    ("ff00::/8", AddressClass.MULTICAST),
)

_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")

# How bad a class is, for picking the worst of an address and what it embeds.
_SEVERITY = {
    AddressClass.PUBLIC: 0,
    AddressClass.RESERVED: 1,
    AddressClass.PRIVATE: 2,
    AddressClass.LINK_LOCAL: 3,
    AddressClass.LOOPBACK: 4,
    AddressClass.MULTICAST: 5,
    AddressClass.UNSPECIFIED: 6,
    AddressClass.METADATA: 7,
}


def _worst(*classes: AddressClass) -> AddressClass:
    return max(classes, key=_SEVERITY.__getitem__)


def _lookup(
    address: IPAddress, table: tuple[tuple[IPNetwork, AddressClass], ...]
) -> AddressClass | None:
    for network, cls in table:
        if address.version == network.version and address in network:
            return cls
    return None


def _embedded_v4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (empty for an ordinary IPv6 address)."""
    return embedded_ipv4(address)


def classify(address: IPAddress) -> AddressClass:
    """The class of ``address`` per the table of this module (worst of it and what it embeds)."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(address.compressed.split("%", 1)[0])
    metadata = _lookup(address, _METADATA)
    if metadata is not None:
        return metadata
    if isinstance(address, ipaddress.IPv4Address):
        found = _lookup(address, _IPV4)
        if found is not None:
            return found
        # Belt and braces: anything the standard library does not consider global is reserved.
        return AddressClass.PUBLIC if address.is_global else AddressClass.RESERVED
    embedded = _embedded_v4(address)
    if embedded:
        own = AddressClass.PRIVATE if address in _NAT64_LOCAL else AddressClass.PUBLIC
        if address in _COMPATIBLE or address in _MAPPED or address in _TRANSLATED:
            own = AddressClass.PUBLIC  # judged only by the IPv4 address they stand for
        return _worst(own, *(classify(v4) for v4 in embedded))
    found = _lookup(address, _IPV6)
    if found is not None:
        return found
    if address not in _GLOBAL_UNICAST_V6:
        return AddressClass.RESERVED
    return AddressClass.PUBLIC


#: The namespace of ``network_grants`` keys that name an MCP server (``MCPServer:<name>``), whose
#: connection serves all of its tools, rather than one tool.
SERVER_GRANT_NAMESPACE = "MCPServer"


def tool_grant(grants: Mapping[str, Sequence[str]], tool_id: str) -> tuple[str, ...]:
    """The operator's CIDR grant for the tool ``tool_id`` (``network_grants[tool_id]``).

    A tool whose id is in the server namespace (``MCPServer:…``, in any case) gets none, so that
    a tool named like a server never inherits the networks granted to that server."""
    namespace = tool_id.partition(":")[0]
    if namespace.lower() == SERVER_GRANT_NAMESPACE.lower():
        return ()
    return tuple(grants.get(tool_id, ()))


def parse_cidr_grants(grants: Iterable[str]) -> tuple[IPNetwork, ...]:
    """Parse an operator's CIDR grants (``10.1.0.0/16``, ``127.0.0.1/32``, ``fd12::/64``).

    Raises :class:`ValueError` naming the bad entry: not a network, host bits set, or a range
    that contains a metadata address (a grant must never open those)."""
    networks: list[IPNetwork] = []
    for text in grants:
        try:
            network = ipaddress.ip_network(str(text).strip(), strict=True)
        except ValueError as exc:
            raise ValueError(
                f"CIDR grant {text!r} is not a network such as 10.0.0.0/8: {exc}"
            ) from None
        for meta, _cls in _METADATA:
            if meta.version == network.version and network.overlaps(meta):
                raise ValueError(
                    f"CIDR grant {text!r} contains the cloud metadata address "
                    f"{meta.network_address}; metadata addresses can never be granted — "
                    "grant a narrower range"
                )
        networks.append(network)
    return tuple(networks)


def address_verdict(address: IPAddress, grants: Collection[IPNetwork] = ()) -> str | None:
    """``None`` when ``address`` may be reached, else why not (for events and error messages).

    Public addresses may always be reached; loopback, private, link-local and reserved ones
    only inside a grant (matched on the literal address: a grant of ``127.0.0.1/32`` does not
    open ``::ffff:127.0.0.1``); metadata, unspecified and multicast never."""
    cls = classify(address)
    if cls is AddressClass.PUBLIC:
        return None
    if cls not in NEVER_GRANTED and any(
        address.version == net.version and address in net for net in grants
    ):
        return None
    if cls in NEVER_GRANTED:
        return f"{address} is a {cls.value} address, which a tool may never reach"
    return (
        f"{address} is a {cls.value} address; only an operator's CIDR grant for this tool "
        "can allow it"
    )
