"""The watcher drops events for memoryd's own files before they reach the daemon's loop;
it must drop only what ``classify`` would ignore anyway (pure, no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memoryd.daemon.fs_events import classify, own_file
from memoryd.daemon.inotify_tree import own_name
from memoryd.files.fsutil import temp_name

ROOT = Path("/agents")
WS = ROOT / "team" / "ws"

OWN = [
    WS / ".memoryd",
    WS / ".memoryd" / "state.json",
    WS / ".memoryd" / "job.lock",
    WS / ".memoryd" / "archive" / "conversation-1.jsonl",
    WS / "HEARTBEAT.md",
    temp_name(WS / "HEARTBEAT.md"),
    temp_name(WS / "conversation.jsonl"),
    temp_name(WS / ".memoryd" / "state.json"),
]
NOT_OWN = [
    WS / "conversation.jsonl",
    WS / "memory" / "facts.jsonl",
    WS,
    ROOT / "team",
    WS / "notes.md",
    ROOT / ".memoryd-like" / "conversation.jsonl",
]


def shown(path: Path) -> str:
    """The test id of ``path``: a temp name without its process id and random part, so
    that every process collecting the tests names them alike (pytest-xdist's workers)."""
    text = str(path)
    return text[: text.index("-tmp-") + len("-tmp")] if "-tmp-" in text else text


@pytest.mark.parametrize("path", OWN, ids=shown)
def test_memoryd_own_files_are_dropped_and_classify_ignores_them(path: Path) -> None:
    assert own_file(str(path))
    assert classify(path, path.name == ".memoryd", ROOT, 4)[0] == "ignore"


@pytest.mark.parametrize("path", NOT_OWN, ids=shown)
def test_conversations_stores_and_folders_still_reach_the_loop(path: Path) -> None:
    assert not own_file(str(path))


@pytest.mark.parametrize("path", [*OWN, *NOT_OWN], ids=shown)
def test_the_watch_drops_by_name_only_what_the_handler_drops_by_path(path: Path) -> None:
    """The watch drops the events of a name in a watched folder before watchdog builds
    them (own_name); it must never drop one that own_file would let through."""
    if own_name(path.name.encode()):
        assert own_file(str(path))
