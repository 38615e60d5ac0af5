"""Pinning an MCP server's tools: a changed or new tool waits for the operator (the "rug pull").

An upstream server describes its own tools and may change them at any time — after a reconnect,
a ``tools/list_changed`` notification, or silently between two health checks. A tool the
operator trusted yesterday can come back today with a new ``secret`` parameter, another
description or other annotations. So each tool's *definition* — the parts a model or a policy
acts on: name, title, description, input and output schemas, annotations — is hashed and pinned
when it is accepted (:class:`~toolgate.stores.tool_pins.ToolPinStore`), and every listing is
compared with the pins:

* a tool whose definition matches its pin is registered as usual;
* a **changed** tool (hash differs) or a **new** tool (no pin) is *held*: registered as
  unavailable, with a neutral description and no schema (the model never reads the unreviewed
  text), and a reason naming the server, the tool, what changed and how to accept it;
* a tool whose texts carry hidden characters or instruction-like passages
  (:mod:`toolgate.model.hidden_text`) is held as **flagged** until accepted at that exact
  definition (and stays flagged in listings after that). Every string passed on to MCP clients
  is read, the definition's and those of ``execution``, ``icons`` and ``_meta`` alike.

``execution``, ``icons`` and ``_meta`` (:data:`PASSED_ON_FIELDS`) are not part of the definition
— they are display and protocol data, and approvals stay bound to the definition hash — but they
reach every MCP client, so they are pinned beside it: stored with the accepted definition (under
:data:`PASSED_ON_KEY`), and a listing whose definition matches its pin but whose passed-on
fields do not is held as **changed** like any other change. A pin recorded before these fields
were (an upgrade) has none stored: it adopts the fields listed the first time it is seen again,
rather than holding every tool of every server at once.

A held tool shows MCP clients only toolgate's words (:func:`held_tool`): none of the upstream's
title, annotations, ``execution``, ``icons`` or ``_meta``.

Which listing is trusted without a person (``spec.pin`` of the ``MCPServer``):

``changes`` (the default)
    Trust on first use: the *first* listing ever recorded for the server (by any process or
    replica sharing the state) is accepted as it is — except flagged tools, which are held even
    then. Every later new or changed tool is held.
``all``
    Nothing is trusted without a person: every tool is held until accepted, the first listing
    included.
``off``
    Changes are adopted as the server lists them (the old behaviour); flagged tools are still
    held until accepted.

A server that lists one name twice with different definitions (on one page or across pages), or
two names that toolgate cannot tell apart — the same but for case or Unicode form, or the same
MCP or provider name (:mod:`toolgate.model.names`; only shortened names can meet) — could have
one definition reviewed and another served. :func:`listing_entries` alone decides which entry of
a listing counts for each name, for the review and for the registered tools alike, and every tool
of such a name is held as **ambiguous** ("listed twice by the server"); it cannot be accepted
until the server lists it once. Exact repeats of one definition (a page served twice) count once.

The first listing of a server is recorded (the "first listing" mark) once it has been reviewed,
even when it is empty or all its tools are held: trust on first use ends with that listing.

Accepting (``toolgate mcp-servers accept SERVER [TOOL…] --hash …``, ``POST
/v1/mcp-servers/{server}/accept`` with the reviewed ``hashes``, the button on the tool page of the
web UI) pins the definitions the server lists *now*, refused when one is not the definition the
operator reviewed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from ..._json import canonical_json
from ...model import McpEntry, Tool
from ...model.effects import ToolHints
from ...model.hidden_text import findings
from ...model.names import legacy_shortened_name, to_mcp_name, to_provider_name
from ...stores.tool_pins import SERVER_MARK, Pin
from .spec import PIN_MODES

__all__ = [
    "PASSED_ON_FIELDS",
    "PASSED_ON_KEY",
    "PIN_MODES",
    "Hold",
    "ToolReview",
    "changes_between",
    "definition_hash",
    "definition_of",
    "held_tool",
    "is_first_listing",
    "listing_entries",
    "needs_passed_on",
    "passed_on_of",
    "review_listing",
    "text_findings_of",
]


#: The fields of a listed tool that are pinned.
DEFINITION_FIELDS: Final = (
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
)
_LABELS: Final = {
    "name": "name",
    "title": "title",
    "description": "description",
    "inputSchema": "input schema",
    "outputSchema": "output schema",
    "annotations": "annotations",
}


#: The fields of a listed tool passed on to MCP clients besides its definition: pinned beside it.
PASSED_ON_FIELDS: Final = ("execution", "icons", "_meta")
#: The key under which a pin's stored definition keeps the passed-on fields accepted with it.
PASSED_ON_KEY: Final = "toolgate/passedOn"


def definition_of(listed: Mapping[str, Any]) -> dict[str, Any]:
    """The pinned part of one ``tools/list`` entry."""
    return {key: listed[key] for key in DEFINITION_FIELDS if listed.get(key) is not None}


def passed_on_of(listed: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of one ``tools/list`` entry that are passed on beside its definition
    (:data:`PASSED_ON_FIELDS`), as listed."""
    return {key: listed[key] for key in PASSED_ON_FIELDS if listed.get(key) is not None}


def _stored(definition: Mapping[str, Any], passed_on: Mapping[str, Any]) -> dict[str, Any]:
    """What a pin stores: the definition and, beside it, the passed-on fields."""
    return {**definition, PASSED_ON_KEY: dict(passed_on)}


def _passed_on_changes(pin: Pin, passed_on: Mapping[str, Any]) -> list[str]:
    """Which passed-on fields differ from the pin's (none for a pin that has none stored)."""
    accepted = pin.definition.get(PASSED_ON_KEY)
    if not isinstance(accepted, Mapping):
        return []
    return [
        key.removeprefix("_") for key in PASSED_ON_FIELDS if accepted.get(key) != passed_on.get(key)
    ]


def definition_hash(definition: Mapping[str, Any]) -> str:
    """``sha256:`` and the hex SHA-256 of the definition's canonical JSON."""
    return "sha256:" + hashlib.sha256(canonical_json(definition).encode()).hexdigest()


def text_findings_of(
    definition: Mapping[str, Any], passed_on: Mapping[str, Any] | None = None
) -> list[str]:
    """Hidden characters and instruction-like passages in the definition's texts (its
    description, title, every string of its schemas and annotations) and in every string of
    the ``passed_on`` fields (``execution``, ``icons``, ``_meta``: clients read them too)."""
    texts = {key: definition[key] for key in DEFINITION_FIELDS if key in definition}
    for key in PASSED_ON_FIELDS:
        if passed_on is not None and key in passed_on:
            texts[key] = passed_on[key]
    return findings(texts)


def _properties(schema: Any) -> dict[str, Any]:
    if isinstance(schema, Mapping) and isinstance(schema.get("properties"), Mapping):
        return dict(schema["properties"])
    return {}


def changes_between(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between an accepted definition and a listed one, in words."""
    out: list[str] = []
    for key in DEFINITION_FIELDS:
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        label = _LABELS[key]
        if key in ("inputSchema", "outputSchema"):
            was, now = _properties(before), _properties(after)
            added = sorted(set(now) - set(was))
            removed = sorted(set(was) - set(now))
            changed = sorted(k for k in set(now) & set(was) if now[k] != was[k])
            parts = [
                f"{what} {', '.join(repr(name) for name in names)}"
                for what, names in (
                    ("new parameter" if len(added) == 1 else "new parameters", added),
                    ("removed", removed),
                    ("changed", changed),
                )
                if names
            ]
            out.append(f"{label} ({'; '.join(parts)})" if parts else label)
        elif key == "annotations" and isinstance(before, Mapping) and isinstance(after, Mapping):
            keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            out.append(
                f"{label} ("
                + ", ".join(f"{k}: {before.get(k)!r} → {after.get(k)!r}" for k in keys)
                + ")"
            )
        else:
            out.append(label)
    return out


def _same_name_key(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def listing_entries(
    namespace: str, listing: tuple[Mapping[str, Any], ...]
) -> tuple[dict[str, Mapping[str, Any]], dict[str, str]]:
    """The one entry of ``listing`` that counts for each tool name (the first), and the names
    that are ambiguous, with why: listed twice with different definitions, or not told apart
    from another listed name (the same but for case or Unicode form, or the same provider-safe
    name in ``namespace``). Entries without a string name are left out (they are refused)."""
    entries: dict[str, Mapping[str, Any]] = {}
    twice: set[str] = set()
    for listed in listing:
        name = listed.get("name")
        if not isinstance(name, str):
            continue
        first = entries.get(name)
        if first is None:
            entries[name] = listed
        elif (definition_of(first), passed_on_of(first)) != (
            definition_of(listed),
            passed_on_of(listed),
        ):
            twice.add(name)
    ambiguous = {
        name: "lists it twice, with different definitions (listed twice by the server)"
        for name in twice
    }
    # Names map one-to-one but for shortened (hashed) ones; both surfaces' names are checked.
    keys = (
        _same_name_key,
        lambda name: to_provider_name(f"{namespace}:{name}"),
        lambda name: to_mcp_name(f"{namespace}:{name}"),
    )
    for key in keys:
        groups: dict[str, list[str]] = {}
        for name in entries:
            groups.setdefault(key(name), []).append(name)
        for names in groups.values():
            if len(names) < 2:
                continue
            for name in names:
                others = ", ".join(repr(other) for other in names if other != name)
                ambiguous.setdefault(
                    name,
                    f"also lists {others}, which toolgate cannot tell apart from it (listed "
                    "twice by the server, under names differing only in case, Unicode form or "
                    "a shortened MCP or provider name)",
                )
    # A current name that is another listed tool's older shortened name (``-h`` and a hash):
    # older configurations call that tool by it, and would reach this one.
    legacy: dict[str, str] = {}
    for name in entries:
        old = legacy_shortened_name(f"{namespace}:{name}")
        if old is not None:
            legacy[old] = name
    for name in entries:
        tool_id = f"{namespace}:{name}"
        for current in dict.fromkeys((to_mcp_name(tool_id), to_provider_name(tool_id))):
            other = legacy.get(current)
            if other is None or other == name:
                continue
            ambiguous.setdefault(
                name,
                f"also lists {other!r}, whose older shortened name {current!r} is this tool's "
                "name (listed twice by the server, under one name old and new)",
            )
            ambiguous.setdefault(
                other,
                f"also lists {name!r}, whose name {current!r} is this tool's older shortened "
                "name (listed twice by the server, under one name old and new)",
            )
    return entries, ambiguous


@dataclass(frozen=True, slots=True)
class Hold:
    """Why a listed tool is held."""

    kind: Literal["new", "changed", "flagged", "ambiguous"]
    changes: tuple[str, ...] = ()
    """What changed since the accepted definition (``changed``), or why the name is ambiguous
    (``ambiguous``)."""


@dataclass(frozen=True, slots=True)
class ToolReview:
    """One tool an MCP server lists, as the pins see it."""

    server: str
    name: str
    """The tool's name on the server."""
    definition: Mapping[str, Any]
    definition_hash: str
    findings: tuple[str, ...]
    """Hidden characters and instruction-like passages in its texts."""
    hold: Hold | None
    """Why it is held (``None``: it is accepted)."""
    pin: Pin | None
    """Its accepted definition, if any."""
    passed_on: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Its passed-on fields as listed (:func:`passed_on_of`), pinned beside the definition."""

    @property
    def stored_definition(self) -> dict[str, Any]:
        """What accepting it stores: the definition with the passed-on fields beside it."""
        return _stored(self.definition, self.passed_on)

    @property
    def status(self) -> str:
        """``accepted``, ``held: new``, ``held: changed``, ``held: flagged`` or
        ``held: ambiguous``."""
        return "accepted" if self.hold is None else f"held: {self.hold.kind}"

    def to_dict(self) -> dict[str, Any]:
        """As JSON (the CLI's ``--json`` and the HTTP API)."""
        return {
            "server": self.server,
            "tool": self.name,
            "status": self.status,
            "definition_hash": self.definition_hash,
            "accepted_hash": None if self.pin is None else self.pin.definition_hash,
            "accepted_by": None if self.pin is None else self.pin.accepted_by,
            "accepted_at": None if self.pin is None else self.pin.accepted_at,
            "changes": [] if self.hold is None else list(self.hold.changes),
            "findings": list(self.findings),
            "definition": dict(self.definition),
            "passed_on": dict(self.passed_on),
        }

    def reason(self, tool_id: str) -> str:
        """The unavailable reason of a held tool: what is wrong and how to accept it."""
        assert self.hold is not None
        if self.hold.kind == "ambiguous":
            return (
                f"{tool_id} is held: the MCP server {self.server} {self.hold.changes[0]}; "
                "which definition it would run cannot be known, so it cannot be called or "
                "accepted until the server lists the name once"
            )
        accept = (
            f"toolgate mcp-servers accept {self.server} {self.name} --hash {self.definition_hash}"
        )
        how = (
            f"an operator reviews it ('toolgate mcp-servers show {self.server}') and accepts "
            f"this definition: '{accept}', POST /v1/mcp-servers/{self.server}/accept with "
            f"hashes {{{self.name!r}: {self.definition_hash!r}}}, or the Accept button on the "
            "tool's page in the web UI"
        )
        flagged = "; its texts carry " + "; ".join(self.findings) if self.findings else ""
        if self.hold.kind == "changed":
            what = ", ".join(self.hold.changes) or "its definition"
            head = (
                f"{tool_id} is held: the MCP server {self.server} changed its {what} since it "
                "was accepted"
            )
        elif self.hold.kind == "new":
            head = (
                f"{tool_id} is held: the MCP server {self.server} lists it, but it was never "
                "accepted"
            )
        else:
            head = f"{tool_id} is held: the MCP server {self.server} describes it with hidden text"
        return f"{head}{flagged}. It cannot be called until {how}"


def review_listing(
    server: str,
    listing: tuple[Mapping[str, Any], ...],
    pins: Mapping[str, Pin],
    mode: str,
    namespace: str | None = None,
) -> tuple[dict[str, ToolReview], dict[str, tuple[str, Mapping[str, Any]]]]:
    """Each listed tool's review, and — for a server never listed before under ``changes`` —
    the definitions its first listing accepts (to be recorded; empty otherwise: see
    :func:`is_first_listing` for whether to record the mark). ``namespace``: the server's
    (default: its name), for the names it cannot tell apart (:func:`listing_entries`)."""
    first = is_first_listing(pins, mode)
    reviews: dict[str, ToolReview] = {}
    seeded: dict[str, tuple[str, Mapping[str, Any]]] = {}
    entries, ambiguous = listing_entries(server if namespace is None else namespace, listing)
    for name, listed in entries.items():
        definition = definition_of(listed)
        passed_on = passed_on_of(listed)
        digest = definition_hash(definition)
        found = tuple(text_findings_of(definition, passed_on))
        pin = pins.get(name)
        hold: Hold | None = None
        if name in ambiguous:
            # Every copy's texts are checked: a person looks at what the model might read.
            copies = [
                text_findings_of(definition_of(other), passed_on_of(other))
                for other in listing
                if other.get("name") == name and other is not listed
            ]
            found = tuple(dict.fromkeys([*found, *(f for copy in copies for f in copy)]))
            hold = Hold("ambiguous", (ambiguous[name],))
        elif (
            pin is not None
            and pin.definition_hash == digest
            and not _passed_on_changes(pin, passed_on)
        ):
            hold = None
        elif found:
            hold = Hold("flagged")
        elif mode == "off":
            hold = None
        elif first:
            seeded[name] = (digest, _stored(definition, passed_on))
        elif pin is None:
            hold = Hold("new")
        else:
            hold = Hold("changed", tuple(_changes(pin, definition, passed_on)))
        if hold is not None and hold.kind == "flagged" and pin is not None:
            hold = Hold("flagged", tuple(_changes(pin, definition, passed_on)))
        reviews[name] = ToolReview(server, name, definition, digest, found, hold, pin, passed_on)
    return reviews, seeded


def _changes(pin: Pin, definition: Mapping[str, Any], passed_on: Mapping[str, Any]) -> list[str]:
    return [*changes_between(pin.definition, definition), *_passed_on_changes(pin, passed_on)]


def needs_passed_on(review: ToolReview) -> bool:
    """Whether ``review`` is of an accepted tool whose pin was recorded before passed-on fields
    were pinned: the caller stores them now (:meth:`ToolPinStore.amend
    <toolgate.stores.tool_pins.ToolPinStore.amend>`), so a later change of them is noticed."""
    return (
        review.hold is None
        and review.pin is not None
        and review.pin.definition_hash == review.definition_hash
        and not isinstance(review.pin.definition.get(PASSED_ON_KEY), Mapping)
    )


def is_first_listing(pins: Mapping[str, Pin], mode: str) -> bool:
    """Whether a listing reviewed against ``pins`` is the server's first under ``mode``
    (``changes`` and no first-listing mark yet): its review must record the mark, whatever it
    seeds — an empty or all-held first listing included."""
    return mode == "changes" and SERVER_MARK not in pins


def held_tool(tool: Tool, server: str, review: ToolReview | None) -> Tool:
    """``tool`` as a held tool is registered: no unreviewed text or schema reaches a model
    (``review`` is ``None`` when the pins could not be read)."""
    what = {
        "new": "added this tool",
        "changed": "changed this tool",
        "flagged": "describes this tool with hidden text",
        "ambiguous": "lists this tool's name twice",
    }
    why = (
        "lists this tool, but its accepted definition cannot be checked now"
        if review is None or review.hold is None
        else what[review.hold.kind]
    )
    entry = tool.entry
    if isinstance(entry, McpEntry):
        # The upstream's title, annotations, execution, icons and _meta were not reviewed
        # either: a held tool shows MCP clients nothing but toolgate's words.
        entry = dataclasses.replace(entry, metadata=None)
    return dataclasses.replace(
        tool,
        entry=entry,
        description=(
            f"Held by toolgate: the MCP server {server} {why}; an operator must review and "
            "accept it before it can be used."
        ),
        title=None,
        input_schema={"type": "object"},
        output_schema=None,
        hints=ToolHints(),
    )
