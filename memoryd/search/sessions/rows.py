"""The rows of one session file as a pass indexes it: its messages batched into the
index, Gemini CLI's last-wins updates, rewinds and checkpoints applied as they come
(docs/design.md#sources)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

from memoryd.search.schema import PASSAGE_BITS, Cut, insert_messages
from memoryd.search.sessions import gemini
from memoryd.search.sessions.prepare import LineTuple, MessageTuple, as_values
from memoryd.search.sessions.record import Record

BATCH = 2000


@dataclass(slots=True)
class FileRow:
    """The row of a session file being read, and what is pending for it."""

    id: int
    name: str
    session: str | None
    project: str | None
    offset: int
    lines: int = 0
    rows: list[tuple[object, ...]] = field(default_factory=list)
    texts: list[tuple[int, str, list[Cut] | None]] = field(default_factory=list)
    """(rowid, text, its passages when already cut) of each pending message."""
    ids: dict[str, tuple[int, int]] | None = None
    """Gemini CLI: message id -> (rowid, seq) of the live copy, loaded when first needed."""


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


class Pass:
    """One pass over one file: rows are batched, Gemini's updates applied in order."""

    def __init__(
        self, conn: sqlite3.Connection, source: str, row: FileRow, next_rowid: int, stem: str
    ) -> None:
        self.conn, self.source, self.row, self.next_rowid = conn, source, row, next_rowid
        self.added = self.removed = 0
        self.stem = stem

    def flush(self) -> None:
        row = self.row
        if row.rows:
            passages = insert_messages(self.conn, row.rows, row.texts)
            self.conn.execute(
                "UPDATE archives SET messages = messages + ?, passages = passages + ? WHERE id = ?",
                (len(row.rows), passages, row.id),
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

    def _unpend(self, rowid: int) -> bool:
        """Drop message ``rowid`` from the rows not yet written, if it is there: a message
        updated soon after it was added never reaches FTS5 twice (a delete there would
        write out every pending term, as a small segment to merge later)."""
        row = self.row
        if not row.texts or rowid < row.texts[0][0]:
            return False
        for at in range(len(row.texts) - 1, -1, -1):
            if row.texts[at][0] == rowid:
                del row.rows[at], row.texts[at]
                self.removed += 1
                return True
        return False

    def rewind(self, ident: str | None) -> None:
        """Remove ``ident`` and every later message (all of them when ``ident`` is unknown
        or None)."""
        live = self._live_ids()
        cut = live[ident][1] if ident in live else -1
        gone = [key for key, (_, seq) in live.items() if seq >= cut]
        self._remove([live.pop(key)[0] for key in gone])

    def add(self, message: MessageTuple, offset: int, length: int) -> None:
        ident, role, stamp, item, text, cuts = message
        seq = (offset << 16) | (item + 1)
        ident = ident or f"{self.stem}@{offset}" + (f"#{item}" if item >= 0 else "")
        if self.source == gemini.SOURCE:
            live = self._live_ids()
            if ident in live:
                old_rowid, seq = live[ident]
                if not self._unpend(old_rowid):
                    self._remove([old_rowid])
            live[ident] = (self.next_rowid, seq)
        row = self.row
        rowid = self.next_rowid
        row.rows.append((rowid, ident, role, stamp, row.id, offset, length, seq, item))
        row.texts.append((rowid, text, cuts))
        self.next_rowid += 1
        self.added += 1
        if len(row.rows) >= BATCH:
            self.flush()

    def take(self, record: Record, offset: int, length: int) -> None:
        """Index the messages of one line."""
        self.take_values(as_values(offset, length, record, cut=False))

    def take_values(self, line: LineTuple) -> None:
        """Index the messages of one line given as plain values (their passages cut or
        not: :data:`memoryd.search.sessions.prepare.LineTuple`)."""
        offset, length, _, session, project, rewind_to, reset, messages = line
        row = self.row
        row.session = row.session or session
        row.project = row.project or project
        if reset or rewind_to is not None:
            self.rewind(rewind_to)
        for message in messages:
            self.add(message, offset, length)
