"""memoryd's watcher on a real folder (real inotify through watchdog): memoryd's own
writes in a workspace reach the loop as nothing at all, while what an agent does still
does: an append through a file kept open, a new conversation, a new workspace folder, a
conversation renamed into place, a memory store written. Hidden folders (``.memoryd``
first) are not watched at all: what is written there costs the watcher nothing."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest
from watchdog.events import FileSystemEvent, FileSystemEventHandler

from memoryd.daemon.fs_events import WATCHED_EVENTS, FsChange, start_observer
from memoryd.daemon.inotify_tree import TreeEmitter, TreeObserver
from memoryd.discovery import scan_workspaces
from memoryd.files.fsutil import atomic_write, create_in, replace_in
from memoryd.published.heartbeat import HeartbeatManager


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, queue.SimpleQueue[object]]]:
    root = tmp_path / "root"
    (root / "ws").mkdir(parents=True)
    (root / "ws" / "conversation.jsonl").write_text('{"role": "user", "content": "hi"}\n')
    changes: queue.SimpleQueue[object] = queue.SimpleQueue()
    observer, polling = start_observer(root, changes)
    assert not polling
    yield root, changes
    observer.stop()
    observer.join(timeout=10)


def drained(changes: queue.SimpleQueue[object], settle: float = 0.7) -> list[FsChange]:
    """Every change that arrives until none has for ``settle`` seconds (watchdog holds a
    rename's first half for 0.5 s to pair it with the second)."""
    found: list[FsChange] = []
    while True:
        try:
            item = changes.get(timeout=settle)
        except queue.Empty:
            return found
        assert isinstance(item, FsChange)
        found.append(item)


class Counting(FileSystemEventHandler):
    """Every event watchdog hands over, memoryd's own files included."""

    def __init__(self) -> None:
        self.events: queue.SimpleQueue[FileSystemEvent] = queue.SimpleQueue()

    def on_any_event(self, event: FileSystemEvent) -> None:
        self.events.put(event)

    def drained(self, settle: float = 0.7) -> list[str]:
        found: list[str] = []
        while True:
            try:
                event = self.events.get(timeout=settle)
            except queue.Empty:
                return found
            found.append(f"{event.event_type} {os.fsdecode(event.src_path)}")


def inotify_watches() -> int:
    """inotify watches this process holds (``inotify wd:`` lines of its fdinfo)."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify":
                total += Path(f"/proc/self/fdinfo/{fd}").read_text().count("inotify wd:")
        except OSError:
            continue
    return total


def test_hidden_folders_are_not_watched_and_writes_there_raise_nothing(tmp_path: Path) -> None:
    """The root, the workspace and its memory/ are watched; .memoryd and .git are not, a
    first start's writes in .memoryd reach watchdog as nothing, and a .memoryd made while
    watching adds no watch and reaches watchdog as nothing either, while a .git does."""
    root = tmp_path / "root"
    for folder in ("ws/.memoryd/archive", "ws/memory", "ws/.git/objects", "new"):
        (root / folder).mkdir(parents=True)
    handler = Counting()
    before = inotify_watches()
    observer = TreeObserver()
    observer.schedule(handler, str(root), recursive=True, event_filter=WATCHED_EVENTS)
    observer.start()
    try:
        assert inotify_watches() - before == 4  # root, ws, ws/memory, new
        assert observer.unwatched() == 0
        meta = os.open(root / "ws" / ".memoryd", os.O_RDONLY | os.O_DIRECTORY)
        try:
            replace_in(meta, "state.json", b"{}\n", durable=False)
            (root / "ws" / ".memoryd" / "archive" / "conversation-1.jsonl").write_text("x\n")
        finally:
            os.close(meta)
        assert handler.drained() == []
        (root / "new" / ".memoryd").mkdir()
        (root / "new" / ".git").mkdir()
        assert handler.drained() == [f"created {root / 'new' / '.git'}"]
        assert inotify_watches() - before == 4
    finally:
        observer.stop()
        observer.join(timeout=10)


def test_a_first_start_costs_the_watcher_nothing(tmp_path: Path) -> None:
    """A first start's writes in a workspace (make .memoryd, HEARTBEAT.md staged in it and
    renamed into place, state.json) reach watchdog as nothing: the temp files and renames
    stay in the unwatched .memoryd, and the two events in the workspace's folder (the
    folder made, the heartbeat moved in) are dropped as they are read. An agent's file
    beside them still comes through."""
    root = tmp_path / "root"
    (root / "ws").mkdir(parents=True)
    handler = Counting()
    observer = TreeObserver()
    observer.schedule(handler, str(root), recursive=True, event_filter=WATCHED_EVENTS)
    observer.start()
    try:
        workspace = os.open(root / "ws", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.mkdir(".memoryd", dir_fd=workspace)
            meta = os.open(".memoryd", os.O_RDONLY | os.O_DIRECTORY, dir_fd=workspace)
            try:
                assert create_in(workspace, "HEARTBEAT.md", b"---\n", staging=meta)
                replace_in(meta, "state.json", b"{}\n", durable=False)
            finally:
                os.close(meta)
        finally:
            os.close(workspace)
        (root / "ws" / "notes.md").write_text("an agent's\n")
        assert handler.drained() == [
            f"created {root / 'ws' / 'notes.md'}",
            f"modified {root / 'ws' / 'notes.md'}",
        ]
    finally:
        observer.stop()
        observer.join(timeout=10)


def test_a_heartbeat_update_costs_the_watcher_nothing(tmp_path: Path) -> None:
    """HEARTBEAT.md is replaced with its temp file staged in .memoryd: a check-in raises
    one event, the rename into the workspace, dropped as it is read."""
    root = tmp_path / "root"
    (root / "ws" / ".memoryd").mkdir(parents=True)
    manager = HeartbeatManager(root / "ws")
    manager.start_task("a task")
    handler = Counting()
    observer = TreeObserver()
    observer.schedule(handler, str(root), recursive=True, event_filter=WATCHED_EVENTS)
    observer.start()
    try:
        manager.checkin()
        assert handler.drained() == []
    finally:
        observer.stop()
        observer.join(timeout=10)
    assert manager.get_status().status == "active"
    assert os.listdir(root / "ws" / ".memoryd") == ["heartbeat.lock"]


def test_memoryds_own_first_start_writes_reach_the_loop_as_nothing(
    watched: tuple[Path, queue.SimpleQueue[object]],
) -> None:
    root, changes = watched
    workspace = root / "ws"
    meta = workspace / ".memoryd"
    meta.mkdir()
    os.close(os.open(meta / "heartbeat.lock", os.O_CREAT | os.O_WRONLY, 0o644))
    atomic_write(workspace / "HEARTBEAT.md", b"status: idle\n", root=workspace, durable=False)
    atomic_write(meta / "state.json", b"{}\n", root=workspace, durable=False)

    assert drained(changes) == []


def test_what_an_agent_does_still_reaches_the_loop(
    watched: tuple[Path, queue.SimpleQueue[object]],
) -> None:
    root, changes = watched
    conversation = root / "ws" / "conversation.jsonl"
    with conversation.open("a") as kept_open:
        kept_open.write('{"role": "assistant", "content": "hello"}\n')
        kept_open.flush()
        assert FsChange(str(conversation), False) in drained(changes)

    (root / "new").mkdir()
    assert FsChange(str(root / "new"), True) in drained(changes)

    staged = root / "new" / "staged.tmp"
    staged.write_text('{"role": "user", "content": "moved in"}\n')
    drained(changes)
    staged.rename(root / "new" / "conversation.jsonl")
    assert FsChange(str(root / "new" / "conversation.jsonl"), False) in drained(changes)

    (root / "ws" / "memory").mkdir()
    drained(changes)
    (root / "ws" / "memory" / "todos.jsonl").write_text('{"text": "x"}\n')
    assert FsChange(str(root / "ws" / "memory" / "todos.jsonl"), False) in drained(changes)


def test_the_watch_stops_one_level_below_the_deepest_workspace(tmp_path: Path) -> None:
    """max_depth 1: the root (0), its folders (1) and theirs (2: a workspace's memory/)
    are watched, deeper ones are not, nor are they when made later."""
    root = tmp_path / "root"
    (root / "ws" / "memory" / "deep").mkdir(parents=True)
    changes: queue.SimpleQueue[object] = queue.SimpleQueue()
    before = inotify_watches()
    observer, polling = start_observer(root, changes, max_depth=1)
    try:
        assert not polling
        assert inotify_watches() - before == 3
        (root / "new" / "memory" / "deep").mkdir(parents=True)
        drained(changes)
        assert inotify_watches() - before == 5
    finally:
        observer.stop()
        observer.join(timeout=10)


def test_the_first_scan_adds_the_watches_of_the_folders_it_lists(tmp_path: Path) -> None:
    """Without its own walk the watch holds only the root; the first scan watches each
    folder before listing it (and a workspace's memory/ without listing it)."""
    root = tmp_path / "root"
    for name in ("a/ws", "b"):
        (root / name).mkdir(parents=True)
    (root / "a" / "ws" / "conversation.jsonl").write_text("{}\n")
    (root / "a" / "ws" / "memory").mkdir()
    changes: queue.SimpleQueue[object] = queue.SimpleQueue()
    before = inotify_watches()
    observer, _ = start_observer(root, changes, max_depth=2, walk=False)
    try:
        assert inotify_watches() - before == 1
        assert isinstance(observer, TreeObserver)
        found = scan_workspaces(root, 2, observer.watch_folder)
        assert [f.path for f in found] == [root / "a" / "ws"]
        assert inotify_watches() - before == 5  # root, a, b, a/ws, a/ws/memory
        (root / "a" / "ws" / "memory" / "todos.jsonl").write_text("{}\n")
        store = FsChange(str(root / "a" / "ws" / "memory" / "todos.jsonl"), False)
        assert store in drained(changes)
        # After an inotify queue overflow watchdog watches the tree again: walking it.
        for emitter in observer.emitters:
            assert isinstance(emitter, TreeEmitter) and emitter.group is not None
            emitter.group.on_queue_overflow()
        assert inotify_watches() - before == 5
    finally:
        observer.stop()
        observer.join(timeout=10)
