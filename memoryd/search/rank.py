"""Ranking recall's hits: messages with a passage that holds every word first, then those
with any word; within each group, passages that hold the query's identifiers exactly as
written, then BM25 (docs/design.md#recall-ranking).

FTS5's ``bm25()`` scores every row that matches before the best can be chosen, so the
cost of a word grows with the passages that hold it. Two bounds keep a query fast on a
large archive: a word in half of the passages or more, whose BM25 weight FTS5 floors to
nothing, is left out of the any-word group when the query has other words; and each
group scores at most ``SCORED`` passages, the newest that match.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable

from memoryd.search.cost import check_cost
from memoryd.search.query import Query, budget
from memoryd.search.schema import PASSAGE_BITS, Layout
from memoryd.search.text import cjk_snippet, identifier_snippet
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Any, Final

SCORED = 40_000
"""Passages a group scores at most: the newest that match (all of them below that)."""
CANDIDATES = 50
"""Messages of a group looked at for exact identifiers, at least."""
SNIPPET_TOKENS = 16


class Ranked(Value):
    """A message that matches, with its best passage."""

    __slots__ = ("all_words", "identifiers", "match", "message", "passage", "score", "snippet")

    def __init__(
        self,
        message: int,
        passage: int,
        all_words: bool,
        score: float,
        identifiers: int,
        match: str,
        snippet: str = "",
    ) -> None:
        self.message: Final = message
        """``messages.rowid``."""
        self.passage: Final = passage
        self.all_words: Final = all_words
        """Its best passage holds every term of the query."""
        self.score: Final = score
        """BM25 of its best passage, higher is better."""
        self.identifiers: Final = identifiers
        """How many of the query's identifiers its best passage holds as written."""
        self.match: Final = match
        """The expression that found it (its snippet marks what this matches)."""
        self.snippet: Final = snippet

    def replaced(self, *, identifiers: int | None = None, snippet: str | None = None) -> Ranked:
        """This hit with ``identifiers`` or ``snippet`` (when given) instead."""
        return Ranked(
            self.message,
            self.passage,
            self.all_words,
            self.score,
            self.identifiers if identifiers is None else identifiers,
            self.match,
            self.snippet if snippet is None else snippet,
        )


def useful_terms(terms: tuple[str, ...], counts: list[int], passages: int) -> tuple[str, ...]:
    """The terms worth an any-word search: those that match, in fewer than half of the
    ``passages`` (whose BM25 weight is above FTS5's floor); when none is that rare, all
    that match (pure)."""
    matching = [(term, count) for term, count in zip(terms, counts, strict=True) if count]
    rare = tuple(term for term, count in matching if 2 * count < passages)
    return rare or tuple(term for term, _ in matching)


def held(body: str, exact: tuple[str, ...]) -> int:
    """How many identifiers of ``exact`` ``body`` holds as a whole word, in any case
    (``render_frame`` is not in ``test_render_frame_2``) (pure)."""
    return sum(
        1 for word in exact if re.search(rf"(?<!\w){re.escape(word)}(?!\w)", body, re.IGNORECASE)
    )


def search(
    conn: sqlite3.Connection,
    query: Query,
    *,
    layout: Layout,
    columns: str,
    role: str | None,
    limit: int,
    deadline: float,
    cancelled: Callable[[], bool] | None,
    scored: int = SCORED,
    archives: list[int] | None = None,
) -> list[tuple[Ranked, tuple[Any, ...]]]:
    """Run ``query`` on the index behind ``conn``, of ``layout``, within its budget (until
    ``time.monotonic()`` passes ``deadline`` or ``cancelled()``; a query whose prefixes
    stand for too many terms is refused before it runs): its best ``limit`` messages, best
    first, each with ``columns`` of the message (``m``) and its file (``a``)."""
    with budget(conn, deadline, cancelled):
        check_cost(conn, query, layout.kept_prefixes)
        ranked = rank(conn, query, role, limit, scored=scored, archives=archives)
        where = {
            row[0]: row[1:]
            for row in conn.execute(
                f"SELECT m.rowid, {columns} FROM messages m JOIN archives a ON a.id = m.archive_id "
                f"WHERE m.rowid IN ({', '.join('?' * len(ranked))})",
                [found.message for found in ranked],
            )
        }
    return [(found, where[found.message]) for found in ranked]


def rank(
    conn: sqlite3.Connection,
    query: Query,
    role: str | None,
    limit: int,
    *,
    scored: int = SCORED,
    archives: list[int] | None = None,
) -> list[Ranked]:
    """The best ``limit`` messages for ``query`` in the index behind ``conn``, best first:
    the all-word group, then (for a plain query of several terms) the any-word group; each
    group scores at most the newest ``scored`` passages that match. ``archives`` keeps the
    messages of those archives (files) only."""
    found = _group(conn, query, query.all_words, role, limit, scored, archives, all_words=True)
    if not (query.raw or len(query.terms) == 1 or len(found) >= limit):
        total = conn.execute("SELECT coalesce(sum(passages), 0) FROM archives").fetchone()[0]
        counts = [_count(conn, term, total // 2 + 1) for term in query.terms]
        terms = useful_terms(query.terms, counts, total)
        seen = {ranked.message for ranked in found}
        if terms:
            others = _group(
                conn,
                query,
                query.any_word(terms),
                role,
                limit + len(seen),
                scored,
                archives,
                all_words=False,
            )
            found += [ranked for ranked in others if ranked.message not in seen]
    return _with_snippets(conn, found[:limit])


def _count(conn: sqlite3.Connection, term: str, at_most: int) -> int:
    """How many passages ``term`` matches, counted up to ``at_most``."""
    count: int = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM passages WHERE passages MATCH ? LIMIT ?)",
        (term, at_most),
    ).fetchone()[0]
    return count


def _group(
    conn: sqlite3.Connection,
    query: Query,
    match: str,
    role: str | None,
    limit: int,
    scored: int,
    archives: list[int] | None = None,
    *,
    all_words: bool,
) -> list[Ranked]:
    """The best messages among the newest ``scored`` passages ``match`` finds: BM25's best
    ``limit`` (``CANDIDATES`` when the query has identifiers), exact identifiers first."""
    narrowed = role is not None or archives is not None
    join = f"JOIN messages m ON m.rowid = passages.rowid >> {PASSAGE_BITS} " if narrowed else ""
    where = "passages MATCH ?" + (" AND m.role = ?" if role else "")
    params: list[object] = [match, *([role] if role else [])]
    if archives is not None:
        where += " AND m.archive_id IN (SELECT value FROM json_each(?))"
        params.append(json.dumps(archives))
    wanted = max(limit, CANDIDATES) if query.exact else limit
    rows = conn.execute(
        f"SELECT rowid >> {PASSAGE_BITS} AS message, rowid, min(score) FROM ("
        f"SELECT passages.rowid AS rowid, bm25(passages) AS score FROM passages {join}"
        f"WHERE {where} ORDER BY passages.rowid DESC LIMIT ?) "
        "GROUP BY message ORDER BY min(score), message DESC LIMIT ?",
        [*params, scored, wanted],
    ).fetchall()
    found = [
        Ranked(message, passage, all_words, round(-score, 6), 0, match)
        for message, passage, score in rows
    ]
    if not query.exact:
        return found
    bodies = dict(
        conn.execute(
            f"SELECT rowid, body FROM passages WHERE rowid IN ({', '.join('?' * len(found))})",
            [ranked.passage for ranked in found],
        ).fetchall()
    )
    found = [
        ranked.replaced(identifiers=held(bodies.get(ranked.passage, ""), query.exact))
        for ranked in found
    ]
    return sorted(found, key=lambda ranked: -ranked.identifiers)


def _with_snippets(conn: sqlite3.Connection, found: list[Ranked]) -> list[Ranked]:
    """``found`` with their snippets: one statement per match expression, not one per
    hit, since each statement expands the query's prefixes again
    (docs/design.md#recall-cost). When the query matched only the parts of an identifier
    (``Timeout`` in ``FooBarTimeoutError``), FTS5 marks nothing in the text, and the
    snippet is centred on that identifier instead."""
    snippets: dict[int, str] = {}
    for match in dict.fromkeys(ranked.match for ranked in found):
        wanted = [ranked.passage for ranked in found if ranked.match == match]
        marks = ", ".join("?" * len(wanted))
        rows = conn.execute(
            f"SELECT rowid, snippet(passages, 0, char(2), char(3), '…', {SNIPPET_TOKENS}), "
            "snippet(passages, 1, char(2), char(3), '…', 64), "
            "snippet(passages, 2, char(2), char(3), '…', 64), body FROM passages "
            f"WHERE passages MATCH ? AND rowid IN ({marks})",
            [match, *wanted],
        ).fetchall()
        for rowid, text, parts, pairs, body in rows:
            text, parts, pairs, body = str(text), str(parts), str(pairs), str(body)
            marked = "\x02" in text
            text = text.replace("\x02", "**").replace("\x03", "**")
            if not marked and "\x02" in parts:
                text = identifier_snippet(body, parts, SNIPPET_TOKENS) or text
            elif not marked and "\x02" in pairs:
                text = cjk_snippet(body, pairs) or text
            snippets[int(rowid)] = text
    return [ranked.replaced(snippet=str(snippets.get(ranked.passage, ""))) for ranked in found]
