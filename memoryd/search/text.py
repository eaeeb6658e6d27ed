"""How recall cuts archived text for its index and reads identifiers (pure).

A message is indexed as passages of about ``PASSAGE_CHARS`` characters that overlap, so
that a long message ranks for what each part of it says, not diluted by its length, and
a phrase that crosses a cut is still whole in one passage. camelCase identifiers are also
indexed by their parts (docs/design.md#recall-ranking).
"""

from __future__ import annotations

import re

PASSAGE_CHARS = 1000
"""A message up to a quarter more than this is one passage (:func:`passage_spans`)."""
OVERLAP_CHARS = 120
"""What each passage repeats of the previous one: a phrase this long is never cut."""
MAX_PASSAGES = 1 << 16
"""Passages of one message at most; the last one holds the rest of the text."""

_HAS_CAMEL = re.compile(r"[A-Z](?:(?<=[a-z0-9][A-Z])|(?=[a-z])(?<=[A-Z]{3}))")
"""An upper-case letter after a lower-case one or a digit (readConfig), or the first of a
word after an acronym (HTTPServer). Written to find an upper-case letter first: several
times faster than the plain alternation on text that has none."""
_WORD = re.compile(r"\w+")
CJK_RUN_PATTERN = (
    "[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u309f\u30a1-\u30fa\u30fc-\u30ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f"
    "\U00020000-\U0003134f]+"
)
"""A run of characters of a script written without spaces between words: Thai, Lao,
Myanmar, Khmer, Japanese kana, CJK ideographs, Hangul (whose words carry their particles)."""
_cjk_run: re.Pattern[str] | None = None


def cjk_run() -> re.Pattern[str]:
    """:data:`CJK_RUN_PATTERN`, compiled when first needed: the re module compiles its
    ranges a character at a time, about 8 ms, more than a query spends on the rest of
    this module (docs/design.md#startup)."""
    global _cjk_run
    if _cjk_run is None:
        _cjk_run = re.compile(CJK_RUN_PATTERN)
    return _cjk_run


_CAMEL_PART = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def passages(text: str) -> list[str]:
    """``text`` cut into overlapping passages of ``PASSAGE_CHARS`` (see
    :func:`passage_spans`)."""
    return [text[start:end] for start, end in passage_spans(text, PASSAGE_CHARS)]


def passage_spans(
    text: str, size: int = PASSAGE_CHARS, overlap: int = OVERLAP_CHARS
) -> list[tuple[int, int]]:
    """Where ``text`` is cut into passages of about ``size`` characters, at whitespace:
    (start, end) pairs, in order, each starting at a word and overlapping the previous
    one by about ``overlap`` characters (pure).

    A text up to ``size`` plus a quarter is one passage (an empty text too); together the
    passages cover the text.
    """
    if len(text) <= size + size // 4:
        return [(0, len(text))]
    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        end = start + size
        if end + size // 4 >= len(text) or len(spans) == MAX_PASSAGES - 1:
            spans.append((start, len(text)))
            return spans
        space = text.rfind(" ", start + size // 2, end)
        newline = text.rfind("\n", start + size // 2, end)
        end = max(space, newline) + 1 or end
        spans.append((start, end))
        start = _word_start(text, end - overlap, end)


def _word_start(text: str, at: int, limit: int) -> int:
    """The first word start at or after ``at`` (and before ``limit``), else ``limit``."""
    if text[at - 1].isspace():
        return at
    for index in range(at, limit):
        if text[index].isspace():
            return index + 1
    return limit


def has_cjk(text: str) -> bool:
    """True when ``text`` holds a character of a script written without spaces (pure)."""
    return not text.isascii() and cjk_run().search(text) is not None


def cjk_bigrams(text: str) -> str:
    """The overlapping character pairs of every run of :data:`CJK_RUN_PATTERN` in ``text``, then
    the run's last character, space-separated, a run a line ("保持只读" → ``保持 持只 只读
    读``); "" when there is none (pure). A word inside a run is then found as the phrase
    of its pairs (docs/design.md#recall-scripts)."""
    if text.isascii():
        return ""
    runs = []
    for found in cjk_run().finditer(text):
        run = found.group()
        runs.append(" ".join([*(run[i : i + 2] for i in range(len(run) - 1)), run[-1]]))
    return "\n".join(runs)


def cjk_phrase(word: str) -> str:
    """The phrase of pairs a CJK ``word`` is indexed as ("只读" → ``只读``; "配置文件" →
    ``配置 置文 文件``); a single character stays itself (pure)."""
    if len(word) == 1:
        return word
    return " ".join(word[i : i + 2] for i in range(len(word) - 1))


def cjk_snippet(body: str, marked: str, width: int = 24) -> str:
    """A snippet of ``body`` around the first CJK word a query matched by its pairs, the
    word between ``**``; "" when none is found (pure). ``marked`` is FTS5's snippet of the
    pairs column with the matched pairs between ``\x02`` and ``\x03``."""
    spans = re.findall("\x02([^\x03]*)\x03", marked)
    tokens = [token for span in spans for token in span.split()]
    if not tokens:
        return ""
    word = tokens[0]
    for token in tokens[1:]:
        if len(token) != 2 or token[0] != word[-1]:
            break
        word += token[1]
    at = body.find(word)
    if at < 0:
        return ""
    start, end = max(0, at - width), min(len(body), at + len(word) + width)
    text = body[start:at] + f"**{word}**" + body[at + len(word) : end]
    return ("…" if start else "") + " ".join(text.split()) + ("…" if end < len(body) else "")


def camel_parts(word: str) -> list[str]:
    """The parts of a camelCase or PascalCase ``word`` (``HTTPServerError`` → HTTP, Server,
    Error); a word without a case change is one part."""
    if not _HAS_CAMEL.search(word):
        return [word]
    return _CAMEL_PART.findall(word)


def identifier_parts(text: str) -> str:
    """The parts of every camelCase identifier in ``text``, each identifier's parts once,
    space-separated (``SegmentMismatchError`` → ``Segment Mismatch Error``); "" if none."""
    if text.islower() or not _HAS_CAMEL.search(text):  # islower: no capital, at C speed
        return ""
    found: dict[str, None] = {}
    for word in _WORD.findall(text):
        if _HAS_CAMEL.search(word):
            parts = camel_parts(word)
            if len(parts) > 1:
                found[" ".join(parts)] = None
    return "\n".join(found)


_TOKEN = re.compile(r"\S+")


def identifier_snippet(body: str, marked_parts: str, tokens: int) -> str:
    """A snippet of ``body`` centred on the identifier whose parts a query matched, the
    identifier whole between ``**``; "" when no identifier of ``body`` fits (pure).

    ``marked_parts`` is FTS5's snippet of the ``parts`` column with the matched parts
    between ``\\x02`` and ``\\x03``: a query for ``Timeout`` matches ``FooBarTimeoutError``
    by its parts only, and FTS5's snippet of the text then marks nothing. About ``tokens``
    whitespace-separated words are shown, ``…`` where the text goes on.
    """
    wanted = [
        [part.lower() for part in line.replace("\x02", "").replace("\x03", "").split()]
        for line in marked_parts.replace("…", " ").split("\n")
        if "\x02" in line
    ]
    words = [
        (found, [part.lower() for part in camel_parts(found[0])]) for found in _WORD.finditer(body)
    ]
    lines = [line for line in wanted if line]
    # An identifier with exactly a line's parts first; else one that holds a line's parts
    # in order (a line FTS5 cut at the snippet's edge).
    for matches in (list.__eq__, _contiguous):
        for found, parts in words:
            if len(parts) > 1 and any(matches(line, parts) for line in lines):
                return _window(body, found.start(), found.end(), tokens)
    return ""


def _contiguous(needle: list[str], haystack: list[str]) -> bool:
    size = len(needle)
    return any(haystack[i : i + size] == needle for i in range(len(haystack) - size + 1))


def _window(body: str, start: int, end: int, tokens: int) -> str:
    """About ``tokens`` words of ``body`` around ``body[start:end]``, which is marked."""
    spans = [(match.start(), match.end()) for match in _TOKEN.finditer(body)]
    at = next(index for index, (_, token_end) in enumerate(spans) if token_end > start)
    first = max(0, at - tokens // 2)
    last = min(len(spans), first + tokens) - 1
    first = max(0, min(first, last - tokens + 1))
    text = body[spans[first][0] : start] + f"**{body[start:end]}**" + body[end : spans[last][1]]
    return ("…" if first else "") + text + ("…" if last < len(spans) - 1 else "")
