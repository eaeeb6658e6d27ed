"""Recall: search what memoryd summarized, and expand a message back to its original lines.

The archive is the truth; ``.memoryd/index.sqlite`` (SQLite FTS5) only caches it and is
rebuilt from it whenever it is missing, stale, corrupt or not ours, incrementally when
only new archive files exist (docs/design.md#recall). Writers of the index hold
``.memoryd/index.lock`` (never the writers' lock); readers never wait for them (WAL).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from memoryd.discovery import find_workspaces
from memoryd.errors import InputError, MemorydError, UsageError
from memoryd.fsutil import NEW_FILE_FLAGS, flocked, resolve_inside
from memoryd.history import (
    ArchiveFile,
    archive_files,
    content_text,
    context,
    is_summary,
    parse_message,
    read_lines,
)
from memoryd.recall_query import ROLES, check_limit, to_match
from memoryd.workspace import CONVERSATION, Workspace

log = structlog.get_logger()

INDEX = "index.sqlite"
APPLICATION_ID = 0x6D656D72
"""``PRAGMA application_id`` of memoryd's index ("memr"); anything else is not ours."""
SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0
BATCH = 2000
SNIPPET_TOKENS = 16
SIDE_FILES = ("-wal", "-shm", "-journal")
SCHEMA = """
CREATE TABLE archives(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, size INTEGER NOT NULL,
    messages INTEGER NOT NULL);
CREATE TABLE messages(
    rowid INTEGER PRIMARY KEY, message_id TEXT, role TEXT, timestamp INTEGER,
    archive_id INTEGER NOT NULL, byte_offset INTEGER NOT NULL, byte_length INTEGER NOT NULL);
CREATE INDEX messages_by_id ON messages(message_id);
CREATE VIRTUAL TABLE bodies USING fts5(body, tokenize = 'unicode61 remove_diacritics 2');
"""
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Hit:
    """One archived message that matches a query."""

    workspace: Path
    id: str | None
    role: str | None
    timestamp: int | None
    """Milliseconds since the epoch, as the message carried it."""
    archive: str
    """The archive file, relative to the workspace (``.memoryd/archive/<name>``)."""
    offset: int
    """Byte offset of the original line in ``archive``."""
    length: int
    snippet: str
    """A piece of the text around the match, matched words between ``**``."""
    score: float
    """BM25 relevance within its workspace: higher is better."""

    def as_dict(self) -> dict[str, object]:
        """The JSON form ``memoryd recall --json`` prints."""
        return {
            "workspace": str(self.workspace),
            "id": self.id,
            "role": self.role,
            "timestamp": self.timestamp,
            "archive": self.archive,
            "offset": self.offset,
            "length": self.length,
            "snippet": self.snippet,
            "score": self.score,
        }


class _Rebuild(Exception):
    """The index cannot be used as it is and is rebuilt from the archive."""


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """True for errors that mean the file is not a usable index (never for busy/locked)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or name == "SQLITE_ERROR"


def index_path(workspace: Workspace) -> Path:
    """Where the index of ``workspace`` lives; refused when ``.memoryd`` leads outside.

    A symlink at the index's own name is replaced, never followed (see _create_file).
    """
    resolve_inside(workspace.path, workspace.meta.name)
    return workspace.meta / INDEX


def _create_file(path: Path) -> None:
    """Create an empty index file, mode 0600 (it holds message text), never via a symlink."""
    for name in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILES)):
        # A symlink or a stray entry is ours to replace, never to follow (nor to write into
        # through SQLite's own -wal/-shm files).
        if name.is_symlink() or (name == path and name.exists() and not name.is_file()):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, NEW_FILE_FLAGS, 0o600))


def _connect(path: Path) -> sqlite3.Connection:
    # mode=rw: SQLite never creates the file itself (we did, with mode 0600); its -wal and
    # -shm files take the database file's mode.
    conn = sqlite3.connect(
        f"file:{urllib.parse.quote(str(path))}?mode=rw",
        uri=True,
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


def _schema_ok(conn: sqlite3.Connection, lock: Path) -> None:
    """Create the schema in a new file; raise _Rebuild for a file that is not our index."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if (app_id, version) == (APPLICATION_ID, SCHEMA_VERSION):
        return
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id or version or tables:
        raise _Rebuild("foreign schema")
    with flocked(lock):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _missing(conn: sqlite3.Connection, on_disk: Sequence[ArchiveFile]) -> list[ArchiveFile]:
    """The archives not indexed yet; raise _Rebuild when an indexed one changed or went."""
    indexed = dict(conn.execute("SELECT name, size FROM archives").fetchall())
    sizes = {archive.name: archive.size for archive in on_disk}
    if any(sizes.get(name) != size for name, size in indexed.items()):
        raise _Rebuild("stale: an indexed archive changed or disappeared")
    return [archive for archive in on_disk if archive.name not in indexed]


def _rows(
    workspace: Workspace, archive: ArchiveFile
) -> Iterator[tuple[str | None, str | None, int | None, int, int, str]]:
    for number, line in enumerate(read_lines(workspace, archive.source)):
        message = parse_message(line)
        if message is None or (number == 0 and is_summary(message)):
            continue
        ident, role, stamp = message.get("id"), message.get("role"), message.get("timestamp")
        yield (
            ident if isinstance(ident, str) else None,
            role if isinstance(role, str) else None,
            stamp if isinstance(stamp, int) and not isinstance(stamp, bool) else None,
            line.offset,
            len(line.data),
            content_text(message.get("content")),
        )


def _index_archive(conn: sqlite3.Connection, workspace: Workspace, archive: ArchiveFile) -> int:
    """Index one archive in one transaction: all of it or, after a crash, none of it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        archive_id = conn.execute(
            "INSERT INTO archives(name, size, messages) VALUES (?, ?, 0)",
            (archive.name, archive.size),
        ).lastrowid
        next_row = conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM messages").fetchone()[0]
        count = 0
        batch: list[tuple[str | None, str | None, int | None, int, int, str]] = []
        rows = _rows(workspace, archive)
        while True:
            batch = [row for _, row in zip(range(BATCH), rows, strict=False)]
            if not batch:
                break
            ids = range(next_row + count, next_row + count + len(batch))
            conn.executemany(
                "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(i, *row[:3], archive_id, *row[3:5]) for i, row in zip(ids, batch, strict=True)],
            )
            conn.executemany(
                "INSERT INTO bodies(rowid, body) VALUES (?, ?)",
                [(i, row[5]) for i, row in zip(ids, batch, strict=True)],
            )
            count += len(batch)
        conn.execute("UPDATE archives SET messages = ? WHERE id = ?", (count, archive_id))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return count


def _sync(conn: sqlite3.Connection, workspace: Workspace, lock: Path) -> int:
    """Index every archive not indexed yet; returns the messages added."""
    if not _missing(conn, archive_files(workspace)):
        return 0
    added = 0
    with flocked(lock):
        started = time.monotonic()
        missing = _missing(conn, archive_files(workspace))  # another process may have done it
        for archive in missing:
            added += _index_archive(conn, workspace, archive)
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


def _remove_index(path: Path, lock: Path, reason: str, workspace: Workspace) -> None:
    with flocked(lock):
        for suffix in ("", *SIDE_FILES):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
    log.info("index_rebuilding", workspace=str(workspace.path), reason=reason)


def _with_index(workspace: Workspace, use: Callable[[sqlite3.Connection], T]) -> T | None:
    """Run ``use`` on the up-to-date index of ``workspace``; None when it has no archive.

    A missing, foreign, stale or corrupt index is rebuilt from the archive once.
    """
    if not archive_files(workspace):
        return None
    path = index_path(workspace)
    lock = workspace.meta / "index.lock"
    for attempt in (1, 2):
        try:
            _create_file(path)
            conn = _connect(path)
            try:
                _schema_ok(conn, lock)
                _sync(conn, workspace, lock)
                return use(conn)
            finally:
                conn.close()
        except _Rebuild as exc:
            reason = str(exc)
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise MemorydError(f"{path}: {exc}") from None
            reason = f"damaged: {exc}"
        except OSError as exc:
            raise MemorydError(f"{path}: {exc.strerror or exc}") from None
        if attempt == 2:
            raise MemorydError(f"{path}: cannot be rebuilt ({reason})")
        _remove_index(path, lock, reason, workspace)
    return None  # not reached: the loop returns or raises


def update_index(workspace: Path) -> int:
    """Bring the index of ``workspace`` up to date with its archive; returns what it holds.

    The number of messages indexed (0 for a workspace with no archive: nothing created).
    """

    def count(conn: sqlite3.Connection) -> int:
        total: int = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        return total

    return _with_index(Workspace(Path(workspace)), count) or 0


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
            except Exception as exc:
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


def _search(
    conn: sqlite3.Connection, *, folder: Path, match: str, role: str | None, limit: int
) -> list[Hit]:
    where = "bodies MATCH ?" + (" AND m.role = ?" if role else "")
    params: list[object] = [match, *([role] if role else []), limit]
    rows = conn.execute(
        "SELECT m.message_id, m.role, m.timestamp, a.name, m.byte_offset, m.byte_length, "
        f"snippet(bodies, 0, '**', '**', '…', {SNIPPET_TOKENS}), bm25(bodies) "
        "FROM bodies JOIN messages m ON m.rowid = bodies.rowid "
        "JOIN archives a ON a.id = m.archive_id "
        f"WHERE {where} ORDER BY bm25(bodies), m.timestamp DESC, m.rowid DESC LIMIT ?",
        params,
    ).fetchall()
    return [
        Hit(
            folder,
            ident,
            who,
            stamp,
            f".memoryd/archive/{name}",
            offset,
            length,
            snippet,
            round(-score, 6),
        )
        for ident, who, stamp, name, offset, length, snippet, score in rows
    ]


def workspaces_under(path: Path, max_depth: int = 4) -> list[Path]:
    """``path`` itself when it is a workspace, else every workspace below it."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(
            f"{path}: no such folder" if not path.exists() else f"{path}: is not a folder"
        )
    if (path / CONVERSATION).is_file() or (path / ".memoryd" / "archive").is_dir():
        return [path.absolute()]
    return [found.absolute() for found in find_workspaces(path, max_depth)]


def recall(
    path: Path | str,
    query: str,
    limit: int = 10,
    role: str | None = None,
    *,
    raw: bool = False,
    max_depth: int = 4,
) -> list[Hit]:
    """The archived messages that match ``query``, best first (BM25, newer first on ties).

    ``path`` is a workspace or a folder of them. ``query`` is plain words (all must
    match; ``"a phrase"``; ``word*`` a prefix), or FTS5 syntax with ``raw=True``. Raises
    UsageError (exit 2) for a query with nothing to search or bad FTS5 syntax, a bad
    ``limit`` or ``role``; MemorydError when a single workspace's index cannot be used.
    """
    if role is not None and role not in ROLES:
        raise UsageError(f"role {role!r} is not one of {', '.join(ROLES)}")
    check_limit(limit)
    match = to_match(query, raw)
    folders = workspaces_under(Path(path), max_depth)
    hits: list[Hit] = []
    for folder in folders:
        try:
            found = _with_index(
                Workspace(folder),
                functools.partial(_search, folder=folder, match=match, role=role, limit=limit),
            )
        except MemorydError as exc:
            if len(folders) == 1:
                raise
            log.warning("recall_skipped_workspace", workspace=str(folder), reason=str(exc))
            continue
        hits.extend(found or [])
    hits.sort(key=lambda hit: (-hit.score, -(hit.timestamp or 0)))
    return hits[:limit]


def _live_line(workspace: Workspace, message_id: str) -> tuple[str, int] | None:
    for line in read_lines(workspace, CONVERSATION):
        message = parse_message(line)
        if message is not None and message.get("id") == message_id:
            if is_summary(message):
                raise MemorydError(
                    f"{message_id}: is a summary of {message.get('summarizedCount')} messages "
                    f"({message.get('firstId')} … {message.get('lastId')}); expand those ids"
                )
            return CONVERSATION, line.offset
    return None


def _archived_line(conn: sqlite3.Connection, message_id: str) -> tuple[str, int] | None:
    row = conn.execute(
        "SELECT a.name, m.byte_offset FROM messages m JOIN archives a ON a.id = m.archive_id "
        "WHERE m.message_id = ? ORDER BY m.rowid DESC LIMIT 1",
        (message_id,),
    ).fetchone()
    return None if row is None else (f".memoryd/archive/{row[0]}", row[1])


def expand(workspace: Path | str, id: str, before: int = 0, after: int = 0) -> list[bytes]:
    """The original line of message ``id`` and up to ``before``/``after`` lines around it.

    Byte for byte as appended (each ends with ``\\n``), from the live conversation when
    the message is still there, else from the archive (its newest copy). Context follows
    the history across archive files; summaries are skipped. Raises MemorydError (exit 1)
    for an unknown id, UsageError for a negative count or a folder that is no workspace.
    """
    for name, value in (("before", before), ("after", after)):
        if not isinstance(value, int) or value < 0:
            raise UsageError(f"--{name} must be 0 or more (got {value})")
    folder = Path(workspace)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such workspace folder")
    ws = Workspace(folder.absolute())
    where = _live_line(ws, id) or _with_index(ws, lambda conn: _archived_line(conn, id))
    lines = context(ws, *where, before, after) if where else None
    if lines is None:
        raise MemorydError(f"{id}: no message with this id in {folder} (live or archived)")
    return lines
