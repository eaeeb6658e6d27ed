"""What a recall index holds: its tables, their versions, and the rows of one message.

Every index, a workspace's archive's or another agent's sessions', has the same three
tables: ``archives`` (one row per file indexed), ``messages`` (one row per message, where
its line is) and the FTS5 table ``passages`` (each message's text cut by
:func:`memoryd.search.text.passages`, stemmed by the porter tokenizer, camelCase
identifiers also by their parts, and runs of scripts written without spaces also by their
overlapping character pairs). A passage's rowid is its message's rowid shifted left by
``PASSAGE_BITS``, plus its number: the message of a passage is one shift away, with no
table to join. A feed adds its own columns and tables beside them: :data:`ARCHIVE` and
:data:`SESSIONS` are the two kinds of index (docs/design.md#recall).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from memoryd.errors import MemorydError
from memoryd.search.database import damaged, remove, transaction
from memoryd.search.text import cjk_bigrams, identifier_parts, passages

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final, TypeVar

    T = TypeVar("T")

PASSAGE_BITS = 16
TOKENIZER = "porter unicode61 remove_diacritics 2"
ARCHIVE_COLUMNS = (
    "id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, "
    "messages INTEGER NOT NULL, passages INTEGER NOT NULL"
)
"""The columns of ``archives`` every index has: a file's name, its size when indexed, and
how many messages and passages it holds."""
MESSAGE_COLUMNS = (
    "rowid INTEGER PRIMARY KEY, message_id TEXT, role TEXT, timestamp INTEGER, "
    "archive_id INTEGER NOT NULL, byte_offset INTEGER NOT NULL, byte_length INTEGER NOT NULL"
)
"""The columns of ``messages`` every index has: a message's id, role and time, and where
its line is."""


class Layout:
    """One kind of recall index: its ``application_id`` (anything else is not this kind
    of index), its ``version`` (``user_version``: an index of another is rebuilt), the
    prefix lengths FTS5 keeps whole (``prefix``, "" for none), and what its feed adds to
    the tables every index has: columns, statements (``tables``) and FTS5 settings."""

    __slots__ = (
        "application_id",
        "archive_columns",
        "fts_settings",
        "message_columns",
        "prefix",
        "tables",
        "version",
    )

    def __init__(
        self,
        application_id: int,
        version: int,
        *,
        prefix: str = "",
        archive_columns: str = "",
        message_columns: str = "",
        tables: tuple[str, ...] = (),
        fts_settings: tuple[tuple[str, int], ...] = (),
    ) -> None:
        self.application_id: Final = application_id
        self.version: Final = version
        self.prefix: Final = prefix
        self.archive_columns: Final = archive_columns
        self.message_columns: Final = message_columns
        self.tables: Final = tables
        self.fts_settings: Final = fts_settings

    @property
    def kept_prefixes(self) -> tuple[int, ...]:
        """The prefix lengths the index keeps whole: one term each, however many terms
        they stand for (docs/design.md#recall-cost)."""
        return tuple(int(length) for length in self.prefix.split())

    @property
    def statements(self) -> tuple[str, ...]:
        """The statements that create the tables in an empty database."""
        extra_archive = f", {self.archive_columns}" if self.archive_columns else ""
        extra_message = f", {self.message_columns}" if self.message_columns else ""
        prefix = f", prefix = '{self.prefix}'" if self.prefix else ""
        return (
            f"CREATE TABLE archives({ARCHIVE_COLUMNS}{extra_archive})",
            f"CREATE TABLE messages({MESSAGE_COLUMNS}{extra_message})",
            "CREATE INDEX messages_by_id ON messages(message_id)",
            *self.tables,
            "CREATE VIRTUAL TABLE passages USING fts5("
            f"body, parts, pairs, tokenize = '{TOKENIZER}'{prefix})",
        )


ARCHIVE = Layout(0x6D656D72, 4, prefix="2 3")
"""A workspace's archive's index ("memr"). Versions: 1 held whole messages, unstemmed; 2
stemmed passages; 3 adds the prefix index of 2 and 3 characters
(docs/design.md#recall-cost); 4 the character pairs of scripts written without spaces
(docs/design.md#recall-scripts)."""
FTS_HASH_BYTES = 64 << 20
"""FTS5 ``hashsize`` of a sessions index: terms held in memory before they are written as
a segment (default 1 MB): fewer, larger segments are fewer merges. Only a long pass fills
it (a pass commits every ``indexer.COMMIT_BYTES``, and a commit writes what is held). On
256 MB of generated sessions the index's FTS5 insert cost 0.85x a bare default table's
with 64 MiB, 0.92x with 16 MiB and 1.27x with the default
(docs/design.md#sources-pipeline)."""
SESSIONS = Layout(
    0x6D656D73,
    6,
    archive_columns=(
        "lines INTEGER NOT NULL, shape TEXT NOT NULL, dev INTEGER, ino INTEGER, "
        "mtime_ns INTEGER, head BLOB, session TEXT, project TEXT, indexed_at REAL, raw BLOB"
    ),
    message_columns="seq INTEGER NOT NULL, item INTEGER NOT NULL",
    tables=(
        "CREATE INDEX messages_by_file ON messages(archive_id, seq)",
        "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE folders(name TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL)",
    ),
    fts_settings=(("hashsize", FTS_HASH_BYTES),),
)
"""The index of another agent's sessions ("mems"): ``archives`` holds one row per session
file (how far it was read, and what it was when read; ``name`` as
:func:`~memoryd.search.sessions.layout.storable` writes it, ``raw`` its bytes when they are
not UTF-8), ``messages`` their place in the file's order, ``meta`` the folder and agent the
index is of, ``folders`` the folders' times (the cached listing). Versions: 2 keeps the
bytes of a file name that is not UTF-8; 3 indexes the character pairs of scripts written
without spaces; 4 keeps the folders' times; 6 has no prefix index
(docs/design.md#sources-pipeline): every prefix of a query is counted before it runs."""


def create_schema(
    conn: sqlite3.Connection, layout: Layout, meta: dict[str, str] | None = None
) -> None:
    """Create the tables of ``layout`` in an empty database, with its ``meta`` rows, and
    stamp it as such an index at its version."""
    for statement in layout.statements:
        conn.execute(statement)
    if meta:
        conn.executemany("INSERT INTO meta VALUES (?, ?)", list(meta.items()))
    for name, value in layout.fts_settings:
        conn.execute("INSERT INTO passages(passages, rank) VALUES (?, ?)", (name, value))
    conn.execute(f"PRAGMA application_id = {layout.application_id}")
    conn.execute(f"PRAGMA user_version = {layout.version}")


def is_current(
    conn: sqlite3.Connection, layout: Layout, meta: dict[str, str] | None = None
) -> bool:
    """True when ``conn`` is an index of ``layout`` at its version, of what ``meta`` says
    (reads only)."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if (app_id, version) != (layout.application_id, layout.version):
        return False
    stored = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if meta else {}
    return all(stored.get(key) == value for key, value in (meta or {}).items())


def ensure_schema(
    conn: sqlite3.Connection, layout: Layout, meta: dict[str, str] | None = None
) -> str | None:
    """Create the tables of ``layout`` in an empty file; None when the file is (now) such
    an index, else why it must be removed and built again (not ours, another version, of
    another folder). The caller is the index's one writer."""
    if is_current(conn, layout, meta):
        return None
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if app_id == layout.application_id:
        if version != layout.version:
            return f"schema version {version}, this memoryd uses {layout.version}"
        return "an index of another folder"
    if app_id or version or conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        return "foreign schema"
    with transaction(conn):
        create_schema(conn, layout, meta)
    return None


class Stale(Exception):
    """The index cannot be used as it is (a file it indexed changed or went): it is
    removed and built again."""


def kept_current(
    path: Path,
    layout: Layout,
    use: Callable[[sqlite3.Connection], T],
    *,
    create: Callable[[Path], None],
    connect: Callable[[Path], sqlite3.Connection],
    rebuilding: Callable[[str], None],
    meta: dict[str, str] | None = None,
    error_too: bool = False,
) -> T:
    """``use`` on the index at ``path`` (made by ``create``, opened by ``connect``) once
    it is an index of ``layout`` at its version. An index of another kind, version or
    folder, a damaged one (:func:`~memoryd.search.database.damaged`, with ``error_too``)
    and one ``use`` finds :class:`Stale` is removed and built again, once, after
    ``rebuilding`` is told why; MemorydError when that fails too, or for another SQLite
    error (a full disk). The caller is the index's one writer."""
    for attempt in (1, 2):
        try:
            create(path)
            conn = connect(path)
            try:
                reason = ensure_schema(conn, layout, meta)
                if reason is None:
                    return use(conn)
            finally:
                conn.close()
        except Stale as exc:
            reason = str(exc)
        except sqlite3.DatabaseError as exc:
            if not damaged(exc, error_too=error_too):  # "database or disk is full" included
                raise MemorydError(f"{path}: {exc}") from None
            reason = f"damaged: {exc}"
        if attempt == 2:
            break
        rebuilding(reason)
        remove(path)
    raise MemorydError(f"{path}: cannot be rebuilt ({reason})")


INSERT_PASSAGES = "INSERT INTO passages(rowid, body, parts, pairs) VALUES (?, ?, ?, ?)"


Cut = tuple[str, str, str]
"""One passage of a message: (body, identifier parts, character pairs of its CJK runs)."""


def passage_cuts(text: str) -> list[Cut]:
    """The passages of one message's ``text``, each with its identifier parts and the
    character pairs of its CJK runs (pure)."""
    return [(body, identifier_parts(body), cjk_bigrams(body)) for body in passages(text)]


def passage_rows(message_rowid: int, text: str) -> list[tuple[int, str, str, str]]:
    """The rows of ``passages`` for one message: (rowid, body, identifier parts, character
    pairs of its CJK runs) (pure)."""
    return cut_rows(message_rowid, passage_cuts(text))


def cut_rows(message_rowid: int, cuts: list[Cut]) -> list[tuple[int, str, str, str]]:
    """The rows of ``passages`` for one message already cut (pure)."""
    base = message_rowid << PASSAGE_BITS
    return [(base + number, *cut) for number, cut in enumerate(cuts)]


def insert_messages(
    conn: sqlite3.Connection,
    rows: list[tuple[object, ...]],
    texts: list[tuple[int, str, list[Cut] | None]],
) -> int:
    """Insert ``rows`` into ``messages`` (each in the order of its columns) and the
    passages of their ``texts``: (rowid, text, its passages when already cut); returns how
    many passages."""
    if not rows:
        return 0
    conn.executemany(f"INSERT INTO messages VALUES ({', '.join('?' * len(rows[0]))})", rows)
    cut = [
        part
        for rowid, text, cuts in texts
        for part in (passage_rows(rowid, text) if cuts is None else cut_rows(rowid, cuts))
    ]
    conn.executemany(INSERT_PASSAGES, cut)
    return len(cut)
