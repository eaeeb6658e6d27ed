"""The OpenAI-compatible backend: ``POST {base_url}/chat/completions`` on vLLM, llama.cpp's
``llama-server``, Ollama's ``/v1`` or LM Studio, through the official ``openai`` SDK
(docs/design.md#openai-compatible).

The same retry loop as the Anthropic backend
(:func:`~memoryd.llm.completion.complete_with_retries`; the SDK's own retries are
off): 408, 409, 429 and 5xx (llama.cpp's 503 while the model loads) are retried with
backoff, ``retry-after`` honoured, and so is an error event the server names its own
(a 5xx code or ``server_error``); an empty, malformed or runaway answer, or another error
event, is retried once; a refusal (``refusal`` text, or ``finish_reason:
content_filter``) is not.

Answers are streamed (``stream_options.include_usage`` for the token counts) and read by
:mod:`~memoryd.llm.sse` within the call's deadline and a bound on the answer's
size; a stream that ends without a finish reason was cut off (a failed attempt, never a
summary), and so was one that finished with ``length``. A context overflow
(:mod:`~memoryd.llm.overflow`) teaches a context only when it proves one: the
server names its size (llama.cpp's ``n_ctx``, vLLM's "maximum context length is N"), or,
with no ``context_window`` configured, it is an overflow without a number (then half of
what was sent). A 5xx or ``server_error`` is never an overflow, and a numberless overflow
while a window is configured (llama.cpp's full shared cache under concurrent requests) is
retried like any transient failure, and the server is then sent one request at a time for
a while (:mod:`~memoryd.llm.crowding`). A learned context is never below
``context_window`` unless the server named a smaller one, expires
(:mod:`~memoryd.llm.limits`), and is recorded with its source. The backend never
sends a request larger than the context it believes in; a server that counts far fewer
prompt tokens than were sent (Ollama cuts a prompt longer than its context silently) has
its answer refused: nothing is summarized from a cut input. The first such count, with no
window configured, is learned as the context; any other fails the job, saying what the
server read.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import Any

import openai
import structlog

from memoryd.errors import ConfigError, SummarizerError
from memoryd.llm import crowding, limits
from memoryd.llm.client import ProcessLocalClient, SdkErrors, StatusError
from memoryd.llm.completion import (
    EMPTY_ANSWER,
    REFUSAL,
    AnswerGuard,
    Completion,
    ContextOverflow,
    Failure,
    Prompt,
    cut_at_max_tokens,
)
from memoryd.llm.openai_stream import Streamed, read_stream
from memoryd.llm.overflow import Overflow, find_overflow, limit_after_overflow
from memoryd.llm.tls import tls_context
from memoryd.tokens import estimate_text_tokens

log = structlog.get_logger()

LABEL = "OpenAI-compatible server"
PLACEHOLDER_KEY = "EMPTY"
"""Sent when no key is configured: the SDK refuses to run without one, and local servers
accept any (``EMPTY`` is vLLM's own example)."""
FIT_SHARE = 0.95
"""Share of the room left in a known context that a request's estimated prompt may take:
the estimate (characters / 4) is not the server's tokenizer. A context learned from an
overflow is already scaled to how the server counted."""
MESSAGE_OVERHEAD = 8
"""Tokens a chat template adds around each message (role markers), roughly."""
TRUNCATED_SHARE = 0.5
"""A server that counts fewer than this share of the estimated prompt tokens cut it."""
TRUNCATION_MIN = 2_048
"""Smaller prompts are not checked for a cut: the estimate is too rough there."""
_SHORT_NAME = re.compile(r"[A-Za-z_][\w.-]{0,63}")
_THINKING = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


class OpenAICompatBackend(ProcessLocalClient[openai.OpenAI]):
    """Streamed chat completions with our retries under a per-call deadline.

    Its settings are :class:`~memoryd.llm.client.ProcessLocalClient`'s, and
    ``context_window`` (0: unknown), the server's context as configured; a smaller one
    learned in this process wins.
    """

    name = "openai"
    label = LABEL
    sdk_errors = SdkErrors(openai.APITimeoutError, openai.APIConnectionError, openai.APIStatusError)

    def __init__(
        self,
        api_key: str | None,
        base_url: str | None,
        model: str,
        timeout: float,
        max_retries: int,
        default_headers: Mapping[str, str],
        deadline: float,
        backoff_base: float = 1.0,
        context_window: int = 0,
    ) -> None:
        super().__init__(
            api_key, base_url, model, timeout, max_retries, default_headers, deadline, backoff_base
        )
        self.key = limits.server_key(self._server, self.model)
        self._window = context_window if context_window > 0 else None

    def _endpoint(self, api_key: str | None, base_url: str | None) -> tuple[str, str | None]:
        if not base_url:
            raise ConfigError('openai.base_url: required when summarizer.backend = "openai"')
        self._server = base_url.rstrip("/")
        return api_key or PLACEHOLDER_KEY, base_url

    @property
    def context_limit(self) -> int | None:
        """The context (prompt and answer, estimated tokens) believed in; None: unknown."""
        learned = limits.learned_limit(self.key)
        if learned is None:
            return self._window
        return learned.tokens if self._window is None else min(self._window, learned.tokens)

    def context_note(self) -> str | None:
        """What this server's context is believed to be and why, when it was learned."""
        learned = limits.learned_limit(self.key)
        return None if learned is None else f"server context {limits.describe(learned)}"

    def input_room(self, max_input_tokens: int, answer_tokens: int) -> int:
        """At most ``max_input_tokens``; within a known context, :data:`FIT_SHARE` of
        what the answer leaves of it."""
        limit = self.context_limit
        if limit is None:
            return max_input_tokens
        return max(0, min(max_input_tokens, int((limit - answer_tokens) * FIT_SHARE)))

    def _complete(self, prompt: Prompt, max_tokens: int) -> Completion:
        """One request, retried; ``prompt.cache`` is ignored (no prompt cache here). Raises
        ContextOverflow, unsent, when the prompt does not fit the context believed in, or
        when the server proves it does not."""
        messages = [
            {"role": "system", "content": prompt.system},
            {"role": "user", "content": "".join(prompt.parts)},
            *prompt.turns(),
        ]
        tokens = sum(estimate_text_tokens(m["content"]) + MESSAGE_OVERHEAD for m in messages)
        limit = self.context_limit
        if limit is not None and tokens + max_tokens > limit:
            raise ContextOverflow(
                f"{LABEL}: a request of ~{tokens:,} tokens plus {max_tokens:,} for the answer "
                f"does not fit the server's context of ~{limit:,} tokens",
                limit,
            )
        return self._with_retries(
            lambda request_timeout, ends_at: crowding.attempt_in_turn(
                self._server,
                ends_at,
                self.deadline,
                lambda: self._request(
                    request_timeout,
                    lambda: self._send(messages, tokens, max_tokens, request_timeout, ends_at),
                    lambda error: self._status_overflow(error, tokens, max_tokens),
                ),
            ),
        )

    def _send(
        self,
        messages: list[dict[str, str]],
        prompt: int,
        max_tokens: int,
        request_timeout: float,
        ends_at: float,
    ) -> Completion | Failure:
        guard = AnswerGuard(ends_at, self.deadline, max_tokens)
        # Plain dicts are what the SDK sends; its TypedDicts are the same shape.
        with self._sdk_client().chat.completions.with_streaming_response.create(  # type: ignore[call-overload]
            model=self.model,
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            timeout=request_timeout,
        ) as response:
            answer = read_stream(response.http_response, guard)
        if answer.error is not None:  # an error event inside a stream that began 200
            return self._stream_error(answer.error, prompt, max_tokens)
        return self._judge(answer, prompt, max_tokens)

    def _status_overflow(self, error: StatusError, prompt: int, max_tokens: int) -> Failure | None:
        """An error answer that reports a full context: raises ContextOverflow when it
        proves the request too large; a retried failure when it proves nothing (no size,
        a window configured: the server is then crowded); None for any other error."""
        if error.status_code not in (400, 413, 422) or not self._raise_if_overflow(
            error.body, error.message, prompt, max_tokens
        ):
            return None
        crowding.mark_crowded(self._server)
        return Failure(
            f"HTTP {error.status_code}: the server reported a full context without "
            f"its size, below the configured {self._window:,} (a shared cache?)",
            retryable=True,
            status=error.status_code,
        )

    def _stream_error(self, body: Mapping[str, Any], prompt: int, max_tokens: int) -> Failure:
        """An error event: an overflow when it proves one, else a transient failure.

        A 5xx or ``server_error`` is the server's trouble, not the request's size
        (llama.cpp's "Context size has been exceeded." when the slots' shared cache is
        full): retried, never learned from; one in the words of an overflow makes the
        server crowded (one request at a time, :mod:`~memoryd.llm.crowding`)."""
        inner = body.get("error")
        fields: Mapping[str, Any] = inner if isinstance(inner, Mapping) else body
        code = fields.get("code")
        server_side = fields.get("type") == "server_error" or (
            isinstance(code, int) and not isinstance(code, bool) and code >= 500
        )
        if not server_side:
            self._raise_if_overflow(body, "", prompt, max_tokens)
        elif find_overflow(body, "") is not None:
            crowding.mark_crowded(self._server)
        kind = fields.get("type")
        named = kind if isinstance(kind, str) and _SHORT_NAME.fullmatch(kind) else "error"
        return Failure(f"stream error ({named})", retryable=True, bad_answer=not server_side)

    def _judge(self, answer: Streamed, prompt: int, max_tokens: int) -> Completion | Failure:
        """The streamed answer as a summary, or why it is none."""
        if answer.refusal or answer.finish == "content_filter":
            return REFUSAL
        if answer.finish is None:
            return Failure(
                "the stream ended without a finish reason: the answer was cut off",
                retryable=True,
            )
        if answer.finish == "length":
            return self._length_failure(answer, prompt, max_tokens)
        text = _THINKING.sub("", answer.text).strip()
        if not text:
            return EMPTY_ANSWER
        self._raise_if_truncated(answer.prompt_tokens, prompt)
        return Completion(
            text=text,
            input_tokens=answer.prompt_tokens,
            output_tokens=answer.completion_tokens,
            model=answer.model or self.model,
        )

    def _length_failure(self, answer: Streamed, prompt: int, max_tokens: int) -> Failure:
        """``finish_reason: "length"``: never a summary. Cut before ``max_tokens``, the
        context ended it: with no window configured that teaches the room left for the
        answer (raises ContextOverflow); with one, a shared cache ran full (retried)."""
        counted, written = answer.prompt_tokens, answer.completion_tokens
        if counted is None or written is None or written >= max_tokens:
            return cut_at_max_tokens(max_tokens)
        if self._window is not None:
            crowding.mark_crowded(self._server)
            return Failure(
                f"the answer was cut by the server's context after {written:,} tokens "
                f"(its cache full under other requests?): no summary",
                retryable=True,
            )
        overflow = Overflow(limit=counted + written, prompt_tokens=counted)
        limit = limit_after_overflow(overflow, prompt, max_tokens)
        source = f"an answer cut by the context after {counted + written:,} server tokens"
        self._learn(limit, source)
        raise ContextOverflow(
            f"{LABEL}: the answer was cut by the server's context of ~{counted + written:,} "
            f"tokens; now sending at most ~{limit:,} tokens",
            self.context_limit or limit,
        )

    def _raise_if_truncated(self, counted: int | None, prompt: int) -> None:
        """An answer to a cut prompt is no summary of it: Ollama cuts a prompt longer than
        its context silently, and says so only by counting far fewer tokens than sent.

        With no window configured and nothing learned yet, the count is taken for the
        server's context (raises ContextOverflow: the caller re-chunks); otherwise the
        server miscounts or its context is smaller than configured, and the job fails,
        saying so (the configured window stays)."""
        if counted is None or prompt < TRUNCATION_MIN or counted >= prompt * TRUNCATED_SHARE:
            return
        log.warning("llm_prompt_cut", server=self.key, counted=counted, sent=prompt)
        said = f"the server read {counted:,} of ~{prompt:,} tokens"
        if self._window is None and limits.learned_limit(self.key) is None:
            self._learn(counted, f"{said} (a silent cut)")
            raise ContextOverflow(f"{LABEL}: {said}: it cut the prompt to its context", counted)
        raise SummarizerError(
            f"{LABEL}: {said}: raise its context, e.g. OLLAMA_CONTEXT_LENGTH (and set "
            "openai.context_window to it)"
        )

    def _raise_if_overflow(self, body: object, message: str, prompt: int, max_tokens: int) -> bool:
        """Raise ContextOverflow when the error proves the request too large: a limit the
        server names, or, with no window configured, an overflow without a number.
        True for an overflow that proves nothing (no number, a window configured)."""
        overflow = find_overflow(body, message)
        if overflow is None:
            return False
        if overflow.limit is None and self._window is not None:
            return True
        limit = limit_after_overflow(overflow, prompt, max_tokens)
        if overflow.limit is not None:
            source = f"the server's overflow reply named {overflow.limit:,} tokens"
        else:
            source = "an overflow without a number: half of what was sent"
        self._learn(limit, source)
        raise ContextOverflow(_overflow_reason(overflow, limit), self.context_limit or limit)

    def _learn(self, tokens: int, source: str) -> None:
        limits.learn({self.key: limits.LearnedLimit(tokens, source, time.time())})
        log.info("context_limit_learned", server=self.key, context_tokens=tokens, source=source)

    def _new_client(self, settings: dict[str, Any]) -> openai.OpenAI:
        return openai.OpenAI(
            **settings,
            http_client=openai.DefaultHttpxClient(timeout=self.timeout, verify=tls_context()),
        )


def _overflow_reason(overflow: Overflow, limit: int) -> str:
    said = f" of {overflow.limit:,} tokens" if overflow.limit else ""
    return (
        f"{LABEL}: the request overflowed the server's context{said}; "
        f"now sending at most ~{limit:,} tokens"
    )
