"""``recall`` and ``expand`` over a source: the index brought up to date, then the same
query language and ranking as a workspace's archive (docs/design.md#sources)."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import structlog

from memoryd import strict_json
from memoryd.errors import InputError, MemorydError, UsageError
from memoryd.search.query import (
    QUERY_SECONDS,
    QueryStopped,
    budget,
    check_limit,
    check_timeout,
    to_match,
)
from memoryd.search.rank import rank
from memoryd.sources import store
from memoryd.sources.indexer import SyncResult, sync
from memoryd.sources.layout import (
    SPILL,
    UNKNOWN,
    WHOLE,
    agent_root,
    by_layout,
    recognise,
    sources_in,
    storable,
)
from memoryd.sources.reader import Changed, read_range
from memoryd.sources.store import Progress

log = structlog.get_logger()
T = TypeVar("T")
SCORED = 10_000
"""Passages a group of hits scores at most, the newest that match: a source is often a
gigabyte of sessions, and BM25 costs about 3 µs a passage, so a query of words in most
messages costs ~30 ms of scoring at any size (a workspace's archive scores 40,000)."""
ROLES = ("user", "assistant", "tool", "summary", "info")
"""The roles of a source's messages: ``tool`` is a tool's output, ``summary`` a compaction
summary, ``info`` what the agent showed beside the conversation (Gemini CLI)."""
OVERFETCH = 2
"""Hits ranked per hit asked for: a line a subagent's file repeats is one hit of two."""
WAIT_STEP = 0.25
"""Seconds between two looks at another process's first index."""
SHOWN_NAMES = 5
"""Skipped files named in the line that says so; the rest are counted."""
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
    copies: tuple[Path, ...] = ()
    """Other files that hold the same line (same id, same bytes): a subagent's copy of the
    main session's line, say. ``file`` is where it was said first."""

    def as_dict(self) -> dict[str, object]:
        """The JSON form ``memoryd recall --json`` prints."""
        return {
            "source": self.source,
            "session": self.session,
            "project": self.project,
            "id": self.id,
            "role": self.role,
            "timestamp": self.timestamp,
            "file": storable(str(self.file)),
            "offset": self.offset,
            "length": self.length,
            "snippet": self.snippet,
            "score": self.score,
            "all_words": self.all_words,
            "copies": [storable(str(copy)) for copy in self.copies],
        }


@dataclass(frozen=True, slots=True)
class Target:
    """A source as a search reads it: the agent's folder whose index it is, and the part
    of it asked for."""

    root: Path
    source: str
    within: str | None = None
    """The name (below ``root``) of the folder or file asked for; None for all of it."""


def resolve(path: Path | str, source: str | None = None) -> list[Target]:
    """The sources at ``path``: one, or one per agent's folder in it (a home folder, a
    backup of several agents' folders). A path inside an agent's folder is searched in
    that folder's index, narrowed to the path. InputError (one line, exit 2) when there
    is none."""
    given = Path(path).expanduser()
    if not given.exists():
        raise InputError(f"{given}: no such file or folder")
    given = given.resolve()
    found = by_layout(given)
    if found is None and given.is_dir():
        inside = [(sub, kind) for sub, kind in sources_in(given) if source in (None, kind)]
        if inside:
            return [Target(sub, kind) for sub, kind in inside]
    found = found or recognise(given)
    if source is not None and found not in (None, source):
        raise InputError(f"{given}: holds {found} sessions, not {source}")
    found = found or source
    if found is None:
        raise InputError(
            f"{given}: no Claude Code, Codex or Gemini CLI session of any known kind here"
        )
    root = agent_root(given, found)
    if root == given:
        return [Target(given, found)]
    return [Target(root, found, given.relative_to(root).as_posix())]


def update(
    root: Path,
    source: str,
    *,
    wait: bool = True,
    changed: Iterable[Path] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> SyncResult | None:
    """Bring the index of ``root`` up to date (only the ``changed`` paths, when given: what
    a watcher saw); None when another process is doing it and ``wait`` is False. A
    damaged index is removed and built again once. A long pass tells ``progress`` how far
    it is, and other processes through the index's progress file."""
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
                        with store.progress_file(path, progress) as told:
                            result = sync(conn, root, source, changed, told)
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


def with_source(
    root: Path,
    source: str,
    use: Callable[[sqlite3.Connection], T],
    notes: list[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> T:
    """``use`` on the up-to-date index of a source. When another process holds the
    writer's lock, what is indexed is read; but while that process builds the index for
    the first time, the search waits for it when ``progress`` is given (it is told how far
    the build is), else it reads what is built and says how much in ``notes``."""
    path = store.index_path(root, source)
    if update(root, source, wait=False, progress=progress) is None:
        log.info("source_index_busy", path=str(path))
        building = store.read_progress(path)
        first = building is not None and building.first
        if not path.exists() or (first and progress is not None):
            while update(root, source, wait=False, progress=progress) is None:
                building = store.read_progress(path) or building
                if progress is not None and building is not None:
                    progress(building)
                time.sleep(WAIT_STEP)
        elif first and building is not None and notes is not None:
            notes.append(
                f"the index of {root} is {building.percent}% built (another process is "
                "building it): these hits are from what is indexed so far"
            )
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


def skipped(conn: sqlite3.Connection) -> list[str]:
    """The files of the index in no format their agent writes, by name."""
    return [
        name for (name,) in conn.execute("SELECT name FROM archives WHERE shape = ?", (UNKNOWN,))
    ]


def skipped_note(names: list[str]) -> str | None:
    """The one line that says which files were skipped (None for none)."""
    if not names:
        return None
    shown = ", ".join(names[:SHOWN_NAMES])
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    files = "file" if len(names) == 1 else "files"
    return f"skipped {len(names)} {files} of an unknown format: {shown}{more}"


def _archives_within(conn: sqlite3.Connection, within: str | None) -> list[int] | None:
    if within is None:
        return None
    prefix = within.rstrip("/") + "/"
    return [
        file_id
        for file_id, name in conn.execute("SELECT id, name FROM archives")
        if name == within or name.startswith(prefix)
    ]


def _said_first(hit: SourceHit) -> tuple[bool, int, bool, str]:
    """The order in which copies of one line were said: by time, a session's own file
    before a subagent's copy, then by file."""
    return (
        hit.timestamp is None,
        hit.timestamp or 0,
        "subagents" in hit.file.parts,
        str(hit.file),
    )


def one_hit_per_line(hits: list[SourceHit]) -> list[SourceHit]:
    """``hits`` with the copies of a line (same id, same bytes: a subagent's file repeats
    its main session's lines) made one hit, where it was said first, naming the copies;
    lines that only share an id stay apart."""
    by_id: dict[str, list[SourceHit]] = {}
    for hit in hits:
        by_id.setdefault(hit.id, []).append(hit)
    kept: dict[int, SourceHit] = {}
    for same in by_id.values():
        if len(same) == 1:
            kept[id(same[0])] = same[0]
            continue
        groups: dict[bytes, list[SourceHit]] = {}
        for hit in same:
            try:
                data = read_range(hit.file, hit.offset, hit.length)
            except (OSError, Changed):
                data = f"{hit.file}".encode("utf-8", "surrogateescape")
            groups.setdefault(data, []).append(hit)
        for copies in groups.values():
            first = min(copies, key=_said_first)
            others = tuple(hit.file for hit in copies if hit is not first)
            kept[id(first)] = replace(first, copies=others) if others else first
    return [kept[id(hit)] for hit in hits if id(hit) in kept]


def _search(
    target: Target,
    query: str,
    limit: int,
    role: str | None,
    raw: bool,
    timeout: float,
    cancelled: Callable[[], bool] | None,
    notes: list[str],
    conn: sqlite3.Connection,
) -> list[SourceHit]:
    deadline = time.monotonic() + timeout  # the query's budget, not the index's pass
    return _hits(conn, target, query, limit, role, raw, deadline, cancelled, notes)


def _hits(
    conn: sqlite3.Connection,
    target: Target,
    query: str,
    limit: int,
    role: str | None,
    raw: bool,
    deadline: float,
    cancelled: Callable[[], bool] | None,
    notes: list[str],
) -> list[SourceHit]:
    root, source = target.root, target.source
    parsed = to_match(query, raw)
    names = skipped(conn)
    if target.within is not None:
        names = [name for name in names if name.startswith(target.within)]
    if note := skipped_note(names):
        notes.append(note)
    with budget(conn, deadline, cancelled):
        archives = _archives_within(conn, target.within)
        ranked = rank(conn, parsed, role, limit * OVERFETCH, scored=SCORED, archives=archives)
        where = {
            row[0]: row[1:]
            for row in conn.execute(
                "SELECT m.rowid, m.message_id, m.role, m.timestamp, a.name, a.session, "
                "coalesce(a.project, (SELECT b.project FROM archives b WHERE b.session = a.session "
                "AND b.project IS NOT NULL LIMIT 1)), m.byte_offset, m.byte_length, a.raw "
                "FROM messages m JOIN archives a ON a.id = m.archive_id "
                f"WHERE m.rowid IN ({', '.join('?' * len(ranked))})",
                [found.message for found in ranked],
            )
        }
    hits = []
    for found in ranked:
        ident, who, stamp, name, session, project, offset, length, bytes_name = where[found.message]
        hits.append(
            SourceHit(
                source,
                session,
                project,
                ident,
                who,
                stamp,
                store.file_path(root, name, bytes_name),
                offset,
                length,
                found.snippet,
                found.score,
                found.all_words,
                found.identifiers,
            )
        )
    return one_hit_per_line(hits)[:limit]


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
    notes: list[str] | None = None,
    progress: Callable[[Progress], None] | None = None,
) -> list[SourceHit]:
    """The messages of the sessions at ``path`` that match ``query``, best first, as
    :func:`memoryd.search.recall.recall` ranks them; the same refusals. A folder of
    several agents' folders is searched as all of them. What the caller should know
    beside the hits (files skipped, an index still being built) is added to ``notes``;
    ``progress`` is told how far a first index is (see :func:`with_source`)."""
    if role is not None and role not in ROLES:
        raise UsageError(f"role {role!r} is not one of {', '.join(ROLES)}")
    check_limit(limit)
    check_timeout(timeout)
    to_match(query, raw)  # a bad query is refused before any indexing
    said = notes if notes is not None else []
    hits: list[SourceHit] = []
    for target in resolve(path, source):
        search = functools.partial(
            _search, target, query, limit, role, raw, timeout, cancelled, said
        )
        try:
            hits += with_source(target.root, target.source, search, said, progress)
        except QueryStopped:
            raise
        except OSError as exc:
            raise MemorydError(f"{exc.filename or target.root}: {exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise MemorydError(f"the index of {target.root}: {exc}") from None
    hits.sort(key=lambda hit: (not hit.all_words, -hit.identifiers, -hit.score))
    return hits[:limit]


def _original(root: Path, row: tuple[str, int, int, int, str, bytes | None]) -> bytes:
    """The bytes of one message as its file holds them."""
    name, offset, length, item, shape, raw = row
    data = read_range(store.file_path(root, name, raw), offset, length)
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
    if isinstance(value, dict) and isinstance(value.get("items"), list):  # Codex CLI 0.1.x
        messages = value["items"]
    if isinstance(messages, list) and 0 <= item < len(messages):
        return strict_json.dumps_line(messages[item])
    return data


@dataclass(frozen=True, slots=True)
class Pick:
    """Which copy of a message ``expand`` prints when its id is in several files."""

    session: str | None = None
    file: Path | str | None = None


def _picked(root: Path, name: str, raw: bytes | None, session: str | None, pick: Pick) -> bool:
    if pick.session is not None and session != pick.session:
        return False
    if pick.file is None:
        return True
    wanted = str(pick.file)
    path = store.file_path(root, name, raw)
    return (
        name == wanted
        or path == Path(wanted).expanduser().absolute()
        or path.name == wanted
        or storable(str(path)) == wanted
    )


def _lines(
    conn: sqlite3.Connection,
    root: Path,
    ident: str,
    before: int,
    after: int,
    pick: Pick,
    notes: list[str],
) -> list[bytes] | None:
    rows = [
        row
        for row in conn.execute(
            "SELECT m.archive_id, m.seq, m.timestamp, a.name, a.raw, a.session, m.byte_offset, "
            "m.byte_length FROM messages m JOIN archives a ON a.id = m.archive_id "
            "WHERE m.message_id = ?",
            (ident,),
        )
        if _picked(root, row[3], row[4], row[5], pick)
    ]
    if not rows:
        return None
    rows.sort(key=lambda row: (row[2] is None, row[2] or 0, "subagents" in row[3], row[3]))
    if len(rows) > 1:
        lines = {read_range(store.file_path(root, row[3], row[4]), row[6], row[7]) for row in rows}
        if len(lines) > 1:
            sessions = ", ".join(dict.fromkeys(str(row[5]) for row in rows))
            notes.append(
                f"{ident}: {len(lines)} different lines have this id (sessions {sessions}); "
                "this is the first said: --session or --file picks another"
            )
    file_id, seq = rows[0][0], rows[0][1]
    columns = (
        "a.name, m.byte_offset, m.byte_length, m.item, a.shape, a.raw "
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


def _look(
    root: Path,
    ident: str,
    before: int,
    after: int,
    pick: Pick,
    notes: list[str],
    conn: sqlite3.Connection,
) -> list[bytes] | None:
    return _lines(conn, root, ident, before, after, pick, notes)


def expand_source(
    path: Path | str,
    id: str,
    before: int = 0,
    after: int = 0,
    *,
    source: str | None = None,
    pick: Pick | None = None,
    notes: list[str] | None = None,
) -> list[bytes]:
    """The original line of message ``id`` with up to ``before``/``after`` messages of its
    session around it, in the session's order, byte for byte as the file holds them (a
    message of a line that holds several, as its own JSON line; a spilled tool output,
    whole). When the id is in several files, the line said first (a main session's, not
    a subagent's copy), or the one ``pick`` names. MemorydError (exit 1) for an unknown
    id."""
    for name, value in (("before", before), ("after", after)):
        if not isinstance(value, int) or value < 0:
            raise UsageError(f"--{name} must be 0 or more (got {value})")
    said = notes if notes is not None else []
    targets = resolve(path, source)
    for target in targets:
        root = target.root
        look = functools.partial(_look, root, id, before, after, pick or Pick(), said)
        try:
            lines = with_source(root, target.source, look)
        except OSError as exc:
            raise MemorydError(f"{exc.filename or root}: {exc.strerror or exc}") from None
        except sqlite3.Error as exc:
            raise MemorydError(f"the index of {root}: {exc}") from None
        if lines is not None:
            return lines
    where = Path(path).expanduser()
    if pick is not None and (pick.session or pick.file):
        raise MemorydError(f"{id}: no message with this id in {where} for that --session/--file")
    raise MemorydError(f"{id}: no message with this id in {where}")
