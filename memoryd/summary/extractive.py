"""The offline summarizer: deterministic, no network (docs/design.md#summarizers).

A summary is the task line and items (:mod:`memoryd.summary.items`), each with its
kind and the id of its message:

- ``Task: …``, the task in one line (the first user turn, or the previous summary's);
- each tool call (or each run of the same call) as one line: the command or tool with its
  key argument, and its outcome (exit status, first error line, exceptions, the failing
  tests): a failure when it failed (resolved when a later run did not), a change for an
  edit, else a routine call;
- the sentences of the user's turns and the agent's text that carry decisions (and the
  user's instructions), findings and next steps; the others are routine.

Tool output is never an item; standing instructions (lines that several user messages
repeat), and what a task message says around its ``<task>``-like block, are not copied.
The previous summary is read back into items and the new ones are folded after them
(:mod:`memoryd.summary.folding`), so the result stays one summary of bounded size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.summary.folding import fit, fold
from memoryd.summary.items import (
    HEADERS,
    RESOLVED_BY_LATER_CALL,
    Head,
    HeadItem,
    parse_head,
    render_head,
)
from memoryd.transcript.cues import DECISION
from memoryd.transcript.messages import (
    MAX_TASK_CHARS,
    SENTENCE_END,
    MessageView,
    read_messages,
    sentences,
    shorten,
    standing_lines,
    task_body,
    task_phrase,
    task_view,
    without_standing,
)
from memoryd.transcript.toolcalls import ToolCall

__all__ = ["HEADERS", "SENTENCE_END", "extractive_summary", "score"]

_CUE_TABLE: tuple[tuple[int, bool, str, tuple[str, ...]], ...] = (
    (6, True, DECISION.pattern,
     ("decid", "decision", "agreed", "go with", "going with", "settled on", "chose", "choose")),
    (5, False, r"\b(action item|todo|to-do|follow[- ]up|next step|deadline|due)\b",
     ("action item", "todo", "to-do", "follow", "next step", "deadline", "due")),
    (5, True, r"\b(root cause|the (bug|issue|problem|cause|fix) (is|was)|caused by|turns out)\b",
     ("root cause", "the bug", "the issue", "the problem", "the cause", "the fix", "caused by",
      "turns out")),
    (4, True,
     r"\b(fixed|resolved|implemented|tests? pass(es|ed)?|all tests|now passes|works now)\b",
     ("fixed", "resolved", "implemented", "test", "now passes", "works now")),
    (4, True, r"\b(next,? (i|we)|i will|i'?ll|we will|going to)\b",
     ("next", "i will", "ill", "i'll", "we will", "going to")),
    (4, False, r"\b(prefer|preference|always|never|please (use|keep|avoid|don'?t))\b",
     ("prefer", "always", "never", "please")),
    (3, False, r"\b(must|need to|needs to|should|will|remember|important|note that|key|next)\b",
     ("must", "need", "should", "will", "remember", "important", "note that", "key", "next")),
    (3, False, r"\b(because|so that|reason|instead)\b",
     ("because", "so that", "reason", "instead")),
    (2, False, r"\b(is|are|was|uses?|runs?|lives? in|located|found)\b", ()),
    (2, False, r"\d", ()),
    (1, False, r"[/._][A-Za-z0-9]", ()),
)  # fmt: skip
CUES: tuple[tuple[int, bool, re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (weight, report, re.compile(pattern, re.IGNORECASE), gates)
    for weight, report, pattern, gates in _CUE_TABLE
)
"""(weight, whether it is a report, pattern, gates) of each cue family. A report is a
decision, a finding, work done or a plan: what an agent's statement reports. A family is
searched for only in a sentence whose lower case holds one of its gates (none: always)."""
FILLER = re.compile(
    r"^(now )?(let me|let's|i'll (now )?(look|check|view|examine|read|run|start|explore|see|"
    r"search|open|try)|great|perfect|good|okay|ok|sure|alright|hmm)\b",
    re.IGNORECASE,
)
"""The agent thinking aloud ("Let me look at the file."): worth less than what it found."""
USER_ASK = re.compile(
    r"^(please|can you|could you|would you|let'?s|make|use|add|fix|remove|change|update|keep"
    r"|don'?t|do not|never|always|stop|try|run|write|create|implement|rename|move|check)\b"
    r"|\b(please|i want|i'?d like|we need|you need|must|should|instead|from now on)\b",
    re.IGNORECASE,
)
"""A user's instruction or request: what the user wants comes before the agent's doings."""
TASK_MIN_CHARS = 60
USER_BONUS = 4
REPORT_BONUS = 3
"""An agent's decision, finding, report or plan comes before the tool calls behind it."""
AGENT_BONUS = 1
"""What the agent says without a cue still beats nothing, when there is room."""
PREVIOUS_BONUS = 4
MIN_SCORE = 1
SHELL_SCORE = 5
EDIT_SCORE = 5
TOOL_SCORE = 2
FAILED_BONUS = 2
FOUND_BONUS = 2
"""A call whose line names places (a traceback's frames, paths, definitions) carries more."""


@dataclass(frozen=True, slots=True)
class Item:
    """A line that may enter the summary: where it was said, its text, its kind, and
    the id of its message."""

    position: float
    text: str
    score: int
    kind: str = "routine"
    source: str | None = None
    resolved: str | None = None


def score(sentence: str) -> int:
    """How much a sentence carries: the weights of the cue families it matches (pure)."""
    return scored(sentence)[0]


def scored(sentence: str) -> tuple[int, bool]:
    """:func:`score`, and whether the sentence reports something (pure)."""
    lowered = sentence.lower()
    weight, reports = 0, False
    for family_weight, report, pattern, gates in CUES:
        if gates and not any(gate in lowered for gate in gates):
            continue
        if pattern.search(sentence):
            weight += family_weight
            reports = reports or report
    return (weight - 4 if FILLER.match(sentence) else weight), reports


def sentence_kind(sentence: str, speaker: str) -> str:
    """The kind of item a sentence is (pure): a decision (or a user's instruction), a
    finding (a root cause, work reported done), a next step, else routine."""
    lowered = sentence.lower()
    for index, kind in _SENTENCE_KINDS:
        _, _, pattern, gates = CUES[index]
        if (not gates or any(g in lowered for g in gates)) and pattern.search(sentence):
            return kind
    if speaker == "user" and USER_ASK.search(sentence):
        return "decision"
    return "routine"


_SENTENCE_KINDS = ((0, "decision"), (2, "finding"), (3, "finding"), (1, "next"), (4, "next"))
"""Indexes of :data:`CUES` families and the kind of item a sentence matching one is."""


def _source(messages: Sequence[Mapping[str, Any]], position: int) -> str | None:
    value = messages[position].get("id") if 0 <= position < len(messages) else None
    return value if isinstance(value, str) and value else None


def call_lines(
    views: Sequence[MessageView], style: str, messages: Sequence[Mapping[str, Any]] = ()
) -> list[Item]:
    """One item per distinct tool call, repeats folded in with their count, where the
    last of them was made (pure): a failure when its last run failed (resolved when an
    earlier one failed and the last did not), a change for an edit, else routine."""
    groups: dict[tuple[str, bool], list[ToolCall]] = {}
    places: dict[tuple[str, bool], float] = {}
    for view in views:
        for index, call in enumerate(view.calls):
            key = (call.label, call.command is not None)
            groups.setdefault(key, []).append(call)
            places[key] = view.position + 0.5 + index / 1000
    items = []
    for key, calls in groups.items():
        first = calls[0]
        outcomes = [c.outcome.text() for c in calls if c.outcome is not None]
        shown = list(dict.fromkeys(o for o in outcomes if o))
        outcome = shown[0] if len(shown) == 1 else f"{shown[0]}; last: {shown[-1]}" if shown else ""
        last = calls[-1].outcome
        named = last.places(outcome) if last is not None else ""
        if named:
            outcome = f"{outcome}; {named}" if outcome else named
        failing = [c for c in calls if c.outcome is not None and c.outcome.failed]
        tests = [t for c in failing if c.outcome is not None for t in c.outcome.failures]
        tests = [t for t in dict.fromkeys(tests) if t not in outcome][:3]
        if tests:
            outcome += "; failed: " + ", ".join(tests)
        if first.command is not None:
            action, weight = f"ran `{first.label}`", SHELL_SCORE
        else:
            action = first.label
            weight = EDIT_SCORE if any(c.edits for c in calls) else TOOL_SCORE
        if len(calls) > 1:
            action += f" ({len(calls)} times)"
        line = f"{action} → {outcome}" if outcome else action
        if style == "rolling":
            line = (
                f"The assistant {line}"
                if first.command is not None
                else f"The assistant used {line}"
            )
        else:
            line = line[0].upper() + line[1:]
        names = bool(named) or (last is not None and bool(last.listing))
        weight += (FAILED_BONUS if failing else 0) + (FOUND_BONUS if names else 0)
        kind, resolved = "routine", None
        if failing:
            kind = "failure"
            if last is None or not last.failed:
                resolved = RESOLVED_BY_LATER_CALL
        elif any(c.edits for c in calls):
            kind = "change"
        origin = failing[-1].position if failing else calls[-1].position
        source = _source(messages, origin)
        items.append(Item(places[key], line, weight, kind, source, resolved))
    return items


def statement_lines(
    views: Sequence[MessageView],
    style: str,
    task: MessageView | None,
    stated: str | None,
    messages: Sequence[Mapping[str, Any]] = (),
) -> list[Item]:
    """The sentences of the user's turns and the agent's text, scored (pure).

    Of the ``task`` message, only what its task block says (:func:`task_body`) counts,
    without the sentence the ``Task:`` line already ``stated``.
    """
    standing = standing_lines(views)
    items = []
    for view in views:
        if not view.text or view.speaker not in ("user", "assistant"):
            continue
        text = task_body(view.text) if view is task else view.text
        said = sentences(without_standing(text, standing))
        if view is task:
            said = [x for x in said if shorten(x, MAX_TASK_CHARS) != stated]
        for index, sentence in enumerate(said):
            weight, reports = scored(sentence)
            if view.speaker == "user":
                weight += USER_BONUS if USER_ASK.search(sentence) else 0
            else:
                weight += REPORT_BONUS if reports else AGENT_BONUS
            if weight >= MIN_SCORE:
                place = view.position + index / (2 * len(said))
                kind = sentence_kind(sentence, view.speaker)
                items.append(
                    Item(
                        place,
                        _phrase(view.speaker, sentence, style),
                        weight,
                        kind,
                        _source(messages, view.position),
                    )
                )
    return items


def _phrase(speaker: str, text: str, style: str) -> str:
    if style == "rolling":
        return f"The {speaker} said: {text}"
    return f"{speaker.capitalize()}: {text}"


def the_task(views: Sequence[MessageView], previous: Head | None) -> str | None:
    """The task as the summary states it (pure): the previous head's ``Task:`` line,
    else, when there is no previous summary, the first user turn's."""
    if previous is not None:
        return shorten(previous.task, MAX_TASK_CHARS) if previous.task else None
    view = task_view(views)
    return task_phrase(view.text, standing_lines(views)) if view is not None else None


def new_items(
    messages: Sequence[Mapping[str, Any]], previous: Head | None, style: str
) -> tuple[str | None, list[HeadItem]]:
    """The task and the items of ``messages``, in conversation order (pure)."""
    views = read_messages(messages)
    task = the_task(views, previous)
    pool = [
        *call_lines(views, style, messages),
        *statement_lines(views, style, None if previous else task_view(views), task, messages),
    ]
    pool.sort(key=lambda item: item.position)
    return task, [HeadItem(i.kind, i.text, i.source, i.resolved) for i in pool]


def extractive_summary(
    messages: Sequence[Mapping[str, Any]],
    previous_summary: str | None,
    max_summary_tokens: int,
    style: str = "narrative",
) -> str:
    """A deterministic summary of ``messages`` folded into the summary before them (pure).

    The previous head is read back into items (:func:`parse_head`), the items of the
    messages are merged after them (:func:`fold`), and the whole is fitted to
    ``max_summary_tokens`` (:func:`fit`): the task line first, then the sections.
    """
    previous = parse_head(previous_summary) if previous_summary else None
    task, items = new_items(messages, previous, style)
    merged = fold(previous.items if previous else (), items)
    return render_head(fit(Head(task, tuple(merged)), max_summary_tokens, style), style)
