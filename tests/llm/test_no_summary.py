"""Never worse than offline when the model gives no summary at all: a small local model
that writes to ``max_tokens`` every time (or refuses) leaves the offline items as the
head, and says so; a server in trouble (5xx) still fails the job to be retried
(docs/design.md#retention)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import SettingsFactory, WorkspaceFactory
from fake_anthropic import FakeAnthropic
from fake_anthropic import Reply as AnthropicReply
from fake_openai import FakeOpenAI, Reply

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.config.settings import Settings
from memoryd.llm import limits
from memoryd.receipts.records import Receipt, read_receipts
from memoryd.workspace import Workspace

CUT_NOTE = (
    "llm gave no summary (the answer was cut at max_tokens (256), 2 attempts): offline items used"
)


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_learned", {})


def _settings(make_settings: SettingsFactory, backend: str, base_url: str = "") -> Settings:
    return make_settings(
        token_limit=2_000,
        **{
            "summarizer.backend": backend,
            "summarizer.max_summary_tokens": 256,
            "openai.base_url": base_url,
            "openai.model": "local-model",
            "openai.timeout": 5.0,
            "openai.max_retries": 2,
        },
    )


def _lines(folder: Path) -> list[bytes]:
    return (folder / "conversation.jsonl").read_bytes().splitlines(keepends=True)


def _archived(folder: Path) -> list[bytes]:
    archive = folder / ".memoryd" / "archive"
    return [
        line for path in sorted(archive.iterdir()) for line in path.read_bytes().splitlines(True)
    ]


def _head(folder: Path) -> str:
    return str(json.loads(_lines(folder)[0])["content"])


def _receipt(folder: Path) -> Receipt:
    [receipt] = read_receipts(Workspace(folder))
    return receipt


def _history_reason(folder: Path) -> str:
    """The reason ``memoryd history --json`` shows for the one job."""
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "history", "--json", str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [record] = json.loads(done.stdout)["receipts"]
    return str(record["reason"])


def test_answers_cut_at_max_tokens_every_time_give_the_offline_items_and_say_so(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """Every answer ends with finish_reason "length" at max_tokens: the job completes
    with the head the extractive backend writes for the same input, every line is in the
    file or its archive, the two requests are counted, and the receipt, HEARTBEAT and
    history say why."""
    folder = workspace(30, size=400, name="llm")
    offline = workspace(30, size=400, name="offline")
    original = _lines(folder)
    with FakeOpenAI(default=Reply.length("- The next step is to provide the output")) as server:
        result = run_job(
            JobRequest(folder, _settings(make_settings, "openai", server.base_url), force=True)
        )
        sent = len(server.requests)
    assert result.outcome == "completed", result.reason
    run_job(JobRequest(offline, _settings(make_settings, "extractive"), force=True))

    assert _head(folder) == _head(offline)
    assert "next step" not in _head(folder)
    now = _lines(folder)
    assert json.loads(now[0])["isSummary"] is True
    assert Counter(now[1:] + _archived(folder)) == Counter(original)
    receipt = _receipt(folder)
    assert receipt.outcome == "completed"
    assert sent == 2
    assert receipt.llm is not None and receipt.llm.calls == sent
    assert receipt.backend == "openai"
    assert CUT_NOTE in (receipt.reason or "")
    assert CUT_NOTE in (folder / "HEARTBEAT.md").read_text()
    assert CUT_NOTE in _history_reason(folder)


def test_a_refusal_gives_the_offline_items_after_one_request(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(30, size=400)
    with FakeOpenAI(default=Reply.refusal()) as server:
        result = run_job(
            JobRequest(folder, _settings(make_settings, "openai", server.base_url), force=True)
        )
        sent = len(server.requests)
    assert result.outcome == "completed", result.reason
    assert sent == 1
    note = "llm gave no summary (refusal (the model declined to summarize), 1 attempt)"
    assert note in (_receipt(folder).reason or "")


def test_a_server_in_trouble_still_fails_the_job_with_nothing_changed(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """503 every time is transient: retried, then the job fails and is retried later;
    the offline items do not stand in, the file is as it was."""
    folder = workspace(30, size=400)
    original = (folder / "conversation.jsonl").read_bytes()
    with FakeOpenAI(default=Reply.error(503, retry_after=0)) as server:
        result = run_job(
            JobRequest(folder, _settings(make_settings, "openai", server.base_url), force=True)
        )
        sent = len(server.requests)
    assert result.outcome == "failed"
    assert "offline items used" not in (result.reason or "")
    assert (folder / "conversation.jsonl").read_bytes() == original
    receipt = _receipt(folder)
    assert sent == 3
    assert receipt.llm is not None and receipt.llm.calls == sent


def test_an_empty_answer_twice_from_anthropic_gives_the_offline_items(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """The same rule on the other backend: an empty answer, retried once, is no summary."""
    folder = workspace(30, size=400)
    fake_anthropic.set_default(AnthropicReply.empty())
    settings = make_settings(
        token_limit=2_000,
        **{
            "summarizer.backend": "anthropic",
            "summarizer.max_summary_tokens": 256,
            "anthropic.base_url": fake_anthropic.base_url,
            "anthropic.max_retries": 2,
        },
    )
    result = run_job(JobRequest(folder, settings, force=True, env={"ANTHROPIC_API_KEY": "k"}))
    assert result.outcome == "completed", result.reason
    assert len(fake_anthropic.message_requests) == 2
    assert "llm gave no summary (empty answer, 2 attempts): offline items used" in (
        result.reason or ""
    )
    receipt = _receipt(folder)
    assert receipt.llm is not None and receipt.llm.calls == 2


def test_a_checkpoint_from_a_model_that_gives_none_is_the_offline_checkpoint(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """The checkpoint strategy too: answers cut at max_tokens every time leave the lists
    the extractive backend writes for the same input, and the job says why."""
    folder = workspace(30, size=400, name="llm")
    offline = workspace(30, size=400, name="offline")
    original = _lines(folder)
    with FakeOpenAI(default=Reply.length("- The next step is to provide the output")) as server:
        settings = _settings(make_settings, "openai", server.base_url)
        config = settings.model_copy(update={"strategy": "checkpoint"})
        result = run_job(JobRequest(folder, config, force=True))
        sent = len(server.requests)
    assert result.outcome == "completed", result.reason
    plain = _settings(make_settings, "extractive")
    run_job(JobRequest(offline, plain.model_copy(update={"strategy": "checkpoint"}), force=True))
    head = json.loads(_lines(folder)[0])
    assert head["isCheckpoint"] is True
    lists = {
        k: v for k, v in head["checkpoint"].items() if k not in ("updated_at", "compaction_info")
    }
    theirs = json.loads(_lines(offline)[0])["checkpoint"]
    assert lists == {k: v for k, v in theirs.items() if k not in ("updated_at", "compaction_info")}
    assert "next step" not in head["content"]
    assert Counter(_lines(folder)[1:] + _archived(folder)) == Counter(original)
    receipt = _receipt(folder)
    assert sent >= 2 and receipt.llm is not None and receipt.llm.calls == sent
    note = "llm gave no summary (the answer was cut at max_tokens"
    assert note in (receipt.reason or "") and note in (folder / "HEARTBEAT.md").read_text()
