"""One summarization job: what runs in a worker process, or in the foreground.

Picklable arguments in (:class:`JobRequest`), a small picklable result out
(:class:`JobResult`). The same function serves the daemon and ``memoryd summarize``.
What is due, where the split falls and what head replaces the prefix come from the
workspace's strategy (:mod:`memoryd.strategies`); this module reads, commits and reports
(docs/design.md#commit).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import structlog

from memoryd import events
from memoryd.commit import (
    ArchivePlan,
    FaultHook,
    Snapshot,
    archive_name,
    read_snapshot,
    recover,
    rewrite,
)
from memoryd.config import ANTHROPIC_API_KEY_ENV, ANTHROPIC_BASE_URL_ENV, Settings
from memoryd.conversation import Line, split_lines
from memoryd.errors import (
    CommitAborted,
    InputError,
    MemorydError,
    SummarizerError,
)
from memoryd.fsutil import check_workspace, flocked
from memoryd.heartbeat import HeartbeatManager
from memoryd.job_report import JobClock, pins_over_trigger_reason, record_receipt, span_ids

# Re-exported: the daemon reports failed and lost jobs through these names.
from memoryd.job_report import report_failure as report_failure
from memoryd.job_report import report_lost_job as report_lost_job
from memoryd.pins import PinnedPlan, apply_pins, byte_ranges, pinned_indices
from memoryd.policy import SplitPlan, over_trigger
from memoryd.receipts import Receipt, SummarizedSpan, build_receipt
from memoryd.state import build_state, write_state
from memoryd.strategies import Counts, Head, HeadRequest, Strategy, strategy_for
from memoryd.tokens import calibrate, estimate_message_tokens
from memoryd.workspace import Workspace

log = structlog.get_logger()

Outcome = Literal["completed", "nothing_to_do", "ineffective", "failed", "busy", "dry_run"]
Progress = Callable[[str], None]
JOB_DEADLINE_FACTOR = 4
"""A job's LLM deadline: this many times the configured request timeout."""
SUMMARIZER_ENV = (ANTHROPIC_API_KEY_ENV, ANTHROPIC_BASE_URL_ENV)
"""The environment variables the summarizer honours, handed to a job explicitly."""


def summarizer_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that a job's summarizer reads (for :class:`JobRequest`)."""
    return {name: environ[name] for name in SUMMARIZER_ENV if name in environ}


@dataclass(frozen=True, slots=True)
class JobRequest:
    """Everything a job needs, as plain picklable values."""

    workspace: Path
    settings: Settings
    force: bool = False
    dry_run: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    """The variables the summarizer honours (see :data:`SUMMARIZER_ENV`)."""
    heartbeat_started: bool = False
    """True when the caller already set HEARTBEAT.md active (the daemon does, at dispatch)."""
    calibration: float = 1.0
    reason: str = "manual"
    """Why the job runs: "trigger" (usage or message count), "idle" or "manual"."""
    result_note: str | None = None
    """Appended to HEARTBEAT.md's ``last_result`` (the spend cap says why it is extractive)."""


@dataclass(frozen=True, slots=True)
class JobResult:
    """What a job did, in ids, counts and sizes (never message text)."""

    workspace: Path
    outcome: Outcome
    reason: str
    strategy: str = "narrative"
    messages_before: int = 0
    tokens_before: int = 0
    messages_after: int = 0
    tokens_after: int = 0
    summarized_count: int = 0
    summarized_bytes: int = 0
    """Bytes of the conversation's start that the job replaced (all now in ``archive``)."""
    summary_tokens: int = 0
    archive: str | None = None
    backend: str | None = None
    llm_calls: int = 0
    carried_bytes: int = 0
    calibration: float | None = None
    ineffective: bool = False
    identity: tuple[int, int] | None = None
    """(device, inode) of the new conversation file."""
    head_end: int = 0
    """Bytes of the new file that the job wrote (summary + kept); the rest was carried."""
    head_line_tokens: tuple[int, ...] = ()
    """Uncalibrated token estimate of each line of the head, for the daemon's reader."""
    head_malformed: int = 0
    duration_s: float = 0.0
    pins_kept: int = 0
    receipt: Receipt | None = None
    """The job's receipt, as appended to ``.memoryd/receipts.jsonl`` (None when no job ran)."""


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
    workspace = Workspace(check_workspace(request.workspace))
    if not workspace.conversation.exists() and not workspace.conversation.is_symlink():
        raise InputError(f"{workspace.path}: no conversation.jsonl in this workspace")
    with flocked(workspace.job_lock, root=workspace.path, blocking=False) as acquired:
        if not acquired:
            return JobResult(workspace.path, "busy", "another job is running on this workspace")
        result = _run_locked(workspace, request, progress or (lambda _stage: None), fault)
    result = replace(result, duration_s=round(time.monotonic() - started, 3))
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
    if isinstance(plan, str):
        if request.heartbeat_started:
            heartbeat.complete_task(f"nothing to do: {plan}")
        return replace(base, reason=plan)
    pinned = apply_pins(lines, plan, pinned_indices(lines, settings.keep_first))
    plan = pinned.plan
    if len(pinned.summarized) - (1 if plan.folds_previous_summary else 0) < 1:
        reason = "every message before the split is pinned"
        if request.heartbeat_started:
            heartbeat.complete_task(f"nothing to do: {reason}")
        return replace(base, reason=reason)
    pinned_tokens = round(pinned.pinned_tokens * request.calibration)
    trigger = strategy.trigger
    if trigger is not None and over_trigger(pinned_tokens, settings.token_limit, trigger):
        return _pins_over_trigger(
            workspace, request, clock, strategy.name, base, pinned, pinned_tokens, trigger
        )
    task = f"Summarizing {plan.summarized_count} messages (~{plan.summarized_tokens:,} tokens)"
    if request.dry_run:
        pins = f" and {len(pinned.pins)} pinned" if pinned.pins else ""
        return replace(
            base,
            outcome="dry_run",
            reason=f"would replace {plan.summarized_count} messages (~{plan.summarized_tokens:,} "
            f"tokens) with one summary and keep {len(lines) - plan.keep_from} verbatim{pins}",
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
    try:
        with heartbeat.checkins(settings.checkin_interval):
            head = _produce_head(workspace, request, strategy, pinned, progress)
            return _commit_and_report(
                workspace,
                request,
                strategy,
                lines,
                pinned,
                head,
                snapshot,
                base,
                clock,
                progress,
                fault,
            )
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


def _pins_over_trigger(
    workspace: Workspace,
    request: JobRequest,
    clock: JobClock,
    strategy: str,
    base: JobResult,
    pinned: PinnedPlan,
    pinned_tokens: int,
    trigger: float,
) -> JobResult:
    """Pins alone keep usage above the trigger: an ineffective job that changes nothing.

    Not a failure and not a loop: the daemon waits for the conversation to grow, as after
    any ineffective job (docs/design.md#pins).
    """
    settings = request.settings
    reason = pins_over_trigger_reason(pinned_tokens)
    if request.dry_run:
        return replace(base, outcome="dry_run", reason=f"would do nothing: {reason}")
    receipt = clock.unchanged_receipt(
        settings,
        strategy,
        "ineffective",
        reason,
        (base.messages_before, base.tokens_before),
        pins_kept=pinned.pinned_count,
    )
    record_receipt(workspace, receipt)
    if request.heartbeat_started:
        HeartbeatManager(workspace).complete_task(f"nothing done: {reason}")
    events.emit(
        workspace,
        "summarize_ineffective",
        job=receipt.job,
        reason=reason,
        pinned_tokens=pinned_tokens,
        tokens_after=base.tokens_before,
        trigger_tokens=int(trigger * settings.token_limit),
    )
    log.info("summarize_ineffective", workspace=str(workspace.path), reason=reason)
    return replace(
        base,
        outcome="ineffective",
        reason=reason,
        ineffective=True,
        pins_kept=pinned.pinned_count,
        receipt=receipt,
    )


@dataclass(frozen=True, slots=True)
class Produced:
    """The head a strategy produced, with the archive it names."""

    head: Head
    archive_name: str
    """The archive's file name under ``.memoryd/archive/``."""


def _produce_head(
    workspace: Workspace,
    request: JobRequest,
    strategy: Strategy,
    pinned: PinnedPlan,
    progress: Progress,
) -> Produced:
    """The one place where the text that replaces the prefix is produced, before the commit.

    The strategy sees the prefix without its pinned messages: those are kept verbatim.
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
            deadline=request.settings.anthropic.timeout * JOB_DEADLINE_FACTOR,
            progress=progress,
        )
    )
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


def ineffective_text(tokens_after: int, token_limit: int, trigger: float) -> str:
    """What HEARTBEAT.md adds when a job left usage above its trigger (pure)."""
    return (
        f"usage still above the {trigger:.0%} trigger: ~{tokens_after:,} of {token_limit:,} "
        f"tokens ({tokens_after / token_limit:.0%}), trigger {int(trigger * token_limit):,}"
    )


def _commit_and_report(
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
    head_line = json.dumps(head.message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    cut = lines[plan.keep_from - 1].end
    pin_ranges = byte_ranges(pinned.pins)
    archived = byte_ranges(pinned.summarized)
    progress("committing the new conversation")
    committed = rewrite(
        snapshot,
        # Pinned messages go right after the head, byte for byte, in their order.
        [head_line, *pin_ranges, (cut, snapshot.end)],
        lock=workspace.lock,
        archive=ArchivePlan(workspace.archive_dir, name, archived),
        drain_seconds=settings.drain_seconds,
        fault=fault,
        on_salvaged=lambda count: events.emit(workspace, "salvaged_lines", lines=count),
    )
    strategy.save(workspace, head)
    summary_tokens = estimate_message_tokens(head.message)
    kept = [*pinned.pins, *lines[plan.keep_from :]]
    pins_bytes = sum(end - start for start, end in pin_ranges)
    head_end = len(head_line) + pins_bytes + snapshot.end - cut
    carried = list(
        split_lines(_read_range(workspace.conversation, head_end), settings.max_line_bytes)
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
    last_result = head.result_text
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
        after=(messages_after, tokens_after),
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
    )
    # The receipt is part of the job's completion: written before anyone is told.
    record_receipt(workspace, receipt)
    HeartbeatManager(workspace).complete_task(last_result)
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
        llm_calls=head.calls,
        pins_kept=pinned.pinned_count,
    )
    events.emit(workspace, "summarize_completed", **details)
    if ineffective and trigger is not None:
        events.emit(
            workspace,
            "summarize_ineffective",
            job=receipt.job,
            tokens_after=tokens_after,
            trigger_tokens=int(trigger * settings.token_limit),
        )
    now = time.time()
    write_state(
        workspace,
        build_state(
            workspace,
            settings,
            messages=messages_after,
            tokens=tokens_after,
            summarizing=False,
            last_summary_at=events.iso_ms(now),
            now=now,
            calibration=calibration or request.calibration,
        ),
    )
    log.info("summarize_completed", workspace=str(workspace.path), **details)
    return replace(
        base,
        outcome="ineffective" if ineffective else "completed",
        reason=head.result_text,
        messages_after=messages_after,
        tokens_after=tokens_after,
        summarized_count=plan.summarized_count,
        summarized_bytes=cut - pins_bytes,
        summary_tokens=summary_tokens,
        archive=archive,
        backend=head.backend,
        llm_calls=head.calls,
        carried_bytes=committed.carried_bytes,
        calibration=calibration,
        ineffective=ineffective,
        identity=committed.identity,
        head_end=head_end,
        head_line_tokens=(summary_tokens, *(x.tokens for x in kept)),
        head_malformed=sum(1 for x in kept if x.malformed),
        pins_kept=pinned.pinned_count,
        receipt=receipt,
    )


def _index_in_background(workspace: Workspace) -> None:
    """Index the new archive now that the commit is durable and the job is over.

    Outside every lock, in a thread started last, so the job's result is not delayed; a
    failure is logged and retried and never fails the job (docs/design.md#recall).
    Imported here: the daemon's own process never loads the index code.
    """
    from memoryd.recall_index import update_index_in_background

    update_index_in_background(workspace.path)


def _read_range(path: Path, start: int) -> bytes:
    """The complete lines of ``path`` from ``start`` on (what was carried over)."""
    with path.open("rb") as file:
        file.seek(start)
        data = file.read()
    return data[: data.rfind(b"\n") + 1]
