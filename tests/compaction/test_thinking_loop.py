"""An agent with extended thinking, as Claude Code writes it (one line per content block),
on the official SDK against the strict fake API: jobs run while a tool call is running,
and every request the agent sends from memoryd's API view is one the API accepts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import pytest
from conftest import SettingsFactory
from fake_anthropic import FakeAnthropic, Reply

import memoryd
from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job

TASK = "Task: find why the nightly import drops the last row, and fix it."
THINKING = {"type": "enabled", "budget_tokens": 1024}


def command_for(request: Any) -> tuple[str, dict[str, Any]]:
    return "bash", {"command": f"echo step {len(request['messages'])}; seq 1 120"}


@pytest.mark.parametrize("strategy", ["narrative", "rolling", "checkpoint"])
def test_a_thinking_agent_s_requests_are_accepted_while_jobs_run_mid_call(
    strategy: str, tmp_path: Path, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    fake_anthropic.set_default(Reply.tool_call(command_for))
    workspace = tmp_path / "agent"
    workspace.mkdir()
    memoryd.append_message(workspace, "user", TASK)
    config = make_settings(strategy=strategy, token_limit=4000, keep_first=1)
    jobs = 0
    with anthropic.Anthropic(
        base_url=fake_anthropic.base_url, api_key="sk-test", max_retries=0
    ) as client:
        for _ in range(40):
            request: dict[str, Any] = {
                "model": "claude-haiku-4-5",
                "max_tokens": 2048,
                "thinking": THINKING,
                "messages": memoryd.messages_for_api(workspace),
            }
            reply = client.messages.create(**request)
            blocks = [block.model_dump(exclude_none=True) for block in reply.content]
            assert blocks[0]["type"] == "thinking"
            for block in blocks:  # Claude Code: one line per content block
                memoryd.append_message(workspace, "assistant", [block])
            # The tool runs: a job now must keep the call and its thinking together.
            result = run_job(JobRequest(workspace, config))
            jobs += result.outcome == "completed"
            call = blocks[-1]
            output = "\n".join(str(n) for n in range(120))
            memoryd.append_message(
                workspace,
                "user",
                [{"type": "tool_result", "tool_use_id": call["id"], "content": output}],
            )
    assert jobs >= 2
    assert len(fake_anthropic.message_requests) == 40
