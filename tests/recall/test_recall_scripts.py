"""Words in every script: a word inside a run of Chinese, Japanese, Korean or Thai text
(written without spaces) is found by workspace recall and by recall over other agents'
sessions (the Traditional Chinese public sessions of Claude Code, Codex CLI and Gemini
CLI), its snippet marks it, Latin words rank as before, and an index of the schema before
is rebuilt once."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from structlog.testing import capture_logs
from test_recall_ranking import ARCHIVE, archived, filler, ids

from memoryd.search import schema
from memoryd.search.archive import recall
from memoryd.search.sessions import store
from memoryd.search.sessions.search import recall_source
from memoryd.search.text import cjk_bigrams

PUBLIC = Path(__file__).parents[1] / "public_sessions"


def test_character_pairs_of_runs_without_spaces() -> None:
    assert cjk_bigrams("plain ascii text") == ""
    assert cjk_bigrams("保持只读的配置文件") == "保持 持只 只读 读的 的配 配置 置文 文件 件"
    assert cjk_bigrams("go版本是 1.24。設定ファイル") == "版本 本是 是\n設定 定フ ファ ァイ イル ル"
    assert cjk_bigrams("한국어 문장") == "한국 국어 어\n문장 장"


@pytest.mark.parametrize(
    ("text", "word"),
    [
        ("请保持只读的配置文件不变", "只读"),
        ("保持只读的配置文件", "配置文件"),
        ("設定ファイルを読み取り専用にしてください", "ファイル"),
        ("設定ファイルを読み取り専用にしてください", "読み取り"),
        ("ไฟล์การตั้งค่าต้องเป็นแบบอ่านอย่างเดียว", "อ่านอย่างเดียว"),
        ("설정파일을읽기전용으로유지하세요", "읽기전용"),
    ],
)
def test_a_word_inside_a_run_is_found_in_a_workspace(tmp_path: Path, text: str, word: str) -> None:
    folder = archived(tmp_path, [*filler(3), text, *filler(3)])
    hits = recall(folder, word)
    assert ids(hits) == ["msg-0003"]
    assert f"**{word}**" in hits[0].snippet


def test_several_words_phrases_and_mixed_text(tmp_path: Path) -> None:
    folder = archived(
        tmp_path,
        [
            "请保持只读的配置文件不变",
            "配置文件已更新到go版本1.24",
            "the config file is read only",
            *filler(6),
        ],
    )
    assert ids(recall(folder, "只读 配置")) == ["msg-0000", "msg-0001"]
    assert ids(recall(folder, '"只读的配置"')) == ["msg-0000"]
    assert ids(recall(folder, "版本")) == ["msg-0001"]
    assert ids(recall(folder, "读")) == ["msg-0000"]
    assert ids(recall(folder, "read only")) == ["msg-0002"]


def test_a_word_inside_a_run_is_found_in_every_agents_sessions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(PUBLIC, home, ignore=shutil.ignore_patterns("README.md"))
    expected = {"描述": "gemini", "檢查": "claude-code", "工具鏈": "codex", "專案": "gemini"}
    for word, source in expected.items():
        hits = recall_source(home, word, limit=3)
        assert hits, word
        assert hits[0].source == source
        assert f"**{word}**" in hits[0].snippet


def test_a_workspace_index_of_the_schema_before_is_rebuilt_once(tmp_path: Path) -> None:
    folder = archived(tmp_path, ["请保持只读的配置文件不变", *filler(3)])
    index = folder / ".memoryd" / "index.sqlite"
    old = sqlite3.connect(index)
    old.executescript(
        "CREATE TABLE archives(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, "
        "size INTEGER NOT NULL, messages INTEGER NOT NULL, passages INTEGER NOT NULL);"
        "CREATE TABLE messages(rowid INTEGER PRIMARY KEY, message_id TEXT, role TEXT, "
        "timestamp INTEGER, archive_id INTEGER NOT NULL, byte_offset INTEGER NOT NULL, "
        "byte_length INTEGER NOT NULL);"
        "CREATE VIRTUAL TABLE passages USING fts5(body, parts, "
        f"tokenize = '{schema.TOKENIZER}', prefix = '2 3');"
        f"PRAGMA application_id = {schema.ARCHIVE.application_id}; PRAGMA user_version = 3;"
    )
    size = (folder / ".memoryd" / "archive" / ARCHIVE).stat().st_size
    old.execute("INSERT INTO archives VALUES (1, ?, ?, 0, 0)", (ARCHIVE, size))
    old.commit()
    old.close()
    with capture_logs() as logs:
        assert ids(recall(folder, "只读")) == ["msg-0000"]
        assert ids(recall(folder, "配置文件")) == ["msg-0000"]
    rebuilt = [log["reason"] for log in logs if log["event"] == "index_rebuilding"]
    assert rebuilt == [f"schema version 3, this memoryd uses {schema.ARCHIVE.version}"]


def test_a_source_index_of_the_schema_before_is_rebuilt_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(PUBLIC / ".gemini", home / ".gemini")
    root = (home / ".gemini").resolve()
    path = store.index_path(root, "gemini")
    old_schema = ";".join(schema.SESSIONS.statements).replace("raw BLOB", "unused BLOB")
    old_schema = old_schema.replace(", pairs,", ",")
    store.create_file(path)
    old = sqlite3.connect(path)
    old.executescript(old_schema)
    old.execute(f"PRAGMA application_id = {schema.SESSIONS.application_id}")
    old.execute("PRAGMA user_version = 1")
    old.commit()
    old.close()
    with capture_logs() as logs:
        assert recall_source(home / ".gemini", "描述")
        assert recall_source(home / ".gemini", "專案")
    rebuilt = [log for log in logs if log["event"] == "source_index_rebuilding"]
    assert [log["reason"] for log in rebuilt] == [
        f"schema version 1, this memoryd uses {schema.SESSIONS.version}"
    ]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SESSIONS.version
    finally:
        conn.close()
