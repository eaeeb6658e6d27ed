"""What a parser makes of one line of a session file (pure).

A line holds at most a few messages (usually one), may name its session and project, and
for Gemini CLI may rewind the session or restart it from a checkpoint. Text is made safe
for SQLite here: lone surrogates (valid in JSON, refused by UTF-8) are replaced.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memoryd import strict_json

MAX_PARSED_LINE = 32 << 20
"""Longer lines keep their place (expand prints them) but are not parsed for their text."""


@dataclass(frozen=True, slots=True)
class Message:
    """One searchable message of a session file."""

    id: str | None
    """The line's uuid / the item's id; None when the line has none (the indexer names it
    by its place)."""
    role: str | None
    """``user``, ``assistant``, ``tool`` (a tool's output), ``summary`` or ``info``."""
    timestamp: int | None
    """Milliseconds since the epoch."""
    text: str
    item: int = -1
    """Its index in the line's list of messages when the line holds several, else -1."""


@dataclass(frozen=True, slots=True)
class Record:
    """What one line says."""

    messages: tuple[Message, ...] = ()
    session: str | None = None
    project: str | None = None
    rewind_to: str | None = None
    """Gemini CLI: this message and every later one leave the session."""
    reset: bool = False
    """Gemini CLI: the session is replaced by ``messages`` (a checkpoint)."""
    problem: str | None = field(default=None, compare=False)
    """Why the line could not be read (not JSON, too long, ...); it is still counted."""


def load(data: bytes) -> tuple[Any, str | None]:
    """The JSON value of a line and None, or None and why not (never raises).

    Invalid UTF-8 is read with replacement characters rather than dropped: the rest of the
    line is still worth finding.
    """
    if len(data) > MAX_PARSED_LINE:
        return None, "line too long to parse"
    try:
        return strict_json.loads(data), None
    except strict_json.JSONProblem as exc:
        if str(exc) != "not UTF-8":
            return None, str(exc)
    try:
        return strict_json.loads(data.decode("utf-8", "replace")), None
    except strict_json.JSONProblem as exc:
        return None, str(exc)


def safe_text(text: str) -> str:
    """``text`` with lone surrogates replaced, so that SQLite and UTF-8 writers take it."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def string(value: object) -> str | None:
    """``value`` when it is a non-empty string (made safe for SQLite), else None."""
    return safe_text(value) if isinstance(value, str) and value else None


def millis(value: object) -> int | None:
    """An ISO-8601 timestamp (or epoch milliseconds) as milliseconds, None if neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str) or not 10 <= len(value) <= 40:
        return None
    try:
        moment = datetime.fromisoformat(value)  # "Z" too, since Python 3.11
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    try:
        return int(moment.timestamp() * 1000)
    except (OverflowError, OSError, ValueError):
        return None


def values(value: object) -> list[str]:
    """The leaf values of a tool's arguments: strings as they are (a file an agent wrote
    reads as the file), the others as JSON."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for item in value.values() for text in values(item)]
    if isinstance(value, list):
        return [text for item in value for text in values(item)]
    if value is None:
        return []
    return [json.dumps(value)]


def arguments(text: object) -> list[str]:
    """The values of arguments given as a JSON string (Codex's ``arguments``), or the
    string itself when it is not JSON."""
    if not isinstance(text, str):
        return values(text)
    parsed, problem = load(text.encode("utf-8", "replace"))
    return [text] if problem else values(parsed)


def joined(parts: list[str]) -> str:
    """The non-empty ``parts`` one per line, made safe for SQLite."""
    return safe_text("\n".join(part for part in parts if part))
