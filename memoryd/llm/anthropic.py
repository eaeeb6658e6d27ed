"""The Anthropic Messages API backend: one completion, retried within a deadline.

The SDK's own retries are switched off (``max_retries=0``) because they honour
``retry-after`` without a cap and know nothing of our per-call deadline. Our loop:

- Retried, up to ``max_retries`` times: HTTP 408, 409, 429, 5xx (529 included),
  connection errors and timeouts. A server's ``x-should-retry: true|false`` overrides
  the status code, as in the SDK.
- Retried at most once (an answer costs tokens even when it is useless, and a server
  that sends junk twice in a row is likely to go on): an empty answer (no text, or only
  whitespace), an answer cut at ``max_tokens`` (no summary), a runaway answer (read up to
  a bound well past ``max_tokens``, then cut off), and a malformed answer (an event that
  is not JSON, or a plain JSON body instead of a stream: named by kind and size).
- Retried as a transient failure: a stream that ends without ``message_stop`` and a stop
  reason (the connection dropped mid-answer).
- Never retried: other 4xx (400, 401, 403, 404, 413…), ``stop_reason == "refusal"``
  and any stop reason other than ``end_turn`` or ``stop_sequence``; the same request
  would get the same answer.
- Waits: ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date) when the server
  sends one, else exponential backoff from ``backoff_base`` with jitter. A wait that
  would end past the deadline fails the call at once instead of sleeping.
- Answers are streamed. Each request's timeout is ``min(timeout, time left before the
  deadline)`` and bounds every network wait; the deadline itself is checked at every
  event of the stream, so a server that trickles events cannot outlive it.

Every failure is a :class:`~memoryd.errors.SummarizerError` whose message is a short
reason (status and error type, "timed out after N s", "empty answer", "refusal",
"malformed answer"…): never the API key, never prompt or answer text. The SDK's
exception is not chained, because its text embeds the response body.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anthropic

from memoryd.errors import ConfigError
from memoryd.llm.client import ProcessLocalClient, SdkErrors
from memoryd.llm.completion import (
    EMPTY_ANSWER,
    REFUSAL,
    AnswerGuard,
    Completion,
    Failure,
    Prompt,
    cut_at_max_tokens,
)
from memoryd.llm.sse import json_events, usage_count
from memoryd.llm.tls import tls_context

ACCEPTED_STOP_REASONS = frozenset({"end_turn", "stop_sequence"})
"""``max_tokens`` is not among them: an answer cut at its budget is no summary."""


class AnthropicBackend(ProcessLocalClient[anthropic.Anthropic]):
    """Completions through the official SDK, with our own retries under a per-call deadline.

    Its settings are :class:`~memoryd.llm.client.ProcessLocalClient`'s; the SDK client is
    created on first use in the process that uses it. An empty ``base_url`` means the
    SDK's choice (``ANTHROPIC_BASE_URL``, else the public API).
    """

    name = "anthropic"
    label = "Anthropic API"
    sdk_errors = SdkErrors(
        anthropic.APITimeoutError, anthropic.APIConnectionError, anthropic.APIStatusError
    )

    def _endpoint(self, api_key: str | None, base_url: str | None) -> tuple[str, str | None]:
        if not api_key:
            raise ConfigError("anthropic: no API key given")
        return api_key, base_url

    def _complete(self, prompt: Prompt, max_tokens: int) -> Completion:
        """One request in parts, retried. With ``prompt.cache``, the system prompt, the first
        part and the whole first user message are marked with ``cache_control``, so that a
        request repeating them (a follow-up) reads them from the cache
        (docs/design.md#prompt-caching)."""
        request = _request(prompt)
        return self._with_retries(
            lambda request_timeout, ends_at: self._request(
                request_timeout, lambda: self._send(request, max_tokens, request_timeout, ends_at)
            )
        )

    def _send(
        self, request: _Request, max_tokens: int, request_timeout: float, ends_at: float
    ) -> Completion | Failure:
        guard = AnswerGuard(ends_at, self.deadline, max_tokens)
        with self._sdk_client().messages.with_streaming_response.create(
            model=self.model,
            max_tokens=max_tokens,
            system=request.system,  # type: ignore[arg-type]
            messages=request.messages,  # type: ignore[arg-type]
            stream=True,
            timeout=request_timeout,
        ) as response:
            answer = _read_stream(response.http_response, guard)
        if isinstance(answer, Failure):
            return answer
        return _judge(answer, max_tokens, self.model)

    def _new_client(self, settings: dict[str, Any]) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            **settings,
            # Tracing could export prompt text; memoryd never lets it leave.
            open_telemetry=False,
            http_client=anthropic.DefaultHttpxClient(timeout=self.timeout, verify=tls_context()),
        )


@dataclass(frozen=True)
class _Request:
    """The ``system`` and ``messages`` arguments of one request, as the API takes them."""

    system: str | list[dict[str, Any]]
    messages: list[dict[str, Any]]


_EPHEMERAL = {"type": "ephemeral"}


def _request(prompt: Prompt) -> _Request:
    system, parts = prompt.system, prompt.parts
    if not prompt.cache:
        content: str | list[dict[str, Any]] = "".join(parts)
        first: dict[str, Any] = {"role": "user", "content": content}
        messages = [first, *prompt.turns()]
        return _Request(system, messages)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": part} for part in parts if part]
    # Breakpoints: the first part (a folded previous summary) and the end of the message.
    if len(blocks) > 1:
        blocks[0]["cache_control"] = _EPHEMERAL
    if blocks:
        blocks[-1]["cache_control"] = _EPHEMERAL
    system_blocks = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
    return _Request(system_blocks, [{"role": "user", "content": blocks}, *prompt.turns()])


@dataclass
class _Streamed:
    """What a Messages stream said: its text, stop reason, usage and whether it ended
    (``message_stop``)."""

    texts: list[str] = field(default_factory=list)
    stop_reason: str | None = None
    stopped: bool = False
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


def _read_stream(response: Any, guard: AnswerGuard) -> _Streamed | Failure:
    """The events of a Messages stream folded into one answer, read within ``guard``'s
    bounds (:func:`~memoryd.llm.sse.json_events`: raises StreamStopped past them, or for
    what is no stream of JSON objects); a Failure for an error event."""
    answer = _Streamed()
    for event, data in json_events(response, guard, "message"):
        kind = data.get("type")
        added = 0
        if kind == "error" or event.name == "error":
            error = data.get("error")
            named = error.get("type") if isinstance(error, dict) else None
            named = named if isinstance(named, str) and named.isidentifier() else "error"
            return Failure(f"stream error ({named})", retryable=True)
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = data["message"]
            answer.model = message.get("model") if isinstance(message.get("model"), str) else None
            usage = _table(message.get("usage"))
            answer.input_tokens = usage_count(usage.get("input_tokens"))
            answer.output_tokens = usage_count(usage.get("output_tokens"))
            answer.cache_read_tokens = usage_count(usage.get("cache_read_input_tokens")) or 0
            creation = usage_count(usage.get("cache_creation_input_tokens"))
            answer.cache_creation_tokens = creation or 0
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            delta = data["delta"]
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                answer.texts.append(delta["text"])
                added = len(delta["text"])
        elif kind == "message_delta":
            change = _table(data.get("delta"))
            reason = change.get("stop_reason")
            answer.stop_reason = reason if isinstance(reason, str) else answer.stop_reason
            usage = _table(data.get("usage"))
            answer.output_tokens = usage_count(usage.get("output_tokens")) or answer.output_tokens
        elif kind == "message_stop":
            answer.stopped = True
        stop = guard.check(added)
        if stop is not None:
            return stop
    return answer


def _table(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _judge(answer: _Streamed, max_tokens: int, requested_model: str) -> Completion | Failure:
    """The streamed answer as a summary, or why it is none."""
    stop_reason = answer.stop_reason
    if stop_reason == "refusal":
        return REFUSAL
    if not answer.stopped or stop_reason is None:
        return Failure(
            "the stream ended without message_stop and a stop reason: the answer was cut off",
            retryable=True,
        )
    if stop_reason == "max_tokens":
        return cut_at_max_tokens(max_tokens)
    if stop_reason not in ACCEPTED_STOP_REASONS:
        return Failure(f"unexpected stop_reason {stop_reason!r}", retryable=False)
    text = "".join(answer.texts).strip()
    if not text:
        return EMPTY_ANSWER
    return Completion(
        text=text,
        input_tokens=answer.input_tokens,
        output_tokens=answer.output_tokens,
        model=answer.model or requested_model,
        cache_read_tokens=answer.cache_read_tokens,
        cache_creation_tokens=answer.cache_creation_tokens,
    )
