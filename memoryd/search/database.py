"""Opening a recall index file: created private (mode 0600, never through a symlink),
written in WAL mode, read without a write lock, removed with its side files when it must
be rebuilt (docs/design.md#recall). Light on purpose: the index of another agent's
sessions opens without importing a workspace's index machinery (docs/design.md#startup).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path

BUSY_TIMEOUT_S = 30.0
SIDE_FILES = ("-wal", "-shm", "-journal")
CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL


def _open_new(path: Path) -> int:
    return os.open(path, CREATE_FLAGS | os.O_NOFOLLOW, 0o600)


def create_file(path: Path, open_new: Callable[[Path], int] = _open_new) -> None:
    """Create an empty index file, mode 0600 (it holds message text), unless it exists.

    A symlink or a stray entry at its name or at one of its side files is ours to
    replace, never to follow (nor to write into through SQLite's own -wal/-shm files).
    ``open_new`` creates the file (``O_CREAT | O_EXCL``, mode 0600) and returns its fd.
    """
    for name in (path, *(Path(f"{path}{suffix}") for suffix in SIDE_FILES)):
        if name.is_symlink() or (name.exists() and not name.is_file()):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
    with contextlib.suppress(FileExistsError):
        os.close(open_new(path))


def remove(path: Path) -> None:
    """Delete an index file and its side files (it is a cache: rebuilt on next use)."""
    for suffix in ("", *SIDE_FILES):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{suffix}")


def damaged(exc: sqlite3.DatabaseError, *, error_too: bool = False) -> bool:
    """True for errors that mean the file is not a usable index (never busy/locked);
    with ``error_too``, also a plain SQL error (a table missing from a file that says it
    is an index)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or (
        error_too and name == "SQLITE_ERROR"
    )


def _uri(path: Path) -> str:
    return f"file:{urllib.parse.quote(os.fsencode(path))}?mode=rw"  # bytes: any folder name


def connect_reader(path: Path) -> sqlite3.Connection:
    """A reader's connection to an index file in WAL mode: it takes no write lock, so it
    never waits for the writer nor fails on it; the file must exist (``mode=rw``)."""
    return sqlite3.connect(_uri(path), uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction (``BEGIN IMMEDIATE``): committed when the block ends, rolled
    back when it raises (unless SQLite already did, after a full disk)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def connect_wal(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection to an index file in WAL mode with ``PRAGMA synchronous`` as given;
    the file must exist (``mode=rw``: SQLite never creates it, we did, with mode 0600; its
    -wal and -shm files take the database file's mode). Only a writer under its index's
    lock calls it: two connections turning a new file to WAL at once can each hold a
    shared lock and want an exclusive one, and SQLite then answers "database is locked"
    at once instead of waiting."""
    conn = connect_reader(path)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn
