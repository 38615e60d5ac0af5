"""The LibYAML fast path of the safe YAML loader reads exactly what the Python loader reads.

``load_yaml`` first tries LibYAML's C parser on documents that hold nothing the two parsers may
read differently, and gives every other document — and every document the C path refuses — to
the Python loader. These tests compare both paths: same values, and the Python loader's errors.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolgate.formats._common import safe_yaml
from toolgate.formats._common.safe_yaml import YamlError, load_yaml

pytestmark = pytest.mark.skipif(safe_yaml._CParser is None, reason="PyYAML without LibYAML")

LIMITS: dict[str, Any] = {"max_nodes": 100_000, "max_depth": 64}

FRONT_MATTER = """name: find_00042
script: run.py
runtime: python
timeout: 10000
requireApproval: false
inputSchema:
  type: object
  properties:
    query:
      type: string
      description: "Words to look for"
    limit: {type: integer, minimum: 1, default: 10}
  required:
    - query
  additionalProperties: false
"""


def python_only(text: str) -> tuple[str, Any]:
    """What the Python loader alone makes of ``text``: ("ok", value) or ("error", message)."""
    try:
        return "ok", safe_yaml._load_with_python(
            text, "t.yaml", max_aliases=100, line_offset=0, **LIMITS
        )
    except YamlError as exc:
        return "error", str(exc)


def loaded(text: str) -> tuple[str, Any]:
    try:
        return "ok", load_yaml(text, source="t.yaml")
    except YamlError as exc:
        return "error", str(exc)


def test_a_plain_front_matter_takes_the_c_parser_and_reads_the_same() -> None:
    fast, value = safe_yaml._load_with_libyaml(FRONT_MATTER, **LIMITS)
    assert fast is True
    assert value == python_only(FRONT_MATTER)[1]
    assert value["inputSchema"]["properties"]["limit"] == {
        "type": "integer",
        "minimum": 1,
        "default": 10,
    }
    assert value["requireApproval"] is False


@pytest.mark.parametrize(
    "text",
    [
        "a: &x [1]\nb: *x\n",  # an alias: counted by the Python loader
        "a: 1\na: 2\n",  # a duplicate key: the Python loader names both lines
        "<<: {a: 1}\n",  # a merge key
        "a: !!binary aGk=\n",  # a tag JSON cannot hold
        "a: !!python/object:os.system x\n",
        # What LibYAML reads and PyYAML refuses (found by the comparison below):
        "|#",
        "x: |\t\n  y\n",
        "?a\n",
        "a: b\n\ufeffc: d\n",
        "[a,\n  b]\x85",
        "a: !\n",
        "[" * 70 + "]" * 70,  # deeper than the limit
    ],
)
def test_documents_the_c_path_leaves_get_the_python_loaders_answer(text: str) -> None:
    assert safe_yaml._load_with_libyaml(text, **LIMITS) == (False, None)
    assert loaded(text) == python_only(text)


def test_duplicate_keys_are_still_refused_with_both_lines() -> None:
    with pytest.raises(YamlError, match=r"duplicate key 'c' \(first at line 3\)") as caught:
        load_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", source="t.yaml")
    assert caught.value.line == 4


_WORDS = ["a", "b c", "yes", "no", "true", "1", "1.5", "null", "", "x: y", "- z", "# h", "é"]
_WORDS += ["'q'", '"d"', "2001-12-14", "1:20", "0o7", "0x1F", ".inf", "~", " lead", "<<", "="]
_SCALARS = st.one_of(
    st.sampled_from(_WORDS),
    st.text(max_size=12),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_WORDS), inner),
    max_leaves=12,
)
_EDITS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=400),
        st.sampled_from([*"ab1 :-,[]{}#'\"\n\\~.0x<=|>+", "\n  ", "\n- ", ": ", "\r\n"]),
        st.booleans(),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    value=_VALUES,
    flow=st.sampled_from([None, True, False]),
    style=st.sampled_from([None, None, '"', "'", "|", ">"]),
    width=st.sampled_from([10, 80]),
    edits=_EDITS,
)
def test_both_paths_agree_on_written_and_mangled_documents(
    value: Any, flow: bool | None, style: str | None, width: int, edits: list[Any]
) -> None:
    text = yaml.safe_dump(
        value, default_flow_style=flow, default_style=style, width=width, allow_unicode=True
    )
    for position, character, insert in edits:
        position %= len(text) + 1
        text = text[:position] + character + text[position + (0 if insert else 1) :]
    fast, fast_value = safe_yaml._load_with_libyaml(text, **LIMITS)
    expected = python_only(text)
    if fast:
        assert expected == ("ok", fast_value)
    assert loaded(text) == expected


def test_an_explicit_bool_tag_on_another_word_is_a_yaml_error() -> None:
    # PyYAML's bool constructor raised a bare KeyError here, which escaped load_yaml.
    with pytest.raises(YamlError, match="'maybe' is not a boolean"):
        load_yaml('a: !!bool "maybe"\n', source="t.yaml")


@pytest.mark.parametrize("text", ["a: b\ud800\n", "\ud800: 1\n", "- '\udfff'\n"])
def test_a_lone_surrogate_is_a_yaml_error_naming_the_character(text: str) -> None:
    # The C parser encodes the text as it is built; that failure must not escape load_yaml.
    with pytest.raises(YamlError, match="not allowed in YAML"):
        load_yaml(text, source="f.yaml")
    with pytest.raises(YamlError, match="not allowed in YAML"):
        safe_yaml.load_yaml_documents(text, source="f.yaml")
