"""The protocol every strategy follows, and the pieces the strategies share (pure).

See :mod:`memoryd.compaction.strategies` for the four questions a strategy answers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memoryd.boundaries import MessageLike, SplitPlan
from memoryd.levels import may_retry_after_ineffective, over_trigger
from memoryd.receipts.records import RetentionFigures
from memoryd.tokens import LLMUsage

if TYPE_CHECKING:
    from memoryd.config.settings import Settings
    from memoryd.conversation.lines import Line
    from memoryd.conversation.reader import Tally
    from memoryd.summary.checkpoint import Checkpoint
    from memoryd.workspace import Workspace

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Counts:
    """What a due check reads of a conversation: its counts, never its text."""

    messages: int
    """Lines, a summary at the head included."""
    tokens: int
    """Calibrated token estimate of the whole conversation."""
    line_tokens: Sequence[int]
    """Uncalibrated token estimate of each line, oldest first."""
    starts_with_summary: bool
    calibration: float = 1.0

    @classmethod
    def of_tally(cls, tally: Tally, calibration: float = 1.0) -> Counts:
        """The counts the daemon's incremental reader keeps."""
        return cls(
            tally.messages,
            round(tally.tokens * calibration),
            tally.line_tokens,
            tally.starts_with_summary,
            calibration,
        )

    @classmethod
    def of_lines(cls, lines: Sequence[MessageLike], calibration: float = 1.0) -> Counts:
        """The counts of lines read whole (a job's snapshot)."""
        line_tokens = [line.tokens for line in lines]
        return cls(
            len(lines),
            round(sum(line_tokens) * calibration),
            line_tokens,
            bool(lines) and lines[0].is_summary,
            calibration,
        )


@dataclass(frozen=True, slots=True)
class Due:
    """A due check's answer, with the reason either way (for logs and ``summarize``)."""

    due: bool
    reason: str


@dataclass(frozen=True, slots=True)
class HeadRequest:
    """What producing a head needs: the prefix to replace and where its originals go."""

    workspace: Workspace
    settings: Settings
    env: Mapping[str, str]
    prefix: Sequence[Line]
    plan: SplitPlan
    archive: str
    """The archive's path relative to the workspace, recorded in the head message."""
    deadline: float
    """Seconds the summarizer may take in all (every call and retry)."""
    progress: Progress
    kept: Sequence[Line] = ()
    """The lines that stay verbatim after the head: the prefix's pinned messages (their
    indices below ``plan.keep_from``), then the kept part. The retention check counts what
    they carry as kept (docs/design.md#retention)."""


@dataclass(frozen=True, slots=True)
class Head:
    """The message that replaces the summarized prefix, and what producing it cost."""

    message: dict[str, Any]
    backend: str
    calls: int
    result_text: str
    """What the job did, in words (HEARTBEAT.md's ``last_result``)."""
    input_tokens: int | None = None
    estimated_input_tokens: int = 0
    checkpoint: Checkpoint | None = None
    """The structured checkpoint to save after the commit (the checkpoint strategy)."""
    usage: LLMUsage = field(default_factory=LLMUsage)
    """What every LLM call of the head cost, as the API reported it."""
    model: str | None = None
    """The model that answered (None for the extractive backend)."""
    retention: RetentionFigures | None = None
    """The retention check's scores (docs/design.md#retention)."""


class Strategy(ABC):
    """One strategy; see the module docstring for the four questions. What most answer
    alike is answered here: due above ``summarize_at``, nothing saved beside the
    conversation."""

    name: str
    needs_line_tokens = False
    """Does :meth:`due` read each line's tokens (``Counts.line_tokens``)? The daemon then
    counts a conversation line by line rather than take back the totals it saved (those
    lack each line's tokens)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @property
    def trigger(self) -> float:
        """The usage share that makes a job due. Only a usage-triggered job can be
        ineffective (usage still above it afterwards)."""
        return self.settings.summarize_at

    def due(self, counts: Counts, tokens_at_ineffective: int | None = None) -> Due:
        """Usage above :attr:`trigger` (after an ineffective job, only once the
        conversation has grown)."""
        return usage_due(counts, self.settings.token_limit, self.trigger, tokens_at_ineffective)

    @abstractmethod
    def split(self, lines: Sequence[MessageLike]) -> SplitPlan | str:
        """The prefix to replace, or why there is none (pure)."""

    @abstractmethod
    def produce_head(self, request: HeadRequest) -> Head:
        """The new head message (calls the summarizer; raises SummarizerError)."""

    def save(self, workspace: Workspace, head: Head) -> None:
        """Keep what the strategy stores beside the conversation (after the commit):
        nothing, unless the strategy says otherwise (the summary lives in the
        conversation alone)."""
        return


def usage_due(
    counts: Counts, token_limit: int, trigger: float, tokens_at_ineffective: int | None
) -> Due:
    """The usage trigger shared by the strategies that count tokens (pure).

    After an ineffective job the conversation must first grow (no summarization loops).
    """
    if not over_trigger(counts.tokens, token_limit, trigger):
        return Due(
            False,
            f"usage {counts.tokens / token_limit:.0%} is not above the {trigger:.0%} trigger",
        )
    if not may_retry_after_ineffective(counts.tokens, tokens_at_ineffective, token_limit):
        return Due(False, "the last job could not bring usage below the trigger")
    return Due(True, f"usage above {trigger:.0%}")
