"""The receipt's retention is measured on what the file holds after the commit: the
summary, the pinned messages and the kept part. Commands run and exceptions seen that the
summary lost are missing; a detail the kept part repeats is not (real jobs, the real SDK
against the fake Messages API)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import SettingsFactory, WorkspaceFactory, make_message
from fake_anthropic import FLUENT_SUMMARY, FakeAnthropic, Reply

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings
from memoryd.receipts.records import Receipt, read_receipts
from memoryd.summary.retention import VERBATIM_HEADER
from memoryd.workspace import Workspace

API_KEY = "sk-ant-test-receipt-retention"
COMMANDS = ("make deps", "make build", "tox -e lint", "npm ci --quiet")
TAIL = (
    "Carry on with the release notes please.",
    "Working through the release notes now.",
    "Keep the wording short and plain.",
    "Understood, short and plain it is.",
    "Thanks, that reads well.",
    "Glad it helps.",
)


def tool_loop(extra: str = "") -> list[dict[str, Any]]:
    """A task, four shell calls that fail with ModuleNotFoundError, then plain turns."""
    messages = [make_message(0, "user", "Get the build green again on the release branch.")]
    for i, command in enumerate(COMMANDS):
        call = {"type": "tool_use", "id": f"t{i}", "name": "Bash", "input": {"command": command}}
        result = {
            "type": "tool_result",
            "tool_use_id": f"t{i}",
            "content": "ModuleNotFoundError: No module named 'yaml'",
            "is_error": True,
        }
        messages.append(make_message(len(messages), "assistant", [call]))
        messages.append(make_message(len(messages), "user", [result]))
    for i, text in enumerate(TAIL):
        messages.append(make_message(len(messages), ("user", "assistant")[i % 2], text + extra))
    return messages


def settings_for(make_settings: SettingsFactory, fake: FakeAnthropic, **extra: Any) -> Settings:
    return make_settings(
        token_limit=20_000,
        **{
            "summarizer.backend": "anthropic",
            "anthropic.base_url": fake.base_url,
            "anthropic.timeout": 5.0,
            "anthropic.max_retries": 0,
            **extra,
        },
    )


def run(folder: Path, settings: Settings) -> JobResult:
    request = JobRequest(folder, settings, force=True, env={"ANTHROPIC_API_KEY": API_KEY})
    return run_job(request)


def receipt_of(folder: Path) -> Receipt:
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.outcome == "completed", receipt.reason
    return receipt


def head_text(folder: Path) -> str:
    first = (folder / "conversation.jsonl").read_bytes().split(b"\n", 1)[0]
    return str(json.loads(first)["content"])


def test_commands_and_exceptions_the_summary_lost_are_missing_in_the_receipt(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """A fluent summary keeps none of the four commands nor ModuleNotFoundError, and no
    repair puts them back: the receipt says they are missing."""
    folder = workspace(messages=tool_loop())
    fake_anthropic.set_default(Reply.fluent())
    run(folder, settings_for(make_settings, fake_anthropic, **{"summarizer.min_retention": 0}))

    text = head_text(folder)
    assert not any(command in text for command in COMMANDS)
    retention = receipt_of(folder).retention
    assert retention is not None
    assert retention.missing >= len(COMMANDS) + 1
    assert retention.after < 1.0


def test_the_repair_asks_for_the_lost_commands_then_the_offline_items_keep_them(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """Never worse than offline: a fluent summary that keeps no detail, even repaired,
    gives way to the offline items, and the receipt and HEARTBEAT say so."""
    folder = workspace(messages=tool_loop())
    fake_anthropic.set_default(Reply.fluent())
    run(folder, settings_for(make_settings, fake_anthropic))

    ask = fake_anthropic.message_requests[1].body["messages"][2]["content"]
    assert all(f"`{command}`" in ask for command in COMMANDS)
    assert "ModuleNotFoundError" in ask
    text = head_text(folder)
    assert VERBATIM_HEADER not in text and FLUENT_SUMMARY not in text
    assert all(f"`{command}`" in text for command in COMMANDS)
    receipt = receipt_of(folder)
    assert receipt.retention is not None
    assert receipt.retention.after == 1.0 and receipt.retention.missing == 0
    note = "llm summary kept 0% of details: offline items used"
    assert note in receipt.reason
    assert note in (folder / "HEARTBEAT.md").read_text()


def test_a_detail_the_kept_part_repeats_counts_as_kept(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """The same conversation twice, once with a path the summarized part and the kept
    part both name: that path is not missing, though the summary does not name it."""
    fake_anthropic.set_default(Reply.fluent())
    settings = settings_for(make_settings, fake_anthropic, **{"summarizer.min_retention": 0})
    plain = tool_loop()
    named = tool_loop(" See src/release/notes.md.")
    named[0]["content"] += " Start from src/release/notes.md."
    missing = []
    for name, messages in (("plain", plain), ("named", named)):
        folder = workspace(name=name, messages=messages)
        run(folder, settings)
        assert "src/release/notes.md" not in head_text(folder)
        retention = receipt_of(folder).retention
        assert retention is not None
        missing.append(retention.missing)
    assert missing[1] == missing[0]


def test_a_pinned_task_is_stated_by_the_summary_and_counts_as_kept(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """keep_first = 1 pins the task: the offline summary still opens with it in one
    line, and the receipt finds every command and exception kept."""
    folder = workspace(messages=tool_loop())
    settings = make_settings(
        token_limit=20_000, keep_first=1, **{"summarizer.backend": "extractive"}
    )
    run(folder, settings)

    summary = head_text(folder).split("\n\n", 1)[1].splitlines()
    assert summary[1] == "- Task: Get the build green again on the release branch."
    assert all(any(f"`{command}`" in line for line in summary) for command in COMMANDS)
    retention = receipt_of(folder).retention
    assert retention is not None and retention.after == 1.0
