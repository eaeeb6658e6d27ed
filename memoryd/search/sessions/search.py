"""``recall`` over a source: the index brought up to date, then the same query language,
cost bound and ranking as a workspace's archive, a line repeated by subagents' files one hit
(docs/design.md#sources, docs/design.md#recall-cost).
``expand`` is :mod:`~memoryd.search.sessions.expand`."""

from __future__ import annotations

import functools
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from memoryd.search.query import QUERY_SECONDS, Query, parse_request
from memoryd.search.rank import search
from memoryd.search.schema import SESSIONS
from memoryd.search.sessions import store
from memoryd.search.sessions.access import (
    Target,
    archives_within,
    figures,
    resolve,
    skipped,
    skipped_note,
    update,
    with_source,
)
from memoryd.search.sessions.expand import Pick, expand_source
from memoryd.search.sessions.layout import copy_key, storable
from memoryd.search.sessions.reader import Changed, read_range
from memoryd.search.sessions.store import Progress
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final

__all__ = [
    "ROLES",
    "Pick",
    "SourceHit",
    "Target",
    "expand_source",
    "figures",
    "one_hit_per_line",
    "recall_source",
    "resolve",
    "update",
    "with_source",
]

SCORED = 10_000
"""Passages a group of hits scores at most, the newest that match: a source is often a
gigabyte of sessions, and BM25 costs about 3 µs a passage, so a query of words in most
messages costs ~30 ms of scoring at any size (a workspace's archive scores 40,000)."""
ROLES = ("user", "assistant", "tool", "summary", "info")
"""The roles of a source's messages: ``tool`` is a tool's output, ``summary`` a compaction
summary, ``info`` what the agent showed beside the conversation (Gemini CLI)."""
OVERFETCH = 2
"""Hits ranked per hit asked for: a line a subagent's file repeats is one hit of two."""


class SourceHit(Value):
    """One message of another agent's session that matches a query."""

    __slots__ = (
        "all_words",
        "copies",
        "file",
        "id",
        "identifiers",
        "length",
        "offset",
        "project",
        "role",
        "score",
        "session",
        "snippet",
        "source",
        "timestamp",
    )

    def __init__(
        self,
        source: str,
        session: str | None,
        project: str | None,
        id: str,
        role: str | None,
        timestamp: int | None,
        file: Path,
        offset: int,
        length: int,
        snippet: str,
        score: float,
        all_words: bool = True,
        identifiers: int = 0,
        copies: tuple[Path, ...] = (),
    ) -> None:
        self.source: Final = source
        """``claude-code``, ``codex`` or ``gemini``."""
        self.session: Final = session
        self.project: Final = project
        """The working folder when the session says it (else what its folder is named
        after)."""
        self.id: Final = id
        self.role: Final = role
        self.timestamp: Final = timestamp
        self.file: Final = file
        self.offset: Final = offset
        self.length: Final = length
        self.snippet: Final = snippet
        self.score: Final = score
        self.all_words: Final = all_words
        self.identifiers: Final = identifiers
        self.copies: Final = copies
        """Other files that hold the same line (same id, same bytes): a subagent's copy of
        the main session's line, say. ``file`` is where it was said first."""

    def with_copies(self, copies: tuple[Path, ...]) -> SourceHit:
        """This hit, naming ``copies`` as the other files that hold its line."""
        return SourceHit(
            self.source,
            self.session,
            self.project,
            self.id,
            self.role,
            self.timestamp,
            self.file,
            self.offset,
            self.length,
            self.snippet,
            self.score,
            self.all_words,
            self.identifiers,
            copies,
        )

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
    """``hits`` with the copies of a line (same id, the same line but for the marks of a
    copy, :func:`memoryd.search.sessions.layout.copy_key`: a subagent's file repeats its main
    session's lines) made one hit, where it was said first, naming the copies; lines that
    only share an id stay apart."""
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
                data = copy_key(read_range(hit.file, hit.offset, hit.length))
            except (OSError, Changed):
                data = f"{hit.file}".encode("utf-8", "surrogateescape")
            groups.setdefault(data, []).append(hit)
        for copies in groups.values():
            first = min(copies, key=_said_first)
            others = tuple(hit.file for hit in copies if hit is not first)
            kept[id(first)] = first.with_copies(others) if others else first
    return [kept[id(hit)] for hit in hits if id(hit) in kept]


def _search(
    target: Target,
    parsed: Query,
    limit: int,
    role: str | None,
    timeout: float,
    cancelled: Callable[[], bool] | None,
    notes: list[str],
    conn: sqlite3.Connection,
) -> list[SourceHit]:
    deadline = time.monotonic() + timeout  # the query's budget, not the index's pass
    names = skipped(conn)
    if target.within is not None:
        names = [name for name in names if name.startswith(target.within)]
    if note := skipped_note(names):
        notes.append(note)
    found = search(
        conn,
        parsed,
        layout=SESSIONS,
        columns="m.message_id, m.role, m.timestamp, a.name, a.session, coalesce(a.project, "
        "(SELECT b.project FROM archives b WHERE b.session = a.session "
        "AND b.project IS NOT NULL LIMIT 1)), m.byte_offset, m.byte_length, a.raw",
        role=role,
        limit=limit * OVERFETCH,
        deadline=deadline,
        cancelled=cancelled,
        scored=SCORED,
        archives=archives_within(conn, target.within),
    )
    hits = [
        SourceHit(
            target.source,
            session,
            project,
            ident,
            who,
            stamp,
            store.file_path(target.root, name, bytes_name),
            offset,
            length,
            ranked.snippet,
            ranked.score,
            ranked.all_words,
            ranked.identifiers,
        )
        for ranked, (ident, who, stamp, name, session, project, offset, length, bytes_name) in found
    ]
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
    :func:`memoryd.search.archive.recall` ranks them; the same refusals. A folder of
    several agents' folders is searched as all of them. What the caller should know
    beside the hits (files skipped, an index still being built) is added to ``notes``;
    ``progress`` is told how far a first index is (see :func:`with_source`)."""
    parsed = parse_request(query, raw, role, ROLES, limit, timeout)  # before any indexing
    said = notes if notes is not None else []
    hits: list[SourceHit] = []
    for target in resolve(path, source):
        search = functools.partial(_search, target, parsed, limit, role, timeout, cancelled, said)
        hits += with_source(target.root, target.source, search, said, progress)
    hits.sort(key=lambda hit: (not hit.all_words, -hit.identifiers, -hit.score))
    return hits[:limit]
