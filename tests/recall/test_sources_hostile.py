"""Session files as they really come: growing by appends cut anywhere, torn, broken, hostile.

Any append-only growth is indexed exactly once; recall finds every text, tool input, tool
output and spilled output; torn lines wait for their newline; deep JSON, invalid UTF-8,
lone surrogates, FIFOs, symlinks out of the folder, a 100 MB line and files replaced or
truncated under the reader never raise, never write under the folder, and say so in one
log line."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from agent_sessions import claude_lines, claude_session, codex_session, line, tree, words_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.errors import InputError
from memoryd.search.sessions import reader
from memoryd.search.sessions.search import recall_source, update
from memoryd.search.sessions.store import index_path

SESSION = "9a9a9a9a-0000"


def indexed_ids(root: Path, source: str) -> list[str]:
    conn = sqlite3.connect(index_path(root.resolve(), source))
    try:
        return [row[0] for row in conn.execute("SELECT message_id FROM messages ORDER BY seq")]
    finally:
        conn.close()


def session_bytes(count: int) -> bytes:
    records = []
    for number in range(count):
        records += claude_lines(f"{number:04d}{SESSION[4:]}", words_for(f"g{number}"))
    return b"".join(line(record) for record in records)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=20_000), max_size=8))
def test_any_append_only_growth_is_indexed_exactly_once(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int]
) -> None:
    home = tmp_path_factory.mktemp("claude")
    path = home / "projects" / "-p" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True)
    data = session_bytes(3)
    points = sorted({min(cut, len(data)) for cut in cuts} | {len(data)})
    written = 0
    for point in points:
        with path.open("ab") as file:
            file.write(data[written:point])
        written = point
        update(home.resolve(), "claude-code")
        complete = data[: data.rfind(b"\n", 0, point) + 1]
        expected = [
            json.loads(raw)["uuid"]
            for raw in complete.splitlines()
            if json.loads(raw)["type"] in ("user", "assistant", "system")
        ]
        assert indexed_ids(home, "claude-code") == expected


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tags=st.lists(
        st.text("abcdefghijklmnop", min_size=3, max_size=8), min_size=1, max_size=3, unique=True
    )
)
def test_recall_finds_every_text_tool_input_tool_output_and_spilled_output(
    tmp_path_factory: pytest.TempPathFactory, tags: list[str]
) -> None:
    claude_home = tmp_path_factory.mktemp("claude")
    codex_home = tmp_path_factory.mktemp("codex")
    for number, tag in enumerate(tags):
        claude_session(claude_home, f"{number:04d}aaaa-{tag}", words_for(tag))
        codex_session(codex_home, f"{number:04d}bbbb-{tag}", words_for(tag))
    for tag in tags:
        for word in ("question", "inputword", "outputword", "spilledword"):
            assert recall_source(claude_home, word + tag), (word, tag)
        for word in ("question", "inputword", "outputword"):
            assert recall_source(codex_home, word + tag), (word, tag)


def test_a_torn_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    path = codex_session(home, "0a0a0a0a-1111", words_for("t1"), "0.46.0")
    extra = line(
        {
            "timestamp": "2026-03-01T10:00:00Z",
            "type": "response_item",
            "payload": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "tornword"}],
            },
        }
    )
    with path.open("ab") as file:
        file.write(extra[:40])
    assert recall_source(home, "tornword") == []
    with path.open("ab") as file:
        file.write(extra[40:])
    assert len(recall_source(home, "tornword")) == 1
    assert len(recall_source(home, "tornword")) == 1


def test_broken_lines_are_skipped_with_one_log_line_and_the_rest_indexed(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    path = claude_session(home, "0b0b0b0b-2222", words_for("b1"))
    with path.open("ab") as file:
        file.write(b"[" * 100_000 + b"\n")  # deeper than any parser takes
        file.write(
            b'{"type": "user", "uuid": "x1", "message": {"role": "user", "content": '
            b'"caf\xe9 invalidutf here"}}\n'
        )
        file.write(
            b'{"type": "user", "uuid": "x2", "message": {"role": "user", "content": '
            b'"lone \\udcff surrogateword"}}\n'
        )
        file.write(b"not json at all\n")
    before = tree(home)
    with capture_logs() as logs:
        assert recall_source(home, "questionb1")
    assert [entry["event"] for entry in logs if entry["log_level"] == "warning"] == [
        "source_file_problem"
    ]
    assert [h.id for h in recall_source(home, "invalidutf")] == ["x1"]
    assert [h.id for h in recall_source(home, "surrogateword")] == ["x2"]
    assert tree(home) == before


def test_fifos_and_symlinks_out_of_the_folder_are_never_opened(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    claude_session(home, "0c0c0c0c-3333", words_for("f1"))
    project = next((home / "projects").iterdir())
    os.mkfifo(project / "blocked.jsonl")
    outside = tmp_path / "outside"
    claude_session(outside, "0d0d0d0d-4444", words_for("o1"))
    (project / "link.jsonl").symlink_to(
        next((outside / "projects").iterdir()) / "0d0d0d0d-4444.jsonl"
    )
    (home / "projects" / "linked-dir").symlink_to(next((outside / "projects").iterdir()))
    assert recall_source(home, "questionf1")
    assert recall_source(home, "questiono1") == []
    with pytest.raises(InputError):
        recall_source(project / "blocked.jsonl", "anything")


def test_a_100_mb_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    path = codex_session(home, "0e0e0e0e-5555", words_for("h1"), "0.46.0")
    with path.open("ab") as file:
        file.write(b'{"type":"response_item","payload":{"type":"message","content":"')
        chunk = b"x" * (1 << 20)
        for _ in range(100):
            file.write(chunk)
        file.write(b'"}}\n')
    codex_session(home, "0f0f0f0f-6666", words_for("h2"), "0.46.0")
    assert reader.MAX_LINE < 100 << 20
    assert recall_source(home, "questionh1") and recall_source(home, "questionh2")


def test_a_file_replaced_or_truncated_under_us_is_read_again(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    path = codex_session(home, "1a1a1a1a-7777", words_for("r1"), "0.46.0")
    assert recall_source(home, "questionr1")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated in place
    assert recall_source(home, "questionr1")  # the first half still holds the question
    assert recall_source(home, "compacted") == []
    replacement = tmp_path / "new.jsonl"
    codex_session(tmp_path / "other", "1a1a1a1a-7777", words_for("r2"), "0.46.0").rename(
        replacement
    )
    os.replace(replacement, path)
    assert recall_source(home, "questionr1") == []
    assert recall_source(home, "questionr2")
    ids = indexed_ids(home, "codex")
    assert len(ids) == len(set(ids))
