"""One summarization job: what runs in a worker process, or in the foreground.

Picklable arguments in (:class:`JobRequest`), a small picklable result out
(:class:`JobResult`, :mod:`memoryd.compaction.job.request`). The same function serves the daemon and
``memoryd summarize``. What is due, where the split falls and what head replaces the prefix
come from the workspace's strategy (:mod:`memoryd.compaction.strategies`); this module reads, plans
and produces the head; :mod:`memoryd.compaction.job.finish` commits and reports what followed,
:mod:`memoryd.compaction.job.report` records receipts and failures (docs/design.md#commit).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from dataclasses import replace

import structlog

from memoryd.boundaries import SplitPlan
from memoryd.commit.recovery import recover
from memoryd.commit.rewrite import FaultHook, archive_name
from memoryd.commit.snapshot import read_snapshot
from memoryd.compaction.job.finish import JobContext, Produced, commit_summary, ineffective_text
from memoryd.compaction.job.report import (
    JobClock,
    pins_over_trigger_reason,
    record_receipt,
    report_failure,
)
from memoryd.compaction.job.request import (
    JobRequest,
    JobResult,
    Progress,
)
from memoryd.compaction.masking.decide import masking_stage
from memoryd.compaction.masking.stage import masking_only
from memoryd.compaction.strategies import Counts, HeadRequest, Strategy, strategy_for
from memoryd.compaction.strategies.least_loss import least_for
from memoryd.config.settings import Settings
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.pins import PINS_AFTER, PinnedPlan, apply_pins, pinned_indices
from memoryd.errors import (
    CommitAborted,
    InputError,
    MemorydError,
    SummarizerError,
)
from memoryd.files.fsutil import flocked
from memoryd.files.paths import check_workspace
from memoryd.levels import over_trigger, usage_ratio
from memoryd.llm import limits
from memoryd.published import events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.summary.backends import request_timeout
from memoryd.workspace import Workspace

log = structlog.get_logger()

JOB_DEADLINE_FACTOR = 4
"""A job's LLM deadline: this many times the configured request timeout."""


def _tokens(lines: Sequence[Line], calibration: float) -> int:
    return round(sum(line.tokens for line in lines) * calibration)


def plan_job(
    lines: Sequence[Line], strategy: Strategy, force: bool, calibration: float = 1.0
) -> SplitPlan | str:
    """The strategy's split, or the reason there is nothing to do (pure).

    ``force`` skips the due check (the daemon made it already, on its own counts).
    """
    if not force:
        due = strategy.due(Counts.of_lines(lines, calibration))
        if not due.due:
            return due.reason
    return strategy.split(lines)


def _failed(
    workspace: Workspace,
    clock: JobClock,
    settings: Settings,
    strategy: str,
    base: JobResult,
    reason: str,
    error: SummarizerError | None = None,
) -> JobResult:
    """Report a failed job: its receipt first (with what its LLM calls cost, when the
    summarizer failed), then HEARTBEAT.md and the event."""
    receipt = clock.unchanged_receipt(
        settings,
        strategy,
        "failed",
        reason,
        (base.messages_before, base.tokens_before),
        model=error.model if error is not None else None,
        llm=error.usage if error is not None else None,
    )
    record_receipt(workspace, receipt)
    report_failure(workspace, reason, strategy, receipt.job)
    return replace(base, outcome="failed", reason=reason, receipt=receipt)


def run_job(
    request: JobRequest, progress: Progress | None = None, fault: FaultHook | None = None
) -> JobResult:
    """Run one job on a workspace; never raises for a job that fails, but reports it.

    Raises :class:`~memoryd.errors.InputError` only for a workspace that cannot be used
    at all (missing folder, no conversation, unsafe file).
    """
    started = time.monotonic()
    limits.learn(request.context_limits)
    workspace = Workspace(check_workspace(request.workspace))
    if not workspace.conversation.exists() and not workspace.conversation.is_symlink():
        raise InputError(f"{workspace.path}: no conversation.jsonl in this workspace")
    with flocked(workspace.job_lock, root=workspace.path, blocking=False) as acquired:
        if not acquired:
            return JobResult(workspace.path, "busy", "another job is running on this workspace")
        # The daemon marked the job active at dispatch and has checked in for it since:
        # from here on the job does, at once and then every interval (docs/design.md#checkins).
        checkins: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if request.heartbeat_started:
            manager = HeartbeatManager(workspace)
            checkins = manager.checkins(request.settings.checkin_interval, immediately=True)
        with checkins:
            result = _run_locked(workspace, request, progress or (lambda _stage: None), fault)
    result = replace(
        result,
        duration_s=round(time.monotonic() - started, 3),
        context_limits=limits.learned_limits(),
    )
    if result.archive is not None and request.settings.index_archive:
        _index_in_background(workspace)
    return result


def _run_locked(
    workspace: Workspace, request: JobRequest, progress: Progress, fault: FaultHook | None
) -> JobResult:
    settings = request.settings
    strategy = strategy_for(settings)
    clock = JobClock.start(request.reason)
    recover(workspace)
    progress("reading the conversation")
    snapshot, data = read_snapshot(workspace.conversation)
    lines = list(split_lines(data, settings.max_line_bytes))
    del data
    tokens_before = _tokens(lines, request.calibration)
    base = JobResult(
        workspace.path,
        "nothing_to_do",
        "",
        strategy=strategy.name,
        messages_before=len(lines),
        tokens_before=tokens_before,
        messages_after=len(lines),
        tokens_after=tokens_before,
    )
    plan = plan_job(lines, strategy, request.force, request.calibration)
    heartbeat = HeartbeatManager(workspace)
    trigger = strategy.trigger
    over = trigger is not None and over_trigger(tokens_before, settings.token_limit, trigger)
    # Masking first, summarizing only if needed (docs/design.md#masking).
    stage = masking_stage(lines, settings, tokens_before, request.calibration, trigger)
    if stage is not None:
        mask_only = functools.partial(
            masking_only,
            JobContext(workspace, request, clock, strategy.name, base, lines, snapshot, trigger),
            stage,
            lambda reason: _failed(workspace, clock, settings, strategy.name, base, reason),
            progress,
            fault,
        )
        if stage.decision == "enough" or request.dry_run:
            return mask_only()
        lines = stage.masking.applied(lines)
        plan = plan_job(lines, strategy, True, request.calibration)
        if isinstance(plan, str):
            return mask_only()
    # Only what masking could not free is summarized (docs/design.md#least-loss).
    least = least_for(lines, plan, settings, trigger, request.calibration) if over else None
    plan = least.plan if least is not None else plan
    if isinstance(plan, str):
        if over and trigger is not None:
            return _stuck(workspace, request, clock, strategy.name, base, plan, trigger)
        if request.heartbeat_started:
            heartbeat.complete_task(f"nothing to do: {plan}")
        return replace(base, reason=plan)
    pinned = apply_pins(lines, plan, pinned_indices(lines, settings.keep_first))
    plan = pinned.plan
    pinned_tokens = round(pinned.pinned_tokens * request.calibration)
    stuck_reason = None
    if trigger is not None and over_trigger(pinned_tokens, settings.token_limit, trigger):
        stuck_reason = pins_over_trigger_reason(pinned_tokens)
    elif len(pinned.summarized) - (1 if plan.folds_previous_summary else 0) < 1:
        stuck_reason = "every message before the split is pinned"
    if stuck_reason is not None and stage is not None:
        return mask_only()
    if stuck_reason is not None:
        if over and trigger is not None:
            return _stuck(
                workspace,
                request,
                clock,
                strategy.name,
                base,
                stuck_reason,
                trigger,
                pinned.pinned_count,
                pinned_tokens,
            )
        if request.heartbeat_started:
            heartbeat.complete_task(f"nothing to do: {stuck_reason}")
        return replace(base, reason=stuck_reason)
    task = f"Summarizing {plan.summarized_count} messages (~{plan.summarized_tokens:,} tokens)"
    if request.dry_run:
        pins = f" and {len(pinned.pins)} pinned" if pinned.pins else ""
        aim = f" to reach {least.aim:.2f}" if least is not None else ""
        return replace(
            base,
            outcome="dry_run",
            reason=f"would replace {plan.summarized_count} messages (~{plan.summarized_tokens:,} "
            f"tokens) with one summary{aim} and keep {len(lines) - plan.keep_from} "
            f"verbatim{pins}",
            summarized_count=plan.summarized_count,
        )
    if not request.heartbeat_started:
        heartbeat.start_task(task)
    events.emit(
        workspace,
        "summarize_started",
        reason=request.reason,
        strategy=strategy.name,
        messages=len(lines),
        tokens=tokens_before,
        summarizing=plan.summarized_count,
    )
    checkins: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if not request.heartbeat_started:
        checkins = heartbeat.checkins(settings.checkin_interval)
    try:
        with checkins:
            head = _produce_head(workspace, request, strategy, lines, pinned, progress)
            head = replace(head, masking=stage, least=least)
            job = JobContext(
                workspace, request, clock, strategy.name, base, lines, snapshot, trigger
            )
            return commit_summary(job, strategy, pinned, head, progress, fault)
    except SummarizerError as exc:
        log.warning("summarize_failed", workspace=str(workspace.path), reason=str(exc))
        return _failed(workspace, clock, settings, strategy.name, base, str(exc), exc)
    except CommitAborted as exc:
        log.warning("summarize_failed", workspace=str(workspace.path), reason=str(exc))
        return _failed(workspace, clock, settings, strategy.name, base, str(exc))
    except MemorydError as exc:
        # A usage or configuration error (no API key for the anthropic backend, say) still
        # ends the task this job started: HEARTBEAT.md must not stay "active".
        _failed(workspace, clock, settings, strategy.name, base, str(exc))
        raise
    except OSError as exc:
        reason = f"file error: {exc.strerror or exc}"
        return _failed(workspace, clock, settings, strategy.name, base, reason)


def _stuck(
    workspace: Workspace,
    request: JobRequest,
    clock: JobClock,
    strategy: str,
    base: JobResult,
    cause: str,
    trigger: float,
    pins_kept: int = 0,
    pinned_tokens: int | None = None,
) -> JobResult:
    """Usage is above the trigger and no job can lower it (no safe boundary, the pins hold
    it all): an ineffective job that changes nothing, and says so loudly.

    HEARTBEAT.md says ``failed`` with the cause and the usage (never ``completed``), the
    receipt and ``summarize_ineffective`` record it, the log warns. Not a loop: the daemon
    waits for the conversation to grow, as after any ineffective job
    (docs/design.md#over-budget).
    """
    settings = request.settings
    tokens = base.tokens_before
    reason = f"{cause}; {ineffective_text(tokens, settings.token_limit, trigger)}"
    if request.dry_run:
        return replace(base, outcome="dry_run", reason=f"would do nothing: {reason}")
    receipt = clock.unchanged_receipt(
        settings,
        strategy,
        "ineffective",
        reason,
        (base.messages_before, tokens),
        pins_kept=pins_kept,
    )
    record_receipt(workspace, receipt)
    HeartbeatManager(workspace).fail_task(f"over budget, nothing done: {reason}")
    details = {} if pinned_tokens is None else {"pinned_tokens": pinned_tokens}
    events.emit(
        workspace,
        "summarize_ineffective",
        job=receipt.job,
        reason=reason,
        cause=cause,
        tokens_after=tokens,
        usage_ratio=usage_ratio(tokens, settings.token_limit),
        trigger_tokens=int(trigger * settings.token_limit),
        **details,
    )
    log.warning(
        "summarize_ineffective",
        workspace=str(workspace.path),
        cause=cause,
        tokens=tokens,
        usage_ratio=usage_ratio(tokens, settings.token_limit),
    )
    return replace(
        base,
        outcome="ineffective",
        reason=reason,
        ineffective=True,
        pins_kept=pins_kept,
        receipt=receipt,
    )


def _produce_head(
    workspace: Workspace,
    request: JobRequest,
    strategy: Strategy,
    lines: Sequence[Line],
    pinned: PinnedPlan,
    progress: Progress,
) -> Produced:
    """The one place where the text that replaces the prefix is produced, before the commit.

    The strategy sees the prefix without its pinned messages: those are kept verbatim,
    with the kept part, and it is told which (``kept``).
    """
    plan, prefix = pinned.plan, pinned.summarized
    _report_malformed(workspace, prefix[1:] if plan.folds_previous_summary else prefix)
    name = archive_name("conversation")
    head = strategy.produce_head(
        HeadRequest(
            workspace=workspace,
            settings=request.settings,
            env=request.env,
            prefix=prefix,
            plan=plan,
            archive=f".memoryd/archive/{name}",
            deadline=request_timeout(request.settings, request.env) * JOB_DEADLINE_FACTOR,
            progress=progress,
            kept=(*pinned.pins, *lines[plan.keep_from :]),
        )
    )
    if pinned.pins:
        # Where the pins written after the head end: the next user turn is not theirs.
        head = replace(head, message={**head.message, PINS_AFTER: len(pinned.pins)})
    return Produced(head, name)


def _report_malformed(workspace: Workspace, lines: Sequence[Line]) -> None:
    for line in lines:
        if line.malformed:
            events.emit(
                workspace,
                "malformed_line",
                line=line.index + 1,
                bytes=line.length,
                problem=line.problem,
                moved_to="archive",
            )


def _index_in_background(workspace: Workspace) -> None:
    """Index the new archive now that the commit is durable and the job is over.

    Outside every lock, in a thread started last, so the job's result is not delayed; a
    failure is logged and retried and never fails the job (docs/design.md#recall).
    Imported here: the daemon's own process never loads the index code.
    """
    from memoryd.search.archive_index import update_index_in_background

    update_index_in_background(workspace.path)
