"""What a new user of a local server tripped on: a URL without its scheme, a connection
error that does not say where, a failed job that shows no calls, a summary's size counted
with its header (docs/guides/local-models.md)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SettingsFactory, WorkspaceFactory
from fake_anthropic import FakeAnthropic
from fake_anthropic import Reply as AnthropicReply
from fake_openai import FakeOpenAI, Reply

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.llm import limits
from memoryd.llm.anthropic import AnthropicBackend
from memoryd.llm.completion import CompletionBackend
from memoryd.llm.openai_compat import OpenAICompatBackend
from memoryd.receipts.records import read_receipts
from memoryd.tokens import estimate_text_tokens
from memoryd.workspace import Workspace


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_learned", {})


@pytest.mark.parametrize("section", ["openai", "anthropic"])
def test_a_base_url_without_its_scheme_is_refused_at_load_with_one_line(
    tmp_path: Path, section: str
) -> None:
    config = tmp_path / "memoryd.toml"
    config.write_text(f'[{section}]\nbase_url = "127.0.0.1:8000/v1"\nmodel = "m"\n')
    folder = tmp_path / "ws"
    folder.mkdir()
    conversation = folder / "conversation.jsonl"
    conversation.write_text('{"role": "user", "content": "hi"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "memoryd", "summarize", str(folder), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"memoryd: config: {section}.base_url = '127.0.0.1:8000/v1' (in file {config}): "
        "must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)\n"
    )
    assert conversation.read_text() == '{"role": "user", "content": "hi"}\n'


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("backend", ["openai", "anthropic"])
def test_a_connection_error_names_the_url(backend: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}" + ("/v1" if backend == "openai" else "")
    client: CompletionBackend
    if backend == "openai":
        client = OpenAICompatBackend(
            api_key=None,
            base_url=url,
            model="m",
            timeout=1.0,
            max_retries=1,
            default_headers={},
            deadline=10.0,
            backoff_base=0.01,
        )
    else:
        client = AnthropicBackend(
            api_key="sk-ant-test",
            base_url=url,
            model="m",
            timeout=1.0,
            max_retries=1,
            default_headers={},
            deadline=10.0,
            backoff_base=0.01,
        )
    with pytest.raises(Exception, match=re.escape(f"connection error to {url} (")) as caught:
        client.complete("system", "user", 64)
    client.close()
    assert "after 2 attempts" in str(caught.value)


def test_a_failed_job_counts_every_request_it_sent(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    """A server that answers 500 every time: three requests, and the receipt (what
    ``history`` shows) says three calls, not zero."""
    folder = workspace(30, size=400)
    with FakeOpenAI(default=Reply.error(500)) as server:
        settings = make_settings(
            token_limit=2_000,
            **{
                "summarizer.backend": "openai",
                "openai.base_url": server.base_url,
                "openai.model": "local-model",
                "openai.timeout": 2.0,
                "openai.max_retries": 2,
            },
        )
        result = run_job(JobRequest(folder, settings, force=True, env={}))
        sent = len(server.requests)
    assert result.outcome == "failed"
    [receipt] = read_receipts(Workspace(folder))
    assert sent == 3
    assert receipt.llm is not None and receipt.llm.calls == sent


def test_a_summarys_size_is_its_own_text_within_max_summary_tokens(
    workspace: WorkspaceFactory, make_settings: SettingsFactory, fake_anthropic: FakeAnthropic
) -> None:
    """An answer of 125 tokens under max_summary_tokens = 128: the result says 125, not
    the size of the summary message with its fixed header."""
    folder = workspace(30, size=400)
    fake_anthropic.set_default(AnthropicReply.ok("- " + "detail " * 71))
    settings = make_settings(
        token_limit=2_000,
        **{
            "summarizer.backend": "anthropic",
            "anthropic.base_url": fake_anthropic.base_url,
            "summarizer.max_summary_tokens": 128,
            "summarizer.min_retention": 0,
        },
    )
    result = run_job(JobRequest(folder, settings, force=True, env={"ANTHROPIC_API_KEY": "k"}))
    assert result.outcome == "completed", result.reason
    found = re.search(r"with a ([\d,]+)-token summary", result.reason or "")
    assert found is not None
    assert int(found.group(1).replace(",", "")) == estimate_text_tokens("- " + "detail " * 71)
    assert int(found.group(1)) <= 128
