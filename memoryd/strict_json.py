"""JSON as other languages read it: no NaN or Infinity, no number beyond a double or
Python's digit limit, no nesting deeper than :data:`MAX_DEPTH`, and a reason in words when
a text is refused.

Python's ``json`` accepts ``NaN`` and ``Infinity`` and turns ``1e400`` into infinity;
a line memoryd writes must parse in every JSON parser, so these are refused on the way in
and never written (docs/design.md#cli). It also raises ``RecursionError``, not
``ValueError``, on deeply nested input, at a depth that depends on how deep the caller's
stack already is, and a value nested just below that depth still overflows the stack of
whatever walks it next. This module is the one JSON reader of everything memoryd parses
from disk or the wire: every failure is a :class:`JSONProblem` (a ``ValueError``), and
what it returns can be walked and written again (docs/design.md#one-json-reader).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 200
"""The deepest nesting of arrays and objects taken; deeper is "too deeply nested"."""


class JSONProblem(ValueError):
    """A text that memoryd does not take as JSON; ``str()`` says why in a few words,
    ``detail`` (may be empty) where the parser stopped."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.detail = detail


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JSONProblem(f"number out of range ({text[:20]})")
    return value


def _no_constant(name: str) -> Any:
    raise JSONProblem(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)


def nested_deeper(value: Any, max_depth: int = MAX_DEPTH) -> bool:
    """True when the lists and dicts of ``value`` nest deeper than ``max_depth`` (pure).

    Walked a level at a time, without recursion: only containers are visited, so a long
    text or a JSON document held in a string costs nothing.
    """
    level = [value] if isinstance(value, (list, dict)) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        inner: list[Any] = []
        for container in level:
            items = container.values() if isinstance(container, dict) else container
            inner.extend(item for item in items if isinstance(item, (list, dict)))
        level = inner
    return False


def _decode(text: str) -> Any:
    """``_DECODER.decode(text)``, with the common case (a value that starts the text,
    followed by nothing but JSON whitespace: a line of a conversation) handed straight to
    the decoder's C scanner, without ``decode``'s two regular-expression matches and two
    Python frames; anything else, and every error, goes through ``decode`` itself."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODER.decode(text)  # leading whitespace, or not JSON: its own words
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return _DECODER.decode(text)  # extra data after the value: decode says where
    return value


# The scanner the decoder made for itself (C, with its parse_float hook); typeshed
# does not declare the attribute.
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"


def loads(data: str | bytes) -> Any:
    """Parse ``data``; raise JSONProblem naming the problem: "not UTF-8", "not valid JSON",
    "too deeply nested", "number out of range", "NaN is not JSON".

    Bytes that start with a UTF-8 byte order mark are read without it, as ``json.loads``
    reads bytes: an editor that saves with a BOM puts it before the first line of a file
    (docs/design.md#odd-text)."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        if isinstance(data, bytes) and text.startswith("\ufeff"):
            text = text[1:]
        value = _decode(text)
        # A text with no more brackets than MAX_DEPTH cannot nest deeper (one count at C
        # speed says so for almost every line); the walk is for the others.
        brackets = text.count("[") + text.count("{")
        if brackets > MAX_DEPTH and nested_deeper(value):
            raise JSONProblem("too deeply nested")
        return value
    except JSONProblem:
        raise
    except RecursionError:
        raise JSONProblem("too deeply nested") from None
    except UnicodeDecodeError:
        raise JSONProblem("not UTF-8") from None
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
        raise JSONProblem("not valid JSON", where) from None
    except ValueError:
        # int() refuses more than sys.get_int_max_str_digits() digits.
        raise JSONProblem("number out of range (too many digits)") from None


def dumps(value: Any, *, indent: int | None = None) -> str:
    """``value`` as ASCII JSON text (compact, or indented by ``indent``: for files people
    read); JSONProblem for NaN, Infinity or nesting too deep to write."""
    separators = None if indent is not None else (",", ":")
    try:
        return json.dumps(value, allow_nan=False, indent=indent, separators=separators)
    except RecursionError:
        raise JSONProblem("too deeply nested") from None
    except ValueError:
        raise JSONProblem("NaN and Infinity are not JSON") from None


def dumps_line(value: Any) -> bytes:
    """One compact line of UTF-8 JSON ended by ``\\n``; JSONProblem for NaN, Infinity, text
    that is not valid Unicode (lone surrogates) or nesting too deep to write."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except RecursionError:
        raise JSONProblem("too deeply nested") from None
    except UnicodeEncodeError:
        raise JSONProblem("text is not valid UTF-8 (it holds undecodable bytes)") from None
    except ValueError:
        raise JSONProblem("NaN and Infinity are not JSON") from None


def dumps_line_escaping(value: Any) -> bytes:
    """One compact line of UTF-8 JSON ended by ``\\n`` for a value memoryd made itself;
    should it hold a lone surrogate (text that came from a message), the line falls back
    to ``\\u`` escapes instead of failing (docs/design.md#odd-text)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode() + b"\n"


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: what a channel that carries
    only valid Unicode (UTF-8 JSON, SQLite text) can hold (docs/design.md#odd-text)."""
    return text if text.isascii() else _LONE_SURROGATE.sub("\ufffd", text)


def valid_unicode(value: Any) -> Any:
    """A JSON value with :func:`valid_text` applied to every string, keys too (a copy
    only where something changed is not promised: a new value is built)."""
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        return {valid_text(str(key)): valid_unicode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [valid_unicode(item) for item in value]
    return value
