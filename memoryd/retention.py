"""The retention check: which details of the summarized messages a summary kept (pure).

Details are found without an LLM: identifiers (file paths, URLs, issue and PR numbers,
versions, code in backticks, numbers with units, dates), decisions and preferences (the
extractive summarizer's cue words) and open action items. Retention is the share of them
that a summary still carries, matched on normalised forms. What a summary lost can be put
back in a deterministic "Details kept verbatim" section that fits the summary's token cap
(:mod:`memoryd.verbatim`; docs/design.md#retention).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.summarizers.extractive import SENTENCE_END
from memoryd.summarizers.prompts import render_transcript

VERBATIM_HEADER = "Details kept verbatim:"
IDENTIFIER_KINDS = ("path", "url", "issue", "version", "code", "quantity", "date")
SENTENCE_KINDS = ("decision", "preference", "action")
MAX_ITEM_CHARS = 200
SENTENCE_OVERLAP = 0.6
"""Share of a sentence's content words a summary must hold for the sentence to count."""

_URL = re.compile(r"\bhttps?://[^\s<>\"'`)\]]+", re.IGNORECASE)
_PATH = re.compile(
    r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*[\w]"
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|toml|json|jsonl|md|ya?ml|txt|rs|go|c|h|"
    r"cpp|hpp|java|kt|rb|sh|sql|csv|cfg|ini|lock|html|css|service|conf|log)\b"
)
_ISSUE = re.compile(
    r"(?:\b(?=[ibtpmIBTPM#])(?:issue|bug|ticket|pr|pull request|pull|merge request|mr)\s*#?\s*"
    r"|(?<![\w&])#)(\d{1,7})\b",
    re.IGNORECASE,
)
_VERSION = re.compile(
    r"(?<![\w.])v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?)(?!\w|\.\w)"
)
_VERSION_V = re.compile(r"(?<![\w.])v(\d+\.\d+)(?!\w|\.\w)", re.IGNORECASE)
_CODE = re.compile(r"`([^`\n]{1,80})`")
_UNITS = {
    "ms": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "min": "min", "mins": "min", "minute": "min", "minutes": "min",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "day": "day", "days": "day", "week": "week", "weeks": "week",
    "kb": "kb", "mb": "mb", "gb": "gb", "tb": "tb", "kib": "kib", "mib": "mib", "gib": "gib",
    "%": "%", "percent": "%", "token": "tokens", "tokens": "tokens",
    "usd": "usd", "dollars": "usd", "eur": "eur", "px": "px", "rps": "rps",
    "req/s": "rps", "requests/s": "rps", "mhz": "mhz", "ghz": "ghz", "cores": "cores",
    "users": "users", "rows": "rows", "requests": "requests", "retries": "retries",
}  # fmt: skip
_QUANTITY = re.compile(
    r"(?<![\w.])(\d+(?:[.,]\d+)?)\s?("
    + "|".join(sorted((re.escape(u) for u in _UNITS), key=len, reverse=True))
    + r")(?![\w])",
    re.IGNORECASE,
)
_MONEY = re.compile(r"\$\s?(\d+(?:[.,]\d+)?)")
_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"),
            ("may",), ("june", "jun"), ("july", "jul"), ("august", "aug"),
            ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}  # fmt: skip
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ISO_DATE = re.compile(r"\b(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b")
_MONTH_DAY_YEAR = re.compile(
    rf"\b(?=[jfmasondJFMASOND])({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I
)
_DAY_MONTH_YEAR = re.compile(
    rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.I
)

_DECISION = re.compile(
    r"\b(decided|decision|agreed|we'?ll go with|going with|settled on|chose|choose)\b", re.I
)
_PREFERENCE = re.compile(
    r"\b(prefer|prefers|preference|always|never|please (use|keep|avoid|don'?t))\b", re.I
)
_ACTION = re.compile(
    r"\b(action item|todo|to-do|follow[- ]up|next step|deadline|need to|needs to|must)\b", re.I
)
_DONE = re.compile(r"\b(done|completed|finished|fixed|merged|shipped|resolved)\b", re.I)
_WORD = re.compile(r"[a-z0-9][a-z0-9_'-]*")
_STOP_TEXT = (
    "a an the and or but if then so to of in on at by for with from as is are was were be been "
    "it its this that these those we i you he she they our your their us me my not no yes do "
    "does did will would should could can may might must need needs about into over than also "
    "just all any some more most very let lets use using used have has had there here what which "
    "who when where why how decided decision agreed going go chose choose prefer always never "
    "please keep avoid don't dont todo action item follow up next step deadline settled"
)
_STOPWORDS = frozenset(_STOP_TEXT.split())
_ROLE_TAG = re.compile(r"^\[[a-z_]+\]\s*")
_SENTENCE_LEAD = re.compile(r"^[-*]\s+|^(user|assistant):\s+", re.I)


@dataclass(frozen=True, slots=True)
class Detail:
    """One detail that must survive a summary."""

    kind: str
    text: str
    """As it was written (what the verbatim section shows)."""
    key: str
    """The normalised form matched against a summary."""
    position: int
    """Index of the last message that mentions it (higher is more recent)."""
    mentions: int


@dataclass(frozen=True, slots=True)
class RetentionScore:
    """How much of the details a text kept: the share, and what it lost."""

    score: float
    total: int
    missing: tuple[Detail, ...]


def normalise(text: str) -> str:
    """Case-folded text with runs of white space made one space (pure)."""
    return " ".join(text.casefold().split())


def _date_key(year: str, month: int, day: str) -> str:
    return f"{int(year):04d}-{month:02d}-{int(day):02d}"


def _looks_like_path(path: str) -> bool:
    if not re.search(r"[A-Za-z]", path):
        return False
    return path[0] in "/~." or path.count("/") >= 2 or bool(re.search(r"\.[A-Za-z]\w{0,4}$", path))


# Every identifier holds one of these; the patterns run only on the text around them, so
# plain prose costs one character-class scan (docs/design.md#retention).
_HINT_CHAR_LIST = "0123456789/`#$"
_HINT_CHARS = re.compile(r"[\d/`#$]")
_HINT_DOT = re.compile(r"\.[A-Za-z]")
"""Two scans, not one alternation: a character class alone and a literal-led pattern
alone are each searched at C speed."""
_WORDS_AROUND = 3
"""Words kept on each side of a hint: enough for "pull request 17" or "March 3, 2026"
(``_WORDS_AFTER`` says the same)."""
_CUE_TEXT = (
    "decided decision agreed agree go going settled chose choose prefer prefers preference "
    "always never please action todo to-do follow follow-up next step deadline need needs "
    "must done completed complete finished finish fixed merged shipped resolved"
)
_CUE_WORDS = frozenset(_CUE_TEXT.split())
"""A word of every cue (the first or last of a phrase): a text with none of them holds no
decision, preference or action item, and is skipped before it is split into sentences."""
_PUNCTUATION = str.maketrans({c: " " for c in ".,;:!?()[]{}\"'`*_/"})


def _windows(text: str) -> Iterator[str]:
    """The parts of ``text`` around identifier hints, cut at white space, merged."""
    hints = [m.start() for m in _HINT_DOT.finditer(text)]
    # A character-class scan costs ~10 ns a character; str's own search, far less: the
    # class runs only on a text that holds one of its characters.
    if any(char in text for char in _HINT_CHAR_LIST):
        hints += [m.start() for m in _HINT_CHARS.finditer(text)]
    start = end = -1
    for hint in sorted(hints):
        if hint <= end:
            end = max(end, _after(text, hint + 1))
            continue
        if end >= 0:
            yield text[start:end]
        start = _before(text, hint)
        end = _after(text, hint + 1)
    if end >= 0:
        yield text[start:end]


_WORDS_AFTER = re.compile(r"\S*(?:\s+\S+){0,3}")


def _before(text: str, index: int) -> int:
    """Where the word ``_WORDS_AROUND`` words before ``index`` starts."""
    for _ in range(_WORDS_AROUND + 1):
        if index <= 0:
            return 0
        index = max(text.rfind(" ", 0, index), text.rfind("\n", 0, index))
    return index + 1


def _after(text: str, index: int) -> int:
    """Where the word ``_WORDS_AROUND`` words after ``index`` ends."""
    found = _WORDS_AFTER.match(text, index)
    return found.end() if found else index


def _has_cue(text: str) -> bool:
    return not _CUE_WORDS.isdisjoint(text.lower().translate(_PUNCTUATION).split())


def _identifiers(text: str) -> Iterator[tuple[str, str, str]]:
    """(kind, text, key) of every identifier in ``text``."""
    for kind, shown, key, _offset in _window_identifiers(_SEPARATOR.join(_windows(text))):
        yield kind, shown, key


_SEPARATOR = "\n\x00\n"
"""Between windows: no identifier pattern matches across a NUL."""


def _identifiers_by_position(texts: Sequence[str]) -> Iterator[tuple[str, str, str, int]]:
    """(kind, text, key, index of the text) of every identifier in ``texts``.

    The windows of every text are scanned as one string, each pattern once: on short
    messages, the cost of a call outweighs the scan.
    """
    windows: list[str] = []
    positions: list[int] = []
    starts: list[int] = []
    offset = 0
    for position, text in enumerate(texts):
        for window in _windows(text):
            windows.append(window)
            positions.append(position)
            starts.append(offset)
            offset += len(window) + len(_SEPARATOR)
    for kind, shown, key, at in _window_identifiers(_SEPARATOR.join(windows)):
        yield kind, shown, key, positions[bisect.bisect_right(starts, at) - 1]


def _window_identifiers(text: str) -> Iterable[tuple[str, str, str, int]]:
    for match in _URL.finditer(text):
        url = match.group().rstrip(".,;:!?")
        yield "url", url, normalise(url).rstrip("/"), match.start()
    for match in _PATH.finditer(text):
        path = match.group()
        if "://" in text[max(0, match.start() - 8) : match.end()] or path.startswith("//"):
            continue
        if "/" in path and not _looks_like_path(path):
            continue  # "and/or", "12/03/2026", "3/4"
        yield "path", path, normalise(path), match.start()
    for match in _ISSUE.finditer(text):
        yield "issue", match.group().strip(), f"#{int(match.group(1))}", match.start()
    for pattern in (_VERSION, _VERSION_V):
        for match in pattern.finditer(text):
            yield "version", match.group(), match.group(1), match.start()
    for match in _CODE.finditer(text):
        yield "code", match.group(1), normalise(match.group(1)), match.start()
    for match in _QUANTITY.finditer(text):
        number = match.group(1).replace(",", ".")
        unit = _UNITS[match.group(2).lower()]
        yield "quantity", match.group(), f"{number} {unit}", match.start()
    for match in _MONEY.finditer(text):
        yield "quantity", match.group(), f"{match.group(1).replace(',', '.')} usd", match.start()
    for match in _ISO_DATE.finditer(text):
        year, month, day = match.groups()
        if 1 <= int(month) <= 12 and 1 <= int(day) <= 31:
            yield "date", match.group(), _date_key(year, int(month), day), match.start()
    for match in _MONTH_DAY_YEAR.finditer(text):
        month_name, day, year = match.groups()
        yield (
            "date",
            match.group(),
            _date_key(year, _MONTHS[month_name.lower()], day),
            match.start(),
        )
    for match in _DAY_MONTH_YEAR.finditer(text):
        day, month_name, year = match.groups()
        yield (
            "date",
            match.group(),
            _date_key(year, _MONTHS[month_name.lower()], day),
            match.start(),
        )


def content_words(text: str) -> frozenset[str]:
    """The words of ``text`` that carry its meaning (no stop or cue words) (pure)."""
    return frozenset(w for w in _WORD.findall(text.casefold()) if w not in _STOPWORDS)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text) if len(s.strip()) >= 8]


def _sentence_kind(sentence: str) -> str | None:
    if _DECISION.search(sentence):
        return "decision"
    if _PREFERENCE.search(sentence):
        return "preference"
    if _ACTION.search(sentence) and not _DONE.search(sentence):
        return "action"
    return None


def _same_topic(a: frozenset[str], b: frozenset[str]) -> bool:
    return bool(a and b) and len(a & b) / min(len(a), len(b)) >= SENTENCE_OVERLAP


def extract_details(
    messages: Sequence[Mapping[str, Any]], previous_summary: str | None = None
) -> list[Detail]:
    """Every detail of ``messages`` (and of the summary before them) that must survive (pure).

    A detail mentioned several times counts once, with its mentions and its most recent
    position. An action item that a later sentence marks done is no longer open and is
    left out.
    """
    texts: list[str] = []
    if previous_summary:
        texts.append(previous_summary.replace(VERBATIM_HEADER, ""))
    for message in messages:
        rendered = render_transcript([message])
        texts.append(_ROLE_TAG.sub("", rendered, count=1))
    found: dict[tuple[str, str], Detail] = {}
    done_topics: list[tuple[int, frozenset[str]]] = []

    def note(kind: str, text: str, key: str, position: int) -> None:
        if not key:
            return
        slot = ("sentence" if kind in SENTENCE_KINDS else kind, key)
        known = found.get(slot)
        mentions = known.mentions + 1 if known else 1
        shown = known.text if known else text
        latest = max(position, known.position) if known else position
        found[slot] = Detail(kind, shown, key, latest, mentions)

    for kind, shown, key, position in _identifiers_by_position(texts):
        note(kind, shown, key, position)
    for position, text in enumerate(texts):
        if not _has_cue(text):
            continue
        for sentence in _sentences(text):
            sentence = _SENTENCE_LEAD.sub("", sentence, count=1)
            sentence_kind = _sentence_kind(sentence)
            if sentence_kind is None:
                if _DONE.search(sentence):
                    done_topics.append((position, content_words(sentence)))
                continue
            words = content_words(sentence)
            if len(words) < 2:
                continue
            shown = (
                sentence
                if len(sentence) <= MAX_ITEM_CHARS
                else sentence[: MAX_ITEM_CHARS - 1] + "…"
            )
            note(sentence_kind, shown, " ".join(sorted(words)), position)
    details = []
    for detail in found.values():
        if detail.kind == "action":
            words = frozenset(detail.key.split())
            if any(p > detail.position and _same_topic(words, w) for p, w in done_topics):
                continue
        details.append(detail)
    return details


class TextIndex:
    """A text prepared for matching details against it (:meth:`holds`)."""

    def __init__(self, text: str) -> None:
        self.text = normalise(text)
        self.keys = {key for _kind, _shown, key in _identifiers(text)}
        self.words = content_words(text)

    def holds(self, detail: Detail) -> bool:
        if detail.kind in SENTENCE_KINDS:
            words = frozenset(detail.key.split())
            return bool(words) and len(words & self.words) / len(words) >= SENTENCE_OVERLAP
        if detail.key in self.keys:
            return True
        if detail.kind in ("issue", "date", "quantity"):
            return False
        return detail.key in self.text


def score(details: Sequence[Detail], text: str) -> RetentionScore:
    """The share of ``details`` that ``text`` carries (1.0 when there is none) (pure)."""
    if not details:
        return RetentionScore(1.0, 0, ())
    index = TextIndex(text)
    missing = tuple(d for d in details if not index.holds(d))
    kept = len(details) - len(missing)
    return RetentionScore(round(kept / len(details), 4), len(details), missing)
