"""memoryd's watcher on a real folder (real inotify through watchdog): memoryd's own
writes in a workspace reach the loop as nothing at all, while what an agent does still
does: an append through a file kept open, a new conversation, a new workspace folder, a
conversation renamed into place, a memory store written."""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.fsutil import atomic_write
from memoryd.watch import FsChange, start_observer


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
