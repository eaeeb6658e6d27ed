"""The history of a workspace: its archived lines in order, then the live conversation.

Every line memoryd ever replaced is in ``.memoryd/archive/conversation-*.jsonl``, byte for
byte; the names sort by the time of the job. Each archive holds the prefix a job replaced,
so its first line may be the summary an earlier job wrote (never appended by an agent);
every other line is an original. Read in order, the originals of the archives followed by
the live conversation are every line ever appended (docs/design.md#recall). Read-only.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from memoryd import strict_json
from memoryd.errors import MemorydError
from memoryd.files.paths import resolve_inside
from memoryd.files.regular import open_for_reading
from memoryd.workspace import CONVERSATION, Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time (docs/design.md#startup)
    from typing import Any

ARCHIVE_RE = re.compile(r"^conversation-[0-9A-Za-z]+-[0-9a-f]+\.jsonl$")
ARCHIVE_FOLDER = ".memoryd/archive"
IMAGE_PLACEHOLDER = "[image]"
MAX_PARSED_LINE = 8 << 20
"""Longer lines are kept (expand returns them) but not parsed for their text."""


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    """One finished archive of conversation lines."""

    name: str
    size: int

    @property
    def source(self) -> str:
        """Its path relative to the workspace, as summary messages and hits name it."""
        return f"{ARCHIVE_FOLDER}/{self.name}"


@dataclass(frozen=True, slots=True)
class RawLine:
    """One complete line of a history file, as it was appended."""

    source: str
    """``.memoryd/archive/<name>`` or ``conversation.jsonl``."""
    offset: int
    data: bytes


def archive_files(workspace: Workspace) -> list[ArchiveFile]:
    """The finished conversation archives, oldest first; symlinks are never followed.

    Raises UnsafePathError when the archive folder is a symlink that leads outside.
    """
    resolve_inside(workspace.path, workspace.archive_dir.relative_to(workspace.path))
    try:
        entries = list(os.scandir(workspace.archive_dir))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise MemorydError(f"{workspace.archive_dir}: cannot list: {exc.strerror}") from None
    found = []
    for entry in entries:
        if not ARCHIVE_RE.match(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append(ArchiveFile(entry.name, st.st_size))
    return sorted(found, key=lambda archive: archive.name)


def source_path(workspace: Workspace, source: str) -> Path:
    """The file of a history source name."""
    return workspace.conversation if source == CONVERSATION else workspace.path / source


def read_lines(workspace: Workspace, source: str) -> Iterator[RawLine]:
    """The complete lines of one history file (a torn last line is a write in progress).

    A file that vanished reads as empty; a symlink is refused, never followed.
    """
    path = source_path(workspace, source)
    try:
        fd = open_for_reading(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise MemorydError(f"{path}: cannot read: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        offset = 0
        for data in file:
            if not data.endswith(b"\n"):
                return
            yield RawLine(source, offset, data)
            offset += len(data)


def parse_message(line: RawLine) -> dict[str, Any] | None:
    """The JSON object of a line, or None for a line that is not one (or too long).

    A line that is not UTF-8 is read with U+FFFD for its bad bytes: what can be searched
    is, and the archive keeps the bytes (docs/design.md#odd-text).
    """
    if len(line.data) > MAX_PARSED_LINE:
        return None
    try:
        value = strict_json.loads(line.data)
    except strict_json.JSONProblem as problem:
        if str(problem) != "not UTF-8":
            return None
        try:
            value = strict_json.loads(line.data.decode("utf-8", "replace"))
        except strict_json.JSONProblem:
            return None
    return value if isinstance(value, dict) else None


def is_summary(message: Mapping[str, Any] | None) -> bool:
    """True for a head that memoryd wrote (a summary or a checkpoint), not an original."""
    return message is not None and message.get("isSummary") is True


def is_masked(message: Mapping[str, Any] | None) -> bool:
    """True for a line whose tool outputs memoryd replaced with placeholders: its
    original is in an archive (docs/design.md#masking)."""
    return message is not None and message.get("isMasked") is True


def originals(workspace: Workspace, source: str) -> list[RawLine]:
    """The lines of one history file that an agent appended (a summary head and masked
    lines left out)."""
    lines = list(read_lines(workspace, source))
    if lines and is_summary(parse_message(lines[0])):
        del lines[0]
    return [line for line in lines if b'"isMasked"' not in line.data or not _masked(line)]


def sources(workspace: Workspace) -> list[str]:
    """Every history file, oldest first: the archives, then the live conversation."""
    return [archive.source for archive in archive_files(workspace)] + [CONVERSATION]


def content_text(content: object) -> str:
    """The searchable text of a message's content (pure).

    Text blocks as they are, tool calls as their name and the values of their input
    (strings as they are, so that a file an agent wrote reads as the file, not as JSON
    with escaped newlines), tool results as their text, images by a placeholder, other
    blocks by their text field if they have one.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "tool_use":
            parts.append("\n".join([str(block.get("name", "")), *_values(block.get("input"))]))
        elif kind == "tool_result":
            parts.append(content_text(block.get("content")))
        elif kind == "image":
            parts.append(IMAGE_PLACEHOLDER)
        else:
            text = block.get("text", block.get("thinking"))
            if isinstance(text, str):
                parts.append(text)
    return "\n".join(part for part in parts if part)


def _values(value: object) -> list[str]:
    """The leaf values of a tool's input, strings as they are, the others as JSON."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [text for item in value.values() for text in _values(item)]
    if isinstance(value, list):
        return [text for item in value for text in _values(item)]
    return [] if value is None else [json.dumps(value)]


def context(
    workspace: Workspace, source: str, offset: int, before: int, after: int
) -> list[bytes] | None:
    """The line at ``offset`` of ``source`` with ``before``/``after`` originals around it.

    Context runs across files in history order (an earlier archive, the live
    conversation); summary heads are skipped. None when no line starts at ``offset``.
    """
    order = sources(workspace)
    here = order.index(source) if source in order else -1
    lines = list(read_lines(workspace, source))
    position = next((i for i, line in enumerate(lines) if line.offset == offset), None)
    if here < 0 or position is None:
        return None
    target = lines[position]
    earlier = [line for line in lines[:position] if line.offset > 0 or not _head(line)]
    later = lines[position + 1 :]
    for previous in reversed(order[:here]):
        if len(earlier) >= before:
            break
        earlier = originals(workspace, previous) + earlier
    for following in order[here + 1 :]:
        if len(later) >= after:
            break
        later += originals(workspace, following)
    kept_before = earlier[max(0, len(earlier) - before) :]
    return [line.data for line in (*kept_before, target, *later[:after])]


def _masked(line: RawLine) -> bool:
    return is_masked(parse_message(line))


def _head(line: RawLine) -> bool:
    return is_summary(parse_message(line))
