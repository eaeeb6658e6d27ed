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
from pathlib import Path
from typing import NamedTuple

from memoryd.search.lazylog import LazyLog
from memoryd.search.sessions import claude, codex, gemini
from memoryd.search.sessions.layout import (
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
from memoryd.search.sessions.listing import Listing, SyncResult, keep_folders, list_changes
from memoryd.search.sessions.prepare import PARSERS, PIPELINE_BYTES, Ahead, Parsed, lines_of
from memoryd.search.sessions.reader import Changed, open_regular
from memoryd.search.sessions.record import MAX_PARSED_LINE, Message, Record, load, safe_text
from memoryd.search.sessions.rows import FileRow, Pass, drop_file
from memoryd.search.sessions.store import Batch, Progress

log = LazyLog()

LOOKS_LIKE: dict[str, Callable[[object], bool]] = {
    claude.SOURCE: claude.looks_like,
    codex.SOURCE: codex.looks_like,
    gemini.SOURCE: gemini.looks_like,
}
HEAD_BYTES = 4096
COMMIT_BYTES = 64 << 20
"""A long first pass commits every this many bytes, so a reader sees it grow."""


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


def _head(fd: int, size: int) -> bytes:
    return hashlib.sha256(os.pread(fd, min(size, HEAD_BYTES), 0)).digest()


def _spilled(fd: int, size: int, name: str) -> Record:
    data = os.pread(fd, min(size, MAX_PARSED_LINE), 0)
    text = safe_text(data.decode("utf-8", "replace"))
    return Record((Message(Path(name).name, "tool", None, text),))


def _read(
    conn: sqlite3.Connection,
    source: str,
    file: SessionFile,
    row: FileRow,
    fd: int,
    result: SyncResult,
    batch: Batch,
    parsed: Parsed | None,
) -> int:
    """Index what ``file`` holds past ``row.offset`` (with what the worker ``parsed`` of
    it, if anything); returns the new offset."""
    parse = PARSERS[source]
    start = row.offset
    work = Pass(
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
        for line in lines_of(parse, fd, row.offset, parsed):
            problem = problem or line[2]
            work.take_values(line)
            end = line[0] + line[1]
            row.lines += 1
            if end >= due and end < file.size:  # at the end, the file's own commit
                _save(conn, work, fd, end)
                _count(result, work, end - start)  # counted as committed
                start = end
                batch.commit_within_file()
                committed, due = end, end + batch.commit_bytes
    _save(conn, work, fd, end)
    batch.pending += end - committed
    _count(result, work, end - start)
    if problem is not None:
        result.problems.append(f"{storable(file.name or file.path.name)}: {problem}")
    return end


def _count(result: SyncResult, work: Pass, read: int) -> None:
    result.added += work.added
    result.removed += work.removed
    result.bytes += read
    work.added = work.removed = 0


def _save(conn: sqlite3.Connection, work: Pass, fd: int, end: int) -> None:
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


def _known_rows(conn: sqlite3.Connection, names: list[str]) -> dict[str, Known]:
    """The index's rows of the files named, by name."""
    known: dict[str, Known] = {}
    for at in range(0, len(names), 500):
        chunk = names[at : at + 500]
        rows = conn.execute(
            f"SELECT {KNOWN_COLUMNS} FROM archives WHERE name IN ({', '.join('?' * len(chunk))})",
            chunk,
        )
        known.update((row.name, row) for row in map(Known._make, rows))
    return known


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


def _new_row(conn: sqlite3.Connection, file: SessionFile) -> FileRow:
    name = storable(file.name)
    raw = os.fsencode(file.name) if name != file.name else None
    file_id = conn.execute(
        "INSERT INTO archives(name, size, messages, passages, lines, shape, dev, ino, mtime_ns, "
        "raw) VALUES (?, 0, 0, 0, 0, ?, ?, ?, ?, ?)",
        (name, file.shape, *file.inode, file.mtime_ns, raw),
    ).lastrowid
    return FileRow(int(file_id or 0), name, None, None, 0)


def _index_one(
    conn: sqlite3.Connection,
    source: str,
    file: SessionFile,
    known: Known | None,
    result: SyncResult,
    batch: Batch,
    parsed: Parsed | None = None,
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
                row = FileRow(
                    known.id, known.name, known.session, known.project, known.size, known.lines
                )
            _read(conn, source, file, row, fd, result, batch, parsed)
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


Counts = tuple[int, int, int, int, int, int]


def _counts(result: SyncResult) -> Counts:
    return (
        result.files,
        result.bytes,
        result.added,
        result.removed,
        len(result.problems),
        len(result.unknown),
    )


def _restore(result: SyncResult, counts: Counts) -> None:
    """``result`` as it was when ``counts`` were taken."""
    result.files, result.bytes, result.added, result.removed, problems, unknown = counts
    del result.problems[problems:], result.unknown[unknown:]


def sync(
    conn: sqlite3.Connection,
    root: Path,
    source: str,
    changed: Iterable[Path] | None = None,
    progress: Callable[[Progress], None] | None = None,
    listing: Listing | None = None,
) -> SyncResult:
    """Bring the index behind ``conn`` up to date with the session files below ``root``:
    all of them, or only the ``changed`` paths (what a watcher saw; a folder among them
    means all).

    OSError while reading one file skips that file for this pass (one log line); SQLite
    errors are the caller's (a damaged index is rebuilt there).
    """
    result = SyncResult()
    paths = None if changed is None else list(changed)
    first = False
    if paths is None or any(path.is_dir() and not path.is_symlink() for path in paths):
        if root.is_dir():
            listing = listing or list_changes(conn, root, source)
            files = listing.changed
            names = {storable(file.name) for file in files}
            known = _known_rows(conn, sorted(names | set(listing.gone)))
            first = listing.first
        else:
            rows = conn.execute(f"SELECT {KNOWN_COLUMNS} FROM archives")
            known = {row.name: row for row in map(Known._make, rows)}
            files = session_files(root, source)
            names = {storable(file.name) for file in files}
    else:
        found = {hit for path in paths if (hit := changed_file(root, source, path)) is not None}
        files = sorted((file for _, file in found if file is not None), key=lambda f: f.name)
        names = {storable(file.name) for file in files}
        known = _known_rows(conn, sorted({storable(name) for name, _ in found}))
    gone = [row for name, row in known.items() if name not in names]
    if gone:
        conn.execute("BEGIN IMMEDIATE")
        for row in gone:
            result.removed += drop_file(conn, row.id)
        conn.execute("COMMIT")
    batch = Batch(conn, COMMIT_BYTES)
    started = time.monotonic()
    first = first or (listing is None and not known)
    todo: list[tuple[SessionFile, Known | None]] = []
    for file in files:
        seen = known.get(storable(file.name))
        if seen is None or not _same_stat(file, seen):
            todo.append((file, seen))
    total = sum(file.size for file, _ in todo)
    done = 0
    if progress is not None:
        progress(Progress(first, 0, len(todo), 0, total, 0.0))
    number = reached = 0
    failed: set[int] = set()
    saved = [_counts(result)]
    batch.on_begin = lambda: saved.__setitem__(0, _counts(result))
    ahead = None
    if total >= PIPELINE_BYTES and len(todo) > 1:
        # Where each file is read from if it only grew: the end of what the index holds.
        grown = [s.size if s is not None and s.shape == LINES == f.shape else None for f, s in todo]
        ahead = Ahead(source, [(f, size) for (f, _), size in zip(todo, grown, strict=True)])
    try:
        while number < len(todo):
            file, seen = todo[number]
            parsed = None if ahead is None else ahead.take(number)
            if number not in failed:
                batch.current = number
                try:
                    _index_one(conn, source, file, seen, result, batch, parsed)
                except OSError as exc:
                    # The transaction is rolled back: the files since it began are
                    # indexed again (from what the index now holds of them), without this.
                    began = min(batch.began, number)
                    _restore(result, saved[0])
                    name = storable(file.name or file.path.name)
                    result.problems.append(f"{name}: {exc.strerror or exc}")
                    failed.add(number)
                    again = [each for each, _ in todo[began:number]]
                    fresh = _known_rows(conn, [storable(each.name) for each in again])
                    todo[began:number] = [(each, fresh.get(storable(each.name))) for each in again]
                    number = began
                    continue
            number += 1
            if number > reached:
                reached, done = number, done + file.size
                if progress is not None:
                    seconds = time.monotonic() - started
                    progress(Progress(first, reached, len(todo), done, total, seconds))
        batch.commit()
    except BaseException:
        batch.rollback()
        raise
    finally:
        if ahead is not None:
            ahead.close()
    if listing is not None:
        keep_folders(conn, listing)
    for problem in result.problems[:1]:
        log.warning(
            "source_file_problem",
            source=source,
            root=str(root),
            files=len(result.problems),
            first=problem,
        )
    return result
