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
from daemon_harness import Processes, wait_until
from fake_anthropic import FakeAnthropic, Reply

import memoryd
from memoryd.reader import ConversationReader

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"
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


def every_line(workspace: Path) -> list[dict[str, Any]]:
    """The messages of the live file and of every archive, summaries and masked
    placeholders left out (a masked line's original is archived)."""
    paths = [workspace / "conversation.jsonl"]
    archive = workspace / ".memoryd" / "archive"
    if archive.exists():
        paths += sorted(archive.iterdir())
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
