"""The offline summarizer: deterministic, no network (docs/design.md#summarizers).

A summary is a list of items in conversation order, within the summary budget:

- ``Task: …``, the task in one line (the first user turn, or the previous summary's);
- each tool call (or each run of the same call) as one line: the command or tool with its
  key argument, and its outcome (exit status, first error line, exceptions);
- the sentences of the user's turns and the agent's text that carry findings, decisions,
  plans, preferences and action items.

The items that carry the most are chosen first. Tool output is never an item; standing
instructions (lines that several user messages repeat), and what a task message says
around its ``<task>``-like block, are not copied. A previous summary's items are
candidates like any others, so the result stays one summary of bounded size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.summarizers.toolcalls import ToolCall
from memoryd.summarizers.transcript import (
    MAX_TASK_CHARS,
    SENTENCE_END,
    MessageView,
    previous_task,
    read_messages,
    sentences,
    shorten,
    standing_lines,
    task_body,
    task_phrase,
    task_view,
    without_standing,
)
from memoryd.tokens import estimate_text_tokens

__all__ = ["SENTENCE_END", "extractive_summary", "score"]

_CUE_TABLE: tuple[tuple[int, bool, str, tuple[str, ...]], ...] = (
    (6, True, r"\b(decided|decision|agreed|we'?ll go with|going with|settled on|chose|choose)\b",
     ("decid", "decision", "agreed", "go with", "going with", "settled on", "chose")),
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
HEADERS = {"narrative": "Key points, oldest first:", "rolling": "Earlier, in brief:"}
_VERBATIM_HEADER = "Details kept verbatim:"


@dataclass(frozen=True, slots=True)
class Item:
    """A line that may enter the summary."""

    position: float
    text: str
    score: int


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


def call_lines(views: Sequence[MessageView], style: str) -> list[Item]:
    """One item per distinct tool call, repeats folded in with their count, where the
    last of them was made (pure)."""
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
        failed = any(c.outcome is not None and c.outcome.failed for c in calls)
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
        weight += (FAILED_BONUS if failed else 0) + (FOUND_BONUS if names else 0)
        items.append(Item(places[key], line, weight))
    return items


def statement_lines(
    views: Sequence[MessageView], style: str, task: MessageView | None, stated: str | None
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
                items.append(Item(place, _phrase(view.speaker, sentence, style), weight))
    return items


def _phrase(speaker: str, text: str, style: str) -> str:
    if style == "rolling":
        return f"The {speaker} said: {text}"
    return f"{speaker.capitalize()}: {text}"


def previous_lines(previous_summary: str) -> list[Item]:
    """The items of a summary being folded in, before every message (pure): its bullet
    lines as they are, its prose sentence by sentence; not its header, ``Task:`` line or
    verbatim section header."""
    lines = []
    for line in previous_summary.splitlines():
        stripped = line.strip()
        if not stripped or stripped in HEADERS.values() or stripped == _VERBATIM_HEADER:
            continue
        if stripped.startswith(("- ", "* ")):
            lines.append(stripped[2:].strip())
        else:
            lines.extend(s.strip() for s in SENTENCE_END.split(stripped))
    kept = [x for x in lines if len(x) >= 2 and not x.startswith("Task:")]
    count = len(kept)
    return [Item(i - count, x, score(x) + PREVIOUS_BONUS) for i, x in enumerate(kept)]


def the_task(views: Sequence[MessageView], previous_summary: str | None) -> str | None:
    """The task as the summary states it (pure): the previous summary's ``Task:`` line,
    else, when there is no previous summary, the first user turn's."""
    if previous_summary:
        stated = previous_task(previous_summary)
        return shorten(stated, MAX_TASK_CHARS) if stated else None
    view = task_view(views)
    return task_phrase(view.text, standing_lines(views)) if view is not None else None


def extractive_summary(
    messages: Sequence[Mapping[str, Any]],
    previous_summary: str | None,
    max_summary_tokens: int,
    style: str = "narrative",
) -> str:
    """A deterministic summary of ``messages`` (and the summary before them) (pure).

    The ``Task:`` line first, then the highest-scoring items, later ones first on a
    tie, until the budget of ``max_summary_tokens`` is reached, listed in conversation
    order.
    """
    header = HEADERS["rolling" if style == "rolling" else "narrative"]
    budget = max(1, max_summary_tokens - estimate_text_tokens(header) - 1)
    views = read_messages(messages)
    task = the_task(views, previous_summary)
    pool = [
        *(previous_lines(previous_summary) if previous_summary else []),
        *call_lines(views, style),
        *statement_lines(views, style, None if previous_summary else task_view(views), task),
    ]
    seen: set[str] = set()
    chosen: list[tuple[float, str]] = []
    used = 0
    if task:
        # At most an eighth of a small budget: the task in a few words, not a paragraph.
        room = max(TASK_MIN_CHARS, budget * 4 // 8)
        line = "- " + shorten(f"Task: {task}", min(room, budget * 4 - 8))
        chosen.append((float("-inf"), line))
        used += estimate_text_tokens(line) + 1
    # On a tie the later item wins: the state the conversation reached matters most.
    for item in sorted(pool, key=lambda c: (-c.score, -c.position)):
        key = item.text.casefold()
        if key in seen:
            continue
        seen.add(key)
        line = "- " + item.text
        cost = estimate_text_tokens(line) + 1
        if used + cost > budget:
            continue
        chosen.append((item.position, line))
        used += cost
    if not chosen and pool:
        first = min(pool, key=lambda c: c.position)
        chosen.append((first.position, "- " + shorten(first.text, max(8, budget * 4 - 8))))
    chosen.sort(key=lambda pair: pair[0])
    return "\n".join([header, *(line for _, line in chosen)])
