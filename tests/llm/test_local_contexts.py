"""What a local server's context teaches, against the fake OpenAI-compatible server with
llama.cpp's and Ollama's shapes: a limit is learned only from what proves it, an answer
cut by the context is never a summary, chunks fill the room learned, and a server that
under-counts is reported as such (docs/design.md#openai-compatible)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import SettingsFactory, WorkspaceFactory, generated_messages
from fake_anthropic import RecordedRequest
from fake_openai import FakeOpenAI, Reply
from structlog.testing import capture_logs

from memoryd.compaction.job.request import JobRequest
from memoryd.compaction.job.run import run_job
from memoryd.errors import SummarizerError
from memoryd.llm import limits
from memoryd.llm.completion import ContextOverflow
from memoryd.llm.openai_compat import OpenAICompatBackend
from memoryd.receipts.records import read_receipts
from memoryd.summary.backends import Summarizer
from memoryd.summary.chunking import instruction_tokens, summarize_messages
from memoryd.summary.prompts import narrative_prompt, render_transcript
from memoryd.tokens import estimate_message_tokens
from memoryd.workspace import Workspace

BackendFactory = Callable[..., OpenAICompatBackend]


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_learned", {})


@pytest.fixture
def make_backend() -> Iterator[BackendFactory]:
    made: list[OpenAICompatBackend] = []

    def make(server: FakeOpenAI, **overrides: Any) -> OpenAICompatBackend:
        settings: dict[str, Any] = {
            "api_key": None,
            "base_url": server.base_url,
            "model": "local-model",
            "timeout": 2.0,
            "max_retries": 2,
            "default_headers": {},
            "deadline": 60.0,
            "backoff_base": 0.01,
        }
        backend = OpenAICompatBackend(**{**settings, **overrides})
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def ask(backend: OpenAICompatBackend, words: int = 40, max_tokens: int = 256) -> str:
    system, user = narrative_prompt(
        render_transcript([{"role": "user", "content": "plan B " * words}]), None, max_tokens
    )
    return backend.complete(system, user, max_tokens).text


def transcript_requests(server: FakeOpenAI) -> list[RecordedRequest]:
    """The requests that carried a transcript (chunk summaries), not merges."""
    return [r for r in server.requests if "<transcript>" in r.body["messages"][-1]["content"]]


def test_a_full_shared_cache_is_retried_never_learned_as_a_small_context(
    make_backend: BackendFactory,
) -> None:
    """llama-server's slots share one cache: under concurrent requests it streams a 500
    "Context size has been exceeded." after HTTP 200. No number: a transient failure."""
    with FakeOpenAI(flavour="llamacpp", n_ctx=4096) as server:
        server.push(Reply.cache_full(), Reply.cache_full(), Reply.ok("- the summary"))
        backend = make_backend(server, context_window=4096)

        assert ask(backend) == "- the summary"
        assert len(server.requests) == 3
    assert limits.learned_limits() == {}
    assert backend.context_limit == 4096


def test_a_numberless_overflow_with_a_window_configured_is_transient(
    make_backend: BackendFactory,
) -> None:
    with FakeOpenAI(flavour="generic", n_ctx=0) as server:
        body = {"error": {"message": "Input is too long: context length exceeded"}}
        server.push(Reply.error(400, body), Reply.ok("- the summary"))
        backend = make_backend(server, context_window=8192)

        assert ask(backend) == "- the summary"
    assert limits.learned_limits() == {}


def test_an_overflow_naming_its_context_teaches_it_with_its_source(
    make_backend: BackendFactory,
) -> None:
    with FakeOpenAI(flavour="llamacpp", n_ctx=512) as server:
        backend = make_backend(server)
        with pytest.raises(ContextOverflow):
            ask(backend, words=600)
    learned = limits.learned_limit(backend.key)
    assert learned is not None and learned.tokens <= 512
    assert learned.source == "the server's overflow reply named 512 tokens"
    note = backend.context_note()
    assert note is not None and note.startswith(f"server context ~{learned.tokens:,} tokens")
    assert "the server's overflow reply named 512 tokens" in note and "UTC" in note


def test_a_learned_context_expires() -> None:
    key = "http://127.0.0.1:1/v1 m"
    now = 1_000_000.0
    limits.learn({key: limits.LearnedLimit(1000, "test", now)}, now=now)

    assert limits.learned_limit(key, now + limits.LIMIT_TTL - 1) is not None
    assert limits.learned_limit(key, now + limits.LIMIT_TTL + 1) is None
    assert limits.merged({key: limits.LearnedLimit(1000, "t", now)}, {}, now + 2e4) == {}


def test_an_answer_cut_by_the_context_teaches_the_room_left_and_is_no_summary(
    make_backend: BackendFactory,
) -> None:
    """llama.cpp stops an answer where the context ends, with 200 and finish "length"."""
    long_answer = "- a detail of the summary " * 200
    with FakeOpenAI(flavour="llamacpp", n_ctx=1400, default=Reply.ok(long_answer)) as server:
        backend = make_backend(server)
        with pytest.raises(ContextOverflow, match="cut by the server's context"):
            ask(backend, words=200, max_tokens=1000)
        with pytest.raises(ContextOverflow, match="does not fit"):  # not sent again
            ask(backend, words=200, max_tokens=1000)
        assert len(server.requests) == 1
    learned = limits.learned_limit(backend.key)
    assert learned is not None and learned.tokens <= 1400
    assert "an answer cut by the context" in learned.source


def test_an_answer_cut_by_a_full_cache_with_a_window_configured_is_retried(
    make_backend: BackendFactory,
) -> None:
    long_answer = "- a detail of the summary " * 200
    with FakeOpenAI(flavour="llamacpp", n_ctx=1400) as server:
        server.push(Reply.ok(long_answer), Reply.ok("- the summary"))
        backend = make_backend(server, context_window=4096)  # the cache has less room
        assert ask(backend, words=200, max_tokens=500) == "- the summary"
    assert limits.learned_limits() == {}


def _input(tokens: int, per_message: int = 100) -> list[dict[str, Any]]:
    messages = generated_messages(tokens // per_message, per_message * 4)
    total = sum(estimate_message_tokens(m) for m in messages)
    assert abs(total - tokens) < tokens // 10
    return messages


@pytest.mark.parametrize("n_ctx", [4096, 8192, 32768])
def test_chunks_fill_the_room_learned(make_backend: BackendFactory, n_ctx: int) -> None:
    """A 100k-token input against a server of ``n_ctx``: one request learns the context,
    then the chunk requests number within 1.2x of input / room, where room is the
    context less the instructions, the answer and nothing else."""
    budget = 1024
    messages = _input(100_000)
    total = sum(estimate_message_tokens(m) for m in messages)
    with FakeOpenAI(flavour="llamacpp", n_ctx=n_ctx, default=Reply.ok("- kept")) as server:
        summarizer = Summarizer(make_backend(server))
        summary = summarize_messages(summarizer, messages, None, budget, 150_000, "narrative")
        chunks = transcript_requests(server)
        merges = len(server.requests) - len(chunks)
    room = n_ctx - instruction_tokens("narrative", budget) - budget
    needed = math.ceil(total / room)
    learning = 1
    assert len(chunks) <= 1.2 * needed + learning, (len(chunks), needed)
    assert merges == 1  # the short chunk summaries fit one merge
    assert summary.calls == len(server.requests) - learning


def test_an_under_counting_server_fails_the_job_naming_what_it_read(
    make_backend: BackendFactory,
) -> None:
    """A server reporting 1,234 prompt tokens for a ~9,800-token request: the configured
    window stays, nothing is summarized, the reason says what the server read."""
    with FakeOpenAI(flavour="vllm", reports_prompt_tokens=1234) as server:
        backend = make_backend(server, context_window=32_768)
        summarizer = Summarizer(backend)
        started = time.monotonic()
        with capture_logs() as logs, pytest.raises(SummarizerError) as caught:
            summarize_messages(summarizer, _input(9_600), None, 1024, 150_000, "narrative")
        requests = len(server.requests)
    reason = str(caught.value)
    assert "the server read 1,234 of ~" in reason
    assert "raise its context, e.g. OLLAMA_CONTEXT_LENGTH" in reason
    assert requests == 1
    assert backend.context_limit == 32_768 and limits.learned_limits() == {}
    [cut] = [e for e in logs if e["event"] == "llm_prompt_cut"]
    assert cut["counted"] == 1234 and cut["sent"] > 9_000
    assert time.monotonic() - started < 60


def test_an_under_count_reaches_the_receipt_and_heartbeat_and_nothing_is_summarized(
    workspace: WorkspaceFactory, make_settings: SettingsFactory
) -> None:
    folder = workspace(60, size=800)
    before = (folder / "conversation.jsonl").read_bytes()
    with FakeOpenAI(flavour="ollama", reports_prompt_tokens=1234) as server:
        settings = make_settings(
            token_limit=4_000,
            **{
                "summarizer.backend": "openai",
                "openai.base_url": server.base_url,
                "openai.model": "local-model",
                "openai.context_window": 32_768,
                "openai.max_retries": 0,
            },
        )
        result = run_job(JobRequest(folder, settings, force=True, env={}))
    assert result.outcome == "failed"
    said = "the server read 1,234 of ~"
    [receipt] = read_receipts(Workspace(folder))
    assert said in receipt.reason and "OLLAMA_CONTEXT_LENGTH" in receipt.reason
    assert said in (folder / "HEARTBEAT.md").read_text()
    assert (folder / "conversation.jsonl").read_bytes() == before
