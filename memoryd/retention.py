"""The retention check: which details of the summarized messages a summary kept (pure).

Details are found without an LLM: identifiers (file paths, URLs, issue and PR numbers,
versions, code in backticks, numbers with units, dates; :mod:`memoryd.identifiers`),
decisions and preferences (the extractive summarizer's cue words) and open action items.
Retention is the share of them that a summary still carries, matched on normalised forms.
What a summary lost can be put back in a deterministic "Details kept verbatim" section
that fits the summary's token cap (:mod:`memoryd.verbatim`; docs/design.md#retention).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from memoryd.identifiers import digit_tag, identifiers_by_position, keys_with_tags, normalise
from memoryd.summarizers.extractive import SENTENCE_END
from memoryd.summarizers.prompts import message_parts, render_transcript

VERBATIM_HEADER = "Details kept verbatim:"
IDENTIFIER_KINDS = ("path", "url", "issue", "version", "code", "quantity", "date")
SENTENCE_KINDS = ("decision", "preference", "action")
MAX_ITEM_CHARS = 200
SENTENCE_OVERLAP = 0.6
"""Share of a sentence's content words a summary must hold for the sentence to count."""

_DECISION_PHRASES = (
    "decided", "decision", "agreed", "we'll go with", "well go with", "going with",
    "settled on", "chose", "choose",
)  # fmt: skip
_PREFERENCE_PHRASES = (
    "prefer", "prefers", "preference", "always", "never", "please use", "please keep",
    "please avoid", "please don't", "please dont",
)  # fmt: skip
_ACTION_PHRASES = (
    "action item", "todo", "to-do", "follow-up", "follow up", "next step", "deadline",
    "need to", "needs to", "must",
)  # fmt: skip
_DONE_PHRASES = ("done", "completed", "finished", "fixed", "merged", "shipped", "resolved")


def _phrases(phrases: Sequence[str]) -> re.Pattern[str]:
    return re.compile(r"\b(" + "|".join(map(re.escape, phrases)) + r")\b", re.IGNORECASE)


_DECISION = _phrases(_DECISION_PHRASES)
_PREFERENCE = _phrases(_PREFERENCE_PHRASES)
_ACTION = _phrases(_ACTION_PHRASES)
_DONE = _phrases(_DONE_PHRASES)
_CUES = (
    (_DECISION, _DECISION_PHRASES),
    (_PREFERENCE, _PREFERENCE_PHRASES),
    (_ACTION, _ACTION_PHRASES),
    (_DONE, _DONE_PHRASES),
)
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


_K = TypeVar("_K", bound=Hashable)
_GATE_WORDS = {
    "we'll go with": "go", "well go with": "go", "going with": "going", "settled on": "settled",
    "please use": "please", "please keep": "please", "please avoid": "please",
    "please don't": "please", "please dont": "please", "action item": "action", "to-do": "do",
    "follow-up": "follow", "follow up": "follow", "next step": "step", "need to": "need",
    "needs to": "needs",
}  # fmt: skip
"""For a phrase of several words, the one looked for first (a single word is its own)."""
_KINDS = ("decision", "preference", "action", "done")
"""The cue families, in the order of ``_CUES``: a phrase's family is its index here."""
_FAMILY_PHRASES = [
    (family, phrase) for family, (_, phrases) in enumerate(_CUES) for phrase in phrases
]


def _grouped(key: Callable[[str], _K]) -> dict[_K, list[tuple[int, str]]]:
    """The (family, phrase) of every cue phrase, grouped by ``key(phrase)``."""
    groups: dict[_K, list[tuple[int, str]]] = {}
    for family, phrase in _FAMILY_PHRASES:
        groups.setdefault(key(phrase), []).append((family, phrase))
    return groups


_PHRASES_BY_WORD = _grouped(lambda phrase: _GATE_WORDS.get(phrase, phrase))
_GATE = frozenset(_PHRASES_BY_WORD)
_WORD_BYTES = b"abcdefghijklmnopqrstuvwxyz0123456789_"
_ASCII_WORDS = bytes(
    byte + 32 if 65 <= byte <= 90 else byte if byte in _WORD_BYTES else 32 for byte in range(256)
)
"""A translation of ASCII text to its words (``\\w+``) in lower case, all else a space."""
_PHRASES_BY_FORM = _grouped(
    lambda phrase: b" ".join(phrase.encode().translate(_ASCII_WORDS).split())
)
_ASCII_CUE_SCAN = re.compile(
    b" (?:"
    + b"|".join(
        re.escape(first)
        + b"(?:"
        + b"|".join(
            re.escape(form[1:])
            for form in sorted(_PHRASES_BY_FORM, key=len, reverse=True)
            if form[:1] == first
        )
        + b")"
        for first in sorted({form[:1] for form in _PHRASES_BY_FORM})
    )
    + b")(?= )"
)
"""A cue phrase as ``_ASCII_WORDS`` turns it (``to-do`` is ``to do``), a whole word or
words after a space: scanned over an ASCII text so translated and padded with a space at
each end, it stops only at spaces, and tries only the phrases of the letter after one."""
_WORD_RUN = re.compile(r"\w+")
_FOLDED_LETTERS = frozenset("\u017f\u0130\u0131")
"""Letters that match an ASCII letter in any letter case but do not lower-case to it
(U+017F is an "s", U+0130 and U+0131 an "i")."""
_SENTENCE_BREAK = re.compile(r"[.!?\n](?:(?<=[.!?])(\s+)|(?<=\n)\n*)")
"""Where ``SENTENCE_END`` cuts: white space after ".", "!" or "?" (group 1), or newlines;
led by a character, for a scan that skips to them."""


def _cue_sentences(text: str) -> list[tuple[str, str]]:
    """(kind, sentence) for each sentence of ``text`` that holds a decision, preference or
    action item, and ("done", sentence) for one that marks something done (pure).

    The cue phrases are found in one scan of an ASCII text's words (``_ASCII_CUE_SCAN``),
    or, in other text, in its lower case, each looked for only when the word it is known
    by is one of the text's; each sentence is cut out around them: the same sentences and
    kinds as cutting every sentence and searching it for each cue pattern
    (:func:`_cue_sentences_searched`), far cheaper.
    """
    size = len(text)
    hits: list[tuple[int, int]] = []
    if text.isascii():
        padded = b" " + text.encode().translate(_ASCII_WORDS) + b" "
        first = _ASCII_CUE_SCAN.search(padded)
        if first is None:
            return []  # most text: one scan
        for match in _ASCII_CUE_SCAN.finditer(padded, first.start()):
            at = match.start()  # the phrase's offset in the text: the pad is one byte
            for family, phrase in _PHRASES_BY_FORM[match.group()[1:]]:
                if text[at : at + len(phrase)].lower() == phrase:
                    hits.append((at, family))
    else:
        lowered = text.lower()
        if len(lowered) != len(text) or not _FOLDED_LETTERS.isdisjoint(text):
            return list(_cue_sentences_searched(text))
        words = _GATE.intersection(_WORD_RUN.findall(lowered))
        for found in (_PHRASES_BY_WORD[word] for word in words):
            for family, phrase in found:
                at = lowered.find(phrase)
                while at >= 0:
                    end = at + len(phrase)
                    if (at == 0 or not _is_word(text[at - 1])) and (
                        end == size or not _is_word(text[end])
                    ):
                        hits.append((at, family))
                    at = lowered.find(phrase, at + 1)
    if not hits:
        return []
    starts, ends = [0], []
    for cut in _SENTENCE_BREAK.finditer(text):
        gap = cut.span(1) if cut.start(1) >= 0 else cut.span()
        ends.append(gap[0])
        starts.append(gap[1])
    ends.append(size)
    families: dict[int, set[int]] = {}
    for at, family in hits:
        families.setdefault(bisect.bisect_right(starts, at) - 1, set()).add(family)
    sentences = []
    for index in sorted(families):
        sentence = text[starts[index] : ends[index]].strip()
        if len(sentence) < 8:
            continue
        kind = _kind_of(families[index])
        if kind is not None:
            sentences.append((kind, _SENTENCE_LEAD.sub("", sentence, count=1)))
    return sentences


def _is_word(char: str) -> bool:
    """Whether ``char`` is one of the characters ``\\w`` matches."""
    return char.isalnum() or char == "_"


def _kind_of(families: set[int]) -> str | None:
    """A sentence's kind from the cue families (indexes of ``_KINDS``) it holds."""
    decision, preference, action, done = (family in families for family in range(len(_KINDS)))
    if decision:
        return "decision"
    if preference:
        return "preference"
    if action and not done:
        return "action"
    return "done" if done else None


def _cue_sentences_searched(text: str) -> Iterator[tuple[str, str]]:
    """:func:`_cue_sentences` by cutting every sentence and searching it for each cue
    pattern: for a text whose lower case does not line up with it."""
    for sentence in _sentences(text):
        sentence = _SENTENCE_LEAD.sub("", sentence, count=1)
        kind = _kind_of({f for f, (pattern, _) in enumerate(_CUES) if pattern.search(sentence)})
        if kind is not None:
            yield kind, sentence


_ROLE_LABEL = re.compile(r"[a-z_]+")


def _message_text(message: Mapping[str, Any]) -> str:
    """A message's rendered text without its ``[role]`` tag (``_ROLE_TAG``), without
    copying it for a plain role."""
    label, text = message_parts(message)
    if _ROLE_LABEL.fullmatch(label):
        return text.lstrip()
    return _ROLE_TAG.sub("", render_transcript([message]), count=1)


def content_words(text: str) -> frozenset[str]:
    """The words of ``text`` that carry its meaning (no stop or cue words) (pure)."""
    return frozenset(_WORD.findall(text.casefold())).difference(_STOPWORDS)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text) if len(s.strip()) >= 8]


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
    texts.extend(map(_message_text, messages))
    found: dict[tuple[str, str], list[Any]] = {}
    """(kind, text, key, position, mentions) of each detail so far, by its slot."""
    done_topics: list[tuple[int, frozenset[str]]] = []

    def note(kind: str, text: str, key: str, position: int) -> None:
        if not key:
            return
        slot = ("sentence" if kind in SENTENCE_KINDS else kind, key)
        known = found.get(slot)
        if known is None:
            found[slot] = [kind, text, key, position, 1]
        else:
            known[0] = kind
            known[3] = max(position, known[3])
            known[4] += 1

    for kind, shown, key, position in identifiers_by_position(texts):
        note(kind, shown, key, position)
    for position, text in enumerate(texts):
        for sentence_kind, sentence in _cue_sentences(text):
            if sentence_kind == "done":
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
    for detail in (Detail(*fields) for fields in found.values()):
        if detail.kind == "action":
            words = frozenset(detail.key.split())
            if any(p > detail.position and _same_topic(words, w) for p, w in done_topics):
                continue
        details.append(detail)
    return details


_KEYED = frozenset(("issue", "date", "quantity"))
"""Kinds a text holds only as an identifier with the same key (the same number or date
written another way), never as a plain substring."""


class TextIndex:
    """A text prepared for matching ``details`` against it (:meth:`holds`).

    Only what they need is computed: content words for sentences, and the identifiers
    of the windows that can hold the key of one of them (:func:`keys_with_tags`). Path,
    URL, code and lower-case version keys are substrings of the normalised text whenever
    they are identifiers of it; the others are looked up among the identifiers.
    """

    def __init__(self, text: str, details: Sequence[Detail]) -> None:
        self.text = normalise(text)
        tags: set[str] = set()
        for detail in details:
            if detail.kind in _KEYED or (
                detail.kind not in SENTENCE_KINDS and detail.key not in self.text
            ):
                tag = digit_tag(detail.key)
                if tag is not None:  # every key of _KEYED_KINDS has a digit
                    tags.add(tag)
        self.keys = keys_with_tags(text, tags) if tags else set()
        needs_words = any(d.kind in SENTENCE_KINDS for d in details)
        # Every word of the text (a detail's words are content words: the others never
        # count), from its case-folded form.
        self.words = frozenset(_WORD.findall(self.text)) if needs_words else frozenset()

    def holds(self, detail: Detail) -> bool:
        """Whether the text carries ``detail`` (one of the details it was prepared for)."""
        if detail.kind in SENTENCE_KINDS:
            words = frozenset(detail.key.split())
            return bool(words) and len(words & self.words) / len(words) >= SENTENCE_OVERLAP
        if detail.key in self.keys:
            return True
        if detail.kind in _KEYED:
            return False
        return detail.key in self.text


def score(details: Sequence[Detail], text: str) -> RetentionScore:
    """The share of ``details`` that ``text`` carries (1.0 when there is none) (pure)."""
    if not details:
        return RetentionScore(1.0, 0, ())
    index = TextIndex(text, details)
    missing = tuple(d for d in details if not index.holds(d))
    kept = len(details) - len(missing)
    return RetentionScore(round(kept / len(details), 4), len(details), missing)
