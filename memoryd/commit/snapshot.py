"""What a job read of a file, and whether the file is still that one (docs/design.md#commit).

A job reads the complete lines of a file once (:func:`read_snapshot`); the commit then
replaces exactly those bytes, after :func:`same_file` has checked under the writers' lock
that the file is still the one read: same device and inode, regular, one link, not
shorter, its sampled prefix unchanged.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from memoryd.errors import CommitAborted, UnsafePathError
from memoryd.files.paths import open_in

SAMPLE = 64 * 1024
"""Bytes compared at both ends of the replaced prefix to detect an in-place rewrite."""


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


def same_file(fd: int, folder: int, snapshot: Snapshot) -> None:
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


__all__ = ["SAMPLE", "Snapshot", "open_regular", "read_snapshot", "same_file"]
