"""A job's receipt and its retention check, end to end: the real SDK against the fake
Messages API (repair request, prompt cache, verbatim section), a receipt for each outcome,
the events that name it, ``memoryd history`` and ``memoryd append --pin``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_transcripts import generate, write_workspace
from cli_helpers import cli
from conftest import SettingsFactory, WorkspaceFactory, generated_messages, make_message
from fake_anthropic import FakeAnthropic, Reply
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings
from memoryd.conversation.lines import split_lines
from memoryd.published.events import read_events
from memoryd.receipts.pricing import DEFAULT_PRICES, cost_usd
from memoryd.receipts.records import read_receipts
from memoryd.search.archive import expand
from memoryd.summary.retention import VERBATIM_HEADER, extract_details, score
from memoryd.tokens import estimate_text_tokens
from memoryd.workspace import Workspace

API_KEY = "sk-ant-test-receipts"
PLANTED = [
    "We decided to store events in Postgres 16 because of JSONB.",
    "The importer lives in src/importer/main.py and reads data/in.csv.",
    "See https://example.com/specs/import for the format, and issue #314.",
    "Pin the client to v2.7.1; the timeout is 250 ms and retries are 3 retries.",
    "Run `make migrate` before `pytest -x` on the CI box.",
    "The launch is on 2026-12-01; the budget is $40.",
    "I prefer small pull requests and always squash merges.",
    "We need to write the rollback guide for the importer.",
]


def planted_conversation(count: int = 40) -> list[dict[str, Any]]:
    messages = generated_messages(count, 500)
    for index, sentence in enumerate(PLANTED):
        position = 2 * index
        messages[position]["content"] = sentence + " " + messages[position]["content"]
    return messages


def run(folder: Path, settings: Settings) -> JobResult:
    return run_job(
        JobRequest(
            workspace=folder, settings=settings, force=True, env={"ANTHROPIC_API_KEY": API_KEY}
        )
    )


def settings_for(make_settings: SettingsFactory, fake: FakeAnthropic, **extra: Any) -> Settings:
    return make_settings(
        token_limit=20_000,
        **{
            "summarizer.backend": "anthropic",
            "summarizer.max_summary_tokens": 400,
            "anthropic.base_url": fake.base_url,
            "anthropic.timeout": 5.0,
            "anthropic.max_retries": 0,
            **extra,
        },
    )


def head_of(folder: Path) -> dict[str, Any]:
    first = (folder / "conversation.jsonl").read_bytes().split(b"\n", 1)[0]
    head: dict[str, Any] = json.loads(first)
    return head


def events(folder: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in read_events(folder / ".memoryd" / "events.jsonl") if e["type"] == kind]


def planted_details(folder: Path, result: JobResult) -> list[Any]:
    archive = (folder / str(result.archive)).read_bytes()
    messages = [line.message for line in split_lines(archive, 1 << 20) if line.message]
    return extract_details(messages)


@pytest.fixture
def cached_fake(fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    """The fake server caching every marked prefix, however short (the test prompts are)."""
    fake_anthropic.cache_min_tokens = 0
    return fake_anthropic


def test_a_lossy_summary_gets_one_repair_request_read_from_the_prompt_cache(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, cached_fake: FakeAnthropic
) -> None:
    """A summary with no detail: one follow-up lists what is missing; the repeated prompt
    is read from the cache; the repaired summary replaces it; the receipt has it all."""
    folder = workspace(messages=planted_conversation())
    cached_fake.push(Reply.fluent(), Reply.lossy(0.0))
    result = run(folder, settings_for(make_settings, cached_fake))

    assert result.outcome == "completed"
    first, repair = cached_fake.message_requests
    assert first.body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert first.body["messages"][0]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert repair.body["messages"][0] == first.body["messages"][0]
    assert [m["role"] for m in repair.body["messages"]] == ["user", "assistant", "user"]
    ask = repair.body["messages"][2]["content"]
    assert "<missing_details>" in ask and "src/importer/main.py" in ask
    assert "make migrate" in ask

    summary = head_of(folder)["content"]
    assert VERBATIM_HEADER not in summary
    details = planted_details(folder, result)
    assert score(details, summary).score >= 0.95

    [receipt] = read_receipts(Workspace(folder))
    assert receipt.retention is not None
    assert receipt.retention.before < 0.8 <= receipt.retention.after
    assert receipt.llm.calls == 2
    assert receipt.llm.cache_read_tokens > 0
    assert receipt.llm.cache_creation_tokens > 0
    assert (receipt.backend, receipt.model) == ("anthropic", "claude-haiku-4-5")
    assert receipt.cost_usd == cost_usd(
        DEFAULT_PRICES["claude-haiku-4-5"],
        receipt.llm.input_tokens,
        receipt.llm.output_tokens,
        receipt.llm.cache_creation_tokens,
        receipt.llm.cache_read_tokens,
    )
    [completed] = events(folder, "summarize_completed")
    assert completed["job"] == receipt.job


def test_a_summary_still_lossy_after_the_repair_gets_a_verbatim_section_within_its_cap(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    folder = workspace(messages=planted_conversation())
    fake_anthropic.set_default(Reply.fluent())
    settings = settings_for(make_settings, fake_anthropic)
    result = run(folder, settings)

    assert result.outcome == "completed"
    assert len(fake_anthropic.message_requests) == 2
    text = head_of(folder)["content"].split("\n\n", 1)[1]
    assert VERBATIM_HEADER in text
    assert estimate_text_tokens(text) <= settings.summarizer.max_summary_tokens
    assert score(planted_details(folder, result), text).score >= 0.95
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.retention is not None
    assert receipt.retention.before == 0.0
    assert receipt.retention.after >= 0.95


def test_a_summary_above_the_threshold_is_not_repaired(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    folder = workspace(messages=planted_conversation())
    fake_anthropic.set_default(Reply.ok(" ".join(PLANTED)))
    run(folder, settings_for(make_settings, fake_anthropic))
    assert len(fake_anthropic.message_requests) == 1
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.retention is not None and receipt.retention.before >= 0.8


def test_a_failed_job_gets_a_receipt_named_by_its_event(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    folder = workspace(messages=planted_conversation())
    before = (folder / "conversation.jsonl").read_bytes()
    fake_anthropic.set_default(Reply.error(400))
    result = run(folder, settings_for(make_settings, fake_anthropic))

    assert result.outcome == "failed"
    assert (folder / "conversation.jsonl").read_bytes() == before
    [receipt] = read_receipts(Workspace(folder))
    assert (receipt.outcome, receipt.reason) == ("failed", result.reason)
    assert receipt.summarized is None and receipt.tokens_after == receipt.tokens_before
    assert result.receipt is not None
    assert result.receipt.to_record() == receipt.to_record()
    [failed] = events(folder, "summarize_failed")
    assert failed["job"] == receipt.job


def test_an_ineffective_job_gets_a_receipt(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """One giant recent message keeps usage above the trigger after the job."""
    messages = generated_messages(20, 300)
    messages.append(make_message(20, "user", "x " * 40_000))
    folder = workspace(messages=messages)
    settings = make_settings(token_limit=20_000, **{"summarizer.backend": "extractive"})
    result = run(folder, settings)
    assert result.outcome == "ineffective"
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.outcome == "ineffective" and receipt.summarized is not None
    [ineffective] = events(folder, "summarize_ineffective")
    assert ineffective["job"] == receipt.job


def test_receipts_and_the_summary_agree_on_the_span_and_the_archive_bytes(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(messages=planted_conversation())
    original = (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)
    # expand builds the index itself: no background indexing thread still at work.
    settings = make_settings(
        token_limit=20_000, index_archive=False, **{"summarizer.backend": "extractive"}
    )
    run(folder, settings)
    [receipt] = read_receipts(Workspace(folder))
    head = head_of(folder)
    span = receipt.summarized
    assert span is not None
    assert (span.first_id, span.last_id) == (head["firstId"], head["lastId"])
    assert span.archive == head["archive"] and span.count == head["summarizedCount"]
    assert span.archive is not None
    archive = (folder / span.archive).read_bytes()[span.offset : span.offset + span.length]
    assert archive == b"".join(original[: span.count])
    ids = [json.loads(line)["id"] for line in archive.splitlines()]
    assert (ids[0], ids[-1]) == (span.first_id, span.last_id)
    # Recall finds the span's ends in the archive, byte for byte as the receipt says.
    replaced = archive.splitlines(keepends=True)
    assert span.first_id is not None and span.last_id is not None
    assert expand(folder, span.first_id) == [replaced[0]]
    assert expand(folder, span.last_id) == [replaced[-1]]


def test_history_of_a_workspace_and_of_a_root(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    settings = make_settings(token_limit=20_000, **{"summarizer.backend": "extractive"})
    first = workspace(messages=planted_conversation(), name="root/a")
    second = workspace(messages=planted_conversation(), name="root/team/b")
    run(first, settings)
    run(second, settings)
    run(second, settings)

    code, table = cli("history", str(first))
    assert code == 0
    assert "1 job (1 completed, 0 ineffective, 0 failed)" in table
    code, output = cli("history", str(tmp_path / "root"), "--json")
    assert code == 0
    listed = json.loads(output)
    assert [Path(r["workspace"]).name for r in listed["receipts"]] == ["a", "b", "b"]
    saved = sum(r["tokens_before"] - r["tokens_after"] for r in listed["receipts"])
    assert listed["totals"]["tokens_saved"] == saved > 0
    assert listed["totals"]["jobs"] == 3
    code, output = cli("history", str(tmp_path / "root"), "--json", "--limit", "1")
    assert len(json.loads(output)["receipts"]) == 1
    assert json.loads(output)["totals"]["jobs"] == 3
    code, table = cli("history", str(tmp_path / "root"))
    assert "team/b" in table and "3 jobs" in table
    assert cli("history", str(tmp_path / "nowhere"))[0] == 2


def test_append_pin_marks_the_message(workspace: WorkspaceFactory) -> None:
    folder = workspace(2)
    code, output = cli("append", str(folder), "--role", "user", "--pin", "--content", "Task.")
    assert code == 0
    last = json.loads((folder / "conversation.jsonl").read_bytes().splitlines()[-1])
    assert last["pinned"] is True and last["id"] == json.loads(output)["id"]


def test_a_failed_repair_falls_back_to_the_verbatim_section(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """The first summary is valid: a repair request that fails does not fail the job."""
    folder = workspace(messages=planted_conversation())
    fake_anthropic.push(Reply.fluent(), Reply.error(400))
    result = run(folder, settings_for(make_settings, fake_anthropic))
    assert result.outcome == "completed"
    assert len(fake_anthropic.message_requests) == 2
    text = head_of(folder)["content"]
    assert VERBATIM_HEADER in text
    assert score(planted_details(folder, result), text).score >= 0.95


def test_a_failed_job_receipt_counts_the_calls_it_was_billed_for(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """A checkpoint answer that is not JSON fails the job, but was billed: its receipt
    says so, and prices it."""
    folder = workspace(messages=planted_conversation())
    fake_anthropic.set_default(Reply.ok("this is not a checkpoint"))
    settings = settings_for(make_settings, fake_anthropic, strategy="checkpoint")
    result = run(folder, settings)
    assert result.outcome == "failed"
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.llm.calls == 1 and receipt.llm.input_tokens > 0
    assert receipt.model == "claude-haiku-4-5"
    assert receipt.cost_usd is not None and receipt.cost_usd > 0


def test_summarize_says_what_the_receipt_says(
    workspace: WorkspaceFactory, clean_environment: Path, tmp_path: Path
) -> None:
    folder = workspace(messages=planted_conversation())
    config = tmp_path / "memoryd.toml"
    config.write_text('token_limit = 20000\n[summarizer]\nbackend = "extractive"\n')
    code, output = cli("--config", str(config), "summarize", str(folder), "--force")
    assert code == 0
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.retention is not None
    figures = f"retention {receipt.retention.before:.2f} → {receipt.retention.after:.2f}"
    assert figures in output


def checkpoint_answer(**lists: list[str]) -> str:
    empty: dict[str, list[str]] = {
        "completed": [],
        "in_progress": [],
        "pending": [],
        "blockers": [],
        "decisions": [],
    }
    return json.dumps({**empty, **lists})


def test_a_lossy_checkpoint_gets_one_repair_request(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    folder = workspace(messages=planted_conversation())
    fake_anthropic.push(
        Reply.ok(checkpoint_answer(in_progress=["Work on the importer goes on."])),
        Reply.ok(checkpoint_answer(decisions=PLANTED[:4], pending=PLANTED[4:])),
    )
    settings = settings_for(make_settings, fake_anthropic, strategy="checkpoint")
    result = run(folder, settings)

    assert result.outcome == "completed"
    _first, repair = fake_anthropic.message_requests
    assert [m["role"] for m in repair.body["messages"]] == ["user", "assistant", "user"]
    assert "<missing_details>" in repair.body["messages"][2]["content"]
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    assert checkpoint["decisions"] == PLANTED[:4]
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.retention is not None
    assert receipt.retention.before < 0.8 <= receipt.retention.after
    assert receipt.llm.calls == 2


def test_a_checkpoint_still_lossy_keeps_the_details_beside_its_lists(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    folder = workspace(messages=planted_conversation())
    fake_anthropic.set_default(Reply.ok(checkpoint_answer(in_progress=["Work goes on."])))
    settings = settings_for(make_settings, fake_anthropic, strategy="checkpoint")
    result = run(folder, settings)
    assert result.outcome == "completed"
    checkpoint = json.loads((folder / "checkpoint.json").read_text())
    assert "src/importer/main.py" in " ".join(checkpoint["details"])
    assert "Details kept verbatim" in head_of(folder)["content"]
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.retention is not None and receipt.retention.after >= 0.95


def test_a_receipt_that_cannot_be_written_does_not_change_the_outcome(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """A symlink where receipts.jsonl should be: refused (never written through), logged,
    and the job still completes."""
    folder = workspace(messages=planted_conversation())
    (folder / ".memoryd").mkdir(exist_ok=True)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("")
    (folder / ".memoryd" / "receipts.jsonl").symlink_to(outside)
    settings = make_settings(token_limit=20_000, **{"summarizer.backend": "extractive"})
    with capture_logs() as logs:
        result = run(folder, settings)
    assert result.outcome == "completed" and result.receipt is not None
    assert outside.read_text() == ""
    assert [e["job"] for e in logs if e["event"] == "receipt_unwritable"] == [result.receipt.job]


def test_an_offline_job_reports_no_llm_calls_in_its_event_result_and_receipt(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """The extractive backend makes no request: the summarize_completed event, the job's
    result (what the metrics count) and the receipt all say 0 LLM calls."""
    folder = workspace(messages=planted_conversation())
    settings = make_settings(token_limit=20_000, **{"summarizer.backend": "extractive"})
    result = run(folder, settings)
    assert result.outcome == "completed"
    [receipt] = read_receipts(Workspace(folder))
    [completed] = events(folder, "summarize_completed")
    assert (completed["llm_calls"], result.llm_calls, receipt.llm.calls) == (0, 0, 0)


def test_an_llm_job_reports_its_requests_in_its_event_result_and_receipt(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """Through the real SDK: the event, the result and the receipt count every request the
    fake Messages API received."""
    folder = workspace(messages=planted_conversation())
    result = run(folder, settings_for(make_settings, fake_anthropic))
    assert result.outcome == "completed"
    requests = len(fake_anthropic.message_requests)
    [receipt] = read_receipts(Workspace(folder))
    [completed] = events(folder, "summarize_completed")
    assert requests >= 1
    assert (completed["llm_calls"], result.llm_calls, receipt.llm.calls) == (requests,) * 3


def test_a_date_or_unit_written_with_a_letter_that_only_folds_to_ascii_is_compacted(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    messages = generated_messages(30, 400)
    messages[0]["content"] = "The freeze starts on 3 \u017fept 2026; the timeout is 5 m\u017f."
    messages[2]["content"] = "The launch is on Apr\u0130l 3, 2026 and on apr\u0131l 9 2026."
    folder = workspace(messages=messages)
    settings = make_settings(**{"summarizer.backend": "extractive", "token_limit": 20_000})
    result = run(folder, settings)
    assert result.outcome == "completed", result.reason
    (receipt,) = read_receipts(Workspace(folder))
    assert receipt.outcome == "completed" and receipt.retention is not None
    details = extract_details(messages[:3])
    assert {"2026-09-03", "5 ms", "2026-04-03", "2026-04-09"} <= {d.key for d in details}
    kept = score(details, str(head_of(folder)["content"]))
    assert kept.score == 1.0, kept.missing


def test_a_job_counts_what_it_saw_and_says_what_arrived_meanwhile_apart(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """An agent appends 10 messages while a masking job commits: the receipt's
    ``messages_after`` counts what the job wrote (as many as it read: masking keeps every
    message), the 10 are ``messages_arrived``, and ``memoryd history`` shows both apart."""
    transcript = generate("autonomous", 5, 120)
    folder = write_workspace(tmp_path / "ws", transcript)
    before = len((folder / "conversation.jsonl").read_bytes().splitlines())
    config = make_settings(
        keep_first=1,
        token_limit=int(transcript.tokens / 0.95),
        **{"masking.enabled": True, "summarizer.backend": "extractive"},
    )
    arrived = b"".join(
        json.dumps({"id": f"new-{n}", "role": "user", "content": "more " * 20}).encode() + b"\n"
        for n in range(10)
    )

    def agent_appends(step: str) -> None:
        if step.startswith("committing"):
            with open(folder / "conversation.jsonl", "ab") as file:
                file.write(arrived)

    result = run_job(JobRequest(folder, config, reason="trigger"), progress=agent_appends)
    assert result.outcome == "completed" and result.masked_messages > 0, result.reason
    (receipt,) = read_receipts(Workspace(folder))
    assert (receipt.messages_before, receipt.messages_after) == (before, before)
    assert receipt.messages_arrived == 10 and receipt.tokens_arrived > 0
    assert receipt.tokens_after < receipt.tokens_before
    code, table = cli("history", str(folder))
    assert code == 0
    assert f"{before}->{before} (+10 new)" in table
