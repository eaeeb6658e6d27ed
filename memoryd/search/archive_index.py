"""The index of the archive: a cache in ``.memoryd/index.sqlite`` (SQLite FTS5).

The archive is the truth; the index is rebuilt from it whenever it is missing, stale,
corrupt or not ours, and extended one archive file at a time when only new files exist
(docs/design.md#recall). Writers hold ``.memoryd/index.lock`` (never the writers' lock);
readers never wait for them (WAL).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from memoryd import strict_json
from memoryd.errors import MemorydError, UnsafePathError
from memoryd.files.fsutil import flocked
from memoryd.files.paths import open_in, resolve_inside
from memoryd.files.regular import open_for_reading
from memoryd.search import database
from memoryd.search.database import (
    SIDE_FILES,
    connect_reader,
    connect_wal,
    create_file,
    transaction,
)
from memoryd.search.history import (
    ArchiveFile,
    archive_files,
    content_text,
    is_masked,
    is_summary,
    parse_message,
    read_lines,
)
from memoryd.search.lazylog import LazyLog
from memoryd.search.schema import (
    ARCHIVE,
    Stale,
    create_schema,
    insert_messages,
    is_current,
    kept_current,
)
from memoryd.workspace import Workspace

log = LazyLog()

INDEX = "index.sqlite"
BATCH = 2000
TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import TypeVar

    T = TypeVar("T")


def index_path(workspace: Workspace) -> Path:
    """Where the index of ``workspace`` lives; refused when ``.memoryd`` leads outside.

    A symlink at the index's own name is replaced, never followed (see _create_file).
    """
    resolve_inside(workspace.path, workspace.meta.name)
    return workspace.meta / INDEX


def _create_file(path: Path) -> None:
    """Create an empty index file, walked from the workspace without following a symlink
    (docs/design.md#workspace)."""
    create_file(path, lambda new: open_in(path.parents[1], new, database.CREATE_FLAGS, 0o600))


def _missing(conn: sqlite3.Connection, on_disk: Sequence[ArchiveFile]) -> list[ArchiveFile]:
    """The archives not indexed yet; raise Stale when an indexed one changed or went."""
    indexed = dict(conn.execute("SELECT name, size FROM archives").fetchall())
    sizes = {archive.name: archive.size for archive in on_disk}
    if any(sizes.get(name) != size for name, size in indexed.items()):
        raise Stale("stale: an indexed archive changed or disappeared")
    return [archive for archive in on_disk if archive.name not in indexed]


def _rows(
    workspace: Workspace, archive: ArchiveFile
) -> Iterator[tuple[str | None, str | None, int | None, int, int, str]]:
    for number, line in enumerate(read_lines(workspace, archive.source)):
        message = parse_message(line)
        if message is None or (number == 0 and is_summary(message)) or is_masked(message):
            continue
        ident, role, stamp = message.get("id"), message.get("role"), message.get("timestamp")
        # Text that is not valid Unicode is indexed as far as it is (docs/design.md#odd-text).
        yield (
            strict_json.valid_text(ident) if isinstance(ident, str) else None,
            strict_json.valid_text(role) if isinstance(role, str) else None,
            stamp if isinstance(stamp, int) and not isinstance(stamp, bool) else None,
            line.offset,
            len(line.data),
            strict_json.valid_text(content_text(message.get("content"))),
        )


def _index_archive(conn: sqlite3.Connection, workspace: Workspace, archive: ArchiveFile) -> int:
    """Index one archive in one transaction: all of it or, after a crash, none of it."""
    with transaction(conn):
        archive_id = conn.execute(
            "INSERT INTO archives(name, size, messages, passages) VALUES (?, ?, 0, 0)",
            (archive.name, archive.size),
        ).lastrowid
        next_row = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM messages").fetchone()[0]
        count = passages = 0
        rows = _rows(workspace, archive)
        while batch := [row for _, row in zip(range(BATCH), rows, strict=False)]:
            ids = range(next_row + count, next_row + count + len(batch))
            passages += insert_messages(
                conn,
                [(i, *row[:3], archive_id, *row[3:5]) for i, row in zip(ids, batch, strict=True)],
                [(i, row[5], None) for i, row in zip(ids, batch, strict=True)],
            )
            count += len(batch)
        conn.execute(
            "UPDATE archives SET messages = ?, passages = ? WHERE id = ?",
            (count, passages, archive_id),
        )
    return count


def _sync(conn: sqlite3.Connection, workspace: Workspace) -> int:
    """Index every archive not indexed yet; returns the messages added (lock held)."""
    started = time.monotonic()
    missing = _missing(conn, archive_files(workspace))
    added = sum(_index_archive(conn, workspace, archive) for archive in missing)
    if missing:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        log.info(
            "index_updated",
            workspace=str(workspace.path),
            archives=len(missing),
            bytes=sum(archive.size for archive in missing),
            messages=added,
            seconds=round(time.monotonic() - started, 3),
        )
    return added


def _bring_up_to_date(workspace: Workspace, path: Path) -> int:
    """Create, check and extend the index (``index.lock`` held); returns what it holds.

    A missing, foreign, stale or corrupt index is rebuilt from the archive once.
    """

    def extend(conn: sqlite3.Connection) -> int:
        _sync(conn, workspace)
        total: int = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        return total

    def rebuilding(reason: str) -> None:
        log.info("index_rebuilding", workspace=str(workspace.path), reason=reason)

    try:
        return kept_current(
            path,
            ARCHIVE,
            extend,
            create=_create_file,
            connect=lambda path: connect_wal(path, "NORMAL"),
            rebuilding=rebuilding,
            error_too=True,
        )
    except OSError as exc:
        raise MemorydError(f"{exc.filename or path}: {exc.strerror or exc}") from None


def _is_wal(path: Path) -> bool:
    """True when ``path`` is an SQLite file in WAL mode (header bytes 18-19 are 2).

    A symlink at the index or its side files is never followed (see _create_file), and a
    FIFO, socket or device there is never opened: SQLite would wait on it.
    """
    for name in (Path(f"{path}{suffix}") for suffix in ("", *SIDE_FILES)):
        if name.is_symlink() or (name.exists() and not name.is_file()):
            return False
    try:
        fd = open_for_reading(path)
    except (OSError, MemorydError):
        return False
    try:
        header = os.pread(fd, 20, 0)
    finally:
        os.close(fd)
    return header.startswith(b"SQLite format 3\x00") and header[18:20] == b"\x02\x02"


def _indexed_sizes(conn: sqlite3.Connection) -> dict[str, int] | None:
    """The archives ``conn`` indexed, or None when it is not our index."""
    ours = is_current(conn, ARCHIVE)
    return dict(conn.execute("SELECT name, size FROM archives").fetchall()) if ours else None


def _read_only(workspace: Workspace, path: Path, use: Callable[[sqlite3.Connection], T]) -> list[T]:
    """``use`` on what is indexed plus, in memory, what is not indexed yet.

    For a reader while another process holds ``index.lock``: it never takes a write lock
    (WAL readers need none), so it never waits for the indexer nor fails on it
    (docs/design.md#recall). An index it cannot read counts as empty.
    """
    on_disk = archive_files(workspace)
    results: list[T] = []
    indexed: dict[str, int] = {}
    if _is_wal(path):
        try:
            conn = connect_reader(path)
            try:
                conn.execute("BEGIN")  # one snapshot for the check and the query
                found = _indexed_sizes(conn)
                sizes = {archive.name: archive.size for archive in on_disk}
                if found is not None and all(sizes.get(n) == s for n, s in found.items()):
                    indexed = found
                    results.append(use(conn))
                conn.execute("COMMIT")
            finally:
                conn.close()
        except sqlite3.Error as exc:
            log.info("index_unreadable", workspace=str(workspace.path), reason=str(exc)[:200])
            indexed, results = {}, []
    pending = [archive for archive in on_disk if archive.name not in indexed]
    if pending:
        memory = sqlite3.connect(":memory:", isolation_level=None)
        try:
            create_schema(memory, ARCHIVE)
            for archive in pending:
                _index_archive(memory, workspace, archive)
            results.insert(0, use(memory))  # the newest archives first
        finally:
            memory.close()
    return results


def with_index(workspace: Workspace, use: Callable[[sqlite3.Connection], T]) -> list[T]:
    """Run ``use`` on the index of ``workspace``: one result per source, newest first.

    Empty when the workspace has no archive. When no other process is indexing, the index
    is brought up to date first and is the one source; otherwise the reader does not wait:
    it reads what is indexed and indexes the rest in memory (see _read_only).
    """
    if not archive_files(workspace):
        return []
    path = index_path(workspace)
    lock = workspace.meta / "index.lock"
    try:
        with flocked(lock, root=workspace.path, blocking=False) as held:
            if held:
                _bring_up_to_date(workspace, path)
    except UnsafePathError:
        raise
    except (OSError, MemorydError) as exc:
        # A read-only or full filesystem: the index cannot be written, the archive can
        # still be searched, read-only (docs/design.md#recall).
        log.info("index_not_updated", workspace=str(workspace.path), reason=str(exc)[:200])
    try:
        return _read_only(workspace, path, use)
    except OSError as exc:
        raise MemorydError(f"{exc.filename or path}: {exc.strerror or exc}") from None


def update_index(workspace: Path) -> int:
    """Bring the index of ``workspace`` up to date with its archive; returns what it holds.

    The number of messages indexed (0 for a workspace with no archive: nothing created).
    """

    ws = Workspace(Path(workspace))
    if not archive_files(ws):
        return 0
    path = index_path(ws)
    try:
        with flocked(ws.meta / "index.lock", root=ws.path):
            return _bring_up_to_date(ws, path)
    except OSError as exc:
        raise MemorydError(f"{exc.filename or path}: {exc.strerror or exc}") from None


INDEX_RETRY_DELAYS = (0.5, 2.0, 5.0)
"""Seconds before each retry of a failed index update (then the next job or recall does it)."""


def update_index_in_background(workspace: Path) -> threading.Thread:
    """Update the index in a thread, after a commit; failures are logged and retried.

    Never raises: the archive is the truth, and the next job or recall catches up.
    The thread is not a daemon thread, so a worker or a command finishes it before exit.
    """

    def work() -> None:
        for attempt, delay in enumerate((0.0, *INDEX_RETRY_DELAYS), start=1):
            time.sleep(delay)
            try:
                update_index(workspace)
                return
            except Exception as exc:  # the job has committed: nothing may escape from here
                log.warning(
                    "index_update_failed",
                    workspace=str(workspace),
                    attempt=attempt,
                    error=type(exc).__name__,
                    reason=str(exc)[:200],
                )

    thread = threading.Thread(target=work, name="memoryd-index")
    thread.start()
    return thread
