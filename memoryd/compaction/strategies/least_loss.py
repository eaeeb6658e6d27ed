"""Least loss: with masking on, a usage job summarizes only the smallest oldest part that
brings usage to its aim, never more than the strategy's share (pure;
docs/design.md#least-loss).

Masking comes first and frees what it can with no LLM call; what is left above the
target is usually small, so a summary of the strategy's whole share (narrative's 60%, say)
would replace far more messages than needed. The summary aims at :func:`summary_aim`,
as far below ``masking.target`` as the trigger is above it, counting the summary's own
size at its ceiling (``summarizer.max_summary_tokens``), so that the next job is many
turns away and most often a masking alone.
The split stays on a boundary the strategies use (no API turn, no tool call and its
result parted), never past a running call, and a pinned message (``keep_first``,
``"pinned": true``) is counted as kept: it stays verbatim after the head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memoryd.boundaries import MessageLike, SplitPlan, boundaries, head_summary_count, plan_for
from memoryd.conversation.pins import pinned_indices
from memoryd.tokens import MESSAGE_OVERHEAD

if TYPE_CHECKING:
    from memoryd.config.settings import Settings
    from memoryd.conversation.lines import Line

SUMMARY_MARGIN = 0.05
"""The least a summary aims below ``masking.target`` (a share of the budget)."""
HEAD_OVERHEAD = 64
"""Tokens a head adds to the summary's text: its fixed prefix, a checkpoint's section
titles, the message's framing."""


def summary_aim(target: float, trigger: float) -> float:
    """The usage share a summary after masking aims at (pure): as far below the masking
    target as the trigger is above it (0.40 with the defaults, 0.30 for the checkpoint's
    0.9), never above the target (or the trigger) less :data:`SUMMARY_MARGIN`, never below
    that margin.

    From there the conversation grows twice the trigger-to-target gap before the next job,
    and masking the outputs of that growth (most of it) brings that job back to the
    target with no summary: summaries, and LLM requests, stay rare
    (docs/design.md#least-loss).
    """
    return max(SUMMARY_MARGIN, min(min(target, trigger) - SUMMARY_MARGIN, 2 * target - trigger))


def masking_aim(target: float, trigger: float) -> float:
    """The usage share a masking aims at (pure): :data:`SUMMARY_MARGIN` below the masking
    target (0.55 with the defaults, for every strategy), and below the trigger by as
    much, never below :func:`summary_aim`.

    A masking takes only the old outputs it needs to get there, those that lose the
    fewest details first (:mod:`memoryd.compaction.masking.choice`); the rest stay verbatim.
    The margin leaves the next job a little further away than the target itself would;
    aiming lower brings the job's placeholders to outputs a reader would want whole (a
    short traceback, a search's few hits) sooner than it spares prompt-cache misses
    (docs/design.md#least-loss).
    """
    low = summary_aim(target, trigger)
    return round(max(low, min(target, trigger) - SUMMARY_MARGIN), 4)


def summary_ceiling(max_summary_tokens: int) -> int:
    """The most tokens a new head may take (pure): what it is counted at when the split
    is chosen, before it exists."""
    return max_summary_tokens + HEAD_OVERHEAD + MESSAGE_OVERHEAD


@dataclass(frozen=True, slots=True)
class LeastLoss:
    """The split a least-loss job summarizes, and why."""

    plan: SplitPlan
    aim: float
    """The usage share the summary aims at."""
    share: SplitPlan
    """The strategy's own split: the most a job may summarize."""

    @property
    def capped(self) -> bool:
        """True when even the strategy's whole share is needed (or not enough)."""
        return self.plan.keep_from >= self.share.keep_from


def least_split(
    messages: Sequence[MessageLike],
    share: SplitPlan,
    pinned: frozenset[int],
    room: int,
    head_tokens: int,
) -> SplitPlan:
    """The smallest oldest prefix whose summary leaves at most ``room`` tokens, a head of
    ``head_tokens`` counted in (pure).

    The prefix ends on a boundary (:func:`memoryd.boundaries.boundaries`) no later than
    ``share.keep_from``; pinned messages stay and count as kept; a previous summary at the
    head is folded in. ``share`` itself when no earlier boundary is enough.
    """
    head = head_summary_count(messages)
    kinds = boundaries(messages)
    total = sum(m.tokens for m in messages)
    replaced = 0
    for k in range(share.keep_from):
        if k not in pinned:
            replaced += messages[k].tokens
        keep_from = k + 1
        if keep_from <= head or keep_from >= share.keep_from or kinds[keep_from] is None:
            continue
        if total - replaced + head_tokens <= room:
            return plan_for(messages, keep_from)
    return share


def least_loss(
    messages: Sequence[MessageLike],
    share: SplitPlan,
    pinned: frozenset[int],
    *,
    token_limit: int,
    aim: float,
    max_summary_tokens: int,
    calibration: float = 1.0,
) -> LeastLoss:
    """:func:`least_split` for a budget of ``token_limit`` calibrated tokens and a summary
    aiming at ``aim`` of it (pure)."""
    room = int(aim * token_limit / calibration) if calibration > 0 else 0
    plan = least_split(messages, share, pinned, room, summary_ceiling(max_summary_tokens))
    return LeastLoss(plan, aim, share)


def least_for(
    lines: Sequence[Line],
    share: SplitPlan | str,
    settings: Settings,
    trigger: float | None,
    calibration: float,
) -> LeastLoss | None:
    """:func:`least_loss` for a usage job's ``settings`` (the masking target, the pins,
    the summary's ceiling), or None when it does not apply: masking off, no split, no
    usage trigger (pure)."""
    if not settings.masking.enabled or isinstance(share, str) or trigger is None:
        return None
    return least_loss(
        lines,
        share,
        pinned_indices(lines, settings.keep_first),
        token_limit=settings.token_limit,
        aim=summary_aim(settings.masking.target, trigger),
        max_summary_tokens=settings.summarizer.max_summary_tokens,
        calibration=calibration,
    )


def job_text(
    masked: int, summarized: int, aim: float | None, usage_after: float, capped: bool = False
) -> str:
    """How many messages a job masked and summarized, and why, in a few words (pure):
    ``masked 19, then summarized 6 to reach 0.40 (now 0.38)``.

    ``aim`` is the usage share the job aimed at: ``masking.target`` for a masking alone,
    :func:`summary_aim` for a summary after it; None for a summary of the strategy's share
    with masking off. ``capped``: the summary took the strategy's whole share.
    """
    now = f"(now {usage_after:.2f})"
    if summarized == 0:
        return f"masked {masked} to reach {aim or 0:.2f} {now}"
    done = f"summarized {summarized}"
    if masked:
        done = f"masked {masked}, then {done}"
    if aim is None:
        return f"{done}, the strategy's share {now}"
    share = ", the strategy's share," if capped else ""
    return f"{done}{share} to reach {aim:.2f} {now}"
