"""The drain window, and its marks: lines written to a replaced file are never lost.

A writer that does not lock may still append to the file a commit has just replaced
(it holds the old inode open). The drain window (:class:`DrainWindow`, run in
the commit's thread or in one of its own) copies such lines over; if the process
dies inside that window, the old inode would be gone with whatever was written there
since. So before the rename, the commit hard-links the file it replaces as
``.memoryd/draining/<file>.<pid>.<inode>.<offset>``, where ``<offset>`` is how far it
has been copied into the new file, and fsyncs that folder. Before each carry the drain
renames the mark to ``...<offset>.<upto>.<at>`` (bytes up to ``<upto>`` are going to
position ``<at>`` of the live file) and fsyncs it, then appends, then renames it to the
new offset; removed when its window ends. :func:`salvage` (run by recovery) first
settles such a carry (found in the live file: done; cut short by a crash: cut back),
then appends what a dead process's mark holds past its offset, then removes it: every
line once, even after a power cut. See docs/design.md#drain.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from memoryd.commit.snapshot import Snapshot
from memoryd.errors import UnsafePathError
from memoryd.files.fsutil import append_all_or_nothing, flocked, fsync_folder_in, pid_alive
from memoryd.files.paths import folder_in, open_in
from memoryd.files.regular import open_for_reading
from memoryd.workspace import Workspace

log = structlog.get_logger()

FOLDER = "draining"
MARK_RE = re.compile(
    r"^(?P<file>conversation\.jsonl|memory~[a-z]+\.jsonl)\.(?P<pid>\d+)\.(?P<ino>\d+)"
    r"\.(?P<offset>\d+)(?:\.(?P<upto>\d+)\.(?P<at>\d+))?$"
)

_live: set[tuple[Path, str]] = set()
"""Marks whose drain runs in this process (a worker runs many jobs, one pid)."""
_live_guard = threading.Lock()


def _file_token(root: Path, path: Path) -> str | None:
    """``conversation.jsonl`` or ``memory~<store>.jsonl``; None for other files."""
    token = "~".join(path.relative_to(root).parts)
    return token if MARK_RE.match(f"{token}.0.0.0") else None


def _target(workspace: Workspace, token: str) -> Path:
    return workspace.path / Path(*token.split("~"))


@dataclass(slots=True)
class DrainMark:
    """A hard link to a replaced inode, named with how far it was copied."""

    workspace: Workspace
    token: str
    ino: int
    offset: int
    carrying: tuple[int, int] | None = None
    """(upto, at) while bytes up to ``upto`` are being appended at ``at`` of the live file."""

    @property
    def name(self) -> str:
        name = f"{self.token}.{os.getpid()}.{self.ino}.{self.offset}"
        return name if self.carrying is None else f"{name}.{self.carrying[0]}.{self.carrying[1]}"

    @property
    def folder(self) -> Path:
        return self.workspace.meta / FOLDER

    @classmethod
    def create(cls, root: Path, folder: int, path: Path, ino: int, offset: int) -> DrainMark | None:
        """Link ``path`` (in the open ``folder``) under ``.memoryd/draining``; None if not.

        Called under the writers' lock, before the rename. A file that cannot be marked
        (another file system, no space for the entry) is drained as before, unmarked.
        """
        token = _file_token(root, path)
        if token is None:
            return None
        mark = cls(Workspace(root), token, ino, offset)
        try:
            with folder_in(root, mark.folder, create=True) as marks:
                os.link(path.name, mark.name, src_dir_fd=folder, dst_dir_fd=marks)
                try:
                    # Durable before the rename: a writer that fsyncs a line into the
                    # replaced inode after it must find it again after a power cut.
                    os.fsync(marks)
                except OSError:
                    os.unlink(mark.name, dir_fd=marks)
                    raise
        except (OSError, UnsafePathError) as exc:
            log.warning("drain_mark_failed", path=str(path), error=str(exc))
            return None
        with _live_guard:
            _live.add((root, mark.name))
        return mark

    def carry(self, upto: int, at: int) -> None:
        """Record, durably, that bytes up to ``upto`` are about to be appended at ``at``."""
        self._rename(self.offset, (upto, at), sync=True)

    def advance(self, offset: int) -> None:
        """Record that everything up to ``offset`` is in the new file.

        Not fsynced: if the carrying name survives a crash instead, recovery finds the
        carried bytes at their position and settles on ``offset`` all the same.
        """
        self._rename(offset, None, sync=False)

    def _rename(self, offset: int, carrying: tuple[int, int] | None, *, sync: bool) -> None:
        old = self.name
        self.offset, self.carrying = offset, carrying
        with folder_in(self.workspace.path, self.folder) as marks:
            os.rename(old, self.name, src_dir_fd=marks, dst_dir_fd=marks)
            if sync:
                os.fsync(marks)
        with _live_guard:
            _live.discard((self.workspace.path, old))
            _live.add((self.workspace.path, self.name))

    def abandon(self) -> None:
        """The drain failed: leave the link for the next recovery to salvage."""
        with _live_guard:
            _live.discard((self.workspace.path, self.name))

    def remove(self) -> None:
        """The drain is over (or the rename never happened): the link goes."""
        try:
            with folder_in(self.workspace.path, self.folder) as marks:
                os.unlink(self.name, dir_fd=marks)
        except FileNotFoundError:
            pass
        finally:
            with _live_guard:
                _live.discard((self.workspace.path, self.name))


def salvage(workspace: Workspace) -> int:
    """Carry what dead processes' marks hold past their offset; returns the lines carried.

    A mark whose inode is still the target's own (the process died before its rename)
    is only a second name: it is removed. Marks of live processes, and of drains still
    running in this one, are left alone.
    """
    root = workspace.path
    carried = 0
    try:
        marks_fd = _folder_fd(workspace)
    except FileNotFoundError:
        return 0
    try:
        for entry in list(os.scandir(marks_fd)):
            match = MARK_RE.match(entry.name)
            if match is None or _in_use(root, entry.name, int(match["pid"])):
                continue
            carried += _salvage_one(workspace, marks_fd, entry.name, match)
    finally:
        os.close(marks_fd)
    return carried


def _folder_fd(workspace: Workspace) -> int:
    with folder_in(workspace.path, workspace.meta / FOLDER) as fd:
        return os.dup(fd)


def _in_use(root: Path, name: str, pid: int) -> bool:
    if pid == os.getpid():
        with _live_guard:
            return (root, name) in _live
    return pid_alive(pid)


def _salvage_one(workspace: Workspace, marks: int, name: str, match: re.Match[str]) -> int:
    """Settle and carry one dead process's mark, then remove it; returns the lines carried."""
    target = _target(workspace, match["file"])
    try:
        fd = open_for_reading(name, dir_fd=marks, follow_symlinks=False)
    except UnsafePathError:
        return 0  # a FIFO, socket or symlink named like a mark: not one memoryd made
    carried = 0
    try:
        with flocked(workspace.lock, root=workspace.path):
            try:
                current = os.stat(target, follow_symlinks=False).st_ino  # only compared
            except FileNotFoundError:
                current = -1
            if current != int(match["ino"]):
                carried, name = _carry_rest(workspace, target, fd, marks, name, match)
            os.unlink(name, dir_fd=marks)
            os.fsync(marks)
    finally:
        os.close(fd)
    return carried


def _carry_rest(
    workspace: Workspace, target: Path, old: int, marks: int, name: str, match: re.Match[str]
) -> tuple[int, str]:
    """Append what the replaced file ``old`` holds past the mark's offset to ``target``,
    naming the carry in the mark first, as the drain does. Returns the lines carried and
    the mark's name now. Writers' lock held."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
    out = open_in(workspace.path, target, flags)
    try:
        offset = int(match["offset"])
        if match["upto"] is not None:
            offset = _settle(out, old, offset, int(match["upto"]), int(match["at"]))
        size = os.fstat(old).st_size
        if size <= offset:
            return 0, name
        data = os.pread(old, size - offset, offset)
        end = os.fstat(out).st_size
        starts_line = offset == 0 or os.pread(old, 1, offset - 1) == b"\n"
        if starts_line and end and os.pread(out, 1, end - 1) != b"\n":
            # A line cut short by the crash ends the live file: it stays a line of its own.
            append_all_or_nothing(out, b"\n")
            end += 1
        carrying = f"{match['file']}.{match['pid']}.{match['ino']}.{offset}.{size}.{end}"
        os.rename(name, carrying, src_dir_fd=marks, dst_dir_fd=marks)
        os.fsync(marks)
        if append_all_or_nothing(out, data) == 0:
            fsync_folder_in(workspace.path, target.parent)
    finally:
        os.close(out)
    carried = data.count(b"\n")
    log.warning("drained_after_crash", path=str(target), bytes=len(data), lines=carried)
    return carried, carrying


def _settle(out: int, old: int, offset: int, upto: int, at: int) -> int:
    """Where a carry of ``old``'s bytes [offset, upto) to position ``at`` of ``out`` got to
    before a crash: ``upto`` when they are in ``out`` (at ``at`` or later: a writer that
    does not lock may have come first); else ``offset``, after cutting off the piece of
    them that ends ``out`` (a write cut short: nothing can follow it)."""
    chunk = os.pread(old, upto - offset, offset)
    size = os.fstat(out).st_size
    tail = os.pread(out, size - at, at) if size > at else b""
    if chunk and chunk in tail:
        return upto
    for start in range(max(0, len(tail) - len(chunk) + 1), len(tail)):
        if chunk.startswith(tail[start:]):
            os.ftruncate(out, at + start)
            os.fsync(out)
            break
    return offset


@dataclass(frozen=True, slots=True)
class DrainWindow:
    """The drain window after a rename: the replaced file's inode (``old``, an open
    descriptor), how far it was copied into the new file, that file (``snapshot``) and
    its writers' lock, how long the window lasts, and the mark that makes it durable."""

    old: int
    copied_to: int
    snapshot: Snapshot
    lock: Path
    seconds: float
    mark: DrainMark | None

    def run(self) -> int:
        """Run the window; returns the lines carried, 0 when it failed.

        A failure is logged, never raised: the commit is done by then.
        """
        mark, path = self.mark, str(self.snapshot.path)
        try:
            salvaged = self._drain()
        except (OSError, UnsafePathError) as exc:
            # The rename is done and cannot be undone: report, don't fail a finished job.
            # The mark stays: the next recovery carries what the drain could not.
            if mark is not None:
                mark.abandon()
            error = exc.strerror if isinstance(exc, OSError) else str(exc)
            log.warning("drain_failed", path=path, error=error or str(exc))
            return 0
        if mark is not None:
            try:
                mark.remove()
            except (OSError, UnsafePathError) as exc:
                mark.abandon()
                log.warning("drain_mark_not_removed", path=path, error=str(exc))
        return salvaged

    def run_then_report(self, on_salvaged: Callable[[int], None]) -> None:
        """:meth:`run` in a thread of its own: it closes ``old`` and reports the lines
        carried, if any, to ``on_salvaged``."""
        try:
            salvaged = self.run()
        finally:
            os.close(self.old)
        if salvaged:
            try:
                on_salvaged(salvaged)
            except Exception as exc:  # a report that fails must not lose the thread silently
                log.warning(
                    "salvage_report_failed", path=str(self.snapshot.path), error=type(exc).__name__
                )

    def _drain(self) -> int:
        """Carry over lines that writers which do not lock put into the replaced inode.

        Complete lines are carried as they appear; a fragment still open at the end of
        the window is carried too, so that the rest of its line, if it ever comes, follows
        it. The drain mark follows what was carried (see :func:`_carry`). Returns the
        number of complete lines carried.
        """
        old, copied_to = self.old, self.copied_to
        deadline = time.monotonic() + self.seconds
        salvaged = 0
        while True:
            expired = time.monotonic() >= deadline
            size = os.fstat(old).st_size
            if size > copied_to:
                fresh = os.pread(old, size - copied_to, copied_to)
                upto = size if expired else copied_to + fresh.rfind(b"\n") + 1
                if upto > copied_to:
                    data = fresh[: upto - copied_to]
                    _carry(self.snapshot, self.lock, data, self.mark, upto)
                    salvaged += data.count(b"\n")
                    copied_to = upto
            if expired:
                return salvaged
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def _carry(snapshot: Snapshot, lock: Path, data: bytes, mark: DrainMark | None, upto: int) -> None:
    """Append ``data`` (the replaced file's bytes up to ``upto``) to the live file under
    the writers' lock, all or nothing; the mark names the carry durably before it and its
    new offset after it, so that a crash anywhere in between carries it once."""
    with flocked(lock, root=snapshot.root):
        fd = open_in(snapshot.root, snapshot.path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        try:
            if mark is not None:
                mark.carry(upto, os.fstat(fd).st_size)
            append_all_or_nothing(fd, data)
            if mark is not None:
                mark.advance(upto)
        finally:
            os.close(fd)


__all__ = ["DrainMark", "DrainWindow", "salvage"]
