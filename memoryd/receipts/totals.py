"""The history of jobs: totals over receipts and the table ``memoryd history`` prints (pure).

See docs/design.md#receipts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.receipts.records import Receipt


@dataclass(frozen=True, slots=True)
class HistoryTotals:
    """Totals over receipts: jobs by outcome, tokens saved, LLM tokens and cost."""

    jobs: int
    completed: int
    failed: int
    ineffective: int
    tokens_saved: int
    llm_tokens: int
    cost_usd: float
    unpriced_jobs: int
    """Jobs that used an LLM whose price is unknown (their cost is not in ``cost_usd``)."""

    def to_record(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "completed": self.completed,
            "failed": self.failed,
            "ineffective": self.ineffective,
            "tokens_saved": self.tokens_saved,
            "llm_tokens": self.llm_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "unpriced_jobs": self.unpriced_jobs,
        }


def history_totals(receipts: Sequence[Receipt]) -> HistoryTotals:
    """The totals of ``receipts`` (pure)."""
    return HistoryTotals(
        jobs=len(receipts),
        completed=sum(1 for r in receipts if r.outcome == "completed"),
        failed=sum(1 for r in receipts if r.outcome == "failed"),
        ineffective=sum(1 for r in receipts if r.outcome == "ineffective"),
        tokens_saved=sum(r.tokens_saved for r in receipts),
        llm_tokens=sum(r.llm.total_tokens for r in receipts),
        cost_usd=sum(r.cost_usd for r in receipts if r.cost_usd is not None),
        unpriced_jobs=sum(1 for r in receipts if r.cost_usd is None and r.llm.calls > 0),
    )


def latest(receipts: Sequence[Receipt], limit: int | None) -> list[Receipt]:
    """The ``limit`` most recent receipts (all when None), oldest first (pure)."""
    ordered = sorted(receipts, key=lambda r: r.finished_at)
    return ordered if limit is None else ordered[-limit:] if limit > 0 else []


def render_history(receipts: Sequence[Receipt], totals: HistoryTotals, many: bool) -> str:
    """A table of ``receipts`` and a totals line, for people (pure).

    ``many`` adds a workspace column (a root's history covers several workspaces).
    """
    header = ["finished", "strategy", "backend", "outcome", "msgs", "tokens", "saved", "masked"]
    header += ["retention", "calls", "cost", "why"]
    rows: list[list[str]] = []
    for r in receipts:
        retention = f"{r.retention.before:.2f}->{r.retention.after:.2f}" if r.retention else "-"
        row = [
            r.finished_at[:19].replace("T", " "),
            r.strategy,
            r.backend or "-",
            r.outcome,
            f"{r.messages_before}->{r.messages_after}{_arrived(r.messages_arrived)}",
            f"{r.tokens_before:,}->{r.tokens_after:,}{_arrived(r.tokens_arrived)}",
            f"{r.tokens_saved:,}",
            _masked(r),
            retention,
            str(r.llm.calls),
            "-" if r.cost_usd is None else f"${r.cost_usd:.4f}",
            r.why or "-",
        ]
        if many:
            row.insert(0, r.workspace or "?")
        rows.append(row)
    if many:
        header.insert(0, "workspace")
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    unpriced = f" ({_jobs(totals.unpriced_jobs)} at unknown prices)" if totals.unpriced_jobs else ""
    lines.append(
        f"{_jobs(totals.jobs)} ({totals.completed} completed, {totals.ineffective} ineffective, "
        f"{totals.failed} failed): {totals.tokens_saved:,} tokens saved, "
        f"{totals.llm_tokens:,} LLM tokens, ${totals.cost_usd:.4f}{unpriced}"
    )
    return "\n".join(lines)


def _arrived(count: int) -> str:
    """What the agent appended while the job ran, apart from what the job did."""
    return f" (+{count:,} new)" if count else ""


def _masked(receipt: Receipt) -> str:
    """The tool outputs a job masked (and input fields, ``in``, and media, when any) and
    the tokens that freed, ``+`` when a summary followed (docs/design.md#masking)."""
    masked = receipt.masked
    if masked is None:
        return "-"
    what = f"{masked.outputs}"
    what += f" +{masked.inputs} in" if masked.inputs else ""
    what += f" +{masked.media} media" if masked.media else ""
    return f"{what} ({masked.tokens_freed:,}){'+' if masked.summary_followed else ''}"


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"
