"""Memory stores: bookmarks, todos, decisions, lessons, and their compaction.

See docs/design.md#memory-stores.

A store is ``memory/<store>.jsonl`` in a workspace. Every complete line is an *entry*: a
live entry (a JSON object), a summary line standing for an entry compacted earlier
(``{"summary": ..., "original_timestamp": ...}``), or a malformed line, which is never
dropped: it stays where it is and is reported. A last fragment without ``\\n`` is a write
in progress: it is neither counted nor touched.

Compaction replaces entries one for one with summary lines, so a store keeps its line
count and its line numbers; the replaced lines go to ``.memoryd/archive/`` byte for byte
through the lossless rewrite of :mod:`memoryd.commit`. ``decisions`` and ``lessons`` are
sacred: never compacted.

The top half is the pure core (which entries become which summary lines); the bottom
half is the shell (the lock, appends, reads, the rewrite, events).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypedDict

from memoryd.commit import ArchivePlan, Part, archive_name, read_snapshot, rewrite
from memoryd.defaults import DEFAULT_KEEP_BOOKMARKS, DEFAULT_MEMORY_THRESHOLD
from memoryd.errors import InputError, MemorydError, UnsafePathError
from memoryd.events import emit, iso_ms
from memoryd.fsutil import append_line, check_workspace, flocked, read_in
from memoryd.heartbeat import Heartbeat
from memoryd.workspace import Workspace

STORES: tuple[str, ...] = ("bookmarks", "todos", "decisions", "lessons")
SACRED: frozenset[str] = frozenset({"decisions", "lessons"})
DEFAULT_THRESHOLD = DEFAULT_MEMORY_THRESHOLD

TIMESTAMP_KEYS = ("timestamp", "created_at", "date", "ts", "time")
BOOKMARK_TASK_KEYS = ("task", "title", "description", "name")
TASK_TITLE_KEYS = ("title", "text", "task", "description", "content", "name")
DONE_STATUSES = frozenset({"completed", "complete", "done", "closed"})
MAX_FIELD_CHARS = 120
"""Longest text taken from an entry into a summary line: summaries stay light."""

_DATE_RE = re.compile(r"\d{4}-\d{2}-\d{2}")

TaskStatus = Literal["completed", "paused"]


class WriteResult(TypedDict):
    """What :func:`write_entry` prints."""

    written: bool
    entry_count: int
    threshold: int
    compact_needed: bool


# --- the pure core ---------------------------------------------------------------------


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


def check_store(store: str) -> None:
    """Raise InputError (exit 2) unless ``store`` is one of :data:`STORES`."""
    if store not in STORES:
        raise InputError(f"unknown memory store {store!r}: expected one of {', '.join(STORES)}")


def is_summary(value: object) -> bool:
    """True when ``value`` is a summary line object (``summary`` and ``original_timestamp``)."""
    return isinstance(value, dict) and "summary" in value and "original_timestamp" in value


def json_line(value: dict[str, Any]) -> bytes:
    """One compact JSON line ended by ``\\n``; lone surrogates fall back to ``\\u`` escapes."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        return json.dumps(value, allow_nan=False, separators=(",", ":")).encode() + b"\n"


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
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def entry_timestamp(entry: dict[str, Any]) -> Any:
    """The entry's own time (the first of :data:`TIMESTAMP_KEYS` present), or None."""
    return next((entry[key] for key in TIMESTAMP_KEYS if key in entry), None)


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


def newest_entries(entries: Sequence[Entry], last: int | None) -> list[dict[str, Any]]:
    """The objects among ``entries`` (malformed lines left out), the ``last`` newest if given."""
    if last is not None:
        _check_count("last", last)
    values = [e.value for e in entries if e.value is not None]
    return values[max(0, len(values) - last) :] if last is not None else values


def _check_count(name: str, value: int) -> None:
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


# --- the shell -------------------------------------------------------------------------


def _store_path(workspace: Workspace, store: str) -> Path:
    return workspace.store(store)


def _read_store(workspace: Workspace, store: str) -> bytes:
    """The bytes of a store, read without following a symlink (UnsafePathError)."""
    return read_in(workspace.path, _store_path(workspace, store))


def _count_entries(workspace: Workspace, store: str) -> tuple[int, int]:
    """Complete lines in ``path``, and how many of them are live entries.

    Stores are small (tens of kB even with their summary lines), so reading one under
    the lock costs well under a millisecond; a sidecar counter would have to be kept in
    step with compaction and with writers that do not lock, for no real gain.
    """
    entries = parse_store(_read_store(workspace, store))
    live = sum(1 for e in entries if e.value is not None and not e.is_summary)
    return len(entries), live


def write_entry(
    workspace: Path,
    store: str,
    entry: dict[str, Any],
    threshold: int = DEFAULT_THRESHOLD,
    *,
    now: float | None = None,
) -> WriteResult:
    """Append ``entry`` to ``store`` under the writers' lock; never rewrites the store.

    ``compact_needed`` is true once the store holds more than ``threshold`` live entries
    (summary lines left by earlier compactions do not count). A
    ``timestamp`` (UTC ISO-8601) is added when the entry has none. A last line left
    without its ``\n`` (a writer that died mid-line) is kept byte for byte as a line of its
    own (reported as malformed) and the entry starts a new line. Raises InputError (and
    writes nothing) for an unknown store, an entry that is not a JSON object, a missing
    workspace folder or a symlink on the way (UnsafePathError); MemorydError (exit 1,
    the store unchanged) when the write fails, e.g. on a full disk.
    """
    check_store(store)
    if not isinstance(entry, dict):
        raise InputError(f"a memory entry must be a JSON object, got {type(entry).__name__}")
    _check_count("threshold", threshold)
    line = new_entry_line(entry, time.time() if now is None else now)
    ws = Workspace(check_workspace(workspace))
    path = _store_path(ws, store)
    try:
        with flocked(ws.lock, root=ws.path):
            append_line(path, line, root=ws.path)
            count, live = _count_entries(ws, store)
    except OSError as exc:
        raise MemorydError(f"{path}: cannot append: {exc.strerror or exc}") from None
    return WriteResult(
        written=True, entry_count=count, threshold=threshold, compact_needed=live > threshold
    )


def load_store(workspace: Path, store: str) -> list[Entry]:
    """Every complete line of ``store`` (empty when the store does not exist yet)."""
    check_store(store)
    ws = Workspace(check_workspace(workspace))
    try:
        data = _read_store(ws, store)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise MemorydError(f"memory/{store}.jsonl: cannot read: {exc.strerror or exc}") from None
    return parse_store(data)


def read_entries(workspace: Path, store: str, last: int | None = None) -> list[dict[str, Any]]:
    """The objects of ``store``, oldest first, summary lines included; ``last`` keeps the newest.

    Malformed lines are left out here (:func:`load_store` has them with line numbers).
    """
    return newest_entries(load_store(workspace, store), last)


def _compact_store(
    ws: Workspace,
    store: str,
    threshold: int,
    keep_bookmarks: int,
    dry_run: bool,
    now: float,
    drain_seconds: float,
) -> tuple[CompactionPlan, str | None]:
    """Plan, and unless ``dry_run`` commit, one store; returns the plan and the archive."""
    path = _store_path(ws, store)
    try:
        snapshot, data = read_snapshot(path, root=ws.path)
    except UnsafePathError:
        if os.path.lexists(path):
            raise
        return plan_compaction(store, [], threshold, keep_bookmarks), None
    entries = parse_store(data)
    plan = plan_compaction(store, entries, threshold, keep_bookmarks)
    if dry_run or not plan.replacements:
        return plan, None
    archive = ArchivePlan(
        folder=ws.archive_dir,
        name=archive_name(f"memory-{store}", datetime.fromtimestamp(now, UTC)),
        parts=archived_parts(plan),
    )
    result = rewrite(
        snapshot,
        rewritten_head(entries, plan),
        lock=ws.lock,
        archive=archive,
        drain_seconds=drain_seconds,
    )
    archived = str(result.archive.relative_to(ws.path)) if result.archive else None
    relative = f"memory/{store}.jsonl"
    emit(
        ws,
        "memory_compacted",
        now=now,
        store=store,
        entries_before=plan.entries_before,
        entries_after=plan.entries_after,
        summaries_created=plan.summaries_created,
        archive=archived,
    )
    for line_no in plan.malformed_lines:
        emit(ws, "malformed_line", now=now, file=relative, line=line_no)
    if result.salvaged_lines:
        emit(ws, "salvaged_lines", now=now, file=relative, lines=result.salvaged_lines)
    return plan, archived


def compact(
    workspace: Path,
    store: str | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    keep_bookmarks: int = DEFAULT_KEEP_BOOKMARKS,
    dry_run: bool = False,
    now: float | None = None,
    *,
    drain_seconds: float = 0.5,
) -> CompactionReport:
    """Compact ``store`` (or every store that is not sacred); see :class:`CompactionReport`.

    A named sacred store is not touched (``reason`` ``sacred_data``). ``dry_run`` reports
    the same and touches no file. Each rewrite
    is atomic and archives the replaced lines; lines appended meanwhile are kept.
    ``drain_seconds`` is how long the replaced file is watched for writers that do not
    lock. Raises InputError for bad arguments, CommitAborted when a store changed under us.
    """
    if store is not None:
        check_store(store)
    _check_count("threshold", threshold)
    _check_count("keep_bookmarks", keep_bookmarks)
    ws = Workspace(check_workspace(workspace))
    if store in SACRED:
        return CompactionReport(False, reason="sacred_data", store=store)
    targets = [store] if store is not None else [s for s in STORES if s not in SACRED]
    moment = time.time() if now is None else now
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    created: dict[str, int] = {}
    archives: dict[str, str] = {}
    malformed: dict[str, list[int]] = {}
    for name in targets:
        plan, archived = _compact_store(
            ws, name, threshold, keep_bookmarks, dry_run, moment, drain_seconds
        )
        before[name] = plan.entries_before
        after[name] = plan.entries_after
        created[name] = plan.summaries_created
        if archived is not None:
            archives[name] = archived
        if plan.malformed_lines:
            malformed[name] = list(plan.malformed_lines)
    compacted = any(created.values())
    return CompactionReport(
        compacted,
        dry_run=dry_run,
        stores_processed=tuple(targets),
        entries_before=before,
        entries_after=after,
        summaries_created=created,
        sacred_skipped=tuple(sorted(SACRED)) if store is None else (),
        archives=archives,
        malformed_lines=malformed,
        reason=None if compacted else "nothing_to_compact",
    )


def stores_needing_compaction(
    workspace: Path, threshold: int, keep_bookmarks: int = DEFAULT_KEEP_BOOKMARKS
) -> list[str]:
    """The stores of ``workspace`` a compaction would change now (for the daemon).

    A store past its threshold whose plan replaces nothing (all summary lines, or only
    open todos) is not listed, so the daemon does not rewrite it in vain. Unreadable
    stores are skipped.
    """
    ws = Workspace(workspace)
    needing = []
    for store in STORES:
        if store in SACRED:
            continue
        try:
            data = _read_store(ws, store)
        except (OSError, MemorydError):
            continue
        plan = plan_compaction(store, parse_store(data), threshold, keep_bookmarks)
        if plan.replacements:
            needing.append(store)
    return needing


def record_task_bookmark(
    workspace: Path,
    heartbeat: Heartbeat,
    status: TaskStatus,
    notes: str | None = None,
    blockers: str | None = None,
    now: float | None = None,
    *,
    threshold: int = DEFAULT_THRESHOLD,
) -> WriteResult:
    """Append a bookmark for the heartbeat's task as it ``completed`` or ``paused``.

    Used by ``memoryd heartbeat W complete`` and ``pause``; ``notes``/``blockers`` default
    to the heartbeat's. ``heartbeat`` is the task as it ended: ``complete_task`` clears the
    current task, so pass the heartbeat from before it, with the result. Only appends:
    setting HEARTBEAT.md is the caller's part.
    """
    if status not in ("completed", "paused"):
        raise InputError(f"a task bookmark status is completed or paused, got {status!r}")
    entry = task_bookmark(heartbeat, status, notes, blockers)
    return write_entry(workspace, "bookmarks", entry, threshold, now=now)


__all__ = [
    "DEFAULT_KEEP_BOOKMARKS",
    "DEFAULT_THRESHOLD",
    "SACRED",
    "STORES",
    "CompactionPlan",
    "CompactionReport",
    "Entry",
    "Replacement",
    "WriteResult",
    "archived_parts",
    "bookmark_summary",
    "check_store",
    "compact",
    "load_store",
    "newest_entries",
    "parse_store",
    "plan_compaction",
    "read_entries",
    "record_task_bookmark",
    "rewritten_head",
    "stores_needing_compaction",
    "summary_entry",
    "todo_summary",
    "write_entry",
]
