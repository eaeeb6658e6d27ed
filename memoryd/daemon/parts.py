"""What the supervisor's parts share: the daemon's state, declared once.

:class:`~memoryd.daemon.supervisor.Supervisor` is built from two mixins over this state,
each in its own module: :class:`~memoryd.daemon.workspaces.WorkspaceTracking` (finding,
tracking and tidying workspaces) and :class:`~memoryd.daemon.dispatch.JobDispatch`
(counting, the backlog, dispatching jobs and their outcomes). See docs/design.md#daemon.
"""

from __future__ import annotations

import abc
import queue
from collections import Counter, deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from memoryd.config.settings import Settings
from memoryd.daemon.folders import TidyStep
from memoryd.daemon.hooks import DaemonHooks
from memoryd.daemon.pool import WorkerPool
from memoryd.daemon.publisher import Publisher
from memoryd.daemon.root_watchers import RootWatchers
from memoryd.daemon.scheduler import Scheduler
from memoryd.daemon.telemetry import Telemetry
from memoryd.daemon.tracked import Tracked
from memoryd.llm.limits import LearnedLimit


class DaemonParts(abc.ABC):
    """The state the supervisor owns (set in its ``__init__``) and the two calls its
    mixins make of each other."""

    settings: Settings
    env: dict[str, str]
    notes: queue.SimpleQueue[object]
    scheduler: Scheduler
    watchers: RootWatchers
    publisher: Publisher
    pool: WorkerPool
    telemetry: Telemetry
    hooks: list[DaemonHooks]
    jobs: dict[Path, tuple[int, Future[Any]]]
    backlog: dict[Path, tuple[str, str, float | None]]
    api_jobs: dict[Path, str]
    """Jobs in flight on an LLM backend, with the backend's name."""
    context_limits: dict[str, LearnedLimit]
    """Servers' contexts learned from overflows, kept for the daemon's lifetime."""
    unclaimed: dict[Path, tuple[int, float, str | None]]
    """Jobs whose worker has not checked in yet: their id, when the daemon checks in for
    each next, and the ``last_checkin`` it wrote last."""
    pending_init: deque[tuple[Path, TidyStep]]
    """Workspaces to tidy after READY, with what their tidy must do (folders.tidy_step)."""
    untidy: set[Path]
    skipped_workspaces: set[str]
    """Workspaces not taken (symlinked), each logged once."""
    interrupted: set[Path]
    """Workspaces whose state.json said a job was running (the tidy fails that job)."""
    tidied: Counter[str]
    """What the tidy did since the start, by step (logged once the start's tidy is done)."""
    stopping_since: float | None
    folder_stamps: dict[Path, dict[str, int]]
    """By root, the mtime of each folder its last walk listed (discovery.stamps_hold)."""

    @abc.abstractmethod
    def process(self, tracked: Tracked, now: float, publish: bool = True) -> None:
        """Count what ``tracked`` gained and act on it (implemented by ``JobDispatch``)."""

    @abc.abstractmethod
    def _tidy(self, path: Path, now: float, step: TidyStep | None = None) -> None:
        """Tidy a workspace after READY (implemented by ``WorkspaceTracking``)."""
