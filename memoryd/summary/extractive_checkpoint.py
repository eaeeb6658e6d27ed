"""The offline checkpoint builder: deterministic, no network (docs/design.md#summarizers).

Its answer is items (:mod:`memoryd.summary.items`), each of the kind of the list it goes
to, holding what the agent did and said: each distinct tool call with its outcome
(:mod:`memoryd.transcript.call_lines`), the step it was on, the last failure it did not
get past; what it reported done ("I fixed…", "Done:", "Tests pass"), what it is working
on and what it said it will do next ("Next I will…"), what blocks it, what was decided.
The user's turns add decisions and blockers only: an instruction is not work done. Tool
output and raw JSON never become an item. The previous checkpoint's items and the new
ones are folded (:func:`~memoryd.summary.folding.fold`), what was resolved removed, and
the whole fitted to the lists' budget. It reads messages as
:mod:`memoryd.transcript.messages` does, like the extractive summarizer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from memoryd.summary.checkpoint import ITEM_LEAD, render_lists
from memoryd.summary.folding import fold
from memoryd.summary.items import SECTIONS, HeadItem
from memoryd.transcript.call_lines import call_key, call_line, call_name, reads_only
from memoryd.transcript.cues import DECISION
from memoryd.transcript.messages import (
    MessageView,
    read_messages,
    sentences,
    shorten,
    standing_lines,
    task_view,
    without_standing,
)
from memoryd.transcript.toolcalls import ToolCall

CUES: dict[str, re.Pattern[str]] = {
    "blockers": re.compile(
        r"\b(blocked|blocker|waiting (on|for)|can'?t proceed|cannot proceed|stuck)\b", re.I
    ),
    "decisions": DECISION,
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
MAX_STEP_CHARS = 160
LAST_STEP = "Last step: "
"""What starts the ``in_progress`` item that states the agent's last step."""
SHELL_SCORE = 5
EDIT_SCORE = 3
SHOW_SCORE = 4
TOOL_SCORE = 2
FAILED_BONUS = 2
FULL_PENALTY = 2
"""How much less telling a call in full counts than listing it."""
NAMED_PENALTY = 10
"""How much less naming the places a call's output shows counts than listing it: only in
the room every item told in full leaves."""
FIXED_SCORE = 20
"""The last step and the blocker: always there."""
STATEMENT_SCORE = 10
"""What the agent reported, plans, decided; what blocks it."""
PREVIOUS_CALL_SCORE = 4
"""A call of the previous checkpoint: after the calls of these messages (the statements,
the step and the blocker it kept score as they did)."""
_WORD = re.compile(r"[a-z0-9]+")
_CUE_WORDS_TEXT = (
    "done completed finished fixed merged shipped resolved todo need needs to will should "
    "must next pending working on in progress currently started starting the a an we i is "
    "it implemented added updated created"
)
_CUE_WORDS = frozenset(_CUE_WORDS_TEXT.split())
"""The words of the cues: two statements are on the same topic by the words they share
besides these."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An item that may enter the checkpoint, if it fits: the item told in full, where it
    comes in the conversation, and how much it counts."""

    item: HeadItem
    position: float
    score: int
    brief: str = ""
    """The item in fewer words, when there is room for no more ("" : the text)."""
    full_score: int = 0
    """The score of telling the item in full rather than briefly."""
    named: str = ""
    """The item with the places its output names (``""``: none to add)."""
    named_score: int = 0
    """The score of telling those places too."""


@dataclass(slots=True)
class Loop:
    """What the tool loop of some messages puts in a checkpoint."""

    items: list[Candidate]
    has_step: bool = False
    """Whether the messages end in a step of the loop (their last step replaces any before)."""
    failed: bool = False
    """Whether a call failed in these messages."""
    keys: frozenset[str] = frozenset()
    """The keys of every call made in these messages."""


def _failed(call: ToolCall) -> bool:
    """Whether a call failed: its exit status or error flag, or tests that failed."""
    return call.outcome is not None and (call.outcome.failed or bool(call.outcome.failures))


def _score(calls: Sequence[ToolCall]) -> int:
    first = calls[0]
    if first.command is None:
        weight = EDIT_SCORE if any(c.edits for c in calls) else TOOL_SCORE
    elif first.edits:
        weight = EDIT_SCORE
    else:
        weight = SHOW_SCORE if reads_only(first) else SHELL_SCORE
    return weight + (FAILED_BONUS if any(_failed(c) for c in calls) else 0)


def _loop(views: Sequence[MessageView], reported: float) -> Loop:
    """The items of the tool loop in ``views``.

    Each distinct call is one line in ``completed``, but the calls of the last assistant
    message (when the messages end in the loop) go to ``in_progress`` with what the
    agent said of that step, and the last call that failed to ``blockers``, unless it
    was run again with success or the agent reported work done after it (at the
    position ``reported``).
    """
    groups: dict[str, list[ToolCall]] = {}
    places: dict[str, float] = {}
    for view in views:
        for index, call in enumerate(view.calls):
            name = call_name(call)
            groups.setdefault(name, []).append(call)
            places[name] = view.position + 0.5 + index / 1000
    failed = any(_failed(c) for g in groups.values() for c in g)
    loop = Loop([], keys=frozenset(groups), failed=failed)
    if not groups:
        return loop
    last = next((v for v in reversed(views) if v.speaker == "assistant"), None)
    step = last if last is not None and last.calls else None
    failing = max(
        (c for g in groups.values() for c in g if _failed(c)),
        key=lambda c: c.position,
        default=None,
    )
    blocker = None
    if failing is not None and failing.position + 0.5 > reported:
        # Unless the same call succeeded since.
        blocker = call_name(failing) if _failed(groups[call_name(failing)][-1]) else None
    step_keys = {call_name(c) for c in step.calls} if step is not None else set()
    for name, calls in groups.items():
        line, brief = call_line(calls), call_line(calls, brief=True)
        named = call_line(calls, named=True)
        score = _score(calls)
        if name == blocker or name in step_keys:
            # The step or the blocker: always there, with the places its output names.
            section = "blockers" if name == blocker else "in_progress"
            loop.items.append(Candidate(HeadItem(section, named), places[name], FIXED_SCORE))
        else:
            item = HeadItem("completed", line)
            full_score, named_score = score - FULL_PENALTY, score - NAMED_PENALTY
            loop.items.append(
                Candidate(item, places[name], score, brief, full_score, named, named_score)
            )
    if step is not None:
        loop.has_step = True
        said = " ".join(sentences(step.text))
        if said:
            text = shorten(LAST_STEP + said, MAX_STEP_CHARS)
            loop.items.append(Candidate(HeadItem("in_progress", text), step.position, FIXED_SCORE))
    return loop


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


def _previous_items(previous: Sequence[HeadItem], loop: Loop, reported: bool) -> list[Candidate]:
    """The previous checkpoint's items, before every message. A call made again is told
    by its new line. Its last step gives way to the messages' own, and the call it was on
    becomes work done; so does the call that blocked it, once another failed or the
    agent ``reported`` work done."""
    found: list[Candidate] = []
    for name in SECTIONS:
        items = [x for x in previous if x.kind == name and _is_item(x.text)]
        for index, item in enumerate(items):
            call = call_key(item.text)
            if call in loop.keys:
                continue
            stale = loop.has_step if name == "in_progress" else loop.failed or reported
            score = STATEMENT_SCORE
            if item.text.startswith(LAST_STEP):
                if stale:
                    continue
                score = FIXED_SCORE
            elif call is not None and name in ("in_progress", "blockers") and not stale:
                score = FIXED_SCORE
            elif call is not None:
                item, score = replace(item, kind="completed"), PREVIOUS_CALL_SCORE
            found.append(Candidate(item, index - len(items), score))
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
            item = HeadItem(section, shorten(sentence, MAX_ITEM_CHARS))
            place = view.position + index / (2 * len(said))
            found.append(Candidate(item, place, STATEMENT_SCORE))
    return found


def _statement(item: HeadItem) -> bool:
    """Whether an item is something the agent or the user said (not a call, not the step)."""
    return call_key(item.text) is None and not item.text.startswith(LAST_STEP)


def _resolve(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The items folded in conversation order (:func:`~memoryd.summary.folding.fold`: the
    same item twice is kept once, where it came last), less the pending, in-progress and
    blocker statements that a later completed statement on the same topic resolved."""
    ordered = sorted(candidates, key=lambda c: c.position)
    of = {id(c.item): c for c in ordered}
    kept = [of[id(item)] for item in fold((), [c.item for c in ordered])]
    done = [c for c in kept if c.item.kind == "completed" and _statement(c.item)]
    return [
        c
        for c in kept
        if c.item.kind not in _OPEN
        or not _statement(c.item)
        or not any(d.position > c.position and _same_topic(c.item.text, d.item.text) for d in done)
    ]


def _fit(candidates: Sequence[Candidate], budget: int) -> list[HeadItem]:
    """The items that fit ``budget`` tokens as :func:`render_lists` shows them.

    Each item goes in first in its brief form, the highest score first and on a tie the
    later; its full text replaces the brief one when there is room left at its
    ``full_score`` (a call's score less :data:`FULL_PENALTY`: every command is listed
    before the older ones are told in full), and its ``named`` text (the places its
    output names) replaces that at its ``named_score``, in the room all of them leave."""
    room = budget * 4 - len(render_lists(()))
    shown = [""] * len(candidates)
    steps = [(c.score, c.position, i, 0) for i, c in enumerate(candidates)]
    steps += [
        (c.full_score, c.position, i, 1)
        for i, c in enumerate(candidates)
        if c.brief and c.brief != c.item.text
    ]
    steps += [
        (c.named_score, c.position, i, 2)
        for i, c in enumerate(candidates)
        if c.named and c.named != c.item.text
    ]
    opened: set[str] = set()
    for _, _, index, tier in sorted(steps, key=lambda s: (-s[0], -s[1], s[3])):
        candidate = candidates[index]
        if tier:
            text = candidate.item.text if tier == 1 else candidate.named
            more = len(text) - len(shown[index])
            if shown[index] and more <= room:
                room -= more
                shown[index] = text
            continue
        text = candidate.brief or candidate.item.text
        section = candidate.item.kind
        cost = len(ITEM_LEAD) + len(text) - (0 if section in opened else len(" none"))
        if cost <= room:
            room -= cost
            shown[index] = text
            opened.add(section)
    return [replace(c.item, text=text) for c, text in zip(candidates, shown, strict=True) if text]


def extractive_checkpoint(
    previous: Sequence[HeadItem], messages: Sequence[Mapping[str, Any]], budget: int
) -> list[HeadItem]:
    """The offline checkpoint of ``messages`` folded into the ``previous`` one's items
    (pure), in conversation order, within ``budget`` tokens as the checkpoint message
    shows its lists (:func:`~memoryd.summary.checkpoint.render_lists`).

    The tool loop gives one line per distinct call with its outcome, the last step and
    the last failure not run again with success; the agent's sentences (and, for
    decisions and blockers, the user's turns after the task) go to the list
    :func:`section_of` names, except that what the agent says it will do in a message
    that makes a tool call is what that call does, not pending. A completed statement
    removes the pending, in-progress and blocker statements on the same topic. The last
    step, the blocker, the agent's statements and the previous items come first; the
    calls after them, the commands and edits before the reads.
    """
    views = read_messages(messages)
    said = _said(views, task_view(views))
    reported = max((c.position for c in said if c.item.kind == "completed"), default=-1.0)
    loop = _loop(views, reported)
    candidates = [*_previous_items(previous, loop, reported >= 0), *loop.items, *said]
    return _fit(_resolve(candidates), budget)
