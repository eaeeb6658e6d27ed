"""The offline checkpoint builder: deterministic cues, no network.

The checkpoint counterpart of :mod:`memoryd.summarizers.extractive`, whose sentence
splitting it shares.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.checkpoint import MAX_ITEMS, SECTIONS, Checkpoint, CheckpointSummary
from memoryd.summarizers.extractive import SENTENCE_END
from memoryd.summarizers.prompts import render_transcript

CUES: dict[str, re.Pattern[str]] = {
    "blockers": re.compile(
        r"\b(blocked|blocker|waiting (on|for)|can'?t proceed|cannot proceed|stuck)\b", re.I
    ),
    "decisions": re.compile(r"\b(decided|decision|agreed|we'?ll go with|going with|chose)\b", re.I),
    "completed": re.compile(r"\b(done|completed|finished|fixed|merged|shipped|resolved)\b", re.I),
    "in_progress": re.compile(r"\b(working on|in progress|currently|started|starting)\b", re.I),
    "pending": re.compile(r"\b(todo|to do|need to|needs to|next|pending|will|should|must)\b", re.I),
}
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
    ]
)


def _topic(sentence: str) -> frozenset[str]:
    return frozenset(_WORD.findall(sentence.lower())) - _CUE_WORDS


def _same_topic(a: str, b: str) -> bool:
    left, right = _topic(a), _topic(b)
    if not left or not right:
        return False
    return len(left & right) / min(len(left), len(right)) >= 0.6


def extractive_checkpoint(
    previous: CheckpointSummary | Checkpoint | None, messages: Sequence[Mapping[str, Any]]
) -> CheckpointSummary:
    """The offline checkpoint: deterministic cues for done / pending / blocked / decided.

    A sentence goes to the first section whose cue it matches (blockers, decisions,
    completed, in progress, pending). A completed item removes the pending, in-progress
    and blocker items on the same topic.
    """
    lists: dict[str, list[str]] = {
        name: list(getattr(previous, name)) if previous is not None else [] for name in SECTIONS
    }
    for message in messages:
        text = render_transcript([message]).split("] ", 1)[-1]
        for sentence in (s.strip() for s in SENTENCE_END.split(text)):
            if len(sentence) < 8:
                continue
            section = next((name for name, cue in CUES.items() if cue.search(sentence)), None)
            if section is None:
                continue
            item = sentence if len(sentence) <= 200 else sentence[:199] + "…"
            if section == "completed":
                for open_section in ("pending", "in_progress", "blockers"):
                    lists[open_section] = [
                        x for x in lists[open_section] if not _same_topic(x, item)
                    ]
            if item not in lists[section]:
                lists[section].append(item)
    return CheckpointSummary(**{name: items[-MAX_ITEMS:] for name, items in lists.items()})
