"""Pinned messages: never summarized away, kept verbatim right after the new head (pure).

A message is pinned when it says ``"pinned": true``, or when it belongs to one of the
first ``keep_first`` genuine user turns of the conversation (a summary, a checkpoint or a
user message holding only tool results is not one): by default the first, which in an
agent's tool loop is its task. Turns are counted as the API sees them: consecutive
genuine user messages that an assistant message follows are one turn (a demonstration,
then the task). A head says how many
pinned lines follow it (``pinsAfter``), so that a kept user turn written right after them
does not join their turn. Since pinned messages are written directly after the summary, the
first genuine user turns of a compacted conversation are the ones pinned before, so
``keep_first`` keeps pinning the same messages through every later compaction
(docs/design.md#pins).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from memoryd.boundaries import SplitPlan
from memoryd.conversation.lines import Line

PINS_AFTER = "pinsAfter"
"""The head's field: how many pinned lines the job wrote right after it."""


def is_pinned_message(line: Line) -> bool:
    """True for a message that carries ``"pinned": true``."""
    return line.message is not None and line.message.get("pinned") is True


def pinned_indices(lines: Sequence[Line], keep_first: int) -> frozenset[int]:
    """Indices of the pinned lines of a conversation (pure).

    A ``tool_use`` and its ``tool_result`` stay together: pinning one pins the other.
    """
    pinned: set[int] = set()
    turns = 0
    in_turn = False
    pins_end = -1
    # A run of user messages is one turn once an answer closes it: user lines that no
    # assistant line follows (a file of notes, a writer of user lines only) stay one each.
    answered_before = max(
        (x.index for x in lines if x.is_assistant_turn and not x.is_summary), default=-1
    )
    for line in lines:
        if line.is_summary and line.message is not None:
            after = line.message.get(PINS_AFTER)
            pins_end = line.index + after + 1 if isinstance(after, int) else -1
        if line.index == pins_end:
            in_turn = False
        if line.message is None or line.is_summary:
            continue
        if line.is_genuine_user_turn:
            # Consecutive genuine user messages are one turn, as the API merges them.
            turns += 0 if in_turn and line.index < answered_before else 1
            in_turn = True
            if turns <= keep_first:
                pinned.add(line.index)
        else:
            in_turn = False
        if is_pinned_message(line):
            pinned.add(line.index)
    return frozenset(_with_tool_partners(lines, pinned))


def _with_tool_partners(lines: Sequence[Line], pinned: set[int]) -> set[int]:
    ids: set[str] = set()
    for index in pinned:
        ids |= lines[index].tool_use_ids | lines[index].tool_result_ids
    if not ids:
        return pinned
    closed = set(pinned)
    for line in lines:
        if (line.tool_use_ids | line.tool_result_ids) & ids:
            closed.add(line.index)
    return closed


@dataclass(frozen=True, slots=True)
class PinnedPlan:
    """A split with the pins of the replaced prefix taken out of it."""

    plan: SplitPlan
    """The split, its counts and tokens without the pinned messages."""
    summarized: tuple[Line, ...]
    """The prefix to replace without its pins (a previous summary at its head included)."""
    pins: tuple[Line, ...]
    """The pinned messages of the prefix, in their order: written right after the head."""
    pinned_tokens: int
    """Tokens of every pinned message of the conversation (prefix and kept part)."""
    pinned_count: int
    """Pinned messages in the whole conversation: all of them stay."""


def apply_pins(lines: Sequence[Line], plan: SplitPlan, pinned: frozenset[int]) -> PinnedPlan:
    """Take the pinned messages out of the prefix ``plan`` replaces (pure)."""
    prefix = lines[: plan.keep_from]
    pins = tuple(line for line in prefix if line.index in pinned)
    summarized = tuple(line for line in prefix if line.index not in pinned)
    pins_tokens = sum(line.tokens for line in pins)
    return PinnedPlan(
        plan=replace(
            plan,
            summarized_count=plan.summarized_count - len(pins),
            summarized_tokens=plan.summarized_tokens - pins_tokens,
            kept_tokens=plan.kept_tokens + pins_tokens,
        ),
        summarized=summarized,
        pins=pins,
        pinned_tokens=sum(lines[i].tokens for i in pinned),
        pinned_count=len(pinned),
    )


def byte_ranges(lines: Sequence[Line]) -> list[tuple[int, int]]:
    """The (start, end) byte ranges of ``lines``, adjacent ones merged (pure)."""
    ranges: list[tuple[int, int]] = []
    for line in lines:
        if ranges and ranges[-1][1] == line.offset:
            ranges[-1] = (ranges[-1][0], line.end)
        else:
            ranges.append((line.offset, line.end))
    return ranges
