"""Finding, tracking and tidying workspaces: one part of the supervisor (docs/design.md#daemon)."""

from __future__ import annotations

import time
from pathlib import Path

import structlog

from memoryd.config import settings_for_workspace
from memoryd.conversation import ConversationReader
from memoryd.daemon.parts import DaemonParts
from memoryd.discovery import find_workspaces
from memoryd.errors import MemorydError
from memoryd.fsutil import flocked
from memoryd.heartbeat import HeartbeatManager
from memoryd.job import (
    report_failure,
)
from memoryd.recovery import recover
from memoryd.state import (
    numbers_key,
    read_state,
    saved_calibration,
    saved_numbers,
    saved_time,
)
from memoryd.tracked import Tracked
from memoryd.watch import classify
from memoryd.workspace import Workspace

log = structlog.get_logger()


class WorkspaceTracking(DaemonParts):
    """Roots and workspaces: what a change means, new and vanished workspaces, the
    tidy after READY."""

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
            last_summary_at=saved_time(saved),
            calibration=saved_calibration(saved),
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
            if not workspace.meta.is_dir():
                # Never touched by memoryd: no job can have run (its lock lives in .memoryd),
                # so nothing to recover and no lock to take; only the clean heartbeat.
                HeartbeatManager(workspace).ensure_clean(durable=False)
                self.publisher.publish(tracked, now, time.time())
                return
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
