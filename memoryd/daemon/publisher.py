"""The publisher: what the daemon writes about a workspace (state.json, events,
HEARTBEAT.md) and about itself (the systemd STATUS line).

A write that fails (a full disk, a symlink that is refused, a folder where a file should
be) never stops the daemon: it is logged once per workspace and reason, retried with
back-off, and its recovery is logged too (docs/design.md#daemon).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import structlog

from memoryd.daemon import systemd
from memoryd.daemon.folders import Folders
from memoryd.daemon.tracked import Tracked, write_failed, write_succeeded
from memoryd.errors import MemorydError
from memoryd.levels import should_emit_event
from memoryd.published import events
from memoryd.published.heartbeat import Heartbeat, HeartbeatManager
from memoryd.published.state import WorkspaceState, build_state, numbers_key, write_state

T = TypeVar("T")
log = structlog.get_logger()

Wake = Callable[[Tracked, float], None]


def describe(exc: BaseException) -> str:
    """One short reason for a failed write (``No space left on device``)."""
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return str(exc)


class Publisher:
    """Writes a workspace's numbers and events; says the daemon's STATUS to systemd."""

    def __init__(self, env: Mapping[str, str], wake: Wake) -> None:
        self.env = env
        self.wake = wake
        self.last_status = ""
        self.state_listeners: list[Callable[[Tracked, WorkspaceState], None]] = []
        """Called with every state built (metrics hook here); must not raise."""

    # ----- one workspace ----------------------------------------------------------------

    def publish(
        self, tracked: Tracked, now: float, wall: float, folders: Folders | None = None
    ) -> None:
        """state.json when the numbers changed; threshold_changed when the level did.

        ``folders``: the workspace's folders, already open (the tidy after READY).
        """
        settings = tracked.settings
        tally = tracked.reader.tally
        state = build_state(
            tracked.workspace,
            settings,
            messages=tally.messages,
            tokens=tracked.tokens,
            summarizing=tracked.job is not None and tracked.job.kind == "summarize",
            last_summary_at=tracked.last_summary_at,
            now=wall,
            malformed_lines=tally.malformed,
            calibration=tracked.calibration,
        )
        level = state.level
        if should_emit_event(tracked.level, level) and not (
            tracked.level is None and level == "normal"
        ):
            self.emit(
                tracked,
                "threshold_changed",
                now,
                previous=tracked.level,
                level=level,
                action=state.action,
                usage_ratio=state.usage_ratio,
                tokens=state.tokens,
            )
            log.info(
                "threshold_changed",
                workspace=str(tracked.workspace.path),
                from_level=tracked.level,
                to_level=level,
                usage_ratio=state.usage_ratio,
            )
        tracked.level = level
        for listener in self.state_listeners:
            listener(tracked, state)
        numbers = numbers_key(state.numbers())
        if numbers == tracked.state_numbers or now < tracked.write_retry_at:
            return

        def write() -> bool:
            # What the reader counted goes with it: a restart takes it back without
            # reading the conversation while the file is unchanged (docs/design.md#scale-start).
            counted = tracked.reader.counted()
            if folders is not None:
                folders.write_state(state, counted)
            else:
                write_state(tracked.workspace, state, counted)
            return True

        if self.write(tracked, "state.json", now, write):
            tracked.state_numbers = numbers

    def emit(self, tracked: Tracked, type_: str, now: float, **details: Any) -> bool:
        """Append one event to the workspace's events.jsonl; False when it cannot."""

        def append() -> bool:
            events.emit(tracked.workspace, type_, **details)
            return True

        return self.write(tracked, "events.jsonl", now, append) is not None

    def heartbeat(
        self, tracked: Tracked, now: float, change: Callable[[HeartbeatManager], Heartbeat]
    ) -> Heartbeat | None:
        """Apply ``change`` to the workspace's HEARTBEAT.md; the heartbeat written, or None
        when it cannot be."""
        return self.write(
            tracked, "HEARTBEAT.md", now, lambda: change(HeartbeatManager(tracked.workspace))
        )

    def write(self, tracked: Tracked, what: str, now: float, write: Callable[[], T]) -> T | None:
        """``write()``, one of the daemon's writes to ``tracked``'s file ``what``: what it
        gave, or None when it failed (:meth:`failed`)."""
        try:
            written = write()
        except (OSError, MemorydError) as exc:
            self.failed(tracked, what, exc, now)
            return None
        self.succeeded(tracked, what)
        return written

    def failed(self, tracked: Tracked, what: str, exc: BaseException, now: float) -> None:
        """A write for ``tracked`` failed: log it once per reason, and retry later."""
        if write_failed(tracked, what, describe(exc), now):
            log.warning(
                "workspace_unwritable",
                workspace=str(tracked.workspace.path),
                file=what,
                error=describe(exc),
                hint="retried with back-off; nothing else is affected",
            )
        self.wake(tracked, tracked.write_retry_at)

    @staticmethod
    def succeeded(tracked: Tracked, what: str) -> None:
        """A write for ``tracked`` worked: log the recovery if it had failed."""
        if tracked.unwritable is not None:
            reason = write_succeeded(tracked, what)
            if reason is not None:
                log.info(
                    "workspace_writable_again",
                    workspace=str(tracked.workspace.path),
                    file=what,
                    was=reason,
                )

    # ----- the daemon -------------------------------------------------------------------

    def status(self, workspaces: int, running: int, polled: list[Path]) -> None:
        """The one-line STATUS systemd shows; sent only when it changed."""
        noun = "workspace" if workspaces == 1 else "workspaces"
        status = f"watching {workspaces} {noun}, {running} summarizing"
        if polled:
            status += f" ({len(polled)} roots polled: inotify limit)"
        if status != self.last_status:
            systemd.notify(f"STATUS={status}", self.env)
            self.last_status = status
