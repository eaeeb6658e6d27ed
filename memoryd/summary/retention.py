"""The retention check: which details of the summarized messages a summary kept (pure).

Details are found without an LLM: identifiers (file paths, URLs, issue and PR numbers,
versions, code in backticks, numbers with units, dates; :mod:`memoryd.transcript.details`),
decisions and preferences (the extractive summarizer's cue words), open action items,
the commands run (``tool_use`` inputs, text-mode code fences), the exception and error
names seen (``ModuleNotFoundError``, ``E501``) and the task. Identifiers and sentences come
from what the user and the agent wrote and from the tool calls, not from tool output,
whose error names alone count. Retention is the share of them that a summary, with what
stays verbatim beside it, still carries, matched on normalised forms. What a summary lost
can be put back in a deterministic "Details kept verbatim" section that fits the
summary's token cap (:mod:`memoryd.summary.verbatim`; docs/design.md#retention).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.summary.prompts import render_transcript
from memoryd.transcript.cues import cue_sentences
from memoryd.transcript.details import (
    ALL_KINDS,
    digit_tag,
    identifiers_by_position,
    keys_with_tags,
    normalise,
)
from memoryd.transcript.messages import (
    MessageView,
    previous_task,
    read_messages,
    standing_lines,
    task_body,
    task_phrase,
    task_view,
    without_standing,
)
from memoryd.transcript.toolcalls import EXCEPTION_HINT, EXCEPTION_NAME, label_key

VERBATIM_HEADER = "Details kept verbatim:"
IDENTIFIER_KINDS = (
    "path", "url", "issue", "version", "code", "quantity", "date", "command", "error"
)  # fmt: skip
SENTENCE_KINDS = ("task", "decision", "preference", "action")
TASK_KEY_WORDS = 5
"""Content words of the task's one-line statement that make its key (the first ones)."""
MIN_COMMAND_KEY = 4
"""A command shorter than this (``ls``) is too common a string to be a detail."""
MAX_ITEM_CHARS = 200
SENTENCE_OVERLAP = 0.6
"""Share of a sentence's content words a summary must hold for the sentence to count."""

_WORD = re.compile(r"[a-z0-9][a-z0-9_'-]*")
_TAGS = re.compile(r"(?:\s*</?[a-z][\w-]*\s*/?>)+\s*", re.I)
"""Markup alone (``<td></td>``): code in backticks that names nothing."""
_STOP_TEXT = (
    "a an the and or but if then so to of in on at by for with from as is are was were be been "
    "it its this that these those we i you he she they our your their us me my not no yes do "
    "does did will would should could can may might must need needs about into over than also "
    "just all any some more most very let lets use using used have has had there here what which "
    "who when where why how decided decision agreed going go chose choose prefer always never "
    "please keep avoid don't dont todo action item follow up next step deadline settled"
)
_STOPWORDS = frozenset(_STOP_TEXT.split())


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


def checked_texts(
    views: Sequence[MessageView],
    task: MessageView | None = None,
    standing: frozenset[str] | None = None,
) -> list[str]:
    """The text of each message that details are found in (pure): what the user wrote
    (without ``standing`` instructions, found when not given; of the ``task`` message, its
    task block) or the agent wrote, and the labels of its tool calls; no tool output."""
    if standing is None:
        standing = standing_lines(views)
    texts = []
    for view in views:
        text = task_body(view.text) if view is task else view.text
        text = without_standing(text, standing) if view.genuine else text
        if view.calls:
            text = "\n".join([text, *(call.label for call in view.calls)])
        texts.append(text)
    return texts


def _task_words(phrase: str) -> list[str]:
    """The first content words of the task's statement, in order (its key)."""
    words = dict.fromkeys(w for w in _WORD.findall(phrase.casefold()) if w not in _STOPWORDS)
    return list(words)[:TASK_KEY_WORDS]


def content_words(text: str) -> frozenset[str]:
    """The words of ``text`` that carry its meaning (no stop or cue words) (pure)."""
    return frozenset(_WORD.findall(text.casefold())).difference(_STOPWORDS)


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
    shift = len(texts)
    views = read_messages(messages, outcomes=False)
    # After an earlier summary the messages do not open the conversation: only that
    # summary can state the task.
    opening = task_view(views) if not previous_summary else None
    standing = standing_lines(views)
    texts.extend(checked_texts(views, opening, standing))
    found: dict[tuple[str, str], list[Any]] = {}
    """(kind, text, key, position, mentions) of each detail so far, by its slot."""
    done_topics: list[tuple[int, frozenset[str]]] = []

    def note(kind: str, text: str, key: str, position: int) -> None:
        if not key or (
            kind == "code" and (sum(c.isalnum() for c in key) < 2 or _TAGS.fullmatch(key))
        ):
            return  # `""`, `a`, `[]`, `<td></td>` carry nothing
        slot = ("sentence" if kind in SENTENCE_KINDS else kind, key)
        known = found.get(slot)
        if known is None:
            found[slot] = [kind, text, key, position, 1]
        else:
            known[0] = kind
            known[3] = max(position, known[3])
            known[4] += 1

    task = previous_task(previous_summary) if previous_summary else None
    if opening is not None:
        task = task_phrase(opening.text, standing)
    task_words = _task_words(task) if task else []
    if task and len(task_words) >= 2:
        note("task", f"Task: {task}", " ".join(sorted(task_words)), 0)
    for kind, shown, key, position in identifiers_by_position(texts):
        note(kind, shown, key, position)
    for view in views:
        for call in view.calls:
            key = label_key(call.command or "")
            if len(key) >= MIN_COMMAND_KEY and "`" not in key:
                note("command", f"`{call.command}`", key, view.position + shift)
        for name in view.output_errors:
            note("error", name, name.casefold(), view.position + shift)
    if EXCEPTION_HINT.search("\n".join(texts)):  # one scan for the usual text without any
        for position, text in enumerate(texts):
            for name in EXCEPTION_NAME.findall(text) if EXCEPTION_HINT.search(text) else ():
                note("error", name, name.casefold(), position)
    for position, text in enumerate(texts):
        for sentence_kind, sentence in cue_sentences(text):
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
        scan = False
        for detail in details:
            if detail.kind in _KEYED or (detail.kind in ALL_KINDS and detail.key not in self.text):
                scan = True
                tag = digit_tag(detail.key)
                # A key without an ASCII digit ("٤٢ ms") can only be in a non-ASCII
                # window, which keys_with_tags scans whatever the tags.
                if tag is not None:
                    tags.add(tag)
        self.keys = keys_with_tags(text, tags) if scan else set()
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


class Beside:
    """What stays verbatim beside a summary (the pinned messages, the kept part): a
    detail it carries has survived, whatever the summary says.

    Rendered and matched only when first asked, for every detail at once: a summary that
    keeps everything never needs it.
    """

    def __init__(self, messages: Sequence[Mapping[str, Any]], details: Sequence[Detail]) -> None:
        self.messages = messages
        self.details = details
        self._held: frozenset[Detail] | None = None

    @property
    def held(self) -> frozenset[Detail]:
        """The details the messages carry."""
        if self._held is None:
            text = render_transcript(self.messages) if self.messages else ""
            index = TextIndex(text, self.details) if text else None
            self._held = frozenset(d for d in self.details if index is not None and index.holds(d))
        return self._held


def score(details: Sequence[Detail], text: str, beside: Beside | None = None) -> RetentionScore:
    """The share of ``details`` that ``text``, with what stays ``beside`` it, carries (1.0
    when there is none) (pure)."""
    if not details:
        return RetentionScore(1.0, 0, ())
    index = TextIndex(text, details)
    missing = [d for d in details if not index.holds(d)]
    if missing and beside is not None:
        held = beside.held
        missing = [d for d in missing if d not in held]
    kept = len(details) - len(missing)
    return RetentionScore(round(kept / len(details), 4), len(details), tuple(missing))
