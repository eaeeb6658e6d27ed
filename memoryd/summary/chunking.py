"""Summarizing more than one request holds: consecutive chunks within the input budget,
their summaries merged (narrative, rolling), or folded one into the next (checkpoint).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import structlog

from memoryd.errors import SummarizerError
from memoryd.llm.completion import ContextOverflow
from memoryd.summary import prompts
from memoryd.summary.backends import CHECKPOINT_MAX_TOKENS, PROMPTS, Summarizer, Summary
from memoryd.summary.checkpoint_prompt import build_compaction_prompt
from memoryd.summary.items import HeadItem
from memoryd.tokens import estimate_message_tokens, estimate_text_tokens

log = structlog.get_logger()
T = TypeVar("T")

MIN_CHUNK_TOKENS = 256
"""The smallest chunk: below it a summary request is mostly instructions."""
MERGE_PART_OVERHEAD = 16
"""Tokens a merge request adds around each part (its tags)."""
INSTRUCTION_MARGIN = 64
"""Tokens kept free beside the measured instructions (the transcript's tags, ids)."""


def chunk_messages(
    messages: Sequence[Mapping[str, Any]], max_tokens: int
) -> list[list[Mapping[str, Any]]]:
    """Consecutive chunks whose estimated size stays within ``max_tokens`` (pure).

    A single message larger than the budget is cut into text pieces of its rendering,
    each a chunk of its own, so that nothing is left out.
    """
    sized: list[tuple[Mapping[str, Any], int]] = []
    for message in messages:
        size = estimate_message_tokens(message)
        if size > max_tokens:
            # Counted as larger than a chunk: each piece stands alone.
            sized.extend((piece, max_tokens + 1) for piece in _cut_message(message, max_tokens))
        else:
            sized.append((message, size))
    return _consecutive(sized, max_tokens, 1)


def _consecutive(sized: Iterable[tuple[T, int]], room: int, least: int) -> list[list[T]]:
    """The items in consecutive groups of at most ``room`` (by their sizes), a group
    closed early only once it holds ``least`` (pure)."""
    groups: list[list[T]] = []
    current: list[T] = []
    used = 0
    for item, size in sized:
        if len(current) >= least and used + size > room:
            groups.append(current)
            current, used = [], 0
        current.append(item)
        used += size
    if current:
        groups.append(current)
    return groups


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

    Each chunk fills the room a request has: the backend's room for an answer of
    ``budget`` tokens less the instructions (measured, with a small margin); the whole
    input goes in one request when it fits beside ``previous``. The chunk summaries are
    merged (in groups, as often as needed) with ``previous`` folded in. A request the
    server refuses as too large for its context (ContextOverflow) makes the rest
    re-chunked to the smaller room the backend now believes in; the summaries already
    made stay. Raises :class:`~memoryd.errors.SummarizerError` when the backend fails.
    """
    instructions = instruction_tokens(style, budget)
    room = _room(summarizer, max_input_tokens, budget, instructions)
    folded = estimate_text_tokens(previous) if previous else 0
    if len(chunk_messages(messages, max(MIN_CHUNK_TOKENS, room - folded))) <= 1:
        try:
            return summarizer.summarize(messages, previous, budget, style)
        except ContextOverflow:
            room = _smaller(summarizer, max_input_tokens, budget, instructions, room)
    chunks = chunk_messages(messages, room)
    log.info("summarize_chunked", chunks=len(chunks), backend=summarizer.name, room=room)
    texts: list[str] = []

    def summarize(chunk: list[Mapping[str, Any]]) -> None:
        texts.append(summarizer.summarize(chunk, None, budget, style, final=False).text)

    def smaller(room: int) -> int:
        return _smaller(summarizer, max_input_tokens, budget, instructions, room)

    calls, room = _each_chunk(chunks, room, summarize, smaller)
    while True:
        try:
            groups = merge_groups(texts, room - folded)
            while len(groups) > 1:
                merged = [
                    summarizer.merge(group, None, budget, style, final=False).text
                    if len(group) > 1
                    else group[0]
                    for group in groups
                ]
                calls += sum(1 for group in groups if len(group) > 1)
                texts = merged
                groups = merge_groups(texts, room - folded)
            merged_all = summarizer.merge(texts, previous, budget, style)
        except ContextOverflow:
            room = _smaller(summarizer, max_input_tokens, budget, instructions, room)
            continue
        return Summary(merged_all.text, summarizer.name, calls=calls + 1)


def _each_chunk(
    chunks: list[list[Mapping[str, Any]]],
    room: int,
    call: Callable[[list[Mapping[str, Any]]], None],
    smaller: Callable[[int], int],
) -> tuple[int, int]:
    """``call`` on each chunk in turn; the calls made and the room at the end.

    A request the server refuses as too large for its context (ContextOverflow) makes
    what is left re-chunked to ``smaller(room)`` (a SummarizerError when it cannot
    shrink); the chunks already done stay done.
    """
    pending = deque(chunks)
    calls = 0
    while pending:
        chunk = pending.popleft()
        try:
            call(chunk)
        except ContextOverflow:
            room = smaller(room)
            rest = [message for part in (chunk, *pending) for message in part]
            # Only an empty chunk (a checkpoint of no message) leaves nothing to re-chunk.
            pending = deque(chunk_messages(rest, room) or [[]])
            continue
        calls += 1
    return calls, room


def merge_groups(texts: Sequence[str], room: int) -> list[list[str]]:
    """Consecutive groups of chunk summaries, each filling up to ``room`` estimated
    tokens (pure). Every group but the last holds at least two, so that merging the
    groups always leaves fewer texts."""
    return _consecutive(
        ((t, estimate_text_tokens(t) + MERGE_PART_OVERHEAD) for t in texts), room, 2
    )


def instruction_tokens(style: str, budget: int) -> int:
    """Estimated tokens of a request's instructions (the larger of a summary's and a
    merge's), plus :data:`INSTRUCTION_MARGIN`: what a chunk leaves of the room."""
    summary = PROMPTS[style]("", None, budget)
    merge = prompts.merge_prompt([""], None, budget, style)
    return INSTRUCTION_MARGIN + max(
        sum(estimate_text_tokens(text) for text in pair) for pair in (summary, merge)
    )


def _room(summarizer: Summarizer, max_input_tokens: int, answer: int, reserve: int) -> int:
    """Estimated tokens of messages one request may carry: the backend's room for an
    answer of ``answer`` tokens, less ``reserve`` (the instructions, a folded summary)."""
    room = summarizer.input_room(max_input_tokens, answer) - reserve
    return max(MIN_CHUNK_TOKENS, room)


def _smaller(
    summarizer: Summarizer, max_input_tokens: int, answer: int, reserve: int, room: int
) -> int:
    """The room after a ContextOverflow; SummarizerError when it did not shrink (the
    server's context cannot hold even the smallest request)."""
    smaller = _room(summarizer, max_input_tokens, answer, reserve)
    if smaller >= room:
        raise SummarizerError(
            f"the {summarizer.name} server's context is too small for a request with a "
            f"{answer:,}-token answer: raise its context, or lower "
            "summarizer.max_summary_tokens"
        )
    log.info("summarize_rechunked", backend=summarizer.name, room=smaller)
    return smaller


def compact_to_checkpoint(
    summarizer: Summarizer,
    previous: Sequence[HeadItem] | None,
    messages: Sequence[Mapping[str, Any]],
    max_input_tokens: int,
    budget: int,
) -> tuple[list[HeadItem], int]:
    """Fold ``messages`` into the ``previous`` checkpoint's items chunk by chunk; returns
    the items and the calls.

    Each chunk fits the summarizer's input budget; its result is the previous checkpoint
    of the next chunk, so nothing is left out; ``budget`` is the room of the lists
    (:meth:`Summarizer.checkpoint`). A ContextOverflow re-chunks what is left. Raises
    SummarizerError (or its subclass CheckpointParseError for a malformed answer).
    """
    current: Sequence[HeadItem] | None = previous
    answer = CHECKPOINT_MAX_TOKENS
    system, user = build_compaction_prompt(None, [])
    reserve = INSTRUCTION_MARGIN + estimate_text_tokens(system) + estimate_text_tokens(user)
    reserve += budget  # the previous checkpoint's lists
    room = _room(summarizer, max_input_tokens, answer, reserve)

    def fold(chunk: list[Mapping[str, Any]]) -> None:
        nonlocal current
        current = summarizer.checkpoint(current, chunk, budget)

    def smaller(room: int) -> int:
        return _smaller(summarizer, max_input_tokens, answer, reserve, room)

    # No message at all is still one call: the previous checkpoint, tidied.
    calls, _ = _each_chunk(chunk_messages(messages, room) or [[]], room, fold, smaller)
    assert current is not None
    return list(current), calls
