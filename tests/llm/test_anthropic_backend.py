"""AnthropicBackend through the real SDK against the fake Messages API server on 127.0.0.1."""

from __future__ import annotations

import email.utils
import json
import pickle
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from fake_anthropic import FakeAnthropic, Reply, echo_summary
from structlog.testing import capture_logs

from memoryd.errors import ConfigError, SummarizerError
from memoryd.llm.anthropic import AnthropicBackend
from memoryd.llm.completion import Completion
from memoryd.llm.retries import parse_retry_after
from memoryd.summary.prompts import narrative_prompt, render_transcript

API_KEY = "sk-ant-test-SECRET-0123456789"
SECRET_TEXT = "the launch code is plover-42"
MODEL = "claude-haiku-4-5"

BackendFactory = Callable[..., AnthropicBackend]


@pytest.fixture(autouse=True)
def _no_anthropic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own ANTHROPIC_* settings must not leak into these requests."""
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
        "ANTHROPIC_PROFILE",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def make_backend(fake_anthropic: FakeAnthropic) -> Iterator[BackendFactory]:
    """Backends pointed at the fake server with fast test settings; closed after the test."""
    made: list[AnthropicBackend] = []

    def make(**overrides: Any) -> AnthropicBackend:
        settings: dict[str, Any] = {
            "api_key": API_KEY,
            "base_url": fake_anthropic.base_url,
            "model": MODEL,
            "timeout": 0.5,
            "max_retries": 2,
            "default_headers": {"x-memoryd-test": "yes"},
            "deadline": 5.0,
            "backoff_base": 0.01,
        }
        settings.update(overrides)
        backend = AnthropicBackend(**settings)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


def summarize(backend: AnthropicBackend, text: str = SECRET_TEXT) -> Completion:
    system, user = narrative_prompt(
        render_transcript([{"role": "user", "content": text}]), None, max_summary_tokens=256
    )
    return backend.complete(system, user, max_tokens=256)


def failure(backend: AnthropicBackend) -> SummarizerError:
    with pytest.raises(SummarizerError) as caught:
        summarize(backend)
    return caught.value


def test_normal_answer_returns_text_usage_and_sends_model_system_transcript_headers_key(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.ok("  They agreed on plan B.  ", input_tokens=321, output_tokens=7))

    completion = summarize(make_backend())

    assert completion == Completion("They agreed on plan B.", 321, 7, MODEL)
    [request] = fake_anthropic.requests
    assert request.path == "/v1/messages"
    assert request.body["model"] == MODEL
    assert request.body["max_tokens"] == 256
    assert "data" in request.body["system"] and "instructions" in request.body["system"]
    [message] = request.body["messages"]
    assert message["role"] == "user"
    assert f"<transcript>\n[user] {SECRET_TEXT}\n</transcript>" in message["content"]
    assert request.headers["x-memoryd-test"] == "yes"
    # This SDK release sends the key as a bearer token, not as x-api-key.
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["x-stainless-retry-count"] == "0"


def test_answer_slower_than_latency_but_within_timeout_arrives_in_one_request(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.ok("slow but fine", delay=0.2))

    completion = summarize(make_backend(timeout=0.5))

    assert completion.text == "slow but fine"
    assert len(fake_anthropic.requests) == 1


def test_429_with_retry_after_waits_that_long_then_succeeds(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.error(429, retry_after=1), Reply.ok("after the rate limit"))

    with capture_logs() as logs:
        completion = summarize(make_backend())

    assert completion.text == "after the rate limit"
    first, second = fake_anthropic.requests
    assert second.received_at - first.received_at >= 0.95
    [retry] = [entry for entry in logs if entry["event"] == "llm_retry"]
    assert retry["attempt"] == 1
    assert retry["status"] == 429
    assert retry["wait_s"] == 1.0


def test_retry_after_as_an_http_date_is_honoured(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    retry_at = email.utils.formatdate(time.time() + 1, usegmt=True)
    fake_anthropic.push(Reply.error(429, retry_after=retry_at), Reply.ok("later"))

    assert summarize(make_backend()).text == "later"
    assert len(fake_anthropic.requests) == 2
    # The retry went out no earlier than the date (HTTP dates have whole seconds).
    assert time.time() >= email.utils.parsedate_to_datetime(retry_at).timestamp() - 0.05


def test_529_overloaded_is_retried_then_succeeds(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.error(529), Reply.ok("no longer overloaded"))

    assert summarize(make_backend()).text == "no longer overloaded"
    assert len(fake_anthropic.requests) == 2


def test_500_every_time_exhausts_the_retries_and_names_500(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.error(500))

    error = failure(make_backend(max_retries=2))

    assert "HTTP 500 api_error" in str(error)
    assert "3 attempts" in str(error)
    assert len(fake_anthropic.requests) == 3


def test_hang_longer_than_the_timeout_is_retried_then_fails_timed_out(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.hang(5))

    error = failure(make_backend(timeout=0.3, max_retries=1))

    assert "timed out after 0.3 s" in str(error)
    assert len(fake_anthropic.requests) == 2


def test_request_timeout_shrinks_to_the_time_left_before_the_deadline(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.hang(5))
    started = time.monotonic()

    error = failure(make_backend(timeout=30, max_retries=3, deadline=0.6))

    elapsed = time.monotonic() - started
    assert "timed out" in str(error)
    # Correctness bound: a 30 s per-request timeout would have taken 30 s.
    assert elapsed < 2.5


def test_retry_after_beyond_the_deadline_fails_at_once_without_sleeping(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.error(429, retry_after=1), Reply.ok("too late"))
    started = time.monotonic()

    error = failure(make_backend(deadline=0.5))

    elapsed = time.monotonic() - started
    assert "HTTP 429 rate_limit_error" in str(error)
    assert "deadline" in str(error)
    assert len(fake_anthropic.requests) == 1
    # Correctness bound: sleeping the 1 s retry-after would take at least 1 s.
    assert elapsed < 0.9


def test_empty_answer_is_retried_once_then_fails_empty(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.empty())

    error = failure(make_backend(max_retries=4))

    assert "empty answer" in str(error)
    assert len(fake_anthropic.requests) == 2


def test_whitespace_only_answer_counts_as_empty_and_a_good_retry_succeeds(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.ok(" \n\t "), Reply.ok("second time lucky"))

    assert summarize(make_backend()).text == "second time lucky"
    assert len(fake_anthropic.requests) == 2


def test_refusal_fails_at_once_naming_refusal(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.refusal("I can't help with that."))

    error = failure(make_backend())

    assert "refusal" in str(error)
    assert len(fake_anthropic.requests) == 1


def test_unexpected_stop_reason_fails_without_retry(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.ok("calling a tool", stop_reason="tool_use"))

    error = failure(make_backend())

    assert "stop_reason 'tool_use'" in str(error)
    assert len(fake_anthropic.requests) == 1


def test_an_answer_cut_at_max_tokens_is_a_bad_answer_retried_once(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.ok("a summary cut at the", stop_reason="max_tokens"))

    error = failure(make_backend(max_retries=3))

    assert "the answer was cut at max_tokens (256): no summary" in str(error)
    assert len(fake_anthropic.requests) == 2


def test_body_that_is_not_json_fails_malformed_after_one_retry(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.malformed())

    error = failure(make_backend(max_retries=4))

    assert "44 bytes of application/json that is not JSON, instead of a stream" in str(error)
    assert len(fake_anthropic.requests) == 2


def test_json_that_is_not_a_message_fails_malformed(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.not_a_message())

    error = failure(make_backend())

    assert "JSON that is no message (43 bytes) instead of a stream" in str(error)


def test_malformed_then_good_answer_succeeds(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.push(Reply.malformed(), Reply.ok("valid now"))

    assert summarize(make_backend()).text == "valid now"


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_client_errors_are_not_retried(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory, status: int
) -> None:
    fake_anthropic.set_default(Reply.error(status))

    error = failure(make_backend())

    assert f"HTTP {status}" in str(error)
    assert len(fake_anthropic.requests) == 1


def test_x_should_retry_false_stops_retrying_a_500(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    fake_anthropic.set_default(Reply.error(500, headers={"x-should-retry": "false"}))

    failure(make_backend())

    assert len(fake_anthropic.requests) == 1


def test_connection_refused_is_retried_then_fails_naming_a_connection_error(
    make_backend: BackendFactory,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    error = failure(make_backend(base_url=f"http://127.0.0.1:{closed_port}", max_retries=1))

    assert "connection error" in str(error)
    assert "2 attempts" in str(error)


FAILING_REPLIES = [
    Reply.error(401),
    Reply.error(500),
    Reply.error(429, retry_after=3),
    Reply.hang(5),
    Reply.empty(),
    Reply.refusal(SECRET_TEXT),
    Reply.malformed(),
    Reply.not_a_message(),
    Reply.ok(SECRET_TEXT, stop_reason="pause_turn"),
]


@pytest.mark.parametrize("reply", FAILING_REPLIES, ids=lambda reply: reply.kind)
def test_errors_and_retry_logs_never_carry_the_api_key_or_message_text(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory, reply: Reply
) -> None:
    fake_anthropic.set_default(reply)

    with capture_logs() as logs:
        error = failure(make_backend(timeout=0.3, max_retries=1, deadline=2))

    shown = [str(error), repr(error), json.dumps(logs, default=str)]
    assert error.__cause__ is None
    for text in shown:
        assert API_KEY not in text
        assert SECRET_TEXT not in text


def test_backend_pickles_without_its_client_and_hides_the_key_in_repr(
    fake_anthropic: FakeAnthropic, make_backend: BackendFactory
) -> None:
    backend = make_backend()
    summarize(backend)

    copy = pickle.loads(pickle.dumps(backend))
    try:
        assert API_KEY not in repr(backend)
        assert summarize(copy).text == "A fake summary."
    finally:
        copy.close()
    assert len(fake_anthropic.requests) == 2


def test_invalid_settings_are_refused_at_construction() -> None:
    with pytest.raises(ConfigError, match="API key"):
        AnthropicBackend("", None, MODEL, 1.0, 1, {}, 5.0)
    with pytest.raises(ConfigError, match="timeout"):
        AnthropicBackend(API_KEY, None, MODEL, 0, 1, {}, 5.0)
    with pytest.raises(ConfigError, match="deadline"):
        AnthropicBackend(API_KEY, None, MODEL, 1.0, 1, {}, 0)


def test_parse_retry_after_reads_milliseconds_seconds_and_dates() -> None:
    now = 1_000_000.0
    assert parse_retry_after({"retry-after-ms": "250"}, now) == 0.25
    assert parse_retry_after({"retry-after": "1.5"}, now) == 1.5
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert parse_retry_after({"retry-after": date}, now) == pytest.approx(7, abs=1)
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 60)}, now) == 0
    assert parse_retry_after({"retry-after": "soon"}, now) is None
    assert parse_retry_after({}, now) is None


def test_fake_server_counts_tokens_through_the_sdk(fake_anthropic: FakeAnthropic) -> None:
    with anthropic.Anthropic(
        api_key=API_KEY, base_url=fake_anthropic.base_url, max_retries=0
    ) as client:
        counted = client.messages.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "x" * 400}]
        )

    assert counted.input_tokens >= 100


def test_fake_server_rejects_a_request_without_max_tokens(fake_anthropic: FakeAnthropic) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(
        f"{fake_anthropic.base_url}/v1/messages", data=body.encode(), method="POST"
    )

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5)

    with caught.value as response:
        payload = json.load(response)
    assert caught.value.code == 400
    assert payload["type"] == "error"
    assert payload["error"]["type"] == "invalid_request_error"


def test_echo_summary_digests_the_delimited_transcript() -> None:
    _, user = narrative_prompt("alpha beta gamma delta", None, 100)

    digest = echo_summary({"messages": [{"role": "user", "content": user}]})

    assert digest == ("Summary of 22 characters of transcript. It begins: alpha beta gamma")


def test_fake_server_runs_as_a_process_with_latency_and_echo_until_sigterm() -> None:
    script = Path(__file__).parents[1] / "fakes" / "fake_anthropic.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "--port", "0", "--latency", "0.2", "--echo"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:")
        with AnthropicBackend(API_KEY, base_url, MODEL, 5.0, 0, {}, 10.0) as backend:
            started = time.monotonic()
            completion = summarize(backend, "one two three four")
            elapsed = time.monotonic() - started
        assert completion.text.startswith("Summary of ")
        assert completion.text.endswith("It begins: [user] one two")
        assert elapsed >= 0.2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
