"""examples/agent_loop.py, run as a user would run it: a tool-calling agent on the official
SDK, sending memoryd's API view to a Messages API that refuses what the real one refuses,
for 300 turns, while a real daemon compacts its workspace underneath."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import pytest
from daemon_harness import Processes, read_state, wait_until
from fake_anthropic import FakeAnthropic, Reply

import memoryd
from memoryd.conversation.reader import ConversationReader

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"
TASK = "Task: count the lines of output until the budget has been crossed a few times."
LIMIT = 20_000


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def live_tokens(workspace: Path) -> int:
    reader = ConversationReader(workspace / "conversation.jsonl")
    reader.update()
    return reader.tally.tokens


def at_rest(workspace: Path) -> bool:
    """No job is running on ``workspace``: state.json says so and no archive file is
    still being written (a job may follow the one that brought usage under the budget)."""
    archive = workspace / ".memoryd" / "archive"
    pending = archive.exists() and any(p.name.endswith(".pending") for p in archive.iterdir())
    return not pending and (read_state(workspace) or {}).get("summarizing") is False


def every_line(workspace: Path) -> list[dict[str, Any]]:
    """The messages of the live file and of every archive, summaries and masked
    placeholders left out (a masked line's original is archived)."""
    paths = [workspace / "conversation.jsonl"]
    archive = workspace / ".memoryd" / "archive"
    if archive.exists():
        paths += sorted(archive.glob("*.jsonl"))  # not a job's .pending file, mid-write
    found = []
    for path in paths:
        for line in path.read_bytes().splitlines():
            message = json.loads(line)
            if not message.get("isSummary") and not message.get("isMasked"):
                found.append(message)
    return found


def command_for(request: Any) -> tuple[str, dict[str, Any]]:
    step = len(request["messages"])
    return "bash", {"command": f"echo step {step}; seq 1 250"}


@pytest.mark.slow
def test_the_example_agent_runs_300_turns_while_the_daemon_compacts(
    tmp_path: Path, procs: Processes, fake_anthropic: FakeAnthropic
) -> None:
    """No request is refused, nothing is lost, the task stays first, and usage above the
    budget never outlasts one job."""
    example = load_example()
    fake_anthropic.set_default(Reply.tool_call(command_for))
    root = tmp_path / "root"
    workspace = root / "agent"
    workspace.mkdir(parents=True)
    memoryd.append_message(workspace, "user", TASK)
    env = {"MEMORYD_TOKEN_LIMIT": str(LIMIT), "MEMORYD_DRAIN_SECONDS": "0"}
    daemon = procs.daemon([root], tmp_path / "home", env)
    daemon.wait_ready()
    longest_over = 0.0
    with anthropic.Anthropic(
        base_url=fake_anthropic.base_url, api_key="sk-test", max_retries=0
    ) as client:
        for _ in range(300):
            assert example.turn(client, workspace, "claude-haiku-4-5")
            if live_tokens(workspace) > LIMIT:
                started = time.monotonic()
                wait_until(lambda: live_tokens(workspace) <= LIMIT, 30, "a job below the budget")
                longest_over = max(longest_over, time.monotonic() - started)

    requests = [r for r in fake_anthropic.requests if r.path.startswith("/v1/messages")]
    assert len(requests) == 300
    messages = every_line(workspace)
    assert len(messages) == 1 + 2 * 300
    assert len({m["id"] for m in messages}) == len(messages)
    archive = workspace / ".memoryd" / "archive"
    assert archive.exists() and len(list(archive.iterdir())) >= 3
    view = memoryd.messages_for_api(workspace)
    assert view[0]["role"] == "user"
    assert (
        any(block.get("text") == TASK for block in view[0]["content"] if isinstance(block, dict))
        or view[0]["content"] == TASK
    )
    assert longest_over < 10.0
    assert daemon.process is not None and daemon.process.poll() is None


OFFLINE_LIMIT = 8_000


@pytest.mark.slow
def test_the_example_runs_100_turns_offline_while_the_daemon_compacts(
    tmp_path: Path, procs: Processes, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--offline`` as the README runs it, no key and no network: four runs of 25 turns on
    one workspace (the task appended by the first only), the daemon compacting between and
    during them. Every request passes the scripted model's check of the API's rules (a
    refusal would end a run with exit 1), nothing is lost, and the daemon compacts."""
    example = load_example()
    root = tmp_path / "root"
    root.mkdir()
    workspace = root / "agent"
    env = {"MEMORYD_TOKEN_LIMIT": str(OFFLINE_LIMIT), "MEMORYD_DRAIN_SECONDS": "0"}
    daemon = procs.daemon([root], tmp_path / "home", env)
    daemon.wait_ready()
    for _ in range(4):
        code = example.main([str(workspace), TASK, "--offline", "--turns", "25", "--latency", "0"])
        assert code == 0
        assert "25 turns" in capsys.readouterr().out
        wait_until(lambda: live_tokens(workspace) <= OFFLINE_LIMIT, 30, "a job below the budget")
    wait_until(lambda: at_rest(workspace), 60, "no job running")
    messages = every_line(workspace)
    assert len(messages) == 1 + 2 * 100
    assert [m["content"] for m in messages].count(TASK) == 1
    assert len({m["id"] for m in messages}) == len(messages)
    assert len(list((workspace / ".memoryd" / "archive").iterdir())) >= 3
    example.check_request(memoryd.messages_for_api(workspace))
    assert daemon.process is not None and daemon.process.poll() is None


def test_the_scripted_model_refuses_what_the_api_refuses() -> None:
    """The offline mode's check is a real check: each broken request is refused."""
    example = load_example()
    call = {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "ls"}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "ok"}
    good: list[dict[str, Any]] = [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [result]},
    ]
    example.check_request(good)
    broken = [
        good[1:],
        [good[0], good[0]],
        [good[0], good[1], {"role": "user", "content": "no result"}],
        [good[0], {"role": "assistant", "content": "no call"}, good[2]],
        [{**good[0], "id": "msg-1"}],
    ]
    for messages in broken:
        with pytest.raises(example.RequestRefused):
            example.check_request(messages)


def test_without_a_key_the_example_says_so_in_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    example = load_example()
    with pytest.raises(SystemExit) as exited:
        example.main([str(tmp_path / "new"), "a task"])
    assert exited.value.code == 2
    assert "--offline" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
