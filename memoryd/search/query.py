"""The recall query language: plain words by default, FTS5 syntax on request, and the
budget of a query.

Plain words: a question as a model would ask it. Stop words are left out; the passages
that hold every remaining word come first, then those that hold any, each group ranked
by BM25. ``"a phrase"`` matches the phrase; ``word*`` matches a prefix; a camelCase word
also matches its parts, and a few common abbreviations their long form. Each term is
quoted for FTS5, so no input is ever read as FTS5 syntax (docs/design.md#recall-ranking).
A query is bounded before it runs (its length, its terms, prefixes of at least two
characters) and while it runs (a time budget, enforced by SQLite's progress handler), so
that no query can burn minutes of CPU (docs/design.md#recall-budget).
"""

from __future__ import annotations

import math
import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from memoryd import strict_json
from memoryd.errors import MemorydError, UsageError
from memoryd.search.text import camel_parts, cjk_phrase, cjk_run, has_cjk
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Final

ROLES = ("user", "assistant")
MAX_LIMIT = 1000
MAX_QUERY_CHARS = 1000
"""The longest query taken, in characters."""
MAX_TERMS = 16
"""The most words and phrases a plain query may have (each one narrows the search)."""
MAX_RAW_TERMS = 48
"""The most words an FTS5 (``--raw``) query may hold: OR-ed words common in every message
each make BM25 score most of the index (docs/design.md#recall-cost)."""
RAW_OPERATORS = frozenset({"AND", "OR", "NOT", "NEAR"})
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
TERM_RE = re.compile(r'"(?P<phrase>[^"]*)"?|(?P<word>[^\s"]+)')
_STOP_WORDS_TEXT = """
    a about above after again all am an and any are as at be been before being below
    between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself of off on once only or other our ours ourselves
    out over own please same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
"""English function and question words: in a question they say nothing about the answer.
"no", "not" and "nor" are kept: they matter in error texts."""
ABBREVIATIONS = (
    ("arg", "argument"),
    ("args", "arguments"),
    ("auth", "authentication"),
    ("config", "configuration"),
    ("db", "database"),
    ("dir", "directory"),
    ("env", "environment"),
    ("err", "error"),
    ("exc", "exception"),
    ("fn", "function"),
    ("func", "function"),
    ("impl", "implementation"),
    ("info", "information"),
    ("init", "initialize"),
    ("msg", "message"),
    ("param", "parameter"),
    ("params", "parameters"),
    ("repo", "repository"),
    ("src", "source"),
    ("tmp", "temporary"),
)
"""Short forms that code and prose use for the same thing; a word matches both forms."""
_OTHER_FORMS = {
    word: tuple(other for pair in ABBREVIATIONS if word in pair for other in pair if other != word)
    for pair in ABBREVIATIONS
    for word in pair
}
_EDGE_PUNCTUATION = ".,;:!?()[]{}'`<>"
_IDENTIFIER = re.compile(r"[^\W_][_./:-]+[^\W_]")


class QueryStopped(MemorydError):
    """A recall query ran past its time budget, or its caller cancelled it: stopped, with
    nothing changed (exit 1)."""


class Query(Value):
    """A parsed query: FTS5 expressions, one per term, or one raw FTS5 expression."""

    __slots__ = ("exact", "raw", "terms")

    def __init__(
        self, terms: tuple[str, ...], raw: bool = False, exact: tuple[str, ...] = ()
    ) -> None:
        self.terms: Final = terms
        self.raw: Final = raw
        self.exact: Final = exact
        """The identifiers of the query as written; passages that hold them whole rank
        first."""

    @property
    def all_words(self) -> str:
        """The expression every term must match (the raw expression as it is)."""
        return self.terms[0] if self.raw else " AND ".join(self.terms)

    def any_word(self, terms: tuple[str, ...]) -> str:
        """The expression any of ``terms`` matches."""
        return " OR ".join(terms)


def parse_request(
    query: str, raw: bool, role: str | None, roles: tuple[str, ...], limit: int, timeout: float
) -> Query:
    """The parsed ``query`` of a recall, its other arguments checked first: ``role`` one
    of ``roles``, ``limit`` and ``timeout`` in range (UsageError)."""
    if role is not None and role not in roles:
        raise UsageError(f"role {role!r} is not one of {', '.join(roles)}")
    check_limit(limit)
    check_timeout(timeout)
    return to_match(query, raw)


def check_context(before: int, after: int) -> None:
    """Refuse a count of messages around an expanded one that is below 0 (UsageError)."""
    for name, value in (("before", before), ("after", after)):
        if not isinstance(value, int) or value < 0:
            raise UsageError(f"--{name} must be 0 or more (got {value})")


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


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def cjk_term(text: str, prefix: bool = False) -> str | None:
    """The expression that finds the CJK runs of ``text`` inside longer runs: each run as
    the phrase of its character pairs in the ``pairs`` column, all of them (a lone
    character as the start of a pair); None when ``text`` has no such run (pure)."""
    if not has_cjk(text):
        return None
    runs = cjk_run().findall(text)
    phrases = [
        _quoted(cjk_phrase(run)) + ("*" if len(run) == 1 or (prefix and run is runs[-1]) else "")
        for run in runs
    ]
    return " AND ".join(f"pairs : {phrase}" for phrase in phrases)


def _with_cjk(term: str, text: str, prefix: bool = False) -> str:
    """``term``, or also the pairs of its CJK runs (docs/design.md#recall-scripts)."""
    pairs = cjk_term(text, prefix)
    return term if pairs is None else f"({term} OR ({pairs}))"


def word_term(word: str) -> str:
    """The FTS5 expression of one plain word: the word itself, or any of its forms (its
    camelCase parts as a phrase, the other form of an abbreviation, the character pairs
    of its CJK runs) (pure)."""
    pairs = cjk_term(word)
    if pairs is not None:
        return f"({_quoted(word)} OR ({pairs}))"
    forms = [_quoted(word)]
    parts = camel_parts(word)
    if len(parts) > 1:
        forms.append(_quoted(" ".join(parts)))
    forms += [_quoted(other) for other in _OTHER_FORMS.get(word.lower(), ())]
    return forms[0] if len(forms) == 1 else "(" + " OR ".join(forms) + ")"


def plain_terms(query: str) -> list[str]:
    """The FTS5 terms of a plain query, each quoted, stop words left out, once each (pure).

    Terms without a letter or digit are left out: they cannot match a word. An unbalanced
    quote runs to the end of the query. Stop words are kept when the query has nothing
    else (``"where is it"``); inside a phrase they always are. A prefix term (``word*``)
    shorter than :data:`MIN_PREFIX` characters, or more than :data:`MAX_TERMS` terms, is
    refused (UsageError).
    """
    terms: list[str] = []
    stops: list[str] = []
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
        bare = text.strip(_EDGE_PUNCTUATION) or text
        if prefix:
            terms.append(_with_cjk(_quoted(text) + "*", text, prefix=True))
        elif found["phrase"] is not None:
            terms.append(_with_cjk(_quoted(text), text))
        elif bare.lower() in STOP_WORDS:
            stops.append(_quoted(bare))
        else:
            terms.append(word_term(bare))
    if len(terms) > MAX_TERMS:
        raise UsageError(
            f"the query has {len(terms)} words and phrases; at most {MAX_TERMS} are searched "
            "together"
        )
    once: dict[str, str] = {}
    for term in terms or stops:
        once.setdefault(term.lower(), term)
    return list(once.values())


def identifiers(query: str) -> list[str]:
    """The plain words of ``query`` that are identifiers: with ``_``, ``.``, ``/``, ``:`` or
    ``-`` between letters or digits, or a camelCase change (pure)."""
    found = []
    for match in TERM_RE.finditer(query):
        word = (match["word"] or "").strip(_EDGE_PUNCTUATION)
        if _IDENTIFIER.search(word) or len(camel_parts(word)) > 1:
            found.append(word)
    return list(dict.fromkeys(found))


def to_match(query: str, raw: bool = False) -> Query:
    """The parsed ``query``; UsageError when there is nothing to search.

    With ``raw``, the query is FTS5 syntax, checked against an empty table first so that
    a syntax error is one clear line, never mistaken for a damaged index.
    """
    if "\x00" in query:
        raise UsageError("the query contains a NUL character")
    query = strict_json.valid_text(query)  # a lone surrogate (from argv, say) searches as U+FFFD
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
        words = [w for w in re.findall(r"\w+", query) if w not in RAW_OPERATORS]
        if len(words) > MAX_RAW_TERMS:
            raise UsageError(
                f"--raw query: {len(words)} words; at most {MAX_RAW_TERMS} are searched together"
            )
        _check_syntax(query)
        return Query((query,), raw=True)
    terms = plain_terms(query)
    if not terms:
        raise UsageError("the query has no words to search for (it needs a letter or a digit)")
    return Query(tuple(terms), exact=tuple(identifiers(query)))


def _check_syntax(match: str) -> None:
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5(body, parts, pairs)")
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
