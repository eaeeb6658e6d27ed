"""``memoryd run``: the supervisor owns the queue, the signals and the life cycle.

Signal handlers and watchdog handlers only put a note on one queue; :meth:`Supervisor.loop`
takes the notes off it and acts, so a test can step it. It builds the daemon's parts,
each given only what it uses, and drives them: the
:class:`~memoryd.daemon.workspaces.Workspaces` (the registry of workspaces: finding,
tracking, tidying), the :class:`~memoryd.daemon.scheduler.Scheduler` (what is due), the
:class:`~memoryd.daemon.dispatch.Dispatcher` (counting, the backlog, the jobs in flight),
the :class:`~memoryd.daemon.pool.WorkerPool` (where jobs run), the
:class:`~memoryd.daemon.root_watchers.RootWatchers` (what changed) and the
:class:`~memoryd.daemon.publisher.Publisher` (what is written). See docs/design.md#daemon.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import queue
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from memoryd.compaction.strategies import strategy_for
from memoryd.config.settings import LoadedSettings, load_settings, settings_for_workspace
from memoryd.conversation.reader import ConversationReader
from memoryd.daemon import systemd
from memoryd.daemon.dispatch import Dispatcher, JobDone
from memoryd.daemon.fs_events import FsChange, Missed
from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.logs import configure_logging
from memoryd.daemon.pool import WorkerPool
from memoryd.daemon.processes import stop_tracker_at_exit
from memoryd.daemon.publisher import Publisher
from memoryd.daemon.root_watchers import RootWatchers
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.sources import SourceTailer
from memoryd.daemon.telemetry import Telemetry, daemon_view
from memoryd.daemon.workspaces import Workspaces
from memoryd.errors import MemorydError
from memoryd.summary.backends import choose_backend

if TYPE_CHECKING:
    from memoryd.daemon.metrics import DaemonView

log = structlog.get_logger()

MAX_WAIT = 1.0
"""Longest the loop sleeps: bounds how late a timer (retry, rescan, shutdown) can fire."""
ROOT_CHECK = 5.0
"""Seconds between two looks (one stat each) at whether a root went missing, came back or
was replaced: the watch of a root sees neither (docs/design.md#idle-rescan)."""
TIDY_SLICE = 0.05
"""Longest a loop step spends tidying workspaces after READY (keeps READY fast and the
loop responsive to changes meanwhile)."""


@dataclass(frozen=True, slots=True)
class SignalNote:
    signum: int


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
        self.workspaces = Workspaces(self.settings, self.scheduler, self.watchers, self.publisher)
        self.dispatcher = Dispatcher(
            self.settings,
            self.env,
            self.scheduler,
            self.workspaces,
            self.publisher,
            self.pool,
            self.telemetry,
            self.hooks,
            self.notes.put,
        )
        self.tidy_began: float | None = None
        """When the start's tidy began (None once it is done and logged)."""
        self.stopping_since: float | None = None
        self.walk_next: set[Path] | None = None
        """The roots the next rescan walks whatever their folders' mtimes say (None:
        every root): those whose watch may have missed something."""
        self.next_root_check = 0.0
        self.done = False
        self.watchdog_every = systemd.watchdog_interval(self.env)
        self.next_watchdog = 0.0
        self.sources = self._source_tailer()

    def _source_tailer(self) -> SourceTailer:
        """The ``[[sources]]`` tailer (docs/design.md#sources): its own thread and watches."""
        return SourceTailer(
            self.settings.sources, self.settings.coalesce_ms / 1000, self.settings.rescan_interval
        )

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
        # Until the start's tidy is done: the start allocates an object graph that lives
        # as long as the daemon, and collecting it again and again finds nothing.
        gc.disable()
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
        # No forkserver yet: the first job starts it (docs/design.md#pool).
        self.pool.preload_for(backend)
        for root in self.settings.roots:
            self.watchers.watch(root, self.settings.max_depth)
        self.sources.start()
        self.workspaces.rescan(moment)
        for tracked in self.scheduler.due(math.inf):
            # Counting is what READY waits for; state.json and HEARTBEAT.md of an idle
            # workspace are written after READY, in batches (see Workspaces.tidy).
            self.dispatcher.process(tracked, moment, publish=False)
        self.scheduler.rescanned(moment)
        systemd.notify("READY=1", self.env)
        self.tidy_began = time.monotonic()
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
        self.sources.close()
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
        if self.workspaces.pending_init:
            deadlines.append(now)
        deadlines += self.dispatcher.checkin_deadlines()
        return max(0.0, min(deadlines) - now)

    def _handle(self, note: object, now: float) -> None:
        if isinstance(note, FsChange):
            self.workspaces.on_change(Path(note.path), note.is_folder, now)
        elif isinstance(note, Missed):
            self._on_missed(Path(note.root), note.reason, now)
        elif isinstance(note, JobDone):
            self.dispatcher.on_job_done(note, now)
        elif isinstance(note, SignalNote):
            self._on_signal(note.signum, now)

    def _tick(self, now: float) -> None:
        for tracked in self.scheduler.due(now):
            self.dispatcher.process(tracked, now)
        self.dispatcher.drain(now)
        self.dispatcher.check_in(now)
        self.pool.shrink(now)
        slice_end = time.monotonic() + TIDY_SLICE
        pending, tidied = self.workspaces.pending_init, self.workspaces.tidied
        while pending and time.monotonic() < slice_end:
            path, step = pending.popleft()
            self.workspaces.tidy(path, now, step)
        if self.tidy_began is not None and not pending:
            log.info(
                "workspaces_tidied",
                seconds=round(time.monotonic() - self.tidy_began, 3),
                heartbeats_created=tidied["create"],
                heartbeats_cleaned=tidied["clean"],
                recovered=tidied["locked"],
                unchanged=tidied["none"],
            )
            self.tidy_began = None
            gc.enable()
        if self.stopping_since is None and now >= self.next_root_check:
            self.next_root_check = now + ROOT_CHECK
            for root in self.watchers.changed_roots(self.settings.roots):
                self._walk_soon(root, now)
        if self.stopping_since is None and self.scheduler.rescan_due(now):
            walk, self.walk_next = self.walk_next, set()
            self.workspaces.rescan(now, walk)
            self.scheduler.rescanned(now)
        if self.watchdog_every is not None and now >= self.next_watchdog:
            if self.watchers.alive():
                systemd.notify("WATCHDOG=1", self.env)
            else:
                log.error("observer_died", hint="not pinging the systemd watchdog")
            self.next_watchdog = now + self.watchdog_every
        if self.stopping_since is not None:
            timed_out = now - self.stopping_since >= self.settings.shutdown_timeout
            jobs = self.dispatcher.jobs
            if not jobs or timed_out:
                if jobs:
                    log.warning(
                        "jobs_abandoned",
                        workspaces=[str(p) for p in jobs],
                        shutdown_timeout=self.settings.shutdown_timeout,
                    )
                self.done = True
        for hook in self.hooks:
            hook.tick(now)
        self._send_status()

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
        self.dispatcher.stopping = True
        systemd.notify("STOPPING=1", self.env)
        log.info(
            "daemon_stopping",
            signal=signal.Signals(signum).name,
            running_jobs=len(self.dispatcher.jobs),
            shutdown_timeout=self.settings.shutdown_timeout,
        )
        self.watchers.close()

    def _on_missed(self, root: Path, reason: str, now: float) -> None:
        """The watch of ``root`` may have lost events: walk it now (and poll it when it
        ran out of inotify watches)."""
        log.warning("watch_missed_events", root=str(root), reason=reason, action="rescan")
        if reason == "watch_failed":
            self.watchers.recheck(root)
        self._walk_soon(root, now)

    def _walk_soon(self, root: Path, now: float) -> None:
        if self.walk_next is not None:
            self.walk_next.add(root)
        self.scheduler.rescan_now(now)

    def reload(self, now: float) -> None:
        """SIGHUP: load the configuration again; a bad one is refused and the old one kept."""
        overrides: dict[str, Any] = {"roots": self.cli_roots} if self.cli_roots else {}
        try:
            loaded = load_settings(self.config_file, overrides, self.env)
            choose_backend(loaded.settings, self.env)  # its package must be installed
        except MemorydError as exc:
            log.error("config_reload_refused", error=str(exc), kept="previous configuration")
            return
        old, new = self.settings.model_dump(), loaded.settings.model_dump()
        changed = sorted(key for key in new if old.get(key) != new[key])
        self.loaded, self.settings = loaded, loaded.settings
        self.workspaces.settings = self.dispatcher.settings = self.settings
        for root in set(self.watchers.roots()) - set(self.settings.roots):
            self.watchers.unwatch(root)
            for tracked in self.scheduler:
                if tracked.root == root and not tracked.running:
                    self.scheduler.remove(tracked.workspace.path)
        for root in self.settings.roots:
            self.watchers.watch(root, self.settings.max_depth)
        for tracked in self.scheduler:
            try:
                tracked.settings = settings_for_workspace(self.settings, tracked.workspace.path)
                tracked.config_error = None
            except MemorydError as exc:
                tracked.config_error = str(exc)
            needs = strategy_for(tracked.settings).needs_line_tokens
            if needs and not tracked.reader.tally.per_line:
                # Totals taken back at start lack each line's tokens, which it reads.
                tracked.reader = ConversationReader(
                    tracked.reader.path, tracked.settings.max_line_bytes
                )
        self.scheduler.reload(self.settings.coalesce_ms / 1000, self.settings.rescan_interval, now)
        self.walk_next = None  # the roots, max_depth: walk them all
        self.pool.idle_timeout = self.settings.worker_idle_timeout
        if {"sources", "coalesce_ms", "rescan_interval"} & set(changed):
            self.sources.close()
            self.sources = self._source_tailer()
            self.sources.start()
        if "workers" in changed and not self.dispatcher.jobs:
            self.pool.rebuild("resized", self.settings.workers)
        backend, why = choose_backend(self.settings, self.env)
        self.pool.preload_for(backend)
        log.info("config_reloaded", changed=changed, summarizer=backend, summarizer_reason=why)
        for hook in self.hooks:
            hook.reloaded(self.settings)

    def metrics_view(self) -> DaemonView:
        """The daemon as the metrics see it (runs in the scrape thread, reads only)."""
        return daemon_view(
            self.scheduler,
            self.dispatcher.jobs,
            self.settings,
            len(self.watchers.polling),
            self.telemetry,
            backlog=len(self.dispatcher.backlog),
            workers=self.pool.workers(),
        )

    def _send_status(self) -> None:
        # Jobs in flight, not a scan of every workspace: this runs at every loop step.
        self.publisher.status(
            len(self.scheduler), len(self.dispatcher.jobs), sorted(self.watchers.polling)
        )


def run_daemon(
    loaded: LoadedSettings, config_file: Path | None = None, cli_roots: list[str] | None = None
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code (0 after a clean stop)."""
    configure_logging(loaded.settings.log_format, loaded.settings.log_level, sys.stdout)
    # The resource tracker is stopped as the process exits: nothing after that may use
    # multiprocessing (docs/design.md#pool).
    stop_tracker_at_exit()
    supervisor = Supervisor(loaded, config_file, cli_roots)
    supervisor.install_signal_handlers()
    started = False
    try:
        supervisor.start()
        started = True
        while not supervisor.done:
            supervisor.loop()
    finally:
        supervisor.close()
        if started:  # a start refused (a backend's package missing) stopped nothing
            log.info("daemon_stopped")
    return 0
