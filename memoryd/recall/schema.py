"""What the recall index holds: its tables, their version, and the rows of one message.

Each archived message is one row of ``messages`` (where its line is) and one or more
passages in the FTS5 table ``passages`` (its text cut by :func:`memoryd.recall.text.
passages`, stemmed by the porter tokenizer, camelCase identifiers also by their parts, and
runs of scripts written without spaces also by their overlapping character pairs).
A passage's rowid is its message's rowid shifted left by ``PASSAGE_BITS``, plus its
number: the message of a passage is one shift away, with no table to join
(docs/design.md#recall).
"""

from __future__ import annotations

import sqlite3

from memoryd.recall.text import cjk_bigrams, identifier_parts, passages

APPLICATION_ID = 0x6D656D72
"""``PRAGMA application_id`` of memoryd's index ("memr"); anything else is not ours."""
SCHEMA_VERSION = 4
"""``PRAGMA user_version``: 1 held whole messages, unstemmed; 2 stemmed passages; 3 adds
the prefix index of 2 and 3 characters (docs/design.md#recall-cost); 4 the character pairs
of scripts written without spaces (docs/design.md#recall-scripts)."""
PASSAGE_BITS = 16
TOKENIZER = "porter unicode61 remove_diacritics 2"
PREFIX_INDEX = "2 3"
"""The prefix lengths FTS5 keeps whole: a prefix of 2 or 3 characters is one term, however
many it stands for (docs/design.md#recall-cost)."""
SCHEMA = f"""
CREATE TABLE archives(
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, size INTEGER NOT NULL,
    messages INTEGER NOT NULL, passages INTEGER NOT NULL);
CREATE TABLE messages(
    rowid INTEGER PRIMARY KEY, message_id TEXT, role TEXT, timestamp INTEGER,
    archive_id INTEGER NOT NULL, byte_offset INTEGER NOT NULL, byte_length INTEGER NOT NULL);
CREATE INDEX messages_by_id ON messages(message_id);
CREATE VIRTUAL TABLE passages USING fts5(
    body, parts, pairs, tokenize = '{TOKENIZER}', prefix = '{PREFIX_INDEX}');
"""


def create_schema(conn: sqlite3.Connection) -> None:
    """Create the tables in an empty database (the caller marks it current)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


def mark_current(conn: sqlite3.Connection) -> None:
    """Stamp the database as memoryd's index at this schema version."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def schema_problem(conn: sqlite3.Connection) -> str | None:
    """None when ``conn`` is memoryd's index at this version, "" when it is an empty
    database, else why it must be rebuilt (not ours, or an older version)."""
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if (app_id, version) == (APPLICATION_ID, SCHEMA_VERSION):
        return None
    if app_id == APPLICATION_ID:
        return f"schema version {version}, this memoryd uses {SCHEMA_VERSION}"
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    return "foreign schema" if app_id or version or tables else ""


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
