"""The summarization strategies, each a :class:`Strategy` (see docs/design.md#strategies).

A strategy answers four questions (and says what its due check reads:
``needs_line_tokens``), and nothing outside this package asks for its name:

- **due** (pure, from the counts): is a job due, and why (or why not);
- **split** (pure, from the lines): which prefix to replace, as a :class:`SplitPlan`;
- **produce_head**: the message that replaces the prefix (a summary or a checkpoint);
- **save**: what the strategy keeps beside the conversation once the commit is done.

``strategy_for(settings)`` picks the module. This package imports no summarizer backend
at import time: the due check runs in per-message commands.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memoryd.compaction.strategies.checkpoint import CheckpointStrategy
from memoryd.compaction.strategies.narrative import Narrative
from memoryd.compaction.strategies.protocol import Counts, Due, Head, HeadRequest, Strategy
from memoryd.compaction.strategies.rolling import Rolling

if TYPE_CHECKING:
    from memoryd.config.settings import Settings

__all__ = ["Counts", "Due", "Head", "HeadRequest", "Strategy", "strategy_for"]

STRATEGIES: dict[str, Callable[[Settings], Strategy]] = {
    "narrative": Narrative,
    "rolling": Rolling,
    "checkpoint": CheckpointStrategy,
}


def strategy_for(settings: Settings) -> Strategy:
    """The strategy ``settings`` name, bound to those settings."""
    return STRATEGIES[settings.strategy](settings)
