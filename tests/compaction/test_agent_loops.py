"""What real agents write compacts like any conversation: a tool loop with one task, an
interactive session, a text-mode agent. Tool pairs stay whole, a running tool call stays
in the file, the task stays verbatim right after the head, usage ends below the trigger,
and a conversation no job can lower is reported loudly instead of as completed."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_shapes import TASK, agent_conversations, claude_code, has_thinking, text_agent, tool_loop
from api_rules import request_problem
from conftest import SettingsFactory, encode_lines, make_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.compaction.strategies import Counts, strategy_for
from memoryd.config.sections import RollingSettings
from memoryd.config.settings import Settings
from memoryd.conversation.api_view import messages_for_api
from memoryd.conversation.lines import split_lines
from memoryd.conversation.reader import ConversationReader
from memoryd.daemon.tracked import Tracked, job_due, over_budget, settle
from memoryd.published.events import read_events
from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace

STRATEGIES = ("narrative", "rolling", "checkpoint")


def tokens_of(messages: list[dict[str, Any]]) -> int:
    return sum(line.tokens for line in split_lines(encode_lines(messages), 1 << 24))


def agent_settings(
    make_settings: SettingsFactory, strategy: str, messages: list[dict[str, Any]], usage: float
) -> Settings:
    """The default pin (the task), the extractive backend, a budget that puts
    ``messages`` at ``usage``."""
    return make_settings(
        strategy=strategy,
        keep_first=1,
        token_limit=max(1, int(tokens_of(messages) / usage)),
        **{"summarizer.backend": "extractive"},
    )


def write(folder: Path, messages: list[dict[str, Any]]) -> list[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    data = encode_lines(messages)
    (folder / "conversation.jsonl").write_bytes(data)
    return data.splitlines(keepends=True)


def live(folder: Path) -> list[bytes]:
    return (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)


def archived(folder: Path) -> list[bytes]:
    archive = folder / ".memoryd" / "archive"
    if not archive.exists():
        return []
    return [
        line for path in sorted(archive.iterdir()) for line in path.read_bytes().splitlines(True)
    ]


def run(folder: Path, config: Settings, force: bool = False) -> JobResult:
    return run_job(JobRequest(workspace=folder, settings=config, force=force))


def assert_lossless(folder: Path, original: list[bytes]) -> None:
    """Every original line is in the live file or the archive exactly once, byte for byte;
    the only other line is the summary head."""
    now = live(folder)
    head = json.loads(now[0])
    assert head.get("isSummary") is True
    assert Counter(now[1:] + archived(folder)) == Counter(original)


def assert_api_view_valid(folder: Path, thinking: bool = False) -> None:
    """The API view of the live file is a request the Messages API accepts, with extended
    thinking on when the agent uses it."""
    body: dict[str, Any] = {
        "model": "claude-haiku-4-5",
        "max_tokens": 2048,
        "messages": messages_for_api(folder),
    }
    if thinking:
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    assert request_problem(body) is None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _turns(folder: Path) -> list[list[dict[str, Any]]]:
    """The live file's messages as API turns: consecutive lines of one role (the head a
    user turn, blank lines left out) are one turn."""
    turns: list[list[dict[str, Any]]] = []
    role = None
    for message in map(json.loads, live(folder)):
        if not str(message.get("content")).strip():
            continue
        now = "user" if message.get("isSummary") else message["role"]
        if now != role:
            turns.append([])
        turns[-1].append(message)
        role = now
    return turns


def assert_pairs_whole(folder: Path) -> None:
    """Every tool_result in the live file answers a tool_use in the turn just before."""
    for before, turn in itertools.pairwise(_turns(folder)):
        results = {b["tool_use_id"] for m in turn for b in _blocks(m) if b["type"] == "tool_result"}
        uses = {b["id"] for m in before for b in _blocks(m) if b.get("type") == "tool_use"}
        assert results <= uses, f"orphaned tool_result in {turn[0]['id']}"


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("shape", ["loop", "interactive", "text", "claude-code"])
def test_an_agent_conversation_at_95_percent_compacts_below_the_trigger(
    strategy: str, shape: str, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """The strategy's own trigger fires at 95%, the job ends below it, the task stays
    verbatim right after the head, and nothing is lost."""
    if shape == "text":
        messages = text_agent(60, 30)
    elif shape == "claude-code":
        messages = claude_code(60, 30, parallel=frozenset({3, 30}), blanks=frozenset({5, 40}))
    else:
        interjections = frozenset({7, 23, 41}) if shape == "interactive" else frozenset()
        messages = tool_loop(60, 30, parallel=frozenset({3, 30}), interjections=interjections)
    config = agent_settings(make_settings, strategy, messages, 0.95)
    folder = tmp_path / "ws"
    original = write(folder, messages)

    result = run(folder, config)

    assert result.outcome == "completed", result.reason
    trigger = strategy_for(config).trigger
    assert trigger is not None
    assert result.tokens_after < trigger * config.token_limit
    assert json.loads(live(folder)[1])["content"] == TASK
    assert live(folder)[1] == original[0]
    assert_lossless(folder, original)
    assert_pairs_whole(folder)
    assert_api_view_valid(folder, has_thinking(messages))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_running_tool_call_is_never_summarized(
    strategy: str, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """The last tool_use has no result yet: it stays in the file, so the result the agent
    appends next answers a call that is there."""
    messages = tool_loop(50, 30, running=True)
    config = agent_settings(make_settings, strategy, messages, 0.95)
    folder = tmp_path / "ws"
    original = write(folder, messages)

    result = run(folder, config)

    assert result.outcome == "completed", result.reason
    assert live(folder)[-1] == original[-1]
    assert original[-1] not in archived(folder)
    call_id = messages[-1]["content"][1]["id"]
    with (folder / "conversation.jsonl").open("ab") as out:
        out.write(
            encode_lines(
                [
                    make_message(
                        999,
                        "user",
                        [{"type": "tool_result", "tool_use_id": call_id, "content": "ok"}],
                    )
                ]
            )
        )
    assert_pairs_whole(folder)
    assert_api_view_valid(folder)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("thought", [30, 3_000])
def test_a_running_call_keeps_its_signed_thinking_line(
    strategy: str, thought: int, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """Claude Code's shape: the running call's thinking, text and tool_use lines are one
    API turn; none of them is archived, and once the result is appended the view (with
    thinking on) starts that turn with the thinking block, byte for byte."""
    messages = claude_code(40, 30, running=True, blanks=frozenset({39}))
    turn = next(k for k in range(len(messages) - 1, 0, -1) if is_result(messages[k])) + 1
    thinking = messages[turn]["content"][0]
    thinking["thinking"] += " weighing " * thought
    config = agent_settings(make_settings, strategy, messages, 0.95)
    folder = tmp_path / "ws"
    original = write(folder, messages)

    result = run(folder, config)

    assert result.outcome == "completed", result.reason
    assert live(folder)[-(len(original) - turn) :] == original[turn:]
    call_id = messages[-1]["content"][0]["id"]
    result_line = make_message(999, "user", [tool_result(call_id)])
    with (folder / "conversation.jsonl").open("ab") as out:
        out.write(encode_lines([result_line]))
    assert_pairs_whole(folder)
    assert_api_view_valid(folder, thinking=True)
    view = messages_for_api(folder)
    assert view[-2]["role"] == "assistant"
    assert view[-2]["content"][0] == thinking


def is_result(message: dict[str, Any]) -> bool:
    return any(b["type"] == "tool_result" for b in _blocks(message))


def tool_result(call_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": "ok"}


def test_rolling_fires_when_usage_crosses_the_trigger_and_ends_well_below_it(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """Fewer messages than the rolling count, few big ones: usage alone makes the job due,
    and it takes as many of the oldest as it needs to keep at most its share."""
    messages = tool_loop(12, 400)
    config = agent_settings(make_settings, "rolling", messages, 0.95).model_copy(
        update={"rolling": RollingSettings(recent_messages_to_keep=4)}
    )
    assert len(messages) < config.rolling.message_count_threshold
    folder = tmp_path / "ws"
    original = write(folder, messages)

    result = run(folder, config)

    assert result.outcome == "completed", result.reason
    target = config.keep_recent_ratio * config.summarize_at * config.token_limit
    kept = sum(line.tokens for line in split_lines(b"".join(live(folder)[1:]), 1 << 24))
    assert kept <= target + tokens_of([messages[0]])
    assert result.tokens_after < config.summarize_at * config.token_limit
    assert_lossless(folder, original)


def test_over_budget_with_nothing_a_job_can_do_is_loud_and_not_a_loop(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """The task and a running tool call hold the whole budget: the file is unchanged,
    HEARTBEAT.md says failed with the cause and the usage (never completed), an event, a
    warning and an ineffective receipt say so, and no job is due until the conversation
    grows."""
    messages = tool_loop(1, 3000, running=True)
    config = agent_settings(make_settings, "narrative", messages, 0.95)
    folder = tmp_path / "ws"
    write(folder, messages)
    before = (folder / "conversation.jsonl").read_bytes()

    with capture_logs() as logs:
        result = run(folder, config, force=True)

    assert (folder / "conversation.jsonl").read_bytes() == before
    assert result.outcome == "ineffective" and result.ineffective
    heartbeat = (folder / "HEARTBEAT.md").read_text()
    assert "status: failed" in heartbeat and "status: completed" not in heartbeat
    assert "every message before the split is pinned" in heartbeat and "(95%)" in heartbeat
    [event] = [
        e
        for e in read_events(folder / ".memoryd" / "events.jsonl")
        if e["type"] == "summarize_ineffective"
    ]
    assert event["cause"] == "every message before the split is pinned"
    assert event["usage_ratio"] == pytest.approx(0.95, abs=0.01)
    [warning] = [entry for entry in logs if entry["event"] == "summarize_ineffective"]
    assert warning["log_level"] == "warning" and warning["cause"] == event["cause"]
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.outcome == "ineffective" and receipt.job == event["job"]
    strategy = strategy_for(config)
    counts = Counts.of_lines(list(split_lines(before, 1 << 24)))
    assert strategy.due(counts).due
    assert not strategy.due(counts, tokens_at_ineffective=result.tokens_after).due


def test_no_safe_boundary_over_the_trigger_is_loud(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """Every split would separate a tool call from its result: an ineffective job that
    names the cause, not a quiet 'nothing to do'."""
    filler = "x" * 4000
    messages = [
        make_message(
            0,
            "user",
            [
                {"type": "text", "text": filler},
                {"type": "tool_result", "tool_use_id": "z", "content": "ok"},
            ],
        ),
        make_message(
            1,
            "assistant",
            [
                {"type": "tool_use", "id": "z", "name": "a", "input": {}},
                {"type": "tool_use", "id": "a", "name": "a", "input": {}},
            ],
        ),
        make_message(
            2,
            "user",
            [
                {"type": "tool_result", "tool_use_id": "a", "content": filler},
                {"type": "text", "text": "more"},
            ],
        ),
        make_message(
            3,
            "user",
            [
                {"type": "tool_result", "tool_use_id": "a", "content": filler},
                {"type": "text", "text": "more"},
            ],
        ),
    ]
    config = agent_settings(make_settings, "narrative", messages, 0.95)
    folder = tmp_path / "ws"
    write(folder, messages)

    result = run(folder, config, force=True)

    assert result.outcome == "ineffective"
    assert result.reason.startswith("no safe split point")
    assert "status: failed" in (folder / "HEARTBEAT.md").read_text()


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(messages=agent_conversations(), strategy=st.sampled_from(STRATEGIES))
def test_property_any_agent_conversation_compacts_losslessly_with_pairs_whole(
    messages: list[dict[str, Any]],
    strategy: str,
    tmp_path_factory: pytest.TempPathFactory,
    make_settings: SettingsFactory,
) -> None:
    """Whatever the shape, after a job at 95% usage: nothing lost, the task verbatim after
    the head, no tool_result without its tool_use just before it, a valid API view, a
    running call kept."""
    config = agent_settings(make_settings, strategy, messages, 0.95)
    folder = tmp_path_factory.mktemp("ws")
    original = write(folder, messages)

    result = run(folder, config)

    assert result.outcome in ("completed", "ineffective"), result.reason
    if result.outcome == "completed":
        assert_lossless(folder, original)
        assert live(folder)[1] == original[0]
        assert_pairs_whole(folder)
        assert_api_view_valid(folder, has_thinking(messages))
        if messages[-1]["role"] == "assistant":  # a running tool call
            assert live(folder)[-1] == original[-1]


def test_the_daemon_counts_a_stuck_workspace_as_over_budget_until_it_grows(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """After a stuck job the workspace is over budget (the metrics gauge) and no job is
    due; once it has grown by the regrow share a job is due again."""
    messages = tool_loop(1, 3000, running=True)
    config = agent_settings(make_settings, "narrative", messages, 0.95)
    folder = tmp_path / "ws"
    write(folder, messages)
    result = run(folder, config, force=True)
    reader = ConversationReader(folder / "conversation.jsonl")
    reader.update()
    tracked = Tracked(workspace=Workspace(folder), root=tmp_path, settings=config, reader=reader)
    assert not over_budget(tracked)
    settle(tracked, result, now=1.0, wall=0.0)
    assert over_budget(tracked)
    assert job_due(tracked, now=2.0) is None
    with (folder / "conversation.jsonl").open("ab") as out:
        out.write(encode_lines([make_message(50, "user", "y" * (4 * config.token_limit // 10))]))
    reader.update()
    assert job_due(tracked, now=3.0) is not None
