"""``memoryd run``: the supervisor owns the queue, the signals and the life cycle.

Signal handlers and watchdog handlers only put a note on one queue; :meth:`Supervisor.loop`
takes the notes off it and acts, so a test can step it. The parts it drives are small and
each testable alone: the :class:`~memoryd.daemon.scheduler.Scheduler` (what is due), the
:class:`~memoryd.daemon.pool.WorkerPool` (where jobs run), the
:class:`~memoryd.daemon.watchers.RootWatchers` (what changed) and the
:class:`~memoryd.daemon.publisher.Publisher` (what is written). See docs/design.md#daemon.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from memoryd import stores, systemd
from memoryd.commit import recover
from memoryd.config import LoadedSettings, load_settings, settings_for_workspace
from memoryd.conversation import ConversationReader
from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.pool import WorkerPool
from memoryd.daemon.publisher import Publisher, describe
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.telemetry import Telemetry, daemon_view
from memoryd.daemon.watchers import RootWatchers
from memoryd.discovery import find_workspaces
from memoryd.errors import MemorydError
from memoryd.fsutil import flocked
from memoryd.heartbeat import HeartbeatManager
from memoryd.job import (
    JobRequest,
    JobResult,
    report_failure,
    report_lost_job,
    run_job,
    summarizer_env,
)
from memoryd.logs import configure_logging
from memoryd.policy import detect_threshold, usage_ratio
from memoryd.state import numbers_key, read_state, saved_numbers
from memoryd.summarizers.base import choose_backend
from memoryd.tracked import Tracked, job_due_now, job_lost, settle
from memoryd.watch import FsChange, classify
from memoryd.worker import compact_stores_job
from memoryd.workspace import Workspace

if TYPE_CHECKING:
    from memoryd.metrics import DaemonView

log = structlog.get_logger()

MAX_WAIT = 1.0
"""Longest the loop sleeps: bounds how late a timer (retry, rescan, shutdown) can fire."""
STORES = "stores"
"""The backlog's reason for a memory-store compaction."""
TIDY_SLICE = 0.05
"""Longest a loop step spends tidying workspaces after READY (keeps READY fast and the
loop responsive to changes meanwhile)."""


@dataclass(frozen=True, slots=True)
class SignalNote:
    signum: int


@dataclass(frozen=True, slots=True)
class JobDone:
    path: Path
    job_id: int
    future: Future[Any]


class Supervisor:
    """The daemon. ``start()``, then ``loop()`` until ``done``, then ``close()``."""

    def __init__(
        self,
        loaded: LoadedSettings,
        config_file: Path | None = None,
        cli_roots: list[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.loaded = loaded
        self.settings = loaded.settings
        self.config_file = config_file
        self.cli_roots = cli_roots
        self.env = dict(os.environ if env is None else env)
        self.notes: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.scheduler = Scheduler(self.settings.coalesce_ms / 1000, self.settings.rescan_interval)
        self.watchers = RootWatchers(self.notes)
        self.publisher = Publisher(self.env, self.scheduler.wake_at)
        self.pool = WorkerPool(
            self.settings.workers,
            self.settings.log_format,
            self.settings.log_level,
            self.settings.worker_idle_timeout,
        )
        self.telemetry = Telemetry(self.settings, self.env, self.settings.roots)
        self.hooks: list[DaemonHooks] = [self.telemetry]
        self.jobs: dict[Path, tuple[int, Future[Any]]] = {}
        self.backlog: dict[Path, tuple[str, str, float | None]] = {}
        """Workspaces whose job is due (why, kind, when the change was noticed), waiting
        for a free worker or request (see _drain)."""
        self.api_jobs: set[Path] = set()
        """Workspaces whose summarization job is in flight on the anthropic backend."""
        self.pending_init: deque[Path] = deque()
        self.untidy: set[Path] = set()
        self.stopping_since: float | None = None
        self.done = False
        self.watchdog_every = systemd.watchdog_interval(self.env)
        self.next_watchdog = 0.0

    # ----- life cycle -------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM, SIGINT and SIGHUP become notes on the queue; nothing else happens there."""
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._note_signal)

    def _note_signal(self, signum: int, _frame: object) -> None:
        self.notes.put(SignalNote(signum))

    def start(self, now: float | None = None) -> None:
        """Start the pool and the observers, scan the roots, then tell systemd READY."""
        moment = time.monotonic() if now is None else now
        backend, why = choose_backend(self.settings, self.env)
        log.info(
            "daemon_starting",
            roots=[str(r) for r in self.settings.roots],
            workers=self.settings.workers,
            strategy=self.settings.strategy,
            summarizer=backend,
            summarizer_reason=why,
            config_file=str(self.loaded.config_path) if self.loaded.config_path else None,
        )
        self.telemetry.start(self.metrics_view, moment)
        self.pool.start()
        for root in self.settings.roots:
            self.watchers.watch(root)
        self.rescan(moment)
        for tracked in self.scheduler.due(math.inf):
            # Counting is what READY waits for; state.json and HEARTBEAT.md of an idle
            # workspace are written after READY, in batches (see _tidy).
            self.process(tracked, moment, publish=False)
        self.scheduler.rescanned(moment)
        systemd.notify("READY=1", self.env)
        log.info(
            "daemon_ready",
            workspaces=len(self.scheduler),
            polling=sorted(map(str, self.watchers.polling)),
        )
        for hook in self.hooks:
            hook.started(moment)
        self._send_status()

    def close(self) -> None:
        """Stop observers and the pool; jobs still running are abandoned, files untouched."""
        self.watchers.close()
        self.pool.close()
        for hook in self.hooks:
            hook.closed()

    # ----- the loop ---------------------------------------------------------------------

    def loop(self, now: float | None = None, wait: float | None = None) -> None:
        """One step: take the notes, act on due workspaces and timers."""
        moment = time.monotonic() if now is None else now
        timeout = self._time_to_next(moment) if wait is None else wait
        notes: list[object] = []
        with contextlib.suppress(queue.Empty):
            notes.append(
                self.notes.get(timeout=timeout) if timeout > 0 else self.notes.get_nowait()
            )
        while True:
            try:
                notes.append(self.notes.get_nowait())
            except queue.Empty:
                break
        moment = time.monotonic() if now is None else now
        for note in notes:
            self._handle(note, moment)
        self._tick(moment)

    def _time_to_next(self, now: float) -> float:
        deadlines = [self.scheduler.next_deadline(), now + MAX_WAIT]
        if self.watchdog_every is not None:
            deadlines.append(self.next_watchdog)
        if self.pending_init:
            deadlines.append(now)
        return max(0.0, min(deadlines) - now)

    def _handle(self, note: object, now: float) -> None:
        if isinstance(note, FsChange):
            self._on_change(Path(note.path), note.is_folder, now)
        elif isinstance(note, JobDone):
            self._on_job_done(note, now)
        elif isinstance(note, SignalNote):
            self._on_signal(note.signum, now)

    def _tick(self, now: float) -> None:
        for tracked in self.scheduler.due(now):
            self.process(tracked, now)
        self._drain(now)
        self.pool.shrink(now)
        slice_end = time.monotonic() + TIDY_SLICE
        while self.pending_init and time.monotonic() < slice_end:
            self._tidy(self.pending_init.popleft(), now)
        if self.stopping_since is None and self.scheduler.rescan_due(now):
            self.rescan(now)
            self.scheduler.rescanned(now)
        if self.watchdog_every is not None and now >= self.next_watchdog:
            if self.watchers.alive():
                systemd.notify("WATCHDOG=1", self.env)
            else:
                log.error("observer_died", hint="not pinging the systemd watchdog")
            self.next_watchdog = now + self.watchdog_every
        if self.stopping_since is not None:
            timed_out = now - self.stopping_since >= self.settings.shutdown_timeout
            if not self.jobs or timed_out:
                if self.jobs:
                    log.warning(
                        "jobs_abandoned",
                        workspaces=[str(p) for p in self.jobs],
                        shutdown_timeout=self.settings.shutdown_timeout,
                    )
                self.done = True
        for hook in self.hooks:
            hook.tick(now)
        self._send_status()

    # ----- workspaces -------------------------------------------------------------------

    def _root_of(self, path: Path) -> Path | None:
        for root in self.settings.roots:
            if path == root or root in path.parents:
                return root
        return None

    def _on_change(self, path: Path, is_folder: bool, now: float) -> None:
        root = self._root_of(path)
        if root is None:
            return
        kind, target = classify(path, is_folder, root, self.settings.max_depth)
        if kind == "ignore":
            return
        if kind == "folder":
            self._discover(target, root, now)
            return
        tracked = self.scheduler.get(target) or self._track(target, root)
        if tracked is None:
            return
        if kind == "store":
            tracked.stores_due = True
        self.scheduler.schedule(tracked, now)

    def _discover(self, folder: Path, root: Path, now: float) -> None:
        try:
            depth = len(folder.relative_to(root).parts)
        except ValueError:
            return
        if folder.is_symlink() or not folder.is_dir():
            return
        for path in find_workspaces(folder, self.settings.max_depth - depth):
            if path not in self.scheduler:
                tracked = self._track(path, root)
                if tracked is not None:
                    self.scheduler.schedule(tracked, now)

    def _track(self, path: Path, root: Path) -> Tracked | None:
        workspace = Workspace(path)
        if not workspace.conversation.is_file() or workspace.conversation.is_symlink():
            return None
        config_error = None
        try:
            settings = settings_for_workspace(self.settings, path)
        except MemorydError as exc:
            settings, config_error = self.settings, str(exc)
            log.warning("workspace_config_invalid", workspace=str(path), error=config_error)
        saved = read_state(workspace) or {}
        level = saved.get("level")
        tracked = Tracked(
            workspace=workspace,
            root=root,
            settings=settings,
            reader=ConversationReader(workspace.conversation, settings.max_line_bytes),
            config_error=config_error,
            level=level if level in ("normal", "warning", "critical") else None,
            last_summary_at=saved.get("last_summary_at"),
            calibration=_calibration(saved.get("calibration")),
            state_numbers=numbers_key(saved_numbers(saved)),
            changed_at=time.monotonic() - _age(workspace.conversation),
        )
        self.scheduler.add(tracked)
        self.pending_init.append(path)
        log.info("workspace_discovered", workspace=str(path), strategy=settings.strategy)
        return tracked

    def _tidy(self, path: Path, now: float) -> None:
        """After READY: what an interrupted commit left, a clean HEARTBEAT.md, and a job a
        dead daemon left marked running.

        Skipped while another process holds the workspace's job lock: its job may be in
        the middle of a commit (its leftovers are live) and its heartbeat is really active.
        A write that fails is retried with the workspace's back-off.
        """
        tracked = self.scheduler.get(path)
        if tracked is None or tracked.running:
            return
        workspace = tracked.workspace
        self.untidy.discard(path)
        try:
            with flocked(workspace.job_lock, root=workspace.path, blocking=False) as free:
                if free:
                    _recover(workspace)
                    manager = HeartbeatManager(workspace)
                    if manager.get_status().status == "active" and (
                        read_state(workspace) or {}
                    ).get("summarizing"):
                        report_failure(workspace, "interrupted: the daemon stopped during the job")
                    else:
                        # An idle workspace's clean heartbeat is status that every start
                        # rebuilds: renamed into place without an fsync (a first start on
                        # thousands of workspaces would otherwise wait on the disk for each).
                        manager.ensure_clean(durable=False)
                else:
                    log.info("workspace_busy", workspace=str(path), hint="a job holds it")
        except (OSError, MemorydError) as exc:
            self.untidy.add(path)
            self.publisher.failed(tracked, "HEARTBEAT.md", exc, now)
        self.publisher.publish(tracked, now, time.time())

    def rescan(self, now: float) -> None:
        """Find new and vanished workspaces under every root; look again at every one."""
        seen: set[Path] = set()
        for root in self.settings.roots:
            if root not in self.watchers:
                self.watchers.watch(root)
            for path in find_workspaces(root, self.settings.max_depth):
                seen.add(path)
                known = self.scheduler.get(path)
                if known is not None and known.reader.unchanged():
                    continue  # one stat: the periodic rescan stays cheap when all is idle
                tracked = known or self._track(path, root)
                if tracked is not None:
                    self.scheduler.schedule(tracked, now)
        for path in self.scheduler.paths():
            tracked = self.scheduler.get(path)
            if path not in seen and tracked is not None and not tracked.running:
                self.scheduler.remove(path)
                log.info("workspace_gone", workspace=str(path))

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
            tracked.dirty = True
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
        if path in self.untidy and now >= tracked.write_retry_at:
            self._tidy(path, now)
        elif publish:
            self.publisher.publish(tracked, now, time.time())
        noticed_at, tracked.noticed_at = tracked.noticed_at, None
        if self.stopping_since is None:
            due = job_due_now(tracked, now)
            if due is not None:
                self.backlog[path] = (*due, noticed_at)
            elif tracked.stores_due:
                self.backlog[path] = (STORES, STORES, None)
            else:
                self.scheduler.wake_when_idle(tracked, now)

    # ----- jobs -------------------------------------------------------------------------

    def _drain(self, now: float) -> None:
        """Dispatch waiting jobs, the most urgent first, while a worker and (for the
        anthropic backend) a request are free (docs/design.md#pool)."""
        while self.backlog and self.stopping_since is None:
            if len(self.jobs) >= self.settings.workers:
                return
            free_requests = self.settings.anthropic.max_concurrent_requests - len(self.api_jobs)
            candidates = [
                (tracked, kind)
                for path, (_why, kind, _at) in self.backlog.items()
                if (tracked := self.scheduler.get(path)) is not None
                and (free_requests > 0 or kind == STORES or not self._uses_api(tracked))
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

    def _uses_api(self, tracked: Tracked) -> bool:
        return choose_backend(tracked.settings, self.env)[0] == "anthropic"

    def _dispatch(self, tracked: Tracked, why: str, kind: str, now: float) -> None:
        """Submit a summarization; ``kind`` is why in one word: "trigger" or "idle"."""
        path = tracked.workspace.path
        tally = tracked.reader.tally
        task = f"Summarizing {tally.messages} messages (~{tracked.tokens:,} tokens)"
        self.publisher.heartbeat(tracked, now, lambda manager: manager.start_task(task))
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
        )
        tracked.job_reason = kind
        if kind == "idle":
            tracked.idle_compacted_at = now
        self._submit(tracked, "summarize", now, run_job, request)
        if settings.summarizer.backend != "extractive" and self._uses_api(tracked):
            self.api_jobs.add(path)
        log.info(
            "summarize_dispatched",
            workspace=str(path),
            reason=kind,
            why=why,
            messages=tally.messages,
            tokens=tracked.tokens,
            llm_budget_exhausted=downgrade is not None,
        )
        for hook in self.hooks:
            hook.dispatched(tracked, "summarize", why, now)

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
        self.publisher.heartbeat(tracked, now, lambda manager: manager.start_task(task))
        self._submit(tracked, "stores", now, compact_stores_job, tracked.workspace.path, settings)
        log.info(
            "memory_compaction_dispatched", workspace=str(tracked.workspace.path), stores=names
        )
        for hook in self.hooks:
            hook.dispatched(tracked, "stores", "store past its threshold", now)

    def _submit(self, tracked: Tracked, kind: str, now: float, fn: Any, *args: Any) -> None:
        path = tracked.workspace.path
        tracked.running = True
        tracked.job_kind = kind
        tracked.dirty = False
        job_id, future = self.pool.submit(fn, *args)
        self.jobs[path] = (job_id, future)
        self.publisher.publish(tracked, now, time.time())
        future.add_done_callback(lambda f: self.notes.put(JobDone(path, job_id, f)))

    def _on_job_done(self, note: JobDone, now: float) -> None:
        path, job_id, future = note.path, note.job_id, note.future
        if self.jobs.get(path, (0, None))[1] is not future:
            return
        del self.jobs[path]
        tracked = self.scheduler.get(path)
        kind = tracked.job_kind if tracked else ""
        self.api_jobs.discard(path)
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
            settle(tracked, result, now, time.time())
            if tracked.failures:
                self.scheduler.wake_at(tracked, tracked.retry_at)
            for hook in self.hooks:
                hook.finished(tracked, result, now)
        else:
            tracked.running = False
            counts = result.counts() if isinstance(result, stores.CompactionReport) else {}
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
            log.info("job_retried", workspace=str(path), reason=reason)
            self.publisher.emit(tracked, "summarize_failed", now, reason=reason, retry="now")
            job_lost(tracked, now, its_fault=False)
            self.scheduler.wake_at(tracked, now)
            return
        log.warning("job_failed", workspace=str(path), reason=reason)
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

    # ----- signals ----------------------------------------------------------------------

    def _on_signal(self, signum: int, now: float) -> None:
        if signum == signal.SIGHUP:
            self.reload(now)
            return
        if self.stopping_since is not None:
            log.warning("second_signal", signal=signal.Signals(signum).name, action="stop now")
            self.done = True
            return
        self.stopping_since = now
        systemd.notify("STOPPING=1", self.env)
        log.info(
            "daemon_stopping",
            signal=signal.Signals(signum).name,
            running_jobs=len(self.jobs),
            shutdown_timeout=self.settings.shutdown_timeout,
        )
        self.watchers.close()

    def reload(self, now: float) -> None:
        """SIGHUP: load the configuration again; a bad one is refused and the old one kept."""
        overrides: dict[str, Any] = {"roots": self.cli_roots} if self.cli_roots else {}
        try:
            loaded = load_settings(self.config_file, overrides, self.env)
        except MemorydError as exc:
            log.error("config_reload_refused", error=str(exc), kept="previous configuration")
            return
        old, new = self.settings.model_dump(), loaded.settings.model_dump()
        changed = sorted(key for key in new if old.get(key) != new[key])
        self.loaded, self.settings = loaded, loaded.settings
        for root in set(self.watchers.roots()) - set(self.settings.roots):
            self.watchers.unwatch(root)
            for tracked in self.scheduler:
                if tracked.root == root and not tracked.running:
                    self.scheduler.remove(tracked.workspace.path)
        for root in self.settings.roots:
            self.watchers.watch(root)
        for tracked in self.scheduler:
            try:
                tracked.settings = settings_for_workspace(self.settings, tracked.workspace.path)
                tracked.config_error = None
            except MemorydError as exc:
                tracked.config_error = str(exc)
        self.scheduler.reload(self.settings.coalesce_ms / 1000, self.settings.rescan_interval, now)
        self.pool.idle_timeout = self.settings.worker_idle_timeout
        if "workers" in changed and not self.jobs:
            self.pool.rebuild("resized", self.settings.workers)
        backend, why = choose_backend(self.settings, self.env)
        log.info("config_reloaded", changed=changed, summarizer=backend, summarizer_reason=why)
        for hook in self.hooks:
            hook.reloaded(self.settings)

    def metrics_view(self) -> DaemonView:
        """The daemon as the metrics see it (runs in the scrape thread, reads only)."""
        return daemon_view(
            self.scheduler,
            self.jobs,
            self.settings,
            len(self.watchers.polling),
            self.telemetry,
            backlog=len(self.backlog),
            workers=self.pool.workers(),
        )

    def _send_status(self) -> None:
        self.publisher.status(
            len(self.scheduler), self.scheduler.running(), sorted(self.watchers.polling)
        )


def urgency(tracked: Tracked, kind: str) -> tuple[int, float]:
    """Sort key of a waiting job: critical before warning before the rest, then the
    highest usage ratio first; memory-store compactions last."""
    if kind == STORES:
        return (3, 0.0)
    ratio = usage_ratio(tracked.tokens, tracked.settings.token_limit)
    rank = {"critical": 0, "warning": 1}.get(detect_threshold(ratio, tracked.settings), 2)
    return (rank, -ratio)


def _recover(workspace: Workspace) -> None:
    """Clean up an interrupted commit now rather than at the workspace's next job."""
    cleaned = recover(workspace)
    if cleaned.temp_files_removed or cleaned.archives_finalised or cleaned.archives_discarded:
        log.info(
            "leftovers_recovered",
            workspace=str(workspace.path),
            temp_files_removed=cleaned.temp_files_removed,
            archives_finalised=cleaned.archives_finalised,
            archives_discarded=cleaned.archives_discarded,
        )


def _age(path: Path) -> float:
    """Seconds since ``path`` was last modified (0 when unknown)."""
    try:
        return max(0.0, time.time() - path.stat().st_mtime)
    except OSError:
        return 0.0


def _calibration(value: Any) -> float:
    try:
        factor = float(value)
    except (TypeError, ValueError):
        return 1.0
    return factor if math.isfinite(factor) and factor > 0 else 1.0


def run_daemon(
    loaded: LoadedSettings, config_file: Path | None = None, cli_roots: list[str] | None = None
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code (0 after a clean stop)."""
    configure_logging(loaded.settings.log_format, loaded.settings.log_level, sys.stdout)
    supervisor = Supervisor(loaded, config_file, cli_roots)
    supervisor.install_signal_handlers()
    try:
        supervisor.start()
        while not supervisor.done:
            supervisor.loop()
    finally:
        supervisor.close()
        log.info("daemon_stopped")
    return 0
