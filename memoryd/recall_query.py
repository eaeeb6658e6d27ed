"""The recall query language: plain words by default, FTS5 syntax on request, and the
budget of a query.

Plain words: every word must match, in any order; ``"a phrase"`` matches the phrase;
``word*`` matches a prefix. Each term is quoted for FTS5, so no input is ever read as
FTS5 syntax (docs/design.md#recall). A query is bounded before it runs (its length, its
terms, prefixes of at least two characters) and while it runs (a time budget, enforced
by SQLite's progress handler), so that no query can burn minutes of CPU
(docs/design.md#recall-budget).
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from memoryd.errors import MemorydError, UsageError

ROLES = ("user", "assistant")
MAX_LIMIT = 1000
MAX_QUERY_CHARS = 1000
"""The longest query taken, in characters."""
MAX_TERMS = 16
"""The most words and phrases a plain query may have (each one narrows the search)."""
MIN_PREFIX = 2
"""Characters a prefix term needs before its ``*``: ``a*`` expands to most of the index."""
QUERY_SECONDS = 10.0
"""The default time budget of one query; past it, the query is stopped."""
MAX_QUERY_SECONDS = 3600.0
PROGRESS_STEPS = 1000
"""SQLite virtual-machine steps between two looks at the clock (microseconds)."""
TERM_RE = re.compile(r'"(?P<phrase>[^"]*)"?|(?P<word>[^\s"]+)')
RAW_SHORT_PREFIX = re.compile(r'(?<![\w"])\w\*|"[^\w"]*\w?[^\w"]*"\s*\*')
"""A one-character prefix in FTS5 syntax: ``a*`` or ``"a" *``."""


class QueryStopped(MemorydError):
    """A recall query ran past its time budget, or its caller cancelled it: stopped, with
    nothing changed (exit 1)."""


def check_limit(limit: int) -> None:
    """Refuse a hit limit outside 1..MAX_LIMIT (UsageError)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit must be a whole number from 1 to {MAX_LIMIT} (got {limit!r})")


def check_timeout(seconds: float) -> None:
    """Refuse a time budget that is not above 0 and at most an hour (UsageError)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise UsageError(f"--timeout must be a number of seconds (got {seconds!r})")
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_QUERY_SECONDS):
        raise UsageError(
            f"--timeout must be above 0 and at most {MAX_QUERY_SECONDS:g} seconds (got {seconds:g})"
        )


def plain_terms(query: str) -> list[str]:
    """The FTS5 terms of a plain query, each a quoted string (pure).

    Terms without a letter or digit are left out: they cannot match a word. An unbalanced
    quote runs to the end of the query. A prefix term (``word*``) shorter than
    :data:`MIN_PREFIX` characters, or more than :data:`MAX_TERMS` terms, is refused
    (UsageError).
    """
    terms = []
    for found in TERM_RE.finditer(query):
        text = found["phrase"] if found["phrase"] is not None else found["word"]
        prefix = found["word"] is not None and text.endswith("*")
        text = text.rstrip("*") if prefix else text
        if not any(char.isalnum() for char in text):
            continue
        if prefix and sum(char.isalnum() for char in text) < MIN_PREFIX:
            raise UsageError(
                f"the prefix {text}* is too short: a prefix needs at least {MIN_PREFIX} "
                "letters or digits"
            )
        terms.append(f'"{text}"' + ("*" if prefix else ""))
    if len(terms) > MAX_TERMS:
        raise UsageError(
            f"the query has {len(terms)} words and phrases; at most {MAX_TERMS} are searched "
            "together"
        )
    return terms


def to_match(query: str, raw: bool = False) -> str:
    """The FTS5 MATCH expression for ``query``; UsageError when there is nothing to search.

    With ``raw``, the query is FTS5 syntax, checked against an empty table first so that
    a syntax error is one clear line, never mistaken for a damaged index.
    """
    if "\x00" in query:
        raise UsageError("the query contains a NUL character")
    if len(query) > MAX_QUERY_CHARS:
        raise UsageError(
            f"the query is {len(query):,} characters long; at most {MAX_QUERY_CHARS:,} are taken"
        )
    if raw:
        if not query.strip():
            raise UsageError("the query is empty")
        if RAW_SHORT_PREFIX.search(query):
            raise UsageError(
                f"--raw query: a prefix needs at least {MIN_PREFIX} letters or digits before *"
            )
        _check_syntax(query)
        return query
    terms = plain_terms(query)
    if not terms:
        raise UsageError("the query has no words to search for (it needs a letter or a digit)")
    return " AND ".join(terms)


def _check_syntax(match: str) -> None:
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5(body)")
        probe.execute("SELECT rowid FROM probe WHERE probe MATCH ?", (match,)).fetchall()
    except sqlite3.Error as exc:
        raise UsageError(f"--raw query: {exc}") from None
    finally:
        probe.close()


@contextmanager
def budget(
    conn: sqlite3.Connection, deadline: float, cancelled: Callable[[], bool] | None = None
) -> Iterator[None]:
    """Stop the statements run on ``conn`` inside once ``time.monotonic()`` passes
    ``deadline`` or ``cancelled()`` is true: they end with :class:`QueryStopped`.

    SQLite's progress handler is asked every :data:`PROGRESS_STEPS` steps; a true answer
    makes the statement raise ``OperationalError: interrupted``.
    """

    def stop() -> bool:
        return time.monotonic() > deadline or (cancelled is not None and cancelled())

    conn.set_progress_handler(stop, PROGRESS_STEPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if "interrupt" not in str(exc):
            raise
        if cancelled is not None and cancelled():
            raise QueryStopped("the query was cancelled") from None
        raise QueryStopped(
            "the query ran past its time budget and was stopped: use fewer words, longer "
            "prefixes or --role, or a longer --timeout"
        ) from None
    finally:
        conn.set_progress_handler(None, 0)
