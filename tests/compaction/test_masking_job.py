"""Masking in a job: masking first, summarizing only if needed, and everyone can see it
(memoryd/compaction/masking/stage.py, memoryd/compaction/job/finish.py)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agent_transcripts import generate, write_workspace
from archive_checks import lines, originals_kept
from cli_helpers import cli
from conftest import SettingsFactory
from fake_anthropic import FakeAnthropic
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings, load_settings
from memoryd.conversation.api_view import messages_for_api
from memoryd.conversation.lines import split_lines
from memoryd.published.events import read_events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.receipts.records import read_receipts
from memoryd.search.archive import expand, recall
from memoryd.transcript.messages import result_text
from memoryd.transcript.outcomes import PLACEHOLDER_LEAD
from memoryd.workspace import Workspace

API_KEY = "sk-test-masking"
STRATEGIES = ("narrative", "rolling", "checkpoint")


def job(folder: Path, config: Settings, **extra: Any) -> JobResult:
    return run_job(JobRequest(folder, config, reason="trigger", **extra))


def masking_settings(
    make_settings: SettingsFactory, tokens: int, usage: float, **extra: Any
) -> Settings:
    return make_settings(
        keep_first=1,
        token_limit=int(tokens / usage),
        **{"masking.enabled": True, "summarizer.backend": "extractive", **extra},
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("shape", ["autonomous", "text"])
def test_masking_alone_ends_a_job_with_no_llm_call(
    strategy: str, shape: str, tmp_path: Path, make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
) -> None:  # fmt: skip
    """Over the trigger, masking brings usage to the target: no request reaches the API,
    no summary is written, nothing is lost, the view is valid and the task stays."""
    transcript = generate(shape, 3, 120)
    folder = write_workspace(tmp_path / "ws", transcript)
    original = lines(folder / "conversation.jsonl")
    config = masking_settings(
        make_settings,
        transcript.tokens,
        0.95,
        strategy=strategy,
        **{"summarizer.backend": "anthropic", "anthropic.base_url": fake_anthropic.base_url},
    )
    result = job(folder, config, env={"ANTHROPIC_API_KEY": API_KEY})
    assert result.outcome == "completed", result.reason
    assert result.reason.startswith("masked ")
    assert fake_anthropic.message_requests == []
    assert result.tokens_after <= 0.6 * config.token_limit
    live = lines(folder / "conversation.jsonl")
    assert not any(b'"isSummary"' in x for x in live)
    assert live[0] == original[0]
    assert transcript.task in live[0].decode()
    originals_kept(folder, original)
    view = messages_for_api(folder)
    assert "tool output masked by memoryd" in json.dumps(view)


def test_everyone_can_see_a_masking(tmp_path: Path, make_settings: SettingsFactory) -> None:
    """The receipt, history, HEARTBEAT.md, the event all say what was masked; expand of a
    masked id prints its original; recall finds the text of a masked output."""
    transcript = generate("autonomous", 5, 120)
    folder = write_workspace(tmp_path / "ws", transcript)
    original = {json.loads(x)["id"]: x for x in lines(folder / "conversation.jsonl")}
    config = masking_settings(make_settings, transcript.tokens, 0.95)
    result = job(folder, config)
    assert result.masked_messages > 0 and result.masked_tokens > 0
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.masked is not None
    assert receipt.masked.messages == result.masked_messages
    assert receipt.masked.tokens_freed == result.masked_tokens
    assert receipt.masked.summary_followed is False
    # What the receipt says, checked against the files: the archive it names holds the
    # originals of the masked lines, one for each, and the tokens freed are theirs less
    # their placeholders'; each placeholder counts as an output.
    assert receipt.masked.archive is not None
    archive = folder / receipt.masked.archive
    assert [archive] == sorted(folder.joinpath(".memoryd", "archive").glob("*.jsonl"))
    live_masked = [x for x in split_lines((folder / "conversation.jsonl").read_bytes(), 1 << 24)
                   if x.message is not None and x.message.get("isMasked") is True]  # fmt: skip
    originals = list(split_lines(archive.read_bytes(), 1 << 24))
    assert [x.message["id"] for x in originals if x.message] == [
        x.message["id"] for x in live_masked if x.message
    ]
    assert archive.read_bytes() == b"".join(original[x.message["id"]] for x in live_masked
                                            if x.message)  # fmt: skip
    assert receipt.masked.messages == len(live_masked)
    assert receipt.masked.tokens_freed == sum(x.tokens for x in originals) - sum(
        x.tokens for x in live_masked
    )
    placeholders = [b for x in live_masked for b in x.blocks
                    if str(b.get("content", "")).startswith(PLACEHOLDER_LEAD)]  # fmt: skip
    assert receipt.masked.outputs == len(placeholders) >= receipt.masked.messages
    assert receipt.llm.calls == 0 and receipt.summarized is None
    assert receipt.tokens_saved == result.tokens_before - result.tokens_after
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    outputs = receipt.masked.outputs
    usage = result.tokens_after / config.token_limit
    why = f"masked {result.masked_messages} to reach 0.55 (now {usage:.2f})"
    assert receipt.why == why and receipt.aim == 0.55
    assert heartbeat.last_result == (
        f"{why}: {outputs} tool outputs, {result.masked_tokens:,} tokens freed"
    )
    [event] = [e for e in read_events(folder / ".memoryd" / "events.jsonl")
               if e["type"] == "tool_outputs_masked"]  # fmt: skip
    assert event["outputs"] == outputs and event["tokens_freed"] == result.masked_tokens
    outcomes = [e for e in read_events(folder / ".memoryd" / "events.jsonl")
                if e["type"] in ("summarize_completed", "summarize_failed",
                                 "summarize_ineffective")]  # fmt: skip
    assert [(e["type"], e["backend"], e["llm_calls"]) for e in outcomes] == [
        ("summarize_completed", "masking", 0)
    ]
    masked = [json.loads(x) for x in lines(folder / "conversation.jsonl") if b'"isMasked"' in x]
    ident = masked[0]["id"]
    assert expand(folder, ident) == [original[ident]]
    code, printed = cli("expand", str(folder), ident)
    assert code == 0 and printed.encode() == original[ident]
    text = masked[0]["content"][0]["content"]
    assert f"memoryd expand WORKSPACE {ident}" in text
    output = result_text(json.loads(original[ident])["content"][0]["content"])
    everywhere = Counter(re.findall(r"[a-z]{6,}", b" ".join(original.values()).decode()))
    rarest = min(re.findall(r"[a-z]{6,}", output), key=lambda w: everywhere[w])
    hits = recall(folder, rarest, limit=50)
    assert any(hit.id == ident for hit in hits)
    code, history = cli("history", str(folder))
    assert code == 0 and f"{outputs} ({result.masked_tokens:,})" in history
    assert why in history


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_when_masking_is_not_enough_the_strategy_summarizes_the_masked_conversation(
    strategy: str, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """With a low target the job masks, then summarizes in the same commit: the receipt
    says a summary followed, the kept part holds placeholders, nothing is lost."""
    transcript = generate("autonomous", 7, 120)
    folder = write_workspace(tmp_path / "ws", transcript)
    original = lines(folder / "conversation.jsonl")
    config = masking_settings(
        make_settings, transcript.tokens, 0.95, strategy=strategy, **{"masking.target": 0.05}
    )
    result = job(folder, config)
    assert result.outcome in ("completed", "ineffective"), result.reason
    assert result.summarized_count > 0 and result.masked_messages > 0
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.masked is not None and receipt.masked.summary_followed
    assert receipt.reason.startswith("masked ")
    live = lines(folder / "conversation.jsonl")
    assert json.loads(live[0]).get("isSummary") is True
    assert len(list(folder.joinpath(".memoryd", "archive").glob("*.jsonl"))) == 1
    originals_kept(folder, original)


def test_a_small_masking_is_skipped_and_off_means_the_strategy_alone(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """Masking that frees less than min_freed is not done; enabled = false summarizes as
    before."""
    transcript = generate("autonomous", 9, 120)
    for name, extra in (
        ("small", {"masking.min_freed": 0.99}),
        ("off", {"masking.enabled": False}),
    ):
        folder = write_workspace(tmp_path / name, transcript)
        result = job(folder, masking_settings(make_settings, transcript.tokens, 0.95, **extra))
        assert result.outcome == "completed"
        assert result.masked_messages == 0 and result.summarized_count > 0
        live = (folder / "conversation.jsonl").read_bytes()
        assert b'"isMasked"' not in live


def test_a_dry_run_says_what_masking_would_do_and_changes_nothing(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    transcript = generate("text", 2, 120)
    folder = write_workspace(tmp_path / "ws", transcript)
    before = (folder / "conversation.jsonl").read_bytes()
    result = job(folder, masking_settings(make_settings, transcript.tokens, 0.95), dry_run=True)
    assert result.outcome == "dry_run"
    assert result.reason.startswith("would mask ")
    assert (folder / "conversation.jsonl").read_bytes() == before


def test_masking_is_allowed_in_a_workspace_config_and_from_the_environment(
    tmp_path: Path, clean_environment: Path
) -> None:
    folder = tmp_path / "ws"
    (folder / ".memoryd").mkdir(parents=True)
    (folder / ".memoryd" / "config.toml").write_text("[masking]\nkeep_recent = 5\n")
    env = {"XDG_CONFIG_HOME": str(clean_environment), "MEMORYD_MASKING__ENABLED": "false"}
    loaded = load_settings(env=env).settings
    assert loaded.masking.enabled is False
    from memoryd.config.settings import settings_for_workspace

    assert settings_for_workspace(loaded, folder).masking.keep_recent == 5


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["autonomous", "interactive", "text"]), st.integers(0, 50),
       st.sampled_from(STRATEGIES), st.floats(0.05, 0.7), st.integers(0, 5))  # fmt: skip
def test_property_a_masking_job_loses_nothing_and_keeps_the_task(
    tmp_path_factory: pytest.TempPathFactory,
    shape: str,
    seed: int,
    strategy: str,
    target: float,
    keep_recent: int,
) -> None:
    """Whatever the target (masking alone, or a summary after it): every original line
    once in the live file or the archive, the task in the live file, the view valid."""
    from api_rules import request_problem, thinking_for

    transcript = generate(shape, seed, 80)
    folder = write_workspace(tmp_path_factory.mktemp("ws"), transcript)
    original = lines(folder / "conversation.jsonl")
    env = {"XDG_CONFIG_HOME": str(tmp_path_factory.mktemp("cfg"))}
    overrides = {
        "drain_seconds": 0,
        "strategy": strategy,
        "token_limit": int(transcript.tokens / 0.95),
        "summarizer.backend": "extractive",
        "masking.target": target,
        "masking.keep_recent": keep_recent,
    }
    config = load_settings(overrides=overrides, env=env).settings
    result = job(folder, config)
    assert result.outcome in ("completed", "ineffective", "nothing_to_do"), result.reason
    originals_kept(folder, original)
    assert transcript.task in (folder / "conversation.jsonl").read_text()
    view = messages_for_api(folder)
    body: dict[str, Any] = {"model": "m", "max_tokens": 2048, "messages": view}
    if thinking_for(view):  # the agent of such a view sends with thinking on
        body["thinking"] = thinking_for(view)
    assert request_problem(body) is None


def test_a_masking_that_cannot_get_under_budget_says_so_loudly(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """``token_limit = 1``: masking runs and no summary can follow. The job is
    ineffective, never "completed": HEARTBEAT.md says failed with the usage still above
    the trigger, the receipt, the event and the log say ineffective, and the daemon waits
    for growth before the next job; the masking itself is committed, nothing lost."""
    transcript = generate("autonomous", 5, 40)
    folder = write_workspace(tmp_path / "ws", transcript)
    original = lines(folder / "conversation.jsonl")
    config = make_settings(
        keep_first=1,
        token_limit=1,
        **{"masking.enabled": True, "masking.keep_recent": 0, "summarizer.backend": "extractive"},
    )
    with capture_logs() as logs:
        result = job(folder, config)
    assert result.outcome == "ineffective", (result.outcome, result.reason)
    # The daemon waits for growth after it, as after any ineffective job.
    assert result.ineffective
    assert result.masked_messages > 0
    assert "usage still above the 80% trigger" in result.reason
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.status == "failed"
    assert "usage still above" in (heartbeat.last_error or "")
    (receipt,) = read_receipts(Workspace(folder))
    assert receipt.outcome == "ineffective"
    assert [
        e["type"]
        for e in read_events(folder / ".memoryd" / "events.jsonl")
        if e["type"].startswith("summarize_")
    ] == ["summarize_ineffective"]
    assert any(e["event"] == "summarize_ineffective" and e["log_level"] == "warning" for e in logs)
    originals_kept(folder, original)
