"""ContextMonitor: an agent's own context usage, persisted for orchestrators that poll.

An agent written in Python feeds the monitor what enters its context
(:meth:`ContextMonitor.track_content`) and gets back what to do at the current level.
The state is rewritten atomically to ``<workspace>/.memoryd/monitors/<agent_id>.json``
on every change, and a ``threshold_changed`` event goes to the workspace's events.jsonl
only when the level changes. ``memoryd status`` shows a monitor as stale when it is
active but has not checked in for ``stale_after`` seconds.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.conversation.lines import uuid4_text
from memoryd.defaults import DEFAULT_CRITICAL_AT, DEFAULT_TOKEN_LIMIT, DEFAULT_WARNING_AT
from memoryd.errors import InputError, MemorydError
from memoryd.files.fsutil import atomic_write
from memoryd.files.regular import read_file
from memoryd.levels import (
    Level,
    ThresholdAction,
    detect_threshold,
    get_threshold_action,
    should_emit_event,
)
from memoryd.published import events
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MONITOR_MAX_BYTES = 1 << 20
"""A monitor's state file holds a few hundred bytes; a larger one is not a monitor's."""


@dataclass(frozen=True, slots=True)
class MonitorState:
    """What an orchestrator reads from a monitor's file."""

    agent_id: str
    session_id: str
    active: bool
    started_at: str | None
    last_heartbeat: str | None
    cumulative_chars: int
    estimated_tokens: int
    token_limit: int
    usage_ratio: float
    threshold_status: Level
    current_task: str | None
    tasks_completed: int
    tasks_total: int


def monitor_path(workspace: Path, agent_id: str) -> Path:
    """Where the monitor of ``agent_id`` keeps its state."""
    return Workspace(workspace).meta / "monitors" / f"{agent_id}.json"


class ContextMonitor:
    """Tracks one agent's context usage; see the module docstring.

    ``clock`` returns epoch seconds (tests pass a fixed one). Budget and thresholds
    default to the daemon's (``token_limit``, ``warning_at``, ``critical_at``) and tokens
    are estimated as characters / 4.
    """

    def __init__(
        self,
        workspace: Path,
        agent_id: str,
        *,
        session_id: str | None = None,
        token_limit: int = DEFAULT_TOKEN_LIMIT,
        warning_at: float = DEFAULT_WARNING_AT,
        critical_at: float = DEFAULT_CRITICAL_AT,
        tasks_total: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not AGENT_ID.match(agent_id):
            raise InputError(
                f"agent id {agent_id!r}: use letters, digits, '.', '_' or '-' (at most 128)"
            )
        if token_limit <= 0:
            raise InputError(f"token_limit {token_limit!r}: must be a positive number")
        self.workspace = Workspace(workspace)
        self.path = monitor_path(workspace, agent_id)
        self.warning_at = warning_at
        self.critical_at = critical_at
        self._clock = clock
        self._state = MonitorState(
            agent_id=agent_id,
            session_id=session_id or uuid4_text(),
            active=False,
            started_at=None,
            last_heartbeat=None,
            cumulative_chars=0,
            estimated_tokens=0,
            token_limit=token_limit,
            usage_ratio=0.0,
            threshold_status="normal",
            current_task=None,
            tasks_completed=0,
            tasks_total=tasks_total,
        )

    def _save(self, **changes: Any) -> MonitorState:
        self._state = replace(self._state, **changes)
        data = strict_json.dumps(asdict(self._state), indent=2).encode() + b"\n"
        atomic_write(self.path, data, root=self.workspace.path)
        return self._state

    def start(self) -> MonitorState:
        """Mark the monitor active from now and write its file."""
        now = iso_ms(self._clock())
        return self._save(active=True, started_at=now, last_heartbeat=now)

    def track_content(self, text: str) -> ThresholdAction:
        """Count ``text`` into the context; returns the action for the resulting level."""
        chars = self._state.cumulative_chars + len(text)
        tokens = (chars + 3) // 4
        ratio = tokens / self._state.token_limit
        level = detect_threshold(ratio, warning_at=self.warning_at, critical_at=self.critical_at)
        previous = self._state.threshold_status
        now = self._clock()
        self._save(
            cumulative_chars=chars,
            estimated_tokens=tokens,
            usage_ratio=round(ratio, 4),
            threshold_status=level,
            last_heartbeat=iso_ms(now),
        )
        action = get_threshold_action(level)
        if should_emit_event(previous, level):
            events.emit(
                self.workspace,
                "threshold_changed",
                now=now,
                source=f"agent:{self._state.agent_id}",
                agent_id=self._state.agent_id,
                previous=previous,
                level=level,
                usage_ratio=round(ratio, 4),
                action=action.action,
            )
        return action

    def update_heartbeat(self) -> MonitorState:
        """Record that the agent is alive (for stale detection)."""
        return self._save(last_heartbeat=iso_ms(self._clock()))

    def set_current_task(self, task: str | None) -> MonitorState:
        """Name the task the agent is working on."""
        return self._save(current_task=task, last_heartbeat=iso_ms(self._clock()))

    def complete_task(self) -> MonitorState:
        """Count one more completed task and clear the current one."""
        done = self._state.tasks_completed + 1
        return self._save(
            tasks_completed=done,
            tasks_total=max(self._state.tasks_total, done),
            current_task=None,
            last_heartbeat=iso_ms(self._clock()),
        )

    def get_state(self) -> MonitorState:
        """The current state (as last written)."""
        return self._state

    def get_threshold_action(self) -> ThresholdAction:
        """The action for the current level."""
        return get_threshold_action(self._state.threshold_status)

    def stop(self) -> MonitorState:
        """Mark the monitor inactive (an orchestrator then knows the agent is done)."""
        return self._save(active=False, last_heartbeat=iso_ms(self._clock()))


def read_monitors(workspace: Path, stale_after: float, now: float) -> list[dict[str, Any]]:
    """The monitors of a workspace, each with ``stale`` (active but silent too long).

    A state file that is not a regular file (never waited on) or not strict JSON is
    left out."""
    folder = Workspace(workspace).meta / "monitors"
    found: list[dict[str, Any]] = []
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("*.json")):
        try:
            state = strict_json.loads(read_file(path, MONITOR_MAX_BYTES))
        except (OSError, MemorydError, ValueError):
            continue
        if not isinstance(state, dict):
            continue
        beat = _parse_iso(state.get("last_heartbeat"))
        state["stale"] = bool(state.get("active")) and (beat is None or now - beat > stale_after)
        found.append(state)
    return found


def _parse_iso(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        moment = time.strptime(value[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    import calendar  # only when a monitor's time is read

    return float(calendar.timegm(moment))
