"""A job's masking stage in the shell: the decision of :mod:`memoryd.compaction.masking.decide`
applied to the snapshot, and the report of a job that masking alone ended
(docs/design.md#masking).

Masking is one more list of parts for the job's one commit (:func:`memoryd.commit.rewrite.
rewrite`): the masked lines as new bytes, the rest as byte ranges of the snapshot, the
originals of the masked lines in the archive before the file changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from memoryd.commit.rewrite import ArchivePlan, FaultHook, archive_name, parts_size, rewrite
from memoryd.commit.snapshot import Snapshot
from memoryd.compaction.job.finish import (
    ineffective_text,
    read_carried,
    record_finished_state,
    report_salvaged,
)
from memoryd.compaction.job.report import JobClock, after_commit, emit_masked, record_receipt
from memoryd.compaction.job.request import JobRequest, JobResult, Outcome, Progress
from memoryd.compaction.masking.decide import MaskingStage
from memoryd.compaction.strategies.least_loss import job_text
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.pins import pinned_indices
from memoryd.errors import CommitAborted
from memoryd.levels import over_trigger, usage_ratio
from memoryd.published import events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.receipts.records import build_receipt
from memoryd.workspace import Workspace

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class MaskingJob:
    """The job a masking belongs to: where, what it read, and what it started with."""

    workspace: Workspace
    request: JobRequest
    clock: JobClock
    strategy: str
    base: JobResult
    lines: Sequence[Line]
    """The lines of the snapshot, as read (not masked)."""
    snapshot: Snapshot
    trigger: float | None = None
    """The strategy's trigger: usage still above it after the masking makes the job
    ineffective (docs/design.md#over-budget)."""


def masking_only(
    job: MaskingJob,
    stage: MaskingStage,
    failed: Callable[[str], JobResult],
    progress: Progress,
    fault: FaultHook | None,
) -> JobResult:
    """A job that masking alone ends (usage at its target, or no summary can follow):
    the dry run's words, or the commit and its report; ``failed`` reports a commit that
    could not be made (the conversation unchanged)."""
    if job.request.dry_run:
        then = "" if stage.decision == "enough" else ", then summarize"
        masking = stage.masking
        would = f"would mask {masking.what()} (~{stage.freed_tokens:,} tokens)"
        return replace(job.base, outcome="dry_run", reason=f"{would}{then}")
    if not job.request.heartbeat_started:
        HeartbeatManager(job.workspace).start_task(f"Masking {stage.masking.what()}")
    try:
        return _commit_masking(job, stage, progress, fault)
    except CommitAborted as exc:
        log.warning("summarize_failed", workspace=str(job.workspace.path), reason=str(exc))
        return failed(str(exc))
    except OSError as exc:
        return failed(f"file error: {exc.strerror or exc}")


def _commit_masking(
    job: MaskingJob, stage: MaskingStage, progress: Progress, fault: FaultHook | None
) -> JobResult:
    """Commit the masking, then report it: the receipt, HEARTBEAT.md, the event and
    state.json. No LLM call, no summary."""
    workspace, request, lines, snapshot = job.workspace, job.request, job.lines, job.snapshot
    base, clock, strategy = job.base, job.clock, job.strategy
    settings = request.settings
    masking = stage.masking
    name = archive_name("conversation")
    parts = masking.parts(lines)
    progress("committing the masked conversation")
    committed = rewrite(
        snapshot,
        parts,
        lock=workspace.lock,
        archive=ArchivePlan(workspace.archive_dir, name, masking.originals(lines)),
        drain_seconds=settings.drain_seconds,
        fault=fault,
        on_salvaged=lambda count: report_salvaged(workspace, count),
    )
    head = masking.applied(lines)
    head_end = parts_size(parts)
    carried = list(
        split_lines(read_carried(workspace.conversation, head_end), settings.max_line_bytes)
    )
    scale = request.calibration
    tokens_after = round((sum(x.tokens for x in head) + sum(x.tokens for x in carried)) * scale)
    messages_after = len(head) + len(carried)
    archive = f".memoryd/archive/{name}"
    span = stage.span(archive, summary_followed=False)
    # Judged on what the job wrote, as after a summary (lines appended meanwhile are growth).
    written = round(sum(x.tokens for x in head) * scale)
    why = job_text(len(masking.masked), 0, stage.aim, usage_ratio(written, settings.token_limit))
    result_text = f"{why}: {stage.detail}"
    trigger = job.trigger
    still = None
    if trigger is not None and over_trigger(written, settings.token_limit, trigger):
        still = ineffective_text(tokens_after, settings.token_limit, trigger)
        result_text += f"; no summary could follow; {still}"
    if request.result_note:
        result_text += f"; {request.result_note}"
    outcome: Outcome = "ineffective" if still is not None else "completed"
    receipt = build_receipt(
        job=clock.job,
        trigger=clock.trigger,
        strategy=strategy,
        started=clock.started,
        finished=time.time(),
        outcome=outcome,
        reason=result_text,
        before=(base.messages_before, base.tokens_before),
        after=(len(head), written),
        arrived=(len(carried), round(sum(x.tokens for x in carried) * scale)),
        prices=settings.prices,
        backend="masking",
        pins_kept=len(pinned_indices(lines, settings.keep_first)),
        masked=span,
        why=why,
        aim=stage.aim,
    )
    record_receipt(workspace, receipt)
    heartbeat = HeartbeatManager(workspace)
    if still is not None:
        # Over budget after the job is never "completed" (docs/design.md#over-budget).
        after_commit(
            workspace, "HEARTBEAT.md", lambda: heartbeat.fail_task(still, result=result_text)
        )
    else:
        after_commit(workspace, "HEARTBEAT.md", lambda: heartbeat.complete_task(result_text))
    emit_masked(workspace, receipt.job, span)
    details: dict[str, Any] = dict(
        job=receipt.job,
        reason=request.reason,
        strategy=strategy,
        summarized=0,
        masked=len(masking.masked),
        messages_before=base.messages_before,
        messages_after=messages_after,
        tokens_before=base.tokens_before,
        tokens_after=tokens_after,
        archive=name,
        backend="masking",
        llm_calls=0,
    )
    # Every job has one outcome event: completed, or ineffective with why it stayed over.
    event = "summarize_completed"
    if still is not None and trigger is not None:
        event = "summarize_ineffective"
        details.update(
            cause="masked what it could and no summary can follow",
            usage_ratio=usage_ratio(tokens_after, settings.token_limit),
            trigger_tokens=int(trigger * settings.token_limit),
        )
        log.warning(event, workspace=str(workspace.path), **details)
    after_commit(workspace, "events.jsonl", lambda: events.emit(workspace, event, **details))
    record_finished_state(workspace, request, messages_after, tokens_after)
    log.info(
        "tool_outputs_masked",
        workspace=str(workspace.path),
        job=receipt.job,
        outputs=masking.outputs,
        inputs=masking.inputs,
        media=masking.media,
        tokens_freed=stage.freed_tokens,
        tokens_after=tokens_after,
    )
    return replace(
        base,
        outcome=outcome,
        reason=result_text,
        messages_after=messages_after,
        tokens_after=tokens_after,
        archive=archive,
        backend="masking",
        carried_bytes=committed.carried_bytes,
        identity=committed.identity,
        head_end=head_end,
        head_line_tokens=tuple(x.tokens for x in head),
        head_malformed=sum(1 for x in head if x.malformed),
        masked_messages=len(masking.masked),
        masked_tokens=stage.freed_tokens,
        receipt=receipt,
    )
