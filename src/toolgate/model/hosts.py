"""Host names and ``network`` allowlist patterns: one parser for the loaders and the egress proxy.

A tool's ``network`` permission is checked when its declaration loads and parsed again by the
egress proxy of :mod:`toolgate.sandbox.egress` (and matched against every request there). Both use
:func:`parse_pattern`, so what loads is exactly what the proxy will enforce: an entry the proxy
would refuse (a bare ``*``, a wildcard over a top-level domain or over an IP address such as
``*.127.0.0.1``, a port out of range, a URL) is refused when the declaration loads, with the same
words. Pure functions, no I/O; re-exported by :mod:`toolgate.sandbox.addresses`.

* **Host names** are normalized before anything compares them: surrounding brackets removed,
  lower case, IDNA (the ``idna`` codec), one trailing dot removed. A host that is an IP address in
  any spelling a C library or a browser would accept — ``2130706433``, ``0x7f000001``,
  ``0177.0.0.1``, ``127.1``, ``[::ffff:127.0.0.1]`` — is recognised as that address, never sent
  to a resolver as a name.
* **Allowlists**: ``api.example.com`` matches that name only, ``*.example.org`` matches any name
  *below* ``example.org`` (not ``example.org`` itself). Without a port a pattern allows ports 443
  and 80; ``host:port`` allows that port only.
* **What a pattern may not name.** A pattern shows the host it grants: one whose text changes
  under IDNA mapping (``exa\u200bmple.com`` — an invisible character — would grant
  ``example.com``; full-width letters, ``ß``, a decomposed accent) or that holds an invisible,
  control or space character is refused, saying what it would have become. A declaration may not
  list an address the egress proxy refuses whatever an operator grants
  (:func:`never_granted_refusal`, checked by the loaders): a cloud metadata
  service (``169.254.169.254``, ``[fd00:ec2::254]``, ``metadata.google.internal``…), the
  unspecified address (``0.0.0.0``, ``[::]``: this host) and multicast — in any spelling, also
  embedded in an IPv6 address. Loopback and private addresses load: an operator's CIDR grant
  (which the loader does not know) may open them.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PORTS",
    "METADATA_NAMES",
    "METADATA_NETWORKS",
    "HostPattern",
    "IPAddress",
    "embedded_ipv4",
    "host_allowed",
    "never_granted",
    "never_granted_refusal",
    "normalize_host",
    "parse_allowlist",
    "parse_ip_host",
    "parse_pattern",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Ports a pattern without ``:port`` allows.
DEFAULT_PORTS: frozenset[int] = frozenset({80, 443})


#: Cloud metadata endpoints: AWS/GCP/Azure/OpenStack 169.254.169.254, AWS DNS and ECS task
#: metadata, Alibaba, Azure's wire server (a public address!), AWS IPv6 IMDS and DNS. They hand out
#: cloud credentials: the egress proxy refuses them whatever is granted.
METADATA_NETWORKS: tuple[str, ...] = (
    "169.254.169.254/32",
    "169.254.169.253/32",
    "169.254.170.2/32",
    "169.254.170.23/32",
    "100.100.100.200/32",
    "168.63.129.16/32",
    "fd00:ec2::254/128",
    "fd00:ec2::23/128",
)
#: Names that stand for a metadata endpoint (they resolve to one of :data:`METADATA_NETWORKS`).
METADATA_NAMES: frozenset[str] = frozenset(
    {"metadata.google.internal", "metadata.goog", "instance-data.ec2.internal"}
)

_METADATA = tuple(ipaddress.ip_network(net) for net in METADATA_NETWORKS)
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_TEREDO = ipaddress.ip_network("2001::/32")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (empty for an ordinary IPv6 address)."""
    value = int(address)
    low = ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in _MAPPED or address in _TRANSLATED or address in _NAT64:
        return [low]
    if address in _NAT64_LOCAL:
        return [low]  # RFC 8215 local-use: the operator picks the layout; the /96 one is usual
    if address in _COMPATIBLE and value > 1:  # "::a.b.c.d" (deprecated), not :: or ::1
        return [low]
    if address in _SIX_TO_FOUR:
        return [ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF)]
    if address in _TEREDO:
        server = ipaddress.IPv4Address((value >> 64) & 0xFFFFFFFF)
        client = ipaddress.IPv4Address(~value & 0xFFFFFFFF)  # stored inverted (RFC 4380)
        return [server, client]
    return []


def never_granted(address: IPAddress) -> str | None:
    """Why the egress proxy refuses ``address`` (or an address it embeds) whatever an operator
    grants — a cloud metadata service, the unspecified address, multicast — or ``None``."""
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        candidates.extend(embedded_ipv4(address))
    for candidate in candidates:
        same = (network for network in _METADATA if network.version == candidate.version)
        if any(candidate in network for network in same):
            return "a cloud metadata service, which hands out the host's cloud credentials"
        if candidate.is_unspecified:
            return "the unspecified address, which reaches this host"
        if candidate.is_multicast:
            return "a multicast address, not a destination"
    return None


# -- host names --------------------------------------------------------------------------------

_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_NUMBER = re.compile(r"^(0x[0-9a-f]*|0[0-7]*|[1-9][0-9]*)$")
_NUMERIC_LOOKING = re.compile(r"^(0x[0-9a-z]*|[0-9]+)$")


def _ipv4_number(part: str) -> int:
    if part.startswith("0x"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def _odd_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in the inet_aton/WHATWG spellings (``127.1``, ``0x7f.1``, ``2130706433``,
    ``0177.0.0.1``), or ``None`` if ``host`` is not all numbers. Raises :class:`ValueError` for
    numbers that do not form an address (a name such as ``1.2.3.4.5`` is not sent to DNS)."""
    parts = host.split(".")
    if not all(_NUMBER.match(part) for part in parts):
        return None
    if len(parts) > 4:
        raise ValueError(f"{host!r} looks like an IPv4 address but is not one")
    numbers = [_ipv4_number(part) for part in parts]
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        raise ValueError(f"{host!r} looks like an IPv4 address but is out of range")
    value = last
    for index, number in enumerate(head):
        value += number << (8 * (3 - index))
    return ipaddress.IPv4Address(value)


def normalize_host(text: str) -> str:
    """The canonical form of a host: an IP address in its standard text form (IPv6 without
    brackets), or a lower-case ASCII (IDNA) name without trailing dot.

    Raises :class:`ValueError` for anything that is neither (empty, bad labels, a number that is
    not an address, a name ending in a numeric label)."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv6 address") from None
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise ValueError("empty host name")
    if ":" in host:
        try:
            return str(ipaddress.IPv6Address(host))
        except ValueError:
            raise ValueError(f"{text!r} is not a host name or an IP address") from None
    try:
        name = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError(f"{text!r} is not a valid host name (IDNA)") from None
    v4 = _odd_ipv4(name)
    if v4 is not None:
        return str(v4)
    labels = name.split(".")
    if not all(_LABEL.match(label) for label in labels) or len(name) > 253:
        raise ValueError(f"{text!r} is not a valid host name")
    if _NUMERIC_LOOKING.match(labels[-1]):
        # Browsers treat a host ending in a number as an IPv4 address; refuse the ambiguity.
        raise ValueError(f"{text!r} ends in a numeric label and is not a valid IPv4 address")
    return name


def parse_ip_host(host: str) -> IPAddress | None:
    """The address a *normalized* host stands for, or ``None`` for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


# -- allowlists --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One entry of a ``network`` permission, normalized."""

    host: str
    """The name (without ``*.``) or the address, normalized."""
    wildcard: bool = False
    """``*.host``: any name strictly below ``host``."""
    port: int | None = None
    """The one allowed port; ``None`` allows :data:`DEFAULT_PORTS`."""

    def matches(self, host: str, port: int) -> bool:
        """Whether a *normalized* host and a port fall under this pattern."""
        if port not in ((self.port,) if self.port is not None else DEFAULT_PORTS):
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = ("*." if self.wildcard else "") + host
        return f"{text}:{self.port}" if self.port is not None else text


def _split_port(text: str) -> tuple[str, int | None]:
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"network pattern {text!r}: missing ']'")
        host, rest = text[: end + 1], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise ValueError(f"network pattern {text!r}: expected ':port' after ']'")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    else:
        return text, None
    if not (port_text.isascii() and port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError(f"network pattern {text!r}: the port must be a number from 1 to 65535")
    return host, int(port_text)


#: Unicode categories a host name never holds: format characters (zero-width space and joiners,
#: soft hyphen, direction marks), controls, private use, unassigned, spaces and separators.
_INVISIBLE = frozenset({"Cf", "Cc", "Co", "Cs", "Cn", "Zs", "Zl", "Zp"})


def _invisible_refusal(host: str) -> str | None:
    """Why ``host`` (as written) does not show the host it names, or ``None``: it holds an
    invisible, control or space character."""
    for char in host:
        if unicodedata.category(char) in _INVISIBLE:
            return (
                f"it holds the invisible or control character U+{ord(char):04X} "
                f"({unicodedata.name(char, 'unnamed')}), so it does not show the host it grants"
            )
    return None


def _mapping_refusal(host: str, name: str) -> str | None:
    """Why ``host`` (as written) may not stand for ``name`` (its normalized form), or ``None``:
    it is not the name it grants, letter for letter, but for case and the ``xn--`` spelling."""
    if host.isascii() or parse_ip_host(name) is not None:
        return None
    try:
        shown = name.encode("ascii").decode("idna")
    except UnicodeError:  # pragma: no cover - name came out of the idna codec
        shown = ""
    if shown != host.lower():
        became = repr(shown) if shown and shown != name else ""
        return (
            f"IDNA mapping turns it into {became + ' = ' if became else ''}{name!r}, not the "
            "host it shows; write the host exactly as it is registered"
        )
    return None


def parse_pattern(text: str) -> HostPattern:
    """Parse one ``network`` entry; :class:`ValueError` says what is wrong and what to write."""
    shape = "write a host such as 'api.example.com' or '*.example.org', optionally ':port'"
    raw = str(text).strip()
    if not raw or any(c in raw for c in "/@?#") or any(c.isspace() for c in raw):
        raise ValueError(
            f"network pattern {text!r} is not a host name: give the host only (without scheme "
            f"or path, or user); {shape}"
        )
    host, port = _split_port(raw)
    if host == "*" or "*" in host.removeprefix("*."):
        raise ValueError(
            f"network pattern {text!r} is not a valid host pattern: '*' is allowed only as a "
            "leading '*.' before a domain "
            f"(a bare '*' would allow every host); {shape}"
        )
    wildcard = host.startswith("*.")
    written = host[2:] if wildcard else host
    refusal = _invisible_refusal(written)
    if refusal is not None:
        raise ValueError(f"network pattern {text!r}: {refusal}")
    try:
        name = normalize_host(written)
    except ValueError as exc:
        raise ValueError(f"network pattern {text!r}: {exc}; {shape}") from None
    refusal = _mapping_refusal(written.removesuffix("."), name)
    if refusal is not None:
        raise ValueError(f"network pattern {text!r}: {refusal}")
    if wildcard:
        if parse_ip_host(name) is not None:
            raise ValueError(
                f"network pattern {text!r}: a wildcard must name a domain, not an IP address "
                f"('*.' over {name} matches no host name); name the address itself, e.g. "
                f"'{HostPattern(name, port=port)}' (a private address also needs an operator's "
                "CIDR grant)"
            )
        if "." not in name:
            raise ValueError(
                f"network pattern {text!r} would allow a whole top-level domain; name a "
                "domain, e.g. '*.example.org'"
            )
    return HostPattern(host=name, wildcard=wildcard, port=port)


def never_granted_refusal(pattern: HostPattern) -> str | None:
    """Why a declaration may not list ``pattern`` although it parses: it names a destination the
    egress proxy refuses whatever an operator grants (:func:`never_granted`, or a metadata
    service's name), so the entry could never work. ``None`` when it may.

    The loaders check this (:func:`toolgate.model.permission_rules.network_entry`); the proxy
    does not need to: it refuses such a destination when it is asked for it."""
    address = parse_ip_host(pattern.host)
    why = never_granted(address) if address is not None else None
    if why is None and not pattern.wildcard and pattern.host in METADATA_NAMES:
        why = "the name of a cloud metadata service, which hands out the host's cloud credentials"
    if why is None:
        return None
    return (
        f"network pattern {str(pattern)!r}: {pattern.host} is {why}; the egress proxy refuses it "
        "whatever is granted, so this entry could never work. Remove it"
    )


def parse_allowlist(patterns: Iterable[str]) -> tuple[HostPattern, ...]:
    """Parse a tool's ``network`` permission (all entries; the first bad one raises)."""
    return tuple(dict.fromkeys(parse_pattern(p) for p in patterns))


def host_allowed(patterns: Iterable[HostPattern], host: str, port: int) -> bool:
    """Whether a *normalized* ``host`` and ``port`` match one of ``patterns``."""
    return any(pattern.matches(host, port) for pattern in patterns)
