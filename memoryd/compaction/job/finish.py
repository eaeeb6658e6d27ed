"""A job's commit and what follows it: the rewrite, then the receipt, HEARTBEAT.md, the
events and state.json (docs/design.md#commit).

Once the rewrite is durable the job has succeeded: a write after it that fails is logged
(see :func:`memoryd.compaction.job.report.after_commit`) and never turns the job into a failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.commit.rewrite import ArchivePlan, FaultHook, Part, parts_size, rewrite
from memoryd.commit.snapshot import Snapshot
from memoryd.compaction.job.report import (
    JobClock,
    after_commit,
    emit_masked,
    record_receipt,
    span_ids,
)
from memoryd.compaction.job.request import JobRequest, JobResult, Progress
from memoryd.compaction.masking.decide import MaskingStage
from memoryd.compaction.strategies import Head, Strategy
from memoryd.compaction.strategies.least_loss import LeastLoss, job_text
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.pins import PinnedPlan, byte_ranges
from memoryd.files.regular import read_file_from
from memoryd.levels import over_trigger, usage_ratio
from memoryd.published import events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.published.state import build_state, write_state
from memoryd.receipts.records import SummarizedSpan, build_receipt
from memoryd.tokens import calibrate, estimate_message_tokens
from memoryd.workspace import Workspace

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Produced:
    """The head a strategy produced, with the archive it names."""

    head: Head
    archive_name: str
    """The archive's file name under ``.memoryd/archive/``."""
    masking: MaskingStage | None = None
    """The tool outputs masked first; the lines the job read are the masked ones
    (docs/design.md#masking)."""
    least: LeastLoss | None = None
    """The least-loss split the job summarized, with the usage it aimed at
    (docs/design.md#least-loss); None with masking off."""


def ineffective_text(tokens_after: int, token_limit: int, trigger: float) -> str:
    """What HEARTBEAT.md adds when a job left usage above its trigger (pure)."""
    return (
        f"usage still above the {trigger:.0%} trigger: ~{tokens_after:,} of {token_limit:,} "
        f"tokens ({tokens_after / token_limit:.0%}), trigger {int(trigger * token_limit):,}"
    )


@dataclass(frozen=True, slots=True)
class JobContext:
    """The job a commit belongs to: where, what it read, and what it started with."""

    workspace: Workspace
    request: JobRequest
    clock: JobClock
    strategy: str
    base: JobResult
    lines: Sequence[Line]
    """The lines of the snapshot, as read (not masked)."""
    snapshot: Snapshot
    trigger: float | None = None
    """The strategy's trigger: usage still above it after the commit makes the job
    ineffective (docs/design.md#over-budget)."""


@dataclass(frozen=True, slots=True)
class Written:
    """What a job writes in place of the conversation's start (a summary's head, or the
    masked lines alone), with the words and figures of its report."""

    parts: list[Part]
    """The new file's start: new bytes, or byte ranges of the snapshot."""
    archive_name: str
    archived: list[Part]
    """The byte ranges of the snapshot the archive keeps."""
    line_tokens: tuple[int, ...]
    """Uncalibrated token estimate of each line written."""
    malformed: int
    """Lines written that are not JSON objects."""
    backend: str
    masking: MaskingStage | None
    """The tool outputs masked, if any were."""
    head_text: str | None
    """What the new head is, in words (None: masking alone, no head)."""
    why_first: bool
    """The result's words begin with why the job chose its split (least loss)."""
    aim: float | None = None
    """The usage the job aimed at, when it chose its split by least loss."""
    capped: bool = False
    cause: str = ""
    """Why a job that stays above its trigger could not do more."""
    receipt: Mapping[str, Any] = field(default_factory=dict)
    """The receipt's fields that this kind of job fills (:func:`build_receipt`)."""
    details: Mapping[str, Any] = field(default_factory=dict)
    """The outcome event's fields beyond those every job has."""
    summarized: int = 0
    calibration: float | None = None
    """The calibration the job measured, if it made a request."""
    stuck: str = ""
    """Words before the "usage still above" text of an ineffective job's result."""
    saved: tuple[str, Callable[[], object]] | None = None
    """A write after the commit (what, and how), before the receipt."""


def commit_and_report(
    job: JobContext, written: Written, progress: Progress, fault: FaultHook | None
) -> JobResult:
    """Commit ``written``, then report it: the receipt, HEARTBEAT.md, the events and
    state.json. An ineffective job (still above the trigger, judged on what it wrote)
    is never "completed" (docs/design.md#over-budget)."""
    workspace, request, base = job.workspace, job.request, job.base
    settings = request.settings
    progress(f"committing the {'masked' if written.head_text is None else 'new'} conversation")
    committed = rewrite(
        job.snapshot,
        written.parts,
        lock=workspace.lock,
        archive=ArchivePlan(workspace.archive_dir, written.archive_name, written.archived),
        drain_seconds=settings.drain_seconds,
        fault=fault,
        on_salvaged=lambda count: report_salvaged(workspace, count),
    )
    # From here on the job has succeeded: what follows only reports it (after_commit).
    if written.saved is not None:
        after_commit(workspace, *written.saved)
    head_end = parts_size(written.parts)
    carried = list(
        split_lines(read_carried(workspace.conversation, head_end), settings.max_line_bytes)
    )
    messages_after = len(written.line_tokens) + len(carried)
    # Counted with the calibration the daemon uses from now on, so that its later counts
    # compare with these (an ineffective job waits for real growth, not for a new ratio).
    scale = written.calibration or request.calibration
    tokens_after = round((sum(written.line_tokens) + sum(x.tokens for x in carried)) * scale)
    head_tokens = round(sum(written.line_tokens) * scale)
    # Only a usage-triggered strategy can be ineffective: its trigger still holding after
    # the job would start the same job again at the next append. Judged on what the job
    # wrote, not on lines appended meanwhile: those are new growth that the next job can
    # summarize, and calling it ineffective would stop all jobs until the conversation
    # grows again, leaving it over the trigger.
    trigger = job.trigger
    still = None
    if trigger is not None and over_trigger(head_tokens, settings.token_limit, trigger):
        still = ineffective_text(tokens_after, settings.token_limit, trigger)
    masking = written.masking
    why = job_text(
        len(masking.masking.masked) if masking is not None else 0,
        written.summarized,
        written.aim,
        usage_ratio(tokens_after, settings.token_limit),
        capped=written.capped,
    )
    reason = _result_reason(written.head_text, masking, why if written.why_first else None)
    last_result = reason
    if still is not None:
        last_result += f"; {written.stuck}{still}"
    if request.result_note:
        last_result += f"; {request.result_note}"
    archive = f".memoryd/archive/{written.archive_name}"
    receipt = build_receipt(
        job=job.clock.job,
        trigger=job.clock.trigger,
        strategy=job.strategy,
        started=job.clock.started,
        finished=time.time(),
        outcome="ineffective" if still is not None else "completed",
        reason=last_result,
        before=(base.messages_before, base.tokens_before),
        after=(len(written.line_tokens), head_tokens),
        arrived=(len(carried), round(sum(x.tokens for x in carried) * scale)),
        prices=settings.prices,
        backend=written.backend,
        masked=masking.span(archive, written.head_text is not None) if masking else None,
        why=why,
        aim=written.aim,
        **written.receipt,
    )
    # The receipt is part of the job's completion: written before anyone is told.
    record_receipt(workspace, receipt)
    heartbeat = HeartbeatManager(workspace)
    if still is not None:
        after_commit(
            workspace, "HEARTBEAT.md", lambda: heartbeat.fail_task(still, result=last_result)
        )
    else:
        after_commit(workspace, "HEARTBEAT.md", lambda: heartbeat.complete_task(last_result))
    if receipt.masked is not None:
        emit_masked(workspace, receipt.job, receipt.masked)
    details: dict[str, Any] = dict(
        job=receipt.job,
        reason=request.reason,
        strategy=job.strategy,
        summarized=written.summarized,
        messages_before=base.messages_before,
        messages_after=messages_after,
        tokens_before=base.tokens_before,
        tokens_after=tokens_after,
        archive=written.archive_name,
        backend=written.backend,
        llm_calls=receipt.llm.calls,
        **written.details,
    )
    # One outcome event per job: an ineffective job did commit, and its event carries
    # what a completed one would, plus why it stayed above the trigger.
    if still is not None and trigger is not None:
        details.update(
            cause=written.cause,
            usage_ratio=usage_ratio(tokens_after, settings.token_limit),
            trigger_tokens=int(trigger * settings.token_limit),
        )
        outcome = "summarize_ineffective"
        log.warning(outcome, workspace=str(workspace.path), **details)
    else:
        outcome = "summarize_completed"
        log.info(outcome, workspace=str(workspace.path), **details)
    after_commit(workspace, "events.jsonl", lambda: events.emit(workspace, outcome, **details))
    record_finished_state(workspace, request, messages_after, tokens_after, written.calibration)
    return replace(
        base,
        outcome="ineffective" if still is not None else "completed",
        reason=reason,
        messages_after=messages_after,
        tokens_after=tokens_after,
        archive=archive,
        backend=written.backend,
        llm_calls=receipt.llm.calls,
        carried_bytes=committed.carried_bytes,
        calibration=written.calibration,
        ineffective=still is not None,
        identity=committed.identity,
        head_end=head_end,
        head_line_tokens=written.line_tokens,
        head_malformed=written.malformed,
        masked_messages=len(masking.masking.masked) if masking is not None else 0,
        masked_tokens=masking.freed_tokens if masking is not None else 0,
        receipt=receipt,
    )


def commit_summary(
    job: JobContext,
    strategy: Strategy,
    pinned: PinnedPlan,
    produced: Produced,
    progress: Progress,
    fault: FaultHook | None,
) -> JobResult:
    """Commit the summary head ``produced``, the pinned messages after it and the kept
    part (masked, when masking ran first), and report it."""
    lines = job.lines
    plan = pinned.plan
    head, name = produced.head, produced.archive_name
    head_line = strict_json.dumps_line_escaping(head.message)
    cut = lines[plan.keep_from - 1].end
    pin_ranges = byte_ranges(pinned.pins)
    archived = byte_ranges(pinned.summarized)
    masking = produced.masking
    kept_parts: list[Part] = [(cut, job.snapshot.end)]
    masked_originals: list[Part] = []
    if masking is not None:
        # The kept part's masked lines are written anew; their originals are archived.
        kept_parts = masking.masking.parts(lines[plan.keep_from :])
        masked_originals = [*masking.masking.originals(lines[plan.keep_from :])]
    summary_tokens = estimate_message_tokens(head.message)
    kept = [*pinned.pins, *lines[plan.keep_from :]]
    calibration = None
    if head.input_tokens:
        calibration = calibrate(
            job.request.calibration, head.estimated_input_tokens, head.input_tokens
        )
    least = produced.least
    archive = f".memoryd/archive/{name}"
    result = commit_and_report(
        job,
        Written(
            # Pinned messages go right after the head, byte for byte, in their order.
            parts=[head_line, *pin_ranges, *kept_parts],
            archive_name=name,
            archived=[*archived, *masked_originals],
            line_tokens=(summary_tokens, *(x.tokens for x in kept)),
            malformed=sum(1 for x in kept if x.malformed),
            backend=head.backend,
            masking=masking,
            head_text=head.result_text,
            # A least-loss job's result says first how much was masked and summarized, and why.
            why_first=least is not None,
            aim=least.aim if least is not None else None,
            capped=least is not None and least.capped,
            cause="the kept part alone is above the trigger",
            receipt=dict(
                model=head.model,
                summarized=SummarizedSpan(
                    plan.summarized_count,
                    *span_ids(head.message, pinned.summarized),
                    archive,
                    0,
                    sum(end - start for start, end in archived),
                ),
                pins_kept=pinned.pinned_count,
                retention=head.retention,
                llm=head.usage,
            ),
            details=dict(summary_tokens=summary_tokens, pins_kept=pinned.pinned_count),
            summarized=plan.summarized_count,
            calibration=calibration,
            saved=(f"{strategy.name} files", lambda: strategy.save(job.workspace, head)),
        ),
        progress,
        fault,
    )
    return replace(
        result,
        summarized_count=plan.summarized_count,
        summarized_bytes=cut - sum(end - start for start, end in pin_ranges),
        summary_tokens=summary_tokens,
        pins_kept=pinned.pinned_count,
    )


def _result_reason(head_text: str | None, masking: MaskingStage | None, why: str | None) -> str:
    """The job result's reason: what was masked, what the head did (if there is one), and
    why first when the job chose its split by least loss."""
    if why is None:
        return f"{masking.text}; {head_text}" if masking is not None else head_text or ""
    if masking is None:
        return f"{why}: {head_text}"
    said = f"{why}: {masking.detail}"
    return f"{said}; {head_text}" if head_text is not None else said


def record_finished_state(
    workspace: Workspace,
    request: JobRequest,
    messages: int,
    tokens: int,
    calibration: float | None = None,
) -> None:
    """state.json after a committed job: the conversation's new size, not summarizing,
    summarized just now (with the job's new calibration, if it made one)."""
    now = time.time()
    state = build_state(
        workspace,
        request.settings,
        messages=messages,
        tokens=tokens,
        summarizing=False,
        last_summary_at=iso_ms(now),
        now=now,
        calibration=calibration or request.calibration,
    )
    after_commit(workspace, "state.json", lambda: write_state(workspace, state))


def report_salvaged(workspace: Workspace, count: int) -> None:
    """The ``salvaged_lines`` event of a commit's drain window."""
    after_commit(
        workspace, "events.jsonl", lambda: events.emit(workspace, "salvaged_lines", lines=count)
    )


def read_carried(path: Path, start: int) -> bytes:
    """The complete lines of ``path`` from ``start`` on (what was carried over)."""
    data = read_file_from(path, start)
    return data[: data.rfind(b"\n") + 1]
