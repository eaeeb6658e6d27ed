"""The summary message: its format, and the head the narrative and rolling strategies write.

The format is described in docs/design.md#summary-message.
"""

from __future__ import annotations

import contextlib
import functools
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import structlog

from memoryd.compaction.strategies.protocol import Head, HeadRequest
from memoryd.conversation.lines import Line
from memoryd.errors import SummarizerError
from memoryd.summary.backends import Summarizer, Summary, make_summarizer
from memoryd.summary.chunking import summarize_messages
from memoryd.summary.extractive import extractive_summary
from memoryd.summary.reconcile import carried_text, or_offline, reconcile
from memoryd.summary.retention import Beside, extract_details
from memoryd.tokens import LLMUsage, estimate_text_tokens
from memoryd.transcript.messages import read_messages, task_phrase

log = structlog.get_logger()

SUMMARY_PREFIX = "[Summary of earlier conversation]\n\n"
Style = Literal["narrative", "rolling"]
Span = tuple[str | None, str | None]
"""The ids of the first and last message a summary stands for."""


def summary_message(
    text: str, summarized_count: int, span: Span, archive: str, now_ms: int
) -> dict[str, Any]:
    """The summary message that replaces the summarized prefix (docs/design.md#summary-message).

    ``span`` holds the ids of the first and last message it stands for (``firstId``,
    ``lastId``): with ``archive`` they lead back to the originals.
    """
    return {
        "id": str(uuid.uuid4()),
        "role": "assistant",
        "content": SUMMARY_PREFIX + text,
        "timestamp": now_ms,
        "isSummary": True,
        "summarizedCount": summarized_count,
        "firstId": span[0],
        "lastId": span[1],
        "archive": archive,
    }


def _message_id(line: Line) -> str | None:
    value = line.message.get("id") if line.message else None
    return value if isinstance(value, str) else None


def message_span(lines: Sequence[Line]) -> Span:
    """The ids of the first and last of ``lines`` that have one (pure)."""
    ids = [i for i in map(_message_id, lines) if i is not None]
    return (ids[0], ids[-1]) if ids else (None, None)


def summarized_span(prefix: Sequence[Line], folds_previous: bool) -> Span:
    """The span a new head stands for: the prefix, plus a folded summary's own span (pure).

    A rolling summary that folds an earlier one keeps the earlier ``firstId``, so the span
    covers every round; a summary written before source links existed starts the span
    after it.
    """
    first, last = message_span(prefix[1:] if folds_previous else prefix)
    if folds_previous and prefix[0].message is not None:
        earlier = prefix[0].message
        if isinstance(earlier.get("firstId"), str):
            first = earlier["firstId"]
        if last is None and isinstance(earlier.get("lastId"), str):
            last = earlier["lastId"]
    return first, last


def previous_summary_text(line: Line) -> str | None:
    """The text of a summary message at the head, without its fixed prefix."""
    if not line.is_summary or line.message is None:
        return None
    content = line.message.get("content")
    if not isinstance(content, str):
        return None
    return content.removeprefix(SUMMARY_PREFIX)


def previous_count(line: Line) -> int:
    """How many messages a summary at the head stands for (0 when it does not say)."""
    count = line.message.get("summarizedCount") if line.message else None
    return count if isinstance(count, int) else 0


def transcript_messages(lines: Sequence[Line]) -> list[Mapping[str, Any]]:
    """The messages to summarize; unreadable lines are named, not dropped silently."""
    messages: list[Mapping[str, Any]] = []
    for line in lines:
        if line.message is not None:
            messages.append(line.message)
        else:
            messages.append(
                {
                    "role": "user",
                    "content": f"[line {line.index + 1}: {line.length} bytes, {line.problem}; "
                    "kept byte for byte in the archive]",
                }
            )
    return messages


def pinned_task(prefix: Sequence[Line], kept: Sequence[Line]) -> str | None:
    """``Task: …`` for a task message that is pinned, or None (pure).

    The task is the conversation's first message, a user turn; when it is pinned, the
    summary never sees it, so it is given this line as the summary so far, to state the
    task too (docs/design.md#summarizers).
    """
    first = next((line for line in kept if line.message is not None), None)
    if first is None or first.message is None or (prefix and first.index > prefix[0].index):
        return None
    [view] = read_messages([first.message])
    phrase = task_phrase(view.text) if view.genuine else None
    return f"Task: {phrase}" if phrase else None


def summary_head(request: HeadRequest, style: Style) -> Head:
    """One summary message for the prefix, folding in a previous summary at its head."""
    settings, prefix, plan = request.settings, request.prefix, request.plan
    previous = previous_summary_text(prefix[0]) if plan.folds_previous_summary else None
    to_summarize = prefix[1:] if previous is not None else prefix
    folded = previous if previous is not None else pinned_task(prefix, request.kept)
    summarizer = make_summarizer(settings, request.env, request.deadline)
    request.progress(
        f"summarizing {plan.summarized_count} messages with the {summarizer.name} backend"
    )
    messages = transcript_messages(to_summarize)
    budget = settings.summarizer.max_summary_tokens
    offline = functools.partial(extractive_summary, messages, folded, budget, style)
    with contextlib.closing(summarizer), billed_on_failure(summarizer):
        summary, no_summary = or_offline(
            summarizer,
            lambda: summarize_messages(
                summarizer, messages, folded, budget, settings.summarizer.max_input_tokens, style
            ),
            lambda: Summary(offline(), summarizer.name, calls=summarizer.requests),
        )
        if not summary.text.strip():
            raise SummarizerError("the summarizer returned an empty summary")
        request.progress("checking that the summary kept the details")
        # Routine items of the previous head may give way (docs/design.md#summary-items):
        # only what must survive it is a detail to keep.
        details = extract_details(messages, carried_text(folded, style))
        reconciled = reconcile(
            summary.text,
            details,
            Beside(transcript_messages(request.kept), details),
            budget,
            settings.summarizer.min_retention,
            summarizer=summarizer if no_summary is None else None,
            offline=offline if summarizer.backend is not None and no_summary is None else None,
            previous=folded,
            style=style,
            no_summary=no_summary,
        )
    text, floor = reconciled.text, reconciled.floor
    count = plan.summarized_count + (previous_count(prefix[0]) if previous is not None else 0)
    message = summary_message(
        text,
        count,
        summarized_span(prefix, plan.folds_previous_summary),
        request.archive,
        int(time.time() * 1000),
    )
    # The summary's own text, as max_summary_tokens bounds it: not the fixed header.
    tokens = estimate_text_tokens(text)
    result = f"replaced {plan.summarized_count} messages with a {tokens:,}-token summary"
    notes = [floor.note if floor else None, summarizer.context_note()]
    return Head(
        message,
        summary.backend,
        summary.calls,
        "; ".join([result, *(note for note in notes if note)]),
        summary.input_tokens,
        summary.estimated_input_tokens,
        usage=billed_usage(summarizer),
        model=summarizer.model,
        retention=reconciled.retention,
    )


@contextlib.contextmanager
def billed_on_failure(summarizer: Summarizer) -> Iterator[None]:
    """A SummarizerError leaving this block carries what the LLM calls cost so far, with
    every request sent counted as a call (the failed ones cost time, and often tokens),
    and what was learned of the server's context."""
    try:
        yield
    except SummarizerError as exc:
        note = summarizer.context_note()
        error = SummarizerError(f"{exc}; {note}") if note and note not in str(exc) else exc
        error.usage = billed_usage(summarizer)
        error.model = summarizer.model
        if error is exc:
            raise
        raise error from None


def billed_usage(summarizer: Summarizer) -> LLMUsage:
    """What the LLM calls cost, with every request sent counted as a call (a failed one,
    an answer cut at max_tokens, costs time and often tokens)."""
    usage = summarizer.usage
    return LLMUsage(
        max(usage.calls, summarizer.requests),
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_creation_tokens,
    )
