"""Streams that go wrong, against the fake servers of both LLM backends (the real SDKs on
127.0.0.1): a stream that never finishes meets the call's deadline, a stream cut before
its end is a failed attempt, an answer far past ``max_tokens`` is cut off, and a body that
is no stream is named for what it is (docs/design.md#summarizers)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fake_anthropic
import fake_openai
import pytest

from memoryd.errors import SummarizerError
from memoryd.llm import limits
from memoryd.llm.anthropic import AnthropicBackend
from memoryd.llm.completion import Completion, CompletionBackend
from memoryd.llm.openai_compat import OpenAICompatBackend
from memoryd.summary.prompts import narrative_prompt, render_transcript

MAX_TOKENS = 256


@dataclass
class Side:
    """One backend and its fake server: ``reply`` is the fake's Reply class."""

    name: str
    server: Any
    reply: Any
    make: Callable[..., CompletionBackend]

    @property
    def requests(self) -> int:
        return len([r for r in self.server.requests if "count_tokens" not in r.path])


@pytest.fixture(autouse=True)
def _fresh_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "_learned", {})


@pytest.fixture(params=["anthropic", "openai"])
def side(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Side]:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    made: list[CompletionBackend] = []
    settings: dict[str, Any] = {
        "timeout": 1.0,
        "max_retries": 2,
        "default_headers": {},
        "deadline": 10.0,
        "backoff_base": 0.01,
    }
    if request.param == "anthropic":
        server: Any = fake_anthropic.FakeAnthropic().start()

        def make(**overrides: Any) -> CompletionBackend:
            backend = AnthropicBackend(
                **{
                    "api_key": "sk-ant-test",
                    "base_url": server.base_url,
                    "model": "claude-haiku-4-5",
                    **settings,
                    **overrides,
                }
            )
            made.append(backend)
            return backend

        reply: Any = fake_anthropic.Reply
    else:
        server = fake_openai.FakeOpenAI().start()

        def make(**overrides: Any) -> CompletionBackend:
            backend = OpenAICompatBackend(
                **{
                    "api_key": None,
                    "base_url": server.base_url,
                    "model": "local-model",
                    **settings,
                    **overrides,
                }
            )
            made.append(backend)
            return backend

        reply = fake_openai.Reply
    try:
        yield Side(request.param, server, reply, make)
    finally:
        for backend in made:
            backend.close()
        server.stop()


def ask(backend: CompletionBackend) -> Completion:
    system, user = narrative_prompt(
        render_transcript([{"role": "user", "content": "they chose plan B"}]), None, MAX_TOKENS
    )
    return backend.complete(system, user, MAX_TOKENS)


def fails(backend: CompletionBackend) -> str:
    with pytest.raises(SummarizerError) as caught:
        ask(backend)
    return str(caught.value)


def test_a_stream_that_trickles_forever_ends_at_the_calls_deadline(side: Side) -> None:
    """One event every 0.2 s keeps each read within the 1 s timeout: only the deadline,
    checked while the stream is read, ends the call."""
    side.server.set_default(side.reply.trickle(0.2))
    backend = side.make(deadline=2.0, max_retries=1)
    outcome: list[str] = []
    started = time.monotonic()
    worker = threading.Thread(target=lambda: outcome.append(fails(backend)), daemon=True)
    worker.start()
    worker.join(60)

    assert not worker.is_alive(), "the call outlived its deadline by a minute"
    assert "still arriving at the 2 s deadline" in outcome[0]
    assert time.monotonic() - started < 30
    assert side.requests == 1  # the deadline is spent: no retry


def test_a_stream_cut_before_its_end_is_a_failed_attempt_never_a_summary(side: Side) -> None:
    side.server.set_default(side.reply.cut("- partial summary that stops"))

    reason = fails(side.make(max_retries=1))

    assert "cut off" in reason and "after 2 attempts" in reason
    assert side.requests == 2


def test_a_cut_stream_is_retried_and_the_whole_answer_taken(side: Side) -> None:
    side.server.push(side.reply.cut("- partial"), side.reply.ok("- the whole summary"))

    assert ask(side.make()).text == "- the whole summary"


def test_an_answer_far_past_max_tokens_is_cut_off_and_retried_once(side: Side) -> None:
    side.server.set_default(side.reply.runaway(8_000_000))

    reason = fails(side.make(max_retries=3))

    assert "runaway answer" in reason and "max_tokens 256" in reason
    assert side.requests == 2  # a bad answer is retried once, not max_retries times


def test_an_answer_cut_at_max_tokens_is_no_summary(side: Side) -> None:
    cut = (
        side.reply.ok("- a summary cut at", stop_reason="max_tokens")
        if side.name == "anthropic"
        else side.reply.length("- a summary cut at")
    )
    side.server.push(cut, side.reply.ok("- a summary that ends."))

    assert ask(side.make()).text == "- a summary that ends."
    assert side.requests == 2


def test_a_200_that_is_not_json_is_named_not_called_empty(side: Side) -> None:
    side.server.set_default(side.reply.malformed())

    reason = fails(side.make(max_retries=0))

    assert "empty answer" not in reason
    assert "bytes of application/json that is not JSON, instead of a stream" in reason


def test_a_plain_json_answer_to_a_stream_request_is_named(side: Side) -> None:
    side.server.set_default(side.reply.plain("- a summary"))
    expected = "message" if side.name == "anthropic" else "chat.completion"

    reason = fails(side.make(max_retries=0))

    assert f"a plain {expected} (JSON, " in reason and "instead of a stream" in reason
