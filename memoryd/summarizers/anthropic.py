"""The Anthropic Messages API backend: one completion, retried within a deadline.

The SDK's own retries are switched off (``max_retries=0``) because they honour
``retry-after`` without a cap and know nothing of our per-call deadline. Our loop:

- Retried, up to ``max_retries`` times: HTTP 408, 409, 429, 5xx (529 included),
  connection errors and timeouts. A server's ``x-should-retry: true|false`` overrides
  the status code, as in the SDK.
- Retried at most once (an answer costs tokens even when it is useless, and a server
  that sends junk twice in a row is likely to go on): an empty answer (no text, or only
  whitespace) and a malformed answer (a body that is not JSON or not a Message).
- Never retried: other 4xx (400, 401, 403, 404, 413…), ``stop_reason == "refusal"``
  and any stop reason other than ``end_turn``, ``max_tokens`` or ``stop_sequence``; the
  same request would get the same answer.
- Waits: ``retry-after-ms`` / ``retry-after`` (seconds or an HTTP date) when the server
  sends one, else exponential backoff from ``backoff_base`` with jitter. A wait that
  would end past the deadline fails the call at once instead of sleeping.
- Each request's timeout is ``min(timeout, time left before the deadline)``. It bounds
  every network wait (connect, each read, each write) rather than the whole transfer,
  so a server that trickles bytes can overrun the deadline by up to one such timeout.

Every failure is a :class:`~memoryd.errors.SummarizerError` whose message is a short
reason (status and error type, "timed out after N s", "empty answer", "refusal",
"malformed answer"…): never the API key, never prompt or answer text. The SDK's
exception is not chained, because its text embeds the response body.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anthropic
from anthropic.types import Message

from memoryd.errors import ConfigError
from memoryd.summarizers.completion import Completion as Completion
from memoryd.summarizers.completion import (
    Failure,
    backoff_wait,
    complete_with_retries,
    seconds,
    token_count,
)
from memoryd.summarizers.local_client import ProcessLocalClient, check_call_limits
from memoryd.summarizers.retries import is_retryable_status, parse_retry_after
from memoryd.summarizers.tls import tls_context

ACCEPTED_STOP_REASONS = frozenset({"end_turn", "max_tokens", "stop_sequence"})


class AnthropicBackend(ProcessLocalClient[anthropic.Anthropic]):
    """Completions through the official SDK, with our own retries under a per-call deadline.

    A :class:`~memoryd.summarizers.completion.CompletionBackend`.

    Built from plain values, so it can be made (or unpickled) inside a worker process; the
    SDK client is created on first use in the process that uses it. ``deadline`` bounds a
    whole :meth:`complete` call, retries and waits included. An empty ``base_url`` means
    the SDK's choice (``ANTHROPIC_BASE_URL``, else the public API).
    """

    def __init__(
        self,
        api_key: str,
        base_url: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        default_headers: Mapping[str, str],
        deadline: float,
        backoff_base: float = 1.0,
    ) -> None:
        if not api_key:
            raise ConfigError("anthropic: no API key given")
        if not model:
            raise ConfigError("anthropic.model: must not be empty")
        check_call_limits("anthropic", timeout, max_retries, deadline, backoff_base)
        self.name = "anthropic"
        self._api_key = api_key
        self._base_url = base_url or None
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._default_headers = dict(default_headers)
        self.deadline = float(deadline)
        self.backoff_base = float(backoff_base)
        self._start_process_local()

    def __repr__(self) -> str:
        return (
            f"AnthropicBackend(model={self.model!r}, base_url={self._base_url!r}, "
            f"timeout={self.timeout}, max_retries={self.max_retries}, deadline={self.deadline})"
        )

    def __enter__(self) -> AnthropicBackend:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete(
        self,
        system: str,
        user: str | Sequence[str],
        max_tokens: int,
        *,
        follow_up: Sequence[str] = (),
        cache: bool = False,
    ) -> Completion:
        """Send one system + user prompt and return the answer, retrying transient failures.

        ``user`` may come in parts (text blocks of one message); ``follow_up`` continues
        the conversation with alternating assistant and user turns. With ``cache``, the
        system prompt, the first part and the whole first user message are marked with
        ``cache_control``, so that a request repeating them (a follow-up) reads them from
        the cache (docs/design.md#prompt-caching). Raises :class:`SummarizerError` with a
        short reason when no usable answer arrives within ``max_retries`` retries and
        ``deadline`` seconds.
        """
        request = _request(system, user, follow_up, cache)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, not {max_tokens!r}")
        return complete_with_retries(
            lambda request_timeout: self._attempt(request, max_tokens, request_timeout),
            label="Anthropic API",
            timeout=self.timeout,
            max_retries=self.max_retries,
            deadline=self.deadline,
            wait_before_retry=self._wait_before_retry,
        )

    def input_room(self, max_input_tokens: int, answer_tokens: int) -> int:
        """``max_input_tokens``: the API's context is far larger than what memoryd sends."""
        return max_input_tokens

    def _attempt(
        self, request: _Request, max_tokens: int, request_timeout: float
    ) -> Completion | Failure:
        try:
            message: object = self._sdk_client().messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=request.system,  # type: ignore[arg-type]
                messages=request.messages,  # type: ignore[arg-type]
                timeout=request_timeout,
            )
        except anthropic.APITimeoutError:
            return Failure(f"timed out after {seconds(request_timeout)} s", retryable=True)
        except anthropic.APIConnectionError as error:
            cause = type(error.__cause__).__name__ if error.__cause__ else "unknown"
            return Failure(f"connection error ({cause})", retryable=True)
        except anthropic.APIStatusError as error:
            return _status_failure(error)
        except anthropic.APIResponseValidationError:
            return Failure("malformed answer (not a Message)", retryable=True, bad_answer=True)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return Failure("malformed answer (not JSON)", retryable=True, bad_answer=True)
        return _read_message(message, self.model)

    def _sdk_client(self) -> anthropic.Anthropic:
        return self._client_for_this_process(
            lambda: anthropic.Anthropic(
                api_key=self._api_key,
                base_url=self._base_url,
                timeout=self.timeout,
                max_retries=0,
                default_headers=self._default_headers,
                # Tracing could export prompt text; memoryd never lets it leave.
                open_telemetry=False,
                http_client=anthropic.DefaultHttpxClient(
                    timeout=self.timeout, verify=tls_context()
                ),
            )
        )

    def _wait_before_retry(self, attempt: int, retry_after: float | None) -> float:
        return backoff_wait(attempt, retry_after, self.backoff_base, self._random)


@dataclass(frozen=True)
class _Request:
    """The ``system`` and ``messages`` arguments of one request, as the API takes them."""

    system: str | list[dict[str, Any]]
    messages: list[dict[str, Any]]


_EPHEMERAL = {"type": "ephemeral"}


def _request(
    system: str, user: str | Sequence[str], follow_up: Sequence[str], cache: bool
) -> _Request:
    parts = [user] if isinstance(user, str) else list(user)
    if not cache:
        content: str | list[dict[str, Any]] = "".join(parts)
        first: dict[str, Any] = {"role": "user", "content": content}
        messages = [first, *_turns(follow_up)]
        return _Request(system, messages)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": part} for part in parts if part]
    # Breakpoints: the first part (a folded previous summary) and the end of the message.
    if len(blocks) > 1:
        blocks[0]["cache_control"] = _EPHEMERAL
    if blocks:
        blocks[-1]["cache_control"] = _EPHEMERAL
    system_blocks = [{"type": "text", "text": system, "cache_control": _EPHEMERAL}]
    return _Request(system_blocks, [{"role": "user", "content": blocks}, *_turns(follow_up)])


def _turns(follow_up: Sequence[str]) -> list[dict[str, Any]]:
    roles = ("assistant", "user")
    return [{"role": roles[i % 2], "content": text} for i, text in enumerate(follow_up)]


def _status_failure(error: anthropic.APIStatusError) -> Failure:
    status = error.status_code
    headers = error.response.headers
    error_type = error.type if isinstance(error.type, str) else "error"
    return Failure(
        f"HTTP {status} {error_type}",
        retryable=is_retryable_status(status, headers.get("x-should-retry")),
        status=status,
        retry_after=parse_retry_after(headers, time.time()),
    )


def _read_message(message: object, requested_model: str) -> Completion | Failure:
    if not isinstance(message, Message) or message.type != "message":
        return Failure("malformed answer (not a Message)", retryable=True, bad_answer=True)
    content: object = message.content
    if not isinstance(content, list):
        return Failure("malformed answer (content is not a list)", retryable=True, bad_answer=True)
    stop_reason = message.stop_reason
    if stop_reason == "refusal":
        return Failure("refusal (the model declined to summarize)", retryable=False)
    if stop_reason not in ACCEPTED_STOP_REASONS:
        return Failure(f"unexpected stop_reason {stop_reason!r}", retryable=False)
    texts = [
        block.text
        for block in content
        if getattr(block, "type", None) == "text" and isinstance(getattr(block, "text", None), str)
    ]
    text = "\n".join(texts).strip()
    if not text:
        return Failure("empty answer", retryable=True, bad_answer=True)
    usage: object = message.usage
    return Completion(
        text=text,
        input_tokens=token_count(usage, "input_tokens"),
        output_tokens=token_count(usage, "output_tokens"),
        model=message.model if isinstance(message.model, str) else requested_model,
        cache_read_tokens=token_count(usage, "cache_read_input_tokens") or 0,
        cache_creation_tokens=token_count(usage, "cache_creation_input_tokens") or 0,
    )
