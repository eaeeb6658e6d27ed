"""``.memoryd/events.jsonl``: one JSON event per line, for orchestrators and people."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.files.fsutil import append_line
from memoryd.files.regular import read_file
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def event_line(workspace: Workspace, type_: str, now: float, details: dict[str, Any]) -> bytes:
    """The bytes of one event line (pure)."""
    record = {"ts": iso_ms(now), "type": type_, "workspace": str(workspace.path), **details}
    return strict_json.dumps(record).encode() + b"\n"


def emit(workspace: Workspace, type_: str, now: float | None = None, **details: Any) -> None:
    """Append one event to the workspace's ``events.jsonl`` (created if missing).

    ``details`` carry ids, counts and sizes only, never message text. All or nothing:
    raises UnsafePathError for a symlink in the way (``.memoryd`` or the file itself) and
    OSError when the line cannot be written (a full disk); the file is then unchanged.
    """
    moment = time.time() if now is None else now
    line = event_line(workspace, type_, moment, details)
    append_line(workspace.events, line, root=workspace.path)


def read_events(path: Path) -> Iterator[dict[str, Any]]:
    """The events in ``path``, oldest first; lines that are not JSON objects are skipped.

    UnsafePathError for a FIFO, socket or device at ``path`` (never waited on).
    """
    try:
        raw = read_file(path)
    except FileNotFoundError:
        return
    for line in raw.splitlines():
        try:
            record = strict_json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record
