"""Where a conversation may be cut (pure): assistant turns as the API sees them, the
boundaries a kept part may start at, a tool call still running, and the split plan. No
clock, file or network."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal, Protocol

    Boundary = Literal["user", "assistant"]
    """Where a kept part may start: at a genuine user turn, or (in a tool loop) an
    assistant one."""

    class MessageLike(Protocol):
        """What a split decision needs of a message (a :class:`memoryd.conversation.lines.Line`)."""

        @property
        def tokens(self) -> int: ...

        @property
        def is_summary(self) -> bool: ...

        @property
        def is_genuine_user_turn(self) -> bool: ...

        @property
        def is_assistant_turn(self) -> bool: ...

        @property
        def tool_use_ids(self) -> frozenset[str]: ...

        @property
        def tool_result_ids(self) -> frozenset[str]: ...

        @property
        def is_blank(self) -> bool:
            """True for a line the API view leaves out (malformed, or nothing but
            whitespace): it does not end an assistant turn."""

else:
    # typing is not imported at run time (docs/design.md#startup); the names stay
    # importable for the modules that annotate with them.
    Boundary = str
    MessageLike = object


def assistant_turns(messages: Sequence[MessageLike]) -> list[range]:
    """The assistant turns as the API sees them, each as the range of its line indices
    (pure).

    Consecutive assistant lines are one turn (the API view merges them), and a line the
    view leaves out (``is_blank``) between two of them does not end it: Claude Code writes
    one line per content block, so a ``thinking`` line and the ``tool_use`` line after it
    are one turn; a blank assistant line is in no turn. A summary head is not an
    assistant turn. Nothing may split a turn: the
    thinking block must stay with its call (docs/design.md#thinking).
    """
    turns: list[range] = []
    start: int | None = None
    last = 0
    for k, message in enumerate(messages):
        if message.is_blank:
            continue
        if message.is_assistant_turn:
            start = k if start is None else start
            last = k
        elif start is not None:
            turns.append(range(start, last + 1))
            start = None
    if start is not None:
        turns.append(range(start, last + 1))
    return turns


def inside_turn(messages: Sequence[MessageLike]) -> list[bool]:
    """For each index k, does k fall inside an assistant turn (after its first line), so
    that a split at k would cut the turn in two? (pure)"""
    inside = [False] * len(messages)
    for turn in assistant_turns(messages):
        for k in range(turn.start + 1, turn.stop):
            inside[k] = True
    return inside


def boundaries(messages: Sequence[MessageLike]) -> list[Boundary | None]:
    """For each index k, may the kept part start at k, and at what kind of turn?

    It may when no ``tool_use`` before k has its ``tool_result`` at or after k (nor the
    reverse), k does not fall inside an assistant turn (:func:`assistant_turns`), and
    message k is a genuine user turn (``"user"``) or an assistant message that is not a
    summary (``"assistant"``): an autonomous tool loop has one genuine user turn, its
    task, and must still compact (docs/design.md#boundaries).
    """
    cut = _pairs_cut(messages)
    inside = inside_turn(messages)
    kinds: list[Boundary | None] = []
    for k, message in enumerate(messages):
        kind: Boundary | None = None
        if not cut[k] and not inside[k]:
            if message.is_genuine_user_turn:
                kind = "user"
            elif message.is_assistant_turn and not message.is_summary:
                kind = "assistant"
        kinds.append(kind)
    return kinds


def _pairs_cut(messages: Sequence[MessageLike]) -> list[bool]:
    """For each index k, would a split at k part a ``tool_use`` from its ``tool_result``?
    (pure)

    A result pairs with the newest call of its id in an earlier message; a result that
    comes before any call of its id pairs with the next such call. Pairing by position, not by id
    alone, keeps a conversation whose agent reuses ids (a scripted model, a local server
    counting from 1 in each session) splittable: ids are unique within one exchange, not
    over a whole file.
    """
    n = len(messages)
    spans: list[tuple[int, int]] = []
    last_use: dict[str, int] = {}
    early: dict[str, list[int]] = {}
    for k, message in enumerate(messages):
        for ident in message.tool_result_ids:
            if ident in last_use:
                spans.append((last_use[ident], k))
            else:
                early.setdefault(ident, []).append(k)
        for ident in message.tool_use_ids:
            last_use[ident] = k
            spans.extend((j, k) for j in early.pop(ident, ()))
    depth = [0] * (n + 1)
    for start, end in spans:
        if start < end:  # a split at k with start < k <= end parts the pair
            depth[start + 1] += 1
            depth[end + 1] -= 1
    cut: list[bool] = []
    running = 0
    for k in range(n):
        running += depth[k]
        cut.append(running > 0)
    return cut


def valid_boundaries(messages: Sequence[MessageLike]) -> list[bool]:
    """For each index k, may the kept part start at k at a genuine user turn?"""
    return [kind == "user" for kind in boundaries(messages)]


def running_tool_call(messages: Sequence[MessageLike]) -> int | None:
    """The index where the newest assistant turn (:func:`assistant_turns`) starts while
    one of its ``tool_use`` calls has no ``tool_result`` yet (the agent's tool is still
    running), else None (pure).

    Such a turn is never summarized, its thinking lines included: the result the agent
    appends next must find its call in the file, and the API wants the call's thinking
    in front of it (docs/design.md#thinking).
    """
    turns = assistant_turns(messages)
    if not turns:
        return None
    newest = turns[-1]
    uses: set[str] = set()
    answered: set[str] = set()
    for k in range(newest.start, len(messages)):
        uses |= messages[k].tool_use_ids if k in newest else frozenset()
        answered |= messages[k].tool_result_ids
    return newest.start if uses - answered else None


def safe_split(
    messages: Sequence[MessageLike],
    proposed: int,
    lowest: int = 1,
    highest: int | None = None,
    preferred: tuple[int, int] | None = None,
) -> int | None:
    """The boundary nearest to ``proposed`` (earlier on a tie) within [lowest, highest].

    ``highest`` defaults to the last index and never passes a running tool call. A genuine
    user turn wins over an assistant message; both are sought first within the
    ``preferred`` range (the splits that meet the job's goal), then in the whole range.
    Returns None when no index in range is a boundary.
    """
    kinds = boundaries(messages)
    top = len(messages) - 1 if highest is None else min(highest, len(messages) - 1)
    running = running_tool_call(messages)
    if running is not None:
        top = min(top, running)
    windows = [(lowest, top)]
    if preferred is not None:
        low, high = max(lowest, preferred[0]), min(top, preferred[1])
        if low <= high:
            windows.insert(0, (low, high))
    for low, high in windows:
        for kind in ("user", "assistant"):
            found = _nearest(kinds, kind, proposed, low, high)
            if found is not None:
                return found
    return None


def _nearest(
    kinds: Sequence[Boundary | None], kind: Boundary, proposed: int, low: int, high: int
) -> int | None:
    for distance in range(len(kinds) + 1):
        for k in (proposed - distance, proposed + distance):
            if low <= k <= high and kinds[k] == kind:
                return k
    return None


def earliest_within(messages: Sequence[MessageLike], max_kept_tokens: int) -> int:
    """The first index from which the messages hold at most ``max_kept_tokens`` (pure).

    A split there or later leaves at most that much verbatim; ``len(messages)`` when even
    the newest message alone holds more.
    """
    kept = 0
    for k in range(len(messages) - 1, -1, -1):
        kept += messages[k].tokens
        if kept > max_kept_tokens:
            return k + 1
    return 0


def head_summary_count(messages: Sequence[MessageLike]) -> int:
    """1 when the conversation starts with a previous summary (to be folded), else 0."""
    return 1 if messages and messages[0].is_summary else 0


@dataclass(frozen=True, slots=True)
class SplitPlan:
    """Summarize messages [0, keep_from); keep [keep_from, n) verbatim."""

    keep_from: int
    summarized_count: int
    summarized_tokens: int
    kept_tokens: int
    folds_previous_summary: bool


def plan_for(messages: Sequence[MessageLike], keep_from: int) -> SplitPlan:
    """The plan that summarizes [0, keep_from) of ``messages``."""
    head = head_summary_count(messages)
    return SplitPlan(
        keep_from=keep_from,
        summarized_count=keep_from - head,
        summarized_tokens=sum(m.tokens for m in messages[:keep_from]),
        kept_tokens=sum(m.tokens for m in messages[keep_from:]),
        folds_previous_summary=head == 1 and keep_from >= 1,
    )
