"""``memoryd status``: the numbers, level, strategy and heartbeat of workspaces."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from memoryd.config import Settings, settings_for_workspace
from memoryd.conversation import ConversationReader
from memoryd.discovery import find_workspaces
from memoryd.errors import InputError, MemorydError
from memoryd.heartbeat import HeartbeatManager
from memoryd.monitor import read_monitors
from memoryd.state import build_state, read_state
from memoryd.workspace import Workspace


def workspaces_at(path: Path, max_depth: int) -> list[Path]:
    """``path`` itself when it is a workspace, else every workspace below it."""
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if not path.is_dir():
        raise InputError(f"{path}: is not a folder")
    if Workspace(path).conversation.is_file():
        return [path]
    return list(find_workspaces(path, max_depth))


def workspace_status(path: Path, settings: Settings, now: float) -> dict[str, Any]:
    """The state.json fields of one workspace, counted now, plus strategy and heartbeat."""
    workspace = Workspace(path.absolute())
    effective = settings_for_workspace(settings, workspace.path)
    reader = ConversationReader(workspace.conversation, effective.max_line_bytes)
    reader.update()
    saved = read_state(workspace) or {}
    calibration = float(saved.get("calibration", 1.0))
    state = build_state(
        workspace,
        effective,
        messages=reader.tally.messages,
        tokens=round(reader.tally.tokens * calibration),
        summarizing=bool(saved.get("summarizing", False)),
        last_summary_at=saved.get("last_summary_at"),
        now=now,
        malformed_lines=reader.tally.malformed,
        calibration=calibration,
    )
    row = asdict(state)
    row["heartbeat"] = HeartbeatManager(workspace).get_status().as_dict()
    row["monitors"] = read_monitors(workspace.path, effective.stale_after, now)
    return row


def collect_status(paths: Sequence[Path], settings: Settings) -> list[dict[str, Any]]:
    """Status rows for every workspace at or under ``paths``, sorted by path."""
    now = time.time()
    found: list[Path] = []
    for path in paths:
        found.extend(workspaces_at(path.expanduser(), settings.max_depth))
    if len(found) == 1:  # the one workspace asked for: its error is the answer
        return [workspace_status(found[0], settings, now)]
    return [_status_or_error(path, settings, now) for path in sorted(set(found))]


def _status_or_error(path: Path, settings: Settings, now: float) -> dict[str, Any]:
    """One workspace's row; a workspace that cannot be read (its own configuration refused,
    a file unreadable) gets a row with ``error`` instead of hiding every other row."""
    try:
        return workspace_status(path, settings, now)
    except MemorydError as err:
        return {"workspace": str(path.absolute()), "error": str(err)}
    except OSError as err:
        reason = err.strerror or str(err)
        where = f"{err.filename}: " if err.filename else ""
        return {"workspace": str(path.absolute()), "error": f"{where}{reason}"}


def render_status_table(rows: Sequence[dict[str, Any]]) -> str:
    """A readable table, one workspace a line."""
    header = ("WORKSPACE", "MESSAGES", "TOKENS", "USAGE", "LEVEL", "STRATEGY", "HEARTBEAT")
    table = [header]
    for row in rows:
        if "error" in row:
            table.append((row["workspace"], "", "", "", "error", "", str(row["error"])))
            continue
        heartbeat = row["heartbeat"]
        beat = heartbeat["status"]
        if row.get("summarizing"):
            beat += " (summarizing)"
        stale = [m["agent_id"] for m in row.get("monitors", ()) if m.get("stale")]
        if stale:
            beat += f" (stale monitor: {', '.join(stale)})"
        table.append(
            (
                row["workspace"],
                str(row["messages"]),
                f"{row['tokens']:,}/{row['token_limit']:,}",
                f"{row['usage_ratio']:.0%}",
                row["level"],
                row["strategy"],
                beat,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        + "\n"
        for line in table
    )
