"""What the daemon knows of one workspace, and the pure decision of whether a job is due."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd.config import Settings
from memoryd.conversation import ConversationReader, Tally
from memoryd.policy import Level, failure_backoff
from memoryd.strategies import Counts, strategy_for
from memoryd.workspace import Workspace

RETRY_FLOOR = 2.0
"""Seconds before a failed or busy workspace is tried again when nothing changes."""


@dataclass(slots=True)
class Tracked:
    """The daemon's bookkeeping for one workspace (mutated only by the supervisor loop)."""

    workspace: Workspace
    root: Path
    settings: Settings
    reader: ConversationReader
    config_error: str | None = None
    level: Level | None = None
    running: bool = False
    job_kind: str = ""
    dirty: bool = False
    """Something changed while a job ran: look again when it ends."""
    failures: int = 0
    retry_at: float = 0.0
    ineffective_tokens: int | None = None
    last_summary_at: str | None = None
    calibration: float = 1.0
    due_at: float | None = None
    last_processed: float = -math.inf
    stores_due: bool = False
    state_numbers: tuple[Any, ...] | None = field(default=None, repr=False)

    @property
    def tokens(self) -> int:
        """The calibrated token estimate of the conversation."""
        return round(self.reader.tally.tokens * self.calibration)

    def adopt_head(
        self, identity: tuple[int, int], head_end: int, line_tokens: tuple[int, ...], malformed: int
    ) -> None:
        """Take the counts of the file a commit just wrote, up to ``head_end``."""
        tally = Tally(
            messages=len(line_tokens),
            tokens=sum(line_tokens),
            malformed=malformed,
            line_tokens=array("q", line_tokens),
            starts_with_summary=True,
        )
        self.reader.adopt(identity, head_end, tally)


def job_due(tracked: Tracked, now: float) -> str | None:
    """Why a summarization job is due now, or None (pure over ``tracked``)."""
    settings = tracked.settings
    if tracked.running or tracked.config_error is not None:
        return None
    if tracked.failures and now < tracked.retry_at:
        return None
    due = strategy_for(settings).due(
        Counts.of_tally(tracked.reader.tally, tracked.calibration), tracked.ineffective_tokens
    )
    return due.reason if due.due else None


def after_failure(tracked: Tracked, now: float) -> None:
    """Count a failed job and set when the workspace may be tried again."""
    tracked.failures += 1
    settings = tracked.settings
    wait = failure_backoff(
        tracked.failures, settings.max_consecutive_failures, settings.failure_cooldown
    )
    tracked.retry_at = now + max(RETRY_FLOOR, wait)
