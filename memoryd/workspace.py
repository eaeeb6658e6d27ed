"""Where things live in a workspace (docs/design.md#workspace)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONVERSATION = "conversation.jsonl"
META = ".memoryd"
HEARTBEAT = "HEARTBEAT.md"


@dataclass(frozen=True, slots=True)
class Workspace:
    """The files of one workspace; cheap to build, picklable, does no I/O."""

    path: Path

    @property
    def conversation(self) -> Path:
        return self.path / CONVERSATION

    @property
    def heartbeat(self) -> Path:
        return self.path / HEARTBEAT

    @property
    def checkpoint(self) -> Path:
        return self.path / "checkpoint.json"

    @property
    def memory_dir(self) -> Path:
        return self.path / "memory"

    @property
    def meta(self) -> Path:
        return self.path / META

    @property
    def lock(self) -> Path:
        return self.meta / "lock"

    @property
    def job_lock(self) -> Path:
        """Held (flock, non-blocking) by whoever runs a job on this workspace."""
        return self.meta / "job.lock"

    @property
    def state(self) -> Path:
        return self.meta / "state.json"

    @property
    def events(self) -> Path:
        return self.meta / "events.jsonl"

    @property
    def archive_dir(self) -> Path:
        return self.meta / "archive"

    @property
    def config(self) -> Path:
        return self.meta / "config.toml"

    def store(self, name: str) -> Path:
        """The file of memory store ``name`` (bookmarks, todos, decisions, lessons)."""
        return self.memory_dir / f"{name}.jsonl"
