"""One-shot summarization jobs end to end: files, archive, heartbeat, events, state, LLM."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    FILLER_WORDS,
    SettingsFactory,
    WorkspaceFactory,
    encode_lines,
    filler_text,
    generated_messages,
    make_message,
    raw_lines,
)
from fake_anthropic import FakeAnthropic, Reply

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.compaction.strategies.head import SUMMARY_PREFIX
from memoryd.config.settings import Settings
from memoryd.conversation.lines import split_lines
from memoryd.files.fsutil import TEMP_MARK, flocked
from memoryd.published.events import read_events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.tokens import estimate_text_tokens
from memoryd.workspace import Workspace

API_KEY = "sk-ant-job-test-key"


def run(folder: Path, settings: Settings, **kwargs: Any) -> JobResult:
    return run_job(JobRequest(workspace=folder, settings=settings, **kwargs))


def event_types(folder: Path) -> list[str]:
    return [event["type"] for event in read_events(folder / ".memoryd" / "events.jsonl")]


def events_of(folder: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(folder / ".memoryd" / "events.jsonl") if e["type"] == kind]


def archive_files(folder: Path) -> list[Path]:
    archive = folder / ".memoryd" / "archive"
    return sorted(archive.iterdir()) if archive.is_dir() else []


def leftovers(folder: Path) -> list[str]:
    """Temp files and pending archives anywhere in the workspace."""
    return [
        name
        for _, _, files in os.walk(folder)
        for name in files
        if TEMP_MARK in name or name.endswith(".pending")
    ]


def tree(folder: Path) -> dict[str, bytes]:
    """Every file of the workspace and its bytes."""
    return {
        str(Path(root, name).relative_to(folder)): Path(root, name).read_bytes()
        for root, _, files in os.walk(folder)
        for name in files
    }


def total_tokens(data: bytes, max_line_bytes: int = 8 << 20) -> int:
    return sum(line.tokens for line in split_lines(data, max_line_bytes))


def limit_for(data: bytes, usage: float = 0.9, max_line_bytes: int = 8 << 20) -> int:
    """A token_limit at which ``data`` sits at ``usage`` of the budget."""
    return int(total_tokens(data, max_line_bytes) / usage)


def summary_of(folder: Path) -> dict[str, Any]:
    head: dict[str, Any] = json.loads(raw_lines(folder)[0])
    assert head.get("isSummary") is True
    return head


# --- narrative, offline -------------------------------------------------------------------


def test_narrative_job_replaces_the_oldest_60_percent_losslessly(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """One summary message + the kept lines byte for byte; the archive holds the replaced
    lines byte for byte; heartbeat, events and state.json report it; usage well below."""
    folder = workspace(40, 1000)
    original = raw_lines(folder)
    data = b"".join(original)
    settings = make_settings(token_limit=limit_for(data), **{"summarizer.backend": "extractive"})

    result = run(folder, settings)

    assert result.outcome == "completed"
    # At least the oldest 60% (24 of 40) are summarized; the kept part is what follows.
    k = result.summarized_count
    assert 24 <= k < 40
    assert result.backend == "extractive"
    new = raw_lines(folder)
    assert new[1:] == original[k:]
    head = summary_of(folder)
    assert uuid.UUID(head["id"]).version == 4
    assert head["role"] == "assistant"
    assert head["content"].startswith(SUMMARY_PREFIX)
    assert len(head["content"]) > len(SUMMARY_PREFIX)
    assert isinstance(head["timestamp"], int)
    assert head["summarizedCount"] == k
    assert re.fullmatch(r"\.memoryd/archive/[^/]+\.jsonl", head["archive"])
    archive = folder / head["archive"]
    assert archive.read_bytes() == b"".join(original[:k])
    assert archive_files(folder) == [archive]

    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.status == "completed"
    assert heartbeat.last_result == result.reason
    assert heartbeat.last_result is not None
    assert f"replaced {k} messages" in heartbeat.last_result

    types = event_types(folder)
    assert types.index("summarize_started") < types.index("summarize_completed")
    [completed] = events_of(folder, "summarize_completed")
    assert completed["summarized"] == k
    assert completed["messages_after"] == 1 + 40 - k

    state = json.loads((folder / ".memoryd" / "state.json").read_bytes())
    assert state["messages"] == 1 + 40 - k == len(new)
    assert state["tokens"] == result.tokens_after == total_tokens(b"".join(new))
    assert state["summarizing"] is False
    assert state["last_summary_at"]
    assert state["level"] == "normal"
    trigger = settings.summarize_at * settings.token_limit
    assert result.tokens_after < 0.65 * trigger
    assert leftovers(folder) == []


def test_job_below_the_trigger_does_nothing(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """Usage not above summarize_at: outcome nothing_to_do, the workspace untouched."""
    folder = workspace(10, 400)
    before = tree(folder)
    result = run(folder, make_settings(**{"summarizer.backend": "extractive"}))
    assert result.outcome == "nothing_to_do"
    assert "trigger" in result.reason
    assert {k: v for k, v in tree(folder).items() if not k.startswith(".memoryd/")} == before
    assert archive_files(folder) == []


def test_busy_when_another_job_holds_the_job_lock(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """A second job while .memoryd/job.lock is held returns busy and changes nothing."""
    folder = workspace(40, 1000)
    settings = make_settings(
        token_limit=limit_for(b"".join(raw_lines(folder))), **{"summarizer.backend": "extractive"}
    )
    with flocked(folder / ".memoryd" / "job.lock", root=folder):
        before = tree(folder)
        result = run(folder, settings)
        assert result.outcome == "busy"
        assert tree(folder) == before


# --- the Anthropic backend through the real SDK ------------------------------------------------


def anthropic_settings(
    make_settings: SettingsFactory, fake: FakeAnthropic, data: bytes, **extra: Any
) -> Settings:
    return make_settings(
        token_limit=limit_for(data),
        **{
            "summarizer.backend": "anthropic",
            "anthropic.base_url": fake.base_url,
            "anthropic.timeout": 2.0,
            "anthropic.max_retries": 1,
            **extra,
        },
    )


def test_anthropic_job_uses_the_answer_as_the_summary(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """The summary message carries the model's answer; the request carried the key and
    exactly the summarized messages."""
    folder = workspace(40, 1000)
    original = raw_lines(folder)
    settings = anthropic_settings(make_settings, fake_anthropic, b"".join(original))
    fake_anthropic.push(Reply.ok("The team chose PostgreSQL for storage."))

    result = run(folder, settings, env={"ANTHROPIC_API_KEY": API_KEY})

    assert result.outcome == "completed"
    assert result.backend == "anthropic"
    assert (
        summary_of(folder)["content"] == SUMMARY_PREFIX + "The team chose PostgreSQL for storage."
    )
    k = result.summarized_count
    assert k >= 24
    assert raw_lines(folder)[1:] == original[k:]
    [request] = fake_anthropic.message_requests
    assert API_KEY in (
        request.headers.get("x-api-key"),
        request.headers.get("authorization", "")[7:],
    )
    prompt = request.prompt_text
    assert all(f"msg-{i:04d}" in prompt for i in range(k))
    assert not any(f"msg-{i:04d}" in prompt for i in range(k, 40))
    assert "<transcript>" in prompt


FAILURES: dict[str, tuple[Callable[[], Reply], int, str, int]] = {
    # name: (reply, max_retries, words in the reason, requests expected)
    "429-repeatedly": (lambda: Reply.error(429, retry_after=0), 2, "429", 3),
    "529-repeatedly": (lambda: Reply.error(529, retry_after=0), 2, "529", 3),
    "500": (lambda: Reply.error(500, retry_after=0), 1, "500", 2),
    "hang-past-timeout": (lambda: Reply.hang(30), 0, "timed out", 1),
    "malformed": (Reply.malformed, 0, "malformed", 1),
}


@pytest.mark.parametrize("failure", FAILURES, ids=list(FAILURES))
def test_llm_failure_leaves_the_conversation_byte_identical(
    failure: str,
    workspace: WorkspaceFactory,
    make_settings: SettingsFactory,
    fake_anthropic: FakeAnthropic,
) -> None:
    """Each LLM failure: conversation.jsonl unchanged, HEARTBEAT failed with the reason,
    event summarize_failed, no archive file, no temp file."""
    reply, retries, words, requests = FAILURES[failure]
    folder = workspace(40, 1000)
    before = (folder / "conversation.jsonl").read_bytes()
    settings = anthropic_settings(
        make_settings,
        fake_anthropic,
        before,
        **{"anthropic.timeout": 0.5, "anthropic.max_retries": retries},
    )
    fake_anthropic.set_default(reply())

    result = run(folder, settings, env={"ANTHROPIC_API_KEY": API_KEY})

    assert result.outcome == "failed"
    assert words in result.reason
    assert len(fake_anthropic.message_requests) == requests
    assert (folder / "conversation.jsonl").read_bytes() == before
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.status == "failed"
    assert heartbeat.last_error == result.reason
    assert heartbeat.current_task is None and heartbeat.started_at is None
    [failed] = events_of(folder, "summarize_failed")
    assert words in failed["reason"]
    assert "summarize_completed" not in event_types(folder)
    assert archive_files(folder) == []
    assert leftovers(folder) == []


def test_second_anthropic_job_folds_the_previous_summary(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """Round two sends the first summary as <previous_summary> and leaves one summary whose
    summarizedCount adds both rounds up."""
    folder = workspace(40, 1000)
    settings = anthropic_settings(make_settings, fake_anthropic, b"".join(raw_lines(folder)))
    env = {"ANTHROPIC_API_KEY": API_KEY}
    fake_anthropic.push(
        Reply.ok("First: chose Redis."), Reply.ok("Second: chose Redis first, then Kafka.")
    )
    first = run(folder, settings, env=env)
    with (folder / "conversation.jsonl").open("ab") as out:
        out.write(encode_lines(generated_messages(70, 1000)[40:]))

    second = run(folder, settings, env=env)

    assert (first.outcome, second.outcome) == ("completed", "completed")
    prompt = fake_anthropic.message_requests[1].prompt_text
    assert re.search(r"<previous_summary>\s*First: chose Redis.\s*</previous_summary>", prompt)
    heads = [json.loads(line) for line in raw_lines(folder)]
    assert [m.get("isSummary", False) for m in heads].count(True) == 1
    assert heads[0]["content"] == SUMMARY_PREFIX + "Second: chose Redis first, then Kafka."
    assert heads[0]["summarizedCount"] == first.summarized_count + second.summarized_count


def test_five_rounds_keep_one_bounded_summary_and_lose_nothing(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """Over 5 rounds: one summary at the head, summarizedCount adds up, the summary stays
    within max_summary_tokens, and every message ever written is in the file or an archive."""
    budget = 300
    folder = workspace(30, 800)
    settings = make_settings(
        token_limit=6_000,
        **{"summarizer.backend": "extractive", "summarizer.max_summary_tokens": budget},
    )
    written = 30
    counted = 0
    for round_number in range(1, 6):
        result = run(folder, settings)
        assert result.outcome == "completed", result.reason
        counted += result.summarized_count
        messages = [json.loads(line) for line in raw_lines(folder)]
        assert [i for i, m in enumerate(messages) if m.get("isSummary")] == [0]
        head = messages[0]
        assert head["summarizedCount"] == counted
        assert estimate_text_tokens(head["content"].removeprefix(SUMMARY_PREFIX)) <= budget
        assert len(archive_files(folder)) == round_number
        # Grow past the trigger again for the next round.
        more = generated_messages(written + 16, 800)[written:]
        with (folder / "conversation.jsonl").open("ab") as out:
            out.write(encode_lines(more))
        written += len(more)

    everything = b"".join(p.read_bytes() for p in archive_files(folder))
    everything += (folder / "conversation.jsonl").read_bytes()
    ids = [json.loads(line)["id"] for line in everything.splitlines()]
    generated = [f"msg-{i:04d}" for i in range(written)]
    assert sorted(i for i in ids if i.startswith("msg-")) == generated
    assert counted == sum(1 for i in ids if i.startswith("msg-")) - (len(raw_lines(folder)) - 1)


# --- chunking -----------------------------------------------------------------------------


def test_oversized_input_is_summarized_in_chunks_and_merged_leaving_nothing_out(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """With max_input_tokens 3000 the server gets several chunk requests plus merges, and
    every summarized message id appears in some request."""
    folder = workspace(40, 1000)
    settings = anthropic_settings(
        make_settings,
        fake_anthropic,
        b"".join(raw_lines(folder)),
        **{"summarizer.max_input_tokens": 3000, "summarizer.max_summary_tokens": 200},
    )
    fake_anthropic.set_default(Reply.echo())

    result = run(folder, settings, env={"ANTHROPIC_API_KEY": API_KEY})

    assert result.outcome == "completed"
    requests = fake_anthropic.message_requests
    assert len(requests) >= 3
    assert result.llm_calls == len(requests)
    prompts = [r.prompt_text for r in requests]
    k = result.summarized_count
    assert k >= 24
    for i in range(k):
        assert any(f"msg-{i:04d}" in p for p in prompts), f"msg-{i:04d} was left out"
    assert sum("<chunk_summary" in p for p in prompts) >= 1
    assert summary_of(folder)["summarizedCount"] == k


# --- odd lines, ineffective jobs --------------------------------------------------------------


def test_opaque_and_malformed_lines_move_to_the_archive_byte_for_byte(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """Malformed, bad-UTF-8 and over-long lines in the summarized part are archived as they
    were, and malformed_line events name the malformed ones by line number."""
    messages: list[dict[str, Any] | bytes] = list(generated_messages(30, 1000))
    garbage = b"this line is not json {\n"
    bad_utf8 = b'{"id":"bad","role":"user","content":"\xff\xfe"}\n'
    opaque = encode_lines([make_message(7, "assistant", "z" * 4000)])
    messages[2], messages[5], messages[7] = garbage, bad_utf8, opaque
    folder = workspace(messages=messages)
    original = raw_lines(folder)
    settings = make_settings(
        token_limit=limit_for(b"".join(original), max_line_bytes=3000),
        max_line_bytes=3000,
        **{"summarizer.backend": "extractive"},
    )

    result = run(folder, settings)

    assert result.outcome == "completed"
    head = summary_of(folder)
    archived = (folder / head["archive"]).read_bytes()
    assert archived == b"".join(original[: result.summarized_count])
    assert garbage in archived and bad_utf8 in archived and opaque in archived
    assert raw_lines(folder)[1:] == original[result.summarized_count :]
    assert sorted(e["line"] for e in events_of(folder, "malformed_line")) == [3, 6]


def test_giant_recent_message_makes_the_job_ineffective(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """A kept message alone above the trigger: the job commits, then says summarize_ineffective."""
    messages = [*generated_messages(20, 400), make_message(20, "user", filler_text(20, 40_000))]
    folder = workspace(messages=messages)
    original = raw_lines(folder)
    settings = make_settings(token_limit=12_000, **{"summarizer.backend": "extractive"})

    result = run(folder, settings)

    assert result.outcome == "ineffective"
    assert result.ineffective
    assert result.tokens_after > settings.summarize_at * settings.token_limit
    [event] = events_of(folder, "summarize_ineffective")
    assert event["tokens_after"] == result.tokens_after
    assert event["summarized"] == result.summarized_count and event["archive"]
    assert "summarize_completed" not in event_types(folder)  # one outcome per job
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.status == "failed"  # over budget is never "completed"
    assert heartbeat.last_error is not None
    assert "usage still above the 80% trigger" in heartbeat.last_error
    assert heartbeat.last_result is not None
    assert "usage still above the 80% trigger" in heartbeat.last_result
    assert f"~{result.tokens_after:,} of 12,000 tokens" in heartbeat.last_result
    assert "trigger 9,600" in heartbeat.last_result
    archived = (folder / summary_of(folder)["archive"]).read_bytes()
    assert archived + b"".join(raw_lines(folder)[1:]) == b"".join(original)


# --- offline quality ------------------------------------------------------------------------

FILLER_TEMPLATES = (
    "I looked at the {w} dashboard again and nothing unusual showed up there today.",
    "The coffee machine near the {w} room is broken again, sadly enough.",
    "Thanks for the quick reply about {w}, that clears up most of my confusion.",
    "Let me scroll back through the {w} thread to see what we said earlier on.",
    "The weather is nice so I might take the {w} call from the park later.",
    "Honestly the old {w} logs are a mess and hard to read without some help.",
    "I reran the {w} notebook and the chart looks about the same as yesterday.",
    "Sure, the {w} plan sounds fine to me, I have no strong opinion either way.",
)


def chatter(i: int, j: int) -> str:
    """A filler sentence, different for every message i and position j."""
    a = FILLER_WORDS[(i * 4 + j) % len(FILLER_WORDS)]
    b = FILLER_WORDS[(i * 7 + j * 3 + 5) % len(FILLER_WORDS)]
    template = FILLER_TEMPLATES[(i + j) % len(FILLER_TEMPLATES)]
    return template.format(w=f"{a}-{b}")


def quality_conversation(decision_tokens: list[str]) -> list[dict[str, Any]]:
    """40 messages of similar length; decisions planted among chatter in the oldest 24."""
    planted = dict(zip(range(1, 24, 2), decision_tokens, strict=False))
    messages = []
    for i in range(40):
        sentences = [chatter(i, j) for j in range(4)]
        if i in planted:
            sentences[1] = f"We decided to use {planted[i]} for the cache layer."
        messages.append(make_message(i, ("user", "assistant")[i % 2], " ".join(sentences)))
    return messages


def test_extractive_summary_keeps_at_least_90_percent_of_planted_decisions(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """12 distinct decisions planted in the oldest 60% of 40 messages of chatter: the
    extractive summary names at least 90% of them."""
    tokens = [f"cachelib{n}{chr(97 + n)}zq" for n in range(12)]
    folder = workspace(messages=quality_conversation(tokens))
    data = b"".join(raw_lines(folder))
    settings = make_settings(token_limit=limit_for(data), **{"summarizer.backend": "extractive"})
    summarized_text = " ".join(json.loads(line)["content"] for line in raw_lines(folder)[:24])
    assert all(token in summarized_text for token in tokens)
    # The summary must select, not copy everything: the candidates exceed its budget.
    assert estimate_text_tokens(summarized_text) > settings.summarizer.max_summary_tokens

    result = run(folder, settings)

    assert result.outcome == "completed"
    assert result.summarized_count >= 24
    summary_text = summary_of(folder)["content"]
    kept = [token for token in tokens if token in summary_text]
    assert len(kept) >= 0.9 * len(tokens), f"kept only {kept}"
