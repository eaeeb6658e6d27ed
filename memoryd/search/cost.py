"""What a recall query costs before it runs, and the bound on it (docs/design.md#recall-cost).

FTS5 answers a prefix term (``conf*``) by reading every index term that starts with it:
in an archive of agent transcripts, full of ids, hashes and numbered names, a short
prefix stands for thousands of terms, and each statement that uses it (the ranking, each
snippet) reads them all again. In a workspace's index, prefixes of two and three
characters are served by the index's prefix index (one term each, whatever they stand
for); a longer prefix, and every prefix in the index of another agent's sessions (which
has no prefix index), is counted here, in the index's vocabulary, before the query runs.
A query whose prefixes stand for more than :data:`MAX_EXPANSIONS` terms in one index is
refused with one line saying which prefix and how to narrow it, so that every query that
runs is bounded by its cost, not only by its time budget.
"""

from __future__ import annotations

import re
import sqlite3

from memoryd.errors import UsageError
from memoryd.search.query import Query
from memoryd.search.schema import ARCHIVE

MAX_EXPANSIONS = 30_000
"""Index terms the prefixes of one query may stand for in one workspace's index."""
INDEXED_PREFIXES = ARCHIVE.kept_prefixes
"""The prefix lengths a workspace's index keeps whole (FTS5 ``prefix = '2 3'``): one term
each."""
_PREFIX = re.compile(r'"((?:[^"]|"")*)"\s*\*|([^\s"():^*]+)\s*\*')
_LAST_TOKEN = re.compile(r"[^\W_]\w*$|\w+$")


class QueryTooCostly(UsageError):
    """A query whose prefixes stand for too many index terms: refused before it runs,
    nothing read (exit 2)."""


def prefixes(query: Query, kept: tuple[int, ...] = INDEXED_PREFIXES) -> list[str]:
    """The prefixes of ``query``'s terms, lower-case, longer than the index keeps whole
    (``kept``: the lengths of its prefix index, none for a source's) (pure). A quoted
    prefix phrase counts by its last word."""
    found = []
    for expression in query.terms:
        for match in _PREFIX.finditer(expression):
            text = (match[1] or "").replace('""', '"') if match[1] is not None else match[2]
            last = _LAST_TOKEN.search(text.strip())
            if last and len(last[0]) > max(kept, default=0):
                found.append(last[0].lower())
    return found


def _after(prefix: str) -> str:
    """The smallest string greater than every string that starts with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def expansions(conn: sqlite3.Connection, prefix: str, at_most: int) -> int:
    """How many terms of the index behind ``conn`` start with ``prefix``, up to ``at_most``."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.vocab USING fts5vocab(main, passages, row)"
    )
    count: int = conn.execute(
        "SELECT count(*) FROM (SELECT term FROM temp.vocab WHERE term >= ? AND term < ? LIMIT ?)",
        (prefix, _after(prefix), at_most),
    ).fetchone()[0]
    return count


def check_cost(
    conn: sqlite3.Connection, query: Query, kept: tuple[int, ...] = INDEXED_PREFIXES
) -> None:
    """Refuse (:class:`QueryTooCostly`) a query whose prefixes stand for more than
    :data:`MAX_EXPANSIONS` terms of the index behind ``conn``, whose prefix index keeps the
    prefixes of the lengths ``kept`` whole."""
    left = MAX_EXPANSIONS
    counts: dict[str, int] = {}
    for prefix in dict.fromkeys(prefixes(query, kept)):
        counts[prefix] = expansions(conn, prefix, left + 1)
        left -= counts[prefix]
        if left < 0:
            worst = max(counts, key=lambda name: counts[name])
            raise QueryTooCostly(
                f"the query's prefixes stand for more than {MAX_EXPANSIONS:,} words of the "
                f"archive ({worst}* alone for {counts[worst]:,}): use longer prefixes, "
                "fewer of them, or whole words"
            )
