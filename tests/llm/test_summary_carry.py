"""The carried-items check through the real SDK against the strict fake server: an LLM
that drops the previous head's failure and decision is asked once to put them back, and
what it still drops is put back by memoryd (docs/design.md#summary-items)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import SettingsFactory, WorkspaceFactory, generated_messages, raw_lines
from fake_anthropic import FakeAnthropic, Reply

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.summary.items import parse_head
from memoryd.tokens import estimate_text_tokens

API_KEY = "sk-ant-carry-test-key"
FAILURE = (
    "Ran `pytest tests/pay` → exit 1, FAILED tests/pay/test_ledger.py::test_reconcile_batch "
    "- FooBarTimeoutError"
)
DECISION = "Assistant: We decided to batch the reconcile queries."
PREVIOUS = (
    "Key points, oldest first:\n- Task: Fix the ledger\nFailures:\n"
    f"- {FAILURE} (#msg-0003)\nDecisions:\n- {DECISION} (#msg-0005)\n"
    "Routine:\n- Ran `ls src` → names src/pay"
)
DROPPED = "Task: Fix the ledger\nRoutine:\n- Ran `pytest tests/misc` → 60 passed"


def head_text(folder: Path) -> str:
    head = json.loads(raw_lines(folder)[0])
    assert head["isSummary"] is True
    return str(head["content"]).split("\n\n", 1)[1]


def previous_head() -> dict[str, Any]:
    return {
        "id": "head-1",
        "role": "assistant",
        "content": "[Summary of earlier conversation]\n\n" + PREVIOUS,
        "timestamp": 1_700_000_000_000,
        "isSummary": True,
        "summarizedCount": 12,
    }


@pytest.mark.parametrize("repairs", [True, False], ids=["llm-repairs", "llm-drops-again"])
def test_items_the_llm_dropped_are_asked_for_then_put_back(
    repairs: bool,
    workspace: WorkspaceFactory,
    make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
) -> None:
    folder = workspace(messages=[previous_head(), *generated_messages(40, 600)])
    fixed = f"{DROPPED}\nFailures:\n- {FAILURE} (#msg-0003)\nDecisions:\n- {DECISION}"
    # The summary, the retention repair (it may be asked), then the carried-items repair.
    fake_anthropic.set_default(Reply.ok(fixed if repairs else DROPPED))
    fake_anthropic.push(Reply.ok(DROPPED), Reply.ok(DROPPED))
    settings = make_settings(
        **{
            "summarizer.backend": "anthropic",
            "anthropic.base_url": fake_anthropic.base_url,
            "anthropic.timeout": 5.0,
            "anthropic.max_retries": 0,
            "summarizer.max_summary_tokens": 300,
            "token_limit": 20_000,
        }
    )

    env = {"ANTHROPIC_API_KEY": API_KEY}
    result = run_job(JobRequest(folder, settings, force=True, env=env))

    assert result.outcome == "completed"
    text = head_text(folder)
    assert estimate_text_tokens(text) <= 300
    head = parse_head(text)
    [failure] = [i for i in head.items if i.kind == "failure"]
    assert failure.text == FAILURE and failure.source == "msg-0003"
    assert [i.text for i in head.items if i.kind == "decision"] == [DECISION]
    repair = fake_anthropic.message_requests[-1]
    assert FAILURE in repair.user_text and "(resolved: why)" in repair.user_text
    # It follows the head it got (with the retention check's verbatim lines).
    assert repair.body["messages"][-2]["content"].startswith(DROPPED)
