"""The OpenAI-compatible backend: ``POST {base_url}/chat/completions`` on vLLM, llama.cpp's
``llama-server``, Ollama's ``/v1`` or LM Studio, through the official ``openai`` SDK
(docs/design.md#openai-compatible).

The same retry loop as the Anthropic backend
(:func:`~memoryd.summarizers.completion.complete_with_retries`; the SDK's own retries are
off): 408, 409, 429 and 5xx (llama.cpp's 503 while the model loads) are retried with
backoff, ``retry-after`` honoured; an empty answer or a stream error is retried once; a
refusal (``refusal`` text, or ``finish_reason: content_filter``) is not.

Answers are streamed (``stream_options.include_usage`` for the token counts): a slow
local model keeps the connection alive token by token, so ``timeout`` bounds each wait
rather than the whole answer, and an overflow LM Studio reports mid-stream is read like
any other. A context overflow (:mod:`~memoryd.summarizers.overflow`) is never retried
as it was: the backend lowers the context it believes in, records it
(:mod:`~memoryd.summarizers.limits`) and raises
:class:`~memoryd.summarizers.completion.ContextOverflow`, for the caller to re-chunk. It
never sends a request larger than the context it believes in (``context_window``, or what
it learned): the guard against Ollama, which truncates a prompt silently; an answer
whose ``prompt_tokens`` is far below what was sent is taken for such a cut, and learned
from like an overflow.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import openai

from memoryd.errors import ConfigError
from memoryd.summarizers import limits
from memoryd.summarizers.completion import (
    Completion,
    ContextOverflow,
    Failure,
    backoff_wait,
    complete_with_retries,
    seconds,
    token_count,
)
from memoryd.summarizers.local_client import ProcessLocalClient, check_call_limits
from memoryd.summarizers.overflow import Overflow, find_overflow, limit_after_overflow
from memoryd.summarizers.retries import is_retryable_status, parse_retry_after
from memoryd.summarizers.tls import tls_context
from memoryd.tokens import estimate_text_tokens

LABEL = "OpenAI-compatible server"
PLACEHOLDER_KEY = "EMPTY"
"""Sent when no key is configured: the SDK refuses to run without one, and local servers
accept any (``EMPTY`` is vLLM's own example)."""
FIT_SHARE = 0.9
"""Share of the room left in a known context that a request's estimated prompt may take:
the estimate (characters / 4) is not the server's tokenizer."""
MESSAGE_OVERHEAD = 8
"""Tokens a chat template adds around each message (role markers), roughly."""
TRUNCATED_SHARE = 0.5
"""A server that counts fewer than this share of the estimated prompt tokens cut it."""
TRUNCATION_MIN = 2_048
"""Smaller prompts are not checked for a cut: the estimate is too rough there."""
_TURNS = ("assistant", "user")
_THINKING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


class OpenAICompatBackend(ProcessLocalClient[openai.OpenAI]):
    """Streamed chat completions with our retries under a per-call deadline.

    A :class:`~memoryd.summarizers.completion.CompletionBackend`. Built from plain
    values, so it can be made (or unpickled) inside a worker process; the SDK client is
    created on first use in the process that uses it. ``context_window`` (0: unknown) is
    the server's context as configured; a smaller one learned in this process wins.
    """

    def __init__(
        self,
        api_key: str | None,
        base_url: str,
        model: str,
        timeout: float,
        max_retries: int,
        default_headers: Mapping[str, str],
        deadline: float,
        context_window: int = 0,
        backoff_base: float = 1.0,
    ) -> None:
        if not base_url:
            raise ConfigError('openai.base_url: required when summarizer.backend = "openai"')
        if not model:
            raise ConfigError('openai.model: required when summarizer.backend = "openai"')
        check_call_limits("openai", timeout, max_retries, deadline, backoff_base)
        self.name = "openai"
        self._api_key = api_key or PLACEHOLDER_KEY
        self.base_url = base_url
        self.model = model
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self._default_headers = dict(default_headers)
        self.deadline = float(deadline)
        self.backoff_base = float(backoff_base)
        self.key = limits.server_key(base_url, model)
        self._window = context_window if context_window > 0 else None
        self._start_process_local()

    def __repr__(self) -> str:
        return (
            f"OpenAICompatBackend(model={self.model!r}, base_url={self.base_url!r}, "
            f"timeout={self.timeout}, max_retries={self.max_retries}, deadline={self.deadline})"
        )

    @property
    def context_limit(self) -> int | None:
        """The context (prompt and answer, estimated tokens) believed in; None: unknown."""
        learned = limits.learned_limit(self.key)
        known = [limit for limit in (self._window, learned) if limit is not None]
        return min(known) if known else None

    def input_room(self, max_input_tokens: int, answer_tokens: int) -> int:
        """At most ``max_input_tokens``; within a known context, :data:`FIT_SHARE` of
        what the answer leaves of it."""
        limit = self.context_limit
        if limit is None:
            return max_input_tokens
        return max(0, min(max_input_tokens, int((limit - answer_tokens) * FIT_SHARE)))

    def complete(
        self,
        system: str,
        user: str | Sequence[str],
        max_tokens: int,
        *,
        follow_up: Sequence[str] = (),
        cache: bool = False,
    ) -> Completion:
        """The answer to one prompt (see CompletionBackend); ``cache`` is ignored (no
        prompt cache here). Raises ContextOverflow, unsent, when the prompt does not fit
        the context believed in, or when the server says so."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, not {max_tokens!r}")
        parts = [user] if isinstance(user, str) else list(user)
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": "".join(parts)},
            *({"role": _TURNS[i % 2], "content": text} for i, text in enumerate(follow_up)),
        ]
        prompt = sum(estimate_text_tokens(m["content"]) + MESSAGE_OVERHEAD for m in messages)
        limit = self.context_limit
        if limit is not None and prompt + max_tokens > limit:
            raise ContextOverflow(
                f"{LABEL}: a request of ~{prompt:,} tokens plus {max_tokens:,} for the answer "
                f"does not fit the server's context of ~{limit:,} tokens",
                limit,
            )
        return complete_with_retries(
            lambda request_timeout: self._attempt(messages, prompt, max_tokens, request_timeout),
            label=LABEL,
            timeout=self.timeout,
            max_retries=self.max_retries,
            deadline=self.deadline,
            wait_before_retry=self._wait_before_retry,
        )

    def _attempt(
        self, messages: list[dict[str, str]], prompt: int, max_tokens: int, request_timeout: float
    ) -> Completion | Failure:
        try:
            # Plain dicts are what the SDK sends; its TypedDicts are the same shape.
            stream = self._sdk_client().chat.completions.create(  # type: ignore[call-overload]
                model=self.model,
                messages=messages,
                max_tokens=max_tokens,
                stream=True,
                stream_options={"include_usage": True},
                timeout=request_timeout,
            )
            outcome = _read_stream(stream, self.model)
        except openai.APITimeoutError:
            return Failure(f"timed out after {seconds(request_timeout)} s", retryable=True)
        except openai.APIConnectionError as error:
            cause = type(error.__cause__).__name__ if error.__cause__ else "unknown"
            return Failure(f"connection error ({cause})", retryable=True)
        except openai.APIResponseValidationError:
            return Failure("malformed answer (not a chat completion)", True, bad_answer=True)
        except openai.APIStatusError as error:
            self._raise_if_overflow(error, prompt, max_tokens)
            return _status_failure(error)
        except openai.APIError as error:  # an error event inside a stream that began 200
            self._raise_if_overflow(error, prompt, max_tokens)
            return Failure(f"stream error ({_error_type(error)})", True, bad_answer=True)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return Failure("malformed answer (not JSON)", retryable=True, bad_answer=True)
        if isinstance(outcome, Completion):
            self._raise_if_truncated(outcome.input_tokens, prompt)
        return outcome

    def _raise_if_truncated(self, counted: int | None, prompt: int) -> None:
        """An answer to a cut prompt is no summary of it: Ollama cuts a prompt longer than
        its context silently, and says so only by counting far fewer tokens than sent."""
        if counted is None or prompt < TRUNCATION_MIN or counted >= prompt * TRUNCATED_SHARE:
            return
        limits.learn({self.key: counted})
        raise ContextOverflow(
            f"{LABEL}: the server read ~{counted:,} of the ~{prompt:,} prompt tokens sent: it "
            "cut the prompt to its context (Ollama does; raise OLLAMA_CONTEXT_LENGTH and set "
            "openai.context_window)",
            self.context_limit or counted,
        )

    def _raise_if_overflow(self, error: openai.APIError, prompt: int, max_tokens: int) -> None:
        if isinstance(error, openai.APIStatusError) and error.status_code not in (400, 413, 422):
            return
        overflow = find_overflow(error.body, error.message)
        if overflow is None:
            return
        limit = limit_after_overflow(overflow, prompt, max_tokens)
        limits.learn({self.key: limit})
        raise ContextOverflow(_overflow_reason(overflow, limit), self.context_limit or limit)

    def _sdk_client(self) -> openai.OpenAI:
        return self._client_for_this_process(
            lambda: openai.OpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,
                default_headers=self._default_headers,
                http_client=openai.DefaultHttpxClient(timeout=self.timeout, verify=tls_context()),
            )
        )

    def _wait_before_retry(self, attempt: int, retry_after: float | None) -> float:
        return backoff_wait(attempt, retry_after, self.backoff_base, self._random)


def _read_stream(stream: Any, requested_model: str) -> Completion | Failure:
    """The text, usage and finish of a streamed answer, or why it is no summary."""
    texts: list[str] = []
    refusal = False
    finish: str | None = None
    usage: object = None
    model: object = None
    with stream:
        for chunk in stream:
            model = getattr(chunk, "model", None) or model
            usage = getattr(chunk, "usage", None) or usage
            for choice in getattr(chunk, "choices", None) or ():
                delta = getattr(choice, "delta", None)
                content = getattr(delta, "content", None)
                if isinstance(content, str):
                    texts.append(content)
                refusal = refusal or bool(getattr(delta, "refusal", None))
                finish = getattr(choice, "finish_reason", None) or finish
    if refusal or finish == "content_filter":
        return Failure("refusal (the model declined to summarize)", retryable=False)
    text = _THINKING.sub("", "".join(texts)).strip()
    if not text:
        return Failure("empty answer", retryable=True, bad_answer=True)
    return Completion(
        text=text,
        input_tokens=token_count(usage, "prompt_tokens"),
        output_tokens=token_count(usage, "completion_tokens"),
        model=model if isinstance(model, str) and model else requested_model,
    )


def _status_failure(error: openai.APIStatusError) -> Failure:
    status = error.status_code
    headers = error.response.headers
    return Failure(
        f"HTTP {status} {_error_type(error)}",
        retryable=is_retryable_status(status, headers.get("x-should-retry")),
        status=status,
        retry_after=parse_retry_after(headers, time.time()),
    )


def _error_type(error: openai.APIError) -> str:
    """The error's type as the server named it (a short identifier), never its message."""
    kind = error.type if isinstance(error.type, str) else None
    if kind and re.fullmatch(r"[A-Za-z_][\w.-]{0,63}", kind):
        return kind
    return "error"


def _overflow_reason(overflow: Overflow, limit: int) -> str:
    said = f" of {overflow.limit:,} tokens" if overflow.limit else ""
    return (
        f"{LABEL}: the request overflowed the server's context{said}; "
        f"now sending at most ~{limit:,} tokens"
    )
