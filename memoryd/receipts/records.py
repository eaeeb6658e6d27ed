"""Receipts: one JSON line per job in ``.memoryd/receipts.jsonl`` (totals and the
table of them: :mod:`memoryd.receipts.totals`).

A receipt says what a job did and what it cost: the strategy and backend, the outcome and
why, the messages and tokens before and after, the span it summarized (and where the
originals are), the pinned messages it kept, the retention check's scores and the LLM's
token counts and cost (docs/design.md#receipts). It never holds message text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memoryd import strict_json
from memoryd.clock import iso_ms
from memoryd.files.fsutil import append_line
from memoryd.files.regular import read_file
from memoryd.receipts.pricing import MAX_COST_USD, ModelPrice, cost_usd, price_for
from memoryd.tokens import LLMUsage
from memoryd.workspace import Workspace

RECEIPTS = "receipts.jsonl"


def receipts_path(workspace: Workspace) -> Path:
    """``<workspace>/.memoryd/receipts.jsonl``."""
    return workspace.meta / RECEIPTS


@dataclass(frozen=True, slots=True)
class SummarizedSpan:
    """The messages a job replaced, and where their original lines now are."""

    count: int
    first_id: str | None
    last_id: str | None
    archive: str | None
    """Path of the archive file, relative to the workspace."""
    offset: int
    """Byte offset of the first original line in the archive file."""
    length: int
    """Bytes of original lines in the archive file."""

    def to_record(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "firstId": self.first_id,
            "lastId": self.last_id,
            "archive": self.archive,
            "offset": self.offset,
            "length": self.length,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SummarizedSpan:
        return cls(
            int(record.get("count") or 0),
            _str_or_none(record.get("firstId")),
            _str_or_none(record.get("lastId")),
            _str_or_none(record.get("archive")),
            int(record.get("offset") or 0),
            int(record.get("length") or 0),
        )


@dataclass(frozen=True, slots=True)
class MaskedSpan:
    """The tool outputs a job masked before (or instead of) summarizing
    (docs/design.md#masking)."""

    messages: int
    """Lines rewritten with placeholders."""
    outputs: int
    """Tool outputs masked (a line may hold several results)."""
    tokens_freed: int
    archive: str | None
    """Where the originals went, relative to the workspace."""
    summary_followed: bool
    """Whether the strategy summarized after masking (usage stayed above the target)."""
    inputs: int = 0
    """Fields of tool inputs masked (recorded when there are any)."""
    media: int = 0
    """Images and documents of user turns masked (recorded when there are any)."""

    def to_record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "messages": self.messages,
            "outputs": self.outputs,
            "tokensFreed": self.tokens_freed,
            "archive": self.archive,
            "summaryFollowed": self.summary_followed,
        }
        if self.inputs:
            record["inputs"] = self.inputs
        if self.media:
            record["media"] = self.media
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MaskedSpan:
        return cls(
            int(record.get("messages") or 0),
            int(record.get("outputs") or 0),
            int(record.get("tokensFreed") or 0),
            _str_or_none(record.get("archive")),
            record.get("summaryFollowed") is True,
            inputs=int(record.get("inputs") or 0),
            media=int(record.get("media") or 0),
        )


@dataclass(frozen=True, slots=True)
class RetentionFigures:
    """The retention check's scores: before and after the repair, and what stayed missing."""

    before: float
    after: float
    missing: int

    def to_record(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "missing": self.missing}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> RetentionFigures:
        return cls(
            finite(record.get("before") or 0.0, 1.0),
            finite(record.get("after") or 0.0, 1.0),
            int(record.get("missing") or 0),
        )


@dataclass(frozen=True, slots=True)
class Receipt:
    """One job, as ``receipts.jsonl`` records it (see the module docstring)."""

    job: str
    strategy: str
    backend: str | None
    model: str | None
    started_at: str
    finished_at: str
    duration_ms: int
    outcome: str
    """completed | ineffective | failed."""
    reason: str
    messages_before: int
    messages_after: int
    tokens_before: int
    tokens_after: int
    summarized: SummarizedSpan | None = None
    pins_kept: int = 0
    retention: RetentionFigures | None = None
    llm: LLMUsage = field(default_factory=LLMUsage)
    cost_usd: float | None = None
    trigger: str = "manual"
    """Why the job ran: "trigger" (the strategy's threshold), "idle" (compaction while the
    agent is idle) or "manual" (``memoryd summarize``, the Python API)."""
    workspace: str | None = None
    """Set when read back (the folder it was read from); not written."""
    masked: MaskedSpan | None = None
    """The tool outputs masked first; None when masking did not run."""
    messages_arrived: int = 0
    """Messages the agent appended while the job ran: in the file after it, carried
    over unread, not counted in ``messages_after`` (which counts what the job wrote)."""
    tokens_arrived: int = 0
    """Their tokens, likewise apart from ``tokens_after``."""
    why: str | None = None
    """How many messages the job masked and summarized, and why, in a few words
    (``masked 19, then summarized 6 to reach 0.40 (now 0.38)``); None for a job that
    changed nothing (docs/design.md#least-loss)."""
    aim: float | None = None
    """The usage share the job aimed at: ``masking.target`` for a masking alone, the
    least-loss aim for a summary after masking; None with masking off."""

    @property
    def tokens_saved(self) -> int:
        """Tokens the job took out of the conversation (0 for a job that changed nothing)."""
        changed = self.summarized or self.masked
        return max(0, self.tokens_before - self.tokens_after) if changed else 0

    def to_record(self) -> dict[str, Any]:
        """The JSON object of one ``receipts.jsonl`` line."""
        return {
            "job": self.job,
            "strategy": self.strategy,
            "backend": self.backend,
            "model": self.model,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
            "reason": self.reason,
            "messages_before": self.messages_before,
            "messages_after": self.messages_after,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "summarized": self.summarized.to_record() if self.summarized else None,
            "pins_kept": self.pins_kept,
            "retention": self.retention.to_record() if self.retention else None,
            "llm": self.llm.to_record(),
            "cost_usd": self.cost_usd,
            "trigger": self.trigger,
            "masked": self.masked.to_record() if self.masked else None,
            "messages_arrived": self.messages_arrived,
            "tokens_arrived": self.tokens_arrived,
            "why": self.why,
            "aim": self.aim,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any], workspace: str | None = None) -> Receipt:
        """A receipt from its JSON object; raises KeyError, TypeError or ValueError when
        a required field is missing or of the wrong type, or a figure is out of range."""
        summarized = record.get("summarized")
        retention = record.get("retention")
        llm = record.get("llm")
        cost = record.get("cost_usd")
        masked = record.get("masked")
        return cls(
            job=str(record["job"]),
            strategy=str(record["strategy"]),
            backend=_str_or_none(record.get("backend")),
            model=_str_or_none(record.get("model")),
            started_at=str(record["started_at"]),
            finished_at=str(record["finished_at"]),
            duration_ms=int(record["duration_ms"]),
            outcome=str(record["outcome"]),
            reason=str(record.get("reason") or ""),
            messages_before=int(record["messages_before"]),
            messages_after=int(record["messages_after"]),
            tokens_before=int(record["tokens_before"]),
            tokens_after=int(record["tokens_after"]),
            summarized=(
                SummarizedSpan.from_record(summarized) if isinstance(summarized, dict) else None
            ),
            pins_kept=int(record.get("pins_kept") or 0),
            retention=(
                RetentionFigures.from_record(retention) if isinstance(retention, dict) else None
            ),
            llm=LLMUsage.from_record(llm) if isinstance(llm, dict) else LLMUsage(),
            cost_usd=finite(cost, MAX_COST_USD) if isinstance(cost, (int, float)) else None,
            trigger=str(record.get("trigger") or "manual"),
            workspace=workspace,
            masked=MaskedSpan.from_record(masked) if isinstance(masked, dict) else None,
            messages_arrived=int(record.get("messages_arrived") or 0),
            tokens_arrived=int(record.get("tokens_arrived") or 0),
            why=_str_or_none(record.get("why")),
            aim=_share_or_none(record.get("aim")),
        )


def build_receipt(
    *,
    job: str,
    strategy: str,
    started: float,
    finished: float,
    outcome: str,
    reason: str,
    before: tuple[int, int],
    after: tuple[int, int],
    prices: Mapping[str, ModelPrice],
    backend: str | None = None,
    model: str | None = None,
    summarized: SummarizedSpan | None = None,
    pins_kept: int = 0,
    retention: RetentionFigures | None = None,
    llm: LLMUsage | None = None,
    trigger: str = "manual",
    masked: MaskedSpan | None = None,
    arrived: tuple[int, int] = (0, 0),
    why: str | None = None,
    aim: float | None = None,
) -> Receipt:
    """A receipt from a job's figures (pure); ``before`` and ``after`` are (messages,
    tokens) of what the job read and wrote, ``arrived`` of what the agent appended
    meanwhile, ``started`` and ``finished`` epoch seconds. The cost is 0 for a job that made
    no LLM call, None for a model without a price."""
    usage = llm or LLMUsage()
    cost: float | None = 0.0
    if usage.calls:
        cost = cost_usd(
            price_for(model, prices, backend) if model else None,
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_creation_tokens,
            usage.cache_read_tokens,
        )
    return Receipt(
        job=job,
        strategy=strategy,
        backend=backend,
        model=model,
        started_at=iso_ms(started),
        finished_at=iso_ms(finished),
        duration_ms=max(0, round((finished - started) * 1000)),
        outcome=outcome,
        reason=reason,
        messages_before=before[0],
        messages_after=after[0],
        tokens_before=before[1],
        tokens_after=after[1],
        summarized=summarized,
        pins_kept=pins_kept,
        retention=retention,
        llm=usage,
        cost_usd=cost,
        trigger=trigger,
        masked=masked,
        messages_arrived=arrived[0],
        tokens_arrived=arrived[1],
        why=why,
        aim=aim,
    )


def receipt_line(receipt: Receipt) -> bytes:
    """The bytes of one ``receipts.jsonl`` line (pure); JSONProblem for a figure that is
    not finite (never written: such a line would not be JSON)."""
    return strict_json.dumps(receipt.to_record()).encode() + b"\n"


def append_receipt(workspace: Workspace, receipt: Receipt) -> None:
    """Append ``receipt`` to the workspace's ``receipts.jsonl`` and fsync it.

    The file is opened with ``O_NOFOLLOW``: a symlink there is refused (OSError), never
    written through.
    """
    append_line(receipts_path(workspace), receipt_line(receipt), root=workspace.path)


def read_receipts(workspace: Workspace) -> list[Receipt]:
    """The workspace's receipts, oldest first; lines that are not receipts are skipped.

    UnsafePathError for a FIFO, socket or device where the file belongs (never waited on).
    """
    try:
        raw = read_file(receipts_path(workspace))
    except FileNotFoundError:
        return []
    return list(parse_receipts(raw.splitlines(), str(workspace.path)))


def parse_receipts(lines: Iterable[bytes], workspace: str | None = None) -> Iterator[Receipt]:
    """The receipts among ``lines`` (pure); a torn or foreign line is skipped."""
    for line in lines:
        try:
            record = strict_json.loads(line)
            if isinstance(record, dict):
                yield Receipt.from_record(record, workspace)
        except (ValueError, KeyError, TypeError, OverflowError):
            continue


def finite(value: object, high: float) -> float:
    """``value`` as a float from 0 to ``high``; ValueError otherwise (a huge integer, a
    negative figure), TypeError for what is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"not a number: {type(value).__name__}")
    number = float(value)  # OverflowError for an integer beyond a double
    if not (math.isfinite(number) and 0 <= number <= high):
        raise ValueError(f"out of range: {number!r}")
    return number


def _share_or_none(value: object) -> float | None:
    """A share from 0 to 1, or None for anything else (an older receipt has none)."""
    try:
        return finite(value, 1.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
