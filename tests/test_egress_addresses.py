"""The address table, host normalization and allowlist patterns of tool egress (issue 8)."""

from __future__ import annotations

import ipaddress

import pytest

from toolgate.sandbox.addresses import (
    AddressClass,
    HostPattern,
    address_verdict,
    classify,
    host_allowed,
    normalize_host,
    parse_allowlist,
    parse_cidr_grants,
    parse_pattern,
)

C = AddressClass


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        # IPv4 rows
        ("8.8.8.8", C.PUBLIC),
        ("93.184.216.34", C.PUBLIC),
        ("0.0.0.0", C.UNSPECIFIED),
        ("0.1.2.3", C.RESERVED),
        ("10.1.2.3", C.PRIVATE),
        ("100.64.0.1", C.PRIVATE),
        ("100.127.255.254", C.PRIVATE),
        ("127.0.0.1", C.LOOPBACK),
        ("127.255.0.9", C.LOOPBACK),
        ("169.254.1.1", C.LINK_LOCAL),
        ("169.254.169.254", C.METADATA),
        ("169.254.170.2", C.METADATA),
        ("100.100.100.200", C.METADATA),
        ("168.63.129.16", C.METADATA),
        ("172.16.0.1", C.PRIVATE),
        ("172.31.255.255", C.PRIVATE),
        ("172.32.0.1", C.PUBLIC),
        ("192.0.0.8", C.RESERVED),
        ("192.0.2.1", C.RESERVED),
        ("192.88.99.1", C.RESERVED),
        ("192.168.1.1", C.PRIVATE),
        ("198.18.0.1", C.RESERVED),
        ("198.19.255.1", C.RESERVED),
        ("198.51.100.7", C.RESERVED),
        ("203.0.113.7", C.RESERVED),
        ("224.0.0.1", C.MULTICAST),
        ("239.255.255.250", C.MULTICAST),
        ("240.0.0.1", C.RESERVED),
        ("255.255.255.255", C.RESERVED),
        # IPv6 rows
        ("2606:4700:4700::1111", C.PUBLIC),
        ("::", C.UNSPECIFIED),
        ("::1", C.LOOPBACK),
        ("fc00::1", C.PRIVATE),
        ("fd12:3456::1", C.PRIVATE),
        ("fd00:ec2::254", C.METADATA),
        ("fe80::1", C.LINK_LOCAL),
        ("fe80::1%eth0", C.LINK_LOCAL),
        ("fec0::1", C.PRIVATE),
        ("ff02::1", C.MULTICAST),
        ("100::1", C.RESERVED),
        ("2001:db8::1", C.RESERVED),
        ("2001:10::1", C.RESERVED),
        ("3fff::1", C.RESERVED),
        ("5f00::1", C.RESERVED),
        ("4000::1", C.RESERVED),  # outside global unicast 2000::/3
        # IPv6 forms embedding IPv4: judged by the IPv4 address
        ("::ffff:127.0.0.1", C.LOOPBACK),
        ("::ffff:10.0.0.1", C.PRIVATE),
        ("::ffff:169.254.169.254", C.METADATA),
        ("::ffff:8.8.8.8", C.PUBLIC),
        ("::ffff:0:127.0.0.1", C.LOOPBACK),  # IPv4-translated
        ("::127.0.0.1", C.LOOPBACK),  # IPv4-compatible
        ("::10.0.0.1", C.PRIVATE),
        ("64:ff9b::127.0.0.1", C.LOOPBACK),  # NAT64
        ("64:ff9b::169.254.169.254", C.METADATA),
        ("64:ff9b::8.8.8.8", C.PUBLIC),
        ("64:ff9b:1::10.0.0.1", C.PRIVATE),  # local-use NAT64
        ("64:ff9b:1::8.8.8.8", C.PRIVATE),  # local-use itself is not public
        ("2002:7f00:1::", C.LOOPBACK),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", C.METADATA),  # 6to4 of 169.254.169.254
        ("2002:0808:0808::1", C.PUBLIC),
        # Teredo: server 65.54.227.120, client ~ inverted in the last 32 bits
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", C.LOOPBACK),  # client 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", C.PRIVATE),  # client 10.0.0.1
        ("2001:0:7f00:1:8000:63bf:f7f7:f7f7", C.LOOPBACK),  # server 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", C.PUBLIC),  # client 8.8.8.8
    ],
)
def test_classify(address: str, expected: AddressClass) -> None:
    assert classify(ipaddress.ip_address(address)) is expected


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("Example.COM", "example.com"),
        ("example.com.", "example.com"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("017700000001", "127.0.0.1"),
        ("[::ffff:127.0.0.1]", "::ffff:7f00:1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("169.254.169.254.", "169.254.169.254"),
    ],
)
def test_normalize_host(host: str, expected: str) -> None:
    assert normalize_host(host) == expected


@pytest.mark.parametrize(
    "host",
    ["", ".", "a..b", "-a.example", "256.0.0.1", "1.2.3.4.5", "0x1ffffffff", "example.123",
     "[nope]", "a b", "08.0.0.1", "exa*mple.com"],
)  # fmt: skip
def test_normalize_host_refuses(host: str) -> None:
    with pytest.raises(ValueError):
        normalize_host(host)


def test_patterns_and_ports() -> None:
    patterns = parse_allowlist(["API.example.com", "*.example.org", "data.test:8443"])
    assert patterns == (
        HostPattern("api.example.com"),
        HostPattern("example.org", wildcard=True),
        HostPattern("data.test", port=8443),
    )
    assert host_allowed(patterns, "api.example.com", 443)
    assert host_allowed(patterns, "api.example.com", 80)
    assert not host_allowed(patterns, "api.example.com", 8080)  # undeclared port
    assert host_allowed(patterns, "a.b.example.org", 443)
    assert not host_allowed(patterns, "example.org", 443)  # the wildcard is strictly below
    assert not host_allowed(patterns, "evilexample.org", 443)
    assert host_allowed(patterns, "data.test", 8443)
    assert not host_allowed(patterns, "data.test", 443)
    assert not host_allowed(patterns, "other.test", 443)
    assert str(parse_pattern("[::1]:8080")) == "[::1]:8080"
    assert parse_pattern("2130706433") == HostPattern("127.0.0.1")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("*", "bare"),
        ("*:443", "bare"),
        ("*.com", "top-level domain"),
        ("*.", "empty host name"),
        ("a.*.example.org", "leading"),
        ("*.10.0.0.1", "must name a domain"),
        ("https://example.com", "not a host"),
        ("example.com/path", "not a host"),
        ("user@example.com", "not a host"),
        ("example.com:0", "port"),
        ("example.com:99999", "port"),
    ],
)
def test_bad_patterns_are_refused(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_pattern(pattern)


def test_grants_open_private_ranges_but_never_metadata() -> None:
    grants = parse_cidr_grants(["127.0.0.1/32", "10.0.0.0/8", "fd12::/64"])
    assert address_verdict(ipaddress.ip_address("127.0.0.1"), grants) is None
    assert address_verdict(ipaddress.ip_address("10.9.8.7"), grants) is None
    assert address_verdict(ipaddress.ip_address("fd12::5"), grants) is None
    assert address_verdict(ipaddress.ip_address("8.8.8.8")) is None
    # A grant matches the literal address: the IPv4-mapped form of a granted address is refused.
    mapped = address_verdict(ipaddress.ip_address("::ffff:127.0.0.1"), grants)
    assert mapped is not None and "loopback" in mapped
    assert "loopback" in (address_verdict(ipaddress.ip_address("127.0.0.2"), grants) or "")
    assert "CIDR grant" in (address_verdict(ipaddress.ip_address("192.168.0.1"), grants) or "")
    for grant in ("169.254.0.0/16", "0.0.0.0/0", "fd00:ec2::/32", "168.63.0.0/16"):
        with pytest.raises(ValueError, match="metadata"):
            parse_cidr_grants([grant])
    with pytest.raises(ValueError, match="not a network"):
        parse_cidr_grants(["10.0.0.1/8"])  # host bits set: say what you mean
    # Unspecified and multicast can be inside a grant but are never reachable.
    wide = parse_cidr_grants(["0.0.0.0/32", "224.0.0.0/4"])
    assert "never" in (address_verdict(ipaddress.ip_address("0.0.0.0"), wide) or "")
    assert "never" in (address_verdict(ipaddress.ip_address("224.0.0.1"), wide) or "")
