"""``memoryd status``: the numbers, level, strategy and heartbeat of workspaces."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from memoryd.conversation.lines import Line
from memoryd.conversation.reader import ConversationReader
from memoryd.discovery import find_workspaces
from memoryd.errors import InputError, MemorydError
from memoryd.files.paths import read_in
from memoryd.media import media_in
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.published.monitor import read_monitors
from memoryd.published.state import (
    BUDGET_FIELDS,
    BudgetSettings,
    build_state,
    read_state,
    recorded_budget,
    saved_calibration,
    saved_time,
)
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Protocol

    class StatusConfig(BudgetSettings, Protocol):
        """What status needs of the settings: a ``Settings``, or the fast path's
        ``memoryd.config.fast.StatusSettings`` (which does not import pydantic)."""

        @property
        def roots(self) -> list[Path]: ...

        @property
        def max_depth(self) -> int: ...

        @property
        def max_line_bytes(self) -> int: ...

        @property
        def stale_after(self) -> float: ...

else:
    StatusConfig = object  # typing is not imported at run time (see memoryd.levels)


ForWorkspace = Callable[[Path], StatusConfig]
"""A workspace's effective settings (its ``.memoryd/config.toml`` applied)."""


def full_for_workspace(settings: StatusConfig) -> ForWorkspace:
    """``settings_for_workspace`` over a full ``Settings``."""
    from memoryd.config.settings import Settings, settings_for_workspace

    if not isinstance(settings, Settings):
        raise TypeError("a workspace's settings are derived from a full Settings")
    return lambda workspace: settings_for_workspace(settings, workspace)


STRATEGIES = ("narrative", "rolling", "checkpoint")


@dataclass(frozen=True, slots=True)
class Budget:
    """The budget a workspace is counted against, and where its token limit came from:
    ``workspace`` (its ``.memoryd/config.toml``), ``daemon`` (what the daemon recorded in
    state.json) or ``config`` (the configuration this command read, or the defaults)."""

    token_limit: int
    warning_at: float
    critical_at: float
    strategy: str
    source: str


def budget_of(
    configured: BudgetSettings,
    workspace_keys: frozenset[str],
    recorded: Mapping[str, Any] | None = None,
) -> Budget:
    """The budget to count a workspace against (pure).

    ``configured`` is this command's configuration with the workspace's own config applied
    (``workspace_keys``: the keys that file sets). With ``recorded`` (what the daemon wrote
    to state.json) that holds a usable token limit, the daemon's values replace the
    configured ones except for the keys the workspace's file sets, which the daemon applied
    as well. A recorded value the configuration would refuse (a limit not above 0,
    thresholds outside (0, 1] or out of order, an unknown strategy) is not used.
    """
    values: dict[str, Any] = {name: getattr(configured, name) for name in BUDGET_FIELDS}
    used = recorded is not None and _acceptable("token_limit", recorded.get("token_limit"))
    for name, value in (recorded or {}).items() if used else ():
        if name in values and name not in workspace_keys and _acceptable(name, value):
            values[name] = value
    if not values["warning_at"] <= values["critical_at"]:
        values["warning_at"], values["critical_at"] = configured.warning_at, configured.critical_at
    return Budget(
        token_limit=values["token_limit"],
        warning_at=float(values["warning_at"]),
        critical_at=float(values["critical_at"]),
        strategy=values["strategy"],
        source="workspace" if "token_limit" in workspace_keys else "daemon" if used else "config",
    )


def _acceptable(name: str, value: Any) -> bool:
    if name == "token_limit":
        return type(value) is int and value > 0
    if name == "strategy":
        return value in STRATEGIES
    return type(value) in (int, float) and math.isfinite(value) and 0 < value <= 1


def workspace_keys(workspace: Workspace) -> frozenset[str]:
    """The keys ``<workspace>/.memoryd/config.toml`` sets (none when it cannot be read:
    the workspace's effective settings have refused such a file already)."""
    try:
        raw = read_in(workspace.path, workspace.config)
        from memoryd.config import toml_cache  # only for a workspace with its own file

        return frozenset(toml_cache.parsed(raw, workspace.config))
    except (OSError, ValueError, MemorydError):
        return frozenset()


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
    path: Path,
    settings: StatusConfig,
    now: float,
    for_workspace: ForWorkspace | None = None,
    *,
    daemon_budget: bool = False,
) -> dict[str, Any]:
    """The state.json fields of one workspace, counted now, plus strategy, heartbeat and
    ``budget_source``.

    ``for_workspace`` gives the workspace's effective settings (default: from ``settings``,
    which must then be a full ``Settings``). With ``daemon_budget`` the budget is the one
    the daemon recorded in the workspace's state.json, when there is one (see
    :func:`budget_of`; docs/design.md#state)."""
    workspace = Workspace(path.absolute())
    effective = (for_workspace or full_for_workspace(settings))(workspace.path)
    reader = ConversationReader(workspace.conversation, effective.max_line_bytes)
    lines = reader.update().new_lines
    saved = read_state(workspace) or {}
    recorded = recorded_budget(saved) if daemon_budget else None
    budget = budget_of(effective, workspace_keys(workspace), recorded)
    calibration = saved_calibration(saved)
    state = build_state(
        workspace,
        budget,
        messages=reader.tally.messages,
        tokens=round(reader.tally.tokens * calibration),
        summarizing=saved.get("summarizing") is True,
        last_summary_at=saved_time(saved),
        now=now,
        malformed_lines=reader.tally.malformed,
        calibration=calibration,
    )
    row = asdict(state)
    row["budget_source"] = budget.source
    row["media"] = media_share(lines, reader.tally.tokens)
    row["heartbeat"] = HeartbeatManager(workspace).get_status().as_dict()
    row["monitors"] = read_monitors(workspace.path, effective.stale_after, now)
    return row


def media_share(lines: Sequence[Line], tokens: int) -> dict[str, Any]:
    """The images and documents a conversation holds (in tool results too), their tokens
    as the estimate counts them (uncalibrated) and their share of all its tokens (pure)."""
    found = [m for line in lines if line.message for m in media_in(line.message.get("content"))]
    media_tokens = sum(m.tokens for m in found)
    return {
        "images": sum(m.kind == "image" for m in found),
        "documents": sum(m.kind == "document" for m in found),
        "tokens": media_tokens,
        "share": round(media_tokens / tokens, 4) if tokens else 0.0,
    }


def media_cell(media: Mapping[str, Any] | None) -> str:
    """The MEDIA column: ``2 img, 1 doc (41%)``, or ``-`` when there is none."""
    if not media or not (media["images"] or media["documents"]):
        return "-"
    parts = [f"{media['images']} img"] if media["images"] else []
    parts += [f"{media['documents']} doc"] if media["documents"] else []
    return f"{', '.join(parts)} ({media['share']:.0%})"


def collect_status(
    paths: Sequence[Path],
    settings: StatusConfig,
    for_workspace: ForWorkspace | None = None,
    *,
    daemon_budget: bool = False,
) -> list[dict[str, Any]]:
    """Status rows for every workspace at or under ``paths``, sorted by path (``daemon_budget``:
    see :func:`workspace_status`)."""
    now = time.time()
    effective_of = for_workspace or full_for_workspace(settings)
    found: list[Path] = []
    for path in paths:
        found.extend(workspaces_at(path.expanduser(), settings.max_depth))
    if len(found) == 1:  # the one workspace asked for: its error is the answer
        return [
            workspace_status(found[0], settings, now, effective_of, daemon_budget=daemon_budget)
        ]
    return [
        _status_or_error(path, settings, now, effective_of, daemon_budget)
        for path in sorted(set(found))
    ]


def _status_or_error(
    path: Path, settings: StatusConfig, now: float, for_workspace: ForWorkspace, daemon: bool
) -> dict[str, Any]:
    """One workspace's row; a workspace that cannot be read (its own configuration refused,
    a file unreadable) gets a row with ``error`` instead of hiding every other row."""
    try:
        return workspace_status(path, settings, now, for_workspace, daemon_budget=daemon)
    except MemorydError as err:
        return {"workspace": str(path.absolute()), "error": str(err)}
    except OSError as err:
        reason = err.strerror or str(err)
        where = f"{err.filename}: " if err.filename else ""
        return {"workspace": str(path.absolute()), "error": f"{where}{reason}"}


def render_status_table(rows: Sequence[dict[str, Any]]) -> str:
    """A readable table, one workspace a line; BUDGET says where each token limit came
    from (see :class:`Budget`)."""
    header = (
        "WORKSPACE",
        "MESSAGES",
        "TOKENS",
        "USAGE",
        "LEVEL",
        "STRATEGY",
        "BUDGET",
        "MEDIA",
        "HEARTBEAT",
    )
    table = [header]
    for row in rows:
        if "error" in row:
            table.append((row["workspace"], "", "", "", "error", "", "", "", str(row["error"])))
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
                row["budget_source"],
                media_cell(row.get("media")),
                beat,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        + "\n"
        for line in table
    )
