"""What every LLM backend shares: the answer it gives, the protocol it follows, the retry
loop under a per-call deadline, and the context overflow a server can report
(docs/design.md#summarizers).

Each backend (:mod:`~memoryd.llm.anthropic`,
:mod:`~memoryd.llm.openai_compat`) turns one attempt into a :class:`Completion`
or a :class:`Failure`; :func:`complete_with_retries` decides what follows. Failures carry
short reasons only (status and error type, "timed out after N s", "empty answer"…): never
a key, never prompt or answer text.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from memoryd.errors import NoSummaryAnswer, SummarizerError

log = structlog.get_logger()

BAD_ANSWER_RETRIES = 1
"""An answer that is empty or malformed is retried at most once: it costs tokens even when
useless, and a server that sends junk twice in a row is likely to go on."""
BACKOFF_MAX = 30.0
NO_SUMMARY = ": no summary"
"""How the reason of an answer that is no summary ends."""
ANSWER_BOUND_FACTOR = 4
"""An answer is read up to this many times its ``max_tokens`` (at 4 characters a token,
the estimate's rate) before it is cut off as runaway: a server that ignores ``max_tokens``
must not cost unbounded memory and CPU."""
ANSWER_BOUND_FLOOR = 16_384
"""The bound never goes below this many characters: a small ``max_tokens`` still allows
a verbose tokenizer."""
STREAM_BYTES_PER_CHAR = 64
"""The bytes of a stream read per character of the answer's bound: each event wraps a
few characters of text in JSON of a hundred bytes or more."""


@dataclass(frozen=True)
class Completion:
    """A usable answer: its text (stripped, never empty) and what the API reported."""

    text: str
    input_tokens: int | None
    output_tokens: int | None
    model: str
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0


@dataclass(frozen=True)
class Failure:
    """One failed attempt: why (safe to show), whether to retry, what the server asked."""

    reason: str
    retryable: bool
    status: int | None = None
    retry_after: float | None = None
    bad_answer: bool = False
    no_summary: bool = False
    """The model answered, but its answer is no summary (cut at ``max_tokens``, empty,
    a refusal): when the last attempt fails so, the job may fall back to the offline
    summary (:class:`~memoryd.errors.NoSummaryAnswer`)."""


@dataclass(frozen=True)
class Prompt:
    """What one :meth:`CompletionBackend.complete` call asks: the system prompt, the
    user message in parts, the turns that follow it and whether to mark it for a cache."""

    system: str
    parts: list[str]
    follow_up: tuple[str, ...]
    cache: bool

    def turns(self) -> list[dict[str, str]]:
        """The turns after the user message, as either API takes them: assistant, user…"""
        roles = ("assistant", "user")
        return [{"role": roles[i % 2], "content": text} for i, text in enumerate(self.follow_up)]


REFUSAL = Failure("refusal (the model declined to summarize)", retryable=False, no_summary=True)
EMPTY_ANSWER = Failure("empty answer", retryable=True, bad_answer=True, no_summary=True)


def cut_at_max_tokens(max_tokens: int) -> Failure:
    """An answer that ended at its ``max_tokens`` budget: no summary, retried once."""
    return Failure(
        f"the answer was cut at max_tokens ({max_tokens:,}): no summary",
        retryable=True,
        bad_answer=True,
        no_summary=True,
    )


class ContextOverflow(SummarizerError):
    """The request does not fit the server's context: the caller must send less.

    ``limit`` is the context (prompt and answer, in tokens) the backend now believes the
    server has; it has already lowered its own belief, so a caller that re-chunks to
    :meth:`CompletionBackend.input_room` sends something smaller next time.
    """

    def __init__(self, reason: str, limit: int) -> None:
        super().__init__(reason)
        self.limit = limit


class CompletionBackend(ABC):
    """One LLM API behind the prompts: a completion per call, retried under ``deadline``.

    Every backend is one (:class:`~memoryd.llm.client.ProcessLocalClient`); it answers
    :meth:`complete` in :meth:`_complete`, with the prompt's parts as a list.
    """

    name: str
    model: str
    requests: int
    """Requests sent so far (each attempt, the failed ones too)."""

    def context_note(self) -> str | None:
        """The server's context as learned, with its source; None when none was learned."""
        return None

    def complete(
        self,
        system: str,
        user: str | Sequence[str],
        max_tokens: int,
        *,
        follow_up: Sequence[str] = (),
        cache: bool = False,
    ) -> Completion:
        """One system + user prompt (``user`` in parts) answered; ``follow_up`` continues
        with alternating assistant and user turns; ``cache`` marks the prompt for a prompt
        cache where the API has one. Raises SummarizerError (ContextOverflow when the
        request does not fit) when no usable answer arrives within the retries and the
        deadline."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, not {max_tokens!r}")
        parts = [user] if isinstance(user, str) else list(user)
        return self._complete(Prompt(system, parts, tuple(follow_up), cache), max_tokens)

    @abstractmethod
    def _complete(self, prompt: Prompt, max_tokens: int) -> Completion:
        """:meth:`complete`, its arguments checked."""

    def input_room(self, max_input_tokens: int, answer_tokens: int) -> int:
        """Estimated tokens of prompt one request may hold for an answer of
        ``answer_tokens``: at most ``max_input_tokens``, less when the server's context
        is known to be smaller."""
        return max_input_tokens

    @abstractmethod
    def close(self) -> None:
        """Close the SDK client's connections, if this process opened any."""


class AnswerGuard:
    """The bounds on reading one answer: the call's deadline, checked at every event of a
    stream (a server that trickles events forever must not outlive it), and the size of
    the answer, checked as it grows."""

    def __init__(self, ends_at: float, deadline: float, max_tokens: int) -> None:
        self.ends_at = ends_at
        self.deadline = deadline
        self.max_tokens = max_tokens
        self.max_chars = max(ANSWER_BOUND_FLOOR, max_tokens * 4 * ANSWER_BOUND_FACTOR)
        self.max_bytes = self.max_chars * STREAM_BYTES_PER_CHAR
        self.chars = 0
        self.bytes = 0

    def check_bytes(self, added_bytes: int) -> Failure | None:
        """As :meth:`check`, for bytes of the stream read (whatever they carry)."""
        self.bytes += added_bytes
        if self.bytes > self.max_bytes:
            return self._runaway(f"{self.max_bytes:,} bytes streamed")
        return self.check()

    def check(self, added_chars: int = 0) -> Failure | None:
        """None while reading may go on; else the failure that ends the attempt."""
        self.chars += added_chars
        if self.chars > self.max_chars:
            return self._runaway(f"{self.max_chars:,} characters")
        if time.monotonic() > self.ends_at:
            return Failure(
                f"the answer was still arriving at the {seconds(self.deadline)} s deadline",
                retryable=False,
            )
        return None

    def _runaway(self, past: str) -> Failure:
        return Failure(
            f"runaway answer: more than {past} for max_tokens {self.max_tokens:,}, reading stopped",
            retryable=True,
            bad_answer=True,
        )


def backoff_wait(
    attempt: int, retry_after: float | None, backoff_base: float, rng: random.Random
) -> float:
    """Seconds before the next try: what the server asked, else exponential with jitter."""
    if retry_after is not None:
        return max(0.0, retry_after)
    backoff = min(backoff_base * 2.0**attempt, BACKOFF_MAX)
    return backoff * rng.uniform(0.5, 1.0)


def complete_with_retries(
    attempt: Callable[[float, float], Completion | Failure],
    *,
    label: str,
    timeout: float,
    max_retries: int,
    deadline: float,
    wait_before_retry: Callable[[int, float | None], float],
) -> Completion:
    """Call ``attempt(request_timeout, ends_at)`` until it gives a Completion, within the
    rules; ``ends_at`` is the ``time.monotonic()`` of the deadline, for an attempt reading
    a stream to stop at (:class:`AnswerGuard`).

    Retried up to ``max_retries`` times when the failure is retryable (a bad answer at
    most :data:`BAD_ANSWER_RETRIES` times); each request's timeout is ``min(timeout,
    time left)``; a wait that would end past ``deadline`` fails at once instead of
    sleeping. Raises SummarizerError naming ``label`` and the last reason
    (NoSummaryAnswer when the last attempt's answer was no summary).
    """
    started = time.monotonic()
    bad_answers = 0
    for tried in range(max_retries + 1):
        left = deadline - (time.monotonic() - started)
        if left <= 0:
            raise SummarizerError(f"{label}: no answer within the {seconds(deadline)} s deadline")
        outcome = attempt(min(timeout, left), started + deadline)
        if isinstance(outcome, Completion):
            return outcome
        if outcome.bad_answer:
            bad_answers += 1
        retries_left = tried < max_retries and (
            not outcome.bad_answer or bad_answers <= BAD_ANSWER_RETRIES
        )
        if not outcome.retryable or not retries_left:
            reason = f"{label}: {outcome.reason} (after {attempts(tried + 1)})"
            if outcome.no_summary:
                what = outcome.reason.removesuffix(NO_SUMMARY)
                raise NoSummaryAnswer(reason, f"{what}, {attempts(tried + 1)}")
            raise SummarizerError(reason)
        wait = wait_before_retry(tried, outcome.retry_after)
        left = deadline - (time.monotonic() - started)
        if wait >= left:
            raise SummarizerError(
                f"{label}: {outcome.reason}; the next try in {seconds(wait)} s would "
                f"pass the {seconds(deadline)} s deadline (after {attempts(tried + 1)})"
            )
        log.warning(
            "llm_retry",
            attempt=tried + 1,
            status=outcome.status,
            reason=outcome.reason,
            wait_s=round(wait, 3),
        )
        time.sleep(wait)
    raise AssertionError("unreachable: the last attempt always returns or raises")


def seconds(value: float) -> str:
    return f"{round(value, 2):g}"


def attempts(count: int) -> str:
    return "1 attempt" if count == 1 else f"{count} attempts"
