"""The rolling strategy: past a message count, the oldest messages fold into one summary.

See docs/design.md#strategies.
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryd.config import RollingSettings, Settings
from memoryd.policy import MessageLike, SplitPlan, head_summary_count, plan_for, safe_split
from memoryd.strategies.protocol import Counts, Due, Head, HeadRequest
from memoryd.strategies.summary import summary_head
from memoryd.workspace import Workspace


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
    messages: Sequence[MessageLike], *, messages_to_summarize: int, recent_messages_to_keep: int
) -> SplitPlan | None:
    """The oldest ``messages_to_summarize`` messages, moved to a safe boundary (pure).

    The newest ``recent_messages_to_keep`` are always kept; a previous summary at the head
    is folded in and not counted. None when no safe boundary lies in that range.
    """
    head = head_summary_count(messages)
    highest = len(messages) - recent_messages_to_keep
    if highest < head + 1:
        return None
    keep_from = safe_split(
        messages, min(head + messages_to_summarize, highest), lowest=head + 1, highest=highest
    )
    return None if keep_from is None else plan_for(messages, keep_from)


class Rolling:
    """Due on a message count (``[rolling]``); the summary folds the previous one in."""

    name = "rolling"
    trigger = None

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def due(self, counts: Counts, tokens_at_ineffective: int | None = None) -> Due:
        """The message-count trigger; a job here cannot be ineffective, so that is ignored."""
        rolling = self.settings.rolling
        if rolling_due(counts, rolling):
            return Due(True, "rolling trigger")
        return Due(
            False,
            f"rolling trigger not met (more than {rolling.message_count_threshold} messages "
            f"and the oldest {rolling.messages_to_summarize} over "
            f"{rolling.token_threshold} tokens)",
        )

    def split(self, lines: Sequence[MessageLike]) -> SplitPlan | str:
        rolling = self.settings.rolling
        plan = rolling_split(
            lines,
            messages_to_summarize=rolling.messages_to_summarize,
            recent_messages_to_keep=rolling.recent_messages_to_keep,
        )
        if plan is None:
            return (
                f"no safe split point among the oldest {rolling.messages_to_summarize} messages "
                f"(the newest {rolling.recent_messages_to_keep} are always kept)"
            )
        return plan

    def produce_head(self, request: HeadRequest) -> Head:
        return summary_head(request, "rolling")

    def save(self, workspace: Workspace, head: Head) -> None:
        """The rolling summary lives in the conversation alone: nothing to save."""
