"""Context overflows of OpenAI-compatible servers: recognising one in an error, and the
context to believe afterwards (pure; docs/design.md#openai-compatible).

Every server words it its own way: vLLM answers 400 "This model's maximum context length
is N tokens…" (``{"object": "error", …}`` in older releases, ``{"error": {…}}`` in
newer), llama.cpp 400 ``exceed_context_size_error`` with ``n_ctx`` and
``n_prompt_tokens``, LM Studio "…context length of only N tokens…" or "(n_keep: K >=
n_ctx: N)" (in a stream, as an error event after HTTP 200), OpenAI itself
``context_length_exceeded``. Anything else that speaks of a context length counts too,
without a number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

OVERFLOW_TYPES = frozenset({"exceed_context_size_error", "context_length_exceeded"})
_OVERFLOW_WORDS = re.compile(
    r"context[ _](?:length|size|window)|maximum context|n_ctx|context overflow"
    r"|prompt is too long|too many tokens",
    re.IGNORECASE,
)
_LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (\d+)", re.IGNORECASE),
    re.compile(r"\bn_ctx\W{0,4}(\d+)", re.IGNORECASE),
    re.compile(r"context length of only (\d+)", re.IGNORECASE),
    re.compile(r"context (?:size|length|window)\D{0,12}\((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"exceeds? (?:the )?context (?:size|length) (?:of )?(\d+)", re.IGNORECASE),
)
_PROMPT_PATTERNS = (
    re.compile(r"\bn_prompt_tokens\W{0,4}(\d+)", re.IGNORECASE),
    re.compile(r"request \((\d+) tokens\)", re.IGNORECASE),
    re.compile(r"your (?:request|messages?) (?:has|resulted in) (\d+)", re.IGNORECASE),
)
UNDERCOUNT_SHARE = 0.8
"""When the server refused a request that fit its reported context by memoryd's
estimate, the estimate counts short: the next request gets this share of what was sent."""


@dataclass(frozen=True, slots=True)
class Overflow:
    """A context overflow the server reported: its context and its count of the prompt,
    each when it said."""

    limit: int | None = None
    prompt_tokens: int | None = None


def find_overflow(body: object, text: str = "") -> Overflow | None:
    """The overflow an error's ``body`` (the JSON the SDK decoded: a table, or a string)
    or its ``text`` reports; None when it is another error."""
    fields: Mapping[str, object] = {}
    if isinstance(body, Mapping):
        inner = body.get("error")
        fields = inner if isinstance(inner, Mapping) else body
    words = " ".join(
        str(value)
        for value in (body if isinstance(body, str) else None, fields.get("message"), text)
        if value
    )
    kinds = {str(fields.get("type") or ""), str(fields.get("code") or "")}
    if not (kinds & OVERFLOW_TYPES or _OVERFLOW_WORDS.search(words)):
        return None
    limit = _number(fields.get("n_ctx")) or _first(_LIMIT_PATTERNS, words)
    prompt = _number(fields.get("n_prompt_tokens")) or _first(_PROMPT_PATTERNS, words)
    return Overflow(limit, prompt)


def limit_after_overflow(overflow: Overflow, sent_prompt: int, answer_tokens: int) -> int:
    """The context to believe after ``overflow``, in memoryd's estimated tokens.

    ``sent_prompt`` is the estimate of the refused prompt. The server's own context when it
    said it, scaled by how far its count of the prompt exceeded the estimate; without
    a number, half of what was sent. Always below what was sent, so that the next request
    is smaller and learning ends.
    """
    sent = sent_prompt + answer_tokens
    limit = overflow.limit
    if limit is None:
        believed = sent // 2
    elif overflow.prompt_tokens and overflow.prompt_tokens > sent_prompt:
        believed = limit * sent_prompt // overflow.prompt_tokens
    elif limit >= sent:
        believed = int(sent * UNDERCOUNT_SHARE)
    else:
        believed = limit
    return max(1, min(believed, sent - 1))


def _number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return int(found.group(1)) or None
    return None
