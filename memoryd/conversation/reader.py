"""The incremental reader of ``conversation.jsonl``: counts a conversation from the bytes
appended since its last read, and what it counted (docs/design.md#counting).
"""

from __future__ import annotations

import errno
import os
import stat
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memoryd.conversation.lines import Line, opaque_line, parse_line
from memoryd.errors import InputError

READ_CHUNK = 1 << 20


@dataclass(slots=True)
class Tally:
    """Running totals of a conversation file, and each line's tokens (8 bytes a line)."""

    messages: int = 0
    tokens: int = 0
    malformed: int = 0
    line_tokens: array[int] = field(default_factory=lambda: array("q"))
    starts_with_summary: bool = False
    per_line: bool = True
    """``line_tokens`` holds every line; False for totals taken back from a
    :class:`Counted` (then it holds only the lines counted since)."""

    def add(self, line: Line) -> None:
        if self.messages == 0:
            self.starts_with_summary = line.is_summary
        self.messages += 1
        self.tokens += line.tokens
        self.line_tokens.append(line.tokens)
        if line.malformed:
            self.malformed += 1


ESTIMATE = 2
"""The version of the token estimate of a line (tokens.py): counts saved by another
version are not taken back."""


@dataclass(frozen=True, slots=True)
class Counted:
    """What a reader counted of a conversation file, with the file as it was then: enough
    to take the totals back at a daemon's start while the file is still that file (same
    device, inode, size and modification time), without reading it again
    (docs/design.md#scale-start). Kept in state.json."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    messages: int
    tokens: int
    """The uncalibrated estimate."""
    malformed: int
    starts_with_summary: bool
    max_line_bytes: int
    estimate: int = ESTIMATE

    def holds(self, st: os.stat_result, max_line_bytes: int) -> bool:
        """Whether these are the counts of the file ``st`` describes, by the same rules."""
        return (
            (self.device, self.inode, self.size, self.mtime_ns)
            == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            and self.max_line_bytes == max_line_bytes
            and self.estimate == ESTIMATE
        )


@dataclass(frozen=True, slots=True)
class Update:
    """What one :meth:`ConversationReader.update` found."""

    reset: bool
    new_lines: list[Line] = field(default_factory=list)
    missing: bool = False


class ConversationReader:
    """Counts a conversation file incrementally, keyed by (device, inode, offset).

    Each :meth:`update` reads only the bytes appended since the last one; a final
    fragment without ``\\n`` is held (up to ``max_line_bytes``) and not counted. A
    replaced, truncated or deleted file is detected and recounted from the start.
    Memory stays bounded whatever the line sizes: an over-long line is scanned, not kept.
    """

    __slots__ = (
        "_fragment",
        "_fragment_size",
        "_mtime_ns",
        "_read_pos",
        "identity",
        "max_line_bytes",
        "offset",
        "path",
        "tally",
    )

    def __init__(self, path: Path | str, max_line_bytes: int = 8 << 20) -> None:
        # A str, not a Path: the daemon holds one reader per workspace (docs/design.md#daemon).
        self.path = os.fspath(path)
        self.max_line_bytes = max_line_bytes
        self.tally = Tally()
        self.identity: tuple[int, int] | None = None
        self.offset = 0
        """End of the last complete line counted."""
        self._read_pos = 0
        self._fragment = bytearray()
        self._fragment_size = 0
        self._mtime_ns = 0
        """The modification time the last update saw."""

    def counted(self) -> Counted | None:
        """What this reader has counted, with the file as it was then; None while part of
        the file is not counted (a torn last line) or nothing was read yet."""
        if self.identity is None or self._read_pos != self.offset:
            return None
        tally = self.tally
        return Counted(
            *self.identity,
            size=self.offset,
            mtime_ns=self._mtime_ns,
            messages=tally.messages,
            tokens=tally.tokens,
            malformed=tally.malformed,
            starts_with_summary=tally.starts_with_summary,
            max_line_bytes=self.max_line_bytes,
        )

    def resume(self, counted: Counted) -> None:
        """Take the totals of ``counted`` back, as if this reader had counted the file up
        to its size (the caller checked :meth:`Counted.holds`). The tokens of each line
        are not known then (``tally.per_line`` is False)."""
        tally = Tally(
            messages=counted.messages,
            tokens=counted.tokens,
            malformed=counted.malformed,
            starts_with_summary=counted.starts_with_summary,
            per_line=False,
        )
        self.adopt((counted.device, counted.inode), counted.size, tally)
        self._mtime_ns = counted.mtime_ns

    def adopt(self, identity: tuple[int, int], offset: int, tally: Tally) -> None:
        """Take counts computed elsewhere (a commit) for the file up to ``offset``."""
        self.identity = identity
        self.offset = self._read_pos = offset
        self.tally = tally
        self._fragment.clear()
        self._fragment_size = 0

    def _reset(self) -> None:
        self.identity = None
        self.offset = self._read_pos = 0
        self.tally = Tally()
        self._fragment.clear()
        self._fragment_size = 0

    def unchanged(self) -> bool:
        """True when the file is the one read, with nothing appended (one ``stat``)."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return self.identity == (st.st_dev, st.st_ino) and st.st_size == self._read_pos

    def update(self) -> Update:
        """Read what was appended since the last call; see the class docstring.

        Raises InputError when the file exists but cannot be read (permissions).
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except (FileNotFoundError, NotADirectoryError):
            had = self.identity is not None
            self._reset()
            return Update(reset=had, missing=True)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise InputError(f"{self.path}: cannot read it: {exc.strerror}") from None
            # A symlink is never followed: like a non-regular file, there is no conversation.
            self._reset()
            return Update(reset=True, missing=True)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self._reset()
                return Update(reset=True, missing=True)
            reset = False
            if self.identity != (st.st_dev, st.st_ino) or st.st_size < self._read_pos:
                reset = self.identity is not None
                self._reset()
                self.identity = (st.st_dev, st.st_ino)
            self._mtime_ns = st.st_mtime_ns
            return Update(reset=reset, new_lines=list(self._read_from(fd, st.st_size)))
        finally:
            os.close(fd)

    def _read_from(self, fd: int, size: int) -> Iterator[Line]:
        while self._read_pos < size:
            chunk = os.pread(fd, min(READ_CHUNK, size - self._read_pos), self._read_pos)
            if not chunk:
                return
            self._read_pos += len(chunk)
            start = 0
            while start < len(chunk):
                newline = chunk.find(b"\n", start)
                if newline >= 0 and not self._fragment_size:
                    # A whole line of the chunk: counted from it, not copied to a fragment.
                    yield self._count(chunk[start : newline + 1])
                    start = newline + 1
                    continue
                piece = chunk[start:] if newline < 0 else chunk[start : newline + 1]
                self._fragment_size += len(piece)
                if self._fragment_size <= self.max_line_bytes:
                    self._fragment += piece
                else:
                    self._fragment.clear()
                if newline < 0:
                    break
                start = newline + 1
                yield self._finish_line()

    def _finish_line(self) -> Line:
        size = self._fragment_size
        if size <= self.max_line_bytes:
            line = self._count(bytes(self._fragment))
        else:
            line = opaque_line(self.tally.messages, self.offset, size)
            self.tally.add(line)
            self.offset += size
        self._fragment.clear()
        self._fragment_size = 0
        return line

    def _count(self, raw: bytes) -> Line:
        """Count the complete line ``raw`` (opaque when longer than ``max_line_bytes``)."""
        if len(raw) <= self.max_line_bytes:
            line = parse_line(raw, self.tally.messages, self.offset)
        else:
            line = opaque_line(self.tally.messages, self.offset, len(raw))
        self.tally.add(line)
        self.offset += len(raw)
        return line
