"""Identifiers in text, found without an LLM (pure): file paths, URLs, issue and PR numbers,
versions, code in backticks, numbers with units and dates, each with the normalised key it
is matched on (docs/design.md#retention).

Every identifier holds a hint (a digit, ``/``, a backtick, ``#``, ``$`` or a dot before a
letter): the patterns run only on a few words around the hints, so plain prose costs a
few scans at C speed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, TypeVar

_T = TypeVar("_T")

ALL_KINDS = frozenset(("path", "url", "issue", "version", "code", "quantity", "date"))
KEYED_KINDS = ALL_KINDS - {"path", "url"}
"""The kinds whose keys all hold a digit, but code's (a substring of the text's own)."""

# Patterns that would start with a look-behind or \b take their first character first and
# look behind it after: re then skips at C speed to the characters a match can start with
# (tests/unit/test_retention_scan.py checks each against its plain form). Without IGNORECASE,
# the letter classes list what it would match (U+017F, the long s, is an "s").
_URL = re.compile(r"[hH](?<!\w[hH])[tT][tT][pP][sS\u017f]?://[^\s<>\"'`)\]]+")
_PATH = re.compile(
    r"[^\w/.-](?=[\w~-]*+[/.])((?<!:)(?:~|\.{1,2})?/?(?:[\w.-]++/)+[\w.-]*[\w]"
    r"|[\w-]++\.(?:py|pyi|js|jsx|ts|tsx|toml|json|jsonl|md|ya?ml|txt|rs|go|c|h|"
    r"cpp|hpp|java|kt|rb|sh|sql|csv|cfg|ini|lock|html|css|service|conf|log)\b)"
)
"""A path (group 1), matched with the character before it: a path starts after a character
that cannot be part of one (not after ":" for a path with a slash), and holds a "/" or a
"." (looked for first: most words are not paths). The text scanned starts with a newline,
for a path at its start."""
_ISSUE = re.compile(
    r"[#BIMPTbimpt\u0130\u0131](?:(?<=#)(?<![\w&]#)|(?<!\w.)(?i:(?<=i)ssue|(?<=b)ug|(?<=t)icket"
    r"|(?<=p)(?:r|ull request|ull)|(?<=m)(?:erge request|r))\s*#?\s*)(\d{1,7})\b"
)
"""A "#" not after a word or "&", or a word (issue, bug, ticket, pr, pull request, pull,
merge request, mr, in any letter case), then the number (group 1). The first character
is one that "#" or the first letter of a word matches in any case (U+0130 and U+0131 are
an "i")."""
_VERSION = re.compile(
    r"[v\d](?<![\w.][v\d])(?:(?<=v)\d+|(?<=\d)\d*)\.\d+\.\d+"
    r"(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?!\w|\.\w)"
)
"""The version, after a "v" or not (the match without its "v")."""
_VERSION_V = re.compile(r"[vV](?<![\w.][vV])(\d+\.\d+)(?!\w|\.\w)")
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
    # The number, then the first letter of a unit looked for before the units themselves.
    r"(\d(?<![\w.]\d)\d*(?:[.,]\d+)?)\s?"
    + f"(?=[{re.escape(''.join(sorted({unit[0] for unit in _UNITS})))}])("
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
_MONTH_NAMES = sorted(_MONTHS, key=len, reverse=True)
_MONTH = "|".join(_MONTH_NAMES)
_ISO_DATE = re.compile(r"(\d(?<!\w\d)\d{3})[-/](\d{1,2})[-/](\d{1,2})\b")
_MONTH_DAY_YEAR = re.compile(
    "([ADFJMNOSadfjmnos\u017f](?<!\\w.)(?i:"
    + "|".join(
        f"(?<={first})(?:{'|'.join(name[1:] for name in _MONTH_NAMES if name[0] == first)})"
        for first in sorted({name[0] for name in _MONTH_NAMES})
    )
    + r"))(?i:\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4}))\b"
)
"""A month's name (group 1; its first letter in any case, U+017F being an "s") not after a
word, then the day and the year."""
_DAY_MONTH_YEAR = re.compile(
    rf"(\d(?<!\w\d)\d?)(?:st|nd|rd|th)?\s+({_MONTH})\.?,?\s+(\d{{4}})\b", re.I
)


class _Patterns(NamedTuple):
    url: re.Pattern[str]
    path: re.Pattern[str]
    issue: re.Pattern[str]
    version: re.Pattern[str]
    version_v: re.Pattern[str]
    code: re.Pattern[str]
    quantity: re.Pattern[str]
    money: re.Pattern[str]
    iso_date: re.Pattern[str]
    month_day_year: re.Pattern[str]
    day_month_year: re.Pattern[str]


_PATTERNS = _Patterns(
    _URL, _PATH, _ISSUE, _VERSION, _VERSION_V, _CODE, _QUANTITY, _MONEY, _ISO_DATE,
    _MONTH_DAY_YEAR, _DAY_MONTH_YEAR,
)  # fmt: skip
_ASCII_PATTERNS = _Patterns(
    *(re.compile(p.pattern, (p.flags & ~re.UNICODE) | re.ASCII) for p in _PATTERNS)
)
"""The same patterns for ASCII text without the four separators ``\\s`` matches only in
Unicode (U+001C to U+001F), which they match alike: a character class test on ASCII
alone is cheaper."""


def _plain_ascii(text: str) -> bool:
    """Whether ``text`` is ASCII without U+001C to U+001F (``_ASCII_PATTERNS``)."""
    return text.isascii() and not any(char in text for char in "\x1c\x1d\x1e\x1f")


def normalise(text: str) -> str:
    """Case-folded text with runs of white space made one space (pure)."""
    return " ".join(text.casefold().split())


def _date_key(year: str, month: int, day: str) -> str:
    return f"{int(year):04d}-{month:02d}-{int(day):02d}"


_LETTER = re.compile(r"[A-Za-z]")
_EXTENSION = re.compile(r"\.[A-Za-z]\w{0,4}$")


def _looks_like_path(path: str) -> bool:
    if not _LETTER.search(path):
        return False
    return path[0] in "/~." or path.count("/") >= 2 or bool(_EXTENSION.search(path))


_HINT_CHAR_LIST = "0123456789/`#$"
_HINT_WORDS = re.compile(r"[\d/`#$.](?:(?<!\.)|(?=[A-Za-z]))\S*")
"""From the first hint of a word (a hint character, or a dot before a letter) to the
word's end: one match a word, found by a character-class scan."""
_HINT_DOT = re.compile(r"\.[A-Za-z]")
"""The only hint of a text without hint characters: a literal-led pattern, searched at
C speed."""
_ASCII_CLASSES = bytes(
    ord("#") if chr(byte) in _HINT_CHAR_LIST
    else ord(" ") if chr(byte) in " \t\n\r\f\v\x1c\x1d\x1e\x1f"
    else ord("a") if chr(byte).isascii() and chr(byte).isalpha()
    else byte if byte == ord(".")
    else ord("x")
    for byte in range(256)
)  # fmt: skip
"""ASCII text as the classes its hints are found by: a hint character is "#", a letter
"a", white space (``str``'s, four more than ``bytes``') a space, a dot itself."""
_WORDS_AROUND = 3
"""Words kept on each side of a hint: enough for "pull request 17" or "March 3, 2026"."""
_WORDS_AFTER = re.compile(rf"(\S*)(?:\s+\S+){{0,{_WORDS_AROUND}}}")
"""The rest of a hint's word (group 1), then ``_WORDS_AROUND`` words."""
_WORDS_BEFORE = re.compile(rf"[^ \n]*(?:[ \n][^ \n]*){{0,{_WORDS_AROUND}}}")
"""Matched on the text backwards from a hint: the rest of the hint's word, then
``_WORDS_AROUND`` words before it, each after a space or a newline."""
SEPARATOR = "\n\x00\n"
"""Between windows: no identifier pattern matches across a NUL."""


def windows(text: str) -> list[str]:
    """The parts of ``text`` around identifier hints, cut at white space, merged (pure).

    Only the first hint of a word counts: the others are followed by the same words.
    """
    if text.isascii():
        classes = text.encode().translate(_ASCII_CLASSES)
        if classes.find(b"#") < 0 and classes.find(b".a") < 0:
            return []  # most prose: two searches at C speed
        hints = _ascii_hints(classes)
    else:
        hints = _hints(text)
    found: list[str] = []
    backwards = text[::-1]
    start = end = word_end = -1
    for hint in hints:
        if hint < word_end:
            continue  # a dot in the word of the hint before it
        after = _WORDS_AFTER.match(text, hint + 1)
        assert after is not None  # every part of it may be empty
        word_end = after.end(1)
        if hint <= end:
            end = max(end, after.end())
            continue
        if end >= 0:
            found.append(text[start:end])
        before = _WORDS_BEFORE.match(backwards, len(text) - hint)
        assert before is not None  # every part of it may be empty
        start = len(text) - before.end()
        end = after.end()
    if end >= 0:
        found.append(text[start:end])
    return found


def _hints(text: str) -> list[int]:
    """Where hints start in a text that is not ASCII: the first of each word, or each
    dotted name's dot (:func:`_ascii_hints` for ASCII text)."""
    # A character-class scan costs ~10 ns a character; str's own search, far less: the
    # class runs only on a text that holds one of its characters.
    if any(char in text for char in _HINT_CHAR_LIST):
        return [m.start() for m in _HINT_WORDS.finditer(text)]
    return [m.start() for m in _HINT_DOT.finditer(text)]


def _ascii_hints(classes: bytes) -> list[int]:
    """Where hints start in an ASCII text, from its ``_ASCII_CLASSES``: the first of each
    word, or each dotted name's dot. Bytes' own search skips from hint to hint, and from
    each to its word's end."""
    hints = []
    mark, dot = classes.find(b"#"), classes.find(b".a")
    while mark >= 0 or dot >= 0:
        hint = mark if dot < 0 or 0 <= mark < dot else dot
        hints.append(hint)
        word_end = classes.find(b" ", hint)
        if word_end < 0:
            break
        if 0 <= mark < word_end:
            mark = classes.find(b"#", word_end)
        if 0 <= dot < word_end:
            dot = classes.find(b".a", word_end)
    return hints


def identifiers(text: str, kinds: frozenset[str] = ALL_KINDS) -> Iterator[tuple[str, str, str]]:
    """(kind, text, key) of every identifier of ``kinds`` in ``text`` (pure)."""
    for kind, shown, key, _offset in window_identifiers(SEPARATOR.join(windows(text)), kinds):
        yield kind, shown, key


def identifiers_by_position(texts: Sequence[str]) -> Iterator[tuple[str, str, str, int]]:
    """(kind, text, key, index of the text) of every identifier in ``texts`` (pure).

    The windows of every text are scanned as one string, each pattern once: on short
    messages, the cost of a call outweighs the scan.
    """
    parts: list[str] = []
    positions: list[int] = []
    starts: list[int] = []
    offset = 0
    for position, text in enumerate(texts):
        for window in windows(text):
            parts.append(window)
            positions.append(position)
            starts.append(offset)
            offset += len(window) + len(SEPARATOR)
    for kind, shown, key, at in window_identifiers(SEPARATOR.join(parts)):
        yield kind, shown, key, positions[bisect.bisect_right(starts, at) - 1]


def window_identifiers(
    text: str, kinds: frozenset[str] = ALL_KINDS
) -> Iterable[tuple[str, str, str, int]]:
    """(kind, text, key, offset) of every identifier of ``kinds`` in ``text``, kind by kind."""
    p = _ASCII_PATTERNS if _plain_ascii(text) else _PATTERNS
    if "url" in kinds:
        for match in p.url.finditer(text):
            url = match.group().rstrip(".,;:!?")
            yield "url", url, normalise(url).rstrip("/"), match.start()
    if "path" in kinds:
        for match in p.path.finditer("\n" + text):
            path = match.group(1)
            start, end = match.start(1) - 1, match.end() - 1
            # A path inside a URL; the look-back stays in the path's own window.
            before = max(0, start - 8, text.rfind("\x00", 0, start) + 1)
            if "://" in text[before:end] or path.startswith("//"):
                continue
            if "/" in path and not _looks_like_path(path):
                continue  # "and/or", "12/03/2026", "3/4"
            yield "path", path, normalise(path), start
    if "issue" in kinds:
        for match in p.issue.finditer(text):
            yield "issue", match.group().strip(), f"#{int(match.group(1))}", match.start()
    if "version" in kinds:
        for match in p.version.finditer(text):
            yield "version", match.group(), match.group().removeprefix("v"), match.start()
        for match in p.version_v.finditer(text):
            yield "version", match.group(), match.group(1), match.start()
    if "code" in kinds:
        for match in p.code.finditer(text):
            yield "code", match.group(1), normalise(match.group(1)), match.start()
    if "quantity" in kinds:
        for match in p.quantity.finditer(text):
            number = match.group(1).replace(",", ".")
            unit = _named(_UNITS, match.group(2))
            yield "quantity", match.group(), f"{number} {unit}", match.start()
        for match in p.money.finditer(text):
            amount = match.group(1).replace(",", ".")
            yield "quantity", match.group(), f"{amount} usd", match.start()
    if "date" in kinds:
        for match in p.iso_date.finditer(text):
            year, month, day = match.groups()
            if 1 <= int(month) <= 12 and 1 <= int(day) <= 31:
                yield "date", match.group(), _date_key(year, int(month), day), match.start()
        for match in p.month_day_year.finditer(text):
            month_name, day, year = match.groups()
            key = _date_key(year, _named(_MONTHS, month_name), day)
            yield "date", match.group(), key, match.start()
        for match in p.day_month_year.finditer(text):
            day, month_name, year = match.groups()
            key = _date_key(year, _named(_MONTHS, month_name), day)
            yield "date", match.group(), key, match.start()


def _named(names: dict[str, _T], name: str) -> _T:
    """The value of ``name`` (a unit or a month) as a pattern matched it: in any letter case,
    which includes letters whose lower case is not ASCII ("m\u017f", "Apr\u0130l")."""
    if (value := names.get(name.lower())) is not None:
        return value
    return next(v for key, v in names.items() if re.fullmatch(re.escape(key), name, re.I))


_DIGITS = re.compile(r"[0-9]+")


def digit_tag(text: str) -> str | None:
    """The first run of ASCII digits in ``text`` without its leading zeros (pure)."""
    run = _DIGITS.search(text)
    return (run.group().lstrip("0") or "0") if run else None


def keys_with_tags(text: str, tags: set[str]) -> set[str]:
    """The keys of the identifiers of ``KEYED_KINDS`` in ``text`` whose :func:`digit_tag`
    is in ``tags``, and maybe others (pure).

    A key of these kinds found in an ASCII window has the tag of a run of the window's
    digits (the issue number, the year, the amount, the version's first number are such
    runs; code is the window's own text), and a window's identifiers do not depend on the
    windows beside it: the other ASCII windows are not scanned.
    """
    # A window that holds such a run holds the tag as a substring: looking for that is
    # cheaper, and the few other windows it lets through are scanned to no harm.
    if text.isascii() and not any(tag in text for tag in tags):
        return set()
    chosen = [
        window
        for window in windows(text)
        if not window.isascii() or any(tag in window for tag in tags)
    ]
    found = window_identifiers(SEPARATOR.join(chosen), KEYED_KINDS)
    return {key for _kind, _shown, key, _offset in found}
