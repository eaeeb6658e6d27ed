"""Recall over other agents' sessions keeps the cost bound of a workspace's recall: the
index keeps prefixes of two and three characters whole, and a query whose longer prefixes
stand for too many words of the index is refused before it runs
(docs/design.md#recall-cost)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agent_sessions import CWD, line
from cli_helpers import cli

from memoryd.search.cost import MAX_EXPANSIONS, QueryTooCostly
from memoryd.sources.search import recall_source
from memoryd.sources.store import connect, index_path


def wide_vocabulary_home(home: Path) -> Path:
    """A Claude Code home whose one session holds 40,000 distinct ids (``idxa0`` …
    ``idxa39999``) in 40 messages, and a message about postgres."""
    records = [
        {
            "type": "user",
            "sessionId": "s1",
            "cwd": CWD,
            "uuid": f"u{n}",
            "timestamp": f"2026-03-01T10:00:{n:02d}.000Z",
            "message": {
                "role": "user",
                "content": " ".join(f"idxa{k}" for k in range(n * 1000, (n + 1) * 1000)),
            },
        }
        for n in range(40)
    ]
    records.append(
        {
            "type": "user",
            "sessionId": "s1",
            "cwd": CWD,
            "uuid": "pg",
            "timestamp": "2026-03-01T10:01:00.000Z",
            "message": {"role": "user", "content": "postgres idxa7 here"},
        }
    )
    project = home / "projects" / CWD.replace("/", "-")
    project.mkdir(parents=True)
    (project / "s1.jsonl").write_bytes(b"".join(line(record) for record in records))
    return home


def test_a_source_query_whose_prefixes_stand_for_too_many_words_is_refused(
    tmp_path: Path,
) -> None:
    """idxa* stands for 40,000 terms of the source's index (over the bound of a workspace's
    recall): refused before it runs, one line naming the prefix, exit 2 from the command;
    a longer prefix and a three-letter one answer."""
    assert MAX_EXPANSIONS < 40_000
    home = wide_vocabulary_home(tmp_path / "claude")
    with pytest.raises(QueryTooCostly, match=r"idxa\* alone for 30,001"):
        recall_source(home, "postgres idxa*")
    with pytest.raises(QueryTooCostly):
        recall_source(home, "idxa* OR postgres", raw=True)
    code, printed = cli("recall", str(home), "idxa*")
    assert (code, printed) == (2, "")
    assert recall_source(home, "postgres idxa7*")[0].id == "pg"
    assert recall_source(home, "postgres idx*")[0].id == "pg"


def test_a_source_index_keeps_two_and_three_letter_prefixes_whole(tmp_path: Path) -> None:
    """The index of a source is built with the prefix index of a workspace's (``prefix =
    '2 3'``): a two-letter prefix is one term of it, not the thousands it stands for."""
    home = wide_vocabulary_home(tmp_path / "claude")
    assert recall_source(home, "postgres id*")[0].id == "pg"
    conn = connect(index_path(home.resolve(), "claude-code"))
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'passages'").fetchone()
    finally:
        conn.close()
    assert "prefix = '2 3'" in sql


def test_an_index_built_without_the_prefix_index_is_built_again(tmp_path: Path) -> None:
    """An index made by an older memoryd (no prefix index) is rebuilt on first use, and
    the bound holds on the rebuilt one."""
    home = wide_vocabulary_home(tmp_path / "claude")
    recall_source(home, "postgres")
    path = index_path(home.resolve(), "claude-code")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    with pytest.raises(QueryTooCostly):
        recall_source(home, "idxa*")
