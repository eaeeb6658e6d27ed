"""What must hold in a workspace after a power cut and after what a user runs next
(docs/design.md#power-cut).

:func:`check_after_cut` runs, on a materialized crash state, what a daemon's start does
(:func:`memoryd.commit.recovery.recover`, then a clean HEARTBEAT.md), checks every file, runs
the next commands (an append, a memory write, an event, the index, optionally a job) and
checks again. Each problem is one line; none means nothing was lost.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from crash_states import CrashState, Model
from powerloss_ops import DIR, Fsync, Recording, Rename, Returned

from memoryd import strict_json
from memoryd.commit.recovery import recover
from memoryd.compaction.job.report import report_failure
from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings
from memoryd.conversation.lines import append_message
from memoryd.errors import InputError
from memoryd.files.fsutil import TEMP_MARK
from memoryd.published.events import emit
from memoryd.published.heartbeat import HeartbeatManager, parse
from memoryd.published.state import read_state
from memoryd.search.archive_index import update_index
from memoryd.stores.disk import write_entry
from memoryd.workspace import Workspace

WORKSPACE = "ws"
"""The workspace's folder inside a recorded folder."""


@dataclass(frozen=True, slots=True)
class Log:
    """An append-only file (relative to the workspace) and its archives' names."""

    home: str
    archives: re.Pattern[str] | None = None


CONVERSATION_LOG = Log(
    "conversation.jsonl", re.compile(r"^conversation-[0-9A-Za-z]+-[0-9a-f]+\.jsonl$")
)
LOGS = (
    CONVERSATION_LOG,
    *(
        Log(f"memory/{store}.jsonl", re.compile(rf"^memory-{store}-[0-9A-Za-z]+-[0-9a-f]+\.jsonl$"))
        for store in ("bookmarks", "todos", "decisions", "lessons")
    ),
    Log(".memoryd/events.jsonl"),
    Log(".memoryd/receipts.jsonl"),
)
REPLACED = ("HEARTBEAT.md",)
"""Files replaced whole, durably: their acknowledged content must survive."""


@dataclass(slots=True)
class Expectations:
    """What a recording wrote, for the checks of each of its crash states."""

    attempted: set[bytes] = field(default_factory=set)
    """Every complete line any file held at any time: a torn line is a piece of one."""
    baseline: dict[str, list[bytes]] = field(default_factory=dict)
    """Lines of each log (and its archives) before the record began: all acknowledged."""
    baseline_replaced: dict[str, bytes] = field(default_factory=dict)
    versions: dict[str, list[tuple[int, bytes, bool]]] = field(default_factory=dict)
    """Per replaced file: (op index, content, fsynced) of each version renamed onto it."""


def expectations(recording: Recording) -> Expectations:
    """What :func:`check_after_cut` compares a crash state with (once per recording)."""
    model = Model(recording)
    found = Expectations()
    finals = {fid: model.final_content(fid) for fid in recording.fids()}
    for content in [*recording.data.values(), *finals.values()]:
        found.attempted.update(complete_lines(content))
    synced: set[int] = set()
    for index, op in enumerate(recording.ops):
        if isinstance(op, Returned):
            found.attempted.update(complete_lines(op.data))
        elif isinstance(op, Fsync):
            synced.add(op.fid)
        elif isinstance(op, Rename) and _home(op.dst) in REPLACED:
            entry = (index, finals[op.fid], op.fid in synced)
            found.versions.setdefault(_home(op.dst), []).append(entry)
    for log in LOGS:
        lines: list[bytes] = []
        for path, fid in sorted(recording.names.items()):
            name = path.rpartition("/")[2]
            in_archive = _home(path).startswith(".memoryd/archive/")
            if fid != DIR and (
                _home(path) == log.home
                or (in_archive and log.archives is not None and log.archives.match(name))
            ):
                lines.extend(complete_lines(recording.data[fid]))
        found.baseline[log.home] = lines
    for home in REPLACED:
        replaced = recording.names.get(f"{WORKSPACE}/{home}")
        if replaced is not None:
            found.baseline_replaced[home] = recording.data[replaced]
    return found


def _home(path: str) -> str:
    return path.removeprefix(f"{WORKSPACE}/")


def complete_lines(data: bytes) -> list[bytes]:
    """The lines of ``data`` that end with ``\\n``."""
    return split(data)[0]


def split(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines, and the torn fragment after them."""
    lines = data.splitlines(keepends=True)
    if lines and not lines[-1].endswith(b"\n"):
        return lines[:-1], lines[-1]
    return lines, b""


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def check_after_cut(
    folder: Path, state: CrashState, expected: Expectations, settings: Settings, *, job: bool
) -> list[str]:
    """Recover the materialized ``state`` in ``folder`` as a daemon would, check it, run
    the next commands (``job``: a forced job too), check again; returns the problems."""
    checker = Checker(folder, state, expected)
    with structlog.testing.capture_logs():
        checker.daemon_start()
        checker.check("after recovery")
        checker.next_commands(settings, job)
        checker.check("after the next commands")
    return checker.problems


class Checker:
    """The checks of one crash state's workspace; problems gather in :attr:`problems`."""

    def __init__(self, folder: Path, state: CrashState, expected: Expectations) -> None:
        self.ws = Workspace(folder / WORKSPACE)
        self.state = state
        self.expected = expected
        self.attempted = set(expected.attempted)
        self.problems: list[str] = []
        self.acknowledged = {home: list(lines) for home, lines in expected.baseline.items()}
        for _, op in state.acknowledged:
            if not op.replaced:
                self.acknowledged.setdefault(_home(op.path), []).extend(complete_lines(op.data))

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def daemon_start(self) -> None:
        """What a daemon does first in a workspace (``Workspaces.tidy`` in
        memoryd/daemon/workspaces.py)."""
        manager = HeartbeatManager(self.ws)
        if not self.ws.meta.is_dir():
            self.check_replaced()
            manager.ensure_clean(durable=False)
        else:
            recover(self.ws)
            self.check_replaced()
            state = read_state(self.ws) or {}  # never raises: a torn state.json reads as None
            if manager.get_status().status == "active" and state.get("summarizing"):
                report_failure(self.ws, "interrupted: the daemon stopped during the job")
            else:
                manager.ensure_clean(durable=False)
        if parse(self.ws.heartbeat.read_text(encoding="utf-8", errors="replace")) is None:
            self.problem("start: HEARTBEAT.md is not a heartbeat after the daemon's start")

    def check(self, stage: str) -> None:
        """Every log and archive, the conversation's ids and head, and no leftovers."""
        for log in LOGS:
            lines: list[bytes] = []
            for archive in self.archives(log):
                done, torn = split(archive.read_bytes())
                if torn:
                    self.problem(f"{stage}: {archive.name} ends with a torn line")
                lines.extend(done)
            live, tail = split(_read(self.ws.path / log.home) or b"")
            self._check_lines(stage, log.home, [*lines, *live], tail)
        self._check_conversation(stage)
        self._check_leftovers(stage)

    def archives(self, log: Log) -> list[Path]:
        """The final archives of ``log``, oldest first."""
        if log.archives is None or not self.ws.archive_dir.is_dir():
            return []
        pattern = log.archives
        return sorted(p for p in self.ws.archive_dir.iterdir() if pattern.match(p.name))

    def _check_lines(self, stage: str, home: str, lines: Sequence[bytes], tail: bytes) -> None:
        """Acknowledged lines once each, byte for byte; no line twice; every line parses
        or is a torn piece of a line that was being written."""
        counts = Counter(lines)
        for line in self.acknowledged.get(home, []):
            if counts[line] != 1:
                self.problem(
                    f"{stage}: {home}: acknowledged {line[:70]!r} is there {counts[line]}x"
                )
        for line, count in counts.items():
            if count > 1:
                self.problem(f"{stage}: {home}: {line[:70]!r} is there {count}x")
            if _object(line) is None and not self._torn_piece(line[:-1]):
                self.problem(f"{stage}: {home}: {line[:70]!r} is neither JSON nor a torn line")
        if tail and not self._torn_piece(tail):
            self.problem(f"{stage}: {home}: its torn tail {tail[:70]!r} is no piece of a line")

    def _torn_piece(self, fragment: bytes) -> bool:
        return any(line.startswith(fragment) for line in self.attempted)

    def _check_conversation(self, stage: str) -> None:
        """No id twice across the live file and the archive; a summary only at the head,
        with its firstId and lastId in the archive and its archive file there."""
        archived: list[str] = []
        for archive in self.archives(CONVERSATION_LOG):
            archived.extend(_ids(complete_lines(archive.read_bytes())))
        live = complete_lines(_read(self.ws.conversation) or b"")
        for ident, count in Counter(archived + _ids(live)).items():
            if count > 1:
                self.problem(f"{stage}: id {ident} is {count}x in the live file and the archive")
        for ident in masked_ids(live):
            if ident not in archived:
                self.problem(f"{stage}: masked {ident} has no original in the archive")
        for number, line in enumerate(live):
            message = _object(line)
            if message is None or message.get("isSummary") is not True:
                continue
            if number:
                self.problem(f"{stage}: a summary on line {number + 1} of the live file")
            for key in ("firstId", "lastId"):
                if message.get(key) not in archived:
                    self.problem(f"{stage}: the summary's {key} {message.get(key)} is not archived")
            if not (self.ws.path / str(message.get("archive"))).is_file():
                self.problem(f"{stage}: the summary's archive {message.get('archive')} is missing")

    def _check_leftovers(self, stage: str) -> None:
        """Recovery leaves no temp file, pending archive or drain mark behind."""
        for folder in (self.ws.path, self.ws.memory_dir, self.ws.meta):
            if folder.is_dir():
                for entry in folder.iterdir():
                    if TEMP_MARK in entry.name:
                        self.problem(f"{stage}: temp file {entry.name} left")
        if self.ws.archive_dir.is_dir():
            for entry in self.ws.archive_dir.iterdir():
                if entry.name.endswith(".pending"):
                    self.problem(f"{stage}: pending archive {entry.name} left")
        draining = self.ws.meta / "draining"
        if draining.is_dir() and any(draining.iterdir()):
            marks = sorted(p.name for p in draining.iterdir())
            self.problem(f"{stage}: drain marks left: {marks}")

    def check_replaced(self) -> None:
        """A replaced file holds its last acknowledged version or one renamed onto it
        later (of one renamed without an fsync, maybe only a prefix)."""
        for home in REPLACED:
            content = _read(self.ws.path / home)
            acked = [
                (i, op)
                for i, op in self.state.acknowledged
                if op.replaced and _home(op.path) == home
            ]
            since, current = (acked[-1][0], acked[-1][1].data) if acked else (-1, None)
            if current is None:
                current = self.expected.baseline_replaced.get(home)
            later = [
                (data, synced)
                for index, data, synced in self.expected.versions.get(home, [])
                if since < index < self.state.choices.cut
            ]
            if content == current or any(content == data for data, _ in later):
                continue
            if content is not None and any(
                data.startswith(content) for data, synced in later if not synced
            ):
                continue
            shown = content[:70] if content is not None else None
            self.problem(f"after recovery: {home} holds {shown!r}, not an acknowledged version")

    def next_commands(self, settings: Settings, job: bool) -> None:
        """What a user runs next: an append, a memory write, an event, the index, a job."""
        conversation = _read(self.ws.conversation)
        try:
            message = append_message(self.ws.path, "user", "after the power cut")
        except InputError:
            if not conversation or conversation.endswith(b"\n"):
                self.problem("next: memoryd append refused a conversation without a torn tail")
        else:
            self._acknowledge("conversation.jsonl", strict_json.dumps_line(message))
        self._next_log_write(
            "memory/bookmarks.jsonl",
            lambda: write_entry(self.ws.path, "bookmarks", {"task": "after the cut"}),
        )
        self._next_log_write(".memoryd/events.jsonl", lambda: emit(self.ws, "after_the_cut"))
        if job and self.ws.conversation.is_file():
            self._next_log_write(".memoryd/receipts.jsonl", lambda: self._job(settings))
        self._check_index()

    def _job(self, settings: Settings) -> None:
        """A forced job, and its drain thread to its end (a worker waits for it too)."""
        run_job(JobRequest(self.ws.path, settings, force=True))
        for thread in threading.enumerate():
            if thread.name == "memoryd-drain":
                thread.join()

    def _next_log_write(self, home: str, write: Callable[[], object]) -> None:
        """Run ``write``, which appends one line to ``home``: a torn tail stays a line."""
        before = _read(self.ws.path / home) or b""
        write()
        after = _read(self.ws.path / home) or b""
        if not after.startswith(before):
            self.problem(f"next: {home} lost bytes on the next write")
            return
        tail = split(before)[1]
        added = after[len(before) :]
        if tail and added:  # (a job that had nothing to do appends no receipt)
            if not added.startswith(b"\n"):
                self.problem(f"next: {home}: its torn tail was not kept as a line of its own")
            self._acknowledge(home, tail + b"\n")
            added = added[1:]
        self._acknowledge(home, added)

    def _acknowledge(self, home: str, data: bytes) -> None:
        lines = complete_lines(data)
        self.acknowledged.setdefault(home, []).extend(lines)
        self.attempted.update(lines)

    def _check_index(self) -> None:
        """The index, brought up to date as recall does, holds exactly the archive."""
        archives = self.archives(CONVERSATION_LOG)
        if not archives:
            return
        count = update_index(self.ws.path)
        expected: list[str] = []
        for archive in archives:
            for number, line in enumerate(complete_lines(archive.read_bytes())):
                message = _object(line)
                if message is None or (number == 0 and message.get("isSummary") is True):
                    continue
                if message.get("isMasked") is True:  # its original is indexed instead
                    continue
                expected.append(str(message.get("id")))
        conn = sqlite3.connect(self.ws.meta / "index.sqlite")
        try:
            indexed = [str(row[0]) for row in conn.execute("SELECT message_id FROM messages")]
        finally:
            conn.close()
        if count != len(expected) or sorted(indexed) != sorted(expected):
            self.problem(f"index: {count} messages indexed, the archive holds {len(expected)}")


@functools.lru_cache(maxsize=1 << 16)
def _object(line: bytes) -> dict[str, object] | None:
    """The JSON object ``line`` holds, or None. Remembered: the same lines come back in
    state after state of a recording (callers only read what it returns)."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _ids(lines: Iterable[bytes]) -> list[str]:
    """The ids of the original lines (a masked line stands for an archived original)."""
    found = []
    for line in lines:
        message = _object(line)
        if message is None or message.get("isMasked") is True:
            continue
        if isinstance(message.get("id"), str):
            found.append(str(message["id"]))
    return found


def masked_ids(lines: Iterable[bytes]) -> list[str]:
    """The ids of the masked lines among ``lines``."""
    found = []
    for line in lines:
        message = _object(line)
        if message is not None and message.get("isMasked") is True:
            found.append(str(message.get("id")))
    return found
