"""Yardsticks for a start on many workspaces: the least work the same start must do.

Not a benchmark itself; ``bench/scale.py`` times these loops over a twin of the tree the
daemon starts on (same layout, same files), in the same run, and reports every start-up
figure as a ratio to its floor. Absolute seconds do not carry from one machine (or one
hour of a shared disk) to the next; a ratio to work measured beside it does.

- **Write floor**: what a first start must do at least. Per workspace: read
  ``conversation.jsonl`` (to count it), create ``.memoryd/`` and write two small files,
  ``HEARTBEAT.md`` and ``.memoryd/state.json``, each by a temp file and a rename.
- **Read floor**: what a restart on unchanged workspaces must do at least. Per
  workspace: read its three files (the conversation, HEARTBEAT.md, state.json).

Both find the workspaces the way discovery does (``os.scandir`` down to ``max_depth``,
hidden folders skipped) and are the plainest Python: ``Path.read_bytes``,
``Path.write_bytes`` and ``Path.replace``; no parsing, no locks, no fsync (the daemon
fsyncs neither file).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CONVERSATION = "conversation.jsonl"
HEARTBEAT = b"---\nstatus: idle\ncurrent_task: null\nstarted_at: null\nlast_checkin: " + (
    b"2026-01-01T00:00:00.000Z\nlast_result: null\nlast_error: null\n---\n\n# Heartbeat\n\n"
    b"**Idle**: no task is running.\n"
)
"""As long as the clean HEARTBEAT.md memoryd writes."""
STATE = b"{" + b" " * 360 + b"}\n"
"""As long as a small workspace's state.json."""


def workspaces(root: Path, max_depth: int = 4) -> list[str]:
    """The folders holding a conversation.jsonl, at most ``max_depth`` below ``root``."""
    found: list[str] = []
    stack = [(os.fspath(root), 0)]
    while stack:
        folder, depth = stack.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name == CONVERSATION:
                    found.append(folder)
                elif depth < max_depth and entry.name[0] != "." and entry.is_dir():
                    stack.append((entry.path, depth + 1))
    return found


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def write_floor(root: Path) -> float:
    """Seconds to do a first start's least work on every workspace under ``root``."""
    started = time.perf_counter()
    for folder in workspaces(root):
        workspace = Path(folder)
        (workspace / CONVERSATION).read_bytes()
        (workspace / ".memoryd").mkdir()
        _replace(workspace / "HEARTBEAT.md", HEARTBEAT)
        _replace(workspace / ".memoryd" / "state.json", STATE)
    return time.perf_counter() - started


def read_floor(root: Path) -> float:
    """Seconds to read the three files of every workspace under ``root`` (after
    :func:`write_floor` made them)."""
    started = time.perf_counter()
    for folder in workspaces(root):
        workspace = Path(folder)
        (workspace / CONVERSATION).read_bytes()
        (workspace / "HEARTBEAT.md").read_bytes()
        (workspace / ".memoryd" / "state.json").read_bytes()
    return time.perf_counter() - started
