"""The root watchers: one recursive observer per root (inotify, or polling when the
inotify watches ran out), started, stopped and checked for liveness."""

from __future__ import annotations

import os
import queue
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

log = structlog.get_logger()


class RootWatchers:
    """Observers that put :class:`memoryd.daemon.fs_events.FsChange` notes on ``notes``."""

    def __init__(self, notes: queue.SimpleQueue[object]) -> None:
        self.notes = notes
        self.observers: dict[Path, BaseObserver] = {}
        self.polling: set[Path] = set()
        self.unscanned: set[Path] = set()
        """Roots watched whose folders the first scan has not added yet."""
        self.identity: dict[Path, tuple[int, int]] = {}
        """(device, inode) of each root watched: a root replaced since is watched anew."""
        self.said_missing: set[Path] = set()
        """Roots missing since ``root_missing`` was logged for them: said once, not at
        every look (the start and its first scan both look)."""

    def __contains__(self, root: object) -> bool:
        return root in self.observers

    def roots(self) -> list[Path]:
        return list(self.observers)

    def watch(self, root: Path, max_depth: int | None = None) -> None:
        """Watch ``root`` (down to ``max_depth + 1`` levels); a missing or unwatchable root
        is logged (it is retried at the next rescan). Its folders are watched as the first
        scan lists them (:meth:`first_scan`)."""
        from memoryd.daemon.fs_events import start_observer

        if root in self.observers:
            return
        if not root.is_dir():
            if root not in self.said_missing:
                log.warning("root_missing", root=str(root), hint="create it; it is rescanned")
                self.said_missing.add(root)
            return
        self.said_missing.discard(root)
        try:
            identity = _identity(root)
            observer, polling = start_observer(root, self.notes, max_depth, walk=False)
        except OSError as exc:
            log.warning("root_unwatchable", root=str(root), error=exc.strerror or str(exc))
            return
        self.observers[root] = observer
        if identity is not None:
            self.identity[root] = identity
        if polling:
            self.polling.add(root)
        else:
            self.unscanned.add(root)

    def first_scan(self, root: Path) -> Callable[[str], None] | None:
        """What the first scan of ``root`` calls for each folder before it lists it (adds
        its watch), or None when ``root`` had its first scan (or is polled)."""
        from memoryd.daemon.inotify_tree import TreeObserver

        observer = self.observers.get(root)
        if root not in self.unscanned or not isinstance(observer, TreeObserver):
            return None
        return observer.watch_folder

    def scanned(self, root: Path) -> None:
        """The first scan of ``root`` is done: poll it instead if watches ran out."""
        from memoryd.daemon.fs_events import poll_if_short

        observer = self.observers.get(root)
        if root not in self.unscanned or observer is None:
            return
        self.unscanned.discard(root)
        self.observers[root], polling = poll_if_short(observer, root, self.notes)
        if polling:
            self.polling.add(root)

    def recheck(self, root: Path) -> None:
        """After a watch failed below ``root`` (inotify ran out of watches): poll it
        instead, as its first scan would have."""
        from memoryd.daemon.fs_events import poll_if_short

        observer = self.observers.get(root)
        if observer is None or root in self.unscanned or root in self.polling:
            return
        self.observers[root], polling = poll_if_short(observer, root, self.notes)
        if polling:
            self.polling.add(root)

    def changed_roots(self, roots: Iterable[Path]) -> list[Path]:
        """The roots whose watch no longer matches the disk: one missing while watched (it
        is unwatched here), one there but not watched (it came back, or was created), one
        replaced by another folder of the same name (unwatched here). One stat a root: the
        daemon asks every few seconds, and rescans only the roots named."""
        changed = []
        for root in roots:
            identity = _identity(root)
            watched = root in self.observers
            if watched and identity == self.identity.get(root):
                continue
            if not watched and identity is None:
                continue  # still missing: said once, when it was first missed
            if watched:
                log.warning(
                    "root_changed",
                    root=str(root),
                    now="missing" if identity is None else "replaced",
                )
                self.unwatch(root)
            changed.append(root)
        return changed

    def unwatch(self, root: Path) -> None:
        self.identity.pop(root, None)
        observer = self.observers.pop(root, None)
        self.polling.discard(root)
        self.unscanned.discard(root)
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)

    def alive(self) -> bool:
        """True while every observer thread runs (the systemd watchdog is fed only then)."""
        return all(observer.is_alive() for observer in self.observers.values())

    def close(self) -> None:
        for root in list(self.observers):
            self.unwatch(root)


def _identity(root: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder ``root``; None when it is not a folder (or is gone)."""
    try:
        info = os.stat(root)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None
