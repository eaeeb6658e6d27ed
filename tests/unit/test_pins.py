"""Pinned messages: never summarized away, kept byte for byte right after the head, in
their order, through every strategy and every later compaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import (
    SettingsFactory,
    WorkspaceFactory,
    encode_lines,
    generated_messages,
    make_message,
)

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings
from memoryd.conversation.lines import split_lines
from memoryd.conversation.pins import pinned_indices
from memoryd.published.events import read_events
from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace


def run(folder: Path, settings: Any, **kwargs: Any) -> JobResult:
    return run_job(JobRequest(workspace=folder, settings=settings, **kwargs))


def lines_of(folder: Path) -> list[bytes]:
    return (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)


def archived(folder: Path) -> bytes:
    archive = folder / ".memoryd" / "archive"
    return b"".join(p.read_bytes() for p in sorted(archive.iterdir()))


def conversation(count: int = 40, size: int = 600, pinned: tuple[int, ...] = (5,)) -> list[Any]:
    messages: list[Any] = generated_messages(count, size)
    for index in pinned:
        messages[index]["pinned"] = True
    return messages


def parse(data: bytes) -> list[Any]:
    return list(split_lines(data, 1 << 20))


def test_flagged_messages_and_the_first_genuine_user_turns_are_pinned() -> None:
    """keep_first counts genuine user turns (user at 1, 3, 5 here), not the summary head
    and not assistant messages; a flag pins whatever keep_first says."""
    summary = {"id": "s", "role": "assistant", "content": "x", "isSummary": True}
    messages = [summary, *conversation(6, 50, pinned=(3,))]
    assert pinned_indices(parse(encode_lines(messages)), keep_first=2) == {1, 3, 4}
    assert pinned_indices(parse(encode_lines(messages)), keep_first=0) == {4}


def test_a_pinned_tool_use_keeps_its_tool_result() -> None:
    messages: list[Any] = generated_messages(4, 50)
    messages[1]["content"] = [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]
    messages[1]["pinned"] = True
    messages[2]["content"] = [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
    assert pinned_indices(parse(encode_lines(messages)), keep_first=0) == {1, 2}


@pytest.mark.parametrize("strategy", ["narrative", "rolling", "checkpoint"])
def test_pins_stay_verbatim_after_the_head_in_every_strategy(
    strategy: str, workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """keep_first pins the task statement, a flag pins a correction: both survive two
    rounds byte for byte, in order, right after the head, and never reach the archive."""
    folder = workspace(messages=conversation(pinned=(5, 9)))
    original = lines_of(folder)
    task, first_pin, second_pin = original[0], original[5], original[9]
    settings = make_settings(
        strategy=strategy, keep_first=1, token_limit=20_000, **{"summarizer.backend": "extractive"}
    )

    first = run(folder, settings, force=True)
    assert first.outcome in ("completed", "ineffective")
    assert first.pins_kept == 3  # the task statement and the two flagged
    after = lines_of(folder)
    assert json.loads(after[0]).get("isSummary") is True
    assert after[1:4] == [task, first_pin, second_pin]
    for pin in (task, first_pin, second_pin):
        assert pin not in archived(folder)

    with (folder / "conversation.jsonl").open("ab") as out:
        out.write(encode_lines(generated_messages(80, 600)[40:]))
    second = run(folder, settings, force=True)
    assert second.outcome in ("completed", "ineffective")
    assert lines_of(folder)[1:4] == [task, first_pin, second_pin]
    assert [r.pins_kept for r in read_receipts(Workspace(folder))] == [3, 3]


def test_pins_count_and_every_other_line_is_archived_byte_for_byte(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(messages=conversation(pinned=(3,)))
    original = lines_of(folder)
    settings = make_settings(
        keep_first=0, token_limit=10_000, **{"summarizer.backend": "extractive"}
    )
    result = run(folder, settings, force=True)
    after = lines_of(folder)
    assert after[1] == original[3]
    cut = original.index(after[2])
    assert archived(folder) == b"".join(original[:3] + original[4:cut])
    assert result.summarized_count == cut - 1
    assert result.messages_after == len(after)


def test_pins_alone_over_the_trigger_are_ineffective_not_a_loop(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    messages = conversation(30, 400, pinned=(2,))
    messages[2]["content"] = "A long task statement. " * 800
    folder = workspace(messages=messages)
    before = (folder / "conversation.jsonl").read_bytes()
    settings = make_settings(
        keep_first=0, token_limit=5_000, **{"summarizer.backend": "extractive"}
    )

    result = run(folder, settings)

    pinned_tokens = parse(before)[2].tokens
    assert result.outcome == "ineffective" and result.ineffective
    assert result.reason.startswith(f"pinned messages hold {pinned_tokens:,} tokens; ")
    assert "above the 80% trigger" in result.reason
    assert (folder / "conversation.jsonl").read_bytes() == before
    heartbeat = (folder / "HEARTBEAT.md").read_text()
    assert "status: failed" in heartbeat and "pinned messages hold" in heartbeat
    events = list(read_events(folder / ".memoryd" / "events.jsonl"))
    [ineffective] = [e for e in events if e["type"] == "summarize_ineffective"]
    assert ineffective["reason"] == result.reason
    assert "summarize_failed" not in {e["type"] for e in events}
    [receipt] = read_receipts(Workspace(folder))
    assert (receipt.outcome, receipt.reason, receipt.job) == (
        "ineffective",
        result.reason,
        ineffective["job"],
    )
    assert receipt.summarized is None and receipt.tokens_after == receipt.tokens_before
    assert receipt.pins_kept == result.pins_kept == 1


def test_nothing_to_do_when_everything_before_the_split_is_pinned(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(messages=conversation(10, 400, pinned=tuple(range(10))))
    before = (folder / "conversation.jsonl").read_bytes()
    settings = make_settings(
        keep_first=0, token_limit=100_000, **{"summarizer.backend": "extractive"}
    )
    result = run(folder, settings, force=True)
    assert result.outcome == "nothing_to_do"
    assert "pinned" in result.reason
    assert (folder / "conversation.jsonl").read_bytes() == before


def test_keep_first_from_the_workspace_config(workspace: WorkspaceFactory, tmp_path: Path) -> None:
    """A workspace's own .memoryd/config.toml pins its task statement."""
    folder = workspace(messages=conversation(pinned=()))
    task = lines_of(folder)[0]
    (folder / ".memoryd").mkdir(exist_ok=True)
    (folder / ".memoryd" / "config.toml").write_text("keep_first = 1\n")
    config = tmp_path / "memoryd.toml"
    config.write_text('token_limit = 10000\n[summarizer]\nbackend = "extractive"\n')
    code, _ = cli("--config", str(config), "summarize", str(folder), "--force")
    assert code == 0
    assert lines_of(folder)[1] == task
    assert task not in archived(folder)


def test_a_leading_demonstration_and_the_task_are_one_turn_kept_by_default(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """The first user message is a long demonstration and the second the task (as a
    SWE-agent run writes them): the API merges them into one turn, so the default
    keep_first = 1 keeps both, byte for byte, through two rounds; the next user turn is
    not pinned."""
    demo = make_message(0, "user", "Here is a demonstration of how to work. " * 200)
    task = make_message(1, "user", "<task>Fix the ledger: reconcile_batch times out.</task>")
    rest: list[Any] = generated_messages(60, 600, first_role="assistant")
    for index, message in enumerate(rest, start=2):
        message["id"] = f"msg-{index:04d}"
    messages = [demo, task, *rest]
    lines = parse(encode_lines(messages))
    assert pinned_indices(lines, keep_first=1) == {0, 1}
    assert pinned_indices(lines, keep_first=2) == {0, 1, 3}
    assert pinned_indices(lines, keep_first=0) == frozenset()
    # User lines that no answer follows (a writer of user lines only) are a turn each.
    only_users = parse(encode_lines(generated_messages(4, 50, first_role="user")[0::2] * 2))
    assert pinned_indices(only_users, keep_first=1) == {0}

    folder = workspace(messages=messages)
    original = lines_of(folder)
    default = Settings.model_fields["keep_first"].default
    assert default == 1
    settings = make_settings(
        keep_first=default, token_limit=20_000, **{"summarizer.backend": "extractive"}
    )
    for _ in range(2):
        result = run(folder, settings, force=True)
        assert result.outcome == "completed" and result.pins_kept == 2
        after = lines_of(folder)
        assert after[1:3] == original[:2]
        with (folder / "conversation.jsonl").open("ab") as out:
            out.write(encode_lines(generated_messages(90, 600)[62:]))
    assert original[1] not in archived(folder)
