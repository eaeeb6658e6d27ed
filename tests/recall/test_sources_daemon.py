"""Sources kept warm and served: the daemon tails ``[[sources]]`` with the workspaces'
watcher and coalescing, so the index holds an append before anyone asks; ``memoryd
status`` lists them; the MCP ``recall`` and ``expand`` tools take a ``source``."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from agent_sessions import claude_session, codex_session, line, tree, words_for
from cli_helpers import cli
from daemon_harness import wait_until
from mcp import Client
from mcp_client import error_text, structured, with_server

from memoryd.config.settings import load_settings
from memoryd.daemon.sources import SourceTailer
from memoryd.daemon.supervisor import Supervisor
from memoryd.search.sessions.places import STATUS_FILE, state_dir
from memoryd.search.sessions.store import index_path


def indexed(home: Path, source: str, message_id: str) -> bool:
    path = index_path(home.resolve(), source)
    if not path.exists():
        return False
    conn = sqlite3.connect(path)
    try:
        query = "SELECT count(*) FROM messages WHERE message_id = ?"
        return bool(conn.execute(query, (message_id,)).fetchone()[0])
    except sqlite3.OperationalError:  # created, its tables not yet
        return False
    finally:
        conn.close()


def appended_item(path: Path, ident: str, text: str) -> None:
    with path.open("ab") as file:
        file.write(
            line(
                {
                    "timestamp": "2026-03-01T10:00:00Z",
                    "type": "response_item",
                    "payload": {
                        "type": "message",
                        "id": ident,
                        "role": "user",
                        "content": [{"type": "input_text", "text": text}],
                    },
                }
            )
        )


def test_the_daemon_indexes_an_append_before_anyone_asks(tmp_path: Path) -> None:
    codex = tmp_path / ".codex"
    path = codex_session(codex, "5e5e5e5e-0001", words_for("d1"), "0.46.0")
    root = tmp_path / "agents"
    root.mkdir()
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    overrides = {
        "roots": [str(root)],
        "workers": 1,
        "coalesce_ms": 50,
        "summarizer.backend": "extractive",
        "sources": [{"kind": "codex", "path": str(codex)}],
    }
    supervisor = Supervisor(load_settings(overrides=overrides, env=env), env=env)
    before = tree(codex)
    try:
        supervisor.start()
        wait_until(lambda: indexed(codex, "codex", "call_15e5e5e5e:output"), 30, "first pass")
        appended_item(path, "late-1", "appendedword arrives while the daemon runs")
        wait_until(lambda: indexed(codex, "codex", "late-1"), 30, "the append indexed")
        status = wait_until(
            lambda: (
                json.loads((state_dir() / STATUS_FILE).read_text())["sources"][0]
                if (state_dir() / STATUS_FILE).exists()
                else None
            ),
            10,
            "daemon.json",
        )
    finally:
        supervisor.close()
    assert status["kind"] == "codex" and status["sessions"] == 1
    assert status["messages"] >= 7 and status["lines"] >= 10
    assert status["lag_seconds"] >= 0 and status["error"] is None
    after = tree(codex)
    assert {k: v[2] for k, v in after.items() if k != str(path.relative_to(codex))} == {
        k: v[2] for k, v in before.items() if k != str(path.relative_to(codex))
    }
    code, out = cli("recall", str(codex), "appendedword", "--json")
    assert code == 0 and [hit["id"] for hit in json.loads(out)] == ["late-1"]


def test_a_source_folder_made_after_start_is_found_at_the_rescan(tmp_path: Path) -> None:
    from memoryd.config.sections import SourceEntry

    later = tmp_path / ".claude"
    tailer = SourceTailer([SourceEntry(kind="claude-code", path=later)], 0.0, 3600.0)
    tailer.step(0.0, wait=0)
    assert tailer.sources[0].root is None and tailer.sources[0].error
    claude_session(later, "6f6f6f6f-0002", words_for("r1"))
    tailer.next_rescan = 0.0
    tailer.step(0.0, wait=0)
    try:
        assert indexed(later, "claude-code", "6f6f6f6f-u0")
        assert tailer.status()[0]["sessions"] == 1
    finally:
        tailer.close()


def test_status_lists_the_configured_sources(tmp_path: Path) -> None:
    codex = tmp_path / ".codex"
    codex_session(codex, "7a7a7a7a-0003", words_for("s1"), "0.46.0")
    config = tmp_path / "memoryd.toml"
    config.write_text(f'roots = ["{tmp_path}"]\n[[sources]]\nkind = "codex"\npath = "{codex}"\n')
    tailer = SourceTailer(load_settings(config).settings.sources, 0.0, 3600.0)
    tailer.step(0.0, wait=0)
    tailer.close()
    code, out = cli("status", "--config", str(config))
    assert code == 0
    assert "codex" in out and str(codex) in out and "sessions" in out


@pytest.mark.slow
def test_mcp_recall_and_expand_take_a_source(tmp_path: Path) -> None:
    claude = tmp_path / ".claude"
    claude_session(claude, "8b8b8b8b-0004", words_for("m1"))
    (tmp_path / "agents").mkdir()

    async def session(client: Client) -> None:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert "source" in tools["recall"].input_schema["properties"]
        assert "source" in tools["expand"].input_schema["properties"]
        hits = structured(
            await client.call_tool("recall", {"query": "outputwordm1", "source": "claude-code"})
        )["hits"]
        assert [(h["source"], h["session"], h["id"]) for h in hits] == [
            ("claude-code", "8b8b8b8b-0004", "8b8b8b8b-u4")
        ]
        lines = structured(
            await client.call_tool(
                "expand", {"id": "8b8b8b8b-u4", "source": "claude-code", "before": 1}
            )
        )["lines"]
        assert len(lines) == 2 and "outputwordm1" in lines[1]
        tools_only = structured(
            await client.call_tool(
                "recall", {"query": "outputwordm1", "source": "claude-code", "role": "tool"}
            )
        )["hits"]
        assert [h["role"] for h in tools_only] == ["tool"]
        refused = await client.call_tool("recall", {"query": "x", "source": "gemini"})
        assert "no gemini sessions are served" in error_text(refused)

    with_server(tmp_path, "--root", str(tmp_path / "agents"), "--source", str(claude))(session)
    assert sys.executable


@pytest.mark.slow
def test_mcp_expand_picks_the_copy_of_a_colliding_id_by_session_or_file(tmp_path: Path) -> None:
    """One id on different lines of two sessions (a session file copied and changed): the
    MCP ``expand`` gives the line said first and says the id is on several lines;
    ``session`` or ``file`` picks the other, as the CLI's ``--session`` and ``--file`` do;
    without ``source`` they are refused."""
    claude = tmp_path / ".claude"
    original = claude_session(claude, "8b8b8b8b-0006", words_for("k1"))
    copy = claude / "projects" / "-elsewhere" / "copied-0006.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(
        original.read_bytes()
        .replace(b"8b8b8b8b-0006", b"copied-0006")
        .replace(b"outputwordk1", b"changedwordk1")
    )
    (tmp_path / "agents").mkdir()

    async def session(client: Client) -> None:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"session", "file"} <= set(tools["expand"].input_schema["properties"])
        [hit] = structured(
            await client.call_tool("recall", {"query": "changedwordk1", "source": "claude-code"})
        )["hits"]
        assert hit["file"] == str(copy.resolve()) and hit["copies"] == []
        ident = hit["id"]
        first = structured(await client.call_tool("expand", {"id": ident, "source": "claude-code"}))
        assert len(first["lines"]) == 1  # one of the two: the one said first
        assert any("different lines have this id" in note for note in first["notes"])
        for pick, word in (
            ({"session": "copied-0006"}, "changedwordk1"),
            ({"file": hit["file"]}, "changedwordk1"),
            ({"session": "8b8b8b8b-0006"}, "outputwordk1"),
            ({"file": str(original.resolve())}, "outputwordk1"),
        ):
            picked = structured(
                await client.call_tool("expand", {"id": ident, "source": "claude-code", **pick})
            )
            assert [word in line for line in picked["lines"]] == [True], pick
        nowhere = await client.call_tool(
            "expand", {"id": ident, "source": "claude-code", "session": "no-such-session"}
        )
        assert nowhere.is_error
        refused = await client.call_tool("expand", {"id": ident, "session": "copied-0006"})
        assert "give source" in error_text(refused)

    with_server(tmp_path, "--root", str(tmp_path / "agents"), "--source", str(claude))(session)


def test_a_single_session_file_is_tailed_from_its_watch_events(tmp_path: Path) -> None:
    from memoryd.config.sections import SourceEntry

    path = codex_session(tmp_path / ".codex", "9c9c9c9c-0005", words_for("f1"), "0.46.0")
    tailer = SourceTailer([SourceEntry(kind="codex", path=path)], 0.05, 3600.0)
    try:
        tailer.step(0.0, wait=0)  # the first pass, and the watch starts
        assert indexed(path, "codex", "call_19c9c9c9c:output")
        appended_item(path, "tail-1", "tailedword")

        def stepped() -> bool:
            tailer.step(time.monotonic(), wait=0.05)
            return indexed(path, "codex", "tail-1")

        wait_until(stepped, 30, "the append indexed from its event", interval=0)
        assert tailer.next_rescan > time.monotonic()  # not by the rescan
    finally:
        tailer.close()
