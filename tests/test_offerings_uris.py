"""How resource URIs are shown and resolved (:mod:`toolgate.offerings.uris`): the wrapped form
round-trips any URI, and template matching follows the RFC 6570 expressions servers use."""

from __future__ import annotations

import pytest

from toolgate.offerings import WRAPPED_SCHEME, unwrap, wrap
from toolgate.offerings.uris import matches_template


@pytest.mark.parametrize(
    "uri",
    [
        "demo://resource/static/document/architecture.md",
        "file:///home/user/a b/ü.txt",
        "https://example.com/x?y=1&z=%2F#frag",
        "toolgate://nested/already%2Fwrapped",
    ],
)
def test_a_wrapped_uri_names_its_namespace_and_round_trips(uri: str) -> None:
    wrapped = wrap("every-thing.v2", uri)
    assert wrapped.startswith(WRAPPED_SCHEME + "every-thing.v2/")
    assert "/" not in wrapped[len(WRAPPED_SCHEME + "every-thing.v2/") :]  # one segment
    assert unwrap(wrapped) == ("every-thing.v2", uri)


@pytest.mark.parametrize("uri", ["demo://x", "toolgate://", "toolgate://ns", "toolgate://ns/"])
def test_other_uris_are_not_wrapped_ones(uri: str) -> None:
    assert unwrap(uri) is None


@pytest.mark.parametrize(
    ("template", "uri", "expected"),
    [
        ("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/text/1", True),
        ("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/text/1/2", False),
        ("demo://resource/dynamic/text/{resourceId}", "demo://resource/dynamic/blob/1", False),
        ("file:///{+path}", "file:///a/b/c.txt", True),
        ("search://items{?q,limit}", "search://items?q=x&limit=3", True),
        ("search://items{?q,limit}", "search://items", True),
        ("repo://{owner}/{name}", "repo://octo/hello", True),
        ("repo://{owner}/{name}", "repo://octo", False),
        ("a.b://{x}", "aXb://1", False),  # literal parts are literal, not patterns
    ],
)
def test_template_matching(template: str, uri: str, expected: bool) -> None:
    assert matches_template(template, uri) is expected
