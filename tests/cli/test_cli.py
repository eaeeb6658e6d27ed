"""The ``memoryd`` command: main(argv, out) in process, and real ``python -m memoryd`` runs."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import WorkspaceFactory
from fake_anthropic import FakeAnthropic, Reply


@pytest.fixture(autouse=True)
def _no_default_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count what a job replaces, from the first message on: the default pin
    of the task (keep_first = 1) is tested in tests/compaction/test_agent_loops.py."""
    monkeypatch.setenv("MEMORYD_KEEP_FIRST", "0")


SECRET = "sk-secret-123"


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget that 40 messages of 1000 characters exceed, the extractive backend, no drain."""
    monkeypatch.setenv("MEMORYD_TOKEN_LIMIT", "12000")
    monkeypatch.setenv("MEMORYD_SUMMARIZER__BACKEND", "extractive")
    monkeypatch.setenv("MEMORYD_DRAIN_SECONDS", "0")


def conversation(folder: Path) -> bytes:
    return (folder / "conversation.jsonl").read_bytes()


def one_clear_line(stderr: str) -> str:
    """The single line a failing command printed on stderr (and no traceback)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# --- summarize --------------------------------------------------------------------------------


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("masking", ["true", "false"])
def test_summarize_dry_run_says_what_would_happen_and_changes_nothing(
    masking: str, workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--dry-run prints the plan and leaves every file as it was: with masking off the
    strategy's share (at least 24 of 40 messages), with masking on (nothing to mask here)
    the fewest that bring usage to 40%, the aim it names."""
    monkeypatch.setenv("MEMORYD_MASKING__ENABLED", masking)
    folder = workspace(40, 1000)
    before = conversation(folder)
    code, out = cli("summarize", str(folder), "--dry-run")
    assert code == 0
    assert "dry run" in out
    found = re.search(r"would replace (\d+) messages .* keep (\d+) verbatim", out)
    assert found is not None, out
    if masking == "false":
        assert int(found[1]) >= 24 and "to reach" not in out
    else:
        assert int(found[1]) >= 1 and "with one summary to reach 0.40 and keep" in out
    assert int(found[1]) + int(found[2]) == 40
    assert conversation(folder) == before
    assert not (folder / "HEARTBEAT.md").exists()
    assert not (folder / ".memoryd" / "archive").exists()
    assert not (folder / ".memoryd" / "events.jsonl").exists()
    assert not (folder / ".memoryd" / "state.json").exists()


def test_summarize_below_the_trigger_says_nothing_to_do(workspace: WorkspaceFactory) -> None:
    """Below summarize_at (default budget 100,000 tokens): exit 0, 'nothing to do', unchanged."""
    folder = workspace(10, 400)
    before = conversation(folder)
    code, out = cli("summarize", str(folder))
    assert code == 0
    assert "nothing to do" in out
    assert conversation(folder) == before


def test_summarize_force_summarizes_below_the_trigger(
    workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--force runs the job even below the trigger: one summary message heads the file."""
    monkeypatch.setenv("MEMORYD_SUMMARIZER__BACKEND", "extractive")
    monkeypatch.setenv("MEMORYD_DRAIN_SECONDS", "0")
    folder = workspace(10, 400)
    original = conversation(folder).splitlines(keepends=True)
    code, out = cli("summarize", str(folder), "--force")
    assert code == 0
    assert "replaced 6 messages" in out
    lines = conversation(folder).splitlines(keepends=True)
    assert json.loads(lines[0])["isSummary"] is True
    assert lines[1:] == original[6:]


@pytest.mark.usefixtures("offline")
def test_summarize_above_the_trigger_reports_the_figures(workspace: WorkspaceFactory) -> None:
    """Over the trigger: exit 0 and one line with what was summarized and why, messages
    before/after and the archive; usage ends at or below the 40% a summary aims at."""
    folder = workspace(40, 1000)
    code, out = cli("summarize", str(folder))
    assert code == 0
    found = re.search(
        r"summarized (\d+)[^:]* to reach 0.40 \(now (0\.\d+)\).* 40 → (\d+) messages", out
    )
    assert found is not None, out
    assert float(found[2]) <= 0.40 and int(found[3]) == 40 - int(found[1]) + 1, out
    assert ".memoryd/archive/" in out


def test_summarize_missing_workspace_is_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A workspace that does not exist: exit 2, one line naming it on stderr, no traceback."""
    missing = tmp_path / "nowhere"
    code, out = cli("summarize", str(missing))
    assert code == 2
    assert out == ""
    line = one_clear_line(capsys.readouterr().err)
    assert str(missing) in line


def test_bad_config_value_is_exit_2_naming_the_key(
    workspace: WorkspaceFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """MEMORYD_TOKEN_LIMIT=abc: exit 2, one line naming token_limit, its value and source."""
    folder = workspace(4, 100)
    monkeypatch.setenv("MEMORYD_TOKEN_LIMIT", "abc")
    before = conversation(folder)
    code, _ = cli("summarize", str(folder))
    assert code == 2
    line = one_clear_line(capsys.readouterr().err)
    assert "token_limit" in line
    assert "'abc'" in line
    assert "MEMORYD_TOKEN_LIMIT" in line
    assert conversation(folder) == before


def test_explicit_missing_config_file_is_exit_2(
    workspace: WorkspaceFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--config naming a file that does not exist is an error, not 'no file'."""
    folder = workspace(4, 100)
    missing = tmp_path / "missing.toml"
    code, _ = cli("--config", str(missing), "status", str(folder))
    assert code == 2
    line = one_clear_line(capsys.readouterr().err)
    assert str(missing) in line


def test_failed_job_exits_1_and_leaves_the_files_unchanged(
    workspace: WorkspaceFactory,
    monkeypatch: pytest.MonkeyPatch,
    fake_anthropic: FakeAnthropic,
) -> None:
    """The LLM answers 500: exit 1, 'failed' with the reason, conversation byte-identical."""
    monkeypatch.setenv("MEMORYD_TOKEN_LIMIT", "12000")
    monkeypatch.setenv("MEMORYD_SUMMARIZER__BACKEND", "anthropic")
    monkeypatch.setenv("MEMORYD_ANTHROPIC__BASE_URL", fake_anthropic.base_url)
    monkeypatch.setenv("MEMORYD_ANTHROPIC__MAX_RETRIES", "0")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-cli-test")
    fake_anthropic.set_default(Reply.error(500))
    folder = workspace(40, 1000)
    before = conversation(folder)
    code, out = cli("summarize", str(folder))
    assert code == 1
    assert "failed" in out
    assert "500" in out
    assert conversation(folder) == before
    assert len(fake_anthropic.message_requests) == 1
    assert not (folder / ".memoryd" / "archive").exists()


# --- append -----------------------------------------------------------------------------------


def test_append_with_content_adds_one_message(workspace: WorkspaceFactory) -> None:
    """--content appends one message with that text and prints its id."""
    folder = workspace(2, 100)
    before = conversation(folder)
    code, out = cli("append", str(folder), "--role", "assistant", "--content", "done: tests pass")
    assert code == 0
    printed = json.loads(out)
    added = json.loads(conversation(folder)[len(before) :])
    assert printed == {"appended": True, "id": added["id"]}
    assert (added["role"], added["content"]) == ("assistant", "done: tests pass")


def test_append_reads_the_content_from_stdin(
    workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --content the message text is stdin, as given."""
    folder = workspace(2, 100)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"line one\nline two\n")))
    code, _ = cli("append", str(folder), "--role", "user")
    assert code == 0
    last = json.loads(conversation(folder).splitlines()[-1])
    assert last["content"] == "line one\nline two\n"
    assert last["role"] == "user"


def test_append_bad_role_is_exit_2_and_writes_nothing(
    workspace: WorkspaceFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """--role system is bad usage: exit 2, one line naming the role, nothing appended."""
    folder = workspace(2, 100)
    before = conversation(folder)
    code, _ = cli("append", str(folder), "--role", "system", "--content", "x")
    assert code == 2
    assert "system" in one_clear_line(capsys.readouterr().err)
    assert conversation(folder) == before


# --- heartbeat ----------------------------------------------------------------------------------


def test_heartbeat_lifecycle_start_checkin_complete_reset_show(tmp_path: Path) -> None:
    """start -> active, checkin keeps it active, complete -> completed (and bookmarks it),
    reset -> idle; show prints what HEARTBEAT.md holds."""
    folder = tmp_path / "ws"
    folder.mkdir()

    code, out = cli("heartbeat", str(folder), "start", "Refactor the parser")
    started = json.loads(out)
    assert code == 0
    assert (started["status"], started["current_task"]) == ("active", "Refactor the parser")
    assert "status: active" in (folder / "HEARTBEAT.md").read_text()

    code, out = cli("heartbeat", str(folder), "checkin")
    checked = json.loads(out)
    assert code == 0
    assert checked["status"] == "active"
    assert checked["last_checkin"] >= started["last_checkin"]

    code, out = cli("heartbeat", str(folder), "complete", "--result", "parser split in two")
    completed = json.loads(out)
    assert code == 0
    assert (completed["status"], completed["last_result"]) == ("completed", "parser split in two")
    # No task is current after complete: the task and its start time are cleared.
    assert (completed["current_task"], completed["started_at"]) == (None, None)
    assert "Refactor the parser" not in (folder / "HEARTBEAT.md").read_text()
    [bookmark] = [
        json.loads(line)
        for line in (folder / "memory" / "bookmarks.jsonl").read_text().splitlines()
    ]
    assert bookmark["task"] == "Refactor the parser"
    assert bookmark["status"] == "completed"
    assert bookmark["started_at"] == started["started_at"]
    assert bookmark["result"] == "parser split in two"

    code, out = cli("heartbeat", str(folder), "show")
    assert code == 0
    assert json.loads(out) == completed

    code, out = cli("heartbeat", str(folder), "reset")
    assert code == 0
    assert json.loads(out)["status"] == "idle"
    assert json.loads(out)["current_task"] is None
    _, shown = cli("heartbeat", str(folder), "show")
    assert json.loads(shown)["status"] == "idle"


def test_heartbeat_show_without_a_file_reports_idle(tmp_path: Path) -> None:
    """show on a workspace without HEARTBEAT.md reports idle."""
    code, out = cli("heartbeat", str(tmp_path), "show")
    assert code == 0
    assert json.loads(out)["status"] == "idle"


# --- status and config ------------------------------------------------------------------------


@pytest.mark.usefixtures("offline")
def test_status_json_has_the_state_fields_plus_strategy_and_heartbeat(
    workspace: WorkspaceFactory,
) -> None:
    """--json: a list of objects with every state.json field, strategy and heartbeat."""
    folder = workspace(40, 1000)
    assert cli("summarize", str(folder))[0] == 0
    state = json.loads((folder / ".memoryd" / "state.json").read_bytes())

    code, out = cli("status", str(folder), "--json")
    assert code == 0
    [row] = json.loads(out)
    assert set(state) | {"strategy", "heartbeat"} <= set(row)
    assert row["workspace"] == str(folder)
    assert row["messages"] == state["messages"] == len(conversation(folder).splitlines())
    assert row["tokens"] == state["tokens"]
    assert row["level"] == "normal"
    assert row["strategy"] == "narrative"
    assert row["heartbeat"]["status"] == "completed"
    assert row["last_summary_at"] == state["last_summary_at"]


@pytest.mark.usefixtures("offline")
def test_status_table_lists_every_workspace_under_a_folder(
    workspace: WorkspaceFactory, tmp_path: Path
) -> None:
    """Without --json: a header and one row per workspace with messages, usage and level."""
    workspace(4, 100, name="root/alpha")
    workspace(40, 1000, name="root/beta")
    code, out = cli("status", str(tmp_path / "root"))
    assert code == 0
    header, *rows = out.strip().splitlines()
    assert header.split()[:5] == ["WORKSPACE", "MESSAGES", "TOKENS", "USAGE", "LEVEL"]
    assert [row.split()[0] for row in rows] == [
        str(tmp_path / "root" / "alpha"),
        str(tmp_path / "root" / "beta"),
    ]
    assert rows[0].split()[1] == "4"
    assert rows[1].split()[1:5] == ["40", "10,160/12,000", "85%", "warning"]


def test_config_prints_the_api_key_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    """memoryd config (text and --json) never prints the key, but says it is set and where from."""
    monkeypatch.setenv("MEMORYD_ANTHROPIC__API_KEY", SECRET)
    code, out = cli("config")
    assert code == 0
    assert SECRET not in out
    [key_line] = [line for line in out.splitlines() if line.startswith("anthropic.api_key")]
    assert "masked" in key_line
    assert "MEMORYD_ANTHROPIC__API_KEY" in key_line
    assert "token_limit = 100000" in out

    code, out = cli("config", "--json")
    assert code == 0
    assert SECRET not in out
    assert json.loads(out)["settings"]["anthropic"]["api_key"] == "set (masked)"


# --- real processes ----------------------------------------------------------------------------


def memoryd_process(
    *argv: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``python -m memoryd argv`` in a fresh interpreter with this test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "memoryd", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_process_missing_workspace_exits_2_with_one_line_and_no_traceback(
    tmp_path: Path,
) -> None:
    """A real run on a missing workspace: exit 2, exactly one stderr line, nothing on stdout."""
    done = memoryd_process("summarize", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert "no such workspace" in one_clear_line(done.stderr)


def test_process_bad_config_value_exits_2_naming_the_key(workspace: WorkspaceFactory) -> None:
    """A real run with MEMORYD_TOKEN_LIMIT=abc: exit 2, one line naming token_limit."""
    folder = workspace(4, 100)
    done = memoryd_process("status", str(folder), env={"MEMORYD_TOKEN_LIMIT": "abc"})
    assert done.returncode == 2
    assert "token_limit" in one_clear_line(done.stderr)


def test_process_append_from_stdin_then_summarize(workspace: WorkspaceFactory) -> None:
    """A real append from a pipe, then a real summarize job: exit 0 and a summary at the head."""
    folder = workspace(39, 1000)
    appended = memoryd_process("append", str(folder), "--role", "assistant", stdin="piped text")
    assert appended.returncode == 0, appended.stderr
    assert json.loads(conversation(folder).splitlines()[-1])["content"] == "piped text"
    done = memoryd_process(
        "summarize",
        str(folder),
        env={
            "MEMORYD_TOKEN_LIMIT": "12000",
            "MEMORYD_SUMMARIZER__BACKEND": "extractive",
            "MEMORYD_DRAIN_SECONDS": "0",
        },
    )
    assert done.returncode == 0, done.stderr
    found = re.search(r"to reach 0.40 \(now (0\.\d+)\).* 40 → (\d+) messages", done.stdout)
    assert found is not None and float(found[1]) <= 0.40 and int(found[2]) < 40, done.stdout
    assert json.loads(conversation(folder).splitlines()[0])["isSummary"] is True


def test_status_of_configured_roots_that_do_not_exist_says_so_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fresh machine has no ~/agents yet: status says the root is missing, not an error."""
    monkeypatch.setenv("MEMORYD_ROOTS", json.dumps([str(tmp_path / "agents")]))
    code, out = cli("status")
    assert code == 0
    assert out.strip() == "no workspaces found under the configured roots"
    assert f"root {tmp_path / 'agents'} does not exist" in capsys.readouterr().err


def test_status_of_an_unreadable_conversation_is_one_clear_line_exit_2(
    workspace: WorkspaceFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """EACCES on conversation.jsonl (simulated: the tests run as root): exit 2, one line
    that names the file and the reason, no traceback."""
    ws = workspace(4, 100)
    target = str(ws / "conversation.jsonl")
    real_open = os.open

    def deny(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if os.fspath(path) == target:
            raise PermissionError(errno.EACCES, "Permission denied", target)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr("memoryd.conversation.lines.os.open", deny)
    code, _ = cli("status", str(ws))
    assert code == 2
    line = one_clear_line(capsys.readouterr().err)
    assert target in line and "Permission denied" in line


def test_status_shows_every_workspace_and_a_bad_ones_error_in_its_row(
    workspace: WorkspaceFactory,
) -> None:
    """token_limit = -3 in one workspace's .memoryd/config.toml: the other rows are shown,
    that one carries its configuration error, and the command does not fail."""
    for name in ("root/a", "root/b", "root/c"):
        workspace(4, 100, name=name)
    bad = workspace(4, 100, name="root/b")
    (bad / ".memoryd").mkdir()
    (bad / ".memoryd" / "config.toml").write_text("token_limit = -3\n")
    root = bad.parent
    code, out = cli("status", str(root), "--json")
    assert code == 0
    rows = {Path(row["workspace"]).name: row for row in json.loads(out)}
    assert set(rows) == {"a", "b", "c"}
    assert rows["a"]["messages"] == rows["c"]["messages"] == 4
    assert "token_limit = -3" in rows["b"]["error"]
    assert "greater than 0" in rows["b"]["error"]
    code, table = cli("status", str(root))
    assert code == 0
    line_b = next(line for line in table.splitlines() if line.split()[0].endswith("/b"))
    assert "error" in line_b and "token_limit = -3" in line_b
    assert len(table.splitlines()) == 4


def test_the_watch_frame_shows_an_error_row() -> None:
    from memoryd.status.watch import render_frame

    rows = [{"workspace": "/r/b", "error": "config: token_limit = -3 (in file f): bad"}]
    lines = render_frame(rows, 0.0, 200, fancy=False)
    assert "/r/b" in lines[2] and "error" in lines[2] and "token_limit = -3" in lines[2]
