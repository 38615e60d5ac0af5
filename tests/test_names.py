"""The id ↔ name mappings (MCP and providers): safe names, exact round trips, no collisions,
older spellings still resolving.

Property tests over a deterministic generated set of ids and over hypothesis-drawn ids, an
exhaustive check over a small alphabet, plus the edge cases the encoding exists for.
"""

from __future__ import annotations

import itertools
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolgate.errors import DuplicateToolError
from toolgate.model import Tool, split_tool_id
from toolgate.model.names import (
    MAX_MCP_NAME,
    MAX_PROVIDER_NAME,
    MCP_NAME_PATTERN,
    PROVIDER_NAME_PATTERN,
    from_name,
    from_provider_name,
    legacy_provider_name,
    to_mcp_name,
    to_provider_name,
)
from toolgate.registry import RegisteredTool, Registry

OPENAI_ANTHROPIC = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
GEMINI = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}$")
HASHED = re.compile(r"^[a-zA-Z0-9_-]{53}-30[0-9a-f]{8}$")
MCP_HASHED = re.compile(r"^[a-zA-Z0-9_.-]{117}-30[0-9a-f]{8}$")

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
    "a-b:c": "a-b__c",  # "-" stays as written…
    "a-1f:c": "a-2d1f__c",  # …unless two lowercase hex digits follow it (it would read as one)
    "a-1F:c": "a-1F__c",  # escapes are lowercase: this one cannot be mistaken
    "a-f:c": "a-f__c",  # one hex digit is no escape
    "a-:c": "a-__c",
    "everything:get-sum": "everything__get-sum",
    "demo:file.diff": "demo__file-2ediff",  # providers refuse "."
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
    assert len(set(names)) == len(names)  # same 53-character prefix, different hashes
    assert names[0][:53] == names[1][:53]


@pytest.mark.parametrize(
    "name",
    # "A-41" spells "AA", whose name is "AA"; "_demo__add" has a marker "demo" needs not.
    ["demo", "demo__", "__add", "a__b__c", "A-41__b", "_demo__add", "a-30__b", ""],
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


# -- the MCP mapping --------------------------------------------------------------------------

MCP_EDGE_CASES = {
    "everything:get-sum": "everything__get-sum",
    "time:get_current_time": "time__get_current_time",
    "demo:file-diff": "demo__file-diff",
    "demo:file.diff": "demo__file.diff",  # MCP allows "."
    "@scope/weather:weather": "-40scope-2fweather__weather",  # no marker: MCP has no first rule
    "1abc:x": "1abc__x",
    "a-1f:c": "a-2d1f__c",
    "a__b:c": "a-5f-5fb__c",
    "ns:日本": "ns__-e6-97-a5-e6-9c-ac",
}


@pytest.mark.parametrize(("tool_id", "name"), MCP_EDGE_CASES.items(), ids=list(MCP_EDGE_CASES))
def test_mcp_names_keep_what_mcp_allows(tool_id: str, name: str) -> None:
    assert to_mcp_name(tool_id) == name
    assert from_name(name) == tool_id
    assert from_provider_name(name) == tool_id  # the strict check accepts both surfaces' names


def test_generated_ids_give_mcp_names_that_round_trip() -> None:
    names: dict[str, str] = {}
    for tool_id in IDS:
        name = to_mcp_name(tool_id)
        assert MCP_NAME_PATTERN.match(name), (tool_id, name)
        if from_name(name) == tool_id:
            assert from_provider_name(name) == tool_id
        else:
            assert MCP_HASHED.match(name), (tool_id, name)
            assert from_provider_name(name) is None
        names[name] = tool_id
    assert len(names) == len(IDS)


def test_long_ids_get_a_shortened_mcp_name_of_128_characters() -> None:
    tool_id = "everything:" + "x" * 200
    name = to_mcp_name(tool_id)
    assert len(name) == MAX_MCP_NAME and MCP_HASHED.match(name)
    assert from_name(name) is None  # the registry's table resolves it
    # 64 characters fit MCP but not providers: only the provider name is shortened.
    medium = "everything:" + "y" * 60
    assert to_mcp_name(medium) == "everything__" + "y" * 60
    assert len(to_provider_name(medium)) == MAX_PROVIDER_NAME


# -- properties -------------------------------------------------------------------------------

_ID_CHARS = st.sampled_from([*"abf019AF_-.:@/~ é", "日"])
_id_parts = st.text(_ID_CHARS, min_size=1, max_size=12)


def _valid_id(namespace: str, name: str) -> str | None:
    tool_id = f"{namespace}:{name.replace(':', 'c')}"
    try:
        split_tool_id(tool_id)
    except ValueError:
        return None
    return tool_id


@given(_id_parts, _id_parts)
def test_both_mappings_round_trip_and_stay_in_their_alphabets(namespace: str, name: str) -> None:
    tool_id = _valid_id(namespace, name)
    if tool_id is None:
        return
    for name, pattern, hashed in (
        (to_mcp_name(tool_id), MCP_NAME_PATTERN, MCP_HASHED),
        (to_provider_name(tool_id), PROVIDER_NAME_PATTERN, HASHED),
    ):
        assert pattern.match(name), name
        if hashed.match(name):  # shortened: looked up, never decoded
            assert from_name(name) is None and from_provider_name(name) is None
        else:
            assert from_name(name) == tool_id == from_provider_name(name)
            assert "-30" not in name  # the shortened marker never occurs in a full name
    # The older spelling (every "-" escaped) still spells the same id, unless shortened.
    legacy = legacy_provider_name(tool_id)
    if legacy[-10:-8] != "-h":
        assert from_name(legacy) == tool_id


def test_every_id_over_a_small_alphabet_has_its_own_names() -> None:
    """Exhaustive: every id whose parts are 1–3 characters of ``a 0 f _ - .`` (the characters
    the rules turn on) maps to names no other such id has, that decode back to it."""
    alphabet = "a0f_-."
    parts = ["".join(p) for n in (1, 2, 3) for p in itertools.product(alphabet, repeat=n)]
    seen_mcp: dict[str, str] = {}
    seen_provider: dict[str, str] = {}
    for namespace, name in itertools.product(parts, parts):
        tool_id = f"{namespace}:{name}"
        mcp_name, provider_name = to_mcp_name(tool_id), to_provider_name(tool_id)
        assert seen_mcp.setdefault(mcp_name, tool_id) == tool_id
        assert seen_provider.setdefault(provider_name, tool_id) == tool_id
        assert from_name(mcp_name) == tool_id == from_name(provider_name)
    assert len(seen_mcp) == len(parts) ** 2


# -- older spellings --------------------------------------------------------------------------

LEGACY = {
    "everything:get-sum": "everything__get-2dsum",
    "demo:file-diff": "demo__file-2ddiff",
    "demo:file.diff": "demo__file-2ediff",
    "@scope/weather:weather": "_-40scope-2fweather__weather",
}


@pytest.mark.parametrize(("tool_id", "name"), LEGACY.items(), ids=list(LEGACY))
def test_the_older_spelling_still_decodes(tool_id: str, name: str) -> None:
    assert legacy_provider_name(tool_id) == name
    assert from_name(name) == tool_id
    if name not in (to_mcp_name(tool_id), to_provider_name(tool_id)):
        assert from_provider_name(name) is None  # not a name toolgate gives any more


def _registry_with(*tool_ids: str) -> Registry:
    registry = Registry()
    for tool_id in tool_ids:
        registry.add(RegisteredTool(Tool(tool_id, "d", {"type": "object"}), binding=None))
    return registry


def test_the_registry_resolves_every_spelling_of_a_tool() -> None:
    long_id = "vendor:" + "synchronise-every-calendar-entry" * 3
    registry = _registry_with("everything:get-sum", "demo:file.diff", long_id)
    for name in (
        "everything:get-sum",
        "everything__get-sum",
        "everything__get-2dsum",  # before names kept "-"
        "_everything__get-2dsum",  # … with a needless marker, still one spelling of the id
    ):
        entry = registry.get(name)
        assert entry is not None and entry.tool.id == "everything:get-sum", name
    for name in ("demo__file.diff", "demo__file-2ediff"):
        entry = registry.get(name)
        assert entry is not None and entry.tool.id == "demo:file.diff", name
    for name in (to_mcp_name(long_id), to_provider_name(long_id), legacy_provider_name(long_id)):
        entry = registry.get(name)
        assert entry is not None and entry.tool.id == long_id, name
    # An old spelling of a tool that does not exist resolves to nothing.
    assert registry.get("everything__get-2dproduct") is None
    registry.remove(long_id)
    assert registry.get(to_provider_name(long_id)) is None
    assert registry.get(legacy_provider_name(long_id)) is None


def test_the_registry_refuses_two_ids_with_one_name() -> None:
    """Distinct ids only meet in a shortened name: two ids whose names share the first 53
    characters and whose hashes are made to meet (patched) are refused, naming both."""
    import toolgate.model.names as names

    first = "vendor:" + "a" * 80
    second = "vendor:" + "a" * 79 + "b"
    original = names.hashlib.sha256

    class _SameHash:
        def __init__(self, data: bytes) -> None:
            del data

        def hexdigest(self) -> str:
            return "0" * 64

    registry = _registry_with(first)
    names.hashlib.sha256 = _SameHash  # type: ignore[assignment]
    try:
        registry_clash = Registry()
        registry_clash.add(RegisteredTool(Tool(first, "d", {"type": "object"}), binding=None))
        with pytest.raises(DuplicateToolError, match="map to the same name") as raised:
            registry_clash.add(RegisteredTool(Tool(second, "d", {"type": "object"}), binding=None))
    finally:
        names.hashlib.sha256 = original  # type: ignore[assignment]
    assert first in str(raised.value) and second in str(raised.value)
    assert registry.get(to_provider_name(first)) is not None


def _registered(tool_id: str) -> RegisteredTool:
    return RegisteredTool(Tool(tool_id, "d", {"type": "object"}), binding=None)


@pytest.mark.parametrize("b_first", [True, False])
def test_a_name_equal_to_another_tools_older_shortened_name_is_refused(b_first: bool) -> None:
    """Tool A whose current name is tool B's older shortened name (``-h`` and a hash) would
    take the calls older configurations make to B: refused at registration, in either order,
    and B's old name never reaches A."""
    b = "ns:fetch_customer_records_for_the_quarterly_report_everything_else"
    old_b = legacy_provider_name(b)
    assert len(old_b) == MAX_PROVIDER_NAME and old_b[-10:-8] == "-h"
    a = from_name(old_b)
    assert a is not None and a != b and old_b in (to_provider_name(a), to_mcp_name(a))
    registry = Registry()
    first, second = (b, a) if b_first else (a, b)
    registry.add(_registered(first))
    with pytest.raises(DuplicateToolError, match="older shortened name") as raised:
        registry.add(_registered(second))
    assert a in str(raised.value) and b in str(raised.value)
    entry = registry.get(old_b)
    assert entry is not None and entry.tool.id == first  # the one registered, by its own name
    assert len(registry) == 1


@given(
    st.lists(
        st.builds(
            lambda ns, name: f"{ns}:{name}",
            st.sampled_from(["ns", "n-s", "ns.x", "@s/w", "a" * 60]),
            st.text(alphabet=list("ab_-.0123456789fh@/é"), min_size=1, max_size=140).filter(
                lambda s: s.strip()
            ),
        ),
        min_size=1,
        max_size=8,
        unique=True,
    )
)
def test_every_name_of_a_registered_tool_resolves_to_it(tool_ids: list[str]) -> None:
    """Every name toolgate shows (MCP, provider) or still accepts (the older spelling and the
    older shortened name) of every tool it registers resolves to that tool."""
    registry = Registry()
    added = []
    for tool_id in tool_ids:
        try:
            registry.add(_registered(tool_id))
        except (DuplicateToolError, ValueError):
            continue
        added.append(tool_id)
    for tool_id in added:
        for name in (
            tool_id,
            to_mcp_name(tool_id),
            to_provider_name(tool_id),
            legacy_provider_name(tool_id),
        ):
            entry = registry.get(name)
            assert entry is not None and entry.tool.id == tool_id, (tool_id, name)
