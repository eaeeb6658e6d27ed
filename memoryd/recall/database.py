"""Opening an index file in WAL mode: apart from :mod:`memoryd.recall.archive_index`, so that a
source's index (memoryd/recall/sessions/store.py) opens without importing a workspace's index
machinery (docs/design.md#startup)."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse
from pathlib import Path

BUSY_TIMEOUT_S = 30.0


def connect_wal(path: Path, synchronous: str) -> sqlite3.Connection:
    """A connection to an index file in WAL mode with ``PRAGMA synchronous`` as given;
    the file must exist (``mode=rw``: SQLite never creates it, we did, with mode 0600; its
    -wal and -shm files take the database file's mode). Only a writer under its index's
    lock calls it: two connections turning a new file to WAL at once can each hold a
    shared lock and want an exclusive one, and SQLite then answers "database is locked"
    at once instead of waiting."""
    conn = sqlite3.connect(
        f"file:{urllib.parse.quote(os.fsencode(path))}?mode=rw",  # bytes: any folder name
        uri=True,
        timeout=BUSY_TIMEOUT_S,
        isolation_level=None,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        conn.close()
        raise
    return conn
