"""Redaction: masking values at declared paths, and secret values wherever they appear.

Two mechanisms, applied together to everything the audit log records:

* **Paths** (``ObservabilitySpec.redact_fields``) such as ``args.body``,
  ``args.customer_email`` or ``result.items.*.token``. Segments are separated by dots; ``*``
  matches any key of an object or any item of a list, a number matches that list index. The
  value at a matching path — a string, a number, a whole object or list — is replaced by
  :data:`MARKER`. The strings removed that way are collected (see ``removed``) so that the caller
  can also scrub them from free text (an error message or a stderr tail that echoes the value).
* **Values** (secrets the tool received, and the collected strings): every occurrence inside any
  string — object keys included — is replaced by :data:`MARKER`. Only values of at least
  :data:`MIN_VALUE_LENGTH` characters are used, so that short, common strings (``"a"``, ``"ok"``,
  ``"yes"``) do not blank out unrelated text.

* **Pieces of secrets**: a secret is also masked when only part of it is echoed — every run of
  at least :data:`MIN_FRAGMENT_LENGTH` characters that is a piece of a secret — and when it is
  echoed encoded (hex, URL-encoded, base64 at any alignment, so ``Basic`` credentials too). A
  secret that is a URL gives pieces only from its credentials (user info, query values), not from
  its scheme or host, which are no secret.
* **Credentials in URLs** (:func:`redact_url_credentials`): the user info of ``scheme://user:pass@``
  and the values of credential parameters (``?api_key=``, ``&token=``, ``#access_token=``,
  ``sig``, ``password``, … — see :data:`CREDENTIAL_PARAMETERS`) inside any string, whatever the
  field is called. What is *recorded* (audit, telemetry, logs, kept outcomes) always gets this.

:func:`record_masker` builds what every recorded store applies; :func:`caller_masker` what a
caller receives (the gateway's secrets, but not a string equal to one the caller itself sent).

Every rule is linear in the length of the text: a hostile string (a megabyte of letters before an
``@``) or a great many values to mask (a redacted list) cannot make masking stall the gateway.

Every function returns a new value and never mutates its input (or, when nothing is masked,
returns its input itself).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any, Final
from urllib.parse import quote, quote_plus

__all__ = [
    "CREDENTIAL_PARAMETERS",
    "MARKER",
    "MAX_USERINFO_LENGTH",
    "MIN_EDGE_LENGTH",
    "MIN_FRAGMENT_LENGTH",
    "MIN_URL_PART_LENGTH",
    "MIN_VALUE_LENGTH",
    "Masker",
    "caller_masker",
    "is_credential_name",
    "record_masker",
    "redact",
    "redact_edges",
    "redact_text",
    "redact_url_credentials",
    "redact_values",
    "text_pattern",
    "url_credentials",
]

#: What a redacted value is replaced with.
MARKER: Final = "[REDACTED]"

#: Shorter values are never searched for inside text.
MIN_VALUE_LENGTH: Final = 4

#: The shortest piece of a secret that is masked wherever it appears (a longer secret echoed in
#: part: its first 12 characters, say). Shorter pieces are too common to mask.
MIN_FRAGMENT_LENGTH: Final = 10

# Pieces are found by probing every _STRIDE-th position of a run of the secrets' characters for a
# _PROBE-character piece, then checking the neighbourhood exactly: a piece of MIN_FRAGMENT_LENGTH
# characters always holds a probe at a probed position, and only a quarter of the positions of a
# text are looked at.
_STRIDE: Final = 4
_PROBE: Final = MIN_FRAGMENT_LENGTH - _STRIDE + 1

#: The credential parts of a URL-shaped secret (``postgres://app:Pa55word@db``: ``app`` and
#: ``Pa55word``) of at least this many characters are masked whole wherever they appear, as the
#: secret itself is: shorter than :data:`MIN_FRAGMENT_LENGTH`, they would not be masked as pieces.
MIN_URL_PART_LENGTH: Final = 6

#: The longest user info (``user:password``) looked for after ``//``. Past it a URL's user info is
#: left as it is: the bound keeps the scan linear.
MAX_USERINFO_LENGTH: Final = 4096

#: Whole values longer than this are found with ``str.find`` one by one; shorter ones with one
#: pattern built as a tree of their characters (each position of a text costs at most their
#: length, however many values there are).
_TREE_LENGTH: Final = 64

#: Query (or fragment) parameters whose value is a credential, wherever the URL appears. A name
#: that ends with one of :data:`_CREDENTIAL_SUFFIXES` (``x-amz-signature``, ``private_token``,
#: ``apiKey``) is one too.
CREDENTIAL_PARAMETERS: Final = frozenset(
    {
        "password",
        "passphrase",
        "passwd",
        "pwd",
        "pass",
        "secret",
        "token",
        "auth",
        "authorization",
        "key",
        "sig",
        "signature",
        "credential",
        "credentials",
        "code",
        "jwt",
        "session",
        "sessionid",
        "x-amz-credential",
        "x-amz-security-token",
    }
)
_CREDENTIAL_SUFFIXES: Final = (
    "password",
    "passphrase",
    "passwd",
    "secret",
    "token",
    "key",
    "sig",
    "signature",
    "credential",
)

# Every pattern below is linear in the text: a scan starts only at a delimiter (``//``, ``?``,
# ``&``…) and stops at the next one, so no character is scanned from two starts.
#
# User info follows a run of two or more slashes or backslashes: ``//`` (``scheme://``, a
# scheme-relative ``//host``), its JSON escape ``\/\/``, and the backslash forms a browser reads
# as ``//`` for http(s), ws(s) and ftp (``https:/\``, ``https:\\``, ``https:\/``, and their JSON
# escapes); or its percent-encoding ``%2F%2F`` (``%5C`` for a backslash: a URL nested in a
# parameter). It ends at the last ``@`` (``%40``) before the host. The user info holds no slash
# or backslash (``%2F``, ``%5C``), so no character is scanned from two anchors.
_AUTHORITY = re.compile(r"[/\\]{2,}|(?:%2[Ff]|%5[Cc]){2,}")
_USERINFO_PLAIN = re.compile(rf"[^\s/?#\"'<>\\]{{1,{MAX_USERINFO_LENGTH}}}")
_USERINFO_ENCODED = re.compile(
    rf"(?:[^\s/?#\"'<>\\%@]|%(?!2[Ff]|3[Ff]|23|40|5[Cc])[0-9A-Fa-f]{{2}})"
    rf"{{1,{MAX_USERINFO_LENGTH}}}"
    r"(?=%40|@)"
)
# A parameter's name follows ``?``, ``&``, ``#``, ``;``, the JSON escape ``\u0026`` of ``&``, or a
# percent-encoded ``?``, ``&`` or ``#`` (a URL nested in a parameter's value); it ends at ``=`` or
# ``%3D``. Only the delimiter and the name are consumed: a parameter inside another's value is
# looked at too.
_PARAMETER_NAME = re.compile(
    r"(?:[?&#;]|\\u0026|%3[Ff]|%26|%23)((?:[^=&#;?\s\"'<>\\%]|%5[BbDd])+)(=|%3[Dd])"
)
# A value runs to ``&``, ``#``, whitespace, a quote or ``<``/``>`` (a ``;`` or ``?`` inside it is
# part of it), or ``\u0026``; an encoded one also to ``%26`` and ``%23``.
_VALUE_PLAIN = re.compile(r"(?:[^&#\s\"'<>\\]|\\(?![uU]0026|\"))*")
_VALUE_ENCODED = re.compile(r"(?:[^&#\s\"'<>\\%]|%(?!26|23)|\\(?![uU]0026|\"))*")
_URL_SHAPED = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]{0,31}://")


def _is_credential_parameter(name: str) -> bool:
    # ``api_key[]``, ``api_key[0]``, ``api_key%5B%5D``: the name before the brackets.
    lowered = name.lower().replace("%5b", "[").split("[", 1)[0]
    return lowered in CREDENTIAL_PARAMETERS or lowered.endswith(_CREDENTIAL_SUFFIXES)


def _userinfo_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for anchor in _AUTHORITY.finditer(text):
        start = anchor.end()
        if anchor.group(0)[0] == "%":
            found = _USERINFO_ENCODED.match(text, start)
            if found is not None:
                spans.append((start, found.end()))
            continue
        run = _USERINFO_PLAIN.match(text, start)
        if run is None:
            continue
        at = text.rfind("@", start, run.end())
        if at > start:
            spans.append((start, at))
    return spans


def _parameter_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    covered = 0
    for name in _PARAMETER_NAME.finditer(text):
        if name.start(1) < covered or not _is_credential_parameter(name.group(1)):
            continue  # inside a value already masked, or no credential
        value = (_VALUE_PLAIN if name.group(2) == "=" else _VALUE_ENCODED).match(text, name.end())
        if value is not None and value.end() > name.end():
            spans.append((name.end(), value.end()))
            covered = value.end()
    return spans


def _url_spans(text: str) -> list[tuple[int, int]]:
    spans = _userinfo_spans(text) if "@" in text or "%40" in text else []
    if "=" in text or "%3D" in text or "%3d" in text:
        spans.extend(_parameter_spans(text))
    return spans


def _replace(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span (merged where they overlap) replaced by :data:`MARKER`."""
    spans.sort()
    out: list[str] = []
    position = 0
    for start, stop in spans:
        if start < position:  # overlaps the span just masked
            if stop > position:
                position = stop
            continue
        out.append(text[position:start])
        out.append(MARKER)
        position = stop
    out.append(text[position:])
    return "".join(out)


def redact_url_credentials(text: str) -> str:
    """``text`` with the credentials of every URL in it masked: the user info
    (``https://[REDACTED]@host``, also ``//[REDACTED]@host``, JSON-escaped ``https:\\/\\/``,
    backslashes a browser reads as slashes ``https:/\\`` and percent-encoded ``https%3A%2F%2F``)
    and the value of each credential parameter (``?api_key=[REDACTED]``, also after ``\\u0026``
    and inside a percent-encoded URL). Returns ``text`` itself when there is none. Linear in the
    length of ``text``."""
    spans = _url_spans(text)
    return _replace(text, spans) if spans else text


#: Parts of an environment variable's name that say it holds a credential.
_CREDENTIAL_NAME_PARTS: Final = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "PASSPHRASE",
        "PASS",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "AUTH",
        "PRIVATE",
        "SIG",
        "SIGNATURE",
        "COOKIE",
        "SESSION",
        "JWT",
        "DSN",
    }
)


def is_credential_name(name: str) -> bool:
    """True when an environment variable's name says it holds a credential: one of its parts
    (split at ``_``, ``-`` and ``.``) is ``KEY``, ``TOKEN``, ``SECRET``, ``PASSWORD``, ``AUTH``,
    ``PRIVATE``, ``COOKIE``, ``SESSION``, ``DSN``… or it ends with ``KEY``, ``TOKEN``,
    ``SECRET`` or ``PASSWORD`` (``GITHUBTOKEN``)."""
    upper = name.upper()
    if upper.endswith(("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")):
        return True
    return not _CREDENTIAL_NAME_PARTS.isdisjoint(re.split(r"[_\-.]+", upper))


def url_credentials(text: str) -> list[str]:
    """The credentials inside ``text`` when it is a URL: the user info's parts and the values of
    credential parameters (``[]`` for anything else)."""
    return _url_credentials(text) if _URL_SHAPED.match(text) else []


def _url_credentials(url: str) -> list[str]:
    """The credential parts of a URL-shaped secret (what its pieces are taken from)."""
    parts: list[str] = []
    for start, stop in _userinfo_spans(url):
        parts.extend(p for p in url[start:stop].split(":") if p)
    if "=" in url or "%3D" in url or "%3d" in url:
        parts.extend(url[start:stop] for start, stop in _parameter_spans(url))
    return parts


def _encoded(secret: str) -> set[str]:
    """How a tool may echo ``secret`` encoded: hex, URL-encoded, and base64 — at each of the three
    alignments, so also inside ``base64("user:" + secret)`` (the middle that does not depend on
    the bytes around it)."""
    raw = secret.encode("utf-8", "surrogatepass")
    forms = {raw.hex(), raw.hex().upper(), quote(secret, safe=""), quote_plus(secret)}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw).decode("ascii")
        start = 4 if shift else 0
        end = len(encoded) if (shift + len(raw)) % 3 == 0 else len(encoded) - 4
        middle = encoded[start:end]
        forms.add(middle)
        forms.add(middle.replace("+", "-").replace("/", "_"))
    forms.add(base64.b64encode(raw).decode("ascii").rstrip("="))
    forms.add(base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="))
    forms.discard(secret)
    return {f for f in forms if len(f) >= MIN_FRAGMENT_LENGTH}


class Masker:
    """Masks a set of values, pieces of secrets and (for records) URL credentials in text.

    Built by :func:`text_pattern`, :func:`record_masker` or :func:`caller_masker`; immutable and
    cached, so one is shared by every call of a tool.
    """

    __slots__ = (
        "_kept",
        "_long",
        "_probes",
        "_runs",
        "_urls",
        "_urls_only",
        "_whole",
        "_windows",
        "values",
    )

    def __init__(
        self,
        whole: Collection[str],
        pieces: Collection[str],
        *,
        urls: bool,
        kept: Collection[str] = (),
    ) -> None:
        self.values: tuple[str, ...] = tuple(sorted(whole, key=lambda v: (-len(v), v)))
        """The values masked whole (longest first)."""
        short = [v for v in self.values if len(v) <= _TREE_LENGTH]
        self._whole = re.compile(_tree(short)) if short else None
        self._long = tuple(v for v in self.values if len(v) > _TREE_LENGTH)
        self._kept = frozenset(kept)
        windows: set[str] = set()
        probes: set[str] = set()
        characters: set[str] = set()
        n = MIN_FRAGMENT_LENGTH
        for piece in pieces:
            characters.update(piece)
            for i in range(len(piece) - n + 1):
                window = piece[i : i + n]
                windows.add(window)
                for j in range(n - _PROBE + 1):
                    probes.add(window[j : j + _PROBE])
        self._windows = frozenset(windows)
        self._probes = frozenset(probes)
        self._runs = (
            re.compile("[" + "".join(re.escape(c) for c in sorted(characters)) + f"]{{{n},}}")
            if windows
            else None
        )
        self._urls = urls
        self._urls_only = urls and not self._long and self._whole is None and self._runs is None

    def __bool__(self) -> bool:
        return bool(self.values) or self._runs is not None or self._urls

    def sub(self, text: str) -> str:
        """``text`` masked; ``text`` itself when nothing in it is."""
        if self._urls_only and "@" not in text and "=" not in text and "%" not in text:
            return text  # the usual record string: no value to look for, no URL credential
        if text in self._kept:
            return text
        masked = text
        if self._long:
            masked = self._find_long(masked)
        if self._whole is not None:
            masked = self._whole.sub(MARKER, masked)
        if self._runs is not None:
            masked = self._runs.sub(self._pieces, masked)
        if self._urls:
            masked = redact_url_credentials(masked)
        return text if masked == text else masked

    def number(self, value: float) -> Any:
        """``value``, or :data:`MARKER` when its decimal text holds a masked value (a number
        holds no URL). A number too long to write out is masked whenever values are."""
        if not self.values and self._runs is None:
            return value
        try:
            text = str(value)
        except ValueError:  # more digits than Python writes out
            return MARKER
        return MARKER if self.touches(text) else value

    def touches(self, text: str) -> bool:
        """True when :meth:`sub` would mask something in ``text``."""
        return self.sub(text) is not text

    def _find_long(self, text: str) -> str:
        """``text`` with the long values masked: one ``str.find`` pass per value (linear in
        ``text`` whatever the value holds)."""
        spans: list[tuple[int, int]] = []
        for value in self._long:
            position = text.find(value)
            while position >= 0:
                spans.append((position, position + len(value)))
                position = text.find(value, position + len(value))
        return _replace(text, spans) if spans else text

    def _pieces(self, match: re.Match[str]) -> str:
        run = match.group(0)
        n = MIN_FRAGMENT_LENGTH
        windows, probes = self._windows, self._probes
        spans: list[tuple[int, int]] = []
        last = len(run) - n
        for i in range(0, len(run) - _PROBE + 1, _STRIDE):
            if run[i : i + _PROBE] not in probes:
                continue
            for j in range(max(0, i - (n - _PROBE)), min(i, last) + 1):
                if run[j : j + n] in windows:
                    spans.append((j, j + n))
        if not spans:
            return run
        spans.sort()
        merged: list[list[int]] = []
        for start, stop in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], stop)
            else:
                merged.append([start, stop])
        out: list[str] = []
        position = 0
        for start, stop in merged:
            out.append(run[position:start])
            out.append(MARKER)
            position = stop
        out.append(run[position:])
        return "".join(out)

    def without(self, known: Iterable[str]) -> Masker:
        """This masker less what a caller sent, taken whole: a value equal to one of the
        ``known`` strings is no longer masked, and a string equal to one of them is left as it
        is (a tool echoing an argument back). Pieces of secrets stay masked whatever the caller
        sent: dropping those found in its text would let it confirm a guessed piece by the
        change in what comes back."""
        kept = {t for t in known if t}
        if not kept:
            return self
        whole = [v for v in self.values if v not in kept]
        return Masker(whole, self._windows, urls=self._urls, kept=kept | self._kept)


def _tree(values: Iterable[str]) -> str:
    """One pattern matching any of ``values`` (the longest one at a position), written as a tree
    of their characters: at each character a position costs one branch, not one per value."""
    root: dict[str, Any] = {}
    for value in values:
        node = root
        for character in value:
            node = node.setdefault(character, {})
        node[""] = {}
    return _branches(root)


def _branches(node: dict[str, Any]) -> str:
    singles: list[str] = []
    branches: list[str] = []
    for character, child in sorted(node.items()):
        if not character:
            continue
        below = _branches(child)
        if below:
            branches.append(re.escape(character) + below)
        else:
            singles.append(re.escape(character))
    if len(singles) == 1:
        branches.append(singles[0])
    elif singles:
        branches.append("[" + "".join(singles) + "]")
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if "" in node else body


@lru_cache(maxsize=512)
def _masker(whole: tuple[str, ...], secrets: tuple[str, ...], urls: bool) -> Masker:
    values = set(whole)
    pieces: set[str] = set()
    for secret in secrets:
        values.add(secret)
        encoded = _encoded(secret)
        values.update(encoded)
        if _URL_SHAPED.match(secret):
            # Its scheme and host are no secret: only its credentials are, whole (a short
            # password echoed alone) and in pieces.
            parts = _url_credentials(secret)
            values.update(p for p in parts if len(p) >= MIN_URL_PART_LENGTH)
            pieces.update(p for p in parts if len(p) >= MIN_FRAGMENT_LENGTH)
        elif len(secret) > MIN_FRAGMENT_LENGTH:
            pieces.add(secret)
            pieces.update(encoded)
    return Masker(values, pieces, urls=urls)


def _usable(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({v for v in values if isinstance(v, str) and len(v) >= MIN_VALUE_LENGTH}))


def text_pattern(values: Iterable[str]) -> Masker | None:
    """A masker of ``values`` (those of at least :data:`MIN_VALUE_LENGTH` characters) whole,
    or ``None`` when there is none. Cached."""
    if not values:  # the common case: nothing to mask
        return None
    usable = _usable(values)
    return _masker(usable, (), False) if usable else None


def record_masker(secrets: Iterable[str] = (), values: Iterable[str] = ()) -> Masker:
    """What every recorded store applies: ``secrets`` masked whole, encoded and in pieces,
    ``values`` (strings masked by path) whole, and the credentials of every URL. Cached."""
    return _masker(_usable(values), _usable(secrets), True)


def caller_masker(secrets: Iterable[str], known: Iterable[str]) -> Masker | None:
    """What a caller receives masked: the secrets the gateway gave the tool (whole, encoded and
    in pieces) — less those in ``known``, the strings the caller sent. ``None`` when nothing is
    left to mask."""
    usable = _usable(secrets)
    if not usable:
        return None
    masker = _masker((), usable, False).without(known)
    return masker if masker else None


def redact_text(text: str, values: Iterable[str] | Masker | None) -> str:
    """``text`` with every occurrence of any of ``values`` replaced by :data:`MARKER`.

    ``values`` may be a :class:`Masker`; plain values shorter than :data:`MIN_VALUE_LENGTH` are
    ignored.
    """
    masker = values if isinstance(values, Masker) or values is None else text_pattern(values)
    if masker is None or not text:
        return text
    return masker.sub(text)


def redact_values(value: Any, values: Iterable[str] | Masker | None) -> Any:
    """The JSON-shaped ``value`` with every occurrence of ``values`` masked inside every string
    (object keys included). A number whose decimal text contains a value is replaced by
    :data:`MARKER` as a whole. ``value`` itself when nothing is masked (treat both as read-only);
    a masked value is a new copy."""
    masker = values if isinstance(values, Masker) or values is None else text_pattern(values)
    if masker is None:
        return _copy(value)
    return _scrub(value, masker)


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is int or kind is str or kind is float or value is None or kind is bool:
        return value  # the common leaves first: the ABC checks below cost more than the copy
    if isinstance(value, Mapping):
        return {str(k): _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


def _scrub(value: Any, masker: Masker) -> Any:
    kind = type(value)
    if kind is str:
        return masker.sub(value)
    if value is None or kind is bool:
        return value
    if kind is int or kind is float:
        return masker.number(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        changed = kind is not dict
        for key, item in value.items():
            text_key = key if type(key) is str else str(key)
            new_key = masker.sub(text_key)
            if new_key in out:  # two keys masked to the same text: keep both
                n = 2
                while f"{new_key} ({n})" in out:
                    n += 1
                new_key = f"{new_key} ({n})"
            new_item = _scrub(item, masker)
            if new_key is not key or new_item is not item:
                changed = True
            out[new_key] = new_item
        return out if changed else value
    if isinstance(value, (list, tuple)):
        items = [_scrub(v, masker) for v in value]
        if kind is list and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items
    if isinstance(value, str):  # a str subclass
        return masker.sub(str(value))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return masker.number(value)
    return value


@lru_cache(maxsize=1024)
def _split(paths: tuple[str, ...], prefix: str) -> tuple[tuple[str, ...], ...]:
    """The paths under ``prefix`` as segment tuples (``()`` means the whole value). Cached: a
    tool's paths are the same on every call."""
    head = tuple(prefix.split(".")) if prefix else ()
    out: list[tuple[str, ...]] = []
    for path in paths:
        parts = tuple(p for p in path.strip().split(".") if p != "")
        if not parts:
            continue
        if parts[: len(head)] == head:
            out.append(parts[len(head) :])
    return tuple(out)


def _matches(segment: str, key: str | int) -> bool:
    return segment == "*" or segment == str(key)


def _collect(value: Any, removed: set[str]) -> None:
    """Every string (and number's text) inside a value being masked."""
    if isinstance(value, str):
        if len(value) >= MIN_VALUE_LENGTH:
            removed.add(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect(item, removed)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect(item, removed)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        text = str(value)
        if len(text) >= MIN_VALUE_LENGTH:
            removed.add(text)


def _mask(value: Any, paths: tuple[tuple[str, ...], ...], removed: set[str]) -> Any:
    if () in paths:  # a path ending here: mask the whole value
        _collect(value, removed)
        return MARKER
    if type(value) is dict or isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            below = tuple(p[1:] for p in paths if _matches(p[0], str(key)))
            out[str(key)] = _mask(item, below, removed) if below else _copy(item)
        return out
    if isinstance(value, (list, tuple)):
        items: list[Any] = []
        for index, item in enumerate(value):
            below = tuple(p[1:] for p in paths if _matches(p[0], index))
            items.append(_mask(item, below, removed) if below else _copy(item))
        return items
    return value  # a path that goes deeper than the value: nothing there to mask


def redact(
    value: Any,
    paths: Iterable[str],
    *,
    prefix: str = "",
    secrets: Collection[str] = (),
    removed: set[str] | None = None,
) -> Any:
    """A redacted copy of the JSON-shaped ``value``.

    ``paths`` are full paths such as ``args.body``; only those starting with ``prefix``
    (``"args"``, ``"result"``) apply, relative to ``value``. A path equal to ``prefix`` masks the
    whole value. Then every occurrence of any of ``secrets`` inside any string (keys included)
    is masked. When ``removed`` is given, the strings masked by path (at least
    :data:`MIN_VALUE_LENGTH` long) are added to it, for scrubbing other text with
    :func:`redact_text`.
    """
    relative = _split(paths if isinstance(paths, tuple) else tuple(paths), prefix)
    sink: set[str] = set() if removed is None else removed
    masked = _mask(value, relative, sink) if relative else _copy(value)
    if not secrets:
        return masked
    return _scrub(masked, _masker((), _usable(secrets), False))


#: The shortest piece of a secret masked at the cut edge of a text (see :func:`redact_edges`).
MIN_EDGE_LENGTH: Final = 6


def redact_edges(text: str, values: Iterable[str]) -> str:
    """``text`` with a piece of any of ``values`` cut by its edges masked.

    A bounded tail (the last KiB of a script's stderr) can start in the middle of a secret and a
    bounded head can end in one; whole-value matching misses those pieces. A suffix of a value
    that starts the text, or a prefix that ends it, of at least :data:`MIN_EDGE_LENGTH`
    characters, is replaced by :data:`MARKER`.
    """
    for value in values:
        if len(value) < MIN_VALUE_LENGTH:
            continue
        for size in range(len(value) - 1, MIN_EDGE_LENGTH - 1, -1):
            if text.startswith(value[-size:]):
                text = MARKER + text[size:]
                break
        for size in range(len(value) - 1, MIN_EDGE_LENGTH - 1, -1):
            if text.endswith(value[:size]):
                text = text[:-size] + MARKER
                break
    return text
