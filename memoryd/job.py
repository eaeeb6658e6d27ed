"""One summarization job: what runs in a worker process, or in the foreground.

Picklable arguments in (:class:`JobRequest`), a small picklable result out
(:class:`JobResult`). The same function serves the daemon and ``memoryd summarize``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import structlog

from memoryd import events
from memoryd.checkpoint import (
    CHECKPOINT_PREFIX,
    Checkpoint,
    CheckpointStats,
    CompactionInfo,
    load_checkpoint,
    render_checkpoint,
    save_checkpoint,
)
from memoryd.commit import (
    ArchivePlan,
    FaultHook,
    Snapshot,
    archive_name,
    read_snapshot,
    recover,
    rewrite,
)
from memoryd.config import Settings
from memoryd.conversation import Line, split_lines
from memoryd.errors import CommitAborted, InputError, MemorydError, SummarizerError
from memoryd.fsutil import check_workspace, flocked
from memoryd.heartbeat import HeartbeatManager
from memoryd.policy import (
    SplitPlan,
    head_summary_count,
    narrative_split,
    over_trigger,
    plan_for,
    rolling_split,
)
from memoryd.state import build_state, write_state
from memoryd.summarizers.base import compact_to_checkpoint, make_summarizer, summarize_messages
from memoryd.tokens import calibrate, estimate_message_tokens
from memoryd.workspace import Workspace

log = structlog.get_logger()

Outcome = Literal["completed", "nothing_to_do", "ineffective", "failed", "busy", "dry_run"]
Progress = Callable[[str], None]
SUMMARY_PREFIX = "[Summary of earlier conversation]\n\n"
JOB_DEADLINE_FACTOR = 4
"""A job's LLM deadline: this many times the configured request timeout."""


@dataclass(frozen=True, slots=True)
class JobRequest:
    """Everything a job needs, as plain picklable values."""

    workspace: Path
    settings: Settings
    force: bool = False
    dry_run: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    """The variables the summarizer honours (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL)."""
    heartbeat_started: bool = False
    """True when the caller already set HEARTBEAT.md active (the daemon does, at dispatch)."""
    calibration: float = 1.0


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


def _tokens(lines: Sequence[Line], calibration: float) -> int:
    return round(sum(line.tokens for line in lines) * calibration)


def plan_job(lines: Sequence[Line], settings: Settings, force: bool) -> SplitPlan | str:
    """The split for the workspace's strategy, or the reason there is nothing to do (pure)."""
    if settings.strategy == "rolling":
        rolling = settings.rolling
        plan = rolling_split(
            lines,
            message_count_threshold=rolling.message_count_threshold,
            messages_to_summarize=rolling.messages_to_summarize,
            recent_messages_to_keep=rolling.recent_messages_to_keep,
            token_threshold=rolling.token_threshold,
            force=force,
        )
        if plan is None:
            return (
                f"rolling trigger not met (more than {rolling.message_count_threshold} messages "
                f"and the oldest {rolling.messages_to_summarize} over "
                f"{rolling.token_threshold} tokens), or no safe split point"
            )
        return plan
    tokens = sum(line.tokens for line in lines)
    trigger = strategy_trigger(settings) or settings.summarize_at
    if not force and not over_trigger(tokens, settings.token_limit, trigger):
        return f"usage {tokens / settings.token_limit:.0%} is not above the {trigger:.0%} trigger"
    if settings.strategy == "checkpoint":
        head = head_summary_count(lines)
        if len(lines) - head < 1:
            return "no messages to compact since the last checkpoint"
        return plan_for(lines, len(lines))
    # The kept part is capped so that one job lands well below the trigger (SPEC §4: the
    # 60/40 split aims at about half of it) even when the conversation grew far past it.
    kept_cap = int(settings.keep_recent_ratio * settings.summarize_at * settings.token_limit)
    plan = narrative_split(lines, settings.keep_recent_ratio, max_kept_tokens=kept_cap)
    return (
        plan
        if plan is not None
        else "no safe split point (the kept part must start at a user turn)"
    )


def strategy_trigger(settings: Settings) -> float | None:
    """The usage share that triggers the strategy (None for rolling, which counts messages)."""
    if settings.strategy == "checkpoint":
        return settings.checkpoint.compact_at
    if settings.strategy == "rolling":
        return None
    return settings.summarize_at


def summary_message(text: str, summarized_count: int, archive: str, now_ms: int) -> dict[str, Any]:
    """The summary message that replaces the summarized prefix (SPEC §2)."""
    return {
        "id": str(uuid.uuid4()),
        "role": "assistant",
        "content": SUMMARY_PREFIX + text,
        "timestamp": now_ms,
        "isSummary": True,
        "summarizedCount": summarized_count,
        "archive": archive,
    }


def previous_summary_text(line: Line) -> str | None:
    """The text of a summary message at the head, without its fixed prefix."""
    if not line.is_summary or line.message is None:
        return None
    content = line.message.get("content")
    if not isinstance(content, str):
        return None
    return content.removeprefix(SUMMARY_PREFIX)


def transcript_messages(lines: Sequence[Line]) -> list[Mapping[str, Any]]:
    """The messages to summarize; unreadable lines are named, not dropped silently."""
    messages: list[Mapping[str, Any]] = []
    for line in lines:
        if line.message is not None:
            messages.append(line.message)
        else:
            messages.append(
                {
                    "role": "user",
                    "content": f"[line {line.index + 1}: {line.length} bytes, {line.problem}; "
                    "kept byte for byte in the archive]",
                }
            )
    return messages


@contextlib.contextmanager
def checkins(heartbeat: HeartbeatManager, interval: float) -> Iterator[None]:
    """Advance HEARTBEAT.md's ``last_checkin`` every ``interval`` seconds while inside."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            with contextlib.suppress(OSError):
                heartbeat.checkin()

    thread = threading.Thread(target=beat, name="memoryd-checkin", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


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
    with flocked(workspace.job_lock, blocking=False) as acquired:
        if not acquired:
            return JobResult(workspace.path, "busy", "another job is running on this workspace")
        result = _run_locked(workspace, request, progress or (lambda _stage: None), fault)
    return replace(result, duration_s=round(time.monotonic() - started, 3))


def _run_locked(
    workspace: Workspace, request: JobRequest, progress: Progress, fault: FaultHook | None
) -> JobResult:
    settings = request.settings
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
        strategy=settings.strategy,
        messages_before=len(lines),
        tokens_before=tokens_before,
        messages_after=len(lines),
        tokens_after=tokens_before,
    )
    plan = plan_job(lines, settings, request.force)
    heartbeat = HeartbeatManager(workspace)
    if isinstance(plan, str):
        if request.heartbeat_started:
            heartbeat.complete_task(f"nothing to do: {plan}")
        return replace(base, reason=plan)
    task = f"Summarizing {plan.summarized_count} messages (~{plan.summarized_tokens:,} tokens)"
    if request.dry_run:
        return replace(
            base,
            outcome="dry_run",
            reason=f"would replace {plan.summarized_count} messages (~{plan.summarized_tokens:,} "
            f"tokens) with one summary and keep {len(lines) - plan.keep_from} verbatim",
            summarized_count=plan.summarized_count,
        )
    if not request.heartbeat_started:
        heartbeat.start_task(task)
    events.emit(
        workspace,
        "summarize_started",
        strategy=settings.strategy,
        messages=len(lines),
        tokens=tokens_before,
        summarizing=plan.summarized_count,
    )
    try:
        with checkins(heartbeat, settings.checkin_interval):
            return _commit_and_report(
                workspace, request, lines, plan, snapshot, base, progress, fault
            )
    except (SummarizerError, CommitAborted) as exc:
        reason = str(exc)
        heartbeat.fail_task(reason)
        events.emit(workspace, "summarize_failed", reason=reason, strategy=settings.strategy)
        log.warning("summarize_failed", workspace=str(workspace.path), reason=reason)
        return replace(base, outcome="failed", reason=reason)
    except MemorydError as exc:
        # A usage or configuration error (no API key for the anthropic backend, say) still
        # ends the task this job started: HEARTBEAT.md must not stay "active".
        heartbeat.fail_task(str(exc))
        events.emit(workspace, "summarize_failed", reason=str(exc), strategy=settings.strategy)
        raise
    except OSError as exc:
        reason = f"file error: {exc.strerror or exc}"
        heartbeat.fail_task(reason)
        events.emit(workspace, "summarize_failed", reason=reason, strategy=settings.strategy)
        return replace(base, outcome="failed", reason=reason)


@dataclass(frozen=True, slots=True)
class Produced:
    """The new head message a strategy produced, and what producing it cost."""

    message: dict[str, Any]
    backend: str
    calls: int
    input_tokens: int | None = None
    estimated_input_tokens: int = 0
    checkpoint: Checkpoint | None = None


def _report_malformed(workspace: Workspace, lines: Sequence[Line]) -> None:
    for line in lines:
        if line.problem is not None and line.problem != "opaque":
            events.emit(
                workspace,
                "malformed_line",
                line=line.index + 1,
                bytes=line.length,
                problem=line.problem,
                moved_to="archive",
            )


def _previous_count(line: Line) -> int:
    count = line.message.get("summarizedCount") if line.message else None
    return count if isinstance(count, int) else 0


def _embeds_checkpoint(line: Line) -> bool:
    """True for a head message that carries a structured checkpoint (the checkpoint strategy's)."""
    return line.message is not None and isinstance(line.message.get("checkpoint"), dict)


def _summary_head(
    request: JobRequest, prefix: Sequence[Line], plan: SplitPlan, archive: str, progress: Progress
) -> Produced:
    """The narrative and rolling strategies: one summary message for the prefix."""
    settings = request.settings
    previous = previous_summary_text(prefix[0]) if plan.folds_previous_summary else None
    to_summarize = prefix[1:] if previous is not None else prefix
    style = "rolling" if settings.strategy == "rolling" else "narrative"
    summarizer = make_summarizer(
        settings, request.env, settings.anthropic.timeout * JOB_DEADLINE_FACTOR
    )
    progress(f"summarizing {plan.summarized_count} messages with the {summarizer.name} backend")
    with contextlib.closing(summarizer):
        summary = summarize_messages(
            summarizer,
            transcript_messages(to_summarize),
            previous,
            settings.summarizer.max_summary_tokens,
            settings.summarizer.max_input_tokens,
            style,
        )
    if not summary.text.strip():
        raise SummarizerError("the summarizer returned an empty summary")
    count = plan.summarized_count + (_previous_count(prefix[0]) if previous is not None else 0)
    return Produced(
        summary_message(summary.text, count, archive, int(time.time() * 1000)),
        summary.backend,
        summary.calls,
        summary.input_tokens,
        summary.estimated_input_tokens,
    )


def _checkpoint_head(
    workspace: Workspace,
    request: JobRequest,
    prefix: Sequence[Line],
    plan: SplitPlan,
    archive: str,
    progress: Progress,
) -> Produced:
    """The checkpoint strategy: fold the messages into checkpoint.json's lists."""
    settings = request.settings
    previous = load_checkpoint(workspace, prefix[0] if prefix else None)
    to_compact = prefix[1:] if plan.folds_previous_summary else prefix
    messages = transcript_messages(to_compact)
    folded_count = 0
    if plan.folds_previous_summary and not _embeds_checkpoint(prefix[0]):
        # A summary left by another strategy carries no checkpoint: fold its text in with
        # the messages instead of dropping it (and count the messages it stood for).
        messages = transcript_messages(prefix[:1]) + messages
        folded_count = _previous_count(prefix[0])
    summarizer = make_summarizer(
        settings, request.env, settings.anthropic.timeout * JOB_DEADLINE_FACTOR
    )
    progress(f"checkpointing {len(messages)} messages with the {summarizer.name} backend")
    with contextlib.closing(summarizer):
        lists, calls = compact_to_checkpoint(
            summarizer, previous, messages, settings.summarizer.max_input_tokens
        )
    now = time.time()
    timestamps = [
        t
        for t in (line.message.get("timestamp") if line.message else None for line in to_compact)
        if isinstance(t, int)
    ]
    stats = previous.stats if previous is not None else CheckpointStats()
    checkpoint = Checkpoint(
        version=(previous.version if previous is not None else 0) + 1,
        updated_at=events.iso_ms(now),
        **lists.model_dump(),
        compaction_info=CompactionInfo(
            messages_compacted=len(to_compact),
            oldest_message_timestamp=min(timestamps, default=None),
            newest_message_timestamp=max(timestamps, default=None),
            compacted_at=events.iso_ms(now),
            archive=archive,
        ),
        stats=CheckpointStats(
            total_compactions=stats.total_compactions + 1,
            total_messages=stats.total_messages + len(to_compact) + folded_count,
        ),
    )
    message = summary_message(
        render_checkpoint(checkpoint), checkpoint.stats.total_messages, archive, int(now * 1000)
    )
    message["content"] = CHECKPOINT_PREFIX + render_checkpoint(checkpoint)
    message["isCheckpoint"] = True
    message["checkpoint"] = checkpoint.model_dump(mode="json")
    return Produced(message, summarizer.name, calls, checkpoint=checkpoint)


def _commit_and_report(
    workspace: Workspace,
    request: JobRequest,
    lines: Sequence[Line],
    plan: SplitPlan,
    snapshot: Snapshot,
    base: JobResult,
    progress: Progress,
    fault: FaultHook | None,
) -> JobResult:
    settings = request.settings
    prefix = lines[: plan.keep_from]
    _report_malformed(workspace, prefix[1:] if plan.folds_previous_summary else prefix)
    name = archive_name("conversation")
    archive = f".memoryd/archive/{name}"
    if settings.strategy == "checkpoint":
        produced = _checkpoint_head(workspace, request, prefix, plan, archive, progress)
    else:
        produced = _summary_head(request, prefix, plan, archive, progress)
    head_line = (
        json.dumps(produced.message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    )
    cut = prefix[-1].end
    progress("committing the new conversation")
    committed = rewrite(
        snapshot,
        [head_line, (cut, snapshot.end)],
        lock=workspace.lock,
        archive=ArchivePlan(workspace.archive_dir, name, [(0, cut)]),
        drain_seconds=settings.drain_seconds,
        fault=fault,
        on_salvaged=lambda count: events.emit(workspace, "salvaged_lines", lines=count),
    )
    if produced.checkpoint is not None:
        save_checkpoint(workspace, produced.checkpoint)
    summary_tokens = estimate_message_tokens(produced.message)
    kept = lines[plan.keep_from :]
    head_end = len(head_line) + snapshot.end - cut
    carried = list(
        split_lines(_read_range(workspace.conversation, head_end), settings.max_line_bytes)
    )
    messages_after = 1 + len(kept) + len(carried)
    tokens_after = round(
        (summary_tokens + sum(x.tokens for x in kept) + sum(x.tokens for x in carried))
        * request.calibration
    )
    head_tokens = round((summary_tokens + sum(x.tokens for x in kept)) * request.calibration)
    trigger = strategy_trigger(settings)
    # Only a usage-triggered strategy can be ineffective: its trigger still holding after
    # the job would start the same job again at the next append. Judged on what the job
    # wrote (summary + kept), not on lines appended meanwhile: those are new growth that
    # the next job can summarize, and calling it ineffective would stop all jobs until the
    # conversation grows again, leaving it over the trigger.
    ineffective = trigger is not None and over_trigger(head_tokens, settings.token_limit, trigger)
    calibration = None
    if produced.input_tokens:
        calibration = calibrate(
            request.calibration, produced.estimated_input_tokens, produced.input_tokens
        )
    if produced.checkpoint is not None:
        result_text = (
            f"compacted {plan.summarized_count} messages into checkpoint "
            f"v{produced.checkpoint.version}"
        )
    else:
        result_text = (
            f"replaced {plan.summarized_count} messages with a {summary_tokens:,}-token summary"
        )
    HeartbeatManager(workspace).complete_task(result_text)
    details: dict[str, Any] = dict(
        strategy=settings.strategy,
        summarized=plan.summarized_count,
        messages_before=base.messages_before,
        messages_after=messages_after,
        tokens_before=base.tokens_before,
        tokens_after=tokens_after,
        summary_tokens=summary_tokens,
        archive=name,
        backend=produced.backend,
        llm_calls=produced.calls,
    )
    events.emit(workspace, "summarize_completed", **details)
    if ineffective and trigger is not None:
        events.emit(
            workspace,
            "summarize_ineffective",
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
        reason=result_text,
        messages_after=messages_after,
        tokens_after=tokens_after,
        summarized_count=plan.summarized_count,
        summary_tokens=summary_tokens,
        archive=archive,
        backend=produced.backend,
        llm_calls=produced.calls,
        carried_bytes=committed.carried_bytes,
        calibration=calibration,
        ineffective=ineffective,
        identity=committed.identity,
        head_end=head_end,
        head_line_tokens=(summary_tokens, *(x.tokens for x in kept)),
        head_malformed=sum(1 for x in kept if x.problem not in (None, "opaque")),
    )


def _read_range(path: Path, start: int) -> bytes:
    """The complete lines of ``path`` from ``start`` on (what was carried over)."""
    with path.open("rb") as file:
        file.seek(start)
        data = file.read()
    return data[: data.rfind(b"\n") + 1]
