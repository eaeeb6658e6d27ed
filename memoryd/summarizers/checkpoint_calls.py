"""A tool loop as a checkpoint's items (pure; docs/design.md#agent-transcripts).

What an engineer notes of an agent's tool loop: each distinct call once, with what came
of it (``completed``); the step the agent was on when the checkpoint was taken, in its
own words, and the call it made (``in_progress``); the last command that failed and was
not run again with success (``blockers``). A call's line is its command in backticks, or
what another tool did (``edited src/a.py``), then its outcome: the test tally and the
failing tests, the exception with where it was raised, the error line, the exit status,
or ``ok``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from memoryd.summarizers.toolcalls import Outcome, ToolCall, definitions
from memoryd.summarizers.transcript import MessageView, sentences, shorten

MAX_LINE_CHARS = 200
MAX_STEP_CHARS = 160
MAX_ERROR_CHARS = 90
MAX_BOTH_CHARS = 60
"""A call run several times shows its first and its last outcome when both are this
short together, else its last."""
SHOWN_FAILURES = 4
SHOWN_DEFINITIONS = 4
OK = ""
LAST_STEP = "Last step: "
"""What starts the ``in_progress`` item that states the agent's last step."""
SHELL_SCORE = 5
EDIT_SCORE = 3
SHOW_SCORE = 4
TOOL_SCORE = 2
FAILED_BONUS = 2
FULL_PENALTY = 2
"""How much less telling a call in full counts than listing it."""
_TIMING = re.compile(r"\s+in [\d.]+\s*s(?:econds)?\b.*$")
_WRITES = re.compile(r"(?:>>?|\|\s*tee)\s*[^\s|&;<>]+\s*$")
"""A shell command that ends by writing a file (``cat <<'EOF' > x.py``): an edit."""
_SHOWS = re.compile(
    r"(?:cat|nl|head|tail|less|more|sed -n|ls|tree|wc|find|git (?:diff|show|log|status))\b"
)
"""A shell command that only shows something (a file, a folder, a diff): a read."""
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


def outcome_phrase(outcome: Outcome | None, brief: bool = False) -> str:
    """A call's outcome as a note says it (pure): the failing tests (or the tally) and
    the exceptions, else the exception raised and where, else the error line or the exit
    status; ``ok`` for a command that exited 0 and showed nothing of note; "" when the
    output shows nothing. ``brief``: the tally, the exception's name or the exit status."""
    if outcome is None:
        return ""
    if brief and (outcome.tally or outcome.exceptions):
        return _FAILED_COUNT.sub(r"\1", _TIMING.sub("", outcome.tally or outcome.exceptions[-1]))
    if brief and outcome.error_line:
        return f"exit {outcome.status}" if outcome.status else "failed"
    if brief and not outcome.failed:
        return ""
    defined = definitions(outcome.listing) if outcome.listing else ()
    if defined:
        shown = ", ".join(defined[:SHOWN_DEFINITIONS])
        return shown + (", …" if len(defined) > SHOWN_DEFINITIONS else "")
    if outcome.tally:
        said = _TIMING.sub("", outcome.tally)
        if outcome.failures:
            said = _FAILED_COUNT.sub(r"\1", said)
            shown = ", ".join(outcome.failures[:SHOWN_FAILURES])
            more = len(outcome.failures) - SHOWN_FAILURES
            said += f": {shown}" + (f" and {more} more" if more > 0 else "")
        raised = [name for name in outcome.exceptions if name != _ASSERTION]
        if raised:
            said += f" ({', '.join(raised[:3])})"
        return said
    if outcome.exceptions and outcome.error_line:
        names = list(outcome.exceptions)
        said = names[-1] + (f" (after {', '.join(names[:-1][:2])})" if names[1:] else "")
        if outcome.location is None:
            return said
        path, line, function = outcome.location
        where = f" in {function}" if function else ""
        return f"{said} at {path.rsplit('/', 1)[-1]} line {line}{where}"
    if outcome.error_line:
        status = f"exit {outcome.status}, " if outcome.status else ""
        return status + shorten(outcome.error_line, MAX_ERROR_CHARS)
    if outcome.status:
        return f"exit {outcome.status}"
    if outcome.status == 0:
        return OK
    return "failed" if outcome.failed else ""


def call_name(call: ToolCall) -> str:
    """How a line names a call: its command in backticks, else what the tool did."""
    if call.command is not None:
        return f"`{call.command}`"
    return call.action or call.label


def call_line(calls: Sequence[ToolCall], brief: bool = False) -> str:
    """One line for the runs of one call (pure): its name, how often, and its outcome
    (the first and the last when they differ); ``brief``: in fewer words."""
    line = call_name(calls[0])
    if len(calls) > 1:
        line += f" ({len(calls)}x)"
    ends = (calls[0], calls[-1]) if len(calls) > 1 else (calls[0],)
    said = list(dict.fromkeys(p for p in (outcome_phrase(c.outcome, brief) for c in ends) if p))
    if len(said) == 1:
        line += f": {said[0]}"
    elif said and len(said[0]) + len(said[-1]) <= MAX_BOTH_CHARS:
        line += f": {said[0]}, last: {said[-1]}"
    elif said:
        line += f": last {said[-1]}"
    return shorten(line, MAX_LINE_CHARS)


def call_key(item: str) -> str | None:
    """The call a line made by :func:`call_line` stands for; None for another item (pure)."""
    found = _CALL_LINE.match(item)
    return found["key"] if found else None


def _failed(call: ToolCall) -> bool:
    return call.outcome is not None and call.outcome.failed


def _score(calls: Sequence[ToolCall]) -> int:
    first = calls[0]
    if first.command is not None and _WRITES.search(first.command):
        weight = EDIT_SCORE
    elif first.command is not None:
        weight = SHOW_SCORE if _SHOWS.match(first.command) else SHELL_SCORE
    else:
        weight = EDIT_SCORE if any(c.edits for c in calls) else TOOL_SCORE
    return weight + (FAILED_BONUS if any(_failed(c) for c in calls) else 0)


def loop_items(views: Sequence[MessageView], fixed: int) -> Loop:
    """The items of the tool loop in ``views`` (pure); ``fixed`` is the score of the
    items that must be there (the last step, the blocker).

    Each distinct call is one line in ``completed``, but the calls of the last assistant
    message (when the messages end in the loop) go to ``in_progress`` with what the
    agent said of that step, and the last call that failed, unless it was run again
    with success, to ``blockers``.
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
    stepping = last is not None and bool(last.calls)
    failing = max(
        (c for g in groups.values() for c in g if _failed(c)),
        key=lambda c: c.position,
        default=None,
    )
    blocker = None
    if failing is not None and _failed(groups[call_name(failing)][-1]):
        blocker = call_name(failing)
    step_keys = {call_name(c) for c in last.calls} if stepping and last is not None else set()
    for name, calls in groups.items():
        line, brief = call_line(calls), call_line(calls, brief=True)
        score = _score(calls)
        full = score - FULL_PENALTY
        candidate = Candidate("completed", places[name], score, line, name, brief, full)
        if name == blocker:
            loop.blockers.append(_fixed(candidate, "blockers", fixed))
        elif name in step_keys:
            loop.in_progress.append(_fixed(candidate, "in_progress", fixed))
        else:
            loop.completed.append(candidate)
    if stepping and last is not None:
        loop.has_step = True
        said = " ".join(sentences(last.text))
        if said:
            step = shorten(LAST_STEP + said, MAX_STEP_CHARS)
            loop.in_progress.append(Candidate("in_progress", last.position, fixed, step, step))
    return loop


def _fixed(candidate: Candidate, section: str, score: int) -> Candidate:
    return Candidate(section, candidate.position, score, candidate.text, candidate.key)
