"""The offline checkpoint builder: deterministic cues, no network (docs/design.md#summarizers).

The lists come from what the agent said: what it reported done ("I fixed…", "Done:",
"Tests pass"), what it is working on and what it said it will do next ("Next I will…"),
what blocks it, what was decided. The user's turns add decisions and blockers only: an
instruction is not work done. Tool output and raw JSON never become an item. It reads
messages as :mod:`memoryd.summarizers.transcript` does, like the extractive summarizer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.checkpoint import MAX_ITEMS, SECTIONS, Checkpoint, CheckpointSummary
from memoryd.summarizers.transcript import (
    read_messages,
    sentences,
    shorten,
    standing_lines,
    task_view,
    without_standing,
)

CUES: dict[str, re.Pattern[str]] = {
    "blockers": re.compile(
        r"\b(blocked|blocker|waiting (on|for)|can'?t proceed|cannot proceed|stuck)\b", re.I
    ),
    "decisions": re.compile(r"\b(decided|decision|agreed|we'?ll go with|going with|chose)\b", re.I),
    "completed": re.compile(
        r"\b(done|completed|finished|fixed|merged|shipped|resolved|implemented|added|updated"
        r"|created|removed|renamed|tests? pass(es|ed)?|all tests|now pass(es)?|succeeded"
        r"|works now)\b",
        re.I,
    ),
    "in_progress": re.compile(
        r"\b(working on|in progress|currently|i'?m (now )?(fixing|adding|writing|updating|"
        r"implementing|investigating|debugging))\b",
        re.I,
    ),
    "pending": re.compile(
        r"\b(todo|to do|need to|needs to|next|pending|i will|i'?ll|we will|we'?ll|still have to"
        r"|remaining|plan to|going to)\b",
        re.I,
    ),
}
NOT_DONE = re.compile(
    r"\b(when|once|after|if|until|before|unless|must|should|need to|needs to|will|make sure"
    r"|please|you|let me|let's)\b|\?\s*$",
    re.I,
)
"""What keeps a sentence with a "done" word out of ``completed``: a condition, an order,
an intention or a question ("When you have completed your work, submit it")."""
USER_SECTIONS = ("blockers", "decisions")
"""The lists a user's turn may add to."""
MAX_ITEM_CHARS = 200
_WORD = re.compile(r"[a-z0-9]+")
_CUE_WORDS = frozenset(
    [
        "done",
        "completed",
        "finished",
        "fixed",
        "merged",
        "shipped",
        "resolved",
        "todo",
        "need",
        "needs",
        "to",
        "will",
        "should",
        "must",
        "next",
        "pending",
        "working",
        "on",
        "in",
        "progress",
        "currently",
        "started",
        "starting",
        "the",
        "a",
        "an",
        "we",
        "i",
        "is",
        "it",
        "implemented",
        "added",
        "updated",
        "created",
    ]
)


def _topic(sentence: str) -> frozenset[str]:
    return frozenset(_WORD.findall(sentence.lower())) - _CUE_WORDS


def _same_topic(a: str, b: str) -> bool:
    left, right = _topic(a), _topic(b)
    if not left or not right:
        return False
    return len(left & right) / min(len(left), len(right)) >= 0.6


def section_of(sentence: str, speaker: str) -> str | None:
    """The list a sentence belongs to, or None (pure): the first whose cue it matches,
    ``completed`` only for a report, and for a user's turn only decisions and blockers."""
    for name, cue in CUES.items():
        if not cue.search(sentence):
            continue
        if name == "completed" and NOT_DONE.search(sentence):
            continue
        if speaker != "assistant" and name not in USER_SECTIONS:
            return None
        return name
    return None


def _is_item(text: str) -> bool:
    return len(text) >= 2 and not text.lstrip().startswith(("{", "["))


def extractive_checkpoint(
    previous: CheckpointSummary | Checkpoint | None, messages: Sequence[Mapping[str, Any]]
) -> CheckpointSummary:
    """The offline checkpoint: deterministic cues for done / pending / blocked / decided.

    Each sentence of the agent's text (and, for decisions and blockers, of the user's
    turns after the task) goes to the list :func:`section_of` names; what the agent says
    it will do in a message that makes a tool call is what that call does, not pending. A
    completed item removes the pending, in-progress and blocker items on the same topic.
    """
    lists: dict[str, list[str]] = {
        name: [x for x in getattr(previous, name) if _is_item(x)] if previous is not None else []
        for name in SECTIONS
    }
    views = read_messages(messages)
    standing = standing_lines(views)
    task = task_view(views)
    for view in views:
        if view is task or not view.text or view.speaker not in ("user", "assistant"):
            continue
        for sentence in sentences(without_standing(view.text, standing)):
            section = section_of(sentence, view.speaker)
            if section is None or len(sentence) < 8 or not _is_item(sentence):
                continue
            if section == "pending" and view.calls:
                continue  # "Next I will run the tests", and the same message runs them
            item = shorten(sentence, MAX_ITEM_CHARS)
            if section == "completed":
                for open_section in ("pending", "in_progress", "blockers"):
                    lists[open_section] = [
                        x for x in lists[open_section] if not _same_topic(x, item)
                    ]
            if item not in lists[section]:
                lists[section].append(item)
    return CheckpointSummary(**{name: items[-MAX_ITEMS:] for name, items in lists.items()})
