"""Lines and messages of ``conversation.jsonl``, and appending one (the incremental
reader is in :mod:`memoryd.conversation.reader`).

A message is one line: a JSON object ended by ``\\n``. A last fragment without ``\\n``
is a write in progress: neither counted nor touched. A line that is not a JSON object
(or not UTF-8) is *malformed*: it is kept, counted by its size, and reported. A line
longer than ``max_line_bytes`` is *opaque*: never parsed, counted by its size, read in
bounded memory.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from memoryd import strict_json
from memoryd.errors import InputError, MemorydError, UnsafePathError
from memoryd.files.fsutil import append_all_or_nothing, flocked, fsync_folder_in
from memoryd.files.paths import check_workspace, open_file_in
from memoryd.tokens import MESSAGE_OVERHEAD, estimate_message_tokens
from memoryd.value import Value
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final


_LINE_FIELDS = ("index", "offset", "length", "tokens", "message", "problem")


class Line(Value):
    """One complete line of a conversation file and what the summarizer needs of it.

    ``problem`` says why the line is not a usable message (malformed, opaque), or is None.
    A :class:`~memoryd.value.Value` rather than a dataclass, as :class:`memoryd.workspace.Workspace`
    (docs/design.md#startup)."""

    __slots__ = _LINE_FIELDS

    def __init__(
        self,
        index: int,
        offset: int,
        length: int,
        tokens: int,
        message: dict[str, Any] | None = None,
        problem: str | None = None,
    ) -> None:
        self.index: Final = index
        self.offset: Final = offset
        self.length: Final = length
        self.tokens: Final = tokens
        self.message: Final = message
        self.problem: Final = problem

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
    def is_blank(self) -> bool:
        """A line the API view leaves out: malformed, or content with no visible text and
        no block (an opaque line is not: it is in the view, unparsed here)."""
        if self.malformed:
            return True
        content = self.message.get("content") if self.message else None
        items = content if isinstance(content, list) else [content]
        return all(_blank_item(item) for item in items)

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


def _blank_item(item: Any) -> bool:
    if item is None or isinstance(item, str):
        return not (item or "").strip()
    if isinstance(item, Mapping) and item.get("type") == "text":
        text = item.get("text")
        return isinstance(text, str) and not text.strip()
    return False


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


ROLES = ("user", "assistant")


def uuid4_text() -> str:
    """A random (version 4) UUID as ``str(uuid.uuid4())`` writes it, without importing
    :mod:`uuid` (which imports :mod:`platform`: a tenth of ``memoryd append``'s start)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_message(role: str, content: Any, now_ms: int) -> dict[str, Any]:
    """A message in the conversation format with a fresh id (pure but for the id).

    See docs/design.md#conversation.
    """
    return {"id": uuid4_text(), "role": role, "content": content, "timestamp": now_ms}


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
            fd = open_file_in(ws.path, ws.conversation, flags)
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
