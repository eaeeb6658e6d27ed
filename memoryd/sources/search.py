"""``recall`` and ``expand`` over a source: the index brought up to date, then the same
query language, cost bound and ranking as a workspace's archive (docs/design.md#sources,
docs/design.md#recall-cost)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import structlog

from memoryd import strict_json
from memoryd.errors import InputError, MemorydError, UsageError
from memoryd.search.cost import check_cost
from memoryd.search.query import (
    QUERY_SECONDS,
    ROLES,
    QueryStopped,
    budget,
    check_limit,
    check_timeout,
    to_match,
)
from memoryd.search.rank import rank
from memoryd.sources import store
from memoryd.sources.indexer import SyncResult, sync
from memoryd.sources.layout import SPILL, WHOLE, recognise
from memoryd.sources.reader import read_range

log = structlog.get_logger()
T = TypeVar("T")
SCORED = 10_000
"""Passages a group of hits scores at most, the newest that match: a source is often a
gigabyte of sessions, and BM25 costs about 3 µs a passage, so a query of words in most
messages costs ~30 ms of scoring at any size (a workspace's archive scores 40,000)."""
CHECKPOINT_BYTES = 16 << 20
"""A pass that read this much folds the WAL back into the index (SQLite also does it on
its own every 1,000 pages)."""


@dataclass(frozen=True, slots=True)
class SourceHit:
    """One message of another agent's session that matches a query."""

    source: str
    """``claude-code``, ``codex`` or ``gemini``."""
    session: str | None
    project: str | None
    """The working folder when the session says it (else what its folder is named after)."""
    id: str
    role: str | None
    timestamp: int | None
    file: Path
    offset: int
    length: int
    snippet: str
    score: float
    all_words: bool = True
    identifiers: int = 0

    def as_dict(self) -> dict[str, object]:
        """The JSON form ``memoryd recall --json`` prints."""
        return {
            "source": self.source,
            "session": self.session,
            "project": self.project,
            "id": self.id,
            "role": self.role,
            "timestamp": self.timestamp,
            "file": str(self.file),
            "offset": self.offset,
            "length": self.length,
            "snippet": self.snippet,
            "score": self.score,
            "all_words": self.all_words,
        }


def resolve(path: Path | str, source: str | None = None) -> tuple[Path, str]:
    """The absolute root and the source of ``path``; InputError when it is none of them."""
    root = Path(path).expanduser()
    if not root.exists():
        raise InputError(f"{root}: no such file or folder")
    root = root.resolve()
    found = recognise(root)
    if source is not None and found not in (None, source):
        raise InputError(f"{root}: holds {found} sessions, not {source}")
    found = found or source
    if found is None:
        raise InputError(f"{root}: not a Claude Code, Codex or Gemini CLI session folder or file")
    return root, found


def update(
    root: Path, source: str, *, wait: bool = True, changed: Iterable[Path] | None = None
) -> SyncResult | None:
    """Bring the index of ``root`` up to date (only the ``changed`` paths, when given: what
    a watcher saw); None when another process is doing it and ``wait`` is False. A
    damaged index is removed and built again once."""
    path = store.index_path(root, source)
    with store.writer_lock(path, blocking=wait) as held:
        if not held:
            return None
        for attempt in (1, 2):
            try:
                store.create_file(path)
                conn = store.connect(path)
                try:
                    store.for_writing(conn)
                    if store.ensure_schema(conn, root, source):
                        result = sync(conn, root, source, changed)
                        if result.bytes >= CHECKPOINT_BYTES:
                            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                        return result
                    reason = "not this source's index"
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                if not store.damaged(exc) or attempt == 2:
                    raise MemorydError(f"{path}: {exc}") from None
                reason = f"damaged: {exc}"
            log.info("source_index_rebuilding", path=str(path), reason=reason)
            store.remove(path)
    raise MemorydError(f"{path}: cannot be rebuilt")


FIGURES = ("sessions", "files", "lines", "messages", "bytes_indexed")


def figures(root: Path, source: str) -> dict[str, int]:
    """What the index of a source holds: sessions, files, lines read, messages indexed,
    bytes read; all 0 when there is no index yet."""
    path = store.index_path(root, source)
    if not path.exists():
        return dict.fromkeys(FIGURES, 0)
    conn = store.connect(path)
    try:
        row = conn.execute(
            "SELECT count(DISTINCT session), count(*), coalesce(sum(lines), 0), "
            "coalesce(sum(messages), 0), coalesce(sum(size), 0) FROM archives"
        ).fetchone()
    finally:
        conn.close()
    return dict(zip(FIGURES, map(int, row), strict=True))


def with_source(root: Path, source: str, use: Callable[[sqlite3.Connection], T]) -> T:
    """``use`` on the up-to-date index of a source (what is indexed, when another process
    holds the writer's lock: the reader never waits for a long first pass)."""
    path = store.index_path(root, source)
    if update(root, source, wait=not path.exists()) is None:
        log.info("source_index_busy", path=str(path))
    conn = store.connect(path)
    try:
        if store.is_current(conn, root, source):
            return use(conn)
    finally:
        conn.close()
    update(root, source)  # made by the other process a moment ago: wait for its pass
    conn = store.connect(path)
    try:
        return use(conn)
    finally:
        conn.close()


def _hits(
    conn: sqlite3.Connection,
    root: Path,
    source: str,
    query: str,
    limit: int,
    role: str | None,
    raw: bool,
    deadline: float,
    cancelled: Callable[[], bool] | None,
) -> list[SourceHit]:
    parsed = to_match(query, raw)
    with budget(conn, deadline, cancelled):
        check_cost(conn, parsed)
        ranked = rank(conn, parsed, role, limit, scored=SCORED)
        where = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT m.rowid, m.message_id, m.role, m.timestamp, a.name, a.session, "
                "coalesce(a.project, (SELECT b.project FROM archives b WHERE b.session = a.session "
                "AND b.project IS NOT NULL LIMIT 1)), m.byte_offset, m.byte_length "
                "FROM messages m JOIN archives a ON a.id = m.archive_id "
                f"WHERE m.rowid IN ({', '.join('?' * len(ranked))})",
                [found.message for found in ranked],
            )
        }
    hits = []
    for found in ranked:
        ident, who, stamp, name, session, project, offset, length = where[found.message]
        hits.append(
            SourceHit(
                source,
                session,
                project,
                ident,
                who,
                stamp,
                root / name if name else root,
                offset,
                length,
                found.snippet,
                found.score,
                found.all_words,
                found.identifiers,
            )
        )
    return hits


def recall_source(
    path: Path | str,
    query: str,
    limit: int = 10,
    role: str | None = None,
    *,
    raw: bool = False,
    source: str | None = None,
    timeout: float = QUERY_SECONDS,
    cancelled: Callable[[], bool] | None = None,
) -> list[SourceHit]:
    """The messages of the sessions at ``path`` that match ``query``, best first, as
    :func:`memoryd.search.recall.recall` ranks them; the same refusals."""
    if role is not None and role not in ROLES:
        raise UsageError(f"role {role!r} is not one of {', '.join(ROLES)}")
    check_limit(limit)
    check_timeout(timeout)
    to_match(query, raw)  # a bad query is refused before any indexing
    deadline = time.monotonic() + timeout
    root, kind = resolve(path, source)
    try:
        return with_source(
            root,
            kind,
            lambda conn: _hits(conn, root, kind, query, limit, role, raw, deadline, cancelled),
        )
    except QueryStopped:
        raise
    except OSError as exc:
        raise MemorydError(f"{exc.filename or root}: {exc.strerror or exc}") from None
    except sqlite3.Error as exc:
        raise MemorydError(f"the index of {root}: {exc}") from None


def _original(root: Path, row: tuple[str, int, int, int, str]) -> bytes:
    """The bytes of one message as its file holds them."""
    name, offset, length, item, shape = row
    data = read_range(root / name if name else root, offset, length)
    if shape == SPILL:
        return data if data.endswith(b"\n") else data + b"\n"
    if item < 0 or shape not in (WHOLE, "lines"):
        return data
    try:
        value = strict_json.loads(data)
    except strict_json.JSONProblem:
        return data
    messages = value.get("messages") if isinstance(value, dict) else None
    if isinstance(value, dict) and isinstance(value.get("$set"), dict):
        messages = value["$set"].get("messages")
    if isinstance(messages, list) and 0 <= item < len(messages):
        return strict_json.dumps_line(messages[item])
    return data


def _lines(
    conn: sqlite3.Connection, root: Path, ident: str, before: int, after: int
) -> list[bytes] | None:
    found = conn.execute(
        "SELECT archive_id, seq FROM messages WHERE message_id = ? ORDER BY rowid DESC LIMIT 1",
        (ident,),
    ).fetchone()
    if found is None:
        return None
    file_id, seq = found
    columns = (
        "a.name, m.byte_offset, m.byte_length, m.item, a.shape "
        "FROM messages m JOIN archives a ON a.id = m.archive_id"
    )
    earlier = conn.execute(
        f"SELECT {columns} WHERE m.archive_id = ? AND m.seq < ? ORDER BY m.seq DESC LIMIT ?",
        (file_id, seq, before),
    ).fetchall()
    rest = conn.execute(
        f"SELECT {columns} WHERE m.archive_id = ? AND m.seq >= ? ORDER BY m.seq LIMIT ?",
        (file_id, seq, after + 1),
    ).fetchall()
    return [_original(root, row) for row in (*reversed(earlier), *rest)]


def expand_source(
    path: Path | str, id: str, before: int = 0, after: int = 0, *, source: str | None = None
) -> list[bytes]:
    """The original line of message ``id`` with up to ``before``/``after`` messages of its
    session around it, in the session's order, byte for byte as the file holds them (a
    message of a line that holds several, as its own JSON line; a spilled tool output,
    whole). InputError (exit 2) for an unknown id."""
    for name, value in (("before", before), ("after", after)):
        if not isinstance(value, int) or value < 0:
            raise UsageError(f"--{name} must be 0 or more (got {value})")
    root, kind = resolve(path, source)
    try:
        lines = with_source(root, kind, lambda conn: _lines(conn, root, id, before, after))
    except OSError as exc:
        raise MemorydError(f"{exc.filename or root}: {exc.strerror or exc}") from None
    except sqlite3.Error as exc:
        raise MemorydError(f"the index of {root}: {exc}") from None
    if lines is None:
        raise InputError(f"{id}: no message with this id in {root}")
    return lines
