"""Memory stores on disk: appends, reads, and compaction through the lossless rewrite.

See docs/design.md#memory-stores.

The shell around two pure modules: :mod:`memoryd.stores.entries` (what a store's lines
are) and :mod:`memoryd.stores.compaction` (which entries become summary lines, and the
report). Here are the lock, appends, reads, the rewrite of :mod:`memoryd.commit.rewrite` (the
replaced lines go to ``.memoryd/archive/`` byte for byte) and the events.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from memoryd.commit.rewrite import ArchivePlan, archive_name, rewrite
from memoryd.commit.snapshot import Snapshot, read_snapshot
from memoryd.defaults import (
    DEFAULT_KEEP_BOOKMARKS,
    DEFAULT_MAX_ENTRY_BYTES,
    DEFAULT_MEMORY_THRESHOLD,
)
from memoryd.errors import InputError, MemorydError, UnsafePathError
from memoryd.files.fsutil import append_line, flocked
from memoryd.files.paths import check_workspace, read_in
from memoryd.published.events import emit
from memoryd.published.heartbeat import Heartbeat
from memoryd.stores.compaction import (
    CompactionPlan,
    CompactionReport,
    archived_parts,
    plan_compaction,
    rewritten_head,
)
from memoryd.stores.entries import (
    SACRED,
    STORES,
    Entry,
    TaskStatus,
    check_count,
    check_store,
    new_entry_line,
    newest_entries,
    parse_store,
    task_bookmark,
)
from memoryd.workspace import Workspace

DEFAULT_THRESHOLD = DEFAULT_MEMORY_THRESHOLD


class WriteResult(TypedDict):
    """What :func:`write_entry` prints."""

    written: bool
    entry_count: int
    threshold: int
    compact_needed: bool


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
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
) -> WriteResult:
    """Append ``entry`` to ``store`` under the writers' lock; never rewrites the store.

    ``compact_needed`` is true once the store holds more than ``threshold`` live entries
    (summary lines left by earlier compactions do not count). A
    ``timestamp`` (UTC ISO-8601) is added when the entry has none. A last line left
    without its ``\n`` (a writer that died mid-line) is kept byte for byte as a line of its
    own (reported as malformed) and the entry starts a new line. Raises InputError (and
    writes nothing) for an unknown store, an entry that is not a JSON object, an empty
    entry (no field but the timestamp with a value), a line longer than
    ``max_entry_bytes``, a missing workspace folder or a symlink on the way
    (UnsafePathError); MemorydError (exit 1, the store unchanged) when the write fails,
    e.g. on a full disk.
    """
    check_store(store)
    if not isinstance(entry, dict):
        raise InputError(f"a memory entry must be a JSON object, got {type(entry).__name__}")
    check_count("threshold", threshold)
    if all(value in (None, "", [], {}) for key, value in entry.items() if key != "timestamp"):
        raise InputError("the memory entry is empty: give it at least one field with a value")
    line = new_entry_line(entry, time.time() if now is None else now)
    if len(line) > max_entry_bytes:
        raise InputError(
            f"the memory entry is {len(line)} bytes, more than memory.max_entry_bytes "
            f"({max_entry_bytes}): store where to find the detail (a path, a message id) instead"
        )
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
    ws = Workspace(check_workspace(workspace, write=False))
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


@dataclass(frozen=True, slots=True)
class _StorePlan:
    """One store as read for a compaction: its snapshot (None: no file), entries and plan."""

    name: str
    snapshot: Snapshot | None
    entries: list[Entry]
    plan: CompactionPlan


def _plan_store(ws: Workspace, store: str, threshold: int, keep_bookmarks: int) -> _StorePlan:
    """Read and plan one store, changing nothing; raises what reading it raises."""
    path = _store_path(ws, store)
    try:
        snapshot, data = read_snapshot(path, root=ws.path)
    except UnsafePathError:
        # Only a store that is not there is empty; a file or a symlink where the stores'
        # folder belongs is refused, as a write or a read refuses it.
        folder = path.parent
        if os.path.lexists(path) or (
            os.path.lexists(folder) and (folder.is_symlink() or not folder.is_dir())
        ):
            raise
        return _StorePlan(store, None, [], plan_compaction(store, [], threshold, keep_bookmarks))
    entries = parse_store(data)
    return _StorePlan(
        store, snapshot, entries, plan_compaction(store, entries, threshold, keep_bookmarks)
    )


def _commit_store(ws: Workspace, read: _StorePlan, now: float, drain_seconds: float) -> str | None:
    """Rewrite one planned store; returns its archive, relative to the workspace (None: a
    store that is not there, or nothing archived)."""
    store, plan = read.name, read.plan
    if read.snapshot is None:
        return None
    archive = ArchivePlan(
        folder=ws.archive_dir,
        name=archive_name(f"memory-{store}", datetime.fromtimestamp(now, UTC)),
        parts=archived_parts(plan),
    )
    result = rewrite(
        read.snapshot,
        rewritten_head(read.entries, plan),
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
    return archived


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
    check_count("threshold", threshold)
    check_count("keep_bookmarks", keep_bookmarks)
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
    # Every store is read before any is rewritten: one that cannot be read (a FIFO, a
    # symlink out of the workspace) refuses the command with nothing changed.
    plans = [_plan_store(ws, name, threshold, keep_bookmarks) for name in targets]
    for read in plans:
        name, plan = read.name, read.plan
        before[name] = plan.entries_before
        after[name] = plan.entries_after
        created[name] = plan.summaries_created
        archived = None
        if not dry_run and plan.replacements:
            archived = _commit_store(ws, read, moment, drain_seconds)
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
    "WriteResult",
    "compact",
    "load_store",
    "read_entries",
    "record_task_bookmark",
    "stores_needing_compaction",
    "write_entry",
]
