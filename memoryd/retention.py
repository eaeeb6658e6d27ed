"""The retention check: which details of the summarized messages a summary kept (pure).

Details are found without an LLM: identifiers (file paths, URLs, issue and PR numbers,
versions, code in backticks, numbers with units, dates; :mod:`memoryd.identifiers`),
decisions and preferences (the extractive summarizer's cue words) and open action items.
Retention is the share of them that a summary still carries, matched on normalised forms.
What a summary lost can be put back in a deterministic "Details kept verbatim" section
that fits the summary's token cap (:mod:`memoryd.verbatim`; docs/design.md#retention).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


_CUE_TEXT = (
    "decided decision agreed agree go going settled chose choose prefer prefers preference "
    "always never please action todo to-do follow follow-up next step deadline need needs "
    "must done completed complete finished finish fixed merged shipped resolved"
)
_CUE_WORDS = frozenset(_CUE_TEXT.split())
"""A word of every cue (the first or last of a phrase): a text with none of them holds no
decision, preference or action item, and is skipped before it is split into sentences."""
_PUNCTUATION_CHARS = ".,;:!?()[]{}\"'`*_/"
_PUNCTUATION = str.maketrans({c: " " for c in _PUNCTUATION_CHARS})
_ASCII_CUE_WORDS = frozenset(word.encode() for word in _CUE_WORDS)
_ASCII_WORDS = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ" + _PUNCTUATION_CHARS.encode() + b"\x1c\x1d\x1e\x1f",
    b"abcdefghijklmnopqrstuvwxyz" + b" " * (len(_PUNCTUATION_CHARS) + 4),
)
"""Lower case, punctuation as a space, and the four separators ``str.split`` cuts at but
``bytes.split`` does not as a space: the words ``_has_cue`` splits an ASCII text into."""


def _has_cue(text: str) -> bool:
    """Whether ``text`` holds a word of ``_CUE_WORDS`` (an ASCII text is split as bytes:
    the same words, cheaper to cut out and hash)."""
    if text.isascii():
        words = text.encode().translate(_ASCII_WORDS).split()
        return not _ASCII_CUE_WORDS.isdisjoint(words)
    return not _CUE_WORDS.isdisjoint(text.lower().translate(_PUNCTUATION).split())


Cues = tuple[re.Pattern[str] | None, ...]
"""The decision, preference, action and done patterns, None for one known not to match."""


def _possible_cues(text: str) -> Cues:
    """The cue patterns (decision, preference, action, done) that may match a sentence of
    ``text``; None for one that cannot. An ASCII text without any of a pattern's phrases,
    in any letter case, cannot match it."""
    if not text.isascii():
        return tuple(pattern for pattern, _ in _CUES)
    lowered = text.lower()
    return tuple(
        pattern if any(phrase in lowered for phrase in phrases) else None
        for pattern, phrases in _CUES
    )


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


def _sentence_kind(sentence: str, cues: Cues) -> str | None:
    decision, preference, action, done = cues
    if decision and decision.search(sentence):
        return "decision"
    if preference and preference.search(sentence):
        return "preference"
    if action and action.search(sentence) and not (done and done.search(sentence)):
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
    texts.extend(map(_message_text, messages))
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

    for kind, shown, key, position in identifiers_by_position(texts):
        note(kind, shown, key, position)
    for position, text in enumerate(texts):
        if not _has_cue(text):
            continue
        cues = _possible_cues(text)
        if not any(cues):
            continue
        done = cues[-1]
        for sentence in _sentences(text):
            sentence = _SENTENCE_LEAD.sub("", sentence, count=1)
            sentence_kind = _sentence_kind(sentence, cues)
            if sentence_kind is None:
                if done and done.search(sentence):
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
        self.words = content_words(text) if needs_words else frozenset()

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
