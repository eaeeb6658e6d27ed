"""The registry of workspaces: finding, tracking and tidying them (docs/design.md#daemon).

:class:`Workspaces` holds what the daemon knows of the roots and the workspaces under them
besides their due times (the :class:`~memoryd.daemon.scheduler.Scheduler` it fills): what
a change means, new and vanished workspaces, the tidy after READY.
"""

from __future__ import annotations

import os
import stat
import time
from collections import Counter, deque
from collections.abc import Collection
from pathlib import Path

import structlog

from memoryd.clock import iso_ms
from memoryd.commit.recovery import recover
from memoryd.compaction.job.report import report_failure
from memoryd.compaction.strategies import strategy_for
from memoryd.config.schema import file_error
from memoryd.config.settings import Settings, workspace_settings
from memoryd.conversation.reader import ConversationReader
from memoryd.daemon.folders import Folders, Seed, TidyStep, read_seed, tidy_step
from memoryd.daemon.fs_events import classify
from memoryd.daemon.logs import debug_enabled
from memoryd.daemon.publisher import Publisher
from memoryd.daemon.root_watchers import RootWatchers
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.tracked import Tracked
from memoryd.discovery import Found, look, scan_workspaces, stamps_hold
from memoryd.errors import MemorydError
from memoryd.files.fsutil import flocked
from memoryd.published.heartbeat import HeartbeatManager, render_idle
from memoryd.published.state import (
    numbers_key,
    read_state,
    saved_calibration,
    saved_counted,
    saved_numbers,
    saved_time,
)
from memoryd.workspace import CONVERSATION, Workspace

log = structlog.get_logger()


class Workspaces:
    """Roots and workspaces: what a change means, new and vanished workspaces, the
    tidy after READY.

    It registers each workspace it finds with ``scheduler``, watches the roots through
    ``watchers`` and writes a workspace's files through ``publisher``; ``settings`` is
    replaced by the supervisor when the configuration is reloaded.
    """

    def __init__(
        self,
        settings: Settings,
        scheduler: Scheduler,
        watchers: RootWatchers,
        publisher: Publisher,
    ) -> None:
        self.settings = settings
        self.scheduler = scheduler
        self.watchers = watchers
        self.publisher = publisher
        self.pending_init: deque[tuple[Path, TidyStep]] = deque()
        """Workspaces to tidy after READY, with what their tidy must do (folders.tidy_step)."""
        self.untidy: set[Path] = set()
        """Workspaces whose tidy failed to write: tried again with their write back-off."""
        self.skipped_workspaces: set[str] = set()
        """Workspaces not taken (symlinked), each logged once."""
        self.interrupted: set[Path] = set()
        """Workspaces whose state.json said a job was running (the tidy fails that job)."""
        self.tidied: Counter[str] = Counter()
        """What the tidy did since the start, by step (logged once the start's tidy is done)."""
        self.folder_stamps: dict[Path, dict[str, int]] = {}
        """By root, the mtime of each folder its last walk listed (discovery.stamps_hold)."""

    def _root_of(self, path: Path) -> Path | None:
        for root in self.settings.roots:
            if path == root or root in path.parents:
                return root
        return None

    def on_change(self, path: Path, is_folder: bool, now: float) -> None:
        """A watcher saw ``path`` change: track, schedule or discover what it means."""
        root = self._root_of(path)
        if root is None:
            return
        kind, target = classify(path, is_folder, root, self.settings.max_depth)
        if kind == "ignore":
            return
        if kind == "folder":
            self._discover(target, root, now)
            return
        tracked = self.scheduler.get(target)
        if tracked is None:
            found = look(target)
            tracked = self._track(found, root) if found is not None else None
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
        if folder.is_symlink() and (folder / CONVERSATION).is_file():
            self._skipped(str(folder), "a symlinked folder (never followed out of a root)")
        if folder.is_symlink() or not folder.is_dir():
            return
        found_here = scan_workspaces(
            folder, self.settings.max_depth - depth, None, skipped=self._skipped
        )
        for found in found_here:
            if found.path not in self.scheduler:
                tracked = self._track(found, root)
                if tracked is not None:
                    self.scheduler.schedule(tracked, now)

    def _skipped(self, path: str, why: str) -> None:
        """Say once per path that a workspace is not taken, and why."""
        if path not in self.skipped_workspaces:
            self.skipped_workspaces.add(path)
            log.warning("workspace_skipped", workspace=path, reason=why)

    def _track(
        self, found: Found, root: Path, announce: bool = True, debug: bool = False
    ) -> Tracked | None:
        """Start tracking a workspace: its settings, what its state.json says, and what its
        tidy after READY will have to do, reading only what the listing of its folder
        showed (docs/design.md#scale-start). Logged at info when ``announce`` (a workspace
        found while running) or when it needs attention, else at debug (a rescan logs one
        summary line; ``debug``: whether debug lines are written, asked once per rescan)."""
        path = found.path
        workspace = Workspace(path)
        conversation = os.path.join(path, CONVERSATION)
        try:
            st = os.lstat(conversation)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        settings, config_error = self.settings, None
        seed = Seed(None, {}, None, leftovers=True)  # unread: the tidy looks under the lock
        try:
            seed = read_seed(found)
            if seed.config is not None:
                settings = workspace_settings(self.settings, workspace.config, seed.config)
        except OSError as exc:
            config_error = str(file_error(workspace.config, exc))
        except MemorydError as exc:
            config_error = str(exc)
        if config_error is not None:
            settings = self.settings
            log.warning("workspace_config_invalid", workspace=str(path), error=config_error)
        saved = seed.state
        level = saved.get("level")
        reader = ConversationReader(conversation, settings.max_line_bytes)
        counted = saved_counted(saved)
        # The counts of a file unchanged since they were saved are taken back, not read
        # again, unless the strategy reads the tokens of each line, which are not saved.
        if (
            counted is not None
            and counted.holds(st, settings.max_line_bytes)
            and not strategy_for(settings).needs_line_tokens
        ):
            reader.resume(counted)
        tracked = Tracked(
            workspace=workspace,
            root=root,
            settings=settings,
            reader=reader,
            config_error=config_error,
            level=level if level in ("normal", "warning", "critical") else None,
            last_summary_at=saved_time(saved),
            calibration=saved_calibration(saved),
            state_numbers=numbers_key(saved_numbers(saved)),
            changed_at=time.monotonic() - max(0.0, time.time() - st.st_mtime),
        )
        if saved.get("summarizing") is True:
            self.interrupted.add(path)
        self.scheduler.add(tracked)
        self.pending_init.append((path, tidy_step(seed, path in self.interrupted)))
        attention = self._attention(tracked)
        if announce or attention or debug:
            say = log.info if announce or attention else log.debug
            say(
                "workspace_discovered",
                workspace=str(path),
                strategy=settings.strategy,
                attention=attention,
            )
        return tracked

    def _attention(self, tracked: Tracked) -> str | None:
        """Why a newly tracked workspace needs someone's attention, or None."""
        if tracked.config_error is not None:
            return "its .memoryd/config.toml is refused"
        if tracked.workspace.path in self.interrupted:
            return "a job was running when the previous daemon stopped"
        return None

    def tidy(self, path: Path, now: float, step: TidyStep | None = None) -> None:
        """After READY: what an interrupted commit left, a clean HEARTBEAT.md, and a job a
        dead daemon left marked running; then state.json when its numbers changed.

        ``step`` is what :func:`~memoryd.daemon.folders.tidy_step` said when the workspace
        was tracked (None: look again now). A workspace whose files are right costs no
        read here and no lock (docs/design.md#scale-start). A write that fails is retried
        with the workspace's back-off.
        """
        tracked = self.scheduler.get(path)
        if tracked is None or tracked.running:
            return
        self.untidy.discard(path)
        try:
            if step is None:
                found = look(path)
                step = (
                    tidy_step(read_seed(found), path in self.interrupted)
                    if found is not None
                    else "none"
                )
            if step == "none":
                self.publisher.publish(tracked, now, time.time())
            else:
                with Folders(path) as folders:
                    if step == "locked":
                        _tidy_locked(tracked.workspace)
                    elif step == "create":
                        # An idle workspace's clean heartbeat is status that a start
                        # rebuilds: not fsynced, so a first start does not wait on the disk.
                        folders.create_heartbeat(render_idle(iso_ms(time.time())))
                    else:
                        HeartbeatManager(tracked.workspace).ensure_clean(durable=False)
                    self.publisher.publish(tracked, now, time.time(), folders)
        except (OSError, MemorydError) as exc:
            self.untidy.add(path)
            self.publisher.failed(tracked, "HEARTBEAT.md", exc, now)
            self.publisher.publish(tracked, now, time.time())
            return
        self.tidied[step] += 1
        self.interrupted.discard(path)

    def rescan(self, now: float, walk: Collection[Path] | None = None) -> None:
        """Find new and vanished workspaces under the roots; look again at every one.

        The roots in ``walk`` (every root when None: the start, a reload) are walked. The
        others (the periodic safety net) are walked only when a folder of theirs changed
        since their last walk (one stat a folder); else each of their workspaces costs
        one stat of its conversation (docs/design.md#idle-rescan).

        New workspaces are logged as one summary line (how many, how long, how many need
        attention); each one only at debug, unless it needs attention.
        """
        began = time.monotonic()
        seen: set[Path] = set()
        new = attention = 0
        debug = debug_enabled()
        quiet = [
            root
            for root in self.settings.roots
            if walk is not None
            and root not in walk
            and root in self.watchers
            and stamps_hold(self.folder_stamps.get(root))
        ]
        if quiet:
            seen |= self._look_again(quiet, now)
        for root in self.settings.roots:
            if root in quiet:
                continue
            if root not in self.watchers:
                self.watchers.watch(root, self.settings.max_depth)
            visit = self.watchers.first_scan(root)
            # The start's walk takes no stamps (a stat a folder); the first rescan does.
            stamps: dict[str, int] | None = {} if visit is None else None
            listed = scan_workspaces(root, self.settings.max_depth, visit, stamps, self._skipped)
            if visit is not None:
                self.watchers.scanned(root)
            if stamps is not None:
                self.folder_stamps[root] = stamps
            for found in listed:
                seen.add(found.path)
                known = self.scheduler.get(found.path)
                if known is not None and known.reader.unchanged():
                    continue  # one stat: the periodic rescan stays cheap when all is idle
                tracked = known or self._track(found, root, announce=False, debug=debug)
                if tracked is None:
                    continue
                if known is None:
                    new += 1
                    attention += self._attention(tracked) is not None
                self.scheduler.schedule(tracked, now)
        for path in self.scheduler.paths():
            tracked = self.scheduler.get(path)
            if path not in seen and tracked is not None and not tracked.running:
                self.scheduler.remove(path)
                log.info("workspace_gone", workspace=str(path))
        if new:
            log.info(
                "workspaces_discovered",
                workspaces=new,
                tracked=len(self.scheduler),
                seconds=round(time.monotonic() - began, 3),
                attention=attention,
            )

    def _look_again(self, roots: list[Path], now: float) -> set[Path]:
        """The tracked workspaces under ``roots``, each whose conversation changed
        scheduled (one stat each): a rescan of roots whose folders did not change."""
        under: set[Path] = set()
        for path in self.scheduler.paths():
            tracked = self.scheduler.get(path)
            if tracked is None or tracked.root not in roots:
                continue
            under.add(path)
            if not tracked.reader.unchanged():
                self.scheduler.schedule(tracked, now)
        return under


def _tidy_locked(workspace: Workspace) -> None:
    """The tidy of a workspace that needs recovery or had a job running: under its job
    lock, and skipped while another process holds it (its job may be in the middle of a
    commit, so its leftovers are live and its heartbeat really active)."""
    with flocked(workspace.job_lock, root=workspace.path, blocking=False) as free:
        if not free:
            log.info("workspace_busy", workspace=str(workspace.path), hint="a job holds it")
            return
        _recover(workspace)
        manager = HeartbeatManager(workspace)
        if manager.get_status().status == "active" and (read_state(workspace) or {}).get(
            "summarizing"
        ):
            report_failure(workspace, "interrupted: the daemon stopped during the job")
        else:
            manager.ensure_clean(durable=False)


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
