"""A silent idle daemon: the roots are walked when the watch may have missed something
(an inotify queue overflow, a root that came back), and the periodic safety net walks
only the roots whose folders changed (docs/design.md#idle-rescan).

A Supervisor stepped in process, with a safety net an hour away, so that whatever is
found here is found by the path under test and not by a periodic rescan."""

from __future__ import annotations

import errno
import os
import queue
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_harness import wait_until
from daemon_workspaces import append_lines, write_lines
from structlog.testing import capture_logs

from memoryd.config.settings import load_settings
from memoryd.daemon import workspaces
from memoryd.daemon.fs_events import FsChange, Missed
from memoryd.daemon.inotify_tree import BatchedInotifyFD, TreeObserver
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.supervisor import Supervisor
from memoryd.discovery import scan_workspaces

HOUR = 3600.0
OVERFLOW = struct.pack("iIII", -1, 0x00004000, 0, 0)
"""An IN_Q_OVERFLOW event as the kernel writes it in the buffer read: watch -1, no name."""


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    root = tmp_path / "root"
    root.mkdir()
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {
        "roots": [str(root)],
        "workers": 1,
        "coalesce_ms": 0,
        "drain_seconds": 0,
        "rescan_interval": HOUR,
        "summarizer.backend": "extractive",
    }
    daemon = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    try:
        yield daemon
    finally:
        daemon.close()


def root_of(supervisor: Supervisor) -> Path:
    return supervisor.settings.roots[0]


def messages(supervisor: Supervisor, workspace: Path) -> int | None:
    tracked = supervisor.scheduler.get(workspace)
    return None if tracked is None else tracked.reader.tally.messages


def step_until(supervisor: Supervisor, what: str, check: object) -> None:
    def stepped() -> bool:
        supervisor.loop(wait=0.05)
        return bool(check() if callable(check) else check)

    wait_until(stepped, 20, what, interval=0)


class Overflowing:
    """The inotify reader (every :class:`BatchedInotifyFD`) as when the kernel's queue
    overflows: while ``on``, what the kernel queued is read and dropped, and the first
    read gets the kernel's IN_Q_OVERFLOW event in its place. Everything after the buffer
    (parsing, watchdog's handling, memoryd's report) is the real code."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, report: bool = True) -> None:
        self.on = False
        self.report = report
        """False: the events are dropped and no overflow is said (a loss nobody saw)."""
        self.dropped = 0
        self.lock = threading.Lock()
        read = BatchedInotifyFD._read_event_buffer

        def overflowing(reader: BatchedInotifyFD, size: int) -> bytes:
            buffer = read(reader, size)
            with self.lock:
                if not self.on or not buffer:
                    return buffer
                self.dropped += 1
                return OVERFLOW if self.dropped == 1 and self.report else b""

        monkeypatch.setattr(BatchedInotifyFD, "_read_event_buffer", overflowing)


def drain(notes: queue.SimpleQueue[object]) -> list[object]:
    taken = []
    while True:
        try:
            taken.append(notes.get_nowait())
        except queue.Empty:
            return taken


def test_a_change_made_while_the_inotify_queue_overflowed_is_found(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = root_of(supervisor)
    ws = root / "ws"
    write_lines(ws, "w", 3)
    overflow = Overflowing(monkeypatch)
    supervisor.start()
    step_until(supervisor, "the workspace counted", lambda: messages(supervisor, ws) == 3)
    assert isinstance(supervisor.watchers.observers[root], TreeObserver)
    with overflow.lock:
        overflow.on = True
    append_lines(ws, "w", 3, 2)  # an append to a known workspace
    write_lines(root / "new", "n", 4)  # and a workspace made meanwhile
    wait_until(lambda: overflow.dropped >= 1, 10, "the reader to read the events")
    time.sleep(0.3)  # the rest of the events, read and dropped too
    with overflow.lock:
        overflow.on = False
    # The events are lost: what reached the loop is the watch's report, nothing else.
    notes = drain(supervisor.notes)
    assert [n for n in notes if isinstance(n, Missed)] == [Missed(str(root), "overflow")]
    assert not [n for n in notes if isinstance(n, FsChange)]
    for note in notes:
        supervisor.notes.put(note)
    with capture_logs() as logs:
        step_until(
            supervisor,
            "both changes found",
            lambda: messages(supervisor, ws) == 5 and messages(supervisor, root / "new") == 4,
        )
    assert supervisor.scheduler.next_rescan > time.monotonic() + HOUR / 2  # not the net
    missed = [e for e in logs if e["event"] == "watch_missed_events"]
    assert [(e["root"], e["reason"]) for e in missed] == [(str(root), "overflow")]
    # The watch is whole again: a later append is seen as it happens.
    append_lines(ws, "w", 5, 1)
    step_until(supervisor, "a later append seen", lambda: messages(supervisor, ws) == 6)


def test_a_root_that_comes_back_is_watched_and_walked(supervisor: Supervisor) -> None:
    root = root_of(supervisor)
    root.rmdir()
    supervisor.start()
    assert root not in supervisor.watchers
    write_lines(root / "ws", "w", 2)
    step_until(supervisor, "the root watched", lambda: root in supervisor.watchers)
    step_until(supervisor, "its workspace found", lambda: messages(supervisor, root / "ws") == 2)
    # Watched again: a workspace made now is found by its events.
    write_lines(root / "later", "l", 1)
    step_until(
        supervisor, "a later workspace found", lambda: messages(supervisor, root / "later") == 1
    )


def test_a_root_replaced_by_another_folder_is_watched_anew(supervisor: Supervisor) -> None:
    root = root_of(supervisor)
    write_lines(root / "ws", "w", 2)
    supervisor.start()
    step_until(supervisor, "counted", lambda: messages(supervisor, root / "ws") == 2)
    root.rename(root.with_name("old-root"))
    write_lines(root / "other", "o", 3)
    step_until(supervisor, "the new root walked", lambda: messages(supervisor, root / "other") == 3)
    step_until(
        supervisor, "the old workspace gone", lambda: root / "ws" not in supervisor.scheduler
    )


def age(folder: Path) -> None:
    """Every folder at and below ``folder`` an hour old (a stamp taken now is trusted)."""
    past = time.time() - HOUR
    for path in [folder, *(p for p in folder.rglob("*") if p.is_dir())]:
        os.utime(path, (past, past))


def test_the_safety_net_walks_only_a_root_whose_folders_changed(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = root_of(supervisor)
    write_lines(root / "g" / "ws", "w", 2)
    lost = Overflowing(monkeypatch, report=False)
    supervisor.start()
    step_until(supervisor, "counted", lambda: messages(supervisor, root / "g" / "ws") == 2)
    walks: list[Path] = []

    def counted_scan(top: Path, *args: object, **kwargs: object) -> object:
        walks.append(top)
        return scan_workspaces(top, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(workspaces, "scan_workspaces", counted_scan)
    age(root)
    # The first safety net walks, stamps taken.
    supervisor.workspaces.rescan(time.monotonic(), set())
    assert walks == [root]
    supervisor.workspaces.rescan(time.monotonic(), set())
    assert walks == [root]  # nothing changed: no walk

    # An append whose events were lost unseen: the net finds it with one stat, no walk.
    with lost.lock:
        lost.on = True
    append_lines(root / "g" / "ws", "w", 2, 1)
    wait_until(lambda: lost.dropped >= 1, 10, "the reader to read the events")
    with lost.lock:
        lost.on = False
    assert messages(supervisor, root / "g" / "ws") == 2
    supervisor.workspaces.rescan(time.monotonic(), set())
    assert walks == [root]
    step_until(
        supervisor, "the append counted", lambda: messages(supervisor, root / "g" / "ws") == 3
    )

    # A new workspace changes its folder's mtime: the root is walked.
    write_lines(root / "g" / "new", "n", 1)
    supervisor.workspaces.rescan(time.monotonic(), set())
    assert walks == [root, root]
    assert messages(supervisor, root / "g" / "new") is not None


def test_a_rescan_asked_for_comes_before_the_safety_net() -> None:
    plan = Scheduler(0.2, HOUR)
    plan.rescanned(10.0)
    assert not plan.rescan_due(11.0)
    plan.rescan_now(11.0)
    assert plan.rescan_due(11.0)
    assert plan.next_deadline() == 11.0
    plan.rescanned(11.0)
    assert plan.next_rescan == 11.0 + HOUR


def test_a_stamp_too_recent_to_trust_is_never_taken_as_unchanged(tmp_path: Path) -> None:
    from memoryd.discovery import stamps_hold

    write_lines(tmp_path / "ws", "w", 1)
    stamps: dict[str, int] = {}
    scan_workspaces(tmp_path, 2, None, stamps)
    assert set(stamps) == {str(tmp_path), str(tmp_path / "ws")}
    assert not stamps_hold(stamps)  # just written: within the same clock tick maybe
    age(tmp_path)
    stamps.clear()
    scan_workspaces(tmp_path, 2, None, stamps)
    assert stamps_hold(stamps)
    (tmp_path / "ws" / "x").mkdir()
    assert not stamps_hold(stamps)


def test_a_folder_that_cannot_be_watched_after_the_start_makes_the_root_polled(
    supervisor: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = root_of(supervisor)
    write_lines(root / "ws", "w", 1)
    supervisor.start()
    step_until(supervisor, "counted", lambda: messages(supervisor, root / "ws") == 1)
    add = BatchedInotifyFD.add_callback

    def no_watch_left(reader: BatchedInotifyFD, path: bytes, *args: object) -> object:
        if path != os.fsencode(root):
            raise OSError(errno.ENOSPC, "inotify watches ran out")
        return add(reader, path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(BatchedInotifyFD, "add_callback", no_watch_left)
    with capture_logs() as logs:
        write_lines(root / "new", "n", 2)  # its folder cannot be watched
        step_until(supervisor, "the root polled", lambda: root in supervisor.watchers.polling)
        step_until(supervisor, "the new workspace", lambda: messages(supervisor, root / "new") == 2)
    reasons = [e["reason"] for e in logs if e["event"] == "watch_missed_events"]
    assert reasons == ["watch_failed"]
    assert [e for e in logs if e["event"] == "inotify_limit_reached"]
