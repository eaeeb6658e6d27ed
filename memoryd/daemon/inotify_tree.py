"""The recursive inotify watch of a root: watchdog's, minus the folders memoryd never enters.

watchdog's recursive watch puts an inotify watch on every folder below the root. memoryd
needs events only where workspaces and memory stores can be, and discovery never enters
a hidden folder, so this watch skips them as well: above all each workspace's
``.memoryd``, where memoryd writes state.json, its locks and its temp files. A write
there then costs the watcher's threads nothing (no event is raised), the tree needs half
the watches, and a first start's ``mkdir .memoryd`` no longer makes watchdog add a watch
and walk the new folder. The events of memoryd's own files in a watched folder
(HEARTBEAT.md, ``.memoryd`` itself, temp files) are dropped as they are read, before
watchdog turns them into objects for its other threads (docs/design.md#scale-start).

The thread that reads the inotify queue reads a storm of events in batches: an event
that comes within ``STORM_GAP`` of the last read waits ``STORM_WAIT`` before the next
read, so a first start's 20,000 creations, or 200 commits at once, wake it once per
batch rather than once per event, each wake a fight for the GIL with the loop that is
doing the writes. A lone event is read at once (docs/design.md#scale-start).

When the watch may have missed something it says so through ``missed`` (a callback,
called in watchdog's thread): ``"overflow"`` after the kernel's event queue overflowed
(events were dropped; watchdog watches the tree again but makes up no events), and
``"watch_failed"`` the first time a folder found after the first scan could not be
watched for want of inotify watches. The daemon rescans then, instead of walking every
root every few seconds just in case (docs/design.md#idle-rescan).

The walk that adds the watches also counts the folders it could not watch because
inotify ran out of watches (watchdog swallows that below the root), so no second walk of
the tree is needed to find a shortfall. It subclasses watchdog's private
``InotifyWatchGroup`` (watchdog is pinned to one major version; tests/daemon/test_watch_events.py
checks the behaviour).
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from watchdog.observers.api import DEFAULT_OBSERVER_TIMEOUT, BaseObserver
from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup
from watchdog.observers.inotify_c import (
    DEFAULT_EVENT_BUFFER_SIZE,
    InotifyConstants,
    InotifyEvent,
    InotifyFD,
    Mask,
)

from memoryd.files.fsutil import TEMP_MARK
from memoryd.workspace import HEARTBEAT, META

LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE)
OWN_NAMES = frozenset({HEARTBEAT.encode(), META.encode()})
TEMP = TEMP_MARK.encode()
CREATED = Mask(InotifyConstants.IN_CREATE)
CREATED_FOLDER = Mask(InotifyConstants.IN_CREATE | InotifyConstants.IN_ISDIR)
STORM_GAP = 0.005
"""Seconds: events that come sooner than this after the last read are a storm."""
STORM_WAIT = 0.01
"""Seconds a storm's events gather before they are read together."""


def hidden(path: bytes) -> bool:
    """A folder memoryd never enters (its name starts with a dot; pure)."""
    return os.path.basename(path).startswith(b".")


def own_name(name: bytes) -> bool:
    """A name memoryd itself writes in a watched folder (pure): HEARTBEAT.md, ``.memoryd``,
    a temp file. See :func:`memoryd.daemon.fs_events.own_file`, which the handler applies
    to paths."""
    return name in OWN_NAMES or TEMP in name


@dataclass
class TreeWatchGroup(InotifyWatchGroup):
    """A recursive watch that leaves hidden folders (and symlinks) out, and those deeper
    than ``limit`` below the root; drops the events of memoryd's own files as they are
    read. Without ``walk`` it watches only the root at first: the first scan of the root
    adds the others as it lists them (:meth:`watch_folder`); a later watch of the whole
    tree (after an inotify queue overflow) walks it."""

    limit: int | None = None
    """The deepest level below the root that is watched (None: every level)."""
    walk: bool = True
    missed: Callable[[str], None] | None = None
    """Told why when events may have been lost: "overflow" or "watch_failed"."""
    unwatched: int = field(default=0, init=False)
    """Folders that could not be watched because inotify ran out of watches."""
    scanned: bool = field(default=False, init=False)
    """The first scan is done: a watch that fails from now on is reported."""

    def _report(self, reason: str) -> None:
        if self.missed is not None:
            # An exception raised here would end watchdog's thread.
            with contextlib.suppress(Exception):
                self.missed(reason)

    def on_queue_overflow(self) -> None:
        super().on_queue_overflow()
        self._report("overflow")

    def on_event(self, event: InotifyEvent) -> None:
        # BatchedInotifyFD drops these as it reads them; this also drops the events
        # watchdog makes up for a folder that appeared (and holds memoryd's files).
        if event.name and own_name(event.name):
            return
        super().on_event(event)

    def watch_folder(self, path: str) -> None:
        """Watch the folder ``path`` (below the root, within the limit): what the first
        scan calls for each folder before it lists it, so nothing made in it after the
        listing goes unseen."""
        with self._lock:
            self._watch(os.fsencode(path))

    def _depth(self, path: bytes) -> int:
        return 0 if path == self.path else path[len(self.path) :].count(b"/")

    def _add_all_callbacks(self, path: bytes) -> None:
        if path != self.path and hidden(path):
            return
        depth = self._depth(path)
        if (self.limit is not None and depth > self.limit) or not self._watch(path):
            return
        if not self.is_recursive:
            return
        if path == self.path and not self.walk:
            # Only the first watch of the root leaves the walk to the caller's scan: after
            # an inotify queue overflow watchdog watches the whole tree again, walking.
            self.walk = True
            return
        stack = [(path, depth)]
        while stack:
            folder, level = stack.pop()
            if self.limit is not None and level >= self.limit:
                continue
            try:
                with os.scandir(folder) as entries:
                    folders = [
                        entry.path
                        for entry in entries
                        if not entry.name.startswith(b".") and entry.is_dir(follow_symlinks=False)
                    ]
            except OSError:
                continue
            for child in folders:
                if self._watch(child):
                    stack.append((child, level + 1))

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
                if self.scanned and self.unwatched == 1:
                    self._report("watch_failed")
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
                dirnames.clear()  # beyond the limit: nothing below is watched either
                continue
            for name in dirnames:
                events.append(InotifyEvent(wd, CREATED_FOLDER, 0, name))
            for name in filenames:
                events.append(InotifyEvent(wd, CREATED, 0, name))
        return events


class BatchedInotifyFD(InotifyFD):
    """watchdog's inotify reader thread, reading the events of a storm in batches, and
    dropping those of memoryd's own names straight from the buffer read, before it
    builds an object of each and hands it round (a first start raises two per
    workspace)."""

    def __init__(self) -> None:
        super().__init__()
        self.last_read = -STORM_GAP
        self.reads = 0
        """How many times the queue was read (tests count the batches)."""

    def read_events(
        self, *, event_buffer_size: int = DEFAULT_EVENT_BUFFER_SIZE
    ) -> list[InotifyEvent]:
        buffer = self._read_event_buffer(event_buffer_size)
        return [
            InotifyEvent(wd, mask, cookie, name)
            for wd, mask, cookie, name in InotifyFD._parse_event_buffer(buffer)
            # As watchdog's: the queue's overflow is the one event without a watch.
            if (wd != -1 or mask & InotifyConstants.IN_Q_OVERFLOW) and not (name and own_name(name))
        ]

    def _check_inotify_fd(self) -> bool:
        ready = super()._check_inotify_fd()
        if ready:
            if time.monotonic() - self.last_read < STORM_GAP:
                time.sleep(STORM_WAIT)
            self.last_read = time.monotonic()
            self.reads += 1
        return ready


@dataclass(frozen=True, slots=True)
class TreeScope:
    """What a tree watch covers and how it tells of misses (see :class:`TreeWatchGroup`)."""

    limit: int | None = None
    walk: bool = True
    missed: Callable[[str], None] | None = None


class TreeEmitter(InotifyEmitter):
    """watchdog's inotify emitter with a :class:`TreeWatchGroup`."""

    def __init__(self, *args: Any, scope: TreeScope, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scope = scope

    def on_thread_start(self) -> None:
        self._inotify = TreeWatchGroup(
            self._inotify_fd,
            os.fsencode(self.watch.path),
            is_recursive=self.watch.is_recursive,
            event_mask=self.get_event_mask_from_filter(),
            follow_symlink=self.watch.follow_symlink,
            limit=self.scope.limit,
            walk=self.scope.walk,
            missed=self.scope.missed,
        )

    @property
    def group(self) -> TreeWatchGroup | None:
        """The watch, once the emitter has started."""
        group = self._inotify
        return group if isinstance(group, TreeWatchGroup) else None


class TreeObserver(InotifyObserver):
    """watchdog's inotify observer whose watches are :class:`TreeEmitter`'s: each root
    watched down to ``limit`` levels below it, walked at once (``walk``) or by the
    caller's first scan (:meth:`watch_folder`)."""

    def __init__(
        self,
        limit: int | None = None,
        walk: bool = True,
        missed: Callable[[str], None] | None = None,
    ) -> None:
        # InotifyObserver.__init__ with a batched reader thread in place of watchdog's.
        self._inotify_fd = BatchedInotifyFD()
        self._inotify_fd.start()
        BaseObserver.__init__(
            self,
            TreeEmitter,
            timeout=DEFAULT_OBSERVER_TIMEOUT,
            inotify_fd=self._inotify_fd,
            scope=TreeScope(limit, walk, missed),
        )

    def _groups(self) -> list[TreeWatchGroup]:
        return [
            group
            for emitter in self.emitters
            if isinstance(emitter, TreeEmitter) and (group := emitter.group) is not None
        ]

    def watch_folder(self, path: str) -> None:
        """Watch the folder ``path`` below a root (see :meth:`TreeWatchGroup.watch_folder`)."""
        for group in self._groups():
            group.watch_folder(path)

    def scanned(self) -> None:
        """The first scan is done: from now on a watch that fails is reported."""
        for group in self._groups():
            group.scanned = True

    def unwatched(self) -> int:
        """Folders left unwatched for want of inotify watches, over every root."""
        return sum(group.unwatched for group in self._groups())
