"""A job's commit and what follows it: the rewrite, then the receipt, HEARTBEAT.md, the
events and state.json (docs/design.md#commit).

Once the rewrite is durable the job has succeeded: a write after it that fails is logged
(see :func:`memoryd.compaction.job.report.after_commit`) and never turns the job into a failure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
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


def commit_and_report(
    workspace: Workspace,
    request: JobRequest,
    strategy: Strategy,
    lines: Sequence[Line],
    pinned: PinnedPlan,
    produced: Produced,
    snapshot: Snapshot,
    base: JobResult,
    clock: JobClock,
    progress: Progress,
    fault: FaultHook | None,
) -> JobResult:
    settings = request.settings
    plan = pinned.plan
    head, name = produced.head, produced.archive_name
    head_line = strict_json.dumps_line_escaping(head.message)
    cut = lines[plan.keep_from - 1].end
    pin_ranges = byte_ranges(pinned.pins)
    archived = byte_ranges(pinned.summarized)
    masking = produced.masking
    kept_parts: list[Part] = [(cut, snapshot.end)]
    masked_originals: list[Part] = []
    if masking is not None:
        # The kept part's masked lines are written anew; their originals are archived.
        kept_parts = masking.masking.parts(lines[plan.keep_from :])
        masked_originals = [*masking.masking.originals(lines[plan.keep_from :])]
    progress("committing the new conversation")
    committed = rewrite(
        snapshot,
        # Pinned messages go right after the head, byte for byte, in their order.
        [head_line, *pin_ranges, *kept_parts],
        lock=workspace.lock,
        archive=ArchivePlan(workspace.archive_dir, name, [*archived, *masked_originals]),
        drain_seconds=settings.drain_seconds,
        fault=fault,
        on_salvaged=lambda count: report_salvaged(workspace, count),
    )
    # From here on the job has succeeded: what follows only reports it (after_commit).
    after_commit(workspace, f"{strategy.name} files", lambda: strategy.save(workspace, head))
    summary_tokens = estimate_message_tokens(head.message)
    kept = [*pinned.pins, *lines[plan.keep_from :]]
    pins_bytes = sum(end - start for start, end in pin_ranges)
    head_end = len(head_line) + pins_bytes + parts_size(kept_parts)
    carried = list(
        split_lines(read_carried(workspace.conversation, head_end), settings.max_line_bytes)
    )
    messages_after = 1 + len(kept) + len(carried)
    calibration = None
    if head.input_tokens:
        calibration = calibrate(request.calibration, head.estimated_input_tokens, head.input_tokens)
    # Counted with the calibration the daemon uses from now on, so that its later counts
    # compare with these (an ineffective job waits for real growth, not for a new ratio).
    scale = calibration or request.calibration
    tokens_after = round(
        (summary_tokens + sum(x.tokens for x in kept) + sum(x.tokens for x in carried)) * scale
    )
    head_tokens = round((summary_tokens + sum(x.tokens for x in kept)) * scale)
    trigger = strategy.trigger
    # Only a usage-triggered strategy can be ineffective: its trigger still holding after
    # the job would start the same job again at the next append. Judged on what the job
    # wrote (summary + kept), not on lines appended meanwhile: those are new growth that
    # the next job can summarize, and calling it ineffective would stop all jobs until the
    # conversation grows again, leaving it over the trigger.
    ineffective = trigger is not None and over_trigger(head_tokens, settings.token_limit, trigger)
    least = produced.least
    why = job_text(
        len(masking.masking.masked) if masking is not None else 0,
        plan.summarized_count,
        least.aim if least is not None else None,
        usage_ratio(tokens_after, settings.token_limit),
        capped=least is not None and least.capped,
    )
    # A least-loss job's result says first how much was masked and summarized, and why.
    reason = _result_reason(head.result_text, masking, why if least is not None else None)
    last_result = reason
    if ineffective and trigger is not None:
        last_result += "; " + ineffective_text(tokens_after, settings.token_limit, trigger)
    if request.result_note:
        last_result += f"; {request.result_note}"
    archive = f".memoryd/archive/{name}"
    receipt = build_receipt(
        job=clock.job,
        trigger=clock.trigger,
        strategy=strategy.name,
        started=clock.started,
        finished=time.time(),
        outcome="ineffective" if ineffective else "completed",
        reason=last_result,
        before=(base.messages_before, base.tokens_before),
        after=(1 + len(kept), head_tokens),
        arrived=(len(carried), round(sum(x.tokens for x in carried) * scale)),
        prices=settings.prices,
        backend=head.backend,
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
        masked=masking.span(archive, summary_followed=True) if masking else None,
        why=why,
        aim=least.aim if least is not None else None,
    )
    # The receipt is part of the job's completion: written before anyone is told.
    record_receipt(workspace, receipt)
    heartbeat = HeartbeatManager(workspace)
    if ineffective and trigger is not None:
        # Over budget after the job is never "completed" (docs/design.md#over-budget).
        still = ineffective_text(tokens_after, settings.token_limit, trigger)
        after_commit(
            workspace, "HEARTBEAT.md", lambda: heartbeat.fail_task(still, result=last_result)
        )
    else:
        after_commit(workspace, "HEARTBEAT.md", lambda: heartbeat.complete_task(last_result))
    details: dict[str, Any] = dict(
        job=receipt.job,
        reason=request.reason,
        strategy=strategy.name,
        summarized=plan.summarized_count,
        messages_before=base.messages_before,
        messages_after=messages_after,
        tokens_before=base.tokens_before,
        tokens_after=tokens_after,
        summary_tokens=summary_tokens,
        archive=name,
        backend=head.backend,
        llm_calls=receipt.llm.calls,
        pins_kept=pinned.pinned_count,
    )
    if masking is not None and receipt.masked is not None:
        emit_masked(workspace, receipt.job, receipt.masked)
    # One outcome event per job: an ineffective job did commit, and its event carries
    # what a completed one would, plus why it stayed above the trigger.
    if ineffective and trigger is not None:
        details.update(
            cause="the kept part alone is above the trigger",
            usage_ratio=usage_ratio(tokens_after, settings.token_limit),
            trigger_tokens=int(trigger * settings.token_limit),
        )
        outcome = "summarize_ineffective"
        log.warning(outcome, workspace=str(workspace.path), **details)
    else:
        outcome = "summarize_completed"
        log.info(outcome, workspace=str(workspace.path), **details)
    after_commit(workspace, "events.jsonl", lambda: events.emit(workspace, outcome, **details))
    record_finished_state(workspace, request, messages_after, tokens_after, calibration)
    return replace(
        base,
        outcome="ineffective" if ineffective else "completed",
        reason=reason,
        messages_after=messages_after,
        tokens_after=tokens_after,
        summarized_count=plan.summarized_count,
        summarized_bytes=cut - pins_bytes,
        summary_tokens=summary_tokens,
        archive=archive,
        backend=head.backend,
        llm_calls=receipt.llm.calls,
        carried_bytes=committed.carried_bytes,
        calibration=calibration,
        ineffective=ineffective,
        identity=committed.identity,
        head_end=head_end,
        head_line_tokens=(summary_tokens, *(x.tokens for x in kept)),
        head_malformed=sum(1 for x in kept if x.malformed),
        pins_kept=pinned.pinned_count,
        masked_messages=len(masking.masking.masked) if masking else 0,
        masked_tokens=masking.freed_tokens if masking else 0,
        receipt=receipt,
    )


def _result_reason(result_text: str, masking: MaskingStage | None, why: str | None) -> str:
    """The job result's reason: what was masked, what the head did, and why first when the
    job chose its split by least loss."""
    if why is None:
        return f"{masking.text}; {result_text}" if masking is not None else result_text
    if masking is None:
        return f"{why}: {result_text}"
    return f"{why}: {masking.detail}; {result_text}"


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
