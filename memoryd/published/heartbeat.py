"""HEARTBEAT.md: the current task status of a workspace (docs/design.md#heartbeat).

Front matter between ``---`` lines, one ``key: value`` per line, then a short body for
people. memoryd and agents both write it, each rewrite atomic and under a small lock
of its own, so a read-modify-write by one never undoes the other's.
"""

from __future__ import annotations

import contextlib
import errno
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.errors import MemorydError
from memoryd.files.fsutil import atomic_write, flocked, replace_in
from memoryd.files.paths import folder_in, named
from memoryd.files.regular import read_file
from memoryd.workspace import HEARTBEAT, Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Literal

    Status = Literal["idle", "active", "completed", "failed", "paused"]
STATUSES: tuple[str, ...] = ("idle", "active", "completed", "failed", "paused")
"""The values of ``Status`` (typing is not imported at run time; a test holds the two
equal)."""
FIELDS = (
    "status",
    "current_task",
    "started_at",
    "last_checkin",
    "last_result",
    "last_error",
    "notes",
    "blockers",
)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The front matter of HEARTBEAT.md as values."""

    status: Status = "idle"
    current_task: str | None = None
    started_at: str | None = None
    last_checkin: str | None = None
    last_result: str | None = None
    last_error: str | None = None
    notes: str | None = None
    blockers: str | None = None

    def as_dict(self) -> dict[str, str | None]:
        """The fields in file order."""
        return {name: getattr(self, name) for name in FIELDS}


def _scalar(value: str | None) -> str:
    if value is None:
        return "null"
    plain = (
        value
        and value == value.strip()
        and value not in ("null", "true", "false", "~")
        and ": " not in value
        and " #" not in value
        and not value.endswith(":")
        and not any(c in value for c in "\n\"'")
        and value[0] not in "[]{}&*!|>%@`-,?"
    )
    return value if plain else json.dumps(value, ensure_ascii=False)


def render(heartbeat: Heartbeat) -> str:
    """The full text of HEARTBEAT.md for ``heartbeat`` (pure)."""
    lines = ["---"]
    for name, value in heartbeat.as_dict().items():
        if value is None and name in ("notes", "blockers"):
            continue
        lines.append(f"{name}: {_scalar(value)}")
    lines.append("---")
    lines.append("")
    lines.append("# Heartbeat")
    lines.append("")
    if heartbeat.status == "active":
        lines.append(f"**Active** since {heartbeat.started_at}: {heartbeat.current_task}.")
        lines.append(f"Last check-in {heartbeat.last_checkin}.")
    elif heartbeat.status == "completed":
        lines.append(f"**Completed** at {heartbeat.last_checkin}: {heartbeat.last_result}.")
    elif heartbeat.status == "failed":
        lines.append(f"**Failed** at {heartbeat.last_checkin}: {heartbeat.last_error}.")
    elif heartbeat.status == "paused":
        lines.append(f"**Paused** at {heartbeat.last_checkin}: {heartbeat.current_task}.")
        if heartbeat.notes:
            lines.append(f"Notes: {heartbeat.notes}")
        if heartbeat.blockers:
            lines.append(f"Blockers: {heartbeat.blockers}")
    else:
        lines.append("**Idle**: no task is running.")
    return "\n".join(lines) + "\n"


_MARK = "\x00"
_IDLE_HEAD, _IDLE_TAIL = render(Heartbeat(last_checkin=_MARK)).split(_MARK)
_IDLE_HEAD_BYTES, _IDLE_TAIL_BYTES = _IDLE_HEAD.encode(), _IDLE_TAIL.encode()
_ISO_MS = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def is_clean_idle(data: bytes) -> bool:
    """True when ``data`` is a clean idle heartbeat as :func:`render_idle` writes it (a
    time as :func:`memoryd.clock.iso_ms` writes it, in the template): a restart on
    thousands of unchanged workspaces then parses none (pure). False says nothing: the
    text may still be a valid heartbeat, for :func:`parse` to read."""
    head, tail = len(_IDLE_HEAD_BYTES), len(_IDLE_TAIL_BYTES)
    return (
        len(data) > head + tail
        and data.startswith(_IDLE_HEAD_BYTES)
        and data.endswith(_IDLE_TAIL_BYTES)
        and _ISO_MS.fullmatch(data, head, len(data) - tail) is not None
    )


def render_idle(last_checkin: str) -> str:
    """``render(Heartbeat(last_checkin=last_checkin))``, a clean idle heartbeat, from a
    template made once: a start writes one in every new workspace (pure)."""
    if _scalar(last_checkin) != last_checkin:
        return render(Heartbeat(last_checkin=last_checkin))
    return f"{_IDLE_HEAD}{last_checkin}{_IDLE_TAIL}"


def parse(text: str) -> Heartbeat | None:
    """The heartbeat in ``text``, or None when it is missing, empty or garbled (pure)."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return None
    try:
        closing = next(i for i, line in enumerate(lines[1:], 1) if line.strip() == "---")
    except StopIteration:
        return None
    values: dict[str, str | None] = {}
    for line in lines[1:closing]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, raw = line.partition(":")
        key = key.strip()
        if not sep or key not in FIELDS:
            return None
        values[key] = _parse_scalar(raw)
    if values.get("status") not in STATUSES:
        return None
    return Heartbeat(**values)  # type: ignore[arg-type]  # status checked against STATUSES


def _parse_scalar(raw: str) -> str | None:
    raw = raw.strip()
    if raw.startswith('"'):
        try:
            value = strict_json.loads(raw)
        except ValueError:
            return raw
        return value if isinstance(value, str) else str(value)
    if " #" in raw:
        raw = raw.split(" #", 1)[0].rstrip()
    if raw in ("", "null", "~"):
        return None
    return raw


class HeartbeatManager:
    """The HEARTBEAT.md lifecycle of one workspace: idle → active → completed|failed → idle.

    Every call rewrites the file atomically; a missing, empty or garbled file is replaced
    by a clean one. ``clock`` returns epoch seconds (tests pass a fixed one).
    """

    def __init__(self, workspace: Workspace | Path, clock: Callable[[], float] = time.time) -> None:
        self.workspace = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self._clock = clock

    def get_status(self) -> Heartbeat:
        """The current heartbeat; idle when the file is missing or garbled.

        A FIFO, socket or device at HEARTBEAT.md is refused (UnsafePathError), never
        waited on or read without end (docs/design.md#regular-files).
        """
        return parse(self._text()) or Heartbeat()

    def _text(self) -> str:
        try:
            raw = read_file(self.workspace.heartbeat)
        except FileNotFoundError:
            return ""
        return raw.decode("utf-8", errors="replace")

    def _update(
        self, change: Callable[[Heartbeat, str], Heartbeat], durable: bool = True
    ) -> Heartbeat:
        lock = self.workspace.meta / "heartbeat.lock"
        with flocked(lock, root=self.workspace.path):
            new = change(self.get_status(), iso_ms(self._clock()))
            self._write(render(new).encode(), durable)
        return new

    def _write(self, data: bytes, durable: bool) -> None:
        """Replace HEARTBEAT.md, its temp file staged in the unwatched ``.memoryd`` so that
        the daemon's watcher sees one event (docs/design.md#scale-start)."""
        root = self.workspace.path
        with folder_in(root, root) as folder, folder_in(root, self.workspace.meta) as staging:
            try:
                replace_in(folder, HEARTBEAT, data, durable=durable, staging=staging)
            except OSError as exc:
                if exc.errno != errno.EXDEV:  # .memoryd on another file system
                    raise named(exc, self.workspace.heartbeat) from None
                atomic_write(self.workspace.heartbeat, data, root=root, durable=durable)

    def start_task(self, description: str) -> Heartbeat:
        """Mark a task active from now."""
        return self._update(
            lambda old, now: replace(
                old,
                status="active",
                current_task=description,
                started_at=now,
                last_checkin=now,
                last_error=None,
                notes=None,
                blockers=None,
            )
        )

    def checkin(self) -> Heartbeat:
        """Advance ``last_checkin`` of an active task; other states are left as they are."""
        return self._update(
            lambda old, now: replace(old, last_checkin=now) if old.status == "active" else old
        )

    def complete_task(self, result: str | None = None) -> Heartbeat:
        """Mark the task completed, with a one-line ``result`` (default: the task itself)."""
        return self._end_task(
            "completed", None, lambda old: old.current_task if result is None else result
        )

    def fail_task(self, error: str, result: str | None = None) -> Heartbeat:
        """Mark the task failed with its reason (the lifecycle: failed, then idle). With
        ``result`` the task did end (a job that compacted but left usage above its
        trigger): it is recorded as the last result."""
        return self._end_task(
            "failed", error, lambda old: old.last_result if result is None else result
        )

    def _end_task(
        self, status: Status, error: str | None, result: Callable[[Heartbeat], str | None]
    ) -> Heartbeat:
        """End the task with ``status``: it and its start time are cleared, as no task is
        current any more, and ``result(old)`` becomes the last result."""
        return self._update(
            lambda old, now: replace(
                old,
                status=status,
                current_task=None,
                started_at=None,
                last_checkin=now,
                last_result=result(old),
                last_error=error,
            )
        )

    def pause_task(self, notes: str | None = None, blockers: str | None = None) -> Heartbeat:
        """Mark the task paused, with what to resume from and what blocks it."""
        return self._update(
            lambda old, now: replace(
                old, status="paused", last_checkin=now, notes=notes, blockers=blockers
            )
        )

    def reset(self, durable: bool = True) -> Heartbeat:
        """Back to a clean idle heartbeat (``durable=False``: renamed into place, not
        fsynced)."""
        return self._update(lambda _old, now: Heartbeat(last_checkin=now), durable)

    def ensure_clean(self, durable: bool = True) -> bool:
        """Replace a missing, empty or garbled HEARTBEAT.md by a clean idle one.

        Returns True when the file was replaced. Checked again under the heartbeat lock,
        so a task another process has just started is never replaced.
        """
        if self._parsed() is not None:
            return False
        lock = self.workspace.meta / "heartbeat.lock"
        with flocked(lock, root=self.workspace.path):
            if self._parsed() is not None:
                return False
            clean = Heartbeat(last_checkin=iso_ms(self._clock()))
            self._write(render(clean).encode(), durable)
        return True

    def _parsed(self) -> Heartbeat | None:
        return parse(self._text())

    @contextlib.contextmanager
    def checkins(self, interval: float, immediately: bool = False) -> Iterator[None]:
        """Advance ``last_checkin`` every ``interval`` seconds while inside (a running job),
        and at once with ``immediately`` (a job taking over from the daemon's check-ins).

        A check-in that cannot be written is skipped: the job goes on.
        """
        stop = threading.Event()

        def beat() -> None:
            # OSError, or UnsafePathError for a symlink or a FIFO put at HEARTBEAT.md.
            if immediately:
                with contextlib.suppress(OSError, MemorydError):
                    self.checkin()
            while not stop.wait(interval):
                with contextlib.suppress(OSError, MemorydError):
                    self.checkin()

        thread = threading.Thread(target=beat, name="memoryd-checkin", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
