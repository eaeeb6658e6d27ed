"""conversation.jsonl: the incremental reader and the locked append."""

from __future__ import annotations

import fcntl
import json
import os
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import WorkspaceFactory, encode_lines, generated_messages

from memoryd.conversation import lines as conversation
from memoryd.conversation.lines import append_message, parse_line, split_lines
from memoryd.conversation.reader import ConversationReader
from memoryd.errors import InputError, UnsafePathError
from memoryd.files import fsutil
from memoryd.tokens import MESSAGE_OVERHEAD, estimate_message_tokens


def reader_for(folder: Path, **kwargs: Any) -> ConversationReader:
    return ConversationReader(folder / "conversation.jsonl", **kwargs)


def append_bytes(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


# --- the incremental reader --------------------------------------------------------------


def test_reader_reads_only_the_appended_bytes(workspace: WorkspaceFactory) -> None:
    """Each update starts at the last offset and ends at the file size; nothing new -> no lines."""
    folder = workspace(5, 100)
    path = folder / "conversation.jsonl"
    reader = reader_for(folder)
    first = reader.update()
    assert len(first.new_lines) == 5
    assert reader.offset == path.stat().st_size

    size_before = path.stat().st_size
    append_bytes(path, encode_lines(generated_messages(7, 80)[5:]))
    second = reader.update()
    assert [line.index for line in second.new_lines] == [5, 6]
    assert second.new_lines[0].offset == size_before
    assert reader.offset == path.stat().st_size
    assert reader.tally.messages == 7

    third = reader.update()
    assert third.new_lines == []
    assert not third.reset
    assert reader.offset == path.stat().st_size


def test_reader_never_rereads_counted_bytes(
    workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first count, an update reads only from the old offset to the new size."""
    folder = workspace(20, 500)
    path = folder / "conversation.jsonl"
    reader = reader_for(folder)
    reader.update()
    reads: list[tuple[int, int]] = []
    real_pread = os.pread

    def recording_pread(fd: int, size: int, offset: int) -> bytes:
        reads.append((offset, size))
        return real_pread(fd, size, offset)

    monkeypatch.setattr("memoryd.conversation.reader.os.pread", recording_pread)
    old_size = path.stat().st_size
    append_bytes(path, encode_lines(generated_messages(21, 50)[20:]))
    reader.update()
    assert reads
    assert min(offset for offset, _ in reads) == old_size
    assert sum(size for _, size in reads) == path.stat().st_size - old_size


def test_final_fragment_without_newline_is_not_counted_until_completed(
    workspace: WorkspaceFactory,
) -> None:
    """A torn last line is held back; once its \\n arrives it counts as one whole message."""
    line = encode_lines(generated_messages(4, 100)[3:])
    folder = workspace(3, 100, tail=line[:25])
    path = folder / "conversation.jsonl"
    reader = reader_for(folder)
    reader.update()
    assert reader.tally.messages == 3
    assert reader.offset == path.stat().st_size - 25

    append_bytes(path, line[25:-1])
    assert reader.update().new_lines == []
    assert reader.tally.messages == 3

    append_bytes(path, b"\n")
    [completed] = reader.update().new_lines
    assert completed.message is not None
    assert completed.message["id"] == "msg-0003"
    assert completed.length == len(line)
    assert reader.tally.messages == 4
    assert reader.offset == path.stat().st_size


def test_malformed_line_is_kept_and_counted_as_malformed(workspace: WorkspaceFactory) -> None:
    """A line that is not a JSON object counts as a message (by its size) and as malformed."""
    messages = generated_messages(4, 100)
    folder = workspace(messages=[messages[0], b"this is not json\n", b"[1, 2]\n", messages[1]])
    reader = reader_for(folder)
    lines = reader.update().new_lines
    assert [line.problem for line in lines] == [None, "not valid JSON", "not a JSON object", None]
    assert reader.tally.messages == 4
    assert reader.tally.malformed == 2
    assert lines[1].tokens == (len(b"this is not json\n") + 3) // 4 + MESSAGE_OVERHEAD
    assert reader.tally.tokens == sum(line.tokens for line in lines)


def test_bad_utf8_line_is_malformed_not_a_crash(workspace: WorkspaceFactory) -> None:
    """Invalid UTF-8 inside a line makes that line malformed; the lines around it parse."""
    messages = generated_messages(2, 100)
    bad = b'{"id":"b","role":"user","content":"caf\xe9 \xff"}\n'
    folder = workspace(messages=[messages[0], bad, messages[1]])
    reader = reader_for(folder)
    lines = reader.update().new_lines
    assert len(lines) == 3
    assert lines[1].problem == "not UTF-8"
    assert lines[1].length == len(bad)
    assert lines[0].message is not None and lines[2].message is not None
    assert reader.tally.malformed == 1


def test_parse_line_estimates_tokens_of_the_content() -> None:
    """A message's tokens are chars/4 of its content (rounded up) plus the per-message constant."""
    message = {"id": "a", "role": "user", "content": "x" * 401}
    raw = json.dumps(message).encode() + b"\n"
    line = parse_line(raw, 0, 0)
    assert line.tokens == estimate_message_tokens(message) == 101 + MESSAGE_OVERHEAD


def test_50mb_line_is_opaque_and_read_with_bounded_memory(tmp_path: Path) -> None:
    """A single 50 MB line is counted by its size as an opaque line; the reader's peak
    traced memory stays far below the line (8 MiB max_line_bytes, 1 MiB reads)."""
    folder = tmp_path / "ws"
    folder.mkdir()
    path = folder / "conversation.jsonl"
    head = encode_lines(generated_messages(2, 100))
    big_size = 50 * 1024 * 1024
    block = b"y" * (1024 * 1024)
    with path.open("wb") as out:
        out.write(head)
        out.write(b'{"id":"big","role":"user","content":"')
        written = len(b'{"id":"big","role":"user","content":"')
        while written < big_size - 3:
            piece = block[: big_size - 3 - written]
            out.write(piece)
            written += len(piece)
        out.write(b'"}\n')
    del block
    tail = encode_lines(generated_messages(3, 100)[2:])
    append_bytes(path, tail)

    reader = ConversationReader(path)
    assert reader.max_line_bytes == 8 * 1024 * 1024
    tracemalloc.start()
    try:
        update = reader.update()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024
    lines = update.new_lines
    assert [line.problem for line in lines] == [None, None, "opaque", None]
    assert lines[2].length == big_size
    assert lines[2].tokens == (big_size + 3) // 4 + MESSAGE_OVERHEAD
    assert lines[3].message is not None and lines[3].message["id"] == "msg-0002"
    assert reader.tally.malformed == 0
    assert reader.offset == path.stat().st_size


def test_truncated_file_is_detected_and_recounted(workspace: WorkspaceFactory) -> None:
    """A file that became shorter is recounted from the start (reset)."""
    folder = workspace(6, 100)
    path = folder / "conversation.jsonl"
    reader = reader_for(folder)
    reader.update()
    path.write_bytes(encode_lines(generated_messages(2, 100)))  # same inode, truncated
    update = reader.update()
    assert update.reset
    assert len(update.new_lines) == 2
    assert reader.tally.messages == 2
    assert reader.offset == path.stat().st_size


def test_replaced_file_is_detected_and_recounted(workspace: WorkspaceFactory) -> None:
    """A new inode renamed over the file (even a longer one) means reset and full recount."""
    folder = workspace(3, 100)
    path = folder / "conversation.jsonl"
    reader = reader_for(folder)
    reader.update()
    old_inode = path.stat().st_ino
    replacement = folder / "new.jsonl"
    replacement.write_bytes(encode_lines(generated_messages(8, 100)))
    os.replace(replacement, path)
    assert path.stat().st_ino != old_inode
    update = reader.update()
    assert update.reset
    assert [line.index for line in update.new_lines] == list(range(8))
    assert reader.tally.messages == 8
    assert reader.identity == (path.stat().st_dev, path.stat().st_ino)


def test_deleted_file_is_reported_missing_and_counts_reset(workspace: WorkspaceFactory) -> None:
    """A deleted conversation: update says missing, the tally is back to zero."""
    folder = workspace(3, 100)
    reader = reader_for(folder)
    reader.update()
    (folder / "conversation.jsonl").unlink()
    update = reader.update()
    assert update.missing
    assert update.reset
    assert reader.tally.messages == 0
    assert reader.offset == 0


def test_split_lines_ignores_a_trailing_fragment() -> None:
    """split_lines yields only complete lines; offsets are absolute with base_offset."""
    data = encode_lines(generated_messages(2, 50)) + b'{"partial'
    lines = list(split_lines(data, 1 << 20, base_offset=100))
    assert len(lines) == 2
    assert lines[0].offset == 100
    assert lines[1].end == 100 + data.rfind(b"\n") + 1


# --- append_message ------------------------------------------------------------------------


def test_append_writes_one_message_with_uuid_id_and_timestamp(
    workspace: WorkspaceFactory,
) -> None:
    """The appended line is a conversation message: uuid4 id, role, content, ms timestamp."""
    folder = workspace(2, 100)
    path = folder / "conversation.jsonl"
    before = path.read_bytes()
    low = int(time.time() * 1000)
    message = append_message(folder, "user", "please keep the tests fast")
    high = int(time.time() * 1000)
    data = path.read_bytes()
    assert data.startswith(before)
    new_line = data[len(before) :]
    assert new_line.endswith(b"\n") and new_line.count(b"\n") == 1
    stored = json.loads(new_line)
    assert stored == message
    assert uuid.UUID(stored["id"]).version == 4
    assert stored["role"] == "user"
    assert stored["content"] == "please keep the tests fast"
    assert isinstance(stored["timestamp"], int) and low <= stored["timestamp"] <= high


def test_append_creates_the_conversation_in_an_empty_workspace(tmp_path: Path) -> None:
    """A folder without conversation.jsonl gets one with the single message."""
    message = append_message(tmp_path, "assistant", [{"type": "text", "text": "hi"}])
    assert json.loads((tmp_path / "conversation.jsonl").read_bytes()) == message


def test_append_holds_the_writers_lock_while_writing(
    workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the line is written, another open of .memoryd/lock cannot take flock(LOCK_EX)."""
    folder = workspace(1, 100)
    lock_path = folder / ".memoryd" / "lock"
    observed: list[bool] = []
    real_append = fsutil.append_all_or_nothing

    def checking_append(fd: int, data: bytes, *, seal_torn_tail: bool = False) -> int:
        probe = os.open(lock_path, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            observed.append(True)
        else:
            fcntl.flock(probe, fcntl.LOCK_UN)
            observed.append(False)
        finally:
            os.close(probe)
        return real_append(fd, data, seal_torn_tail=seal_torn_tail)

    monkeypatch.setattr(conversation, "append_all_or_nothing", checking_append)
    append_message(folder, "user", "locked")
    assert observed == [True]


def test_append_refuses_an_unknown_role_and_writes_nothing(workspace: WorkspaceFactory) -> None:
    """Only user and assistant are roles; anything else is an InputError, file unchanged."""
    folder = workspace(2, 100)
    before = (folder / "conversation.jsonl").read_bytes()
    with pytest.raises(InputError, match="role"):
        append_message(folder, "system", "hello")
    assert (folder / "conversation.jsonl").read_bytes() == before


@pytest.mark.parametrize("inside", [True, False], ids=["target-inside", "target-outside"])
def test_append_refuses_a_symlinked_conversation(tmp_path: Path, inside: bool) -> None:
    """conversation.jsonl that is a symlink is refused (UnsafePathError); its target unchanged."""
    folder = tmp_path / "ws"
    folder.mkdir()
    target = (folder if inside else tmp_path) / "real.jsonl"
    original = encode_lines(generated_messages(1, 50))
    target.write_bytes(original)
    (folder / "conversation.jsonl").symlink_to(target)
    with pytest.raises(UnsafePathError, match="symlink"):
        append_message(folder, "user", "through the link")
    assert target.read_bytes() == original


def test_append_refuses_a_file_ending_in_an_incomplete_line(workspace: WorkspaceFactory) -> None:
    """A torn last line (a writer died mid-line) is not merged with a new message."""
    folder = workspace(2, 100, tail=b'{"id":"torn","role":"us')
    before = (folder / "conversation.jsonl").read_bytes()
    with pytest.raises(InputError, match="incomplete line"):
        append_message(folder, "assistant", "more")
    assert (folder / "conversation.jsonl").read_bytes() == before


def test_append_refuses_a_missing_workspace(tmp_path: Path) -> None:
    """A workspace folder that does not exist is an InputError, not a new folder."""
    with pytest.raises(InputError, match="no such workspace"):
        append_message(tmp_path / "nope", "user", "hi")
    assert not (tmp_path / "nope").exists()


def test_append_refuses_a_conversation_that_is_not_a_regular_file(tmp_path: Path) -> None:
    """A FIFO at conversation.jsonl is refused without blocking."""
    os.mkfifo(tmp_path / "conversation.jsonl")
    with pytest.raises(UnsafePathError, match="not a regular file"):
        append_message(tmp_path, "user", "hi")


def test_reader_does_not_follow_a_symlinked_conversation(tmp_path: Path) -> None:
    """A symlinked conversation.jsonl reads as missing (never followed), not as an error."""
    target = tmp_path / "elsewhere.jsonl"
    target.write_bytes(encode_lines(generated_messages(3, 50)))
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "conversation.jsonl").symlink_to(target)
    reader = reader_for(folder)
    update = reader.update()
    assert update.missing
    assert update.new_lines == []
    assert reader.tally.messages == 0


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"[" * 30_000 + b"]" * 30_000 + b"\n", "too deeply nested"),
        (b'{"role":"user","content":"x","n":1e400}\n', "number out of range (1e400)"),
        (b'{"role":"user","content":"x","n":' + b"9" * 5000 + b"}\n", "number out of range"),
        (b'{"role":"user","content":"x","n":NaN}\n', "NaN is not JSON"),
        (b'{"role":"user","content":"x","n":-Infinity}\n', "-Infinity is not JSON"),
    ],
)
def test_a_line_python_cannot_take_names_the_real_problem(
    workspace: WorkspaceFactory, raw: bytes, problem: str
) -> None:
    """Valid-looking JSON that is too deep or holds a number out of range is reported as
    such, not as "not valid JSON"; NaN and Infinity are not JSON."""
    messages = generated_messages(2, 100)
    folder = workspace(messages=[messages[0], raw, messages[1]])
    lines = reader_for(folder).update().new_lines
    assert [line.problem is None for line in lines] == [True, False, True]
    assert lines[1].problem is not None and lines[1].problem.startswith(problem)
