"""Reading a session file without trusting it: complete lines from a byte offset, never a
FIFO, never through a symlink, never a line held whole past a limit
(docs/design.md#sources)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from memoryd.errors import UnsafePathError
from memoryd.files.regular import open_for_reading

CHUNK = 4 << 20
MAX_LINE = 64 << 20
"""A longer line is skipped (counted, not held in memory, not searchable)."""


class Changed(Exception):
    """The file is not what was listed (replaced, or no longer a regular file)."""


def open_regular(path: Path, inode: tuple[int, int] | None = None) -> int:
    """A read descriptor of the regular file at ``path`` (no symlink, no FIFO); raises
    Changed when it is something else or not the file ``inode`` names, OSError when gone."""
    try:
        fd = open_for_reading(path, follow_symlinks=False)
    except UnsafePathError:
        raise Changed(str(path)) from None
    st = os.fstat(fd)
    if inode is not None and inode != (st.st_dev, st.st_ino):
        os.close(fd)
        raise Changed(str(path))
    return fd


def lines_from(fd: int, offset: int) -> Iterator[tuple[int, bytes | None, int]]:
    """The complete lines from ``offset`` to the end: (offset, bytes without the newline,
    length with it), with None for the bytes of a line longer than MAX_LINE. A last line
    without its newline is a write in progress: it is not read (the next call starts
    there)."""
    pending = b""
    start = offset
    skipping = False
    while True:
        chunk = os.pread(fd, CHUNK, offset)
        if not chunk:
            return
        offset += len(chunk)
        if skipping:
            end = chunk.find(b"\n")
            if end < 0:
                continue
            skipping = False
            yield start, None, offset - len(chunk) + end + 1 - start
            start = offset - len(chunk) + end + 1
            chunk = chunk[end + 1 :]
        lines = (pending + chunk if pending else chunk).split(b"\n")
        pending = lines.pop()  # after the last newline: not a line yet
        for line in lines:  # each without its newline, which its length counts
            yield start, line, len(line) + 1
            start += len(line) + 1
        if len(pending) > MAX_LINE:
            pending, skipping = b"", True


def read_range(path: Path, offset: int, length: int) -> bytes:
    """``length`` bytes of ``path`` at ``offset`` (fewer when the file shrank)."""
    fd = open_regular(path)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)
