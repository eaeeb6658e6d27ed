"""The scheduler: the registry of tracked workspaces and when each must be looked at.

Pure over ``now`` (it never reads the clock): leading-edge coalescing of changes, retries
of failed jobs and writes, and the periodic rescan. Due times sit in a heap, so a loop
step costs what is due, not a scan of every workspace (docs/design.md#daemon).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from pathlib import Path

from memoryd.daemon.tracked import Tracked, idle_due_at


class Scheduler:
    """Which workspaces exist, and which are due at ``now``."""

    def __init__(self, coalesce_seconds: float, rescan_interval: float) -> None:
        self.coalesce = coalesce_seconds
        self.rescan_interval = rescan_interval
        self.next_rescan = 0.0
        self._tracked: dict[Path, Tracked] = {}
        self._heap: list[tuple[float, int, Path]] = []
        self._order = itertools.count()

    # ----- the registry -----------------------------------------------------------------

    def add(self, tracked: Tracked) -> None:
        self._tracked[tracked.workspace.path] = tracked

    def remove(self, path: Path) -> Tracked | None:
        return self._tracked.pop(path, None)

    def get(self, path: Path) -> Tracked | None:
        return self._tracked.get(path)

    def __contains__(self, path: object) -> bool:
        return path in self._tracked

    def __len__(self) -> int:
        return len(self._tracked)

    def __iter__(self) -> Iterator[Tracked]:
        return iter(list(self._tracked.values()))

    def paths(self) -> list[Path]:
        return list(self._tracked)

    # ----- due times --------------------------------------------------------------------

    def schedule(self, tracked: Tracked, now: float) -> None:
        """A change: act at once, then at most once per coalescing window (leading edge)."""
        if tracked.noticed_at is None:
            tracked.noticed_at = now  # the start of trigger-to-dispatch
        if tracked.due_at is not None:
            return
        tracked.due_at = max(now, tracked.last_processed + self.coalesce)
        self._push(tracked, tracked.due_at)

    def wake_at(self, tracked: Tracked, when: float) -> None:
        """Look at ``tracked`` again at ``when`` (a retry after a failed job or write)."""
        self._push(tracked, when)

    def wake_when_idle(self, tracked: Tracked, now: float) -> None:
        """Look at ``tracked`` again when it will have been idle long enough to compact.

        At most one such wake is pending per workspace: when it comes early (the agent
        wrote meanwhile), the look it causes sets the next one (docs/design.md#idle-compaction).
        """
        idle_at = idle_due_at(tracked)
        if idle_at is None or idle_at <= now:
            return
        if tracked.idle_wake_at is not None and now < tracked.idle_wake_at <= idle_at:
            return
        tracked.idle_wake_at = idle_at
        self._push(tracked, idle_at)

    def _push(self, tracked: Tracked, when: float) -> None:
        heapq.heappush(self._heap, (when, next(self._order), tracked.workspace.path))

    def due(self, now: float) -> list[Tracked]:
        """The workspaces to look at now, each once, in due order."""
        found: list[Tracked] = []
        seen: set[Path] = set()
        while self._heap and self._heap[0][0] <= now:
            _, _, path = heapq.heappop(self._heap)
            tracked = self._tracked.get(path)
            if tracked is None or path in seen:
                continue
            if tracked.due_at is not None and tracked.due_at > now:
                continue  # a later entry of the heap stands for it
            tracked.due_at = None
            seen.add(path)
            found.append(tracked)
        return found

    def next_deadline(self) -> float:
        """The earliest moment something is due (a workspace or the rescan)."""
        first = self._heap[0][0] if self._heap else self.next_rescan
        return min(first, self.next_rescan)

    # ----- rescans and reloads ----------------------------------------------------------

    def rescan_due(self, now: float) -> bool:
        return now >= self.next_rescan

    def rescan_now(self, now: float) -> None:
        """A rescan is needed at once (the watch may have missed something)."""
        self.next_rescan = min(self.next_rescan, now)

    def rescanned(self, now: float) -> None:
        self.next_rescan = now + self.rescan_interval

    def reload(self, coalesce_seconds: float, rescan_interval: float, now: float) -> None:
        """New timings; every workspace is looked at again, and the roots rescanned, now.

        The caller has given each workspace its new settings: a new budget means new
        numbers, and maybe a job.
        """
        self.coalesce = coalesce_seconds
        self.rescan_interval = rescan_interval
        self.next_rescan = now
        for tracked in self._tracked.values():
            tracked.ineffective_tokens = None
            tracked.state_numbers = None
            self.schedule(tracked, now)
