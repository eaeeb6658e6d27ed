"""What a memory store's lines are: entries, summary lines, malformed lines, new entries.

See docs/design.md#memory-stores.

A store is ``memory/<store>.jsonl`` in a workspace. Every complete line is an *entry*: a
live entry (a JSON object), a summary line standing for an entry compacted earlier
(``{"summary": ..., "original_timestamp": ...}``), or a malformed line, which is never
dropped: it stays where it is and is reported. A last fragment without ``\\n`` is a write
in progress: it is neither counted nor touched.

Pure: values in, values out; reading and appending are in :mod:`memoryd.stores.disk`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.errors import InputError
from memoryd.published.heartbeat import Heartbeat

STORES: tuple[str, ...] = ("bookmarks", "todos", "decisions", "lessons")
SACRED: frozenset[str] = frozenset({"decisions", "lessons"})

TIMESTAMP_KEYS = ("timestamp", "created_at", "date", "ts", "time")

TaskStatus = Literal["completed", "paused"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One complete line of a store: where it is, its bytes, and its object (None: malformed)."""

    line_no: int
    start: int
    raw: bytes
    value: dict[str, Any] | None

    @property
    def end(self) -> int:
        """The byte offset just after this line's ``\\n``."""
        return self.start + len(self.raw)

    @property
    def is_summary(self) -> bool:
        """True for a summary line left by an earlier compaction."""
        return is_summary(self.value)


def check_store(store: str) -> None:
    """Raise InputError (exit 2) unless ``store`` is one of :data:`STORES`."""
    if store not in STORES:
        raise InputError(f"unknown memory store {store!r}: expected one of {', '.join(STORES)}")


def is_summary(value: object) -> bool:
    """True when ``value`` is a summary line object (``summary`` and ``original_timestamp``)."""
    return isinstance(value, dict) and "summary" in value and "original_timestamp" in value


def json_line(value: dict[str, Any]) -> bytes:
    """One compact JSON line ended by ``\\n``; lone surrogates fall back to ``\\u`` escapes."""
    return strict_json.dumps_line_escaping(value)


def parse_store(data: bytes) -> list[Entry]:
    """The complete lines of ``data`` as entries; a trailing fragment is left out."""
    entries: list[Entry] = []
    start = 0
    while (newline := data.find(b"\n", start)) >= 0:
        raw = data[start : newline + 1]
        entries.append(Entry(len(entries) + 1, start, raw, _parse_object(raw)))
        start = newline + 1
    return entries


def _parse_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = strict_json.loads(raw)
    except strict_json.JSONProblem:
        return None
    return value if isinstance(value, dict) else None


def entry_timestamp(entry: dict[str, Any]) -> Any:
    """The entry's own time (the first of :data:`TIMESTAMP_KEYS` present), or None."""
    return next((entry[key] for key in TIMESTAMP_KEYS if key in entry), None)


def newest_entries(entries: Sequence[Entry], last: int | None) -> list[dict[str, Any]]:
    """The objects among ``entries`` (malformed lines left out), the ``last`` newest if given."""
    if last is not None:
        check_count("last", last)
    values = [e.value for e in entries if e.value is not None]
    return values[max(0, len(values) - last) :] if last is not None else values


def check_count(name: str, value: int) -> None:
    """Raise InputError unless ``value`` is a whole number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"{name} must be a whole number >= 0, got {value!r}")


def new_entry_line(entry: dict[str, Any], now: float) -> bytes:
    """The line appended for ``entry``: a ``timestamp`` is added first when it has none.

    Raises InputError for a value JSON cannot hold (NaN, infinity, non-JSON types).
    """
    stamped = entry if "timestamp" in entry else {"timestamp": iso_ms(now), **entry}
    try:
        return json_line(stamped)
    except (TypeError, ValueError) as exc:
        raise InputError(f"the entry cannot be stored as JSON: {exc}") from None


def task_bookmark(
    heartbeat: Heartbeat, status: TaskStatus, notes: str | None, blockers: str | None
) -> dict[str, Any]:
    """The bookmark entry for the heartbeat's task as it completes or pauses (pure)."""
    fields: dict[str, Any] = {
        "task": heartbeat.current_task,
        "status": status,
        "started_at": heartbeat.started_at,
        "result": heartbeat.last_result if status == "completed" else None,
        "notes": notes if notes is not None else heartbeat.notes,
        "blockers": blockers if blockers is not None else heartbeat.blockers,
    }
    return {key: value for key, value in fields.items() if value is not None}


__all__ = [
    "SACRED",
    "STORES",
    "TIMESTAMP_KEYS",
    "Entry",
    "TaskStatus",
    "check_count",
    "check_store",
    "entry_timestamp",
    "is_summary",
    "json_line",
    "new_entry_line",
    "newest_entries",
    "parse_store",
    "task_bookmark",
]
