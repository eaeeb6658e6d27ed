"""The recursive inotify watch of a root: watchdog's, minus the folders memoryd never enters.

watchdog's recursive watch puts an inotify watch on every folder below the root. memoryd
needs events only where workspaces and memory stores can be, and discovery never enters
a hidden folder, so this watch skips them as well: above all each workspace's
``.memoryd``, where memoryd writes state.json, its locks and its temp files. A write
there then costs the watcher's threads nothing (no event is raised), the tree needs half
the watches, and a first start's ``mkdir .memoryd`` no longer makes watchdog add a watch
and walk the new folder (docs/design.md#scale-start).

The walk that adds the watches also counts the folders it could not watch because
inotify ran out of watches (watchdog swallows that below the root), so no second walk of
the tree is needed to find a shortfall. It subclasses watchdog's private
``InotifyWatchGroup`` (watchdog is pinned to one major version; tests/test_watch_events.py
checks the behaviour).
"""

from __future__ import annotations

import errno
import os
from typing import Any

from watchdog.observers.api import DEFAULT_OBSERVER_TIMEOUT
from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup
from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, Mask

LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE)
CREATED = Mask(InotifyConstants.IN_CREATE)
CREATED_FOLDER = Mask(InotifyConstants.IN_CREATE | InotifyConstants.IN_ISDIR)


def hidden(path: bytes) -> bool:
    """A folder memoryd never enters (its name starts with a dot; pure)."""
    return os.path.basename(path).startswith(b".")


class TreeWatchGroup(InotifyWatchGroup):
    """A recursive watch that leaves hidden folders (and symlinks) out."""

    unwatched = 0
    """Folders that could not be watched because inotify ran out of watches."""

    def _add_all_callbacks(self, path: bytes) -> None:
        if path != self.path and hidden(path):
            return
        self._watch(path)
        if not self.is_recursive:
            return
        stack = [path]
        while stack:
            try:
                with os.scandir(stack.pop()) as entries:
                    folders = [
                        entry.path
                        for entry in entries
                        if not entry.name.startswith(b".") and entry.is_dir(follow_symlinks=False)
                    ]
            except OSError:
                continue
            for folder in folders:
                if self._watch(folder):
                    stack.append(folder)

    def _add_callback(self, path: bytes) -> None:
        self._watch(path)

    def _watch(self, path: bytes) -> bool:
        """Watch ``path``; False when it cannot be (it is gone, or no watch is left)."""
        try:
            wd = self._inotify_fd.add_callback(path, self.event_mask, self._callback, self._id)
        except OSError as exc:
            if path == self.path:
                raise
            if exc.errno in LIMIT_ERRNOS:
                self.unwatched += 1
            return False
        self._active_callbacks_by_path[path] = wd
        self._active_callbacks_by_watch[wd] = path
        return True

    def _recursive_simulate(self, src_path: bytes) -> list[InotifyEvent]:
        if hidden(src_path):
            return []
        events = []
        for folder, dirnames, filenames in os.walk(src_path):
            dirnames[:] = [name for name in dirnames if not name.startswith(b".")]
            wd = self._active_callbacks_by_path.get(folder)
            if wd is None:
                continue
            for name in dirnames:
                events.append(InotifyEvent(wd, CREATED_FOLDER, 0, name))
            for name in filenames:
                events.append(InotifyEvent(wd, CREATED, 0, name))
        return events


class TreeEmitter(InotifyEmitter):
    """watchdog's inotify emitter with a :class:`TreeWatchGroup`."""

    def on_thread_start(self) -> None:
        self._inotify = TreeWatchGroup(
            self._inotify_fd,
            os.fsencode(self.watch.path),
            is_recursive=self.watch.is_recursive,
            event_mask=self.get_event_mask_from_filter(),
            follow_symlink=self.watch.follow_symlink,
        )

    @property
    def unwatched(self) -> int:
        """Folders below the root left unwatched for want of inotify watches."""
        group = self._inotify
        return group.unwatched if isinstance(group, TreeWatchGroup) else 0


class TreeObserver(InotifyObserver):
    """watchdog's inotify observer whose watches are :class:`TreeEmitter`'s."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(timeout=kwargs.pop("timeout", DEFAULT_OBSERVER_TIMEOUT), **kwargs)
        self._emitter_class = TreeEmitter

    def unwatched(self) -> int:
        """Folders left unwatched for want of inotify watches, over every root."""
        return sum(
            emitter.unwatched for emitter in self.emitters if isinstance(emitter, TreeEmitter)
        )
