"""What other parts of memoryd (metrics, say) can hear from the daemon's loop.

Subclass :class:`DaemonHooks`, override what you need and add an instance to
``Supervisor.hooks``. Every hook runs in the loop's thread, must be quick and must not
raise (docs/design.md#daemon).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memoryd.compaction.job.request import JobResult
    from memoryd.config.settings import Settings
    from memoryd.daemon.tracked import Tracked


class DaemonHooks:
    """No-op hooks; override the ones you need."""

    def started(self, now: float) -> None:
        """The daemon is READY."""

    def tick(self, now: float) -> None:
        """One loop step ended."""

    def counted(self, tracked: Tracked, new_lines: int, malformed: int, now: float) -> None:
        """A workspace's appended lines were counted (``malformed`` of them not JSON objects)."""

    def dispatched(self, tracked: Tracked, kind: str, reason: str, now: float) -> None:
        """A job of ``kind`` (``summarize`` or ``stores``) was handed to the pool."""

    def finished(self, tracked: Tracked, result: JobResult, now: float) -> None:
        """A summarization job returned (any outcome)."""

    def lost(self, tracked: Tracked | None, reason: str, its_fault: bool, now: float) -> None:
        """A job raised, or its worker died (``its_fault``), or the pool failed it."""

    def pool_rebuilt(self) -> None:
        """A worker died and the pool was rebuilt."""

    def reloaded(self, settings: Settings) -> None:
        """A new configuration was applied."""

    def closed(self) -> None:
        """The daemon stopped."""
