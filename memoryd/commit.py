"""The lossless rewrite of an append-only file (docs/design.md#commit).

A rewrite replaces the first ``snapshot.end`` bytes of a file with new content while
writers keep appending. The protocol:

1. check free space;
2. write the bytes being replaced to a *pending* archive file and fsync it;
3. write the new head to a temp file beside the original (``O_EXCL|O_NOFOLLOW``),
   without the writers' lock;
4. take the lock; check the original is still the same file (device, inode, regular,
   one link, not shorter, sampled prefix unchanged); copy every byte appended since the
   snapshot, a torn tail included; fsync (never rename after a failed fsync); rename;
   fsync the folder; turn the pending archive into a final one; release the lock;
5. keep the old inode open for a short drain window and carry over any line that a
   writer which does not lock still put there; a hard link (a drain mark, see
   :mod:`memoryd.draining`) made before the rename keeps it reachable until then, so a
   crash inside the window loses nothing either.

A crash at any point leaves either the old file (plus a pending archive and a temp file,
both removed by :func:`recover`) or the new one (plus a pending archive that
:func:`recover` finalises: the temp file's inode tells which happened).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import structlog

from memoryd.draining import DrainMark, salvage
from memoryd.errors import CommitAborted, UnsafePathError
from memoryd.fsutil import (
    NEW_FILE_FLAGS,
    TEMP_MARK,
    append_all_or_nothing,
    flocked,
    folder_in,
    is_enospc,
    open_in,
    pid_alive,
    temp_name,
    write_all,
)
from memoryd.workspace import CONVERSATION, Workspace

log = structlog.get_logger()

Part = bytes | tuple[int, int]
"""A piece of new content: literal bytes, or the byte range [start, end) of the snapshot."""

FaultHook = Callable[[str], None]
"""Called with the name of each step; tests raise or kill the process there."""

SAMPLE = 64 * 1024
"""Bytes compared at both ends of the replaced prefix to detect an in-place rewrite."""

SPACE_MARGIN = 1 << 20
PENDING_RE = re.compile(r"^(?P<name>.+\.jsonl)\.(?P<pid>\d+)\.(?P<ino>\d+)\.pending$")
TEMP_PID_RE = re.compile(re.escape(TEMP_MARK) + r"(?P<pid>\d+)-")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a job read: the file's identity and the end of its last complete line."""

    path: Path
    root: Path
    """The workspace: no symlink between it and ``path`` is ever followed."""
    dev: int
    ino: int
    mode: int
    end: int
    head_sample: bytes
    tail_sample: bytes


@dataclass(frozen=True, slots=True)
class ArchivePlan:
    """Where the replaced bytes go: ``folder/name``, written from ``parts``."""

    folder: Path
    name: str
    parts: Sequence[Part]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What a commit did, in sizes and counts."""

    new_size: int
    identity: tuple[int, int]
    """(device, inode) of the new file."""
    carried_bytes: int
    salvaged_lines: int
    archive: Path | None


def open_regular(path: Path, root: Path) -> int:
    """Open ``path`` (below ``root``) read-only, refusing symlinks on the way, hard-linked
    and non-regular files."""
    try:
        fd = open_in(root, path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UnsafePathError(f"{path}: no such file") from None
    except PermissionError:
        raise UnsafePathError(f"{path}: permission denied") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePathError(f"{path}: is not a regular file")
    if st.st_nlink != 1:
        os.close(fd)
        raise UnsafePathError(
            f"{path}: has {st.st_nlink} hard links; a rewrite would split them, refusing"
        )
    return fd


def read_snapshot(path: Path, *, root: Path | None = None) -> tuple[Snapshot, bytes]:
    """Read the complete lines of ``path``; returns the snapshot and those bytes.

    A last fragment without ``\\n`` is a write in progress: it is not part of the
    snapshot and will be carried over, byte for byte, by the commit. ``root`` is the
    workspace (default: the file's own folder); a symlink between it and ``path``, or at
    ``path``, is refused (UnsafePathError), here and in every step of the commit.
    """
    root = path.parent if root is None else root
    fd = open_regular(path, root)
    try:
        st = os.fstat(fd)
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 22)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    data = data[:end]
    snapshot = Snapshot(
        path=path,
        root=root,
        dev=st.st_dev,
        ino=st.st_ino,
        mode=stat.S_IMODE(st.st_mode),
        end=end,
        head_sample=data[:SAMPLE],
        tail_sample=data[max(0, end - SAMPLE) : end],
    )
    return snapshot, data


def archive_name(kind: str, now: datetime | None = None) -> str:
    """A new archive file name: ``<kind>-<UTC time>-<random>.jsonl``."""
    moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S%fZ")
    return f"{kind}-{moment}-{secrets.token_hex(3)}.jsonl"


def _copy_range(src: int, dst: int, start: int, end: int) -> None:
    """Copy bytes [start, end) of ``src`` to the current position of ``dst``."""
    offset = start
    while offset < end:
        try:
            copied = os.copy_file_range(src, dst, end - offset, offset)
        except OSError as exc:
            if is_enospc(exc):
                raise
            copied = -1
        if copied <= 0:
            chunk = os.pread(src, min(1 << 22, end - offset), offset)
            if not chunk:
                raise CommitAborted("the file became shorter while it was being copied")
            write_all(dst, chunk)
            copied = len(chunk)
        offset += copied


def _write_parts(src: int, dst: int, parts: Sequence[Part]) -> int:
    total = 0
    for part in parts:
        if isinstance(part, bytes):
            write_all(dst, part)
            total += len(part)
        else:
            start, end = part
            _copy_range(src, dst, start, end)
            total += end - start
    return total


def _parts_size(parts: Sequence[Part]) -> int:
    return sum(len(p) if isinstance(p, bytes) else p[1] - p[0] for p in parts)


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed + SPACE_MARGIN:
        raise CommitAborted(
            f"not enough free space in {folder}: need {needed + SPACE_MARGIN} bytes, {free} free"
        )


def _same_file(fd: int, folder: int, snapshot: Snapshot) -> None:
    """Re-check the original under the lock; raises CommitAborted when it changed."""
    try:
        st = os.stat(snapshot.path.name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        raise CommitAborted(f"{snapshot.path}: was deleted during the job") from None
    if not stat.S_ISREG(st.st_mode):
        raise CommitAborted(f"{snapshot.path}: is no longer a regular file")
    if (st.st_dev, st.st_ino) != (snapshot.dev, snapshot.ino):
        raise CommitAborted(f"{snapshot.path}: was replaced by another file during the job")
    if st.st_nlink != 1:
        raise CommitAborted(f"{snapshot.path}: gained a hard link during the job")
    if st.st_size < snapshot.end:
        raise CommitAborted(f"{snapshot.path}: was truncated during the job")
    head = os.pread(fd, len(snapshot.head_sample), 0)
    tail_start = snapshot.end - len(snapshot.tail_sample)
    tail = os.pread(fd, len(snapshot.tail_sample), tail_start)
    if head != snapshot.head_sample or tail != snapshot.tail_sample:
        raise CommitAborted(f"{snapshot.path}: was rewritten in place during the job")


def _carry_over(src: int, dst: int, start: int) -> int:
    """Copy everything from ``start`` to EOF, until the file stops growing; returns EOF."""
    position = start
    while True:
        size = os.fstat(src).st_size
        if size <= position:
            return position
        _copy_range(src, dst, position, size)
        position = size


def rewrite(
    snapshot: Snapshot,
    head: Sequence[Part],
    *,
    lock: Path,
    archive: ArchivePlan | None,
    drain_seconds: float = 0.5,
    fault: FaultHook | None = None,
    on_salvaged: Callable[[int], None] | None = None,
) -> CommitResult:
    """Replace the snapshotted prefix of a file with ``head``, losing nothing.

    ``head`` is the new content for bytes [0, snapshot.end); every byte appended after
    ``snapshot.end`` is carried into the new file. ``archive`` receives the replaced
    bytes before anything changes. Raises :class:`CommitAborted` (original untouched,
    temp and pending archive removed) when the file changed under the job, on a full
    disk, or when a write or fsync fails.

    With ``on_salvaged``, the drain window runs in a background thread (not a daemon
    thread: the process waits for it before it exits) and reports the lines it carried
    to ``on_salvaged``; the caller is free at once, and ``salvaged_lines`` is 0.
    """
    step = fault or (lambda _name: None)
    path = snapshot.path
    root = snapshot.root
    try:
        src = open_regular(path, root)
    except UnsafePathError as exc:
        # read_snapshot accepted this file: whatever open_regular refuses now changed since.
        raise CommitAborted(f"{exc} (changed during the job; nothing was done)") from exc
    tmp = temp_name(path).name
    folder = -1
    archive_folder = -1
    pending: str | None = None
    final: Path | None = None
    final_name = archive.name if archive is not None else ""
    renamed = False
    mark: DrainMark | None = None
    try:
        folder = _open_folder(root, path.parent)
        current = os.fstat(src).st_size
        needed = _parts_size(head) + max(0, current - snapshot.end)
        if archive is not None:
            needed += _parts_size(archive.parts)
        _check_space(path.parent, needed)
        dst = os.open(tmp, NEW_FILE_FLAGS, 0o600, dir_fd=folder)
        try:
            new_ino = os.fstat(dst).st_ino
            if archive is not None:
                archive_folder = _open_folder(root, archive.folder, create=True)
                final = archive.folder / archive.name
                pending = f"{archive.name}.{os.getpid()}.{new_ino}.pending"
                _write_archive(src, archive_folder, pending, archive.parts)
                step("archive_written")
            _write_parts(src, dst, head)
            step("head_written")
            with flocked(lock, root=root):
                step("locked")
                _same_file(src, folder, snapshot)
                end = _carry_over(src, dst, snapshot.end)
                step("tail_copied")
                os.fchmod(dst, snapshot.mode)
                os.fsync(dst)
                step("fsynced")
                mark = DrainMark.create(root, folder, path, snapshot.ino, end)
                step("marked")
                os.rename(tmp, path.name, src_dir_fd=folder, dst_dir_fd=folder)
                renamed = True
                step("renamed")
                os.fsync(folder)
                if pending is not None:
                    os.rename(
                        pending, final_name, src_dir_fd=archive_folder, dst_dir_fd=archive_folder
                    )
                    os.fsync(archive_folder)
                    step("archive_final")
                new_stat = os.fstat(dst)
        finally:
            os.close(dst)
        salvaged = 0
        if on_salvaged is None:
            salvaged = _drain_safely(src, end, snapshot, lock, drain_seconds, mark)
        else:
            drained_fd, src = src, -1  # the thread owns the old inode's descriptor now
            threading.Thread(
                target=_drain_then_report,
                args=(drained_fd, end, snapshot, lock, drain_seconds, mark, on_salvaged),
                name="memoryd-drain",
            ).start()
        return CommitResult(
            new_size=new_stat.st_size,
            identity=(new_stat.st_dev, new_stat.st_ino),
            carried_bytes=end - snapshot.end,
            salvaged_lines=salvaged,
            archive=final,
        )
    except OSError as exc:
        if renamed:
            raise
        reason = "disk full" if is_enospc(exc) else exc.strerror or str(exc)
        raise CommitAborted(f"{path}: rewrite abandoned, original untouched: {reason}") from exc
    finally:
        if src >= 0:
            os.close(src)
        if not renamed:
            if mark is not None:
                mark.remove()  # only a second name of the untouched original
            for leftover_folder, leftover in ((folder, tmp), (archive_folder, pending)):
                if leftover_folder >= 0 and leftover is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(leftover, dir_fd=leftover_folder)
        for descriptor in (folder, archive_folder):
            if descriptor >= 0:
                os.close(descriptor)


def _open_folder(root: Path, folder: Path, *, create: bool = False) -> int:
    """A descriptor of ``folder`` below ``root`` (no symlink followed); the caller closes it."""
    with folder_in(root, folder, create=create) as fd:
        return os.dup(fd)


def _write_archive(src: int, folder: int, pending: str, parts: Sequence[Part]) -> None:
    fd = os.open(pending, NEW_FILE_FLAGS, 0o600, dir_fd=folder)
    try:
        _write_parts(src, fd, parts)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.fsync(folder)


def _drain_safely(
    old: int,
    copied_to: int,
    snapshot: Snapshot,
    lock: Path,
    seconds: float,
    mark: DrainMark | None,
) -> int:
    try:
        salvaged = _drain(old, copied_to, snapshot, lock, seconds, mark)
    except (OSError, UnsafePathError) as exc:
        # The rename is done and cannot be undone: report, don't fail a finished job. The
        # mark stays: the next recovery carries what the drain could not.
        if mark is not None:
            mark.abandon()
        error = exc.strerror if isinstance(exc, OSError) else str(exc)
        log.warning("drain_failed", path=str(snapshot.path), error=error or str(exc))
        return 0
    if mark is not None:
        try:
            mark.remove()
        except (OSError, UnsafePathError) as exc:
            mark.abandon()
            log.warning("drain_mark_not_removed", path=str(snapshot.path), error=str(exc))
    return salvaged


def _drain_then_report(
    old: int,
    copied_to: int,
    snapshot: Snapshot,
    lock: Path,
    seconds: float,
    mark: DrainMark | None,
    on_salvaged: Callable[[int], None],
) -> None:
    try:
        salvaged = _drain_safely(old, copied_to, snapshot, lock, seconds, mark)
    finally:
        os.close(old)
    if salvaged:
        try:
            on_salvaged(salvaged)
        except Exception as exc:  # a report that fails must not lose the thread silently
            log.warning("salvage_report_failed", path=str(snapshot.path), error=type(exc).__name__)


def _drain(
    old: int,
    copied_to: int,
    snapshot: Snapshot,
    lock: Path,
    seconds: float,
    mark: DrainMark | None,
) -> int:
    """Carry over lines that writers which do not lock put into the replaced inode.

    Complete lines are carried as they appear; a fragment still open at the end of the
    window is carried too, so that the rest of its line, if it ever comes, follows it.
    The drain mark follows what was carried (a crash between the two repeats those
    lines at recovery rather than losing them). Returns the number of complete lines
    carried.
    """
    deadline = time.monotonic() + seconds
    salvaged = 0
    while True:
        expired = time.monotonic() >= deadline
        size = os.fstat(old).st_size
        if size > copied_to:
            fresh = os.pread(old, size - copied_to, copied_to)
            upto = size if expired else copied_to + fresh.rfind(b"\n") + 1
            if upto > copied_to:
                data = fresh[: upto - copied_to]
                append_locked(snapshot.path, snapshot.root, lock, data)
                salvaged += data.count(b"\n")
                copied_to = upto
                if mark is not None:
                    mark.advance(copied_to)
        if expired:
            return salvaged
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def append_locked(path: Path, root: Path, lock: Path, data: bytes) -> None:
    """Append ``data`` to the existing ``path`` under the writers' lock, all or nothing."""
    with flocked(lock, root=root):
        fd = open_in(root, path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)
        try:
            append_all_or_nothing(fd, data)
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What :func:`recover` cleaned up."""

    temp_files_removed: int
    archives_finalised: int
    archives_discarded: int
    lines_salvaged: int = 0
    """Lines a crashed drain left in a replaced file, now appended (see draining)."""


def _pid_alive(pid: int) -> bool:
    """Another process that may still use its files (our own pid's are left over)."""
    return pid != os.getpid() and pid_alive(pid)


def archive_target(workspace: Workspace, name: str) -> Path | None:
    """The file an archive of ``name`` was cut from, by its kind prefix."""
    if name.startswith("conversation-"):
        return workspace.conversation
    if name.startswith("memory-"):
        store = name[len("memory-") :].split("-", 1)[0]
        return workspace.store(store)
    return None


@contextlib.contextmanager
def _existing_folder(root: Path, folder: Path) -> Iterator[int | None]:
    """A descriptor of ``folder`` below ``root``, or None when it does not exist."""
    try:
        fd = _open_folder(root, folder)
    except FileNotFoundError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def recover(workspace: Workspace) -> Recovery:
    """Clean up what an interrupted commit left in ``workspace``.

    Temp files of dead processes are removed. A pending archive is finalised when its
    commit reached the rename (the target now has the temp file's inode) and discarded
    otherwise (its lines are still in the target). What a process that died in its drain
    window left in the replaced file is appended to the live one (the drain mark says
    from where). Leftovers of live processes — another daemon or a one-shot command
    mid-commit — are left alone. No symlink below the workspace is followed
    (UnsafePathError).
    """
    root = workspace.path
    salvaged = salvage(workspace)
    removed = finalised = discarded = 0
    for folder in (workspace.path, workspace.memory_dir, workspace.meta):
        with _existing_folder(root, folder) as fd:
            if fd is None:
                continue
            here = 0
            for entry in os.scandir(fd):
                match = TEMP_PID_RE.search(entry.name)
                if match and not _pid_alive(int(match["pid"])):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.name, dir_fd=fd)
                        here += 1
            if here:
                os.fsync(fd)
                removed += here
    with _existing_folder(root, workspace.archive_dir) as fd:
        if fd is not None:
            for entry in os.scandir(fd):
                match = PENDING_RE.match(entry.name)
                if not match or _pid_alive(int(match["pid"])):
                    continue
                target = archive_target(workspace, match["name"])
                if target is None:
                    continue  # not ours to judge: never delete lines we cannot place
                try:
                    with folder_in(root, target.parent) as target_folder:
                        st = os.stat(target.name, dir_fd=target_folder, follow_symlinks=False)
                    committed = st.st_ino == int(match["ino"])
                except FileNotFoundError:
                    committed = False
                if committed:
                    os.rename(entry.name, match["name"], src_dir_fd=fd, dst_dir_fd=fd)
                    finalised += 1
                else:
                    os.unlink(entry.name, dir_fd=fd)
                    discarded += 1
            if finalised or discarded:
                os.fsync(fd)
    return Recovery(removed, finalised, discarded, salvaged)


__all__ = [
    "CONVERSATION",
    "ArchivePlan",
    "CommitResult",
    "Part",
    "Recovery",
    "Snapshot",
    "archive_name",
    "read_snapshot",
    "recover",
    "rewrite",
]
