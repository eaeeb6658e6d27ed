"""The checkpoint strategy: past ``compact_at``, every message folds into checkpoint.json.

The head message carries the checkpoint as text and as data; ``checkpoint.json`` keeps the
latest one beside the conversation (docs/design.md#strategies).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from collections.abc import Sequence

import structlog
from pydantic import ValidationError

from memoryd import strict_json
from memoryd.boundaries import (
    MessageLike,
    SplitPlan,
    head_summary_count,
    plan_for,
    running_tool_call,
)
from memoryd.clock import iso_ms
from memoryd.compaction.strategies.head import (
    billed_on_failure,
    billed_usage,
    message_span,
    previous_count,
    summarized_span,
    summary_message,
    transcript_messages,
)
from memoryd.compaction.strategies.protocol import Head, HeadRequest, Strategy
from memoryd.conversation.lines import Line
from memoryd.errors import MemorydError
from memoryd.files.fsutil import atomic_write
from memoryd.files.regular import read_file
from memoryd.summary.backends import Summarizer, make_summarizer
from memoryd.summary.checkpoint import (
    CHECKPOINT_PREFIX,
    Checkpoint,
    CheckpointStats,
    CompactionInfo,
    as_items,
    as_lists,
    render_checkpoint,
    render_lists,
)
from memoryd.summary.chunking import compact_to_checkpoint
from memoryd.summary.items import HeadItem
from memoryd.summary.reconcile import no_summary_note, or_offline, reconcile_lists
from memoryd.summary.retention import Beside, extract_details
from memoryd.tokens import estimate_text_tokens
from memoryd.workspace import Workspace

log = structlog.get_logger()

LISTS_SHARE = 0.95
"""Of ``summarizer.max_summary_tokens``, the room of the lists the offline builder fills;
the details kept verbatim get what the lists leave, and never less than the rest
(docs/design.md#checkpoint)."""


def load_checkpoint(workspace: Workspace, head: Line | None = None) -> Checkpoint | None:
    """The latest checkpoint: ``checkpoint.json``, or the copy in the head message if newer.

    The head copy wins after a crash between the conversation's commit and the write of
    checkpoint.json. An unreadable or invalid checkpoint.json counts as none (logged).
    """
    stored: Checkpoint | None = None
    try:
        stored = Checkpoint.model_validate(strict_json.loads(read_file(workspace.checkpoint)))
    except FileNotFoundError:
        pass
    except (OSError, MemorydError, ValueError) as exc:  # ValidationError is a ValueError
        log.warning(
            "checkpoint_unreadable", workspace=str(workspace.path), error=type(exc).__name__
        )
    embedded = head.message.get("checkpoint") if head is not None and head.message else None
    if isinstance(embedded, dict):
        try:
            copy = Checkpoint.model_validate(embedded)
        except ValidationError:
            copy = None
        if copy is not None and (stored is None or copy.version > stored.version):
            return copy
    return stored


def save_checkpoint(workspace: Workspace, checkpoint: Checkpoint) -> None:
    """Write checkpoint.json atomically."""
    data = json.dumps(checkpoint.model_dump(mode="json"), indent=2, ensure_ascii=False)
    atomic_write(workspace.checkpoint, data.encode() + b"\n", root=workspace.path)


def checkpoint_split(messages: Sequence[MessageLike]) -> SplitPlan | None:
    """Every message since the last checkpoint (pure); None when there is none.

    A running tool call (its result not appended yet) and what follows it stay verbatim:
    the result the agent appends next must find its call (docs/design.md#boundaries).
    """
    running = running_tool_call(messages)
    keep_from = len(messages) if running is None else running
    if keep_from - head_summary_count(messages) < 1:
        return None
    return plan_for(messages, keep_from)


def _embeds_checkpoint(line: Line) -> bool:
    """True for a head message that carries a structured checkpoint (this strategy's)."""
    return line.message is not None and isinstance(line.message.get("checkpoint"), dict)


class CheckpointStrategy(Strategy):
    """Due above ``[checkpoint] compact_at``; compacts every message, keeps none verbatim."""

    name = "checkpoint"

    @property
    def trigger(self) -> float:
        return self.settings.checkpoint.compact_at

    def split(self, lines: Sequence[MessageLike]) -> SplitPlan | str:
        plan = checkpoint_split(lines)
        return plan if plan is not None else "no messages to compact since the last checkpoint"

    def produce_head(self, request: HeadRequest) -> Head:
        """Fold the prefix into the previous checkpoint's lists; the head carries the result."""
        prefix, plan = request.prefix, request.plan
        previous = load_checkpoint(request.workspace, prefix[0] if prefix else None)
        earlier = as_items(previous) if previous is not None else None
        to_compact = prefix[1:] if plan.folds_previous_summary else prefix
        messages = transcript_messages(to_compact)
        folded_count = 0
        if plan.folds_previous_summary and not _embeds_checkpoint(prefix[0]):
            # A summary left by another strategy carries no checkpoint: fold its text in
            # with the messages instead of dropping it (and count the messages it stood for).
            messages = transcript_messages(prefix[:1]) + messages
            folded_count = previous_count(prefix[0])
        summarizer = make_summarizer(request.settings, request.env, request.deadline)
        request.progress(
            f"checkpointing {len(messages)} messages with the {summarizer.name} backend"
        )
        budget = request.settings.summarizer.max_summary_tokens
        compact = functools.partial(
            compact_to_checkpoint,
            previous=earlier,
            messages=messages,
            max_input_tokens=request.settings.summarizer.max_input_tokens,
            budget=int(budget * LISTS_SHARE),
        )
        offline_summarizer = Summarizer()
        with contextlib.closing(summarizer), billed_on_failure(summarizer):

            def offline() -> tuple[list[HeadItem], int]:
                lists, _ = compact(offline_summarizer)
                return lists, summarizer.requests

            (lists, calls), no_summary = or_offline(
                summarizer, lambda: compact(summarizer), offline
            )
            checker = summarizer if no_summary is None else offline_summarizer
            # Every item of the previous checkpoint: its details must survive this one too.
            before = None
            if previous is not None:
                before = "\n".join([*(x.text for x in as_items(previous)), *previous.details])
            details = extract_details(messages, before)
            lists, kept_verbatim, retention = reconcile_lists(
                lists,
                details,
                Beside(transcript_messages(request.kept), details),
                request.settings.summarizer.min_retention,
                # The details kept verbatim get what the lists leave of the cap, and never
                # less than the share the lists do not take.
                lambda lists: max(
                    budget - estimate_text_tokens(render_lists(lists)),
                    budget - int(budget * LISTS_SHARE),
                ),
                checker,
            )
        now = time.time()
        timestamps = [
            t
            for t in (
                line.message.get("timestamp") if line.message else None for line in to_compact
            )
            if isinstance(t, int)
        ]
        stats = previous.stats if previous is not None else CheckpointStats()
        first_id, last_id = message_span(to_compact)
        checkpoint = Checkpoint(
            version=(previous.version if previous is not None else 0) + 1,
            updated_at=iso_ms(now),
            **as_lists(lists).model_dump(),
            compaction_info=CompactionInfo(
                messages_compacted=len(to_compact),
                oldest_message_timestamp=min(timestamps, default=None),
                newest_message_timestamp=max(timestamps, default=None),
                compacted_at=iso_ms(now),
                archive=request.archive,
                first_id=first_id,
                last_id=last_id,
            ),
            stats=CheckpointStats(
                total_compactions=stats.total_compactions + 1,
                total_messages=stats.total_messages + len(to_compact) + folded_count,
            ),
            details=kept_verbatim,
        )
        text = render_checkpoint(checkpoint)
        message = summary_message(
            text,
            checkpoint.stats.total_messages,
            summarized_span(prefix, plan.folds_previous_summary),
            request.archive,
            int(now * 1000),
        )
        message["content"] = CHECKPOINT_PREFIX + text
        message["isCheckpoint"] = True
        message["checkpoint"] = checkpoint.model_dump(mode="json")
        return Head(
            message,
            summarizer.name,
            calls,
            "; ".join(
                part
                for part in (
                    f"compacted {plan.summarized_count} messages into checkpoint "
                    f"v{checkpoint.version}",
                    no_summary_note(no_summary) if no_summary is not None else None,
                )
                if part
            ),
            checkpoint=checkpoint,
            usage=billed_usage(summarizer),
            model=summarizer.model,
            retention=retention,
        )

    def save(self, workspace: Workspace, head: Head) -> None:
        """Write checkpoint.json; the head message already holds the same checkpoint."""
        if head.checkpoint is not None:
            save_checkpoint(workspace, head.checkpoint)
