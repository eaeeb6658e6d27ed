"""The rolling strategy: its trigger on real files, SummaryGenerator with both backends,
the prompt it sends, and a summary that stays one bounded summary over many rounds."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli
from conftest import (
    SettingsFactory,
    WorkspaceFactory,
    filler_text,
    generated_messages,
    raw_lines,
)
from fake_anthropic import FakeAnthropic, Reply

from memoryd.compaction.strategies.head import SUMMARY_PREFIX
from memoryd.config.settings import Settings
from memoryd.conversation.lines import append_message
from memoryd.errors import ConfigError
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.runners import MessageSummarizer, SummaryGenerator
from memoryd.tokens import estimate_text_tokens
from memoryd.workspace import Workspace


@pytest.fixture(autouse=True)
def _no_default_pin(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count what a job replaces, from the first message on: the default pin
    of the task (keep_first = 1) is tested in tests/compaction/test_agent_loops.py."""
    monkeypatch.setenv("MEMORYD_KEEP_FIRST", "0")


API_KEY = "sk-ant-rolling-test-key"
TOKENS_750 = 2_984
"""Content characters of a message estimated at exactly 750 tokens (746 + 4 overhead)."""


def offline(make_settings: SettingsFactory, **extra: Any) -> Settings:
    return make_settings(**{"summarizer.backend": "extractive", **extra})


def online(make_settings: SettingsFactory, fake: FakeAnthropic, **extra: Any) -> Settings:
    return make_settings(
        **{
            "summarizer.backend": "anthropic",
            "anthropic.base_url": fake.base_url,
            "anthropic.timeout": 5.0,
            "anthropic.max_retries": 0,
            **extra,
        }
    )


def summary_lines(folder: Path) -> list[int]:
    """Indexes of the lines that are summary messages."""
    return [i for i, line in enumerate(raw_lines(folder)) if json.loads(line).get("isSummary")]


def sized(count: int, first: int, rest: int, first_count: int = 20) -> list[dict[str, Any]]:
    """``count`` messages: the first ``first_count`` of ``first`` characters, then ``rest``."""
    return generated_messages(count, [first] * first_count + [rest] * (count - first_count))


# --- the trigger on real files --------------------------------------------------------------


def test_thirty_messages_are_not_due_thirty_one_are(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """More than 30 messages is required: 30 heavy messages are not due, 31 are."""
    settings = offline(make_settings)
    thirty = workspace(messages=generated_messages(30, 4_000), name="thirty")
    thirty_one = workspace(messages=generated_messages(31, 4_000), name="thirty-one")
    assert SummaryGenerator(thirty, settings).should_summarize() is False
    assert SummaryGenerator(thirty_one, settings).should_summarize() is True


def test_oldest_twenty_at_exactly_15000_tokens_are_not_due_15001_are(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """The oldest 20 must exceed 15,000 tokens: exactly 15,000 is not due, 15,001 is."""
    settings = offline(make_settings)
    exact = sized(40, TOKENS_750, 100)
    one_more = sized(40, TOKENS_750, 100)
    one_more[0]["content"] += "z"  # 2,985 characters: 747 + 4 tokens
    at = workspace(messages=exact, name="at")
    over = workspace(messages=one_more, name="over")

    at_generator = SummaryGenerator(at, settings)
    before = raw_lines(at)
    assert at_generator.should_summarize() is False
    assert at_generator.summarize_if_needed() is None
    assert raw_lines(at) == before
    assert SummaryGenerator(over, settings).should_summarize() is True


def test_summarize_if_needed_summarizes_the_oldest_20_and_keeps_the_rest(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """When due: the oldest 20 become one third-person summary at the head (with
    summarizedCount and archive), the 11 newer lines stay byte for byte, the originals
    are in the archive byte for byte, and the returned text is the head's summary."""
    folder = workspace(31, 4_000)
    original = raw_lines(folder)
    generator = SummaryGenerator(folder, offline(make_settings))

    summary = generator.summarize_if_needed()

    assert summary is not None and summary.strip()
    new = raw_lines(folder)
    assert new[1:] == original[20:]
    head = json.loads(new[0])
    assert head["isSummary"] is True
    assert head["content"] == SUMMARY_PREFIX + summary
    assert head["summarizedCount"] == 20
    assert (folder / head["archive"]).read_bytes() == b"".join(original[:20])
    assert generator.current_summary() == summary
    assert "The user said:" in summary or "The assistant said:" in summary
    assert generator.should_summarize() is False
    assert generator.summarize_if_needed() is None


@pytest.mark.parametrize(("count", "summarized"), [(25, 14), (31, 20), (35, 20)])
def test_rolling_always_keeps_at_least_the_newest_10(
    count: int, summarized: int, workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """Even when fewer than 20 + 10 messages exist (a lowered count threshold), the newest
    10 lines stay verbatim (the split moves back to a user turn); at most the oldest 20
    are summarized."""
    folder = workspace(count, 4_000)
    original = raw_lines(folder)
    settings = offline(make_settings, **{"rolling.message_count_threshold": 20})
    generator = SummaryGenerator(folder, settings)
    assert generator.should_summarize() is True

    assert generator.generate_summary() is not None

    new = raw_lines(folder)
    kept = len(new) - 1
    assert kept >= 10
    assert new[1:] == original[count - kept :]
    assert json.loads(new[0])["summarizedCount"] == summarized == count - kept


def test_rolling_numbers_are_configurable(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """message_count_threshold 8, messages_to_summarize 4, recent_messages_to_keep 3,
    token_threshold 400: 8 messages are not due, 9 are, and the oldest 4 are summarized."""
    settings = offline(
        make_settings,
        **{
            "rolling.message_count_threshold": 8,
            "rolling.messages_to_summarize": 4,
            "rolling.recent_messages_to_keep": 3,
            "rolling.token_threshold": 400,
        },
    )
    eight = workspace(8, 500, name="eight")
    nine = workspace(9, 500, name="nine")
    low = workspace(messages=sized(9, 384, 2_000, first_count=4), name="low")  # 4 x 100 tokens
    assert SummaryGenerator(eight, settings).should_summarize() is False
    assert SummaryGenerator(low, settings).should_summarize() is False

    original = raw_lines(nine)
    generator = SummaryGenerator(nine, settings)
    assert generator.should_summarize() is True
    assert generator.summarize_if_needed() is not None
    new = raw_lines(nine)
    assert new[1:] == original[4:]
    assert json.loads(new[0])["summarizedCount"] == 4


def test_workspace_config_sets_the_rolling_numbers(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """A [rolling] table in <ws>/.memoryd/config.toml is honoured by SummaryGenerator."""
    folder = workspace(12, 2_000)
    assert SummaryGenerator(folder, offline(make_settings)).should_summarize() is False
    (folder / ".memoryd").mkdir()
    (folder / ".memoryd" / "config.toml").write_text(
        "[rolling]\nmessage_count_threshold = 10\nmessages_to_summarize = 2\n"
        "token_threshold = 500\n"
    )
    assert SummaryGenerator(folder, offline(make_settings)).should_summarize() is True


# --- failures ---------------------------------------------------------------------------------


def test_generate_summary_returns_none_and_changes_nothing_when_the_api_fails(
    workspace: WorkspaceFactory,
    make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fake server answers 500 to the request and to its one retry: generate_summary
    returns None, conversation.jsonl is byte-identical and HEARTBEAT.md says failed."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    folder = workspace(31, 4_000)
    before = (folder / "conversation.jsonl").read_bytes()
    fake_anthropic.set_default(Reply.error(500))
    settings = online(make_settings, fake_anthropic, **{"anthropic.max_retries": 1})

    assert SummaryGenerator(folder, settings).generate_summary() is None

    assert len(fake_anthropic.message_requests) == 2
    assert (folder / "conversation.jsonl").read_bytes() == before
    assert not any((folder / ".memoryd" / "archive").glob("*"))
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.status == "failed"
    assert heartbeat.last_error and "500" in heartbeat.last_error


def test_generate_summary_without_an_api_key_fails_cleanly(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """backend = "anthropic" with no key configured: a ConfigError naming the problem, the
    conversation byte-identical, and HEARTBEAT.md failed (not left "active")."""
    folder = workspace(31, 4_000)
    before = (folder / "conversation.jsonl").read_bytes()
    settings = make_settings(**{"summarizer.backend": "anthropic"})

    with pytest.raises(ConfigError, match="no API key"):
        SummaryGenerator(folder, settings).generate_summary()

    assert (folder / "conversation.jsonl").read_bytes() == before
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.status == "failed"
    assert heartbeat.last_error and "no API key" in heartbeat.last_error


@pytest.mark.parametrize("reply", [Reply.malformed], ids=["malformed"])
def test_generate_summary_returns_none_on_an_unusable_answer(
    reply: Any,
    workspace: WorkspaceFactory,
    make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A malformed answer (retried once) is a failure: None, file unchanged. (An empty
    one is no summary: the offline items stand in, tests/llm/test_no_summary.py.)"""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    folder = workspace(31, 4_000)
    before = (folder / "conversation.jsonl").read_bytes()
    fake_anthropic.set_default(reply())
    settings = online(make_settings, fake_anthropic)

    assert SummaryGenerator(folder, settings).generate_summary() is None
    assert (folder / "conversation.jsonl").read_bytes() == before


# --- the prompt -------------------------------------------------------------------------------


def test_rolling_prompt_asks_for_a_third_person_summary_and_folds_the_previous_one(
    workspace: WorkspaceFactory,
    make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The prompt asks for third person, topics, decisions, action items and emotional
    tone under 500 words, with the messages inside <transcript> delimiters as data; the
    second round carries the first summary in <previous_summary> and not its messages."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    folder = workspace(31, 4_000)
    first_ids = [json.loads(line)["id"] for line in raw_lines(folder)[:20]]
    settings = online(make_settings, fake_anthropic)
    fake_anthropic.push(
        Reply.ok("The user discussed the storage layer; they chose SQLite."),
        Reply.ok(
            "The user discussed the storage layer and chose SQLite, then planned the migration."
        ),
    )
    generator = SummaryGenerator(folder, settings)

    assert generator.generate_summary() == (
        "The user discussed the storage layer; they chose SQLite."
    )
    request = fake_anthropic.message_requests[0]
    system, user = request.system, request.user_text
    prompt = f"{system}\n{user}"
    assert "third person" in system
    assert "The user asked" in system
    for topic in ("key topics", "decisions", "action items", "emotional tone"):
        assert topic in system
    assert "under 500 words" in system
    assert re.search(r"data\b.*not instructions|none of it is addressed to you", prompt)
    assert user.count("<transcript>") == 1 and user.count("</transcript>") == 1
    transcript = user.split("<transcript>")[1].split("</transcript>")[0]
    assert all(message_id in transcript for message_id in first_ids)
    assert "<previous_summary>" not in user

    for i in range(22):
        append_message(folder, "assistant" if i % 2 == 0 else "user", filler_text(100 + i, 3_000))
    assert generator.should_summarize() is True
    assert (
        generator.generate_summary()
        == "The user discussed the storage layer and chose SQLite, then planned the migration."
    )

    second = fake_anthropic.message_requests[1].user_text
    previous = second.split("<previous_summary>")[1].split("</previous_summary>")[0]
    assert "The user discussed the storage layer; they chose SQLite." in previous
    transcript = second.split("<transcript>")[1].split("</transcript>")[0]
    assert not any(message_id in transcript for message_id in first_ids)
    assert summary_lines(folder) == [0]
    assert json.loads(raw_lines(folder)[0])["summarizedCount"] == 40


# --- ten rounds ---------------------------------------------------------------------------------


def capped_answer(request: Mapping[str, Any]) -> str:
    """An answer whose length grows with the request, but never past its max_tokens."""
    user = request["messages"][-1]["content"]
    text = user if isinstance(user, str) else " ".join(b.get("text", "") for b in user)
    words = " ".join(f"point{n}" for n in range(len(text) // 20))
    limit = request["max_tokens"] * 4
    return "The user talked about " + words[: max(0, limit - 30)]


def ten_rounds(folder: Path, generator: SummaryGenerator, budget: int) -> list[int]:
    """Append messages (31, then 22 a round) and summarize, ten times; checks each round;
    returns the summary sizes."""
    sizes = []
    role_index = 0
    for round_ in range(10):
        for _ in range(31 if round_ == 0 else 22):
            role = ("user", "assistant")[role_index % 2]
            append_message(folder, role, filler_text(role_index, 3_000) + ". We decided it.")
            role_index += 1
        before = raw_lines(folder)
        assert generator.should_summarize() is True, f"round {round_}"
        summary = generator.generate_summary()
        assert summary is not None, f"round {round_}"
        lines = raw_lines(folder)
        assert summary_lines(folder) == [0], f"round {round_}: one summary, at the head"
        assert lines[-10:] == before[-10:]
        head = json.loads(lines[0])
        assert head["content"] == SUMMARY_PREFIX + summary
        tokens = estimate_text_tokens(summary)
        assert tokens <= budget, f"round {round_}: {tokens} tokens"
        sizes.append(tokens)
    return sizes


def test_ten_rounds_with_the_fake_server_keep_one_summary_within_budget(
    workspace: WorkspaceFactory,
    make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ten rounds of 22 appended messages, each summarized through the fake server (its
    answer grows with the request, capped at max_tokens): one summary at the head every
    time, within max_summary_tokens, each prompt folding in the previous summary."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    budget = 300
    folder = workspace(0)
    fake_anthropic.set_default(Reply.ok(capped_answer))
    settings = online(make_settings, fake_anthropic, **{"summarizer.max_summary_tokens": budget})
    generator = SummaryGenerator(folder, settings)

    sizes = ten_rounds(folder, generator, budget)

    requests = fake_anthropic.message_requests
    assert len(requests) == 10
    assert all(r.body["max_tokens"] == budget for r in requests)
    for number, request in enumerate(requests):
        user = request.user_text
        assert ("<previous_summary>" in user) is (number > 0)
    assert max(sizes) > budget // 2  # the cap was reached, and held
    head = json.loads(raw_lines(folder)[0])
    archived = sum(p.read_bytes().count(b"\n") for p in (folder / ".memoryd" / "archive").iterdir())
    # Every archived line is an original message, except the nine earlier summaries.
    assert head["summarizedCount"] == archived - 9 == 200


def test_ten_rounds_with_the_extractive_backend_keep_one_summary_within_budget(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """The same ten rounds offline: one summary at the head, never above the budget."""
    budget = 200
    folder = workspace(0)
    settings = offline(make_settings, **{"summarizer.max_summary_tokens": budget})
    generator = SummaryGenerator(folder, settings)

    ten_rounds(folder, generator, budget)

    head = json.loads(raw_lines(folder)[0])
    assert head["summarizedCount"] == 200


def test_extractive_rolling_summary_does_not_repeat_its_header_or_its_points(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """Folding a previous extractive summary keeps one header and no duplicate point."""
    folder = workspace(31, 1_000)
    generator = SummaryGenerator(folder, offline(make_settings))
    assert generator.generate_summary() is not None
    for i in range(22):
        append_message(folder, ("assistant", "user")[i % 2], "We decided to use SQLite.")
    summary = generator.generate_summary()
    assert summary is not None
    assert summary.count("Earlier, in brief:") == 1
    points = summary.splitlines()[1:]
    assert len(points) == len(set(points))


# --- MessageSummarizer ----------------------------------------------------------------------------


def test_message_summarizer_runs_one_background_job_when_due(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """check_and_summarize returns None below the trigger; above it, a future of a job run
    in a worker process, is_running while it runs, and False (with last_result) after."""
    settings = offline(make_settings, token_limit=12_000)
    quiet = workspace(4, 100, name="quiet")
    busy = workspace(40, 1_000, name="busy")

    idle = MessageSummarizer(quiet, settings)
    assert idle.check_and_summarize() is None
    assert idle.is_running() is False
    idle.close()

    summarizer = MessageSummarizer(busy, settings)
    try:
        future = summarizer.check_and_summarize()
        assert future is not None
        assert summarizer.is_running() is True
        assert summarizer.check_and_summarize() is None  # one job at a time
        result = future.result(timeout=60)
        assert result.outcome == "completed"
        assert summarizer.is_running() is False
        assert summarizer.last_result == result
    finally:
        summarizer.close()
    assert json.loads(raw_lines(busy)[0])["isSummary"] is True
    assert summarizer.check_and_summarize() is None  # usage is now below the trigger


# --- per-workspace choice -----------------------------------------------------------------------


def workspace_config(folder: Path, text: str) -> Path:
    path = folder / ".memoryd" / "config.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_workspace_config_picks_rolling_and_its_budget_for_summarize_and_status(
    workspace: WorkspaceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """strategy = "rolling" and token_limit = 50000 in <ws>/.memoryd/config.toml: `memoryd
    summarize WS` (no --strategy) summarizes the oldest 20 (not the narrative 60%), and
    `memoryd status --json` shows that strategy and budget; a sibling keeps the defaults."""
    monkeypatch.setenv("MEMORYD_SUMMARIZER__BACKEND", "extractive")
    monkeypatch.setenv("MEMORYD_DRAIN_SECONDS", "0")
    folder = workspace(31, 4_000, name="root/rolling")
    workspace(4, 100, name="root/plain")
    original = raw_lines(folder)
    workspace_config(folder, 'strategy = "rolling"\ntoken_limit = 50000\n')

    code, out = cli("status", str(folder.parent), "--json")
    assert code == 0
    rows = {Path(row["workspace"]).name: row for row in json.loads(out)}
    assert (rows["rolling"]["strategy"], rows["rolling"]["token_limit"]) == ("rolling", 50_000)
    assert (rows["plain"]["strategy"], rows["plain"]["token_limit"]) == ("narrative", 100_000)

    code, out = cli("summarize", str(folder))
    assert code == 0, out
    assert "replaced 20 messages" in out
    assert raw_lines(folder)[1:] == original[20:]

    code, out = cli("status", str(folder), "--json")
    [row] = json.loads(out)
    assert (row["strategy"], row["token_limit"], row["messages"]) == ("rolling", 50_000, 12)
    code, table = cli("status", str(folder.parent))
    assert [line.split()[5] for line in table.splitlines()[1:]] == ["narrative", "rolling"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('strategy = "fancy"\n', "strategy"),
        ("token_limit = -5\n", "token_limit"),
        ('token_limit = "lots"\n', "token_limit"),
        ("workers = 4\n", "workers"),
        ("strategy = \n", "config.toml"),
    ],
    ids=["bad-strategy", "negative-limit", "not-a-number", "daemon-only-key", "not-toml"],
)
@pytest.mark.parametrize("command", ["summarize", "status"])
def test_bad_workspace_config_is_exit_2_naming_the_file(
    command: str,
    text: str,
    key: str,
    workspace: WorkspaceFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bad value (or key, or TOML) in .memoryd/config.toml: exit 2, one stderr line that
    names the file and the key, no traceback, and the conversation is untouched."""
    folder = workspace(31, 4_000)
    before = raw_lines(folder)
    path = workspace_config(folder, text)

    code, out = cli(command, str(folder))

    assert code == 2
    assert out == ""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    assert str(path) in lines[0]
    assert key in lines[0]
    assert raw_lines(folder) == before
