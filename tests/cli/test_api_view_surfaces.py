"""The API view from the outside: a workspace compacted by ``memoryd summarize`` is refused
by the API as it is on disk and accepted through its view (the real SDK against the fake
server); ``memoryd messages``, ``memoryd.messages_for_api`` and their refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anthropic
import pytest
from api_rules import request_problem
from cli_helpers import cli
from conftest import WorkspaceFactory, encode_lines, make_message
from fake_anthropic import FakeAnthropic

import memoryd

REPO = Path(__file__).resolve().parents[2]


def agent_loop(pairs: int) -> list[dict[str, Any] | bytes]:
    """A pinned task, then ``pairs`` tool calls with long outputs (a hook's reminder, a user
    turn of its own, after every fifth result), a malformed line near the end and a
    closing answer."""
    lines: list[dict[str, Any] | bytes] = [
        make_message(0, "user", "Task: make the test suite pass.", pinned=True)
    ]
    for n in range(1, pairs + 1):
        call = {"type": "tool_use", "id": f"toolu_{n}", "name": "bash", "input": {"cmd": "pytest"}}
        output = f"run {n}: " + "FAILED tests/test_x.py::test_a - KeyError 'port'\n" * 12
        result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": output}
        lines.append(
            make_message(2 * n - 1, "assistant", [{"type": "text", "text": "Again."}, call])
        )
        lines.append(make_message(2 * n, "user", [result]))
        if n % 5 == 0:
            reminder = "<system-reminder>Keep the fix minimal.</system-reminder>"
            lines.append(make_message(1000 + n, "user", reminder))
    lines.append(b"{not json\n")
    lines.append(make_message(2 * pairs + 1, "assistant", "All tests pass now."))
    return lines


def sent_through_the_sdk(server: FakeAnthropic, messages: Any) -> int:
    """The HTTP status the fake API answers to ``messages`` sent with the real SDK."""
    with anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0) as client:
        try:
            client.messages.create(model="claude-test", max_tokens=64, messages=messages)
        except anthropic.BadRequestError as exc:
            return exc.status_code
    return 200


@pytest.mark.parametrize("strategy", ["narrative", "checkpoint"])
def test_a_compacted_workspace_is_sent_through_its_view(
    workspace: WorkspaceFactory,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
    strategy: str,
) -> None:
    monkeypatch.setenv("MEMORYD_SUMMARIZER__BACKEND", "extractive")
    monkeypatch.setenv("MEMORYD_DRAIN_SECONDS", "0")
    monkeypatch.setenv("MEMORYD_STRATEGY", strategy)
    folder = workspace(messages=agent_loop(30), tail=b'{"role": "user", "content": "half')
    assert cli("summarize", str(folder), "--force")[0] == 0
    lines = (folder / "conversation.jsonl").read_bytes().split(b"\n")
    head = json.loads(lines[0])
    assert head["isSummary"] is True and head["role"] == "assistant"
    assert head.get("isCheckpoint", False) is (strategy == "checkpoint")
    records = [json.loads(line) for line in lines[:-1] if line.startswith(b'{"')]
    assert request_problem({"model": "m", "max_tokens": 64, "messages": records}) is not None
    assert sent_through_the_sdk(fake_anthropic, records) == 400

    view = memoryd.messages_for_api(folder)

    assert view[0]["role"] == "user"
    first = json.dumps(view[0])
    assert head["content"][:30] in first and "Task: make the test suite pass." in first
    assert "half" not in json.dumps(view) and "not json" not in json.dumps(view)
    assert sent_through_the_sdk(fake_anthropic, view) == 200
    assert fake_anthropic.message_requests[-1].body["messages"] == view
    code, out = cli("messages", str(folder))
    assert code == 0 and json.loads(out) == view


def test_the_view_of_a_file_as_agents_write_it_skips_malformed_and_partial_lines(
    workspace: WorkspaceFactory,
) -> None:
    folder = workspace(
        messages=[
            make_message(1, "user", "hi"),
            b"\xff\xfe not UTF-8\n",
            b"[1, 2]\n",
            make_message(2, "assistant", "hello"),
        ],
        tail=b'{"id": "msg-0003", "role": "user", "content": "wri',
    )
    view = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert memoryd.messages_for_api(folder) == view
    left_out: list[int] = []
    assert memoryd.messages_for_api(folder, left_out) == view
    assert left_out == [2, 3]


def test_messages_counts_a_left_out_line_on_stderr_and_in_json(
    workspace: WorkspaceFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """A malformed line is never dropped without a word: one line on stderr, and its line
    number in ``--json``'s ``left_out``."""
    folder = workspace(messages=[make_message(1, "user", "hi"), b"{oops\n"])
    capsys.readouterr()
    code, out = cli("messages", str(folder))
    assert code == 0 and json.loads(out) == [{"role": "user", "content": "hi"}]
    [line] = capsys.readouterr().err.splitlines()
    assert line == "memoryd: 1 malformed line left out of the view (line 2), kept in the file"
    code, out = cli("messages", str(folder), "--json")
    assert json.loads(out) == {"messages": [{"role": "user", "content": "hi"}], "left_out": [2]}


def test_messages_of_an_empty_conversation_is_an_empty_array(workspace: WorkspaceFactory) -> None:
    folder = workspace(messages=[])
    assert cli("messages", str(folder)) == (0, "[]\n")


def test_messages_refuses_a_bad_workspace_in_one_line_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    no_conversation = tmp_path / "empty"
    no_conversation.mkdir()
    linked = tmp_path / "linked"
    linked.mkdir()
    (tmp_path / "elsewhere.jsonl").write_bytes(encode_lines([make_message(1, "user", "x")]))
    (linked / "conversation.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for folder, reason in [
        (tmp_path / "missing", "no such workspace folder"),
        (a_file, "is not a folder"),
        (no_conversation, "no conversation.jsonl in this workspace"),
        (linked, "symlink"),
    ]:
        assert cli("messages", str(folder)) == (2, "")
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memoryd: ") and reason in err[0], err


def test_messages_loads_nothing_heavy(workspace: WorkspaceFactory) -> None:
    """An agent may call it before every request: no SDK, mcp, pydantic or structlog."""
    folder = workspace(4, 100)
    probe = (
        "import io, json, sys\n"
        "from memoryd.cli import main\n"
        "code = main(['messages', sys.argv[1]], io.StringIO())\n"
        "heavy = ('anthropic', 'mcp', 'pydantic', 'structlog', 'watchdog')\n"
        "print(json.dumps([code, sorted(m for m in sys.modules if m.split('.')[0] in heavy)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(folder)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == [0, []]


def test_messages_no_thinking_prints_the_view_for_requests_with_thinking_off(
    workspace: WorkspaceFactory,
) -> None:
    """``memoryd messages WS --no-thinking`` is the view without thinking blocks; without
    the flag they lead their turn, as sent with thinking on."""
    thought = {"type": "thinking", "thinking": "Check the path.", "signature": "c2ln"}
    call = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls"}}
    lines = [
        make_message(0, "user", "List it."),
        make_message(1, "assistant", [thought]),
        make_message(2, "assistant", [call]),
    ]
    folder = workspace(messages=lines)
    code, printed = cli("messages", str(folder))
    assert code == 0 and json.loads(printed)[1]["content"] == [thought, call]
    code, printed = cli("messages", str(folder), "--no-thinking")
    assert code == 0 and json.loads(printed)[1]["content"] == [call]
    assert memoryd.messages_for_api(folder, thinking=False) == json.loads(printed)
