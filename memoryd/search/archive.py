"""Recall: search what memoryd summarized, and expand a message back to its original lines.

Both read the archive through its index (:mod:`memoryd.search.archive_index`), a cache that is
rebuilt from the archive whenever needed (docs/design.md#recall).
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memoryd import strict_json
from memoryd.discovery import find_workspaces
from memoryd.errors import InputError, MemorydError
from memoryd.search.archive_index import update_index, update_index_in_background, with_index
from memoryd.search.cost import QueryTooCostly
from memoryd.search.history import (
    MAX_PARSED_LINE,
    context,
    is_masked,
    is_summary,
    parse_message,
    read_lines,
    sources,
)
from memoryd.search.lazylog import LazyLog
from memoryd.search.query import (
    QUERY_SECONDS,
    ROLES,
    Query,
    QueryStopped,
    check_context,
    parse_request,
)
from memoryd.search.rank import search
from memoryd.search.schema import ARCHIVE
from memoryd.workspace import CONVERSATION, Workspace

log = LazyLog()

__all__ = ["Hit", "expand", "recall", "update_index", "update_index_in_background"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One archived message that matches a query."""

    workspace: Path
    id: str | None
    role: str | None
    timestamp: int | None
    """Milliseconds since the epoch, as the message carried it."""
    archive: str
    """The archive file, relative to the workspace (``.memoryd/archive/<name>``)."""
    offset: int
    """Byte offset of the original line in ``archive``."""
    length: int
    snippet: str
    """A piece of the text around the match, matched words between ``**``."""
    score: float
    """BM25 relevance of its best passage within its workspace: higher is better."""
    all_words: bool = True
    """Its best passage holds every word of the query (such hits come first)."""
    identifiers: int = 0
    """How many of the query's identifiers its best passage holds as written (within
    their group, such hits come first); not part of the JSON form."""

    def as_dict(self) -> dict[str, object]:
        """The JSON form ``memoryd recall --json`` prints (a folder name that is not UTF-8
        with U+FFFD for its bad bytes: JSON text cannot carry them)."""
        return {
            "workspace": strict_json.valid_text(str(self.workspace)),
            "id": self.id,
            "role": self.role,
            "timestamp": self.timestamp,
            "archive": self.archive,
            "offset": self.offset,
            "length": self.length,
            "snippet": self.snippet,
            "score": self.score,
            "all_words": self.all_words,
        }


def _search(
    conn: sqlite3.Connection,
    *,
    folder: Path,
    query: Query,
    role: str | None,
    limit: int,
    deadline: float,
    cancelled: Callable[[], bool] | None,
) -> list[Hit]:
    found = search(
        conn,
        query,
        layout=ARCHIVE,
        columns="m.message_id, m.role, m.timestamp, a.name, m.byte_offset, m.byte_length",
        role=role,
        limit=limit,
        deadline=deadline,
        cancelled=cancelled,
    )
    return [
        Hit(
            folder,
            ident,
            who,
            stamp,
            f".memoryd/archive/{name}",
            offset,
            length,
            ranked.snippet,
            ranked.score,
            ranked.all_words,
            ranked.identifiers,
        )
        for ranked, (ident, who, stamp, name, offset, length) in found
    ]


def workspaces_under(path: Path, max_depth: int = 4) -> list[Path]:
    """``path`` itself when it is a workspace, else every workspace below it."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(
            f"{path}: no such folder" if not path.exists() else f"{path}: is not a folder"
        )
    if (path / CONVERSATION).is_file() or (path / ".memoryd" / "archive").is_dir():
        return [path.absolute()]
    return [found.absolute() for found in find_workspaces(path, max_depth)]


def recall(
    path: Path | str,
    query: str,
    limit: int = 10,
    role: str | None = None,
    *,
    raw: bool = False,
    max_depth: int = 4,
    timeout: float = QUERY_SECONDS,
    cancelled: Callable[[], bool] | None = None,
) -> list[Hit]:
    """The archived messages that match ``query``, best first: those with a passage that
    holds every word, then those with any, each by BM25 (newer first on ties).

    ``path`` is a workspace or a folder of them. ``query`` is plain words (stop words
    left out; ``"a phrase"``; ``word*`` a prefix), or FTS5 syntax with ``raw=True``. Raises
    UsageError (exit 2) for a query with nothing to search, too long, with too many
    terms, a one-letter prefix or bad FTS5 syntax, a bad ``limit``, ``role`` or
    ``timeout``; QueryStopped (exit 1) when the search runs past ``timeout`` seconds or
    ``cancelled()`` turns true; MemorydError when a single workspace's index cannot be
    used.
    """
    parsed = parse_request(query, raw, role, ROLES, limit, timeout)
    deadline = time.monotonic() + timeout
    folders = workspaces_under(Path(path), max_depth)
    hits: list[Hit] = []
    for folder in folders:
        search = functools.partial(
            _search,
            folder=folder,
            query=parsed,
            role=role,
            limit=limit,
            deadline=deadline,
            cancelled=cancelled,
        )
        try:
            found = with_index(Workspace(folder), search)
        except (QueryStopped, QueryTooCostly):
            raise
        except MemorydError as exc:
            if len(folders) == 1:
                raise
            log.warning("recall_skipped_workspace", workspace=str(folder), reason=str(exc))
            continue
        hits.extend(hit for part in found for hit in part)
    hits.sort(
        key=lambda hit: (not hit.all_words, -hit.identifiers, -hit.score, -(hit.timestamp or 0))
    )
    return hits[:limit]


def _live_line(workspace: Workspace, message_id: str) -> tuple[str, int] | None:
    for line in read_lines(workspace, CONVERSATION):
        message = parse_message(line)
        if message is not None and message.get("id") == message_id:
            if is_masked(message):
                return None  # its original is in the archive (docs/design.md#masking)
            if is_summary(message):
                raise MemorydError(
                    f"{message_id}: is a summary of {message.get('summarizedCount')} messages "
                    f"({message.get('firstId')} … {message.get('lastId')}); expand those ids"
                )
            return CONVERSATION, line.offset
    return None


def _archived_line(conn: sqlite3.Connection, message_id: str) -> tuple[str, int] | None:
    row = conn.execute(
        "SELECT a.name, m.byte_offset FROM messages m JOIN archives a ON a.id = m.archive_id "
        "WHERE m.message_id = ? ORDER BY m.rowid DESC LIMIT 1",
        (message_id,),
    ).fetchone()
    return None if row is None else (f".memoryd/archive/{row[0]}", row[1])


def expand(workspace: Path | str, id: str, before: int = 0, after: int = 0) -> list[bytes]:
    """The original line of message ``id`` and up to ``before``/``after`` lines around it.

    Byte for byte as appended (each ends with ``\\n``), from the live conversation when
    the message is still there, else from the archive (its newest copy). Context follows
    the history across archive files; summaries are skipped. Raises InputError (exit 2)
    for an unknown id, a negative count or a folder that is no workspace (neither a
    conversation nor an archive); MemorydError (exit 1) for a message whose line is too
    long to read, or a conversation that is not a regular file.
    """
    check_context(before, after)
    folder = Path(workspace)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such workspace folder")
    ws = Workspace(folder.absolute())
    if not (ws.conversation.exists() or ws.archive_dir.exists()):
        raise InputError(f"{folder}: not a workspace (no {CONVERSATION} and no archive)")
    key = strict_json.valid_text(id)  # as the index holds it (docs/design.md#odd-text)
    where = _live_line(ws, id) or next(
        filter(None, with_index(ws, lambda conn: _archived_line(conn, key))), None
    )
    lines = context(ws, *where, before, after) if where else None
    if lines is None:
        raise _not_found(ws, id, folder)
    return lines


def _not_found(ws: Workspace, message_id: str, folder: Path) -> MemorydError:
    """Why expand found no line for ``message_id``: an over-size line that holds the id
    is archived but never parsed, and so not indexed (exit 1); else there is no such
    message, an id given wrong (InputError, exit 2)."""
    pattern = re.compile(
        rb'"id"\s*:\s*' + re.escape(json.dumps(message_id).encode("utf-8", "surrogatepass"))
    )
    for source in sources(ws):
        for line in read_lines(ws, source):
            if len(line.data) > MAX_PARSED_LINE and pattern.search(line.data):
                return MemorydError(
                    f"{message_id}: its line in {source} (at byte {line.offset}) is "
                    f"{len(line.data):,} bytes, over the {MAX_PARSED_LINE:,}-byte limit for "
                    "reading a message: it is kept byte for byte but not indexed, so expand "
                    "cannot return it"
                )
    return InputError(f"{message_id}: no message with this id in {folder} (live or archived)")
