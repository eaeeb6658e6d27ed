"""Which memory store entries become which summary lines, and the compaction's report.

See docs/design.md#memory-stores.

Compaction replaces entries one for one with summary lines, so a store keeps its line
count and its line numbers; the replaced lines go to the archive byte for byte.
``decisions`` and ``lessons`` are sacred: never compacted. Everything here is pure: the
plan is a value, and :mod:`memoryd.stores.disk` carries it out through the lossless rewrite.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memoryd.stores.entries import (
    SACRED,
    TIMESTAMP_KEYS,
    Entry,
    check_store,
    entry_timestamp,
    json_line,
)

if TYPE_CHECKING:
    from memoryd.commit.rewrite import Part

BOOKMARK_TASK_KEYS = ("task", "title", "description", "name")
TASK_TITLE_KEYS = ("title", "text", "task", "description", "content", "name")
DONE_STATUSES = frozenset({"completed", "complete", "done", "closed"})
MAX_FIELD_CHARS = 120
"""Longest text taken from an entry into a summary line: summaries stay light."""

_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True, slots=True)
class Replacement:
    """One entry and the summary line that takes its place."""

    entry: Entry
    summary: dict[str, Any]

    @property
    def line(self) -> bytes:
        """The bytes of the summary line."""
        return json_line(self.summary)


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """What compacting one store would do; :attr:`replacements` empty means nothing."""

    store: str
    entries_before: int
    replacements: tuple[Replacement, ...]
    malformed_lines: tuple[int, ...]

    @property
    def entries_after(self) -> int:
        """Entries after the compaction: the same count, each replaced one is a summary line."""
        return self.entries_before

    @property
    def summaries_created(self) -> int:
        """Summary lines the compaction writes."""
        return len(self.replacements)


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What :func:`compact` did (or would do, for a dry run), per store processed."""

    compacted: bool
    dry_run: bool = False
    stores_processed: tuple[str, ...] = ()
    entries_before: dict[str, int] = field(default_factory=dict)
    entries_after: dict[str, int] = field(default_factory=dict)
    summaries_created: dict[str, int] = field(default_factory=dict)
    sacred_skipped: tuple[str, ...] = ()
    archives: dict[str, str] = field(default_factory=dict)
    """The archive of each store that was rewritten, relative to the workspace."""
    malformed_lines: dict[str, list[int]] = field(default_factory=dict)
    """Line numbers of malformed lines per store (kept in place)."""
    reason: str | None = None
    """Why nothing was compacted: ``nothing_to_compact`` or ``sacred_data``."""
    store: str | None = None
    """The sacred store that was named, with ``reason`` ``sacred_data``."""

    @property
    def summarized(self) -> int:
        """Entries replaced by summary lines, over every store."""
        return sum(self.summaries_created.values())

    def as_json(self) -> dict[str, Any]:
        """The report as ``memory compact`` prints it (docs/design.md#memory-stores)."""
        if self.reason == "sacred_data":
            return {"compacted": False, "reason": "sacred_data", "store": self.store}
        report: dict[str, Any] = {
            "compacted": self.compacted,
            "dry_run": self.dry_run,
            "stores_processed": list(self.stores_processed),
            "entries_before": dict(self.entries_before),
            "entries_after": dict(self.entries_after),
            "summaries_created": dict(self.summaries_created),
            "sacred_skipped": list(self.sacred_skipped),
            "archives": dict(self.archives),
        }
        if self.malformed_lines:
            report["malformed_lines"] = dict(self.malformed_lines)
        if self.reason is not None:
            report["reason"] = self.reason
        return report

    def counts(self) -> dict[str, int | bool]:
        """The report's figures for a log line: totals over the stores, no text."""
        return {
            "compacted": self.compacted,
            "dry_run": self.dry_run,
            "stores": len(self.stores_processed),
            "entries_before": sum(self.entries_before.values()),
            "entries_after": sum(self.entries_after.values()),
            "summarized": self.summarized,
            "malformed": sum(len(lines) for lines in self.malformed_lines.values()),
        }

    def describe(self) -> str:
        """One line for HEARTBEAT.md's ``last_result``."""
        if not self.compacted:
            return f"memory stores: nothing compacted ({self.reason or 'nothing_to_compact'})"
        per_store = ", ".join(
            f"{name} {count}" for name, count in self.summaries_created.items() if count
        )
        entries = "entry" if self.summarized == 1 else "entries"
        return f"compacted memory stores: {self.summarized} {entries} summarized ({per_store})"


def summary_date(timestamp: object) -> str:
    """``YYYY-MM-DD`` of an ISO string or of epoch seconds/milliseconds; else ``undated``."""
    if isinstance(timestamp, str) and _DATE_RE.match(timestamp):
        return timestamp[:10]
    if isinstance(timestamp, int | float) and not isinstance(timestamp, bool):
        # Epoch milliseconds (conversation.jsonl's unit) are told apart from seconds by size.
        seconds = timestamp / 1000 if abs(timestamp) >= 1e11 else timestamp
        if math.isfinite(seconds):
            try:
                return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d")
            except (OverflowError, OSError, ValueError):
                pass
    return "undated"


def _text(value: object) -> str | None:
    """A short one-line rendering of a field, or None when it says nothing."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    if len(text) > MAX_FIELD_CHARS:
        text = text[: MAX_FIELD_CHARS - 1] + "…"
    return text or None


def _first_text(entry: dict[str, Any], keys: Sequence[str]) -> str | None:
    return next((t for key in keys if (t := _text(entry.get(key))) is not None), None)


def _fallback_text(entry: dict[str, Any]) -> str:
    rest = {k: v for k, v in entry.items() if k not in TIMESTAMP_KEYS}
    return _text(rest) or "(empty entry)"


def bookmark_status(entry: dict[str, Any]) -> str | None:
    """``status`` when given, else ``paused``/``completed`` from those flags, else None."""
    status = _text(entry.get("status"))
    if status is not None:
        return status
    if entry.get("paused") is True:
        return "paused"
    if entry.get("completed") is True:
        return "completed"
    return None


def bookmark_summary(entry: dict[str, Any]) -> str:
    """``"<date>: Phase <p>, Plan <n>, Task <t> (<status>)"``, from the fields that exist.

    The task is ``task``, else ``title``, ``description`` or ``name``; an entry with none
    of phase, plan and task is summarised by its other fields, shortened.
    """
    parts = []
    if (phase := _text(entry.get("phase"))) is not None:
        parts.append(f"Phase {phase}")
    if (plan := _text(entry.get("plan"))) is not None:
        parts.append(f"Plan {plan}")
    if (task := _first_text(entry, BOOKMARK_TASK_KEYS)) is not None:
        parts.append(f"Task {task}")
    text = f"{summary_date(entry_timestamp(entry))}: {', '.join(parts) or _fallback_text(entry)}"
    status = bookmark_status(entry)
    return f"{text} ({status})" if status is not None else text


def todo_is_completed(entry: dict[str, Any]) -> bool:
    """True for ``completed: true``, ``done: true`` or a status such as completed/done."""
    if entry.get("completed") is True or entry.get("done") is True:
        return True
    status = entry.get("status")
    return isinstance(status, str) and status.strip().lower() in DONE_STATUSES


def todo_summary(entry: dict[str, Any]) -> str:
    """``"<date>: [completed] <title>"``; the title is the first of title/text/task/…."""
    title = _first_text(entry, TASK_TITLE_KEYS) or _fallback_text(entry)
    return f"{summary_date(entry_timestamp(entry))}: [completed] {title}"


def summary_entry(store: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The summary line object that replaces ``entry`` of ``store``."""
    text = bookmark_summary(entry) if store == "bookmarks" else todo_summary(entry)
    return {"summary": text, "original_timestamp": entry_timestamp(entry)}


def plan_compaction(
    store: str, entries: Sequence[Entry], threshold: int, keep_bookmarks: int
) -> CompactionPlan:
    """Which entries of ``store`` become which summary lines (pure, deterministic).

    Nothing happens to a sacred store or to one with at most ``threshold`` live entries
    (summary lines and malformed lines do not count: a compacted store is back under its
    threshold, not re-compacted one entry at a time). Past it, bookmarks keep
    their ``keep_bookmarks`` newest live entries and every older one is replaced; todos keep
    the open ones and every completed one is replaced. Summary and malformed lines stay.
    """
    check_store(store)
    malformed = tuple(e.line_no for e in entries if e.value is None)
    live = [(e, e.value) for e in entries if e.value is not None and not e.is_summary]
    chosen: list[tuple[Entry, dict[str, Any]]] = []
    if store not in SACRED and len(live) > threshold:
        if store == "bookmarks":
            chosen = live[: max(0, len(live) - keep_bookmarks)]
        else:
            chosen = [(e, value) for e, value in live if todo_is_completed(value)]
    replacements = tuple(Replacement(e, summary_entry(store, value)) for e, value in chosen)
    return CompactionPlan(store, len(entries), replacements, malformed)


def _add_range(parts: list[Part], start: int, end: int) -> None:
    last = parts[-1] if parts else None
    if isinstance(last, tuple) and last[1] == start:
        parts[-1] = (last[0], end)
    else:
        parts.append((start, end))


def rewritten_head(entries: Sequence[Entry], plan: CompactionPlan) -> list[Part]:
    """The new content of the snapshotted lines: each replaced line becomes its summary."""
    by_line = {r.entry.line_no: r for r in plan.replacements}
    parts: list[Part] = []
    for entry in entries:
        replacement = by_line.get(entry.line_no)
        if replacement is not None:
            parts.append(replacement.line)
        else:
            _add_range(parts, entry.start, entry.end)
    return parts


def archived_parts(plan: CompactionPlan) -> list[Part]:
    """The byte ranges of the replaced lines, in file order, for the archive."""
    parts: list[Part] = []
    for replacement in plan.replacements:
        _add_range(parts, replacement.entry.start, replacement.entry.end)
    return parts


__all__ = [
    "CompactionPlan",
    "CompactionReport",
    "Replacement",
    "archived_parts",
    "bookmark_status",
    "bookmark_summary",
    "plan_compaction",
    "rewritten_head",
    "summary_date",
    "summary_entry",
    "todo_is_completed",
    "todo_summary",
]
