"""``memoryd status``: the numbers, level, strategy and heartbeat of workspaces."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from memoryd.conversation import ConversationReader
from memoryd.discovery import find_workspaces
from memoryd.errors import InputError, MemorydError
from memoryd.heartbeat import HeartbeatManager
from memoryd.monitor import read_monitors
from memoryd.state import (
    BudgetSettings,
    build_state,
    read_state,
    saved_calibration,
    saved_time,
)
from memoryd.workspace import Workspace


class StatusConfig(BudgetSettings, Protocol):
    """What status needs of the settings: a ``Settings``, or the fast path's
    ``memoryd.config_fast.StatusSettings`` (which does not import pydantic)."""

    @property
    def roots(self) -> list[Path]: ...

    @property
    def max_depth(self) -> int: ...

    @property
    def max_line_bytes(self) -> int: ...

    @property
    def stale_after(self) -> float: ...


ForWorkspace = Callable[[Path], StatusConfig]
"""A workspace's effective settings (its ``.memoryd/config.toml`` applied)."""


def full_for_workspace(settings: StatusConfig) -> ForWorkspace:
    """``settings_for_workspace`` over a full ``Settings``."""
    from memoryd.config import Settings, settings_for_workspace

    if not isinstance(settings, Settings):
        raise TypeError("a workspace's settings are derived from a full Settings")
    return lambda workspace: settings_for_workspace(settings, workspace)


def workspaces_at(path: Path, max_depth: int) -> list[Path]:
    """``path`` itself when it is a workspace, else every workspace below it."""
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    if not path.is_dir():
        raise InputError(f"{path}: is not a folder")
    if Workspace(path).conversation.is_file():
        return [path]
    return list(find_workspaces(path, max_depth))


def workspace_status(
    path: Path, settings: StatusConfig, now: float, for_workspace: ForWorkspace | None = None
) -> dict[str, Any]:
    """The state.json fields of one workspace, counted now, plus strategy and heartbeat.

    ``for_workspace`` gives the workspace's effective settings (default: from ``settings``,
    which must then be a full ``Settings``)."""
    workspace = Workspace(path.absolute())
    effective = (for_workspace or full_for_workspace(settings))(workspace.path)
    reader = ConversationReader(workspace.conversation, effective.max_line_bytes)
    reader.update()
    saved = read_state(workspace) or {}
    calibration = saved_calibration(saved)
    state = build_state(
        workspace,
        effective,
        messages=reader.tally.messages,
        tokens=round(reader.tally.tokens * calibration),
        summarizing=saved.get("summarizing") is True,
        last_summary_at=saved_time(saved),
        now=now,
        malformed_lines=reader.tally.malformed,
        calibration=calibration,
    )
    row = asdict(state)
    row["heartbeat"] = HeartbeatManager(workspace).get_status().as_dict()
    row["monitors"] = read_monitors(workspace.path, effective.stale_after, now)
    return row


def collect_status(
    paths: Sequence[Path], settings: StatusConfig, for_workspace: ForWorkspace | None = None
) -> list[dict[str, Any]]:
    """Status rows for every workspace at or under ``paths``, sorted by path."""
    now = time.time()
    effective_of = for_workspace or full_for_workspace(settings)
    found: list[Path] = []
    for path in paths:
        found.extend(workspaces_at(path.expanduser(), settings.max_depth))
    if len(found) == 1:  # the one workspace asked for: its error is the answer
        return [workspace_status(found[0], settings, now, effective_of)]
    return [_status_or_error(path, settings, now, effective_of) for path in sorted(set(found))]


def _status_or_error(
    path: Path, settings: StatusConfig, now: float, for_workspace: ForWorkspace
) -> dict[str, Any]:
    """One workspace's row; a workspace that cannot be read (its own configuration refused,
    a file unreadable) gets a row with ``error`` instead of hiding every other row."""
    try:
        return workspace_status(path, settings, now, for_workspace)
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
