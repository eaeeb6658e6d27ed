"""The root watchers: one recursive observer per root (inotify, or polling when the
inotify watches ran out), started, stopped and checked for liveness."""

from __future__ import annotations

import queue
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

log = structlog.get_logger()


class RootWatchers:
    """Observers that put :class:`memoryd.daemon.watch.FsChange` notes on ``notes``."""

    def __init__(self, notes: queue.SimpleQueue[object]) -> None:
        self.notes = notes
        self.observers: dict[Path, BaseObserver] = {}
        self.polling: set[Path] = set()
        self.unscanned: set[Path] = set()
        """Roots watched whose folders the first scan has not added yet."""

    def __contains__(self, root: object) -> bool:
        return root in self.observers

    def roots(self) -> list[Path]:
        return list(self.observers)

    def watch(self, root: Path, max_depth: int | None = None) -> None:
        """Watch ``root`` (down to ``max_depth + 1`` levels); a missing or unwatchable root
        is logged (it is retried at the next rescan). Its folders are watched as the first
        scan lists them (:meth:`first_scan`)."""
        from memoryd.daemon.watch import start_observer

        if root in self.observers:
            return
        if not root.is_dir():
            log.warning("root_missing", root=str(root), hint="create it; it is rescanned")
            return
        try:
            observer, polling = start_observer(root, self.notes, max_depth, walk=False)
        except OSError as exc:
            log.warning("root_unwatchable", root=str(root), error=exc.strerror or str(exc))
            return
        self.observers[root] = observer
        if polling:
            self.polling.add(root)
        else:
            self.unscanned.add(root)

    def first_scan(self, root: Path) -> Callable[[str], None] | None:
        """What the first scan of ``root`` calls for each folder before it lists it (adds
        its watch), or None when ``root`` had its first scan (or is polled)."""
        from memoryd.daemon.watch_tree import TreeObserver

        observer = self.observers.get(root)
        if root not in self.unscanned or not isinstance(observer, TreeObserver):
            return None
        return observer.watch_folder

    def scanned(self, root: Path) -> None:
        """The first scan of ``root`` is done: poll it instead if watches ran out."""
        from memoryd.daemon.watch import poll_if_short

        observer = self.observers.get(root)
        if root not in self.unscanned or observer is None:
            return
        self.unscanned.discard(root)
        self.observers[root], polling = poll_if_short(observer, root, self.notes)
        if polling:
            self.polling.add(root)

    def unwatch(self, root: Path) -> None:
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
