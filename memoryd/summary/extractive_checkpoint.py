"""The offline checkpoint builder: deterministic, no network (docs/design.md#summarizers).

The lists hold what the agent did and said: each distinct tool call with its outcome,
the step it was on, the last failure it did not get past
(:mod:`memoryd.transcript.checkpoint_calls`); what it reported done ("I fixed…", "Done:",
"Tests pass"), what it is working on and what it said it will do next ("Next I will…"),
what blocks it, what was decided. The user's turns add decisions and blockers only: an
instruction is not work done. Tool output and raw JSON never become an item. It reads
messages as :mod:`memoryd.transcript.messages` does, like the extractive summarizer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from memoryd.summary.checkpoint import (
    ITEM_LEAD,
    SECTIONS,
    Checkpoint,
    CheckpointSummary,
    render_lists,
)
from memoryd.transcript.checkpoint_calls import (
    LAST_STEP,
    Candidate,
    Loop,
    call_key,
    loop_items,
)
from memoryd.transcript.messages import (
    MessageView,
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
_OPEN = ("pending", "in_progress", "blockers")
MAX_ITEM_CHARS = 200
_EMPTY = CheckpointSummary(completed=[], in_progress=[], pending=[], blockers=[], decisions=[])
FIXED_SCORE = 20
"""The last step and the blocker: always there."""
STATEMENT_SCORE = 10
"""What the agent reported, plans, decided; what blocks it."""
PREVIOUS_CALL_SCORE = 4
"""A call of the previous checkpoint: after the calls of these messages (the statements,
the step and the blocker it kept score as they did)."""
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


def _previous_items(
    previous: CheckpointSummary | Checkpoint | None, loop: Loop, reported: bool
) -> list[Candidate]:
    """The previous checkpoint's items, before every message. A call made again is told
    by its new line. Its last step gives way to the messages' own, and the call it was on
    becomes work done; so does the call that blocked it, once another failed or the
    agent ``reported`` work done."""
    if previous is None:
        return []
    found: list[Candidate] = []
    for name in SECTIONS:
        items = [x for x in getattr(previous, name) if _is_item(x)]
        for index, item in enumerate(items):
            call = call_key(item)
            if call in loop.keys:
                continue
            stale = loop.has_step if name == "in_progress" else loop.failed or reported
            section, score = name, STATEMENT_SCORE
            if item.startswith(LAST_STEP):
                if stale:
                    continue
                score = FIXED_SCORE
            elif call is not None and name in ("in_progress", "blockers") and not stale:
                score = FIXED_SCORE
            elif call is not None:
                section, score = "completed", PREVIOUS_CALL_SCORE
            found.append(Candidate(section, index - len(items), score, item, call or item))
    return found


def _said(views: Sequence[MessageView], task: MessageView | None) -> list[Candidate]:
    """The sentences of the agent's text (and, for decisions and blockers, of the user's
    turns after the task), each in the list :func:`section_of` names."""
    standing = standing_lines(views)
    found: list[Candidate] = []
    for view in views:
        if view is task or not view.text or view.speaker not in ("user", "assistant"):
            continue
        said = sentences(without_standing(view.text, standing))
        for index, sentence in enumerate(said):
            section = section_of(sentence, view.speaker)
            if section is None or len(sentence) < 8 or not _is_item(sentence):
                continue
            if section == "pending" and view.calls:
                continue  # "Next I will run the tests", and the same message runs them
            item = shorten(sentence, MAX_ITEM_CHARS)
            place = view.position + index / (2 * len(said))
            found.append(Candidate(section, place, STATEMENT_SCORE, item, item))
    return found


def _statement(item: str) -> bool:
    """Whether an item is something the agent or the user said (not a call, not the step)."""
    return call_key(item) is None and not item.startswith(LAST_STEP)


def _resolve(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The items in conversation order, each once; a completed statement removes the
    pending, in-progress and blocker statements before it on the same topic."""
    kept: dict[tuple[str, str], Candidate] = {}
    for candidate in sorted(candidates, key=lambda c: c.position):
        if candidate.section == "completed" and _statement(candidate.text):
            for slot, open_item in list(kept.items()):
                if (
                    slot[0] in _OPEN
                    and _statement(open_item.text)
                    and _same_topic(open_item.text, candidate.text)
                ):
                    del kept[slot]
        kept.setdefault((candidate.section, candidate.key), candidate)
    return list(kept.values())


def _fit(candidates: Sequence[Candidate], budget: int) -> list[str]:
    """The text of each item that fits ``budget`` tokens as :func:`render_lists` shows
    the lists ("" for one that does not).

    Each item goes in first in its brief form, the highest score first and on a tie the
    later; its full text replaces the brief one when there is room left at its
    ``full_score`` (a call's score less
    :data:`~memoryd.transcript.checkpoint_calls.FULL_PENALTY`: every command is listed
    before the older ones are told in full), and its ``named`` text (the places its
    output names) replaces that at its ``named_score``, in the room all of them leave."""
    room = budget * 4 - len(render_lists(_EMPTY))
    shown = [""] * len(candidates)
    steps = [(c.score, c.position, i, 0) for i, c in enumerate(candidates)]
    steps += [
        (c.full_score, c.position, i, 1)
        for i, c in enumerate(candidates)
        if c.brief and c.brief != c.text
    ]
    steps += [
        (c.named_score, c.position, i, 2)
        for i, c in enumerate(candidates)
        if c.named and c.named != c.text
    ]
    opened: set[str] = set()
    for _, _, index, tier in sorted(steps, key=lambda s: (-s[0], -s[1], s[3])):
        candidate = candidates[index]
        if tier:
            text = candidate.text if tier == 1 else candidate.named
            more = len(text) - len(shown[index])
            if shown[index] and more <= room:
                room -= more
                shown[index] = text
            continue
        text = candidate.brief or candidate.text
        cost = len(ITEM_LEAD) + len(text) - (0 if candidate.section in opened else len(" none"))
        if cost <= room:
            room -= cost
            shown[index] = text
            opened.add(candidate.section)
    return shown


def extractive_checkpoint(
    previous: CheckpointSummary | Checkpoint | None,
    messages: Sequence[Mapping[str, Any]],
    budget: int,
) -> CheckpointSummary:
    """The offline checkpoint of ``messages`` folded into ``previous`` (pure), its lists
    within ``budget`` tokens as the checkpoint message shows them.

    The tool loop gives one line per distinct call with its outcome, the last step and
    the last failure not run again with success (:func:`loop_items`); the agent's
    sentences (and, for decisions and blockers, the user's turns after the task) go to
    the list :func:`section_of` names, except that what the agent says it will do in a
    message that makes a tool call is what that call does, not pending. A completed
    statement removes the pending, in-progress and blocker statements on the same topic.
    The last step, the blocker, the agent's statements and the previous items come
    first; the calls after them, the commands and edits before the reads.
    """
    views = read_messages(messages)
    said = _said(views, task_view(views))
    reported = max((c.position for c in said if c.section == "completed"), default=-1.0)
    loop = loop_items(views, FIXED_SCORE, reported)
    candidates = [
        *_previous_items(previous, loop, reported >= 0),
        *loop.completed,
        *loop.in_progress,
        *loop.blockers,
        *said,
    ]
    resolved = sorted(_resolve(candidates), key=lambda c: c.position)
    lists: dict[str, list[str]] = {name: [] for name in SECTIONS}
    for candidate, text in zip(resolved, _fit(resolved, budget), strict=True):
        if text:
            lists[candidate.section].append(text)
    return CheckpointSummary(**lists)
