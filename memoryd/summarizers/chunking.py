"""Summarizing more than one request holds: consecutive chunks within the input budget,
their summaries merged (narrative, rolling), or folded one into the next (checkpoint).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from memoryd.checkpoint import Checkpoint, CheckpointSummary
from memoryd.summarizers import prompts
from memoryd.summarizers.base import PROMPT_RESERVE, Summarizer, Summary
from memoryd.tokens import estimate_message_tokens

log = structlog.get_logger()


def chunk_messages(
    messages: Sequence[Mapping[str, Any]], max_tokens: int
) -> list[list[Mapping[str, Any]]]:
    """Consecutive chunks whose estimated size stays within ``max_tokens`` (pure).

    A single message larger than the budget is cut into text pieces of its rendering,
    each a chunk of its own, so that nothing is left out.
    """
    chunks: list[list[Mapping[str, Any]]] = []
    current: list[Mapping[str, Any]] = []
    used = 0
    for message in messages:
        size = estimate_message_tokens(message)
        if size > max_tokens:
            if current:
                chunks.append(current)
                current, used = [], 0
            chunks.extend([piece] for piece in _cut_message(message, max_tokens))
            continue
        if current and used + size > max_tokens:
            chunks.append(current)
            current, used = [], 0
        current.append(message)
        used += size
    if current:
        chunks.append(current)
    return chunks


def _cut_message(message: Mapping[str, Any], max_tokens: int) -> list[Mapping[str, Any]]:
    text = prompts.render_transcript([{**message, "role": message.get("role", "message")}])
    width = max(1, (max_tokens - 8) * 4)
    pieces = [text[i : i + width] for i in range(0, len(text), width)]
    total = len(pieces)
    return [
        {"role": message.get("role", "user"), "content": f"(part {n} of {total}) {piece}"}
        for n, piece in enumerate(pieces, start=1)
    ]


def summarize_messages(
    summarizer: Summarizer,
    messages: Sequence[Mapping[str, Any]],
    previous: str | None,
    budget: int,
    max_input_tokens: int,
    style: str,
) -> Summary:
    """Summarize ``messages`` into one summary, chunking what exceeds the input budget.

    The chunk summaries are merged (in groups, as often as needed) with ``previous``
    folded in. Raises :class:`~memoryd.errors.SummarizerError` when the backend fails.
    """
    room = max(256, max_input_tokens - PROMPT_RESERVE - budget)
    chunks = chunk_messages(messages, room)
    if len(chunks) <= 1:
        return summarizer.summarize(messages, previous, budget, style)
    log.info("summarize_chunked", chunks=len(chunks), backend=summarizer.name)
    parts = [summarizer.summarize(chunk, None, budget, style, final=False) for chunk in chunks]
    calls = len(parts)
    texts = [p.text for p in parts]
    per_merge = max(2, room // max(1, budget + 64))
    while len(texts) > per_merge:
        grouped = [texts[i : i + per_merge] for i in range(0, len(texts), per_merge)]
        texts = [
            summarizer.merge(group, None, budget, style, final=False).text for group in grouped
        ]
        calls += len(grouped)
    merged = summarizer.merge(texts, previous, budget, style)
    return Summary(merged.text, summarizer.name, calls=calls + 1)


def compact_to_checkpoint(
    summarizer: Summarizer,
    previous: CheckpointSummary | Checkpoint | None,
    messages: Sequence[Mapping[str, Any]],
    max_input_tokens: int,
    budget: int,
) -> tuple[CheckpointSummary, int]:
    """Fold ``messages`` into ``previous`` chunk by chunk; returns the lists and the calls.

    Each chunk fits the summarizer's input budget; its result is the previous checkpoint
    of the next chunk, so nothing is left out; ``budget`` is the room of the lists
    (:meth:`Summarizer.checkpoint`). Raises SummarizerError (or its subclass
    CheckpointParseError for a malformed answer).
    """
    current = previous.summary if isinstance(previous, Checkpoint) else previous
    chunks = chunk_messages(messages, max(256, max_input_tokens - PROMPT_RESERVE * 2)) or [[]]
    for chunk in chunks:
        current = summarizer.checkpoint(current, chunk, budget)
    assert current is not None
    return current, len(chunks)
