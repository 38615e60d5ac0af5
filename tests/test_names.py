"""The one id ↔ provider-name mapping: safe names, exact round trips, no collisions.

A property test over a deterministic generated set of ids (no extra dependencies), plus the
edge cases the encoding exists for.
"""

from __future__ import annotations

import random
import re

import pytest

from toolgate.model import split_tool_id
from toolgate.model.names import (
    MAX_PROVIDER_NAME,
    PROVIDER_NAME_PATTERN,
    from_provider_name,
    to_provider_name,
)

OPENAI_ANTHROPIC = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")
HASHED = re.compile(r"^[a-zA-Z0-9_-]{54}-h[0-9a-f]{8}$")

# Characters ids really contain (Pandora scopes, dotted plugins, snake and kebab case), plus
# the separators and escape characters of the encoding itself, plus non-ASCII text.
_ALPHABET = "abcxyzABCXYZ0189" + "_" * 6 + "-.@/:~+ é日"


def _part(rng: random.Random, *, colon: bool) -> str:
    length = rng.choice([1, 1, 2, 3, 5, 8, 13, 21])
    text = "".join(rng.choice(_ALPHABET) for _ in range(length))
    if not colon:
        text = text.replace(":", "x")
    text = text.replace(" ", "_")
    return "a" + text[1:] if text[0] == ":" else text


def _generated_ids(count: int, seed: int = 20240601) -> list[str]:
    rng = random.Random(seed)
    ids: set[str] = set()
    while len(ids) < count:
        tool_id = f"{_part(rng, colon=True)}:{_part(rng, colon=False)}"
        split_tool_id(tool_id)  # every generated id is a valid tool id
        ids.add(tool_id)
    return sorted(ids)


IDS = _generated_ids(5000)

EDGE_CASES = {
    "demo:add": "demo__add",
    "@scope/weather:weather": "_-40scope-2fweather__weather",
    "a_b:c_d": "a_b__c_d",  # single inner underscores stay
    "a__b:c": "a-5f-5fb__c",  # a double underscore would look like the separator
    "_a:b": "_-5fa__b",  # a leading underscore would look like the marker
    "a:b_": "a__b-5f",
    "1abc:x": "_1abc__x",  # names must start with a letter or underscore
    "a-b:c": "a-2db__c",  # "-" is the escape character
    "a:b:c": "a-3ab__c",  # split at the last colon
    "ns:日本": "ns__-e6-97-a5-e6-9c-ac",
}


@pytest.mark.parametrize(("tool_id", "name"), EDGE_CASES.items(), ids=list(EDGE_CASES))
def test_edge_cases_encode_and_decode(tool_id: str, name: str) -> None:
    assert to_provider_name(tool_id) == name
    assert from_provider_name(name) == tool_id


def test_generated_ids_give_safe_names_that_round_trip() -> None:
    shortened = 0
    for tool_id in IDS:
        name = to_provider_name(tool_id)
        assert PROVIDER_NAME_PATTERN.match(name), (tool_id, name)
        assert OPENAI_ANTHROPIC.match(name), (tool_id, name)
        assert GEMINI.match(name), (tool_id, name)
        assert to_provider_name(tool_id) == name  # deterministic
        if from_provider_name(name) != tool_id:
            assert HASHED.match(name), (tool_id, name)  # only shortened names do not decode
            shortened += 1
    assert 0 < shortened < len(IDS) // 2  # the set exercises both forms


def _shortened_names() -> list[tuple[str, str]]:
    pairs = [(tool_id, to_provider_name(tool_id)) for tool_id in IDS]
    return [(tool_id, name) for tool_id, name in pairs if from_provider_name(name) != tool_id]


def test_shortened_names_never_decode_to_another_id() -> None:
    wrong = [
        (tool_id, name, decoded)
        for tool_id, name in _shortened_names()
        if (decoded := from_provider_name(name)) is not None
    ]
    assert wrong == []


def test_distinct_ids_never_share_a_name() -> None:
    names = {to_provider_name(tool_id): tool_id for tool_id in IDS}
    assert len(names) == len(IDS)


def test_short_ids_always_round_trip() -> None:
    short = [tool_id for tool_id in IDS if len(tool_id) <= 12]
    assert len(short) > 500
    for tool_id in short:
        assert from_provider_name(to_provider_name(tool_id)) == tool_id


def test_long_ids_get_the_hashed_form() -> None:
    base = "vendor.plugin-suite.enterprise:" + "synchronise_every_calendar_entry" * 2
    variants = [base, base + "x", base.replace("vendor", "vendor2")]
    names = [to_provider_name(tool_id) for tool_id in variants]
    for tool_id, name in zip(variants, names, strict=True):
        assert len(name) == MAX_PROVIDER_NAME
        assert HASHED.match(name) and PROVIDER_NAME_PATTERN.match(name)
        assert from_provider_name(name) != tool_id  # resolved by the registry's table instead
    assert len(set(names)) == len(names)  # same 54-character prefix, different hashes
    assert names[0][:54] == names[1][:54]


@pytest.mark.parametrize(
    "name",
    ["demo", "demo__", "__add", "a-zz__b", "a__b__c", "A-41__b", "a-5F__b", "_demo__add", ""],
)
def test_names_that_are_not_ours_do_not_decode(name: str) -> None:
    assert from_provider_name(name) is None


def test_the_demo_tools_need_no_escaping() -> None:
    """What a newcomer sees first: every demo tool's provider name is its id with ``__``."""
    from toolgate import Gateway
    from toolgate.demo import TOOL_FOLDERS, tools
    from toolgate.formats.tool_folder.source import FolderRoot

    with Gateway(tool_folders=[FolderRoot(TOOL_FOLDERS, "demo")]) as gateway:
        gateway.add(tools)
        ids = sorted(entry.tool.id for entry in gateway.entries())
    assert {"demo:word_count", "demo:file_diff", "demo:system_info", "demo:add"} <= set(ids)
    assert [tool_id for tool_id in ids if "word" in tool_id] == ["demo:word_count"]
    for tool_id in ids:
        assert to_provider_name(tool_id) == tool_id.replace(":", "__"), tool_id
