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
   :mod:`memoryd.commit.draining`) made before the rename keeps it reachable until then, so a
   crash inside the window loses nothing either.

The snapshot and its re-check are :mod:`memoryd.commit.snapshot`; the drain window is
:mod:`memoryd.commit.draining`. A crash at any point leaves either the old file (plus a pending
archive and a temp file, both removed by :func:`memoryd.commit.recovery.recover`) or the new one
(plus a pending archive that recovery finalises: the temp file's inode tells which
happened).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memoryd.commit.draining import DrainMark, DrainWindow
from memoryd.commit.snapshot import Snapshot, open_regular, same_file
from memoryd.errors import CommitAborted, UnsafePathError
from memoryd.files.creating import NEW_FILE_FLAGS
from memoryd.files.fsutil import flocked, is_enospc, temp_name, write_all
from memoryd.files.paths import folder_in

Part = bytes | tuple[int, int]
"""A piece of new content: literal bytes, or the byte range [start, end) of the snapshot."""

FaultHook = Callable[[str], None]
"""Called with the name of each step; tests raise or kill the process there."""

SPACE_MARGIN = 1 << 20


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


def parts_size(parts: Sequence[Part]) -> int:
    """The bytes ``parts`` make."""
    return sum(len(p) if isinstance(p, bytes) else p[1] - p[0] for p in parts)


def _check_space(folder: Path, needed: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < needed + SPACE_MARGIN:
        raise CommitAborted(
            f"not enough free space in {folder}: need {needed + SPACE_MARGIN} bytes, {free} free"
        )


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
        folder = open_folder(root, path.parent)
        current = os.fstat(src).st_size
        needed = parts_size(head) + max(0, current - snapshot.end)
        if archive is not None:
            needed += parts_size(archive.parts)
        _check_space(path.parent, needed)
        dst = os.open(tmp, NEW_FILE_FLAGS, 0o600, dir_fd=folder)
        try:
            new_ino = os.fstat(dst).st_ino
            if archive is not None:
                archive_folder = open_folder(root, archive.folder, create=True)
                final = archive.folder / archive.name
                pending = f"{archive.name}.{os.getpid()}.{new_ino}.pending"
                _write_archive(src, archive_folder, pending, archive.parts)
                step("archive_written")
            _write_parts(src, dst, head)
            step("head_written")
            with flocked(lock, root=root):
                step("locked")
                same_file(src, folder, snapshot)
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
        window = DrainWindow(src, end, snapshot, lock, drain_seconds, mark)
        if on_salvaged is None:
            salvaged = window.run()
        else:
            src = -1  # the thread owns the old inode's descriptor now
            threading.Thread(
                target=window.run_then_report, args=(on_salvaged,), name="memoryd-drain"
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


def open_folder(root: Path, folder: Path, *, create: bool = False) -> int:
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


__all__ = [
    "ArchivePlan",
    "CommitResult",
    "FaultHook",
    "Part",
    "archive_name",
    "open_folder",
    "parts_size",
    "rewrite",
]
