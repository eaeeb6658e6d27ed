"""Filesystem watching: watchdog observers whose handler only hands paths to a queue.

Watchdog's handlers run in its observer thread, and an exception there kills the thread
silently, so :class:`Enqueuer` does nothing but put the paths of an event on the queue,
inside try/except. Deciding what a path means (:func:`classify`) is a pure function.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from watchdog import events
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers.api import BaseObserver
from watchdog.observers.inotify_move_event_grouper import InotifyMoveEventGrouper
from watchdog.observers.polling import PollingObserver

from memoryd.daemon.inotify_tree import TreeObserver
from memoryd.files.fsutil import is_temp_name
from memoryd.workspace import CONVERSATION, HEARTBEAT, META

log = structlog.get_logger()

Kind = Literal["conversation", "store", "folder", "ignore"]
INOTIFY_LIMIT_ERRNOS = (errno.ENOSPC, errno.EMFILE)
WATCHED_EVENTS: list[type[FileSystemEvent]] = [
    events.DirAttribEvent,
    events.DirCreatedEvent,
    events.DirDeletedEvent,
    events.DirMovedEvent,
    events.FileAttribEvent,
    events.FileCreatedEvent,
    events.FileDeletedEvent,
    events.FileModifiedEvent,
    events.FileMovedEvent,
]
"""The events that can mean something to memoryd: a file or folder created, deleted,
moved, written or made readable.

Given to ``schedule``, this keeps out of the inotify mask what would only repeat them or
is the daemon's own doing: IN_OPEN and IN_CLOSE_NOWRITE (every read the daemon makes, a
rescan's scandir, a reader's open) and IN_CLOSE_WRITE (every write already raised
IN_MODIFY). It also leaves out "folder modified", which watchdog adds beside every
create, delete, move and close in a folder. Each atomic write memoryd makes in a
workspace (HEARTBEAT.md, state.json: create, write, close, rename) would otherwise cost
watchdog's thread eight events instead of four; with thousands of workspaces they also
overflow the kernel queue, after which watchdog re-walks the whole tree (see
bench/README.md, scale).
"""
MOVE_PAIRING_WAIT = 0.02
"""How long watchdog holds the first half of a rename to pair it with the second.

watchdog's default is 0.5 s, and its queue is first in, first out: every event behind an
unpaired half waits with it, so an append could reach the loop up to half a second late
after any rename in the tree (memoryd's own atomic writes are renames). The kernel
reports both halves of a rename together, so pairing needs far less; and memoryd does
not need the pairing at all (both paths of a move are handled, paired or not)."""
RAISE_LIMIT_HINT = (
    "raise the limit with: sudo sysctl fs.inotify.max_user_watches=524288 "
    "(and fs.inotify.max_user_instances=1024)"
)


@dataclass(frozen=True, slots=True)
class Missed:
    """The watch of ``root`` may have lost events (``reason``: "overflow", the kernel's
    queue overflowed; "watch_failed", a new folder could not be watched): rescan it."""

    root: str
    reason: str


@dataclass(frozen=True, slots=True)
class FsChange:
    """A path something happened to; ``is_folder`` when it is (or was) a folder."""

    path: str
    is_folder: bool


class Enqueuer(FileSystemEventHandler):
    """Puts every touched path on ``changes``; never raises."""

    def __init__(self, changes: queue.SimpleQueue[object]) -> None:
        self.changes = changes

    def on_any_event(self, event: FileSystemEvent) -> None:
        try:
            if event.event_type in ("opened", "closed_no_write"):
                return
            src = _text(event.src_path)
            if not own_file(src):
                self.changes.put(FsChange(src, event.is_directory))
            dest = _text(getattr(event, "dest_path", ""))
            if dest and not own_file(dest):
                self.changes.put(FsChange(dest, event.is_directory))
        except Exception:  # one raised here would kill the observer thread
            return


def own_file(path: str) -> bool:
    """A file memoryd itself writes in a workspace (anything under .memoryd, HEARTBEAT.md,
    a temp file), which :func:`classify` would ignore: dropped before it reaches the
    loop, since a first start writes several per workspace (pure)."""
    if f"/{META}/" in path or path.endswith(f"/{META}"):
        return True
    name = path.rpartition("/")[2]
    return name == HEARTBEAT or is_temp_name(name)


def _text(path: str | bytes) -> str:
    return path.decode(errors="surrogateescape") if isinstance(path, bytes) else path


def classify(path: Path, is_folder: bool, root: Path, max_depth: int) -> tuple[Kind, Path]:
    """What a changed path means for memoryd, and the workspace or folder it concerns (pure).

    ``conversation``: a workspace's conversation.jsonl (the workspace is returned);
    ``store``: a memory store file (the workspace); ``folder``: a folder that may hold new
    workspaces (the folder); ``ignore``: memoryd's own files, temp files and the rest.
    """
    try:
        relative = path.relative_to(root)
    except ValueError:
        return "ignore", path
    parts = relative.parts
    if any(part == META for part in parts) or is_temp_name(path.name):
        return "ignore", path
    if is_folder:
        if any(part.startswith(".") for part in parts) or len(parts) > max_depth:
            return "ignore", path
        return "folder", path
    if path.name == CONVERSATION and len(parts) - 1 <= max_depth:
        return "conversation", path.parent
    if len(parts) >= 2 and parts[-2] == "memory" and path.suffix == ".jsonl":
        return "store", path.parent.parent
    return "ignore", path


def count_folders(root: Path) -> int:
    """Folders at and below ``root`` that a watch of it needs: hidden and symlinked folders
    are neither entered nor counted (the watch does not enter them, nor does discovery)."""
    total = 1
    for _folder, dirs, _ in os.walk(root):
        dirs[:] = [name for name in dirs if not name.startswith(".")]
        total += sum(1 for name in dirs if not os.path.islink(os.path.join(_folder, name)))
    return total


def start_observer(
    root: Path, changes: queue.SimpleQueue[object], max_depth: int | None = None, walk: bool = True
) -> tuple[BaseObserver, bool]:
    """Watch ``root`` recursively; returns the observer and whether it polls.

    With ``max_depth`` the folders more than ``max_depth + 1`` levels below ``root`` are
    not watched: no workspace is there, nor the ``memory`` folder of one. Without
    ``walk`` only ``root`` is watched at first: the caller's first scan adds the folders
    it lists (``TreeObserver.watch_folder``), then calls :func:`poll_if_short`.

    When inotify has run out of watches (or instances), the root is polled instead,
    with one clear warning that says how to raise the limit. watchdog raises only when
    the root itself cannot be watched and stays silent for a subfolder, so the watch
    counts the folders it could not watch (:mod:`memoryd.daemon.inotify_tree`).
    """
    handler = Enqueuer(changes)
    InotifyMoveEventGrouper.delay = MOVE_PAIRING_WAIT

    def missed(reason: str) -> None:
        changes.put(Missed(str(root), reason))

    observer = TreeObserver(None if max_depth is None else max_depth + 1, walk, missed)
    try:
        observer.schedule(handler, str(root), recursive=True, event_filter=WATCHED_EVENTS)
        observer.start()
    except OSError as exc:
        if exc.errno not in INOTIFY_LIMIT_ERRNOS:
            raise
        with contextlib.suppress(Exception):
            observer.stop()
        return _poll(root, handler, count_folders(root)), True
    return poll_if_short(observer, root, changes)


def poll_if_short(
    observer: BaseObserver, root: Path, changes: queue.SimpleQueue[object]
) -> tuple[BaseObserver, bool]:
    """``observer`` again, or, when it could not watch every folder below ``root`` for
    want of inotify watches, a polling observer of ``root`` (with one warning)."""
    missing = observer.unwatched() if isinstance(observer, TreeObserver) else 0
    if missing <= 0:
        if isinstance(observer, TreeObserver):
            observer.scanned()
        return observer, False
    observer.stop()
    observer.join(timeout=5)
    return _poll(root, Enqueuer(changes), missing), True


def _poll(root: Path, handler: FileSystemEventHandler, missing: int) -> BaseObserver:
    log.warning(
        "inotify_limit_reached",
        root=str(root),
        folders_unwatched=missing,
        fallback="polling",
        hint=RAISE_LIMIT_HINT,
    )
    poller = PollingObserver(timeout=1.0)
    poller.schedule(handler, str(root), recursive=True)
    poller.start()
    return poller
