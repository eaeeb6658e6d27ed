"""The recall query language: plain words by default, FTS5 syntax on request.

Plain words: every word must match, in any order; ``"a phrase"`` matches the phrase;
``word*`` matches a prefix. Each term is quoted for FTS5, so no input is ever read as
FTS5 syntax (docs/design.md#recall).
"""

from __future__ import annotations

import re
import sqlite3

from memoryd.errors import UsageError

ROLES = ("user", "assistant")
MAX_LIMIT = 1000
TERM_RE = re.compile(r'"(?P<phrase>[^"]*)"?|(?P<word>[^\s"]+)')


def check_limit(limit: int) -> None:
    """Refuse a hit limit outside 1..MAX_LIMIT (UsageError)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"--limit must be a whole number from 1 to {MAX_LIMIT} (got {limit!r})")


def plain_terms(query: str) -> list[str]:
    """The FTS5 terms of a plain query, each a quoted string (pure).

    Terms without a letter or digit are left out: they cannot match a word. An unbalanced
    quote runs to the end of the query.
    """
    terms = []
    for found in TERM_RE.finditer(query):
        text = found["phrase"] if found["phrase"] is not None else found["word"]
        prefix = found["word"] is not None and text.endswith("*")
        text = text.rstrip("*") if prefix else text
        if any(char.isalnum() for char in text):
            terms.append(f'"{text}"' + ("*" if prefix else ""))
    return terms


def to_match(query: str, raw: bool = False) -> str:
    """The FTS5 MATCH expression for ``query``; UsageError when there is nothing to search.

    With ``raw``, the query is FTS5 syntax, checked against an empty table first so that
    a syntax error is one clear line, never mistaken for a damaged index.
    """
    if "\x00" in query:
        raise UsageError("the query contains a NUL character")
    if raw:
        if not query.strip():
            raise UsageError("the query is empty")
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
