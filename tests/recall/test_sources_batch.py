"""A pass indexes many session files in one transaction, with no savepoint per file (FTS5
would write a segment at each): a file that fails midway rolls the transaction back and
the files read since it began are read again, so that it leaves nothing of itself and
takes nothing of the others with it; commits within and between files (every
``COMMIT_BYTES``) index each line exactly once, a failure among them too."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_sessions import codex_session, line, words_for

from memoryd.search.database import remove
from memoryd.search.sessions import indexer, prepare, reader, search
from memoryd.search.sessions.search import figures, recall_source, update
from memoryd.search.sessions.store import index_path


def _sessions(home: Path, tags: list[str]) -> list[Path]:
    return [codex_session(home, f"beef000{n}-0001", words_for(tag)) for n, tag in enumerate(tags)]


def test_a_file_failing_midway_leaves_nothing_and_the_others_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / ".codex"
    paths = _sessions(home, ["b1", "b2", "b3"])
    real = reader.lines_from

    def failing(fd: int, offset: int) -> Iterator[tuple[int, bytes | None, int]]:
        lines = real(fd, offset)
        if Path(f"/proc/self/fd/{fd}").resolve() == paths[1].resolve():
            yield next(lines)  # its first line is taken, then the disk fails
            raise OSError(errno.EIO, "Input/output error")
        yield from lines

    monkeypatch.setattr(prepare, "lines_from", failing)
    result = update(home.resolve(), "codex")
    assert result is not None and result.files == 2
    assert result.problems == [f"{paths[1].relative_to(home)}: Input/output error"]
    assert figures(home.resolve(), "codex")["files"] == 2
    assert recall_source(home, "questionb1") and recall_source(home, "questionb3")
    assert recall_source(home, "questionb2") == []  # its first line went with the rest
    monkeypatch.setattr(prepare, "lines_from", real)
    for n, tag in enumerate(["b1", "b2", "b3"]):
        assert {hit.file for hit in recall_source(home, f"question{tag}")} == {paths[n]}
    assert figures(home.resolve(), "codex") == _fresh(home)


def _fresh(home: Path) -> dict[str, int]:
    """The figures of an index built again from nothing."""
    remove(index_path(home.resolve(), "codex"))
    update(home.resolve(), "codex")
    return figures(home.resolve(), "codex")


def test_commits_within_and_between_files_index_every_line_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / ".codex"
    paths = _sessions(home, ["c1", "c2", "c3"])
    monkeypatch.setattr(indexer, "COMMIT_BYTES", 300)  # several commits in each file
    result = update(home.resolve(), "codex")
    assert result is not None and result.files == 3
    once = update(home.resolve(), "codex")
    assert once is not None and (once.files, once.added) == (0, 0)
    assert figures(home.resolve(), "codex")["bytes_indexed"] == sum(
        path.stat().st_size for path in paths
    )
    for n, tag in enumerate(["c1", "c2", "c3"]):
        for word in (f"question{tag}", f"inputword{tag}", f"outputword{tag}"):
            assert {hit.file for hit in recall_source(home, word)} == {paths[n]}, word
    built = figures(home.resolve(), "codex")
    monkeypatch.setattr(indexer, "COMMIT_BYTES", 64 << 20)
    assert built == _fresh(home)


def test_a_file_failing_after_commits_within_files_loses_and_repeats_no_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / ".codex"
    paths = _sessions(home, ["d1", "d2", "d3", "d4"])
    monkeypatch.setattr(indexer, "COMMIT_BYTES", 700)  # commits within and between files
    real = reader.lines_from

    def failing(fd: int, offset: int) -> Iterator[tuple[int, bytes | None, int]]:
        lines = real(fd, offset)
        if Path(f"/proc/self/fd/{fd}").resolve() == paths[2].resolve():
            yield next(lines)
            raise OSError(errno.EIO, "Input/output error")
        yield from lines

    monkeypatch.setattr(prepare, "lines_from", failing)
    result = update(home.resolve(), "codex")
    assert result is not None and result.files == 3 and len(result.problems) == 1
    for tag in ("d1", "d2", "d4"):
        assert recall_source(home, f"outputword{tag}"), tag
    monkeypatch.setattr(prepare, "lines_from", real)
    again = update(home.resolve(), "codex")
    assert again is not None and again.files == 1 and not again.problems
    built = figures(home.resolve(), "codex")
    assert built["bytes_indexed"] == sum(path.stat().st_size for path in paths)
    monkeypatch.setattr(indexer, "COMMIT_BYTES", 64 << 20)
    assert built == _fresh(home)


def test_a_query_scores_only_the_newest_matches_of_a_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / ".codex"
    path = home / "sessions" / "2026" / "03" / "01" / "rollout-2026-03-01T10-00-00-cafe.jsonl"
    path.parent.mkdir(parents=True)
    texts = ["everywhere " * 20, *(f"everywhere word{n} and more words" for n in range(5))]
    path.write_bytes(
        b"".join(
            line(
                {
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": text}],
                    },
                }
            )
            for text in texts
        )
    )
    best = recall_source(home, "everywhere")
    assert len(best) == 6 and "word" not in best[0].snippet  # the oldest, densest first
    monkeypatch.setattr(search, "SCORED", 3)
    newest = recall_source(home, "everywhere")
    assert sorted(hit.snippet.split()[1] for hit in newest) == ["word2", "word3", "word4"]
