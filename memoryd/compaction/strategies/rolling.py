"""The rolling strategy: past a message count, the oldest messages fold into one summary.

See docs/design.md#strategies.
"""

from __future__ import annotations

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
from memoryd.compaction.strategies.protocol import Counts, Due, Head, HeadRequest, Strategy
from memoryd.config.sections import RollingSettings
from memoryd.levels import over_trigger


def rolling_due(counts: Counts, rolling: RollingSettings) -> bool:
    """More than ``message_count_threshold`` messages AND the oldest
    ``messages_to_summarize`` over ``token_threshold`` tokens, both strictly (pure).

    A previous summary at the head is not counted, neither as a message nor in the oldest.
    """
    head = 1 if counts.starts_with_summary else 0
    oldest = counts.line_tokens[head : head + rolling.messages_to_summarize]
    return (
        counts.messages - head > rolling.message_count_threshold
        and sum(oldest) * counts.calibration > rolling.token_threshold
    )


def rolling_split(
    messages: Sequence[MessageLike],
    *,
    messages_to_summarize: int,
    recent_messages_to_keep: int,
    max_kept_tokens: int | None = None,
) -> SplitPlan | None:
    """The oldest ``messages_to_summarize`` messages, moved to a safe boundary (pure).

    The newest ``recent_messages_to_keep`` are kept; a previous summary at the head is
    folded in and not counted. With ``max_kept_tokens`` (usage crossed the trigger) the
    split takes as many more of the oldest messages as it needs to keep at most that much,
    past the newest ``recent_messages_to_keep`` too when they alone hold more (the newest
    message is always kept).
    None when no safe boundary lies in that range (docs/design.md#boundaries).
    """
    n = len(messages)
    head = head_summary_count(messages)
    highest = n - recent_messages_to_keep
    earliest = earliest_within(messages, max_kept_tokens) if max_kept_tokens is not None else 0
    if earliest > highest:
        # The newest messages alone hold more than the cap: their count yields, as
        # narrative's kept share does; the newest message is always kept.
        highest = min(earliest, n - 1)
    if highest < head + 1:
        return None
    low = head + 1
    proposed = min(head + messages_to_summarize, highest)
    if max_kept_tokens is not None:
        low = max(low, min(earliest, highest))
        proposed = max(proposed, low)
    keep_from = safe_split(
        messages, proposed, lowest=head + 1, highest=highest, preferred=(low, highest)
    )
    return None if keep_from is None else plan_for(messages, keep_from)


class Rolling(Strategy):
    """Due on a message count (``[rolling]``) or when usage crosses ``summarize_at``; the
    summary folds the previous one in."""

    name = "rolling"
    needs_line_tokens = True

    def due(self, counts: Counts, tokens_at_ineffective: int | None = None) -> Due:
        """The message-count trigger, or usage above ``summarize_at`` (after an ineffective
        job, only once the conversation has grown)."""
        rolling = self.settings.rolling
        if rolling_due(counts, rolling):
            return Due(True, "rolling trigger")
        by_usage = super().due(counts, tokens_at_ineffective)
        if by_usage.due:
            return by_usage
        return Due(
            False,
            f"rolling trigger not met (more than {rolling.message_count_threshold} messages "
            f"and the oldest {rolling.messages_to_summarize} over "
            f"{rolling.token_threshold} tokens), and {by_usage.reason}",
        )

    def split(self, lines: Sequence[MessageLike]) -> SplitPlan | str:
        settings = self.settings
        rolling = settings.rolling
        tokens = sum(line.tokens for line in lines)
        # Past the usage trigger the job must end well below it, as narrative's does.
        kept_cap = (
            int(settings.keep_recent_ratio * settings.summarize_at * settings.token_limit)
            if over_trigger(tokens, settings.token_limit, settings.summarize_at)
            else None
        )
        plan = rolling_split(
            lines,
            messages_to_summarize=rolling.messages_to_summarize,
            recent_messages_to_keep=rolling.recent_messages_to_keep,
            max_kept_tokens=kept_cap,
        )
        if plan is None:
            return (
                f"no safe split point before the newest {rolling.recent_messages_to_keep} "
                "messages (those are always kept)"
            )
        return plan

    def produce_head(self, request: HeadRequest) -> Head:
        return summary_head(request, "rolling")
