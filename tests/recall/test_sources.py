"""Recall and expand over Claude Code, Codex CLI and Gemini CLI sessions, on fixtures built
from each format in several versions: the format is recognised, every text, tool input,
tool output and spilled output is found with its source, session, project and id, and
nothing is ever written under the folder searched."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from agent_sessions import (
    CWD,
    claude_session,
    codex_session,
    gemini_session,
    line,
    tree,
    words_for,
)
from cli_helpers import cli

from memoryd.errors import InputError, MemorydError
from memoryd.search.sessions.layout import recognise
from memoryd.search.sessions.places import state_dir
from memoryd.search.sessions.search import expand_source, recall_source
from memoryd.search.sessions.store import index_path

Builder = Callable[[Path, str, dict[str, str], str], Path]
VERSIONS: list[tuple[str, Builder, str, list[str]]] = [
    ("claude-code", claude_session, "claude", ["1.0.50", "2.0.14"]),
    ("codex", codex_session, "codex", ["0.1.2", "0.20.0", "0.46.0"]),
    ("gemini", gemini_session, "gemini", ["json", "jsonl"]),
]


@pytest.mark.parametrize(("source", "build", "folder", "versions"), VERSIONS)
def test_every_text_tool_input_and_tool_output_is_found_in_every_version(
    tmp_path: Path, source: str, build: Builder, folder: str, versions: list[str]
) -> None:
    home = tmp_path / folder
    for number, version in enumerate(versions):
        build(
            home, f"{number:08d}-{source[:4]}-session", words_for(f"{source[:2]}{number}"), version
        )
    before = tree(home)
    assert recognise(home) == source
    for number, _ in enumerate(versions):
        tag = f"{source[:2]}{number}"
        for kind in ("question", "inputword", "outputword"):
            hits = recall_source(home, f"{kind}{tag}")
            assert hits, f"{kind}{tag} not found"
            hit = hits[0]
            assert (hit.source, hit.session) == (source, f"{number:08d}-{source[:4]}-session")
            assert hit.id
            original = b"".join(expand_source(home, hit.id))
            assert f"{kind}{tag}".encode() in original
    assert tree(home) == before


def test_hits_say_source_session_project_and_id_and_json_has_them(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    claude_session(home, "5f1c0de0-1111", words_for("j1"))
    code, out = cli("recall", str(home), "outputwordj1", "--json")
    assert code == 0
    [hit] = json.loads(out)
    assert hit["source"] == "claude-code"
    assert hit["session"] == "5f1c0de0-1111"
    assert hit["project"] == CWD
    assert hit["id"] == "5f1c0de0-u4"
    assert hit["role"] == "tool"
    assert "**outputwordj1**" in hit["snippet"]
    code, out = cli("recall", str(home), "outputwordj1")
    assert code == 0 and "claude-code" in out and "5f1c0de0-u4" in out


def test_one_project_and_one_session_file_are_sources_too(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    path = claude_session(home, "aaaa0000-1111", words_for("p1"))
    claude_session(home, "bbbb0000-2222", words_for("p2"))
    assert {h.session for h in recall_source(path.parent, "questionp2")} == {"bbbb0000-2222"}
    assert recall_source(path, "questionp2") == []
    assert recall_source(path, "questionp1")[0].id == "aaaa0000-u0"


def test_spilled_output_and_subagents_are_searchable_and_expandable(tmp_path: Path) -> None:
    home = tmp_path / ".claude"
    claude_session(home, "cccc0000-3333", words_for("s1"))
    [hit] = recall_source(home, "spilledwords1")
    assert (hit.role, hit.session, hit.project) == ("tool", "cccc0000-3333", CWD)
    assert b"spilledwords1 at the end" in b"".join(expand_source(home, hit.id))
    sub = recall_source(home, "subquestions1")
    assert sub and "subagents" in str(sub[0].file)


def test_expand_gives_neighbours_in_session_order(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    path = codex_session(home, "dddd0000-4444", words_for("e1"), "0.46.0")
    lines = path.read_bytes().splitlines(keepends=True)
    got = expand_source(home, "call_1dddd0000:output", before=1, after=1)
    assert len(got) == 3
    assert all(line in lines for line in got)
    assert b"function_call_output" in got[1]
    assert lines.index(got[0]) < lines.index(got[1]) < lines.index(got[2])


def test_gemini_last_copy_wins_rewinds_leave_and_checkpoints_restart(tmp_path: Path) -> None:
    home = tmp_path / ".gemini"
    path = gemini_session(home, "eeee0000-5555", words_for("g1"), "jsonl")
    assert recall_source(home, "zeppelins") == []  # rewound
    assert recall_source(home, "Draft replaced") == []  # replaced by its later copy
    assert [h.id for h in recall_source(home, "outputwordg1")] == ["m2"]
    with path.open("ab") as file:
        file.write(
            line({"$set": {"messages": [{"id": "c1", "type": "user", "content": "kestrel"}]}})
        )
    assert [h.id for h in recall_source(home, "kestrel")] == ["c1"]
    assert recall_source(home, "questiong1") == []
    conn = sqlite3.connect(index_path(home.resolve(), "gemini"))
    held = conn.execute("SELECT sum(messages), sum(passages) FROM archives").fetchone()
    assert held == (
        conn.execute("SELECT count(*) FROM messages").fetchone()[0],
        conn.execute("SELECT count(*) FROM passages").fetchone()[0],
    )
    conn.close()
    assert json.loads(b"".join(expand_source(home, "c1")))["content"] == "kestrel"


def test_a_vanished_file_leaves_the_index_and_a_changed_one_is_read_again(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    path = codex_session(home, "ffff0000-6666", words_for("v1"), "0.46.0")
    assert recall_source(home, "questionv1")
    path.unlink()
    assert recall_source(home, "questionv1") == []
    codex_session(home, "ffff0000-6666", words_for("v2"), "0.46.0")
    assert recall_source(home, "questionv2")
    codex_session(home, "ffff0000-6666", words_for("v3"), "0.46.0")  # rewritten in place
    assert recall_source(home, "questionv2") == []
    assert recall_source(home, "questionv3")


def test_the_index_is_private_and_kept_in_the_state_folder(tmp_path: Path) -> None:
    home = tmp_path / ".gemini"
    gemini_session(home, "abcd0000-7777", words_for("i1"), "json")
    recall_source(home, "questioni1")
    path = index_path(home.resolve(), "gemini")
    assert path.parent == state_dir() and str(state_dir()).startswith(os.environ["XDG_STATE_HOME"])
    assert path.stat().st_mode & 0o777 == 0o600
    assert state_dir().stat().st_mode & 0o777 == 0o700


def test_a_folder_that_is_no_source_and_an_unknown_id_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(InputError, match="no Claude Code, Codex or Gemini CLI session of any"):
        recall_source(tmp_path / "notes", "hello")
    home = tmp_path / ".codex"
    codex_session(home, "0123abcd-8888", words_for("u1"), "0.46.0")
    with pytest.raises(MemorydError, match="no message with this id"):
        expand_source(home, "nope")
    code, _ = cli("expand", str(home), "nope")
    assert code == 2  # an id given wrong, as for a workspace


def test_a_workspace_is_still_a_workspace(tmp_path: Path) -> None:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "conversation.jsonl").write_bytes(line({"id": "a", "role": "user", "content": "hi"}))
    assert recognise(folder) is None


def test_a_pass_over_changed_paths_reads_only_those_and_never_through_a_symlink(
    tmp_path: Path,
) -> None:
    from memoryd.search.sessions.search import update

    home = (tmp_path / ".codex").resolve()
    first = codex_session(home, "aaaa1111-0001", words_for("c1"), "0.46.0")
    assert update(home, "codex") is not None
    second = codex_session(home, "bbbb2222-0002", words_for("c2"), "0.46.0")
    outside = codex_session(tmp_path / "elsewhere", "cccc3333-0003", words_for("c3"), "0.46.0")
    (home / "sessions" / "linked").symlink_to(outside.parent, target_is_directory=True)
    with first.open("ab") as file:
        file.write(line({"type": "compacted", "payload": {"message": "lateword"}}))
    result = update(home, "codex", changed=[first, home / "sessions" / "linked" / outside.name])
    assert result is not None and result.added == 1 and result.files == 1
    assert [h.file for h in recall_source(home, "lateword")] == [first]
    assert {h.file for h in recall_source(home, "questionc2")} == {second}
    assert recall_source(home, "questionc3") == []


def test_a_reader_never_waits_for_another_indexer_and_reads_what_is_indexed(
    tmp_path: Path,
) -> None:
    from memoryd.search.sessions.store import writer_lock

    home = tmp_path / ".codex"
    path = codex_session(home, "dada0000-0009", words_for("w1"), "0.46.0")
    assert recall_source(home, "questionw1")
    with path.open("ab") as file:
        file.write(line({"type": "compacted", "payload": {"message": "pendingword"}}))
    with writer_lock(index_path(home.resolve(), "codex")) as held:
        assert held
        assert recall_source(home, "questionw1")  # the index as it was
        assert recall_source(home, "pendingword") == []
    assert recall_source(home, "pendingword")


def test_a_claude_summary_line_is_named_by_its_place_not_by_the_line_it_points_to(
    tmp_path: Path,
) -> None:
    home = tmp_path / ".claude"
    claude_session(home, "ab12cd34-0010", words_for("k1"), "1.0.50")
    [hit] = recall_source(home, "Earlier parser")
    assert hit.role == "summary" and hit.id == "ab12cd34-0010@0"
    assert json.loads(b"".join(expand_source(home, hit.id)))["type"] == "summary"
