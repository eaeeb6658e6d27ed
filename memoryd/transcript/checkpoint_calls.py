"""A tool loop as a checkpoint's items (pure; docs/design.md#agent-transcripts).

What an engineer notes of an agent's tool loop: each distinct call once, with what came
of it (``completed``); the step the agent was on when the checkpoint was taken, in its
own words, and the call it made (``in_progress``); the last command that failed and was
not run again with success (``blockers``). A call's line is its command in backticks, or
what another tool did (``edited src/a.py``), then its outcome: the test tally and the
failing tests, the exception with where it was raised, the error line or the exit
status; for a file shown, the names it defines. Each line also has a brief form (the
tally, the exception's name), for when the budget holds no more.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from memoryd.transcript.messages import MessageView, sentences, shorten
from memoryd.transcript.outcomes import shows_only
from memoryd.transcript.output_places import definitions, named_phrase
from memoryd.transcript.toolcalls import Outcome, ToolCall

MAX_LINE_CHARS = 200
MAX_STEP_CHARS = 160
MAX_ERROR_CHARS = 90
BRIEF_ERROR_CHARS = 50
MAX_BOTH_CHARS = 60
"""A call run several times shows its first and its last outcome when both are this
short together, else its last."""
SHOWN_FAILURES = 4
SHOWN_DEFINITIONS = 4
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
_TIMING = re.compile(r"\s+in [\d.]+\s*s(?:econds)?\b.*$")
_ASSERTION = "AssertionError"
"""What a failing test raises: a tally does not repeat it."""
_FAILED_COUNT = re.compile(r"^(\d+ failed)\b.*$")
_CALL_LINE = re.compile(
    r"^(?P<key>`[^`]+`|(?:edited|created|wrote|viewed|read|searched for|fetched"
    r"|undid an edit of) .+?)(?: \(\d+x\))?(?=: |$)"
)
"""A line of :func:`call_line`: the call it stands for (its command or what the tool
did), how often it was made, its outcome."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """An item that may enter a checkpoint's list, if it fits."""

    section: str
    position: float
    score: int
    text: str
    key: str
    """Items with the same key are the same item (the call a call line stands for)."""
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

    completed: list[Candidate] = field(default_factory=list)
    in_progress: list[Candidate] = field(default_factory=list)
    blockers: list[Candidate] = field(default_factory=list)
    has_step: bool = False
    """Whether the messages end in a step of the loop (their last step replaces any before)."""
    failed: bool = False
    """Whether a call failed in these messages."""
    keys: frozenset[str] = frozenset()
    """The keys of every call made in these messages."""


def outcome_phrase(
    outcome: Outcome | None, brief: bool = False, reads: bool = False, located: bool = True
) -> str:
    """A call's outcome as a note says it (pure): the test tally with the failing tests,
    else the exception raised (after the ones it chained) and where, else the error line
    or the exit status; for a call that ``reads`` a file, the names it showed defined; ""
    when the output shows nothing of note. ``brief``: without the failing tests, where
    the exception was raised, what a file defines, or the tally of a run that passed;
    ``located=False``: without where the exception was raised (:func:`where_raised`)."""
    if outcome is None:
        return ""
    if outcome.tally and brief and not outcome.failed and not outcome.failures:
        return ""  # a run that passed, in brief: like any success, nothing to note
    if outcome.tally:
        said = _TIMING.sub("", outcome.tally)
        if outcome.failures:
            said = _FAILED_COUNT.sub(r"\1", said)
        if outcome.failures and not brief:
            shown = ", ".join(outcome.failures[:SHOWN_FAILURES])
            more = len(outcome.failures) - SHOWN_FAILURES
            said += f": {shown}" + (f" and {more} more" if more > 0 else "")
        raised = [name for name in outcome.exceptions if name != _ASSERTION]
        return said + (f" ({', '.join(raised[:3])})" if raised else "")
    if outcome.exceptions:
        *before, last = outcome.exceptions
        said = last + (f" (after {', '.join(before[:2])})" if before else "")
        return said if brief or not located else said + where_raised(outcome)
    if outcome.error_line:
        status = f"exit {outcome.status}, " if outcome.status else ""
        return status + shorten(outcome.error_line, BRIEF_ERROR_CHARS if brief else MAX_ERROR_CHARS)
    if outcome.status:
        return f"exit {outcome.status}"
    if outcome.failed:
        return "failed"
    defined = definitions(outcome.listing) if reads and outcome.listing and not brief else ()
    shown = ", ".join(defined[:SHOWN_DEFINITIONS])
    return shown + (", …" if len(defined) > SHOWN_DEFINITIONS else "")


def where_raised(outcome: Outcome | None, whole: bool = False) -> str:
    """`` at file line N in function`` of the exception an outcome ends in, the file's
    whole path when ``whole``; "" for none."""
    if outcome is None or outcome.location is None or not outcome.exceptions or outcome.tally:
        return ""
    path, line, function = outcome.location
    shown = path if whole else path.rsplit("/", 1)[-1]
    return f" at {shown} line {line}" + (f" in {function}" if function else "")


def call_name(call: ToolCall) -> str:
    """How a line names a call: its command in backticks, else what the tool did."""
    if call.command is not None:
        return f"`{call.command}`"
    return call.action or call.label


def _reads(call: ToolCall) -> bool:
    """Whether a call only shows something (a file, a folder, a diff)."""
    if call.command is None:
        return not call.edits
    return shows_only(call.command)


def call_line(calls: Sequence[ToolCall], brief: bool = False, named: bool = False) -> str:
    """One line for the runs of one call (pure): its name, how often, and its outcome
    (the first and the last when they differ and both are short, else the last, and the
    exceptions that earlier runs raised, then where the last was raised when the line has
    room); ``brief``: in fewer words (:func:`outcome_phrase`); ``named``: with the whole
    path where it was raised and the frames and paths the output names, whole items
    within the line's length."""
    line = call_name(calls[0])
    if len(calls) > 1:
        line += f" ({len(calls)}x)"
    reads = _reads(calls[0])
    first = outcome_phrase(calls[0].outcome, brief, reads, False) if len(calls) > 1 else ""
    last = outcome_phrase(calls[-1].outcome, brief, reads, False)
    said = last or first
    if first and last and first != last:
        both = len(first) + len(last) <= MAX_BOTH_CHARS
        said = f"{first}, last: {last}" if both else f"last {last}"
    earlier = [
        name
        for call in calls[:-1]
        for name in (call.outcome.exceptions if call.outcome is not None else ())
        if name not in said and name != _ASSERTION
    ]
    if earlier:
        said += f" (earlier {', '.join(dict.fromkeys(earlier))})"
    where = "" if brief or not last else where_raised(calls[-1].outcome, named)
    if where and len(line) + len(said) + len(where) + 2 <= MAX_LINE_CHARS:
        said += where
    text = shorten(f"{line}: {said}" if said else line, MAX_LINE_CHARS)
    found = _found(calls[-1].outcome, text, MAX_LINE_CHARS - len(text) - 2) if named else ""
    return f"{text}; {found}" if found and said else f"{text}: {found}" if found else text


def _found(outcome: Outcome | None, shown: str, room: int) -> str:
    """The frames and paths an outcome names that ``shown`` does not hold, whole, within
    ``room`` characters."""
    if outcome is None or room <= 0:
        return ""
    frames = [f for f in outcome.frames if f.rsplit(" line ", 1)[0] not in shown]
    named = [path for path in outcome.paths() if path not in shown]
    return named_phrase(frames, named, room, "via " if outcome.location else "at ")


def call_key(item: str) -> str | None:
    """The call a line made by :func:`call_line` stands for; None for another item (pure)."""
    found = _CALL_LINE.match(item)
    return found["key"] if found else None


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
        weight = SHOW_SCORE if _reads(first) else SHELL_SCORE
    return weight + (FAILED_BONUS if any(_failed(c) for c in calls) else 0)


def loop_items(views: Sequence[MessageView], fixed: int, reported: float = -1.0) -> Loop:
    """The items of the tool loop in ``views`` (pure); ``fixed`` is the score of the
    items that must be there (the last step, the blocker).

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
    loop = Loop(keys=frozenset(groups), failed=any(_failed(c) for g in groups.values() for c in g))
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
        full = score - FULL_PENALTY
        candidate = Candidate(
            "completed", places[name], score, line, name, brief, full, named, score - NAMED_PENALTY
        )
        if name == blocker:
            loop.blockers.append(_fixed(candidate, "blockers", fixed))
        elif name in step_keys:
            loop.in_progress.append(_fixed(candidate, "in_progress", fixed))
        else:
            loop.completed.append(candidate)
    if step is not None:
        loop.has_step = True
        said = " ".join(sentences(step.text))
        if said:
            text = shorten(LAST_STEP + said, MAX_STEP_CHARS)
            loop.in_progress.append(Candidate("in_progress", step.position, fixed, text, text))
    return loop


def _fixed(candidate: Candidate, section: str, score: int) -> Candidate:
    """The step or the blocker: always there, with the places its output names."""
    text = candidate.named or candidate.text
    return Candidate(section, candidate.position, score, text, candidate.key)
