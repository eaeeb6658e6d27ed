"""Reading a file that someone else can replace: only a regular file, and never a wait.

``open()`` of a FIFO for reading blocks until a writer comes; a symlink to ``/dev/zero``
reads forever; a socket cannot be opened at all. Any of these at a workspace's
HEARTBEAT.md, state.json, events, receipts, monitors or checkpoint.json, or at the spend
ledger, stopped the daemon's loop or hung a command. Every such read goes through
:func:`open_for_reading`: the file is opened with ``O_NONBLOCK`` (a FIFO opens at once, with
no writer) and checked with ``fstat`` before a byte is read, and anything but a regular
file is refused with the one-line error every refusal of a path uses
(docs/design.md#regular-files). Writes inside a workspace go through
:mod:`memoryd.files.fsutil`, which checks the same.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from memoryd.errors import InputError, UnsafePathError

NOT_REGULAR = "is not a regular file"
"""The end of the one-line refusal of a FIFO, socket, device or folder."""


def not_regular(path: Path | str) -> UnsafePathError:
    """The refusal of ``path``, which is there but not a regular file (exit 2)."""
    return UnsafePathError(f"{path}: {NOT_REGULAR}")


def open_for_reading(
    path: Path | str, *, dir_fd: int | None = None, follow_symlinks: bool = True
) -> int:
    """A read-only descriptor of the regular file ``path``, opened without blocking.

    A FIFO, socket, device or folder raises :class:`UnsafePathError` (and nothing is left
    open); a symlink is followed, and what it leads to must be a regular file (without
    ``follow_symlinks``, a symlink is refused too). Other failures are the plain
    ``OSError`` (FileNotFoundError for a missing file).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ENXIO or (exc.errno == errno.ELOOP and not follow_symlinks):
            raise not_regular(path) from None  # a socket: there, but nothing to open
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise not_regular(path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(path: Path | str, max_bytes: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_for_reading` for what is refused).

    With ``max_bytes``, a longer file is refused (InputError) instead of being read into
    memory: for small files of memoryd's own whose size says they are not its own.
    """
    fd = open_for_reading(path)
    try:
        if max_bytes is not None and os.fstat(fd).st_size > max_bytes:
            raise InputError(f"{path}: is larger than {max_bytes:,} bytes")
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:  # it grew while being read
                raise InputError(f"{path}: is larger than {max_bytes:,} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file_from(path: Path | str, offset: int) -> bytes:
    """The bytes of the regular file ``path`` from ``offset`` on (empty past its end)."""
    fd = open_for_reading(path)
    try:
        chunks: list[bytes] = []
        while chunk := os.pread(fd, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
