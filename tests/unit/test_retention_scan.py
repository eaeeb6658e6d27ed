"""The retention check's faster paths find what the plain ones find: the byte-level cue test
and hint scan of ASCII text, the rewritten identifier patterns, the cue phrases looked for
before any sentence is searched, the message text taken without rendering, and a summary
index that scans only the windows that can hold a wanted key."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memoryd.summary import retention as r
from memoryd.summary.extractive import SENTENCE_END
from memoryd.transcript import cues
from memoryd.transcript import details as identifiers
from memoryd.transcript.messages import read_messages

FRAGMENTS = (
    "issue #42", "PR 17", "pr17", "#0042", "bug 7", "v2.4.1", "V1.2", "v10.0", "1.2.3-RC1",
    "1.2.3-rc.1", "`#42`", "`2026-03-14`", "`x  y`", "src/a/b.py", "and/or", "3/4", "a.b.c",
    "https://Example.com/X/", "HTTPS://x.y/z", "hTTp://q", "250 ms", "250ms", "3,5 GB", "$30",
    "$ 3,50", "7%", "1.5 h", "2 cores", "2026-03-14", "2026/3/4", "0999-1-1", "March 14, 2026",
    "14th march 2026", "Mar. 3 2026", "3 sept 2026", "we decided to go", "We'll go with it",
    "please don't", "Please dont", "I prefer tabs", "prefers", "todo:", "To-Do", "follow up",
    "next step", "must-have", "need to migrate", "needs to", "Done.", "finished", "fixed!",
    "decided-ish", "going with", "settled on", "\u017fhipped", "\u0130ssue 5", "\u0131",
    "\u212a", "Σ", "é", "ß",
    "\u017fept", "Apr\u0130l", "m\u017f", "\u212aB", "\u201cdecided\u201d", "\u2014must",
    "do", "go",
    "٤٢", "#٤٢", "issue ٤٢", "٢٠٢٦-٠٣-١٤", "\u00a0", "\x1c", "\x1f", "\t", "\n", "\n\n", "\r",
    ". ", "! ", "? ", " ", "  ", "- ", "* ", "user: ", "Assistant: ", "the", "billing table",
    "Postgres", "x", "_", "-", "/", ".", "`", "$", "#", ":", "'", '"', "(", ")", "0", "9",
)  # fmt: skip

texts = st.lists(
    st.sampled_from(FRAGMENTS) | st.text(st.characters(codec="utf-8"), max_size=3), max_size=40
).map("".join)
ascii_texts = st.lists(
    st.sampled_from([f for f in FRAGMENTS if f.isascii()])
    | st.text(st.characters(max_codepoint=127), max_size=3),
    max_size=40,
).map("".join)


@settings(max_examples=500, deadline=None)
@given(text=texts | ascii_texts)
def test_cue_sentences_found_around_the_phrases_are_those_of_every_sentence_searched(
    text: str,
) -> None:
    assert list(cues.cue_sentences(text)) == list(cues.cue_sentences_searched(text))


@settings(max_examples=300, deadline=None)
@given(text=texts | ascii_texts)
def test_sentences_are_cut_where_the_sentence_pattern_cuts(text: str) -> None:
    pieces, start = [], 0
    for cut in cues._SENTENCE_BREAK.finditer(text):
        gap = cut.span(1) if cut.start(1) >= 0 else cut.span()
        pieces.append(text[start : gap[0]])
        start = gap[1]
    pieces.append(text[start:])
    assert pieces == SENTENCE_END.split(text)


def test_every_cue_phrase_is_looked_for_under_one_of_its_own_words() -> None:
    for family, (_pattern, phrases) in enumerate(cues._CUES):
        for phrase in phrases:
            owners = [w for w, found in cues._PHRASES_BY_WORD.items() if (family, phrase) in found]
            assert len(owners) == 1 and owners[0] in re.findall(r"\w+", phrase), phrase


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("We must-have the index before the launch.", "action"),
        ("The team \u201cdecided\u201d to keep the billing table.", "decision"),
        ("Remember the to-do: rotate the signing keys.", "action"),
        ("\u00c9quipe: we decided\u2014finally\u2014to shard by tenant.", "decision"),
        ("The rollout is \u017fhipped to every region now.", "done"),
    ],
)
def test_a_cue_next_to_any_punctuation_is_found(text: str, kind: str) -> None:
    assert [k for k, _sentence in cues.cue_sentences(text)] == [kind]


PLAIN_CUES = (
    r"\b(decided|decision|agreed|we'?ll go with|going with|settled on|chose|choose)\b",
    r"\b(prefer|prefers|preference|always|never|please (use|keep|avoid|don'?t))\b",
    r"\b(action item|todo|to-do|follow[- ]up|next step|deadline|need to|needs to|must)\b",
    r"\b(done|completed|finished|fixed|merged|shipped|resolved)\b",
)


@settings(max_examples=300, deadline=None)
@given(text=texts | ascii_texts)
def test_the_cue_patterns_built_from_phrases_match_where_the_plain_ones_do(text: str) -> None:
    for plain, (pattern, _phrases) in zip(PLAIN_CUES, cues._CUES, strict=True):
        assert bool(re.search(plain, text, re.IGNORECASE)) == bool(pattern.search(text))


def _plain_before(text: str, index: int) -> int:
    """Where the word three words before ``index`` starts: after the fourth space or newline
    before it (the text's start when there are fewer)."""
    for _ in range(4):
        if index <= 0:
            return 0
        index = max(text.rfind(" ", 0, index), text.rfind("\n", 0, index))
    return index + 1


def _plain_windows(text: str) -> Iterator[str]:
    """Every hint, each followed by its own three words (how windows are defined; digits of
    other scripts are hints only beside an ASCII hint character, as they always were)."""
    hints = [m.start() for m in re.finditer(r"\.[A-Za-z]", text)]
    if re.search(r"[0-9/`#$]", text):
        hints += [m.start() for m in re.finditer(r"[\d/`#$]", text)]
    start = end = -1
    for hint in sorted(hints):
        found = re.compile(r"\S*(?:\s+\S+){0,3}").match(text, hint + 1)
        assert found is not None
        if hint <= end:
            end = max(end, found.end())
            continue
        if end >= 0:
            yield text[start:end]
        start = _plain_before(text, hint)
        end = found.end()
    if end >= 0:
        yield text[start:end]


@settings(max_examples=400, deadline=None)
@given(text=texts | ascii_texts)
def test_windows_are_those_of_every_hint(text: str) -> None:
    assert list(identifiers.windows(text)) == list(_plain_windows(text))


UNITS = "|".join(sorted((re.escape(u) for u in identifiers._UNITS), key=len, reverse=True))
PLAIN_PATTERNS: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] = {
    "url": (re.compile(r"\bhttps?://[^\s<>\"'`)\]]+", re.I), identifiers._URL),
    "version": (
        re.compile(r"(?<![\w.])v?(\d+\.\d+\.\d+(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?)(?!\w|\.\w)"),
        identifiers._VERSION,
    ),
    "version v": (
        re.compile(r"(?<![\w.])v(\d+\.\d+)(?!\w|\.\w)", re.I),
        identifiers._VERSION_V,
    ),
    "quantity": (
        re.compile(r"(?<![\w.])(\d+(?:[.,]\d+)?)\s?(" + UNITS + r")(?![\w])", re.I),
        identifiers._QUANTITY,
    ),
    "iso date": (
        re.compile(r"\b(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b"),
        identifiers._ISO_DATE,
    ),
    "day month year": (
        re.compile(
            rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({identifiers._MONTH})\.?,?\s+(\d{{4}})\b", re.I
        ),
        identifiers._DAY_MONTH_YEAR,
    ),
    "month day year": (
        re.compile(
            rf"\b({identifiers._MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I
        ),
        identifiers._MONTH_DAY_YEAR,
    ),
    "issue": (
        re.compile(
            r"(?:\b(?:issue|bug|ticket|pr|pull request|pull|merge request|mr)\s*#?\s*"
            r"|(?<![\w&])#)(\d{1,7})\b",
            re.I,
        ),
        identifiers._ISSUE,
    ),
    "path": (
        re.compile(
            r"(?<![\w/.:-])(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w.-]*[\w]"
            r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|toml|json|jsonl|md|ya?ml|txt|rs|go|c|h|"
            r"cpp|hpp|java|kt|rb|sh|sql|csv|cfg|ini|lock|html|css|service|conf|log)\b"
        ),
        identifiers._PATH,
    ),
}


def _matches(pattern: re.Pattern[str], text: str) -> list[tuple[Any, ...]]:
    return [(m.span(), m.groups()) for m in pattern.finditer(text)]


@settings(max_examples=400, deadline=None)
@given(text=texts | ascii_texts)
def test_rewritten_patterns_match_like_their_plain_forms(text: str) -> None:
    for name, (plain, rewritten) in PLAIN_PATTERNS.items():
        if name == "path":
            # The rewritten form matches the character before the path too (the text it
            # scans starts with a newline); the path is its group.
            paths = [(m.start(1) - 1, m.end(1) - 1) for m in rewritten.finditer("\n" + text)]
            assert paths == [m.span() for m in plain.finditer(text)], name
        elif name == "version":
            # The rewritten form has no group: the version is the match without its "v".
            found = [(m.span(), (m.group().removeprefix("v"),)) for m in rewritten.finditer(text)]
            assert found == _matches(plain, text), name
        else:
            assert _matches(rewritten, text) == _matches(plain, text), name


@settings(max_examples=400, deadline=None)
@given(text=ascii_texts)
def test_the_ascii_patterns_match_ascii_text_like_the_others(text: str) -> None:
    # U+001C to U+001F are white space to Unicode patterns only: such text is not scanned
    # with the ASCII ones.
    assert identifiers._plain_ascii(text) == (text.isascii() and not re.search("[\x1c-\x1f]", text))
    assume(identifiers._plain_ascii(text))
    pairs = zip(identifiers._PATTERNS, identifiers._ASCII_PATTERNS, strict=True)
    for pattern, ascii_pattern in pairs:
        assert _matches(ascii_pattern, text) == _matches(pattern, text), pattern.pattern


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("The freeze starts on 3 \u017fept 2026.", "2026-09-03"),
        ("The freeze starts on Apr\u0130l 3, 2026.", "2026-04-03"),
        ("The freeze starts on apr\u0131l 3 2026.", "2026-04-03"),
        ("The timeout is 5 m\u017f at most.", "5 ms"),
        ("It waits 3 \u017fecs.", "3 s"),
        ("The cache holds 5 \u212aB.", "5 kb"),
    ],
)
def test_a_month_or_unit_written_with_a_letter_that_only_folds_to_ascii_is_read(
    text: str, key: str
) -> None:
    details = r.extract_details([{"role": "user", "content": text}])
    assert [d.key for d in details] == [key]


ROLES = ["user", "assistant", "tool_result", "User", "a]b", "x y", "", None, 7]


@settings(max_examples=200, deadline=None)
@given(
    role=st.sampled_from(ROLES),
    content=texts | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": texts})),
)
def test_a_written_message_is_checked_as_it_was_written(role: Any, content: Any) -> None:
    """A message of text alone (no tool block, code fence or hook block) is checked as
    its text blocks joined, whatever its role."""
    parts = [content] if isinstance(content, str) else [block["text"] for block in content]
    assume(not any("```" in part or "<" in part for part in parts))
    [checked] = r.checked_texts(read_messages([{"role": role, "content": content}]))
    assert checked == "\n".join(parts).strip()


def _plain_missing(details: list[r.Detail], text: str) -> list[r.Detail]:
    """What a text lacks, every identifier of it extracted (the plain definition)."""
    normalised = identifiers.normalise(text)
    keys = {key for _kind, _shown, key in identifiers.identifiers(text)}
    words = r.content_words(text)
    missing = []
    for detail in details:
        if detail.kind in r.SENTENCE_KINDS:
            wanted = frozenset(detail.key.split())
            held = bool(wanted) and len(wanted & words) / len(wanted) >= r.SENTENCE_OVERLAP
        elif detail.key in keys:
            held = True
        else:
            held = detail.kind not in ("issue", "date", "quantity") and detail.key in normalised
        if not held:
            missing.append(detail)
    return missing


@settings(max_examples=400, deadline=None)
@given(messages=st.lists(texts | ascii_texts, max_size=4), summary=texts | ascii_texts)
def test_a_summary_holds_what_it_holds_with_every_identifier_extracted(
    messages: list[str], summary: str
) -> None:
    details = r.extract_details([{"role": "user", "content": m} for m in messages])
    assert list(r.score(details, summary).missing) == _plain_missing(details, summary)


def test_a_number_in_other_digits_is_still_matched() -> None:
    details = r.extract_details([{"role": "user", "content": "Tracking issue ٤٢ since 2026."}])
    assert [d.key for d in details] == ["#42"]
    # The window around "٤٢" holds no ASCII digit: it is scanned all the same.
    held = "Bug ٤٢ is still open, as we said in the long talk about release 7."
    assert r.score(details, held).score == 1.0
    assert r.score(details, "Fixes #42.").score == 1.0
    assert r.score(details, "Bug ٤٣ is still open, as we said about release 42.").score == 0.0


def test_a_key_written_otherwise_in_code_still_counts() -> None:
    details = r.extract_details([{"role": "user", "content": "See issue 42 and `1.2.3-RC1`."}])
    assert r.score(details, "Track `#42`; ship 1.2.3-RC1.").score == 1.0


def test_a_figure_in_other_digits_alone_is_still_matched() -> None:
    """A key with no ASCII digit has no tag to look for: the summary's non-ASCII windows
    are scanned all the same."""
    details = r.extract_details([{"role": "user", "content": "The probe #٤٢ms ran."}])
    assert [d.key for d in details] == ["٤٢ ms"]
    assert r.score(details, "Probe #٤٢ms.").score == 1.0
