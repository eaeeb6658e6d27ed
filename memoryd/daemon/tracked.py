"""What the daemon knows of one workspace and of its job in flight, and the pure decision
of whether a job is due."""

from __future__ import annotations

import math
from array import array
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memoryd.clock import iso_ms
from memoryd.compaction.strategies import Counts, strategy_for
from memoryd.config.settings import Settings
from memoryd.conversation.reader import ConversationReader, Tally
from memoryd.levels import Level, failure_backoff, may_retry_after_ineffective, over_trigger
from memoryd.workspace import Workspace

if TYPE_CHECKING:
    from memoryd.compaction.job.request import JobResult

RETRY_FLOOR = 2.0
"""Seconds before a failed or busy workspace is tried again when nothing changes."""
WRITE_RETRY_MAX = 60.0
"""Longest wait between two tries of a write that failed (full disk, say)."""


@dataclass(slots=True)
class Job:
    """One job in flight: everything the daemon knows of it, from its dispatch to its
    outcome (docs/design.md#daemon)."""

    workspace: Path
    id: int
    """The pool's id for it (which worker took it, which died with it)."""
    kind: str
    """``summarize`` or ``stores``."""
    future: Future[Any]
    backend: str | None = None
    """The LLM backend whose request it holds (counted against that section's
    ``max_concurrent_requests``); None for the extractive summarizer and store jobs."""
    checkin_at: float | None = None
    """When the daemon checks in for it next, until its worker has checked in (None
    since: the worker's own check-ins keep HEARTBEAT.md fresh)."""
    last_checkin: str | None = None
    """The ``last_checkin`` the daemon wrote last in its HEARTBEAT.md."""


@dataclass(slots=True)
class Tracked:
    """The daemon's bookkeeping for one workspace (mutated only by the supervisor loop)."""

    workspace: Workspace
    root: Path
    settings: Settings
    reader: ConversationReader
    config_error: str | None = None
    level: Level | None = None
    job: Job | None = None
    """Its job in flight, if any (the same record the dispatcher holds)."""
    job_reason: str = "trigger"
    """Why the last job was dispatched: "trigger" or "idle"."""
    failures: int = 0
    retry_at: float = 0.0
    ineffective_tokens: int | None = None
    last_summary_at: str | None = None
    calibration: float = 1.0
    due_at: float | None = None
    last_processed: float = -math.inf
    stores_due: bool = False
    changed_at: float = -math.inf
    """Monotonic time the conversation last changed (for compaction while idle)."""
    idle_compacted_at: float = -math.inf
    """Monotonic time of the last compaction while idle: one per idle spell."""
    idle_wake_at: float | None = None
    """When the scheduler will look again for compaction while idle (one wake pending)."""
    noticed_at: float | None = None
    """Monotonic time of the first change not yet acted on (trigger-to-dispatch latency)."""
    dispatch_latency: float | None = None
    """Seconds from that change to the dispatch of the running job (None when not triggered)."""
    state_numbers: int | None = field(default=None, repr=False)
    """The hash of the numbers last written to state.json (see state.numbers_key)."""
    unwritable: dict[str, str] | None = None
    """The files memoryd cannot write now, and why (each logged once per reason)."""
    write_failures: int = 0
    write_retry_at: float = 0.0

    @property
    def running(self) -> bool:
        """Whether a job of the workspace is in flight."""
        return self.job is not None

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


def over_budget(tracked: Tracked) -> bool:
    """Usage is above the trigger and the last job could not lower it: the daemon waits
    for growth (pure; docs/design.md#over-budget)."""
    trigger = strategy_for(tracked.settings).trigger
    return (
        tracked.ineffective_tokens is not None
        and trigger is not None
        and over_trigger(tracked.tokens, tracked.settings.token_limit, trigger)
    )


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


def job_due_now(tracked: Tracked, now: float) -> tuple[str, str] | None:
    """(why, kind) of the job due now: kind "trigger" or "idle"; None when none is (pure)."""
    reason = job_due(tracked, now)
    if reason is not None:
        return reason, "trigger"
    idle_at = idle_due_at(tracked)
    if idle_at is not None and idle_at <= now:
        return f"idle for {tracked.settings.idle_compact_after:g} s", "idle"
    return None


def idle_due_at(tracked: Tracked) -> float | None:
    """When an idle workspace above ``idle_compact_at`` is to be compacted (pure), or None.

    Compacting while the agent is away means it rarely meets a compaction mid-turn
    (docs/design.md#idle-compaction). Not after a job that could not lower usage, until the
    conversation grew again (no loops).
    """
    settings = tracked.settings
    if settings.idle_compact_after <= 0 or tracked.running or tracked.config_error is not None:
        return None
    if tracked.idle_compacted_at >= tracked.changed_at:
        return None  # one idle compaction per idle spell, whatever it achieved
    tokens = tracked.tokens
    if not over_trigger(tokens, settings.token_limit, settings.idle_compact_at):
        return None
    if not may_retry_after_ineffective(tokens, tracked.ineffective_tokens, settings.token_limit):
        return None
    due = tracked.changed_at + settings.idle_compact_after
    return max(due, tracked.retry_at) if tracked.failures else due


def after_failure(tracked: Tracked, now: float) -> None:
    """Count a failed job and set when the workspace may be tried again."""
    tracked.failures += 1
    settings = tracked.settings
    wait = failure_backoff(
        tracked.failures, settings.max_consecutive_failures, settings.failure_cooldown
    )
    tracked.retry_at = now + max(RETRY_FLOOR, wait)


def settle(tracked: Tracked, result: JobResult, now: float, wall: float) -> None:
    """The outcome rules after a summarization job: what the daemon remembers, and when
    it may try again (pure over ``tracked``, ``now`` and ``wall``)."""
    tracked.job = None
    if result.outcome in ("completed", "ineffective"):
        tracked.failures = 0
        tracked.last_summary_at = iso_ms(wall)
        if result.calibration is not None:
            tracked.calibration = result.calibration
        if result.identity is not None:
            tracked.adopt_head(
                result.identity, result.head_end, result.head_line_tokens, result.head_malformed
            )
        tracked.ineffective_tokens = result.tokens_after if result.ineffective else None
    elif result.outcome == "nothing_to_do":
        # The job saw no safe split (or no trigger): like an ineffective job, wait for growth.
        tracked.ineffective_tokens = tracked.tokens
    elif result.outcome == "busy":
        # Another process held the workspace: not the workspace's fault, try again soon.
        tracked.failures = max(tracked.failures, 1)
        tracked.retry_at = now + RETRY_FLOOR
    else:
        after_failure(tracked, now)


def job_lost(tracked: Tracked, now: float, *, its_fault: bool) -> None:
    """A job raised or its worker died. ``its_fault`` is False for a job whose worker
    lived but was failed with the whole pool: it is retried at once, not counted."""
    tracked.job = None
    tracked.state_numbers = None
    if its_fault:
        after_failure(tracked, now)
    else:
        tracked.retry_at = now


def write_failed(tracked: Tracked, what: str, reason: str, now: float) -> bool:
    """Writing ``what`` failed for ``reason``: back off (doubling, up to
    ``WRITE_RETRY_MAX``). True when the workspace had no file failing for that reason,
    i.e. when it should be logged: once per workspace and reason, never once per try."""
    tracked.write_failures += 1
    wait = min(WRITE_RETRY_MAX, RETRY_FLOOR * 2 ** (tracked.write_failures - 1))
    tracked.write_retry_at = now + wait
    failing = tracked.unwritable if tracked.unwritable is not None else {}
    new = reason not in failing.values()
    failing[what] = reason
    tracked.unwritable = failing
    return new


def write_succeeded(tracked: Tracked, what: str) -> str | None:
    """Writing ``what`` worked: the back-off ends. The reason it had failed when no other
    file still fails for it (to log the recovery once), else None."""
    tracked.write_failures = 0
    tracked.write_retry_at = 0.0
    if tracked.unwritable is None or what not in tracked.unwritable:
        return None
    reason = tracked.unwritable.pop(what)
    still = reason in tracked.unwritable.values()
    if not tracked.unwritable:
        tracked.unwritable = None
    return None if still else reason
