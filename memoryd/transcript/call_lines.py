"""A tool call as one line (pure; docs/design.md#agent-transcripts).

What an engineer notes of a call: its command in backticks, or what another tool did
(``edited src/a.py``), then its outcome: the test tally and the failing tests, the
exception with where it was raised, the error line or the exit status; for a file shown,
the names it defines. A line also has a brief form (the tally, the exception's name), for
when the budget holds no more, and a named one (the places its output names). A
checkpoint lists calls by these lines (:mod:`memoryd.summary.extractive_checkpoint`); a
masked output's placeholder starts with one (:mod:`memoryd.compaction.masking.placeholders`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memoryd.transcript.messages import shorten
from memoryd.transcript.outcomes import shows_only
from memoryd.transcript.output_places import definitions, named_phrase
from memoryd.transcript.toolcalls import Outcome, ToolCall

MAX_LINE_CHARS = 200
MAX_ERROR_CHARS = 90
BRIEF_ERROR_CHARS = 50
MAX_BOTH_CHARS = 60
"""A call run several times shows its first and its last outcome when both are this
short together, else its last."""
SHOWN_FAILURES = 4
SHOWN_DEFINITIONS = 4
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


def reads_only(call: ToolCall) -> bool:
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
    reads = reads_only(calls[0])
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
