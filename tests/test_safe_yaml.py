"""The YAML loader for untrusted declarations: safe tags, size limits, JSON-shaped values."""

from __future__ import annotations

import pytest

from toolgate.formats._common.safe_yaml import YamlError, load_yaml


def _billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
        previous = name
    return "\n".join(lines) + "\n"


def test_plain_document_loads() -> None:
    text = "name: x\nlist: [1, 2.5, null, true]\nnested:\n  a: {b: c}\n"
    assert load_yaml(text, source="t.yaml") == {
        "name": "x",
        "list": [1, 2.5, None, True],
        "nested": {"a": {"b": "c"}},
    }


def test_empty_document_is_none() -> None:
    assert load_yaml("", source="t.yaml") is None


def test_billion_laughs_is_refused_fast() -> None:
    with pytest.raises(YamlError) as caught:
        load_yaml(_billion_laughs(), source="bomb.yaml")
    assert "bomb.yaml" in str(caught.value)
    assert "alias" in str(caught.value)


def test_billion_laughs_is_refused_with_generous_alias_budget() -> None:
    # Even when every alias is allowed, the expanded-node budget stops it.
    with pytest.raises(YamlError, match="100 values"):
        load_yaml(_billion_laughs(), source="bomb.yaml", max_aliases=10_000, max_nodes=100)


def test_too_many_aliases_are_refused_while_composing() -> None:
    text = "a: &a x\nb: [" + ", ".join(["*a"] * 11) + "]\n"
    with pytest.raises(YamlError, match="more than 10 aliases") as caught:
        load_yaml(text, source="t.yaml", max_aliases=10)
    assert caught.value.line == 2
    assert load_yaml(text, source="t.yaml", max_aliases=11)["b"] == ["x"] * 11


def test_shared_values_count_each_time_they_are_reached() -> None:
    text = "a: &a [1, 2, 3, 4]\nb: [*a, *a, *a]\n"
    assert load_yaml(text, source="t.yaml", max_nodes=30)["b"][2] == [1, 2, 3, 4]
    with pytest.raises(YamlError, match="more than 15 values"):
        load_yaml(text, source="t.yaml", max_nodes=15)


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(YamlError, match="recursive alias"):
        load_yaml("a: &a [1, *a]\n", source="t.yaml")


def test_deep_nesting_is_refused_without_recursion_error() -> None:
    with pytest.raises(YamlError, match="nested deeper than 64"):
        load_yaml("[" * 5000 + "]" * 5000, source="t.yaml")
    assert load_yaml("[" * 10 + "]" * 10, source="t.yaml") == [[[[[[[[[[]]]]]]]]]]


def test_oversized_input_is_refused_before_parsing() -> None:
    with pytest.raises(YamlError, match="larger than 100 bytes"):
        load_yaml("a: " + "x" * 200, source="t.yaml", max_bytes=100)
    # Counted in UTF-8 bytes, not characters.
    with pytest.raises(YamlError, match="larger than 100 bytes"):
        load_yaml("a: " + "é" * 60, source="t.yaml", max_bytes=100)


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['echo pwned']\n",
        "a: !!python/object/apply:os.system ['echo pwned']\n",
        "a: !!python/name:os.system\n",
        "a: !!python/object:collections.OrderedDict {}\n",
        "a: !custom x\n",
    ],
)
def test_python_and_unknown_tags_are_refused(text: str) -> None:
    with pytest.raises(YamlError, match="could not determine a constructor") as caught:
        load_yaml(text, source="evil.yaml")
    assert str(caught.value).startswith("evil.yaml: line 1, column ")


@pytest.mark.parametrize("tag", ["!!binary aGk=", "!!set {a, b}", "!!omap [a: 1]", "!!pairs []"])
def test_tags_without_a_json_value_are_refused(tag: str) -> None:
    with pytest.raises(YamlError, match="could not determine a constructor"):
        load_yaml(f"a: {tag}\n", source="t.yaml")


def test_values_stay_json_shaped() -> None:
    text = "date: 2024-01-01\nstamp: 2024-01-01T10:00:00Z\nyes_: yes\nno_: no\non_: on\neq: =\n"
    assert load_yaml(text, source="t.yaml") == {
        "date": "2024-01-01",
        "stamp": "2024-01-01T10:00:00Z",
        "yes_": "yes",
        "no_": "no",
        "on_": "on",
        "eq": "=",
    }
    assert load_yaml("[true, True, TRUE, false, False, FALSE]", source="t.yaml") == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert load_yaml("enum: [yes, no]", source="t.yaml") == {"enum": ["yes", "no"]}


def test_duplicate_key_is_refused_with_key_and_lines() -> None:
    with pytest.raises(YamlError) as caught:
        load_yaml("a: 1\nb:\n  c: 1\n  c: 2\n", source="t.yaml")
    error = caught.value
    assert error.line == 4
    assert "duplicate key 'c'" in str(error)
    assert "first at line 3" in str(error)


def _merge_bomb(levels: int = 30) -> str:
    """Each level merges the previous one twice: 2**levels mappings once merges are expanded."""
    lines = ["a0: &a0 {x: 1}"]
    lines += [f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}]}}" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_merge_key_bomb_is_refused_fast() -> None:
    text = _merge_bomb()
    assert len(text.encode()) < 1024 and text.count("*") == 60
    with pytest.raises(YamlError, match=r"merge keys \(<<\) are not supported") as caught:
        load_yaml(text, source="bomb.yaml")
    assert (caught.value.line, caught.value.column) == (2, 10)


def test_merge_key_is_refused() -> None:
    text = "base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n"
    with pytest.raises(YamlError) as caught:
        load_yaml(text, source="t.yaml")
    assert str(caught.value) == (
        "t.yaml: line 3, column 3: merge keys (<<) are not supported; write the keys out"
    )


def test_explicit_merge_tag_is_refused() -> None:
    with pytest.raises(YamlError, match=r"merge keys \(<<\) are not supported") as caught:
        load_yaml("b: &b {x: 1}\n!!merge m: *b\n", source="t.yaml")
    assert caught.value.line == 2


def test_merge_key_through_an_alias_is_refused() -> None:
    text = "k: &k <<\nb: &b {x: 1}\nm: {*k : *b}\n"
    with pytest.raises(YamlError, match=r"merge keys \(<<\) are not supported") as caught:
        load_yaml(text, source="t.yaml")
    assert caught.value.line == 3


def test_quoted_merge_key_is_an_ordinary_key() -> None:
    assert load_yaml('"<<": 1\n', source="t.yaml") == {"<<": 1}
    assert load_yaml("'<<': {a: 1}\n", source="t.yaml") == {"<<": {"a": 1}}


def test_syntax_error_names_source_line_and_column() -> None:
    with pytest.raises(YamlError) as caught:
        load_yaml("a: 1\nb: [1, 2\nc: 3\n", source="tool.md")
    error = caught.value
    assert error.source == "tool.md"
    assert error.line is not None and error.column is not None
    assert str(error).startswith(f"tool.md: line {error.line}, column {error.column}: ")


def test_line_offset_shifts_reported_lines() -> None:
    with pytest.raises(YamlError) as caught:
        load_yaml("a: 1\nb: c: d\n", source="tool.md", line_offset=1)
    assert caught.value.line == 3


def test_control_character_is_refused_with_position() -> None:
    with pytest.raises(YamlError, match="U\\+0007") as caught:
        load_yaml("a: 1\nb: \x07\n", source="t.yaml")
    assert (caught.value.line, caught.value.column) == (2, 4)


def test_huge_integer_is_refused() -> None:
    with pytest.raises(YamlError, match="invalid value"):
        load_yaml("a: " + "1" * 5000, source="t.yaml")


def test_several_documents_are_refused() -> None:
    with pytest.raises(YamlError, match="single document"):
        load_yaml("--- 1\n--- 2\n", source="t.yaml")


def test_yaml_error_is_a_value_error() -> None:
    assert issubclass(YamlError, ValueError)


def test_many_nodes_are_refused_while_composing() -> None:
    text = "[" + ", ".join(["1"] * 100) + "]"
    with pytest.raises(YamlError, match="more than 50 values") as caught:
        load_yaml(text, source="t.yaml", max_nodes=50)
    assert caught.value.line == 1
    assert len(load_yaml(text, source="t.yaml", max_nodes=101)) == 100


def test_mapping_keys_count_as_nodes() -> None:
    text = "{" + ", ".join(f"k{i}: {i}" for i in range(40)) + "}"
    with pytest.raises(YamlError, match="more than 60 values"):
        load_yaml(text, source="t.yaml", max_nodes=60)
