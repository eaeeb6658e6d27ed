"""What a job leaves behind when it reports: its receipt and, on failure, HEARTBEAT.md and
the ``summarize_failed`` event (docs/design.md#receipts).

Used by :mod:`memoryd.compaction.job.run` and by the daemon for a job whose worker died.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import structlog

from memoryd.config.settings import Settings
from memoryd.conversation.lines import Line
from memoryd.errors import MemorydError, UnsafePathError
from memoryd.published import events
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.receipts.records import MaskedSpan, Receipt, append_receipt, build_receipt
from memoryd.tokens import LLMUsage
from memoryd.workspace import Workspace

log = structlog.get_logger()


def report_failure(
    workspace: Workspace, reason: str, strategy: str | None = None, job: str | None = None
) -> None:
    """A job failed: HEARTBEAT.md says so, and ``summarize_failed`` is emitted (with the
    ``job`` of its receipt when there is one).

    Raises OSError when HEARTBEAT.md cannot be written.
    """
    HeartbeatManager(workspace).fail_task(reason)
    details: dict[str, Any] = {"strategy": strategy} if strategy is not None else {}
    if job is not None:
        details["job"] = job
    events.emit(workspace, "summarize_failed", reason=reason, **details)


def record_receipt(workspace: Workspace, receipt: Receipt) -> None:
    """Append a job's receipt; a receipt that cannot be written (a full disk, a symlink
    in its place) is logged and does not change the job's outcome."""
    try:
        append_receipt(workspace, receipt)
    except (OSError, UnsafePathError) as exc:
        error = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        log.warning(
            "receipt_unwritable", workspace=str(workspace.path), job=receipt.job, error=error
        )


def report_lost_job(
    workspace: Workspace,
    reason: str,
    settings: Settings,
    messages: int,
    tokens: int,
    trigger: str = "manual",
) -> Receipt:
    """A job that never reported back (its worker died): a failed receipt, then the usual
    failure report. The start time is unknown: the receipt says when it was lost.

    Raises OSError when HEARTBEAT.md cannot be written.
    """
    now = time.time()
    receipt = build_receipt(
        job=str(uuid.uuid4()),
        strategy=settings.strategy,
        started=now,
        finished=now,
        outcome="failed",
        reason=reason,
        before=(messages, tokens),
        after=(messages, tokens),
        prices=settings.prices,
        trigger=trigger,
    )
    record_receipt(workspace, receipt)
    report_failure(workspace, reason, settings.strategy, receipt.job)
    return receipt


@dataclass(frozen=True, slots=True)
class JobClock:
    """A job's id and when it started (epoch seconds), for its receipt."""

    job: str
    started: float
    trigger: str = "manual"
    """Why the job runs (JobRequest.reason), recorded in its receipt."""

    @classmethod
    def start(cls, trigger: str = "manual") -> JobClock:
        return cls(str(uuid.uuid4()), time.time(), trigger)

    def unchanged_receipt(
        self,
        settings: Settings,
        strategy: str,
        outcome: str,
        reason: str,
        before: tuple[int, int],
        *,
        pins_kept: int = 0,
        model: str | None = None,
        llm: LLMUsage | None = None,
    ) -> Receipt:
        """The receipt of a job that changed nothing (failed, or pins over the trigger):
        ``before`` = (messages, tokens) is also after."""
        return build_receipt(
            job=self.job,
            trigger=self.trigger,
            strategy=strategy,
            started=self.started,
            finished=time.time(),
            outcome=outcome,
            reason=reason,
            before=before,
            after=before,
            prices=settings.prices,
            pins_kept=pins_kept,
            model=model,
            llm=llm,
        )


def pins_over_trigger_reason(pinned_tokens: int) -> str:
    """Why a job cannot help when the pinned messages alone exceed the trigger (pure)."""
    return f"pinned messages hold {pinned_tokens:,} tokens"


def span_ids(message: dict[str, Any], summarized: Sequence[Line]) -> tuple[str | None, str | None]:
    """The first and last message ids the new head stands for: the head's own ``firstId``
    and ``lastId`` (so that receipts and the recall index agree), else the replaced lines'."""
    first, last = message.get("firstId"), message.get("lastId")
    if isinstance(first, str) and isinstance(last, str):
        return first, last
    ids = [
        x.message["id"] for x in summarized if x.message and isinstance(x.message.get("id"), str)
    ]
    return (ids[0], ids[-1]) if ids else (None, None)


_warned: set[tuple[str, str, str]] = set()
"""(workspace, file, reason) already logged by :func:`after_commit` in this process."""


def after_commit(workspace: Workspace, what: str, write: Callable[[], object]) -> bool:
    """Run ``write``, one of the writes after a durable commit; False when it failed.

    The conversation is rewritten and the job has succeeded: a file that cannot be
    written now (``what``: state.json, HEARTBEAT.md, events.jsonl, …) is logged once per
    workspace, file and reason, and never turns the job into a failure, which the daemon
    would count toward back-off (docs/design.md#commit).
    """
    try:
        write()
    except (OSError, MemorydError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        key = (str(workspace.path), what, reason)
        if key not in _warned:
            _warned.add(key)
            filename = exc.filename if isinstance(exc, OSError) else None
            log.warning(
                "post_commit_write_failed",
                workspace=str(workspace.path),
                file=what,
                path=str(filename) if filename else None,
                reason=reason,
            )
        return False
    return True


def emit_masked(workspace: Workspace, job: str, span: MaskedSpan) -> None:
    """The ``tool_outputs_masked`` event, the span's fields, after the commit (never fails
    the job; docs/design.md#masking)."""
    fields = asdict(span)
    after_commit(
        workspace,
        "events.jsonl",
        lambda: events.emit(workspace, "tool_outputs_masked", job=job, **fields),
    )
