"""The dispatcher: counting a workspace, the backlog, and the jobs in flight.

The backlog waits for a free worker and (on an LLM backend) a free request, most
urgent first; each job in flight is one :class:`~memoryd.daemon.tracked.Job` record;
a job's outcome goes through the pure rules of :mod:`memoryd.daemon.tracked`
(docs/design.md#daemon).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from memoryd.compaction.job.report import report_failure, report_lost_job
from memoryd.compaction.job.request import JobRequest, JobResult, summarizer_env
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings
from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.pool import WorkerPool
from memoryd.daemon.publisher import Publisher, describe
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.telemetry import Telemetry
from memoryd.daemon.tracked import Job, Tracked, job_due_now, job_lost, settle
from memoryd.daemon.worker import compact_stores_job
from memoryd.daemon.workspaces import Workspaces
from memoryd.errors import MemorydError
from memoryd.levels import detect_threshold, usage_ratio
from memoryd.llm.limits import LearnedLimit, merged
from memoryd.published.heartbeat import Heartbeat, HeartbeatManager
from memoryd.stores import disk as stores
from memoryd.stores.compaction import CompactionReport
from memoryd.summary.backends import choose_backend
from memoryd.workspace import Workspace

log = structlog.get_logger()

STORES = "stores"
"""The backlog's reason for a memory-store compaction."""
LLM_BACKENDS = ("anthropic", "openai")
"""The backends whose jobs count against their section's ``max_concurrent_requests``."""


@dataclass(frozen=True, slots=True)
class JobDone:
    """A job's future is done (a note from the thread that completed it)."""

    job: Job


class Dispatcher:
    """Counting what was appended, the backlog, dispatching jobs and their outcomes.

    It reads and wakes workspaces through ``scheduler``, hands a tidy that must be tried
    again to ``workspaces``, runs jobs on ``pool`` and puts a :class:`JobDone` through
    ``note`` when one ends (the loop hands it back to :meth:`on_job_done`). ``settings``
    is replaced and ``stopping`` set by the supervisor.
    """

    def __init__(
        self,
        settings: Settings,
        env: Mapping[str, str],
        scheduler: Scheduler,
        workspaces: Workspaces,
        publisher: Publisher,
        pool: WorkerPool,
        telemetry: Telemetry,
        hooks: list[DaemonHooks],
        note: Callable[[object], None],
    ) -> None:
        self.settings = settings
        self.env = env
        self.scheduler = scheduler
        self.workspaces = workspaces
        self.publisher = publisher
        self.pool = pool
        self.telemetry = telemetry
        self.hooks = hooks
        self.note = note
        self.jobs: dict[Path, Job] = {}
        """The jobs in flight, by workspace."""
        self.backlog: dict[Path, tuple[str, str, float | None]] = {}
        """Workspaces whose job is due (why, kind, when the change was noticed), waiting
        for a free worker or request (see drain)."""
        self.context_limits: dict[str, LearnedLimit] = {}
        """Servers' contexts learned from overflows, kept for the daemon's lifetime."""
        self.stopping = False
        """The daemon is stopping: no job is queued or dispatched any more."""

    def process(self, tracked: Tracked, now: float, publish: bool = True) -> None:
        """Count what was appended, publish the numbers, dispatch a job when due.

        Whatever goes wrong with one workspace (an unreadable file, a refused symlink, a
        full disk) is logged for that workspace; the daemon carries on with the others.
        """
        try:
            self._process(tracked, now, publish)
        except (OSError, MemorydError) as exc:
            self.publisher.failed(tracked, "workspace", exc, now)

    def _process(self, tracked: Tracked, now: float, publish: bool) -> None:
        tracked.last_processed = now
        if tracked.running:
            return
        try:
            update = tracked.reader.update()
        except MemorydError as exc:
            log.warning(
                "conversation_unreadable", workspace=str(tracked.workspace.path), error=str(exc)
            )
            return
        path = tracked.workspace.path
        if update.missing:
            self.scheduler.remove(path)
            log.info("workspace_gone", workspace=str(path))
            return
        if update.reset:
            log.info("conversation_recounted", workspace=str(path))
        if update.reset or update.new_lines:
            tracked.changed_at = now
        malformed = 0
        for line in update.new_lines:
            if line.malformed:
                malformed += 1
                self.publisher.emit(
                    tracked,
                    "malformed_line",
                    now,
                    line=line.index + 1,
                    bytes=line.length,
                    problem=line.problem,
                )
        for hook in self.hooks:
            hook.counted(tracked, len(update.new_lines), malformed, now)
        if path in self.workspaces.untidy and now >= tracked.write_retry_at:
            self.workspaces.tidy(path, now)
        elif publish:
            self.publisher.publish(tracked, now, time.time())
        noticed_at, tracked.noticed_at = tracked.noticed_at, None
        if not self.stopping:
            due = job_due_now(tracked, now)
            if due is not None:
                self.backlog[path] = (*due, noticed_at)
            elif tracked.stores_due:
                self.backlog[path] = (STORES, STORES, None)
            else:
                self.scheduler.wake_when_idle(tracked, now)

    # ----- jobs -------------------------------------------------------------------------

    def drain(self, now: float) -> None:
        """Dispatch waiting jobs, the most urgent first, while a worker and (for an LLM
        backend) a request are free (docs/design.md#pool)."""
        while self.backlog and not self.stopping:
            if len(self.jobs) >= self.settings.workers:
                return
            candidates = [
                (tracked, kind)
                for path, (_why, kind, _at) in self.backlog.items()
                if (tracked := self.scheduler.get(path)) is not None
                and (kind == STORES or self._request_free(tracked))
            ]
            if not candidates:
                return
            tracked, kind = min(candidates, key=lambda c: urgency(c[0], c[1]))
            why, kind, noticed_at = self.backlog.pop(tracked.workspace.path)
            if tracked.running:
                continue
            if kind == STORES:
                self._dispatch_stores(tracked, now)
                continue
            due = job_due_now(tracked, now)
            if due is not None:
                why, kind = due
                latency = None if kind != "trigger" or noticed_at is None else now - noticed_at
                tracked.dispatch_latency = latency
                self._dispatch(tracked, why, kind, now)

    def _llm_backend(self, tracked: Tracked) -> str | None:
        """The LLM backend a job of ``tracked`` would use; None for the extractive one."""
        name = choose_backend(tracked.settings, self.env)[0]
        return name if name in LLM_BACKENDS else None

    def _request_free(self, tracked: Tracked) -> bool:
        """Whether a job of ``tracked`` may start: its backend has a request free
        (``max_concurrent_requests`` of its section, daemon-wide)."""
        backend = self._llm_backend(tracked)
        if backend is None:
            return True
        cap: int = getattr(self.settings, backend).max_concurrent_requests
        return sum(1 for job in self.jobs.values() if job.backend == backend) < cap

    def _dispatch(self, tracked: Tracked, why: str, kind: str, now: float) -> None:
        """Submit a summarization; ``kind`` is why in one word: "trigger" or "idle"."""
        path = tracked.workspace.path
        tally = tracked.reader.tally
        task = f"Summarizing {tally.messages} messages (~{tracked.tokens:,} tokens)"
        started = self.publisher.heartbeat(tracked, now, lambda manager: manager.start_task(task))
        settings, downgrade = self.telemetry.backend_for(tracked.settings, time.time())
        if downgrade is not None:
            self.publisher.emit(
                tracked,
                "llm_budget_exhausted",
                now,
                reason=downgrade.reason,
                backend="extractive",
                until=downgrade.until,
            )
        request = JobRequest(
            workspace=path,
            settings=settings,
            env=summarizer_env(self.env),
            heartbeat_started=True,
            calibration=tracked.calibration,
            force=True,
            reason=kind,
            result_note=downgrade.note if downgrade is not None else None,
            context_limits=merged(self.context_limits, {}, time.time()),
        )
        tracked.job_reason = kind
        if kind == "idle":
            tracked.idle_compacted_at = now
        job = self._submit(tracked, "summarize", now, started, run_job, request)
        backend = self._llm_backend(tracked)
        if settings.summarizer.backend != "extractive" and backend is not None:
            job.backend = backend
        # The hooks first: what they take note of at dispatch (the metrics, where the
        # workspace's events.jsonl ends) is then noted before anyone reads the log line.
        for hook in self.hooks:
            hook.dispatched(tracked, "summarize", why, now)
        log.info(
            "summarize_dispatched",
            workspace=str(path),
            reason=kind,
            why=why,
            messages=tally.messages,
            tokens=tracked.tokens,
            llm_budget_exhausted=downgrade is not None,
        )

    def _dispatch_stores(self, tracked: Tracked, now: float) -> None:
        tracked.stores_due = False
        settings = tracked.settings
        try:
            names = stores.stores_needing_compaction(
                tracked.workspace.path, settings.memory.threshold, settings.memory.keep_bookmarks
            )
        except (OSError, MemorydError) as exc:
            log.warning("stores_unreadable", workspace=str(tracked.workspace.path), error=str(exc))
            return
        if not names:
            return
        task = f"Compacting memory stores: {', '.join(names)}"
        started = self.publisher.heartbeat(tracked, now, lambda manager: manager.start_task(task))
        path = tracked.workspace.path
        self._submit(tracked, "stores", now, started, compact_stores_job, path, settings)
        for hook in self.hooks:
            hook.dispatched(tracked, "stores", "store past its threshold", now)
        log.info(
            "memory_compaction_dispatched", workspace=str(tracked.workspace.path), stores=names
        )

    def _submit(
        self,
        tracked: Tracked,
        kind: str,
        now: float,
        started: Heartbeat | None,
        fn: Any,
        *args: Any,
    ) -> Job:
        path = tracked.workspace.path
        job_id, future = self.pool.submit(fn, *args)
        checkin = started.last_checkin if started is not None else None
        due = now + tracked.settings.checkin_interval
        job = Job(path, job_id, kind, future, checkin_at=due, last_checkin=checkin)
        tracked.job = self.jobs[path] = job
        self.publisher.publish(tracked, now, time.time())
        future.add_done_callback(lambda _f: self.note(JobDone(job)))
        return job

    def checkin_deadlines(self) -> list[float]:
        """When the daemon checks in next for each job whose worker has not yet."""
        return [job.checkin_at for job in self.jobs.values() if job.checkin_at is not None]

    def check_in(self, now: float) -> None:
        """Check in for each job marked active until its worker does: the first job of a
        burst may wait seconds for a forkserver and a worker, and an orchestrator that
        watches ``last_checkin`` must not take it for a stalled one. Once a worker has
        taken the job, HEARTBEAT.md tells whether it has checked in yet: its
        ``last_checkin`` is no longer the daemon's (docs/design.md#checkins)."""
        for job in list(self.jobs.values()):
            if job.checkin_at is None or job.checkin_at > now:
                continue
            tracked = self.scheduler.get(job.workspace)
            if (
                tracked is None
                or tracked.job is not job
                or (self.pool.taken(job.id) and _checked_in(tracked, job.last_checkin))
            ):
                job.checkin_at = None
                continue
            written = self.publisher.heartbeat(tracked, now, lambda manager: manager.checkin())
            if written is not None:
                job.last_checkin = written.last_checkin
            job.checkin_at = now + tracked.settings.checkin_interval

    def _learn_contexts(self, learned: Mapping[str, LearnedLimit]) -> None:
        """Keep the servers' contexts a job learned, for every later job, until each expires."""
        known = merged(self.context_limits, learned, time.time())
        for key, limit in known.items():
            if self.context_limits.get(key) != limit:
                log.info("context_limit_kept", server=key, **limit.fields())
        self.context_limits = known

    def on_job_done(self, note: JobDone, now: float) -> None:
        """Apply the outcome of a job that ended: what the daemon remembers, a retry, a
        rebuilt pool after a worker died; then look at its workspace again."""
        job = note.job
        path, job_id, future, kind = job.workspace, job.id, job.future, job.kind
        if self.jobs.get(path) is not job:
            return
        del self.jobs[path]
        tracked = self.scheduler.get(path)
        try:
            result = future.result()
        except BrokenProcessPool:
            its_fault = self.pool.died_with(job_id)
            reason = "worker process died" if its_fault else "another job's worker died"
            self._job_lost(path, tracked, now, reason, its_fault)
            if self.pool.broken:
                self.pool.rebuild("broken")
                for hook in self.hooks:
                    hook.pool_rebuilt()
            return
        except MemorydError as exc:
            self._job_lost(path, tracked, now, str(exc), True)
            return
        except OSError as exc:
            self._job_lost(path, tracked, now, f"cannot write: {describe(exc)}", True)
            return
        except Exception as exc:  # one job's bug must not stop the daemon
            self._job_lost(path, tracked, now, f"unexpected {type(exc).__name__}", True)
            log.error("job_crashed", workspace=str(path), exc_info=exc)
            return
        finally:
            self.pool.forget(job_id)
        if tracked is None:
            return
        if kind == "summarize" and isinstance(result, JobResult):
            self._learn_contexts(result.context_limits)
            settle(tracked, result, now, time.time())
            if tracked.failures:
                self.scheduler.wake_at(tracked, tracked.retry_at)
            for hook in self.hooks:
                hook.finished(tracked, result, now)
            # Logged once the job's effects (back-off, spend ledger, metrics) are settled,
            # so whoever reads this line sees them.
            log.info(
                "job_finished",
                workspace=str(path),
                outcome=result.outcome,
                messages_before=result.messages_before,
                messages_after=result.messages_after,
                tokens_before=result.tokens_before,
                tokens_after=result.tokens_after,
                duration_s=result.duration_s,
            )
        else:
            tracked.job = None
            counts = result.counts() if isinstance(result, CompactionReport) else {}
            log.info("memory_compacted", workspace=str(path), **counts)
        tracked.state_numbers = None
        self.process(tracked, now)

    def _job_lost(
        self, path: Path, tracked: Tracked | None, now: float, reason: str, its_fault: bool
    ) -> None:
        for hook in self.hooks:
            hook.lost(tracked, reason, its_fault, now)
        if tracked is None:
            with contextlib.suppress(OSError, MemorydError):
                report_failure(Workspace(path), reason)
            return
        if not its_fault:
            # Its worker lived (or had not taken it): nothing was wrong with the job; it
            # runs again at once and does not count toward back-off.
            self.publisher.emit(tracked, "summarize_failed", now, reason=reason, retry="now")
            job_lost(tracked, now, its_fault=False)
            self.scheduler.wake_at(tracked, now)
            log.info("job_retried", workspace=str(path), reason=reason)
            return
        try:
            report_lost_job(
                tracked.workspace,
                reason,
                tracked.settings,
                tracked.reader.tally.messages,
                tracked.tokens,
                tracked.job_reason,
            )
        except (OSError, MemorydError) as exc:
            self.publisher.failed(tracked, "HEARTBEAT.md", exc, now)
        job_lost(tracked, now, its_fault=True)
        self.scheduler.wake_at(tracked, tracked.retry_at)
        self.publisher.publish(tracked, now, time.time())
        # Like job_finished, logged once its effects are written (the receipt, HEARTBEAT.md,
        # the event).
        log.warning("job_failed", workspace=str(path), reason=reason)


def _checked_in(tracked: Tracked, mine: str | None) -> bool:
    """Whether HEARTBEAT.md shows a check-in that is not the daemon's last one (``mine``),
    or no active job any more; a file that cannot be read says nothing."""
    try:
        current = HeartbeatManager(tracked.workspace).get_status()
    except (OSError, MemorydError):
        return False
    return current.status != "active" or current.last_checkin != mine


def urgency(tracked: Tracked, kind: str) -> tuple[int, float]:
    """Sort key of a waiting job: critical before warning before the rest, then the
    highest usage ratio first; memory-store compactions last."""
    if kind == STORES:
        return (3, 0.0)
    ratio = usage_ratio(tracked.tokens, tracked.settings.token_limit)
    rank = {"critical": 0, "warning": 1}.get(detect_threshold(ratio, tracked.settings), 2)
    return (rank, -ratio)
