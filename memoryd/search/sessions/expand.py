"""``expand`` over a source: a message's original line and its neighbours, byte for byte,
from the copy said first or the one asked for (docs/design.md#sources)."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

from memoryd import strict_json
from memoryd.errors import InputError
from memoryd.search.query import check_context
from memoryd.search.sessions import store
from memoryd.search.sessions.access import resolve, with_source
from memoryd.search.sessions.layout import SPILL, WHOLE, copy_key, storable
from memoryd.search.sessions.reader import read_range
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final


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


class Pick(Value):
    """Which copy of a message ``expand`` prints when its id is in several files."""

    __slots__ = ("file", "session")

    def __init__(self, session: str | None = None, file: Path | str | None = None) -> None:
        self.session: Final = session
        self.file: Final = file


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
    root: Path,
    ident: str,
    before: int,
    after: int,
    pick: Pick,
    notes: list[str],
    conn: sqlite3.Connection,
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
        lines = {
            copy_key(read_range(store.file_path(root, row[3], row[4]), row[6], row[7]))
            for row in rows
        }
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
    a subagent's copy), or the one ``pick`` names. InputError (exit 2) for an unknown
    id."""
    check_context(before, after)
    said = notes if notes is not None else []
    targets = resolve(path, source)
    for target in targets:
        root = target.root
        look = functools.partial(_lines, root, id, before, after, pick or Pick(), said)
        lines = with_source(root, target.source, look)
        if lines is not None:
            return lines
    where = Path(path).expanduser()
    if pick is not None and (pick.session or pick.file):
        raise InputError(f"{id}: no message with this id in {where} for that --session/--file")
    raise InputError(f"{id}: no message with this id in {where}")
