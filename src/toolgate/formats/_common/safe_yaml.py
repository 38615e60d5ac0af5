"""A YAML loader for untrusted declarations: JSON-shaped values only, with hard size limits.

:func:`load_yaml` parses with a :class:`yaml.SafeLoader` subclass, so no tag can build Python
objects (``!!python/object/apply:os.system`` is refused). On top of that:

* input larger than ``max_bytes`` is refused before parsing;
* aliases and nodes are counted while the document is composed, and a document with more than
  ``max_aliases`` aliases or ``max_nodes`` nodes, a recursive alias or nodes nested deeper than
  ``max_depth`` is refused;
* after construction the value is walked *as expanded* (a shared sub-object counts every time
  it is reached) and refused past ``max_nodes``, so a "billion laughs" document fails fast instead
  of exhausting memory in whatever consumes the value later;
* merge keys (``<<``, or any key tagged ``!!merge``) are refused while the document is composed,
  before PyYAML would expand them: a few dozen aliases merged into each other expand
  exponentially, and JSON has no merges anyway (a quoted ``"<<"`` is an ordinary key);
* a mapping that repeats a key is refused, naming the key and both lines (PyYAML would silently
  keep the last value);
* values stay JSON-shaped: timestamps are kept as the strings they are written as, the
  ``!!binary``, ``!!set``, ``!!omap`` and ``!!pairs`` tags are refused, and only
  ``true``/``false`` (any case style) are booleans, as in YAML 1.2 — ``yes``, ``no``, ``on`` and
  ``off`` stay strings (YAML 1.1 turns them into booleans, silently changing ``enum: [yes, no]``).

Every failure is a :class:`YamlError` naming the source and, when known, the line and column.
"""

from __future__ import annotations

import re
from typing import Any

# Only top-level names are used: they are typed the same with and without types-PyYAML.
import yaml  # type: ignore[import-untyped, unused-ignore]

__all__ = [
    "DEFAULT_MAX_ALIASES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_NODES",
    "YamlError",
    "load_yaml",
    "load_yaml_documents",
    "shape_problem",
    "split_yaml_documents",
]

DEFAULT_MAX_BYTES = 1_048_576
DEFAULT_MAX_ALIASES = 100
DEFAULT_MAX_NODES = 100_000
#: Far deeper than any real schema, far below Python's recursion limit.
DEFAULT_MAX_DEPTH = 64

_BOOL_TAG = "tag:yaml.org,2002:bool"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_NOT_JSON_TAGS = ("binary", "set", "omap", "pairs")


class YamlError(ValueError):
    """A YAML document was refused: a syntax error, a forbidden tag, or a limit exceeded."""

    def __init__(
        self, source: str, problem: str, *, line: int | None = None, column: int | None = None
    ) -> None:
        self.source = source
        self.problem = problem
        self.line = line
        """1-based line of the problem, when known."""
        self.column = column
        """1-based column of the problem, when known."""
        super().__init__(f"{source}: {self.location}{problem}")

    @property
    def location(self) -> str:
        """``"line 3, column 7: "`` (or ``""`` when the position is unknown)."""
        if self.line is None:
            return ""
        if self.column is None:
            return f"line {self.line}: "
        return f"line {self.line}, column {self.column}: "


class _JsonConstructor(yaml.constructor.SafeConstructor):  # type: ignore[misc, unused-ignore]
    """SafeConstructor with duplicate-key detection and JSON-shaped values (the tables of tags
    and resolvers are set below): shared by the Python loader and the C one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            constructor: Any = self
            seen: dict[Any, yaml.ScalarNode] = {}
            for key_node, _ in node.value:
                # Merge keys never get here (refused while composing). Scalars are constructed
                # (and cached) immediately, so constructing them here costs nothing extra.
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = constructor.construct_object(key_node, deep=False)
                first = seen.get(key)
                if first is not None:
                    raise yaml.MarkedYAMLError(
                        None,
                        None,
                        f"duplicate key {key!r} (first at line {first.start_mark.line + 1})",
                        key_node.start_mark,
                    )
                seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def construct_plain_string(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))


class _Loader(_JsonConstructor, yaml.SafeLoader):  # type: ignore[misc, unused-ignore]
    """SafeLoader with alias/depth limits, no merge keys, duplicate-key detection and JSON-shaped
    values."""

    def __init__(self, text: str, *, max_aliases: int, max_nodes: int, max_depth: int) -> None:
        super().__init__(text)
        self._max_aliases = max_aliases
        self._max_nodes = max_nodes
        self._max_depth = max_depth
        self._aliases = 0
        self._nodes = 0
        self._depth = 0
        self._open_anchors: set[str] = set()

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # PyYAML's parser methods are unannotated even in types-PyYAML: call them through Any.
        parser: Any = self
        if parser.check_event(yaml.AliasEvent):
            event = parser.peek_event()
            self._aliases += 1
            if self._aliases > self._max_aliases:
                raise yaml.MarkedYAMLError(
                    None,
                    None,
                    f"more than {self._max_aliases} aliases (refused: possible alias bomb)",
                    event.start_mark,
                )
            if event.anchor in self._open_anchors:
                raise yaml.MarkedYAMLError(
                    None, None, f"recursive alias *{event.anchor}", event.start_mark
                )
            node = super().compose_node(parent, index)
            return self._refuse_merge_key(node, parent, index, event.start_mark)
        event = parser.peek_event()
        # Stop early on a huge document: the nodes as written are a lower bound of the nodes
        # once expanded, which are counted after construction.
        self._nodes += 1
        if self._nodes > self._max_nodes:
            raise yaml.MarkedYAMLError(
                None, None, f"more than {self._max_nodes} values", event.start_mark
            )
        self._depth += 1
        if self._depth > self._max_depth:
            raise yaml.MarkedYAMLError(
                None, None, f"nested deeper than {self._max_depth} levels", event.start_mark
            )
        anchor: str | None = getattr(event, "anchor", None)
        if anchor is not None:
            self._open_anchors.add(anchor)
        try:
            node = super().compose_node(parent, index)
            return self._refuse_merge_key(node, parent, index, event.start_mark)
        finally:
            self._depth -= 1
            if anchor is not None:
                self._open_anchors.discard(anchor)

    @staticmethod
    def _refuse_merge_key(
        node: yaml.Node | None, parent: yaml.Node | None, index: Any, mark: Any
    ) -> yaml.Node | None:
        """Refuse ``node`` when it is a merge key (the composer passes ``index=None`` for keys).

        ``mark`` is where the key is written: for an alias, the alias rather than its anchor.

        Checked before construction: PyYAML's ``flatten_mapping`` expands merges while it
        constructs, exponentially for merges of merges, before any size limit could apply.
        """
        if (
            isinstance(parent, yaml.MappingNode)
            and index is None
            and node is not None
            and node.tag == _MERGE_TAG
        ):
            raise yaml.MarkedYAMLError(
                None, None, "merge keys (<<) are not supported; write the keys out", mark
            )
        return node


# YAML 1.2 booleans: drop the 1.1 resolver (yes/no/on/off) and resolve only true/false.
_RESOLVERS: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "tTfF":
    _RESOLVERS.setdefault(_first, []).append(
        (_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"))
    )
_JsonConstructor.yaml_implicit_resolvers = _RESOLVERS  # type: ignore[attr-defined]
# JSON has no dates: keep timestamps as written. ``=`` (the YAML "value" tag) is a plain string.
# Without a constructor, SafeLoader refuses a tag ("could not determine a constructor"): the
# tags whose values JSON cannot hold are removed.
_JsonConstructor.yaml_constructors = {
    tag: constructor
    for tag, constructor in yaml.SafeLoader.yaml_constructors.items()
    if tag not in {f"tag:yaml.org,2002:{name}" for name in _NOT_JSON_TAGS}
}
_JsonConstructor.yaml_constructors["tag:yaml.org,2002:timestamp"] = (
    _JsonConstructor.construct_plain_string
)
_JsonConstructor.yaml_constructors["tag:yaml.org,2002:value"] = (
    _JsonConstructor.construct_plain_string
)

#: What LibYAML and PyYAML's Python parser may read differently (found by comparing them on
#: random documents, tests/test_safe_yaml_libyaml.py): tabs, byte-order marks and the Unicode
#: line breaks inside a document, ``?`` keys, tags, directives, anchors and aliases, the
#: reserved indicators, and a block scalar header followed by anything but its indicators.
#: A document holding any of them is read by the Python loader alone.
_LIBYAML_DIFFERS = re.compile(r"[\t\ufeff\x85\u2028\u2029?!%@`&*]|[|>][-+0-9]*[^-+0-9 \n]")

_CParser: Any = getattr(getattr(yaml, "cyaml", None), "CParser", None)  # None without LibYAML


def _load_with_libyaml(text: str, *, max_nodes: int, max_depth: int) -> tuple[bool, Any]:
    """``(True, value)`` when LibYAML's parser reads ``text`` as one plain document — no alias,
    no merge key, no explicit tag, within the limits — and its values construct cleanly;
    ``(False, None)`` otherwise, and then the Python loader decides (and words any error as
    always).

    The C parser is about ten times faster (a tool folder's front matter: 0.2 ms instead of
    2 ms, most of starting 10,000 tool folders). It composes the whole node graph before any of
    the Python loader's checks could run, so the graph is checked while it is turned into
    values (:func:`_plain_values`): an alias shows as a node reached twice, and a document with
    one goes to the Python loader, which counts and refuses aliases while composing. Scalars
    are resolved by the Python loader's resolvers and built by its constructors: the same
    booleans, numbers and strings.
    """
    if _CParser is None or _LIBYAML_DIFFERS.search(text) is not None:
        return False, None
    try:
        # The C parser encodes the text to UTF-8 as it is built: a lone surrogate fails here,
        # and the Python loader words that error like any other.
        loader: Any = _CLoader(text)
    except Exception:  # noqa: BLE001 - any refusal: the Python loader gives the answer
        return False, None
    try:
        node = loader.get_single_node()
        if node is None:
            return True, None
        return True, _plain_values(loader, node, max_nodes=max_nodes, max_depth=max_depth)
    except Exception:  # noqa: BLE001 - any refusal or oddity: the Python loader gives the answer
        return False, None
    finally:
        loader.dispose()


class _NotPlain(Exception):
    """The document needs the Python loader (an alias, a merge key, a duplicate key, a limit)."""


def _plain_values(loader: Any, root: Any, *, max_nodes: int, max_depth: int) -> Any:
    """The values of a composed node graph with no shared node, no merge key, no duplicate key,
    fewer than ``max_nodes`` nodes, less than ``max_depth`` deep. Raises :class:`_NotPlain`
    otherwise. Mappings and sequences are built here (PyYAML's constructor walks them through
    generators, most of its time); scalars by the loader's constructor for their tag."""
    seen: set[int] = set()
    constructors = loader.yaml_constructors

    def build(node: Any, depth: int) -> Any:
        if id(node) in seen or depth >= max_depth or len(seen) >= max_nodes:
            raise _NotPlain
        seen.add(id(node))
        tag = node.tag
        if isinstance(node, yaml.ScalarNode):
            if tag == _STR_TAG:
                return node.value
            construct = constructors.get(tag)
            if construct is None:
                raise _NotPlain
            return construct(loader, node)
        if isinstance(node, yaml.SequenceNode) and tag == _SEQ_TAG:
            return [build(item, depth + 1) for item in node.value]
        if isinstance(node, yaml.MappingNode) and tag == _MAP_TAG:
            mapping: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                    raise _NotPlain
                key = build(key_node, depth + 1)
                if key in mapping:
                    raise _NotPlain
                mapping[key] = build(value_node, depth + 1)
            return mapping
        raise _NotPlain

    return build(root, 1)


if _CParser is not None:

    class _CLoader(_CParser, _JsonConstructor, yaml.resolver.Resolver):  # type: ignore[misc, valid-type, unused-ignore]
        """LibYAML's parser with the Python loader's constructor and resolvers."""

        def __init__(self, text: str) -> None:
            _CParser.__init__(self, text)
            _JsonConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)


def shape_problem(value: Any, *, max_nodes: int, max_depth: int) -> str | None:
    """Why ``value`` is too big once expanded, or ``None`` when it is within the limits.

    Counts every value and mapping key reached, as YAML counts nodes (shared sub-objects each
    time they are reached), iteratively, so neither a deep nor a self-referencing value can
    exhaust the stack.
    """
    count = 1
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
            keys = len(item)
        elif isinstance(item, list):
            children, keys = item, 0
        else:
            continue
        if not children:
            continue
        if depth >= max_depth:
            return f"nested deeper than {max_depth} levels"
        count += keys + len(children)
        if count > max_nodes:
            return (
                f"more than {max_nodes} values once aliases are expanded "
                "(refused: possible alias bomb)"
            )
        stack.extend((child, depth + 1) for child in children)
    return None


def _error_from_yaml(exc: Any, source: str, line_offset: int, text: str) -> YamlError:
    if isinstance(exc, yaml.MarkedYAMLError):
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.problem and exc.context:
            context = exc.context
            at, problem_at = exc.context_mark, exc.problem_mark
            if at is not None and problem_at is not None and at.line != problem_at.line:
                context += f" at line {at.line + 1 + line_offset}"
            # "expected a single document…, but found another document" reads as one sentence.
            if problem.startswith(("but ", "second ")):
                problem = f"{context}, {problem}"
            else:
                problem = f"{problem} ({context})"
        mark = exc.problem_mark or exc.context_mark
        if mark is not None:
            return YamlError(
                source, problem, line=mark.line + 1 + line_offset, column=mark.column + 1
            )
        return YamlError(source, problem)
    position, character = getattr(exc, "position", None), getattr(exc, "character", None)
    if isinstance(position, int) and isinstance(character, int):  # a ReaderError
        line = text.count("\n", 0, position) + 1
        column = position - (text.rfind("\n", 0, position) + 1) + 1
        reason = getattr(exc, "reason", "not allowed")
        return YamlError(
            source,
            f"character U+{character:04X} is not allowed in YAML ({reason})",
            line=line + line_offset,
            column=column,
        )
    return YamlError(source, str(exc))


def load_yaml(
    text: str,
    *,
    source: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_aliases: int = DEFAULT_MAX_ALIASES,
    max_nodes: int = DEFAULT_MAX_NODES,
    max_depth: int = DEFAULT_MAX_DEPTH,
    line_offset: int = 0,
) -> Any:
    """Parse one YAML document from untrusted ``text`` into plain JSON-shaped values.

    ``source`` names the document in errors (a file path). ``line_offset`` is added to reported
    line numbers, for a document embedded in a larger file (front matter starts on line 2).
    Raises :class:`YamlError` for anything refused; an empty document is ``None``.
    """
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise YamlError(source, f"YAML document is larger than {max_bytes} bytes")
    fast, value = _load_with_libyaml(text, max_nodes=max_nodes, max_depth=max_depth)
    if not fast:
        value = _load_with_python(
            text,
            source,
            max_aliases=max_aliases,
            max_nodes=max_nodes,
            max_depth=max_depth,
            line_offset=line_offset,
        )
    problem = shape_problem(value, max_nodes=max_nodes, max_depth=max_depth)
    if problem is not None:
        raise YamlError(source, f"YAML document {problem}")
    return value


def _load_with_python(
    text: str, source: str, *, max_aliases: int, max_nodes: int, max_depth: int, line_offset: int
) -> Any:
    """PyYAML's Python loader, which checks aliases, merge keys and sizes while it composes."""
    loader: Any = None  # Any: PyYAML's dispose() is unannotated
    try:
        loader = _Loader(text, max_aliases=max_aliases, max_nodes=max_nodes, max_depth=max_depth)
        value = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise _error_from_yaml(exc, source, line_offset, text) from None
    except RecursionError:
        raise YamlError(source, "YAML document is nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:
        # e.g. an integer with more digits than Python converts (int_max_str_digits).
        raise YamlError(source, f"invalid value: {exc}") from None
    except KeyError as exc:  # PyYAML's bool constructor on `!!bool maybe`
        raise YamlError(source, f"invalid value: {exc.args[0]!r} is not a boolean") from None
    finally:
        if loader is not None:
            loader.dispose()
    return value


_DOCUMENT_START = re.compile(r"^---(?:[ \t]+(.*))?$")


def split_yaml_documents(text: str) -> list[tuple[int, str]]:
    """Split a multi-document YAML text on its ``---`` lines: ``(first line offset, text)``.

    A document's own content after ``---`` on the marker line stays part of that document.
    """
    documents: list[tuple[int, list[str]]] = [(0, [])]
    for number, line in enumerate(text.splitlines()):
        match = _DOCUMENT_START.match(line.rstrip("\r"))
        if match is None:
            documents[-1][1].append(line)
            continue
        rest = (match.group(1) or "").strip()
        if rest and not rest.startswith("#"):
            documents.append((number, [rest]))
        else:
            documents.append((number + 1, []))
    return [(offset, "\n".join(lines)) for offset, lines in documents]


def load_yaml_documents(text: str, *, source: str) -> list[tuple[int, Any]]:
    """Parse every ``---``-separated document of ``text`` (multi-document resource files):
    ``(first line offset, value)`` for each non-empty document, with the same limits and
    errors as :func:`load_yaml` (line numbers count from the start of the file)."""
    return [
        (offset, load_yaml(document, source=source, line_offset=offset))
        for offset, document in split_yaml_documents(text)
        if document.strip()
    ]
