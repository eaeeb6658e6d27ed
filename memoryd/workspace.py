"""Where things live in a workspace (docs/design.md#workspace)."""

from __future__ import annotations

from pathlib import Path

from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

CONVERSATION = "conversation.jsonl"
META = ".memoryd"
HEARTBEAT = "HEARTBEAT.md"


class Workspace(Value):
    """The files of one workspace; cheap to build, picklable, does no I/O.

    A :class:`~memoryd.value.Value` (equal by its path) rather than a dataclass: every
    per-turn command imports this module, and :mod:`dataclasses` costs half an
    interpreter's start (docs/design.md#startup)."""

    __slots__ = ("path",)

    def __init__(self, path: Path) -> None:
        self.path: Final = path

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
