"""Recall over real session files of Claude Code (1.0.95, 2.1.39, 2.1.86 with a side
question's fork), Codex CLI (0.1.x rollout documents, 0.39 rollouts) and Gemini CLI
(``.json``, ``.jsonl``, spilled ``tool-outputs`` in both layouts), copied from public
repositories (``tests/public_sessions/README.md``): every format is read, from any path
inside an agent's folder, in one index per folder; a subagent's copy of a line is one hit;
a folder of several agents' folders is all of them; nothing is ever silent (unknown files,
an index being built, a folder of nothing)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from agent_sessions import claude_session, tree, words_for
from cli_helpers import cli

from memoryd.search.sessions import codex
from memoryd.search.sessions.places import state_dir
from memoryd.search.sessions.search import (
    Pick,
    expand_source,
    figures,
    recall_source,
    update,
)
from memoryd.search.sessions.store import Progress, index_path, progress_path, writer_lock

PUBLIC = Path(__file__).parents[1] / "public_sessions"
SPOTTER = "258c7280-ae70-4798-800f-63464d01a85d"
SPOTTER_PROJECT = "-home-USER-projects-spotter-worktrees-spotter-gqc"
CODEX_SESSION = "01996135-afde-7911-97f0-d863511eca56"
GEMINI_SESSION = "0ab84937-9fe7-4284-986a-33c832af0b6a"
CHAT_ROLLOUT = "rollout-2025-08-23-0418f71e-beb0-474c-a03d-1719a72e64cc.json"
"""A Codex CLI 0.1.x rollout document of chat-completion messages (a real one)."""
RESPONSES_ROLLOUT = f"rollout-2025-05-16-{CODEX_SESSION}.json"
"""A 0.1.x rollout document of Responses API items (laid out from the 0.39 rollout)."""
VAULT = "c--Users-loganf-Documents-IDAHO-VAULT"
VAULT_SESSION = "237326ca-5e6a-4313-b3dd-44df36143943"
GEMINI_SPILLS = Path(".gemini") / "tmp" / "idaho-vault" / "tool-outputs"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A copy of the public files laid out as a home folder: ``.claude``, ``.codex`` and
    ``.gemini``."""
    target = tmp_path / "home"
    shutil.copytree(PUBLIC, target, ignore=shutil.ignore_patterns("README.md"))
    return target


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# --- Codex CLI 0.1.x rollouts, files of unknown formats ---------------------------------


@pytest.mark.parametrize(
    ("name", "word", "session"),
    [
        (CHAT_ROLLOUT, "allow_openai", "0418f71e-beb0-474c-a03d-1719a72e64cc"),
        (RESPONSES_ROLLOUT, "toolchain", CODEX_SESSION),
    ],
)
def test_codex_0_1_rollout_documents_are_read_in_a_folder_and_as_a_file(
    home: Path, name: str, word: str, session: str
) -> None:
    document = home / ".codex" / "sessions" / name
    items = json.loads(document.read_bytes())["items"]
    hits = recall_source(home / ".codex", word, limit=50)
    assert document in {hit.file for hit in hits}
    code, out = cli("recall", str(document), word, "--json")
    assert code == 0
    found = json.loads(out)
    assert found and {hit["file"] for hit in found} == {str(document)}
    assert {hit["session"] for hit in found} == {session}
    for hit in found:
        [line] = expand_source(document, hit["id"])
        assert json.loads(line) in items
        assert word.encode() in line


def test_the_reasoning_beside_a_chat_message_of_a_codex_rollout_is_read(home: Path) -> None:
    document = home / ".codex" / "sessions" / CHAT_ROLLOUT
    [said] = [item for item in json.loads(document.read_bytes())["items"] if "reasoning" in item]
    call = said["tool_calls"][0]["id"]
    [message] = [m for m in codex.parse(document.read_bytes()).messages if m.id == call]
    assert said["reasoning"] in message.text.splitlines()
    [hit] = recall_source(home / ".codex", said["reasoning"])
    assert (hit.id, hit.role, hit.file) == (call, "assistant", document)


def test_a_chat_style_codex_document_is_read(tmp_path: Path) -> None:
    sessions = tmp_path / ".codex" / "sessions"
    sessions.mkdir(parents=True)
    document = {
        "session": {"timestamp": "2025-04-18T13:30:43.105Z", "id": "chat-1", "instructions": ""},
        "items": [
            {"role": "user", "content": "why does the flamingo build fail"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"command": ["pelican"]}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_9", "content": "toucan: not found"},
        ],
    }
    (sessions / "rollout-2025-04-18-chat-1.json").write_text(json.dumps(document, indent=2))
    assert [hit.role for hit in recall_source(tmp_path / ".codex", "flamingo")] == ["user"]
    assert [hit.id for hit in recall_source(tmp_path / ".codex", "pelican")] == ["call_9"]
    [hit] = recall_source(tmp_path / ".codex", "toucan")
    assert (hit.role, hit.id) == ("tool", "call_9:output")


def test_files_of_an_unknown_format_are_counted_and_named_in_one_line(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = home / ".claude" / "projects" / SPOTTER_PROJECT
    (project / "notes.jsonl").write_bytes(b'{"hello": "a note of mine"}\n')
    (project / "blob.jsonl").write_bytes(b"\x00\x01 not json at all\n")
    code, out = cli("recall", str(home / ".claude"), "spotter-gqc")
    assert code == 0 and "spotter-gqc" in out
    said = [line for line in capsys.readouterr().err.splitlines() if "unknown format" in line]
    assert len(said) == 1
    assert "skipped 2 files of an unknown format" in said[0]
    assert "notes.jsonl" in said[0] and "blob.jsonl" in said[0]
    notes: list[str] = []
    recall_source(home / ".claude", "spotter-gqc", notes=notes)
    assert len([note for note in notes if "unknown format" in note]) == 1
    (project / "notes.jsonl").unlink()
    notes = []
    recall_source(home / ".claude", "spotter-gqc", notes=notes)
    assert [note for note in notes if "unknown format" in note] == [
        f"skipped 1 file of an unknown format: projects/{SPOTTER_PROJECT}/blob.jsonl"
    ]


# --- one message, one hit -----------------------------------------------------------------


def test_a_subagents_copy_of_a_line_is_one_hit_said_first_in_the_main_session(
    home: Path,
) -> None:
    project = home / ".claude" / "projects" / SPOTTER_PROJECT
    main = project / f"{SPOTTER}.jsonl"
    [aside] = (project / SPOTTER / "subagents").glob("agent-aside_question-*.jsonl")
    hits = recall_source(home / ".claude", "spotter-gqc", limit=20)
    ids = [hit.id for hit in hits]
    assert len(ids) == len(set(ids))
    copied = [hit for hit in hits if hit.copies]
    assert copied
    for hit in copied:
        assert hit.file == main and hit.copies == (aside,)
    code, out = cli("recall", str(home / ".claude"), "spotter-gqc", "--json")
    assert code == 0
    assert any(hit["copies"] == [str(aside)] for hit in json.loads(out))
    lines = _lines(main)
    ident = json.loads(lines[-3])["uuid"]
    assert expand_source(home / ".claude", ident, after=1) == lines[-3:-1]
    in_aside = expand_source(home / ".claude", ident, after=1, pick=Pick(file=aside))
    assert json.loads(in_aside[1])["uuid"] == "aside-q-0001"


def _vault_session(home: Path) -> tuple[Path, Path]:
    """Claude Code 2.1.86's main session and the fork a side question made of it."""
    project = home / ".claude" / "projects" / VAULT
    [fork] = (project / VAULT_SESSION / "subagents").glob("agent-aside_question-*.jsonl")
    return project / f"{VAULT_SESSION}.jsonl", fork


def test_a_side_questions_own_lines_are_found_in_its_fork_under_the_main_session(
    home: Path,
) -> None:
    main, fork = _vault_session(home)
    copied = {json.loads(line)["uuid"] for line in _lines(main) if b'"uuid"' in line}
    own = [line for line in _lines(fork) if json.loads(line)["uuid"] not in copied]
    assert [json.loads(line)["type"] for line in own] == ["user", "assistant"]
    hits = recall_source(home / ".claude", "terminal window", limit=20)
    mine = {hit.id: hit for hit in hits if hit.file == fork}
    assert set(mine) == {json.loads(line)["uuid"] for line in own}
    assert {(hit.role, hit.session) for hit in mine.values()} == {
        ("user", VAULT_SESSION),
        ("assistant", VAULT_SESSION),
    }
    for line in own:
        assert expand_source(home / ".claude", json.loads(line)["uuid"]) == [line]


def test_a_line_a_side_questions_fork_repeats_expands_from_either_file(home: Path) -> None:
    main, fork = _vault_session(home)
    [prompt] = [line for line in _lines(main) if json.loads(line).get("type") == "user"]
    ident = json.loads(prompt)["uuid"]
    [copy] = [line for line in _lines(fork) if json.loads(line)["uuid"] == ident]
    changed = {
        key
        for key in {**json.loads(prompt), **json.loads(copy)}
        if json.loads(prompt).get(key) != json.loads(copy).get(key)
    }
    assert changed == {"isSidechain", "agentId", "slug"}  # the fork marks its copies
    assert expand_source(home / ".claude", ident) == [prompt]
    assert expand_source(home / ".claude", ident, pick=Pick(file=fork)) == [copy]


def test_a_side_questions_fork_repeating_the_session_is_one_hit_per_message(
    home: Path,
) -> None:
    """Claude Code 2.1.86 marks the lines a side question's fork repeats (``isSidechain``,
    ``agentId``, ``slug``): each is still one hit, said first in the main session, and
    expand prints the main session's line with no note of a collision."""
    main, fork = _vault_session(home)
    [prompt] = [line for line in _lines(main) if json.loads(line).get("type") == "user"]
    ident = json.loads(prompt)["uuid"]
    hits = recall_source(home / ".claude", "symphony", limit=20)
    said = [(hit.file, hit.copies) for hit in hits if hit.id == ident]
    assert said == [(main, (fork,))]
    notes: list[str] = []
    assert expand_source(home / ".claude", ident, notes=notes) == [prompt]
    assert not [note for note in notes if "different lines have this id" in note]


def test_ids_that_collide_in_fact_stay_apart_and_session_or_file_picks_one(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projects = home / ".claude" / "projects"
    [original] = (projects / "-proj-vibe-coding-tracker").glob("*.jsonl")
    lines = _lines(original)
    first = json.loads(lines[0])
    changed = {**first, "sessionId": "copied-0001", "message": {"role": "user", "content": "x"}}
    copy = projects / "-elsewhere" / "copied-0001.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(json.dumps(changed).encode() + b"\n" + b"".join(lines[1:]))
    ident = first["uuid"]
    code, out = cli("expand", str(home / ".claude"), ident, "--session", first["sessionId"])
    assert code == 0 and out.encode() == lines[0]
    code, out = cli("expand", str(home / ".claude"), ident, "--file", str(copy))
    assert code == 0 and json.loads(out)["sessionId"] == "copied-0001"
    code, _ = cli("expand", str(home / ".claude"), ident)
    assert code == 0
    assert "different lines have this id" in capsys.readouterr().err
    code, _ = cli("expand", str(home / ".claude"), ident, "--session", "no-such-session")
    assert code == 2


# --- no silent empties --------------------------------------------------------------------


def test_a_home_with_several_agents_folders_is_searched_as_all_of_them(home: Path) -> None:
    found = {
        hit.source
        for query in ("spotter-gqc", "toolchain", "MAKEFILE_LIST")
        for hit in recall_source(home, query, limit=3)
    }
    assert found == {"claude-code", "codex", "gemini"}
    [hit] = recall_source(home, "MAKEFILE_LIST", limit=1)
    assert b"MAKEFILE_LIST" in b"".join(expand_source(home, hit.id))


def test_a_folder_with_no_session_of_any_known_kind_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "stuff").mkdir()
    (tmp_path / "stuff" / "data.jsonl").write_text('{"hello": 1}\n')
    code, out = cli("recall", str(tmp_path / "stuff"), "hello")
    err = capsys.readouterr().err.strip().splitlines()
    assert (code, out) == (2, "")
    assert len(err) == 1 and "no memoryd workspace and no Claude Code" in err[0]


def _claim_first_index(root: Path, source: str, percent: int) -> Path:
    """Leave what another process's first index leaves behind: a progress file saying how
    far it is (the lock is held by the caller)."""
    path = index_path(root.resolve(), source)
    done = percent * 10
    progress = Progress(True, 3, 10, done, 1000, 5.0, os.getpid())
    progress_path(path).write_text(json.dumps(progress.as_dict()))
    return path


def test_a_search_during_another_processs_first_index_says_how_much_is_built(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = home / ".claude"
    assert update(root.resolve(), "claude-code") is not None
    path = _claim_first_index(root, "claude-code", 37)
    with writer_lock(path) as held:
        assert held
        notes: list[str] = []
        recall_source(root, "spotter-gqc", notes=notes)
        assert any("is 37% built" in note for note in notes)
        code, _ = cli("recall", str(root), "nothing-like-this-anywhere")
        assert code == 0
        assert "is 37% built (another process is building it)" in capsys.readouterr().err


def test_on_a_terminal_a_search_waits_for_another_processs_first_index(home: Path) -> None:
    root = home / ".claude"
    path = index_path(root.resolve(), "claude-code")
    seen: list[int] = []
    release = threading.Event()

    def other_process() -> None:
        with writer_lock(path) as held:
            assert held
            _claim_first_index(root, "claude-code", 50)
            started.set()
            release.wait(10)
            progress_path(path).unlink()

    started = threading.Event()
    holder = threading.Thread(target=other_process)
    holder.start()
    started.wait(10)

    def told(progress: Progress) -> None:
        seen.append(progress.percent)
        if len(seen) >= 2:
            release.set()

    try:
        hits = recall_source(root, "spotter-gqc", progress=told)
    finally:
        release.set()
        holder.join(10)
    assert seen[:2] == [50, 50]
    assert hits and hits[0].source == "claude-code"


# --- Gemini tool outputs, roles, one index per agent's folder -----------------------------


def test_gemini_tool_outputs_are_searched_and_expanded_whole(home: Path) -> None:
    [spilled] = (home / ".gemini").rglob(f"session-{GEMINI_SESSION}/*.txt")
    [hit] = recall_source(home / ".gemini", "MAKEFILE_LIST")
    assert (hit.role, hit.session, hit.file) == ("tool", GEMINI_SESSION, spilled)
    assert hit.project is not None  # from the session's chat file beside it
    assert b"".join(expand_source(home / ".gemini", hit.id)) == spilled.read_bytes()
    assert recall_source(home / ".gemini", "MAKEFILE_LIST", role="tool")


@pytest.mark.parametrize(
    ("name", "word", "session"),
    [
        (
            "session-b1f31681-4b57-4337-8bc5-ac73580f752a/"
            "read_file_read_file_1776380515084_1_p4uij.txt",
            "VAULT-CONVENTIONS",
            "b1f31681-4b57-4337-8bc5-ac73580f752a",
        ),
        ("grep_search_20.txt", "Whistle", None),  # in no session folder: no session
    ],
)
def test_outputs_gemini_cli_spilled_in_either_layout_are_found_with_their_session(
    home: Path, name: str, word: str, session: str | None
) -> None:
    spilled = home / GEMINI_SPILLS / name
    [hit] = recall_source(home / ".gemini", word)
    assert (hit.role, hit.session, hit.file) == ("tool", session, spilled)
    whole = spilled.read_bytes()  # Gemini CLI ends it without a newline: expand adds one
    ended = whole if whole.endswith(b"\n") else whole + b"\n"
    assert b"".join(expand_source(home / ".gemini", hit.id)) == ended
    code, out = cli("recall", str(home / ".gemini"), word, "--json")
    assert code == 0 and [found["session"] for found in json.loads(out)] == [session]


def test_role_tool_and_summary_pick_those_messages(tmp_path: Path, home: Path) -> None:
    code, out = cli("recall", str(home / ".claude"), "spotter-gqc", "--role", "tool", "--json")
    assert code == 0
    assert json.loads(out) and {hit["role"] for hit in json.loads(out)} == {"tool"}
    claude = tmp_path / "gen" / ".claude"
    claude_session(claude, "ab12cd34-0010", words_for("k1"), "1.0.50")
    code, out = cli("recall", str(claude), "parser", "--role", "summary", "--json")
    assert code == 0
    assert [hit["role"] for hit in json.loads(out)] == ["summary"]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "conversation.jsonl").write_text('{"id":"a","role":"user","content":"parser"}\n')
    code, _ = cli("recall", str(workspace), "parser", "--role", "tool")
    assert code == 2  # a workspace's messages have no tool role


def test_recall_help_names_the_sources_guide_where_it_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = cli("recall", "--help")
    assert code == 0
    assert "docs/guides/sources.md" in (out + capsys.readouterr().out).replace("\n", " ")
    assert (Path(__file__).parents[2] / "docs" / "guides" / "sources.md").is_file()


def test_any_path_inside_an_agents_folder_uses_its_one_index(home: Path) -> None:
    claude = home / ".claude"
    project = claude / "projects" / "-proj-vibe-coding-tracker"
    [session] = project.glob("*.jsonl")
    paths = [claude, claude / "projects", project, session]
    for path in paths:
        assert recall_source(path, "TodoWrite")
    assert sorted(state_dir().glob("*.sqlite")) == [index_path(claude.resolve(), "claude-code")]
    assert {hit.file for hit in recall_source(session, "the", limit=50)} == {session}
    assert {hit.file for hit in recall_source(project, "the", limit=50)} == {session}
    spotter = {hit.file for hit in recall_source(claude, "the", limit=100)}
    assert session in spotter and len(spotter) > 1


# --- a session file whose name is not UTF-8 -----------------------------------------------


def test_a_session_file_whose_name_is_not_utf8_is_indexed_and_shown(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claude = home / ".claude"
    [original] = (claude / "projects" / "-proj-vibe-coding-tracker").glob("*.jsonl")
    bad = Path(os.fsdecode(bytes(original.parent) + b"/bad-\xff.jsonl"))
    shutil.copyfile(original, bad)
    result = update(claude.resolve(), "claude-code")
    assert result is not None and not result.problems
    assert figures(claude.resolve(), "claude-code")["files"] == len(
        list((claude / "projects").rglob("*.jsonl"))
    )
    code, out = cli("recall", str(claude), "TodoWrite", "--json", "--limit", "50")
    assert code == 0
    shown = {hit["file"] for hit in json.loads(out)}
    assert str(original.parent / "bad-\\xff.jsonl") in shown
    hit = next(h for h in recall_source(claude, "TodoWrite", limit=50) if h.file == bad)
    assert expand_source(claude, hit.id, pick=Pick(file=bad)) == [
        line for line in _lines(bad) if json.loads(line)["uuid"] == hit.id
    ]
    conn = sqlite3.connect(index_path(claude.resolve(), "claude-code"))
    try:
        [(name, raw)] = conn.execute("SELECT name, raw FROM archives WHERE raw IS NOT NULL")
    finally:
        conn.close()
    assert name.endswith("bad-\\xff.jsonl") and raw.endswith(b"bad-\xff.jsonl")
    assert "Traceback" not in capsys.readouterr().err


def test_nothing_is_written_under_the_folders_searched(home: Path) -> None:
    before = tree(home)
    for query in ("spotter-gqc", "toolchain", "MAKEFILE_LIST"):
        recall_source(home, query)
    assert tree(home) == before
