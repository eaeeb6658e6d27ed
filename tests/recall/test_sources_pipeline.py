"""A long pass parses the next files in a worker process while it writes the current one
(docs/design.md#sources-pipeline): the index it builds is the one a pass without the
worker builds, row for row; what the worker read of a file is used only for that file
from that offset, and a worker that dies leaves the rest of the pass to the indexer."""

from __future__ import annotations

import os
import signal
import sqlite3
from pathlib import Path

import pytest
from agent_sessions import claude_session, codex_session, gemini_session, line, words_for

from memoryd.search.sessions import indexer, prepare, rows
from memoryd.search.sessions.layout import LINES, SessionFile
from memoryd.search.sessions.search import recall_source, update
from memoryd.search.sessions.store import index_path

CJK = "保持只读的配置文件 readConfigFile"


def _homes(base: Path) -> dict[str, Path]:
    homes = {"claude-code": base / ".claude", "codex": base / ".codex", "gemini": base / ".gemini"}
    for n in range(4):
        words = words_for(f"p{n}") | {"text": f"question p{n} {CJK} HTTPServerError{n}"}
        claude_session(homes["claude-code"], f"c0ffee0{n}-0001", words)
        codex_session(homes["codex"], f"beef000{n}-0001", words)
        gemini_session(homes["gemini"], f"feed000{n}-0001", words)
    return homes


def _rows(home: Path, source: str) -> tuple[list[tuple[object, ...]], ...]:
    conn = sqlite3.connect(index_path(home.resolve(), source))
    try:
        return (
            conn.execute("SELECT * FROM messages ORDER BY rowid").fetchall(),
            conn.execute("SELECT rowid, body, parts, pairs FROM passages ORDER BY 1").fetchall(),
            conn.execute(
                "SELECT name, size, messages, passages, lines, head FROM archives ORDER BY name"
            ).fetchall(),
        )
    finally:
        conn.close()


def _index(
    home: Path, source: str, state: Path, monkeypatch: pytest.MonkeyPatch, *, worker: bool
) -> tuple[list[tuple[object, ...]], ...]:
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setattr(indexer, "PIPELINE_BYTES", 0 if worker else 1 << 60)
    result = update(home.resolve(), source)
    assert result is not None and result.added > 0 and not result.problems
    return _rows(home, source)


@pytest.mark.parametrize("source", ["claude-code", "codex", "gemini"])
def test_a_pass_with_the_worker_builds_the_index_a_pass_without_it_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Messages, passages (with identifier parts and CJK pairs) and files are the same,
    row for row, on the first pass and on a pass over files that grew, with a torn last
    line waiting for its newline in both."""
    home = _homes(tmp_path)[source]
    used: list[int] = []
    real = rows.Pass.take_values

    def counted(self: rows.Pass, line: prepare.LineTuple) -> None:
        if any(message[5] is not None for message in line[7]):  # cut by the worker
            used.append(line[0])
        real(self, line)

    monkeypatch.setattr(rows.Pass, "take_values", counted)
    alone = _index(home, source, tmp_path / "alone", monkeypatch, worker=False)
    assert used == []
    ahead = _index(home, source, tmp_path / "ahead", monkeypatch, worker=True)
    assert len(used) >= 8  # the lines of every session came from the worker
    assert ahead == alone
    assert any(row[3] for row in ahead[1]) and any(row[2] for row in ahead[1])  # pairs, parts
    for session in sorted(home.rglob("*.jsonl"))[:2]:
        lines = session.read_bytes().splitlines(keepends=True)
        # A line that holds a message, again (for Gemini CLI: an update of it).
        again = next(x for x in reversed(lines) if prepare.PARSERS[source](x.strip()).messages)
        with session.open("ab") as grown:
            grown.write(again + again[: len(again) // 2])
    alone = _index(home, source, tmp_path / "alone", monkeypatch, worker=False)
    ahead = _index(home, source, tmp_path / "ahead", monkeypatch, worker=True)
    assert ahead == alone


def test_the_worker_is_used_only_for_the_file_and_offset_it_read(tmp_path: Path) -> None:
    """A result for another file (another inode) or another offset is not used: the lines
    are parsed where they are read. Past what the worker read, the rest is read too."""
    path = tmp_path / "s.jsonl"
    said = [{"type": "user", "message": {"role": "user", "content": f"n{n}"}} for n in range(4)]
    path.write_bytes(b"".join(line(record) for record in said[:3]))
    st = path.stat()
    parsed = prepare.parse_file(str(path), (st.st_dev, st.st_ino), "claude-code", 0)
    assert parsed is not None and len(parsed.lines) == 3
    with path.open("ab") as grown:
        grown.write(line(said[3]))

    def lines(of: prepare.Parsed | None, start: int = 0) -> list[tuple[int, int, bool]]:
        fd = os.open(path, os.O_RDONLY)
        try:
            return [
                (item[0], item[1], item[7][0][5] is not None)
                for item in prepare.lines_of(prepare.PARSERS["claude-code"], fd, start, of)
            ]
        finally:
            os.close(fd)

    used = lines(parsed)
    assert [cut for *_, cut in used] == [True, True, True, False]  # the 4th read here
    assert [offset for offset, *_ in used] == [offset for offset, *_ in lines(None)]
    elsewhere = parsed._replace(inode=(st.st_dev, st.st_ino + 1))
    assert all(not cut for *_, cut in lines(elsewhere))
    later = parsed.lines[1][0]
    assert all(not cut for *_, cut in lines(parsed, later))
    assert prepare.parse_file(str(path), (st.st_dev, st.st_ino + 1), "claude-code", 0) is None


def test_a_worker_that_dies_leaves_the_rest_to_the_indexer(tmp_path: Path) -> None:
    """The worker killed: the files it had not handed back are the indexer's to parse, and
    no worker is left behind."""
    paths = [tmp_path / f"{n}.jsonl" for n in range(3)]
    files: list[tuple[SessionFile, int | None]] = []
    for path in paths:
        path.write_bytes(line({"type": "user", "message": {"role": "user", "content": "x"}}))
        st = path.stat()
        files.append(
            (SessionFile(path.name, path, LINES, st.st_size, (st.st_dev, st.st_ino), 0), None)
        )
    ahead = prepare.Ahead("claude-code", files)
    try:
        assert ahead.pool is not None
        os.kill(ahead.pool.submit(os.getpid).result(), signal.SIGKILL)
        assert [ahead.take(n) for n in range(3)] == [None, None, None]
        assert ahead.pool is None
    finally:
        ahead.close()


def test_a_search_over_a_pass_with_the_worker_finds_every_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _homes(tmp_path)["codex"]
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(indexer, "PIPELINE_BYTES", 0)
    for n in range(4):
        assert recall_source(home, f"questionp{n}") or recall_source(home, f"HTTPServerError{n}")
    assert recall_source(home, "只读")
