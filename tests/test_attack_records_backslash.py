"""URL user info behind backslashes (issue 22, second review): for http(s), ws(s) and ftp a browser
reads ``\\`` as ``/``, so ``https:/\\user:pw@host``, ``https:\\\\user:pw@host`` and
``https:\\/user:pw@host`` carry a password as ``https://user:pw@host`` does. The masker finds the
authority after any run of two or more slashes or backslashes (and their JSON and percent
escapes) and masks the user info, in the records as in what comes back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_attack_records_more import _gateway, _nowhere, _records, _stored
from toolgate.redaction import MARKER, record_masker

PASSWORD = "hunter2pass"

#: Each form as a string (Python escapes: one backslash is ``\\``).
BACKSLASH_FORMS = {
    "slash-backslash": f"https:/\\alice:{PASSWORD}@h.com/x",
    "two-backslashes": f"https:\\\\alice:{PASSWORD}@h.com/x",
    "backslash-slash": f"https:\\/alice:{PASSWORD}@h.com/x",
    "three-slashes": f"https:///alice:{PASSWORD}@h.com/x",
    "json-escaped-backslashes": f"https:\\\\\\\\alice:{PASSWORD}@h.com/x",
    "percent-encoded-backslash": f"https%3A%2F%5Calice%3A{PASSWORD}%40h.com",
}


@pytest.mark.parametrize("url", BACKSLASH_FORMS.values(), ids=BACKSLASH_FORMS.keys())
def test_user_info_behind_backslashes_is_masked(url: str) -> None:
    masked = record_masker().sub(f"fetch {url} now")
    assert PASSWORD not in masked and "alice" not in masked
    assert MARKER in masked and masked.startswith("fetch https") and masked.endswith(" now")


@pytest.mark.parametrize("url", BACKSLASH_FORMS.values(), ids=BACKSLASH_FORMS.keys())
def test_user_info_behind_backslashes_is_masked_in_json_text(url: str) -> None:
    # The same URL inside a JSON document (each backslash doubled) is masked too.
    masked = record_masker().sub(json.dumps({"url": url}))
    assert PASSWORD not in masked and MARKER in masked


def test_paths_with_backslashes_and_no_user_info_are_left_alone() -> None:
    for text in ("C:\\dir\\file.txt", "\\\\server\\share\\x", "a\\\\b", "https:\\\\h.com/x"):
        assert record_masker().sub(text) == text


async def test_a_backslash_authority_is_recorded_nowhere(tmp_path: Path) -> None:
    url = BACKSLASH_FORMS["slash-backslash"]
    async with _gateway(tmp_path) as gateway:
        outcome = await gateway.call("m:echo", {"text": f"fetch {url} now"})
        assert outcome.ok
        [record] = _records(gateway, "m:echo")
    assert record.args["text"] == f"fetch https:/\\{MARKER}@h.com/x now"
    assert record.result == {"echo": record.args["text"]}
    _nowhere(_stored(tmp_path), PASSWORD)
