"""Lines and messages of ``conversation.jsonl``, and the incremental reader.

A message is one line: a JSON object ended by ``\\n``. A last fragment without ``\\n``
is a write in progress: neither counted nor touched. A line that is not a JSON object
(or not UTF-8) is *malformed*: it is kept, counted by its size, and reported. A line
longer than ``max_line_bytes`` is *opaque*: never parsed, counted by its size, read in
bounded memory.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import uuid
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd import strict_json
from memoryd.errors import InputError, MemorydError, UnsafePathError
from memoryd.files.fsutil import (
    append_all_or_nothing,
    check_workspace,
    flocked,
    fsync_folder_in,
    open_in,
)
from memoryd.tokens import MESSAGE_OVERHEAD, estimate_message_tokens
from memoryd.workspace import Workspace

READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Line:
    """One complete line of a conversation file and what the summarizer needs of it."""

    index: int
    offset: int
    length: int
    tokens: int
    message: dict[str, Any] | None = None
    problem: str | None = None
    """Why the line is not a usable message (malformed, opaque), or None."""

    @property
    def end(self) -> int:
        return self.offset + self.length

    @property
    def malformed(self) -> bool:
        """True for a line that is not a message (an opaque, over-long line is not malformed:
        it is simply not parsed)."""
        return self.problem is not None and self.problem != "opaque"

    @property
    def role(self) -> str | None:
        role = self.message.get("role") if self.message else None
        return role if isinstance(role, str) else None

    @property
    def is_summary(self) -> bool:
        return bool(self.message and self.message.get("isSummary") is True)

    @property
    def blocks(self) -> list[Mapping[str, Any]]:
        content = self.message.get("content") if self.message else None
        if isinstance(content, list):
            return [b for b in content if isinstance(b, Mapping)]
        return []

    @property
    def tool_use_ids(self) -> frozenset[str]:
        return frozenset(
            str(b.get("id")) for b in self.blocks if b.get("type") == "tool_use" and "id" in b
        )

    @property
    def tool_result_ids(self) -> frozenset[str]:
        return frozenset(
            str(b.get("tool_use_id"))
            for b in self.blocks
            if b.get("type") == "tool_result" and "tool_use_id" in b
        )

    @property
    def is_assistant_turn(self) -> bool:
        """An assistant message that is not a summary (a summary head is not a turn)."""
        return self.role == "assistant" and not self.is_summary

    @property
    def is_genuine_user_turn(self) -> bool:
        """A user message that is not a summary and not only tool results."""
        if self.role != "user" or self.is_summary:
            return False
        blocks = self.blocks
        return not blocks or any(b.get("type") != "tool_result" for b in blocks)


def parse_line(raw: bytes, index: int, offset: int) -> Line:
    """Parse one complete line (``raw`` ends with ``\\n``); never raises."""
    try:
        message = strict_json.loads(raw)
    except strict_json.JSONProblem as problem:
        return Line(index, offset, len(raw), opaque_tokens(len(raw)), problem=str(problem))
    if not isinstance(message, dict):
        return Line(index, offset, len(raw), opaque_tokens(len(raw)), problem="not a JSON object")
    return Line(index, offset, len(raw), estimate_message_tokens(message), message=message)


def opaque_tokens(size: int) -> int:
    """The estimate for a line that is not parsed: its bytes / 4 plus the message constant."""
    return (size + 3) // 4 + MESSAGE_OVERHEAD


def opaque_line(index: int, offset: int, size: int) -> Line:
    """A line too long to parse: counted by its size, kept byte for byte."""
    return Line(index, offset, size, opaque_tokens(size), problem="opaque")


def split_lines(data: bytes, max_line_bytes: int, base_offset: int = 0) -> Iterator[Line]:
    """The complete lines in ``data`` (which must end at a line boundary), parsed."""
    offset = 0
    index = 0
    while offset < len(data):
        newline = data.find(b"\n", offset)
        if newline < 0:
            return
        end = newline + 1
        if end - offset > max_line_bytes:
            yield opaque_line(index, base_offset + offset, end - offset)
        else:
            yield parse_line(data[offset:end], index, base_offset + offset)
        offset = end
        index += 1


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


ESTIMATE = 1
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


ROLES = ("user", "assistant")


def new_message(role: str, content: Any, now_ms: int) -> dict[str, Any]:
    """A message in the conversation format with a fresh id (pure but for the id).

    See docs/design.md#conversation.
    """
    return {"id": str(uuid.uuid4()), "role": role, "content": content, "timestamp": now_ms}


def append_message(
    workspace: Path, role: str, content: Any, *, pinned: bool = False
) -> dict[str, Any]:
    """Append one message to ``workspace``'s conversation under the writers' lock.

    ``pinned`` marks it ``"pinned": true``: it is never summarized away
    (docs/design.md#pins).

    Refuses (InputError, nothing written) an unknown role, a conversation that is a
    symlink or not a regular file, and a file that ends with an incomplete line (a writer
    died mid-line: appending would merge two messages). All or nothing: when the write
    fails (a full disk, a read-only file system) the file is truncated back to its
    previous length under the lock and MemorydError (exit 1) is raised. The first line of
    a new file is made durable with its name (the folder is fsynced too); should that
    fsync fail, MemorydError says the message was appended. Returns the message written.
    """
    if role not in ROLES:
        raise InputError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if not isinstance(content, str | list):
        raise InputError("content must be a string or a list of content blocks")
    ws = Workspace(check_workspace(workspace))
    message = new_message(role, content, int(time.time() * 1000))
    if pinned:
        message["pinned"] = True
    try:
        line = strict_json.dumps_line(message)
    except strict_json.JSONProblem as problem:
        raise InputError(f"the message cannot be written as JSON: {problem}") from None
    try:
        with flocked(ws.lock, root=ws.path):
            flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
            fd = open_in(ws.path, ws.conversation, flags, 0o644)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise UnsafePathError(f"{ws.conversation}: is not a regular file")
                if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                    raise InputError(
                        f"{ws.conversation}: ends with an incomplete line; nothing appended"
                    )
                start = append_all_or_nothing(fd, line)
            finally:
                os.close(fd)
    except OSError as exc:
        raise MemorydError(
            f"{ws.conversation}: cannot append: {exc.strerror or exc}; nothing was written"
        ) from None
    if start == 0:
        # Maybe a new file: its name must be as durable as its first line.
        try:
            fsync_folder_in(ws.path, ws.path)
        except OSError as exc:
            raise MemorydError(
                f"{ws.path}: the message was appended, but the folder could not be synced: "
                f"{exc.strerror or exc}"
            ) from None
    return message
