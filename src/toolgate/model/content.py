"""Typed content blocks: a tool result made of MCP content (text, image, audio, resource links,
embedded resources), carried through the pipeline as the same blocks.

An upstream MCP server may answer ``tools/call`` with blocks other than plain text. They are kept
as typed values here rather than flattened to JSON, so that every surface can give each block
its natural form (the same block over MCP, an image part for Anthropic or the OpenAI Responses
API, a short note where only text fits) and the pipeline can still shape them (mask secrets in
text, spill large text, never read base64 as text).

Each block keeps what the upstream sent beside its main fields: ``annotations`` and ``_meta``
(``meta`` here) exactly as given, and any other key in ``extra``, so :meth:`ContentResult.to_mcp`
gives back the blocks as they came. A block of a type this module does not know is kept whole
as :class:`OtherContent` (passed through, shown to a model as a one-line note).

Pure data: no I/O. Values inside (annotations, ``_meta``, extra keys) are deeply frozen.
"""

from __future__ import annotations

import binascii
import re
from base64 import b64decode
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeAlias

from .._json import freeze, thaw

__all__ = [
    "MAX_BLOCKS",
    "MAX_BLOCK_DATA",
    "MAX_MIME_TYPE",
    "AudioContent",
    "ContentBlock",
    "ContentError",
    "ContentResult",
    "EmbeddedResource",
    "ImageContent",
    "OtherContent",
    "ResourceLink",
    "TextContent",
    "check_base64",
    "content_fields",
    "content_from_fields",
    "decoded_size",
    "is_plain_text",
    "parse_blocks",
    "record_form",
]

#: Characters of base64 one block may carry (``data`` of an image or audio block, ``blob`` of an
#: embedded resource): 32 MiB of text, 24 MiB of bytes. Larger is refused naming the block.
MAX_BLOCK_DATA = 32 * 1024 * 1024
#: Blocks one result may hold.
MAX_BLOCKS = 1_000
#: Characters a ``mimeType`` may have (RFC 6838 allows 127 on each side of the slash).
MAX_MIME_TYPE = 255
# ``type/subtype`` with RFC 6838 name characters, then optional ``; parameters``.
_MIME = re.compile(
    r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    r"(?: *;[\x20-\x7e]*)?"
)


class ContentError(ValueError):
    """A content block that cannot be carried; the message names the block (``content[2]``)."""


def decoded_size(data: str) -> int:
    """Bytes that the base64 text ``data`` decodes to (computed, not decoded)."""
    stripped = data.strip()
    padding = len(stripped) - len(stripped.rstrip("="))
    return max(0, len(stripped) * 3 // 4 - padding)


def _size_text(size: int) -> str:
    return f"{size:,} bytes"


def _frozen(value: Any) -> Mapping[str, Any] | None:
    return None if value is None else freeze(value)


def _common(block: Any) -> dict[str, Any]:
    """``annotations`` and ``_meta`` of a block, as the upstream sent them."""
    data: dict[str, Any] = {}
    if block.annotations is not None:
        data["annotations"] = thaw(block.annotations)
    if block.meta is not None:
        data["_meta"] = thaw(block.meta)
    return data


@dataclass(frozen=True, slots=True)
class TextContent:
    """A text block."""

    type: ClassVar[str] = "text"
    text: str
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_mcp(self) -> dict[str, Any]:
        """The block as MCP defines it."""
        return {"type": "text", "text": self.text, **_common(self), **thaw(self.extra)}

    def note(self) -> str:
        """What a model reads for this block: its text."""
        return self.text

    def record(self) -> dict[str, Any]:
        """The block as the audit log keeps it (text blocks whole)."""
        return self.to_mcp()

    def map_text(self, fn: Callable[[str], str]) -> TextContent:
        """The block with ``fn`` applied to its text."""
        return replace(self, text=fn(self.text))


@dataclass(frozen=True, slots=True)
class _Binary:
    """Shared by image and audio blocks: base64 ``data`` and its ``mimeType``."""

    type: ClassVar[str] = "binary"
    data: str
    mime_type: str
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Bytes of the decoded data."""
        return decoded_size(self.data)

    def to_mcp(self) -> dict[str, Any]:
        """The block as MCP defines it."""
        return {
            "type": self.type,
            "data": self.data,
            "mimeType": self.mime_type,
            **_common(self),
            **thaw(self.extra),
        }

    def note(self) -> str:
        """A one-line note for a model (never the base64)."""
        return f"[{self.type}: {self.mime_type}, {_size_text(self.size)}]"

    def record(self) -> dict[str, Any]:
        """The block as the audit log keeps it: the data replaced by its size."""
        data = self.to_mcp()
        del data["data"]
        data["size"] = self.size
        return data

    def map_text(self, fn: Callable[[str], str]) -> Any:
        """The block with ``fn`` applied to its ``mimeType`` (shown to a model in its note); the
        base64 data is not text and is left as it is."""
        return replace(self, mime_type=fn(self.mime_type))


@dataclass(frozen=True, slots=True)
class ImageContent(_Binary):
    """An image block (base64 ``data``, ``mimeType``)."""

    type: ClassVar[str] = "image"


@dataclass(frozen=True, slots=True)
class AudioContent(_Binary):
    """An audio block (base64 ``data``, ``mimeType``)."""

    type: ClassVar[str] = "audio"


@dataclass(frozen=True, slots=True)
class ResourceLink:
    """A link to a resource the client may read (``resource_link``)."""

    type: ClassVar[str] = "resource_link"
    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Any other key the upstream sent (``icons``…), kept as given."""

    def to_mcp(self) -> dict[str, Any]:
        """The block as MCP defines it."""
        data: dict[str, Any] = {"type": "resource_link", "uri": self.uri, "name": self.name}
        for key, value in (
            ("title", self.title),
            ("description", self.description),
            ("mimeType", self.mime_type),
            ("size", self.size),
        ):
            if value is not None:
                data[key] = value
        return {**data, **_common(self), **thaw(self.extra)}

    def note(self) -> str:
        """A line a model can read and act on: name, URI, type and description."""
        label = self.title or self.name
        kind = f" ({self.mime_type})" if self.mime_type else ""
        about = f": {self.description}" if self.description else ""
        return f"[resource link: {label} <{self.uri}>{kind}{about}]"

    def record(self) -> dict[str, Any]:
        """The block as the audit log keeps it (whole)."""
        return self.to_mcp()

    def map_text(self, fn: Callable[[str], str]) -> ResourceLink:
        """The link with ``fn`` applied to its strings (a URI may hold a credential)."""
        return replace(
            self,
            uri=fn(self.uri),
            name=fn(self.name),
            title=None if self.title is None else fn(self.title),
            description=None if self.description is None else fn(self.description),
            mime_type=None if self.mime_type is None else fn(self.mime_type),
        )


@dataclass(frozen=True, slots=True)
class EmbeddedResource:
    """A resource embedded in the result (``resource``): its ``text`` or base64 ``blob``."""

    type: ClassVar[str] = "resource"
    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None
    resource_meta: Mapping[str, Any] | None = None
    """The ``_meta`` of the resource contents (the block's own is ``meta``)."""
    resource_extra: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] | None = None
    meta: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """Bytes of the blob, or characters of the text."""
        return decoded_size(self.blob) if self.blob is not None else len(self.text or "")

    def resource(self) -> dict[str, Any]:
        """The ``resource`` object (``TextResourceContents`` or ``BlobResourceContents``)."""
        data: dict[str, Any] = {"uri": self.uri}
        if self.mime_type is not None:
            data["mimeType"] = self.mime_type
        if self.blob is not None:
            data["blob"] = self.blob
        else:
            data["text"] = self.text or ""
        if self.resource_meta is not None:
            data["_meta"] = thaw(self.resource_meta)
        return {**data, **thaw(self.resource_extra)}

    def to_mcp(self) -> dict[str, Any]:
        """The block as MCP defines it."""
        return {
            "type": "resource",
            "resource": self.resource(),
            **_common(self),
            **thaw(self.extra),
        }

    def note(self) -> str:
        """A text resource: its URI and text; a blob: a one-line note (never the base64)."""
        kind = f" ({self.mime_type})" if self.mime_type else ""
        if self.blob is not None:
            return f"[resource <{self.uri}>{kind}: {_size_text(self.size)} of binary data]"
        return f"[resource <{self.uri}>{kind}]\n{self.text or ''}"

    def record(self) -> dict[str, Any]:
        """The block as the audit log keeps it: a blob replaced by its size."""
        data = self.to_mcp()
        if self.blob is not None:
            del data["resource"]["blob"]
            data["resource"]["size"] = self.size
        return data

    def map_text(self, fn: Callable[[str], str]) -> EmbeddedResource:
        """The resource with ``fn`` applied to its URI, ``mimeType`` and text."""
        return replace(
            self,
            uri=fn(self.uri),
            mime_type=None if self.mime_type is None else fn(self.mime_type),
            text=None if self.text is None else fn(self.text),
        )


@dataclass(frozen=True, slots=True)
class OtherContent:
    """A block of a type this version does not know, kept exactly as the upstream sent it."""

    raw: Mapping[str, Any]

    @property
    def type(self) -> str:
        """The block's ``type`` as sent."""
        kind = self.raw.get("type")
        return kind if isinstance(kind, str) else "unknown"

    def to_mcp(self) -> dict[str, Any]:
        """The block as the upstream sent it."""
        return dict(thaw(self.raw))

    def note(self) -> str:
        """A one-line note: the block is passed on to MCP clients, not shown to a model."""
        return f"[{self.type} content, not shown as text]"

    def record(self) -> dict[str, Any]:
        """Only the type: an unknown block may hold anything, of any size."""
        return {"type": self.type, "note": "kept as sent; not recorded"}

    def map_text(self, fn: Callable[[str], str]) -> OtherContent:
        """The block with ``fn`` applied to every string in it: nothing says which are text,
        so none is left out (masking fails closed)."""
        return OtherContent(freeze(_map_strings(self.raw, fn)))


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {str(k): _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(v, fn) for v in value]
    return value


def _map_block(block: Any, fn: Callable[[str], str]) -> Any:
    """``block.map_text(fn)``, and ``fn`` over the strings of its annotations, ``_meta`` and
    extra keys too (they are the upstream's free-form data)."""
    mapped = block.map_text(fn)
    if isinstance(mapped, OtherContent):
        return mapped
    changes: dict[str, Any] = {"extra": freeze(_map_strings(mapped.extra, fn))}
    for name in ("annotations", "meta"):
        value = getattr(mapped, name)
        if value is not None:
            changes[name] = freeze(_map_strings(value, fn))
    if isinstance(mapped, EmbeddedResource):
        changes["resource_extra"] = freeze(_map_strings(mapped.resource_extra, fn))
        if mapped.resource_meta is not None:
            changes["resource_meta"] = freeze(_map_strings(mapped.resource_meta, fn))
    return replace(mapped, **changes)


ContentBlock: TypeAlias = (
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource | OtherContent
)

_COMMON_KEYS = frozenset({"type", "annotations", "_meta"})


def _where(index: int, kind: Any) -> str:
    return f"content[{index}] ({kind})" if isinstance(kind, str) else f"content[{index}]"


def _str(block: Mapping[str, Any], key: str, where: str, *, optional: bool = False) -> Any:
    value = block.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ContentError(f"{where}: '{key}' must be a string, got {type(value).__name__}")
    return value


def _mapping(block: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any] | None:
    value = block.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ContentError(f"{where}: '{key}' must be an object, got {type(value).__name__}")
    return _frozen(value)


def _mime(value: str | None, where: str) -> Any:
    """A ``mimeType`` as given when it is a plausible ``type/subtype[; parameters]``: anything
    else (free text, a 5 MB string) is refused rather than shown to a model in a note."""
    if value is None:
        return None
    if len(value) > MAX_MIME_TYPE or not _MIME.fullmatch(value):
        shown = value[:40] + ("…" if len(value) > 40 else "")
        raise ContentError(
            f"{where}: 'mimeType' must be a media type such as image/png "
            f"(at most {MAX_MIME_TYPE} characters), got {shown!r}"
        )
    return value


def _base64(value: str, key: str, where: str) -> str:
    if len(value) > MAX_BLOCK_DATA:
        raise ContentError(
            f"{where}: '{key}' holds {len(value):,} characters of base64, over the "
            f"{MAX_BLOCK_DATA:,} a block may carry"
        )
    return value


def _extra(block: Mapping[str, Any], known: frozenset[str]) -> Mapping[str, Any]:
    extra: Mapping[str, Any] = freeze({k: v for k, v in block.items() if k not in known})
    return extra


_LINK_KEYS = _COMMON_KEYS | {"uri", "name", "title", "description", "mimeType", "size"}
_RESOURCE_KEYS = frozenset({"uri", "mimeType", "text", "blob", "_meta"})


def _parse_block(index: int, block: Any) -> ContentBlock:
    if not isinstance(block, Mapping):
        raise ContentError(f"content[{index}] must be an object, got {type(block).__name__}")
    kind = block.get("type")
    where = _where(index, kind)
    annotations = _mapping(block, "annotations", where)
    meta = _mapping(block, "_meta", where)
    if kind == "text":
        return TextContent(
            _str(block, "text", where),
            annotations,
            meta,
            _extra(block, _COMMON_KEYS | {"text"}),
        )
    if kind in ("image", "audio"):
        cls = ImageContent if kind == "image" else AudioContent
        return cls(
            _base64(_str(block, "data", where), "data", where),
            _mime(_str(block, "mimeType", where), where),
            annotations,
            meta,
            _extra(block, _COMMON_KEYS | {"data", "mimeType"}),
        )
    if kind == "resource_link":
        size = block.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int)):
            raise ContentError(f"{where}: 'size' must be an integer")
        return ResourceLink(
            _str(block, "uri", where),
            _str(block, "name", where),
            _str(block, "title", where, optional=True),
            _str(block, "description", where, optional=True),
            _mime(_str(block, "mimeType", where, optional=True), where),
            size,
            annotations,
            meta,
            _extra(block, _LINK_KEYS),
        )
    if kind == "resource":
        resource = block.get("resource")
        if not isinstance(resource, Mapping):
            raise ContentError(f"{where}: 'resource' must be an object")
        inner = f"{where}.resource"
        blob = _str(resource, "blob", inner, optional=True)
        text = None if blob is not None else _str(resource, "text", inner)
        return EmbeddedResource(
            _str(resource, "uri", inner),
            _mime(_str(resource, "mimeType", inner, optional=True), inner),
            text,
            None if blob is None else _base64(blob, "blob", inner),
            _mapping(resource, "_meta", inner),
            _extra(resource, _RESOURCE_KEYS),
            annotations,
            meta,
            _extra(block, _COMMON_KEYS | {"resource"}),
        )
    return OtherContent(freeze(dict(block)))


def parse_blocks(blocks: Sequence[Any]) -> tuple[ContentBlock, ...]:
    """MCP content blocks (JSON form) as typed blocks; raises :class:`ContentError` naming the
    first block that is malformed or too large."""
    if len(blocks) > MAX_BLOCKS:
        raise ContentError(f"content holds {len(blocks):,} blocks, over the {MAX_BLOCKS:,} allowed")
    return tuple(_parse_block(index, block) for index, block in enumerate(blocks))


def is_plain_text(blocks: Sequence[Any]) -> bool:
    """True when every block (JSON form) is a text block with nothing but its text: such a
    result is carried as a plain string."""
    return all(
        isinstance(block, Mapping)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        and set(block) <= {"type", "text"}
        for block in blocks
    )


def check_base64(block: ContentBlock) -> bytes:
    """The decoded bytes of a binary block; raises :class:`ContentError` when the data is not
    base64."""
    data = block.blob if isinstance(block, EmbeddedResource) else getattr(block, "data", None)
    if not isinstance(data, str):
        raise ContentError(f"a {block.type} block holds no binary data")
    try:
        return b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ContentError(f"{block.type} block: data is not base64 ({exc})") from None


@dataclass(frozen=True, slots=True)
class ContentResult:
    """A tool result made of content blocks, and the upstream's ``structuredContent`` if any.

    ``text`` is what a model reads where only text fits: text blocks' text, and a short note per
    other block (never base64). ``structured`` is the JSON result the output schema checks.
    """

    blocks: tuple[ContentBlock, ...]
    structured: Mapping[str, Any] | None = None

    @classmethod
    def from_mcp(
        cls, blocks: Sequence[Any], structured: Mapping[str, Any] | None = None
    ) -> ContentResult:
        """Parse MCP blocks (JSON form); raises :class:`ContentError` naming a bad block."""
        return cls(parse_blocks(blocks), None if structured is None else freeze(structured))

    @property
    def text(self) -> str:
        """The model-facing text: each block's text or note, separated by blank lines."""
        return "\n\n".join(block.note() for block in self.blocks)

    def to_mcp(self) -> list[dict[str, Any]]:
        """The blocks as MCP defines them (annotations, ``_meta`` and extra keys kept)."""
        return [block.to_mcp() for block in self.blocks]

    def to_json(self) -> dict[str, Any]:
        """``{"content": [blocks], "structuredContent"?}``: the whole result, base64 included
        (for a replay or an HTTP caller; the audit log keeps :meth:`record` instead)."""
        data: dict[str, Any] = {"content": self.to_mcp()}
        if self.structured is not None:
            data["structuredContent"] = thaw(self.structured)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ContentResult:
        """The inverse of :meth:`to_json`."""
        content = data.get("content")
        structured = data.get("structuredContent")
        return cls.from_mcp(
            content if isinstance(content, list) else [],
            structured if isinstance(structured, Mapping) else None,
        )

    def record(self) -> dict[str, Any]:
        """The result as the audit log keeps it: text whole, binary data as its size and type."""
        data: dict[str, Any] = {"content": [block.record() for block in self.blocks]}
        if self.structured is not None:
            data["structuredContent"] = thaw(self.structured)
        return data

    def map_text(self, fn: Callable[[str], str]) -> ContentResult:
        """The result with ``fn`` applied to the strings inside its blocks (text, URIs,
        annotations, ``_meta``), never to base64 data of a known binary block."""
        return replace(self, blocks=tuple(_map_block(block, fn) for block in self.blocks))

    def replace_blocks(self, blocks: Sequence[ContentBlock]) -> ContentResult:
        """The same result with other blocks."""
        return replace(self, blocks=tuple(blocks))


def record_form(value: Any) -> Any:
    """A result as the audit log keeps it: a :class:`ContentResult` as :meth:`~ContentResult.record`
    (no base64), anything else unchanged."""
    return value.record() if isinstance(value, ContentResult) else value


def content_fields(content: Any) -> dict[str, Any]:
    """The JSON fields that carry an outcome's content (the HTTP API, the CLI's ``--json``,
    stored outcomes): ``{"content": value}`` for a JSON result; for a
    :class:`ContentResult`, ``content`` is its ``structuredContent`` when it has one, else its
    text, and ``blocks`` holds the blocks (base64 included)."""
    if not isinstance(content, ContentResult):
        return {"content": content}
    structured = content.structured
    return {
        "content": content.text if structured is None else thaw(structured),
        "blocks": content.to_mcp(),
    }


def content_from_fields(stored: Mapping[str, Any]) -> Any:
    """The content that :func:`content_fields` stored (a replayed or collected outcome)."""
    content = stored.get("content")
    blocks = stored.get("blocks")
    if not isinstance(blocks, list):
        return content
    try:
        return ContentResult.from_mcp(blocks, content if isinstance(content, Mapping) else None)
    except ContentError:
        return content  # stored by another version: the text stays readable
