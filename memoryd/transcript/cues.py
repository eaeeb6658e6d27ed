"""Cue phrases: the sentences of a text that hold a decision, a preference or an action
item, or mark something done, found in one scan (pure; docs/design.md#retention).

The phrases are the extractive summarizer's cue words; :func:`cue_sentences` finds them
far cheaper than cutting every sentence and searching it for each pattern
(:func:`cue_sentences_searched`, which it equals).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TypeVar

from memoryd.transcript.messages import SENTENCE_END

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


DECISION = _phrases(_DECISION_PHRASES)
"""A decision: the one pattern every summarizer and the item reader use."""
_PREFERENCE = _phrases(_PREFERENCE_PHRASES)
_ACTION = _phrases(_ACTION_PHRASES)
_DONE = _phrases(_DONE_PHRASES)
_CUES = (
    (DECISION, _DECISION_PHRASES),
    (_PREFERENCE, _PREFERENCE_PHRASES),
    (_ACTION, _ACTION_PHRASES),
    (_DONE, _DONE_PHRASES),
)

_SENTENCE_LEAD = re.compile(r"^[-*]\s+|^(user|assistant):\s+", re.I)

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


def cue_sentences(text: str) -> list[tuple[str, str]]:
    """(kind, sentence) for each sentence of ``text`` that holds a decision, preference or
    action item, and ("done", sentence) for one that marks something done (pure).

    The cue phrases are found in one scan of an ASCII text's words (``_ASCII_CUE_SCAN``),
    or, in other text, in its lower case, each looked for only when the word it is known
    by is one of the text's; each sentence is cut out around them: the same sentences and
    kinds as cutting every sentence and searching it for each cue pattern
    (:func:`cue_sentences_searched`), far cheaper.
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
            return list(cue_sentences_searched(text))
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


def cue_sentences_searched(text: str) -> Iterator[tuple[str, str]]:
    """:func:`cue_sentences` by cutting every sentence and searching it for each cue
    pattern: for a text whose lower case does not line up with it."""
    for sentence in _sentences(text):
        sentence = _SENTENCE_LEAD.sub("", sentence, count=1)
        kind = _kind_of({f for f, (pattern, _) in enumerate(_CUES) if pattern.search(sentence)})
        if kind is not None:
            yield kind, sentence


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in SENTENCE_END.split(text) if len(s.strip()) >= 8]
