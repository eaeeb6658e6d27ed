"""``memoryd run``: one supervisor owns signals, observers, the process pool and the loop.

Signal handlers and watchdog handlers only put a note on one queue; :meth:`Supervisor.loop`
takes the notes off it and acts, so a test can step it. Jobs run in a
``ProcessPoolExecutor`` (forkserver); a per-workspace running flag plus the workspace's
job lock keep it to one job per workspace.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from watchdog.observers.api import BaseObserver

from memoryd import events, stores, systemd
from memoryd.commit import recover
from memoryd.config import LoadedSettings, Settings, load_settings, settings_for_workspace
from memoryd.conversation import ConversationReader
from memoryd.discovery import find_workspaces
from memoryd.errors import MemorydError
from memoryd.fsutil import flocked, pid_alive
from memoryd.heartbeat import HeartbeatManager
from memoryd.job import JobRequest, JobResult, report_failure, run_job, summarizer_env
from memoryd.logs import configure_logging
from memoryd.policy import should_emit_event
from memoryd.state import build_state, read_state, saved_numbers, write_state
from memoryd.summarizers.base import choose_backend
from memoryd.tracked import Tracked, after_failure, job_due
from memoryd.watch import FsChange, classify, start_observer
from memoryd.workspace import Workspace

log = structlog.get_logger()

MAX_WAIT = 1.0
"""Longest the loop sleeps: bounds how late a timer (retry, rescan, shutdown) can fire."""
ORPHAN_CHECK_SECONDS = 1.0
INIT_BATCH = 200
"""Workspaces whose files are tidied per loop step after READY (keeps READY fast)."""


@dataclass(frozen=True, slots=True)
class SignalNote:
    signum: int


@dataclass(frozen=True, slots=True)
class JobDone:
    path: Path
    future: Future[Any]


def worker_init(log_format: str, log_level: str, daemon_pid: int) -> None:
    """Pool initializer: only the parent decides when to stop; logs in the same format."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    configure_logging(log_format, log_level, sys.stdout)
    threading.Thread(
        target=_exit_with_daemon, args=(daemon_pid,), name="memoryd-orphan-guard", daemon=True
    ).start()


def _exit_with_daemon(daemon_pid: int) -> None:
    """End this worker once the daemon is gone (it was SIGKILLed, say).

    Workers ignore SIGTERM, and the forkserver between them and the daemon does not always
    die with it, so an orphan would otherwise live forever, holding the daemon's stdout
    open. Stopping mid-job is safe: the commit protocol is crash-safe.
    """
    while True:
        time.sleep(ORPHAN_CHECK_SECONDS)
        if not pid_alive(daemon_pid):
            os._exit(0)


def compact_stores_job(workspace: Path, settings: Settings) -> stores.CompactionReport:
    """Worker side of a memory-store compaction, with HEARTBEAT.md like any job."""
    heartbeat = HeartbeatManager(Workspace(workspace))
    try:
        report = stores.compact(
            workspace,
            None,
            settings.memory.threshold,
            settings.memory.keep_bookmarks,
            drain_seconds=settings.drain_seconds,
        )
    except MemorydError as exc:
        heartbeat.fail_task(f"memory compaction failed: {exc}")
        raise
    heartbeat.complete_task(report.describe())
    return report


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
        self.tracked: dict[Path, Tracked] = {}
        self.observers: dict[Path, BaseObserver] = {}
        self.polling: set[Path] = set()
        self.pool: ProcessPoolExecutor | None = None
        self.futures: dict[Path, Future[Any]] = {}
        self.pending_init: deque[Path] = deque()
        self.stopping_since: float | None = None
        self.done = False
        self.next_rescan = 0.0
        self.watchdog_every = systemd.watchdog_interval(self.env)
        self.next_watchdog = 0.0
        self.last_status = ""

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
        self.pool = self._new_pool()
        self._warm_up(self.pool)
        for root in self.settings.roots:
            self._watch_root(root)
        self.rescan(moment)
        for tracked in list(self.tracked.values()):
            tracked.due_at = None
            # Counting is what READY waits for; state.json and HEARTBEAT.md of an idle
            # workspace are written after READY, in batches (see _tidy).
            self.process(tracked, moment, publish=False)
        self.next_rescan = moment + self.settings.rescan_interval
        systemd.notify("READY=1", self.env)
        log.info(
            "daemon_ready", workspaces=len(self.tracked), polling=sorted(map(str, self.polling))
        )
        self._send_status()

    def _new_pool(self) -> ProcessPoolExecutor:
        context = multiprocessing.get_context("forkserver")
        # Workers are forked from the forkserver: importing memoryd (and the SDK, ~1 s)
        # there once lets every worker, and every pool rebuilt after a crash, start at once.
        context.set_forkserver_preload(["memoryd.daemon"])
        return ProcessPoolExecutor(
            max_workers=self.settings.workers,
            mp_context=context,
            initializer=worker_init,
            initargs=(self.settings.log_format, self.settings.log_level, os.getpid()),
        )

    def _warm_up(self, pool: ProcessPoolExecutor) -> None:
        """Start the workers now, so that the first job does not pay for their start."""
        for _ in range(self.settings.workers):
            pool.submit(os.getpid)

    def _watch_root(self, root: Path) -> None:
        if not root.is_dir():
            log.warning("root_missing", root=str(root), hint="create it; it is rescanned")
            return
        try:
            observer, polling = start_observer(root, self.notes)
        except OSError as exc:
            log.warning("root_unwatchable", root=str(root), error=exc.strerror or str(exc))
            return
        self.observers[root] = observer
        if polling:
            self.polling.add(root)

    def _unwatch_root(self, root: Path) -> None:
        observer = self.observers.pop(root, None)
        self.polling.discard(root)
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)

    def close(self) -> None:
        """Stop observers and the pool; jobs still running are abandoned, files untouched."""
        for root in list(self.observers):
            self._unwatch_root(root)
        if self.pool is not None:
            self._kill_workers(self.pool)
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    @staticmethod
    def _kill_workers(pool: ProcessPoolExecutor) -> None:
        # Workers ignore SIGTERM (only the parent decides), so a stop that abandons jobs
        # must SIGKILL them; the commit protocol makes that safe. Python 3.11 has no public
        # API for it (3.14 adds kill_workers()).
        processes: dict[int, Any] = getattr(pool, "_processes", None) or {}
        for process in list(processes.values()):
            with contextlib.suppress(Exception):
                process.kill()

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
        deadlines = [self.next_rescan, now + MAX_WAIT]
        if self.watchdog_every is not None:
            deadlines.append(self.next_watchdog)
        for tracked in self.tracked.values():
            if tracked.due_at is not None:
                deadlines.append(tracked.due_at)
        if self.pending_init:
            deadlines.append(now)
        return max(0.0, min(deadlines) - now)

    def _handle(self, note: object, now: float) -> None:
        if isinstance(note, FsChange):
            self._on_change(Path(note.path), note.is_folder, now)
        elif isinstance(note, JobDone):
            self._on_job_done(note.path, note.future, now)
        elif isinstance(note, SignalNote):
            self._on_signal(note.signum, now)

    def _tick(self, now: float) -> None:
        for tracked in list(self.tracked.values()):
            if tracked.due_at is not None and tracked.due_at <= now:
                tracked.due_at = None
                self.process(tracked, now)
            elif tracked.failures and not tracked.running and tracked.retry_at <= now:
                self.process(tracked, now)
        for _ in range(min(INIT_BATCH, len(self.pending_init))):
            self._tidy(self.pending_init.popleft())
        if self.stopping_since is None and now >= self.next_rescan:
            self.rescan(now)
            self.next_rescan = now + self.settings.rescan_interval
        if self.watchdog_every is not None and now >= self.next_watchdog:
            if all(observer.is_alive() for observer in self.observers.values()):
                systemd.notify("WATCHDOG=1", self.env)
            else:
                log.error("observer_died", hint="not pinging the systemd watchdog")
            self.next_watchdog = now + self.watchdog_every
        if self.stopping_since is not None:
            timed_out = now - self.stopping_since >= self.settings.shutdown_timeout
            if not self.futures or timed_out:
                if self.futures:
                    log.warning(
                        "jobs_abandoned",
                        workspaces=[str(p) for p in self.futures],
                        shutdown_timeout=self.settings.shutdown_timeout,
                    )
                self.done = True
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
        tracked = self.tracked.get(target) or self._track(target, root, now)
        if tracked is None:
            return
        if kind == "store":
            tracked.stores_due = True
        self._schedule(tracked, now)

    def _schedule(self, tracked: Tracked, now: float) -> None:
        """Leading-edge coalescing: act at once, then at most once per window."""
        if tracked.due_at is not None:
            return
        window = self.settings.coalesce_ms / 1000
        tracked.due_at = max(now, tracked.last_processed + window)

    def _discover(self, folder: Path, root: Path, now: float) -> None:
        try:
            depth = len(folder.relative_to(root).parts)
        except ValueError:
            return
        if not folder.is_dir() or folder.is_symlink():
            return
        for path in find_workspaces(folder, self.settings.max_depth - depth):
            if path not in self.tracked:
                tracked = self._track(path, root, now)
                if tracked is not None:
                    self._schedule(tracked, now)

    def _track(self, path: Path, root: Path, now: float) -> Tracked | None:
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
        tracked = Tracked(
            workspace=workspace,
            root=root,
            settings=settings,
            reader=ConversationReader(workspace.conversation, settings.max_line_bytes),
            config_error=config_error,
            level=saved.get("level")
            if saved.get("level") in ("normal", "warning", "critical")
            else None,
            last_summary_at=saved.get("last_summary_at"),
            calibration=_calibration(saved.get("calibration")),
            state_numbers=saved_numbers(saved),
        )
        self.tracked[path] = tracked
        self.pending_init.append(path)
        log.info("workspace_discovered", workspace=str(path), strategy=settings.strategy)
        return tracked

    def _tidy(self, path: Path) -> None:
        """After READY: what an interrupted commit left, a clean HEARTBEAT.md, and a job a
        dead daemon left marked running.

        Skipped while another process holds the workspace's job lock: its job may be in
        the middle of a commit (its leftovers are live) and its heartbeat is really active.
        """
        tracked = self.tracked.get(path)
        if tracked is None or tracked.running:
            return
        workspace = tracked.workspace
        try:
            with flocked(workspace.job_lock, blocking=False) as free:
                if free:
                    self._recover(workspace)
                    manager = HeartbeatManager(workspace)
                    saved = read_state(workspace) or {}
                    if saved.get("summarizing") and manager.get_status().status == "active":
                        report_failure(workspace, "interrupted: the daemon stopped during the job")
                    else:
                        manager.ensure_clean()
                else:
                    log.info("workspace_busy", workspace=str(path), hint="a job holds it")
        except OSError as exc:
            log.warning("workspace_unwritable", workspace=str(path), error=exc.strerror)
        self._publish(tracked, time.time())

    @staticmethod
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

    def rescan(self, now: float) -> None:
        """Find new and vanished workspaces under every root; look again at every one."""
        seen: set[Path] = set()
        for root in self.settings.roots:
            if root not in self.observers and root.is_dir():
                self._watch_root(root)
            for path in find_workspaces(root, self.settings.max_depth):
                seen.add(path)
                known = self.tracked.get(path)
                if known is not None and known.reader.unchanged():
                    continue  # one stat: the periodic rescan stays cheap when all is idle
                tracked = known or self._track(path, root, now)
                if tracked is not None:
                    self._schedule(tracked, now)
        for path in [p for p, t in self.tracked.items() if p not in seen and not t.running]:
            del self.tracked[path]
            log.info("workspace_gone", workspace=str(path))

    def process(self, tracked: Tracked, now: float, publish: bool = True) -> None:
        """Count what was appended, publish the numbers, dispatch a job when due."""
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
        if update.missing:
            self.tracked.pop(tracked.workspace.path, None)
            log.info("workspace_gone", workspace=str(tracked.workspace.path))
            return
        if update.reset:
            log.info("conversation_recounted", workspace=str(tracked.workspace.path))
        for line in update.new_lines:
            if line.malformed:
                events.emit(
                    tracked.workspace,
                    "malformed_line",
                    line=line.index + 1,
                    bytes=line.length,
                    problem=line.problem,
                )
        if publish:
            self._publish(tracked, time.time())
        if self.stopping_since is None:
            reason = job_due(tracked, now)
            if reason is not None:
                self._dispatch(tracked, reason)
            elif tracked.stores_due:
                self._dispatch_stores(tracked)

    def _publish(self, tracked: Tracked, wall: float) -> None:
        """state.json when the numbers changed; threshold_changed when the level did."""
        settings = tracked.settings
        tally = tracked.reader.tally
        state = build_state(
            tracked.workspace,
            settings,
            messages=tally.messages,
            tokens=tracked.tokens,
            summarizing=tracked.running and tracked.job_kind == "summarize",
            last_summary_at=tracked.last_summary_at,
            now=wall,
            malformed_lines=tally.malformed,
            calibration=tracked.calibration,
        )
        level = state.level
        if should_emit_event(tracked.level, level) and not (
            tracked.level is None and level == "normal"
        ):
            events.emit(
                tracked.workspace,
                "threshold_changed",
                previous=tracked.level,
                level=level,
                action=state.action,
                usage_ratio=state.usage_ratio,
                tokens=state.tokens,
            )
            log.info(
                "threshold_changed",
                workspace=str(tracked.workspace.path),
                from_level=tracked.level,
                to_level=level,
                usage_ratio=state.usage_ratio,
            )
        tracked.level = level
        numbers = state.numbers()
        if numbers != tracked.state_numbers:
            try:
                write_state(tracked.workspace, state)
                tracked.state_numbers = numbers
            except OSError as exc:
                log.warning(
                    "state_unwritable", workspace=str(tracked.workspace.path), error=exc.strerror
                )

    # ----- jobs -------------------------------------------------------------------------

    def _dispatch(self, tracked: Tracked, reason: str) -> None:
        assert self.pool is not None
        path = tracked.workspace.path
        tally = tracked.reader.tally
        task = f"Summarizing {tally.messages} messages (~{tracked.tokens:,} tokens)"
        try:
            HeartbeatManager(tracked.workspace).start_task(task)
        except OSError as exc:
            log.warning("heartbeat_unwritable", workspace=str(path), error=exc.strerror)
        request = JobRequest(
            workspace=path,
            settings=tracked.settings,
            env=summarizer_env(self.env),
            heartbeat_started=True,
            calibration=tracked.calibration,
            force=True,
        )
        self._submit(tracked, "summarize", run_job, request)
        log.info(
            "summarize_dispatched",
            workspace=str(path),
            reason=reason,
            messages=tally.messages,
            tokens=tracked.tokens,
        )

    def _dispatch_stores(self, tracked: Tracked) -> None:
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
        HeartbeatManager(tracked.workspace).start_task(
            f"Compacting memory stores: {', '.join(names)}"
        )
        self._submit(tracked, "stores", compact_stores_job, tracked.workspace.path, settings)
        log.info(
            "memory_compaction_dispatched", workspace=str(tracked.workspace.path), stores=names
        )

    def _submit(self, tracked: Tracked, kind: str, fn: Any, *args: Any) -> None:
        assert self.pool is not None
        path = tracked.workspace.path
        tracked.running = True
        tracked.job_kind = kind
        tracked.dirty = False
        try:
            future = self.pool.submit(fn, *args)
        except BrokenProcessPool:
            self._rebuild_pool()
            future = self.pool.submit(fn, *args)
        self.futures[path] = future
        self._publish(tracked, time.time())
        future.add_done_callback(lambda f: self.notes.put(JobDone(path, f)))

    def _rebuild_pool(self) -> None:
        old = self.pool
        self.pool = self._new_pool()
        self._warm_up(self.pool)
        if old is not None:
            if getattr(old, "_broken", False):
                # A broken pool fails every job it held, and its SIGTERM does not stop our
                # workers (they ignore it): unkilled, they would run on and commit jobs the
                # daemon has already reported failed, then hold the workspace against the
                # retry.
                self._kill_workers(old)
            old.shutdown(wait=False, cancel_futures=True)
        log.warning("pool_rebuilt", workers=self.settings.workers)

    def _on_job_done(self, path: Path, future: Future[Any], now: float) -> None:
        if self.futures.get(path) is not future:
            return
        del self.futures[path]
        tracked = self.tracked.get(path)
        kind = tracked.job_kind if tracked else ""
        try:
            result = future.result()
        except BrokenProcessPool:
            self._job_crashed(path, tracked, now, "worker process died")
            if self.pool is not None and getattr(self.pool, "_broken", False):
                self._rebuild_pool()
            return
        except MemorydError as exc:
            self._job_crashed(path, tracked, now, str(exc))
            return
        except Exception as exc:  # one job's bug must not stop the daemon
            self._job_crashed(path, tracked, now, f"unexpected {type(exc).__name__}")
            log.error("job_crashed", workspace=str(path), exc_info=exc)
            return
        if tracked is None:
            return
        tracked.running = False
        if kind == "summarize" and isinstance(result, JobResult):
            self._summarize_done(tracked, result, now)
        else:
            counts = result.counts() if isinstance(result, stores.CompactionReport) else {}
            log.info("memory_compacted", workspace=str(path), **counts)
        tracked.state_numbers = None
        self.process(tracked, now)

    def _summarize_done(self, tracked: Tracked, result: JobResult, now: float) -> None:
        log.info(
            "job_finished",
            workspace=str(tracked.workspace.path),
            outcome=result.outcome,
            messages_before=result.messages_before,
            messages_after=result.messages_after,
            tokens_before=result.tokens_before,
            tokens_after=result.tokens_after,
            duration_s=result.duration_s,
        )
        if result.outcome in ("completed", "ineffective"):
            tracked.failures = 0
            tracked.last_summary_at = events.iso_ms(time.time())
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
            tracked.failures = max(tracked.failures, 1)
            tracked.retry_at = now + 2.0
        else:
            after_failure(tracked, now)

    def _job_crashed(self, path: Path, tracked: Tracked | None, now: float, reason: str) -> None:
        log.warning("job_failed", workspace=str(path), reason=reason)
        with contextlib.suppress(OSError):
            report_failure(Workspace(path), reason)
        if tracked is not None:
            tracked.running = False
            after_failure(tracked, now)
            tracked.state_numbers = None
            self._publish(tracked, time.time())

    # ----- signals ----------------------------------------------------------------------

    def _on_signal(self, signum: int, now: float) -> None:
        if signum == signal.SIGHUP:
            self.reload()
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
            running_jobs=len(self.futures),
            shutdown_timeout=self.settings.shutdown_timeout,
        )
        for root in list(self.observers):
            self._unwatch_root(root)

    def reload(self) -> None:
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
        for root in set(self.observers) - set(self.settings.roots):
            self._unwatch_root(root)
            for path in [p for p, t in self.tracked.items() if t.root == root and not t.running]:
                del self.tracked[path]
        for root in self.settings.roots:
            if root not in self.observers:
                self._watch_root(root)
        for tracked in self.tracked.values():
            try:
                tracked.settings = settings_for_workspace(self.settings, tracked.workspace.path)
                tracked.config_error = None
            except MemorydError as exc:
                tracked.config_error = str(exc)
            tracked.ineffective_tokens = None
            tracked.state_numbers = None
            self._schedule(tracked, time.monotonic())  # new budget: new numbers, maybe a job
        if "workers" in changed and not self.futures:
            self._rebuild_pool()
        backend, why = choose_backend(self.settings, self.env)
        log.info("config_reloaded", changed=changed, summarizer=backend, summarizer_reason=why)
        self.rescan(time.monotonic())

    def _send_status(self) -> None:
        running = sum(1 for t in self.tracked.values() if t.running)
        status = f"watching {len(self.tracked)} workspaces, {running} summarizing"
        if self.polling:
            status += f" ({len(self.polling)} roots polled: inotify limit)"
        if status != self.last_status:
            systemd.notify(f"STATUS={status}", self.env)
            self.last_status = status


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
