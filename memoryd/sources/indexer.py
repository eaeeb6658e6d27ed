"""Feeding a source's index from its session files, by byte offset (docs/design.md#sources).

An append-only file is read from where the last pass stopped, so every complete line is
indexed exactly once; a torn last line waits for its newline. A file that shrank, was
replaced (another inode) or whose first bytes changed is indexed again from the start; a
file rewritten whole (a Gemini CLI ``.json`` session, a spilled tool output) when its size
or time changes; a file that vanished leaves the index. Gemini CLI's last-wins updates,
rewinds and checkpoints are applied as they come. Every problem of a file is one log line
per pass, never an exception out of :func:`sync`.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import structlog

from memoryd.search.schema import INSERT_PASSAGES, PASSAGE_BITS, passage_rows
from memoryd.sources import claude, codex, gemini
from memoryd.sources.layout import (
    LINES,
    SNIFF_BYTES,
    SPILL,
    UNKNOWN,
    WHOLE,
    SessionFile,
    changed_file,
    session_files,
    session_name,
    storable,
)
from memoryd.sources.reader import Changed, lines_from, open_regular
from memoryd.sources.record import MAX_PARSED_LINE, Message, Record, load, safe_text
from memoryd.sources.store import Batch, Progress

log = structlog.get_logger()

PARSERS: dict[str, Callable[[bytes], Record]] = {
    claude.SOURCE: claude.parse,
    codex.SOURCE: codex.parse,
    gemini.SOURCE: gemini.parse,
}
LOOKS_LIKE: dict[str, Callable[[object], bool]] = {
    claude.SOURCE: claude.looks_like,
    codex.SOURCE: codex.looks_like,
    gemini.SOURCE: gemini.looks_like,
}
HEAD_BYTES = 4096
BATCH = 2000
COMMIT_BYTES = 64 << 20
"""A long first pass commits every this many bytes, so a reader sees it grow."""


@dataclass(slots=True)
class SyncResult:
    """What one pass did."""

    files: int = 0
    bytes: int = 0
    added: int = 0
    removed: int = 0
    problems: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    """Files of this pass in no format the source writes (skipped until they change)."""


class Known(NamedTuple):
    """A session file as the index last saw it."""

    id: int
    name: str
    size: int
    """Bytes read: the next pass starts there."""
    dev: int
    ino: int
    mtime_ns: int
    head: bytes
    session: str | None
    project: str | None
    lines: int
    shape: str


KNOWN_COLUMNS = "id, name, size, dev, ino, mtime_ns, head, session, project, lines, shape"


@dataclass(slots=True)
class _File:
    """The row of a session file being read, and what is pending for it."""

    id: int
    name: str
    session: str | None
    project: str | None
    offset: int
    lines: int = 0
    rows: list[tuple[object, ...]] = field(default_factory=list)
    texts: list[tuple[int, str]] = field(default_factory=list)
    ids: dict[str, tuple[int, int]] | None = None
    """Gemini CLI: message id -> (rowid, seq) of the live copy, loaded when first needed."""


def _head(fd: int, size: int) -> bytes:
    return hashlib.sha256(os.pread(fd, min(size, HEAD_BYTES), 0)).digest()


def _drop_rows(conn: sqlite3.Connection, rowids: list[int], *, count: bool = False) -> int:
    """Delete messages and their passages; with ``count``, returns how many passages went
    (FTS5's own bookkeeping makes ``total_changes`` say more)."""
    spans = [(r << PASSAGE_BITS, (r + 1) << PASSAGE_BITS) for r in rowids]
    passages = 0
    if count:
        query = "SELECT count(*) FROM passages WHERE rowid >= ? AND rowid < ?"
        passages = sum(conn.execute(query, span).fetchone()[0] for span in spans)
    conn.executemany("DELETE FROM messages WHERE rowid = ?", [(r,) for r in rowids])
    conn.executemany("DELETE FROM passages WHERE rowid >= ? AND rowid < ?", spans)
    return passages


def drop_file(conn: sqlite3.Connection, file_id: int) -> int:
    """Remove a session file and its messages from the index (in the caller's transaction)."""
    rowids = [
        r for (r,) in conn.execute("SELECT rowid FROM messages WHERE archive_id = ?", (file_id,))
    ]
    _drop_rows(conn, rowids)
    conn.execute("DELETE FROM archives WHERE id = ?", (file_id,))
    return len(rowids)


class _Pass:
    """One pass over one file: rows are batched, Gemini's updates applied in order."""

    def __init__(
        self, conn: sqlite3.Connection, source: str, row: _File, next_rowid: int, stem: str
    ) -> None:
        self.conn, self.source, self.row, self.next_rowid = conn, source, row, next_rowid
        self.added = self.removed = 0
        self.stem = stem

    def flush(self) -> None:
        row = self.row
        if row.rows:
            self.conn.executemany(
                "INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row.rows
            )
            cut = [part for rowid, text in row.texts for part in passage_rows(rowid, text)]
            self.conn.executemany(INSERT_PASSAGES, cut)
            self.conn.execute(
                "UPDATE archives SET messages = messages + ?, passages = passages + ? WHERE id = ?",
                (len(row.rows), len(cut), row.id),
            )
            row.rows, row.texts = [], []

    def _live_ids(self) -> dict[str, tuple[int, int]]:
        if self.row.ids is None:
            self.flush()
            self.row.ids = {
                ident: (rowid, seq)
                for ident, rowid, seq in self.conn.execute(
                    "SELECT message_id, rowid, seq FROM messages WHERE archive_id = ?",
                    (self.row.id,),
                )
            }
        return self.row.ids

    def _remove(self, rowids: list[int]) -> None:
        self.flush()
        passages = _drop_rows(self.conn, rowids, count=True)
        self.conn.execute(
            "UPDATE archives SET messages = messages - ?, passages = passages - ? WHERE id = ?",
            (len(rowids), passages, self.row.id),
        )
        self.removed += len(rowids)

    def rewind(self, ident: str | None) -> None:
        """Remove ``ident`` and every later message (all of them when ``ident`` is unknown
        or None)."""
        live = self._live_ids()
        cut = live[ident][1] if ident in live else -1
        gone = [key for key, (_, seq) in live.items() if seq >= cut]
        self._remove([live.pop(key)[0] for key in gone])

    def add(self, message: Message, offset: int, length: int) -> None:
        seq = (offset << 16) | (message.item + 1)
        ident = message.id or f"{self.stem}@{offset}" + (
            f"#{message.item}" if message.item >= 0 else ""
        )
        if self.source == gemini.SOURCE:
            live = self._live_ids()
            if ident in live:
                old_rowid, seq = live[ident]
                self._remove([old_rowid])
            live[ident] = (self.next_rowid, seq)
        row = self.row
        row.rows.append(
            (
                self.next_rowid,
                ident,
                message.role,
                message.timestamp,
                row.id,
                offset,
                length,
                seq,
                message.item,
            )
        )
        row.texts.append((self.next_rowid, message.text))
        self.next_rowid += 1
        self.added += 1
        if len(row.rows) >= BATCH:
            self.flush()

    def take(self, record: Record, offset: int, length: int) -> None:
        row = self.row
        row.session = row.session or record.session
        row.project = row.project or record.project
        if record.reset or record.rewind_to is not None:
            self.rewind(record.rewind_to)
        for message in record.messages:
            self.add(message, offset, length)


def _spilled(fd: int, size: int, name: str) -> Record:
    data = os.pread(fd, min(size, MAX_PARSED_LINE), 0)
    text = safe_text(data.decode("utf-8", "replace"))
    return Record((Message(Path(name).name, "tool", None, text),))


def _read(
    conn: sqlite3.Connection,
    source: str,
    file: SessionFile,
    row: _File,
    fd: int,
    result: SyncResult,
    batch: Batch,
) -> int:
    """Index what ``file`` holds past ``row.offset``; returns the new offset."""
    parse = PARSERS[source]
    start = row.offset
    work = _Pass(
        conn,
        source,
        row,
        conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM messages").fetchone()[0],
        storable(Path(file.name).stem if file.name else file.path.stem) or "session",
    )
    problem: str | None = None
    end = committed = start
    if file.shape != LINES:
        size = os.fstat(fd).st_size
        if file.shape == SPILL:
            record = _spilled(fd, size, file.name)
        else:
            data = os.pread(fd, min(size, MAX_PARSED_LINE + 1), 0)
            record = parse(data)
            problem = record.problem
        work.take(record, 0, size)
        end = size
    else:
        due = committed + batch.commit_bytes - batch.pending
        for offset, line, length in lines_from(fd, row.offset):
            record = parse(line) if line is not None else Record(problem="line too long")
            problem = problem or record.problem
            work.take(record, offset, length)
            end = offset + length
            row.lines += 1
            if end >= due:
                _save(conn, work, fd, end)
                batch.commit_within_file()
                committed, due = end, end + batch.commit_bytes
    _save(conn, work, fd, end)
    batch.pending += end - committed
    result.added += work.added
    result.removed += work.removed
    result.bytes += end - start
    if problem is not None:
        result.problems.append(f"{storable(file.name or file.path.name)}: {problem}")
    return end


def _save(conn: sqlite3.Connection, work: _Pass, fd: int, end: int) -> None:
    work.flush()
    row = work.row
    row.offset = end
    conn.execute(
        "UPDATE archives SET size = ?, lines = ?, head = ?, session = ?, project = ?, "
        "indexed_at = ? WHERE id = ?",
        (end, row.lines, _head(fd, end), row.session, row.project, time.time(), row.id),
    )


def _unchanged(file: SessionFile, known: Known, fd: int) -> bool | None:
    """True when nothing is new, False when the file grew by appends only, None when it
    must be indexed again from the start."""
    if (known.dev, known.ino) != file.inode:
        return None
    if file.shape != LINES:
        return True if (known.size, known.mtime_ns) == (file.size, file.mtime_ns) else None
    if file.size < known.size or _head(fd, known.size) != known.head:
        return None
    return file.size == known.size


def _same_stat(file: SessionFile, known: Known) -> bool:
    """True when the listing says the file is as the index left it: the same inode, time
    and size (what was read of it: a torn last line makes it differ)."""
    return (known.dev, known.ino) == file.inode and (known.mtime_ns, known.size) == (
        file.mtime_ns,
        file.size,
    )


def _known_format(source: str, file: SessionFile, fd: int) -> bool:
    """True unless the first line (or document) of a new file is in no format ``source``
    writes; an empty file, or a first line still being written, is given the benefit of
    the doubt."""
    if file.shape == SPILL:
        return True
    head = os.pread(fd, min(file.size, SNIFF_BYTES), 0).lstrip()
    if not head:
        return True
    if file.shape == WHOLE:
        return head.startswith(b"{")
    first, newline, _ = head.partition(b"\n")
    if not newline:
        return True
    value, _ = load(first)
    return bool(LOOKS_LIKE[source](value))


def _new_row(conn: sqlite3.Connection, file: SessionFile) -> _File:
    name = storable(file.name)
    raw = os.fsencode(file.name) if name != file.name else None
    file_id = conn.execute(
        "INSERT INTO archives(name, size, messages, passages, lines, shape, dev, ino, mtime_ns, "
        "raw) VALUES (?, 0, 0, 0, 0, ?, ?, ?, ?, ?)",
        (name, file.shape, *file.inode, file.mtime_ns, raw),
    ).lastrowid
    return _File(int(file_id or 0), name, None, None, 0)


def _index_one(
    conn: sqlite3.Connection,
    source: str,
    file: SessionFile,
    known: Known | None,
    result: SyncResult,
    batch: Batch,
) -> None:
    """Index what is new in one file, in ``batch``'s transaction."""
    if known is not None and _same_stat(file, known):
        return  # its size and time are those it had when read: nothing to open
    try:
        fd = open_regular(file.path, file.inode)
    except (OSError, Changed):
        return  # gone or replaced since it was listed: the next pass sees what is there
    try:
        state = None if known is None or known.shape == UNKNOWN else _unchanged(file, known, fd)
        if state is True:
            return
        batch.begin_file()
        try:
            if state is None or known is None:
                if known is not None:
                    result.removed += drop_file(conn, known.id)
                row = _new_row(conn, file)
                if not _known_format(source, file, fd):
                    conn.execute(
                        "UPDATE archives SET shape = ?, size = ? WHERE id = ?",
                        (UNKNOWN, file.size, row.id),
                    )
                    result.unknown.append(row.name)
                    batch.end_file(ok=True)
                    return
            else:
                row = _File(
                    known.id, known.name, known.session, known.project, known.size, known.lines
                )
            _read(conn, source, file, row, fd, result, batch)
            conn.execute(
                "UPDATE archives SET mtime_ns = ?, session = coalesce(session, ?) WHERE id = ?",
                (file.mtime_ns, session_name(file), row.id),
            )
        except BaseException:
            batch.end_file(ok=False)
            raise
        batch.end_file(ok=True)
        result.files += 1
    finally:
        os.close(fd)


def sync(
    conn: sqlite3.Connection,
    root: Path,
    source: str,
    changed: Iterable[Path] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SyncResult:
    """Bring the index behind ``conn`` up to date with the session files below ``root``:
    all of them, or only the ``changed`` paths (what a watcher saw; a folder among them
    means all).

    OSError while reading one file skips that file for this pass (one log line); SQLite
    errors are the caller's (a damaged index is rebuilt there).
    """
    result = SyncResult()
    paths = None if changed is None else list(changed)
    if paths is None or any(path.is_dir() and not path.is_symlink() for path in paths):
        files = session_files(root, source)
        names = {storable(file.name) for file in files}
        rows = conn.execute(f"SELECT {KNOWN_COLUMNS} FROM archives")
    else:
        found = {hit for path in paths if (hit := changed_file(root, source, path)) is not None}
        files = sorted((file for _, file in found if file is not None), key=lambda f: f.name)
        names = {storable(file.name) for file in files}
        asked = sorted({storable(name) for name, _ in found})
        rows = conn.execute(
            f"SELECT {KNOWN_COLUMNS} FROM archives WHERE name IN ({', '.join('?' * len(asked))})",
            asked,
        )
    known = {row.name: row for row in map(Known._make, rows)}
    gone = [row for name, row in known.items() if name not in names]
    if gone:
        conn.execute("BEGIN IMMEDIATE")
        for row in gone:
            result.removed += drop_file(conn, row.id)
        conn.execute("COMMIT")
    batch = Batch(conn, COMMIT_BYTES)
    started, first = time.monotonic(), not known
    todo: list[tuple[SessionFile, Known | None]] = []
    for file in files:
        seen = known.get(storable(file.name))
        if seen is None or not _same_stat(file, seen):
            todo.append((file, seen))
    total = sum(file.size for file, _ in todo)
    done = 0
    if progress is not None:
        progress(Progress(first, 0, len(todo), 0, total, 0.0))
    try:
        for number, (file, seen) in enumerate(todo, 1):
            try:
                _index_one(conn, source, file, seen, result, batch)
            except OSError as exc:
                name = storable(file.name or file.path.name)
                result.problems.append(f"{name}: {exc.strerror or exc}")
            done += file.size
            if progress is not None:
                seconds = time.monotonic() - started
                progress(Progress(first, number, len(todo), done, total, seconds))
        batch.commit()
    except BaseException:
        batch.rollback()
        raise
    for problem in result.problems[:1]:
        log.warning(
            "source_file_problem",
            source=source,
            root=str(root),
            files=len(result.problems),
            first=problem,
        )
    return result
