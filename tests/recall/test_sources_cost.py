"""Recall over other agents' sessions keeps the cost bound of a workspace's recall: a
query whose prefixes stand for too many words of the index is refused before it runs. The
index of a source has no prefix index (it would double the cost of a first index), so a
prefix of two or three characters is counted like a longer one (docs/design.md#recall-cost,
docs/design.md#sources-pipeline)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from agent_sessions import CWD, line
from cli_helpers import cli

from memoryd.search.cost import MAX_EXPANSIONS, QueryTooCostly
from memoryd.search.sessions.search import recall_source
from memoryd.search.sessions.store import connect, index_path


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
    assert recall_source(home, "po*")[0].id == "pg"


def test_a_short_prefix_of_a_source_is_counted_like_a_long_one(tmp_path: Path) -> None:
    """The index of a source has no prefix index: ``id*`` and ``idx*`` (each standing for
    40,000 words) are refused like ``idxa*``, where a workspace's index would serve them
    as one term each."""
    home = wide_vocabulary_home(tmp_path / "claude")
    for query in ("postgres id*", "postgres idx*"):
        with pytest.raises(QueryTooCostly, match=r"alone for 30,001"):
            recall_source(home, query)
    conn = connect(index_path(home.resolve(), "claude-code"))
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'passages'").fetchone()
    finally:
        conn.close()
    assert "prefix" not in sql


def test_an_index_of_an_older_schema_is_built_again(tmp_path: Path) -> None:
    """An index made by an older memoryd is rebuilt on first use, and the bound holds on
    the rebuilt one."""
    home = wide_vocabulary_home(tmp_path / "claude")
    recall_source(home, "postgres")
    path = index_path(home.resolve(), "claude-code")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    with pytest.raises(QueryTooCostly):
        recall_source(home, "idxa*")
