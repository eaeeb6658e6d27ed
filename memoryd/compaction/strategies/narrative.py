"""The narrative strategy: past its usage trigger, the oldest share becomes one summary.

See docs/design.md#strategies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from memoryd.boundaries import (
    MessageLike,
    SplitPlan,
    earliest_within,
    head_summary_count,
    plan_for,
    safe_split,
)
from memoryd.compaction.strategies.head import summary_head
from memoryd.compaction.strategies.protocol import Head, HeadRequest, Strategy


def narrative_split(
    messages: Sequence[MessageLike],
    keep_recent_ratio: float,
    max_kept_tokens: int | None = None,
) -> SplitPlan | None:
    """The oldest share (by count) to summarize, moved to a safe boundary (pure).

    The newest ``keep_recent_ratio`` of the messages are kept verbatim; a previous summary
    at the head is folded in and does not count as a message. ``max_kept_tokens`` caps the
    kept part: when the newest share holds more (the conversation grew far past its
    trigger before the job could run), the split moves later so that one job still leaves
    usage well below the trigger; the newest message is always kept. The boundary is the
    nearest genuine user turn among the splits that respect the cap and keep at least half
    of the newest share, else the nearest assistant message there (a tool loop), else the
    nearest anywhere; never past a running tool call (docs/design.md#boundaries). None
    when there is no safe split that summarizes at least one real message.
    """
    n = len(messages)
    head = head_summary_count(messages)
    real = n - head
    if real < 2:
        return None
    proposed = head + max(1, math.floor(real * (1 - keep_recent_ratio)))
    low = head + 1
    if max_kept_tokens is not None:
        low = max(low, min(earliest_within(messages, max_kept_tokens), n - 1))
        proposed = max(proposed, low)
    # A boundary that keeps at least half of the intended kept part, and no more than the cap.
    preferred = (low, proposed + (n - proposed) // 2)
    keep_from = safe_split(messages, proposed, lowest=head + 1, preferred=preferred)
    if keep_from is None:
        return None
    return plan_for(messages, keep_from)


class Narrative(Strategy):
    """Due above ``summarize_at``; keeps the newest ``keep_recent_ratio`` verbatim."""

    name = "narrative"

    def split(self, lines: Sequence[MessageLike]) -> SplitPlan | str:
        settings = self.settings
        # The kept part is capped so that one job lands well below the trigger (the 60/40
        # split aims at about half of it, docs/design.md#strategies) even when the
        # conversation grew far past it.
        kept_cap = int(settings.keep_recent_ratio * settings.summarize_at * settings.token_limit)
        plan = narrative_split(lines, settings.keep_recent_ratio, max_kept_tokens=kept_cap)
        if plan is None:
            return "no safe split point (a tool call and its result are never separated)"
        return plan

    def produce_head(self, request: HeadRequest) -> Head:
        return summary_head(request, "narrative")
