"""OpenAICompatBackend through the real openai SDK against the fake OpenAI-compatible server
(tests/fakes/fake_openai.py) on 127.0.0.1: each server's answers and failures, the context it
learns from an overflow, and the chunking that follows."""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import generated_messages
from fake_openai import FakeOpenAI, Reply
from structlog.testing import capture_logs

from memoryd.errors import ConfigError, SummarizerError
from memoryd.llm import limits
from memoryd.llm.completion import Completion, ContextOverflow
from memoryd.llm.openai_compat import PLACEHOLDER_KEY, OpenAICompatBackend
from memoryd.summary.backends import Summarizer
from memoryd.summary.checkpoint import as_lists
from memoryd.summary.chunking import compact_to_checkpoint, summarize_messages
from memoryd.summary.prompts import narrative_prompt, render_transcript
from memoryd.tokens import estimate_message_tokens

API_KEY = "sk-local-SECRET-0123456789"
SECRET_TEXT = "the launch code is plover-42"
MODEL = "local-model"

BackendFactory = Callable[..., OpenAICompatBackend]


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts with no context learned in this process."""
    monkeypatch.setattr(limits, "_learned", {})


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def make_backend(fake: FakeOpenAI) -> Iterator[BackendFactory]:
    """Backends pointed at the fake server with fast test settings; closed after the test."""
    made: list[OpenAICompatBackend] = []

    def make(server: FakeOpenAI | None = None, **overrides: Any) -> OpenAICompatBackend:
        settings: dict[str, Any] = {
            "api_key": None,
            "base_url": (server or fake).base_url,
            "model": MODEL,
            "timeout": 0.5,
            "max_retries": 2,
            "default_headers": {"x-memoryd-test": "yes"},
            "deadline": 5.0,
            "backoff_base": 0.01,
        }
        settings.update(overrides)
        backend = OpenAICompatBackend(**settings)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def summarize(backend: OpenAICompatBackend, text: str = SECRET_TEXT) -> Completion:
    system, user = narrative_prompt(
        render_transcript([{"role": "user", "content": text}]), None, max_summary_tokens=256
    )
    return backend.complete(system, user, max_tokens=256)


def failure(backend: OpenAICompatBackend) -> SummarizerError:
    with pytest.raises(SummarizerError) as caught:
        summarize(backend)
    return caught.value


def test_answer_is_streamed_with_usage_and_the_request_is_what_servers_accept(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.push(Reply.ok("  They agreed on plan B.  "))

    completion = summarize(make_backend())

    assert completion.text == "They agreed on plan B."
    assert completion.model == MODEL
    assert completion.output_tokens == len("  They agreed on plan B.  ") // 4
    [request] = fake.requests
    assert completion.input_tokens == fake.prompt_tokens(request.body)
    assert request.path == "/v1/chat/completions"
    body = request.body
    assert (body["model"], body["max_tokens"], body["stream"]) == (MODEL, 256, True)
    assert body["stream_options"] == {"include_usage": True}
    system, user = body["messages"]
    assert system["role"] == "system" and "instructions" in system["content"]
    assert user["role"] == "user"
    assert f"<transcript>\n[user] {SECRET_TEXT}\n</transcript>" in user["content"]
    assert request.headers["x-memoryd-test"] == "yes"
    assert request.headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"


def test_a_configured_key_is_sent_and_a_refused_key_is_one_line_without_it(
    make_backend: BackendFactory,
) -> None:
    with FakeOpenAI(api_key=API_KEY) as guarded:
        assert summarize(make_backend(guarded, api_key=API_KEY)).text == "A fake summary."
        with capture_logs() as logs:
            error = failure(make_backend(guarded, api_key="sk-wrong-SECRET"))
        assert len(guarded.requests) == 2  # a 401 is not retried
    assert str(error) == "OpenAI-compatible server: HTTP 401 error (after 1 attempt)"
    assert "SECRET" not in repr(make_backend(api_key=API_KEY))
    assert "SECRET" not in repr(logs)
    assert API_KEY.encode() not in pickle.dumps(str(error))


def test_llamacpp_503_while_loading_is_retried_after_retry_after(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.push(Reply.loading(retry_after=1), Reply.ok("loaded now"))

    with capture_logs() as logs:
        assert summarize(make_backend()).text == "loaded now"

    first, second = fake.requests
    assert second.received_at - first.received_at >= 0.95
    [retry] = [entry for entry in logs if entry["event"] == "llm_retry"]
    assert (retry["status"], retry["reason"], retry["wait_s"]) == (
        503,
        "HTTP 503 unavailable_error",
        1.0,
    )


def test_429_from_a_proxy_is_retried_with_backoff(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.push(Reply.error(429), Reply.error(429), Reply.ok("through"))

    assert summarize(make_backend()).text == "through"
    assert len(fake.requests) == 3


def test_500_every_time_exhausts_the_retries_and_names_the_status(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.set_default(Reply.error(500))

    error = failure(make_backend(max_retries=2))

    assert str(error) == "OpenAI-compatible server: HTTP 500 server_error (after 3 attempts)"
    assert len(fake.requests) == 3


@pytest.mark.parametrize(
    ("reply", "reason", "requests"),
    [
        (Reply.empty(), "empty answer", 2),
        (Reply.refusal(), "refusal (the model declined to summarize)", 1),
        (Reply.stream_error(), "stream error (server_error)", 4),
        (Reply.ok("<think>Let me think about the plan.</think>  "), "empty answer", 2),
    ],
    ids=["empty", "refusal", "stream-error", "only-thinking"],
)
def test_an_answer_without_a_summary_is_a_failed_attempt_never_a_summary(
    fake: FakeOpenAI, make_backend: BackendFactory, reply: Reply, reason: str, requests: int
) -> None:
    fake.set_default(reply)

    error = failure(make_backend(max_retries=3))

    assert reason in str(error)
    assert len(fake.requests) == requests


def test_a_stream_error_then_an_answer_gives_the_answer(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.push(Reply.stream_error(), Reply.ok("second time lucky"))

    assert summarize(make_backend()).text == "second time lucky"


def test_thinking_is_left_out_of_the_summary(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.push(Reply.ok("<think>The user wants a summary.</think>\nThey chose plan B."))

    assert summarize(make_backend()).text == "They chose plan B."


def test_a_hang_times_out_and_is_retried(fake: FakeOpenAI, make_backend: BackendFactory) -> None:
    fake.set_default(Reply.hang(5))

    error = failure(make_backend(timeout=0.3, max_retries=1))

    assert "timed out after 0.3 s" in str(error)
    assert len(fake.requests) == 2


def test_the_unknown_model_is_refused_at_once(make_backend: BackendFactory) -> None:
    error = failure(make_backend(model="not-served"))

    assert (
        str(error) == "OpenAI-compatible server: HTTP 404 invalid_request_error (after 1 attempt)"
    )


@pytest.mark.parametrize(
    ("flavour", "reported"),
    [
        ("vllm", True),
        ("vllm-old", True),
        ("llamacpp", True),
        ("lmstudio", True),
        ("generic", False),
    ],
)
def test_each_servers_overflow_is_recognised_and_teaches_a_smaller_context(
    make_backend: BackendFactory, flavour: str, reported: bool
) -> None:
    """Every shape of overflow (vLLM's two bodies, llama.cpp's n_ctx, LM Studio's error
    event inside a 200 stream, a bare "context length" message) raises ContextOverflow
    after one request; the context believed afterwards is below what was sent, and is the
    server's own when it said (halved otherwise); it is not retried as it was."""
    text = "word " * 4000  # ~5,000 tokens
    with FakeOpenAI(flavour=flavour, n_ctx=2048) as server:
        backend = make_backend(server)
        with pytest.raises(ContextOverflow) as caught:
            summarize(backend, text)
        [request] = server.requests
    sent = server.prompt_tokens(request.body) + 256
    limit = caught.value.limit
    assert limit < sent
    assert backend.context_limit == limit
    if reported:
        assert limit == 2048
        assert "of 2,048 tokens" in str(caught.value)
    else:
        assert limit >= sent // 2 - 64


def test_a_request_larger_than_the_known_context_is_never_sent(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    backend = make_backend(context_window=1000)

    with pytest.raises(ContextOverflow) as caught:
        summarize(backend, "word " * 2000)

    assert fake.requests == []
    assert caught.value.limit == 1000
    assert "does not fit the server's context of ~1,000 tokens" in str(caught.value)


def test_a_learned_context_is_kept_for_the_next_backend_of_the_same_server(
    make_backend: BackendFactory,
) -> None:
    with FakeOpenAI(flavour="llamacpp", n_ctx=2048) as server:
        with pytest.raises(ContextOverflow):
            summarize(make_backend(server), "word " * 4000)
        later = make_backend(server)
        assert later.context_limit == 2048
        with pytest.raises(ContextOverflow):
            summarize(later, "word " * 4000)
        assert len(server.requests) == 1  # the second was refused before it was sent
    [(key, learned)] = limits.learned_limits().items()
    assert (key, learned.tokens) == (later.key, 2048)
    assert learned.source == "the server's overflow reply named 2,048 tokens"
    assert later.key.endswith("/v1 local-model")


def test_the_backend_pickles_without_its_client(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    backend = make_backend(api_key=API_KEY)
    summarize(backend)

    copy = pickle.loads(pickle.dumps(backend))

    assert summarize(copy).text == "A fake summary."


def test_missing_base_url_or_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"openai\.base_url"):
        OpenAICompatBackend(None, "", MODEL, 1, 0, {}, 5)
    with pytest.raises(ConfigError, match=r"openai\.model"):
        OpenAICompatBackend(None, "http://127.0.0.1:1/v1", "", 1, 0, {}, 5)


def _large_input(tokens: int) -> list[dict[str, Any]]:
    messages = generated_messages(tokens // 500, 2000)
    assert abs(sum(estimate_message_tokens(m) for m in messages) - tokens) < tokens // 10
    return messages


@pytest.mark.parametrize(
    ("flavour", "learning_requests"),
    [("vllm", 1), ("llamacpp", 1), ("lmstudio", 1), ("generic", 3)],
)
def test_an_overflow_re_chunks_and_every_later_request_fits(
    make_backend: BackendFactory, flavour: str, learning_requests: int
) -> None:
    """A 40k-token input against an 8k server that nobody described: the first request
    overflows, the job learns the context and re-chunks; once it has learned, no request
    is refused, and the summary is the merge of the chunks. A server that names its
    context takes one learning request; one that does not, a halving each (40k, 20k, 10k)."""
    with FakeOpenAI(flavour=flavour, n_ctx=8192, default=Reply.echo()) as server:
        summarizer = Summarizer(make_backend(server, deadline=30))
        with capture_logs() as logs:
            summary = summarize_messages(
                summarizer, _large_input(40_000), None, 1024, 150_000, "narrative"
            )
        requests = server.requests
    fits = [server.prompt_tokens(r.body) + 1024 <= 8192 for r in requests]
    assert fits == [False] * learning_requests + [True] * (len(requests) - learning_requests)
    assert summary.calls == len(requests) - learning_requests
    assert summary.text.startswith("Summary of")
    assert [e for e in logs if e["event"] == "summarize_rechunked"]


def test_ollama_never_gets_more_than_its_configured_context(make_backend: BackendFactory) -> None:
    """Ollama truncates silently: with context_window set, no request is cut."""
    with FakeOpenAI(flavour="ollama", n_ctx=8192, default=Reply.echo()) as server:
        summarizer = Summarizer(make_backend(server, deadline=30, context_window=8192))
        summarize_messages(summarizer, _large_input(30_000), None, 1024, 150_000, "narrative")
        requests = server.requests
    assert len(requests) > 1
    assert all(server.prompt_tokens(r.body) <= 8192 for r in requests)


def test_ollamas_silent_cut_is_noticed_from_its_count_and_learned_like_an_overflow(
    make_backend: BackendFactory,
) -> None:
    """Without context_window, the first request is cut by the server; its answer is not
    taken (the server counted half of what was sent), the context is learned from the
    count, and every later request is read whole."""
    with FakeOpenAI(flavour="ollama", n_ctx=8192, default=Reply.echo()) as server:
        summarizer = Summarizer(make_backend(server, deadline=30))
        with capture_logs() as logs:
            summarize_messages(summarizer, _large_input(30_000), None, 1024, 150_000, "narrative")
        requests = server.requests
    whole = [server.prompt_tokens(r.body) <= 8192 for r in requests]
    assert whole == [False] + [True] * (len(requests) - 1)
    assert len(requests) > 2
    assert [e for e in logs if e["event"] == "summarize_rechunked"]


def test_a_context_too_small_for_any_request_fails_with_a_clear_reason(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    summarizer = Summarizer(make_backend(context_window=1500))
    started = time.monotonic()

    with pytest.raises(SummarizerError, match="context is too small"):
        summarize_messages(summarizer, _large_input(5_000), None, 1024, 150_000, "narrative")

    assert fake.requests == []
    assert time.monotonic() - started < 5


def test_a_repair_continues_the_conversation_in_turns_every_template_accepts(
    fake: FakeOpenAI, make_backend: BackendFactory
) -> None:
    fake.push(Reply.ok("A first summary."), Reply.ok("A repaired summary with plover-42."))
    summarizer = Summarizer(make_backend())

    summarizer.summarize([{"role": "user", "content": SECRET_TEXT}], None, 256, "narrative")
    repaired = summarizer.repair("A first summary.", ["the launch code is plover-42"], 256)

    assert repaired is not None and repaired.text == "A repaired summary with plover-42."
    first, second = fake.requests
    roles = [m["role"] for m in second.body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert second.body["messages"][:2] == first.body["messages"]
    assert second.body["messages"][2]["content"] == "A first summary."
    assert "plover-42" in second.body["messages"][3]["content"]
    assert summarizer.usage.calls == 2 and summarizer.name == "openai"


CHECKPOINT_ANSWER = json.dumps(
    {
        "completed": ["Read the files."],
        "in_progress": [],
        "pending": ["Fix the parser."],
        "blockers": [],
        "decisions": ["Keep pathlib."],
    }
)


def test_a_checkpoint_through_a_small_server_re_chunks_after_the_overflow(
    make_backend: BackendFactory,
) -> None:
    """The checkpoint strategy's chunks too are re-cut after an overflow, each folded into
    the next; no request after the learning one is refused."""
    with FakeOpenAI(flavour="vllm", n_ctx=16_384, default=Reply.ok(CHECKPOINT_ANSWER)) as server:
        summarizer = Summarizer(make_backend(server, deadline=30))
        items, calls = compact_to_checkpoint(summarizer, None, _large_input(30_000), 150_000, 700)
        requests = server.requests
    fits = [server.prompt_tokens(r.body) + 4096 <= 16_384 for r in requests]
    assert fits == [False] + [True] * (len(requests) - 1)
    assert calls == len(requests) - 1 > 1
    assert as_lists(items).pending == ["Fix the parser."]
