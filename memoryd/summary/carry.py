"""The carried-items check: a new head keeps every item of the previous one that is not
routine, or says it was resolved (docs/design.md#summary-items).

Whatever wrote the new head (the offline summarizer, an LLM, the retention check's
verbatim section), its text is read back into items and compared with the items the
previous head and the first draft carried. An LLM that dropped some is asked once to put
them back (or mark them resolved); what is still missing is put back here, and the head
is fitted to its cap by the item rules of :func:`~memoryd.summary.folding.fit`.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from memoryd.errors import SummarizerError
from memoryd.summary.backends import Summarizer
from memoryd.summary.folding import fit, missing_items, restored
from memoryd.summary.items import Head, parse_head, render_head, render_item
from memoryd.tokens import estimate_text_tokens

log = structlog.get_logger()


@dataclass(frozen=True, slots=True)
class Carried:
    """The head's final text, and how many carried items had to be put back."""

    text: str
    asked: int
    """Items the backend was asked to put back."""
    restored: int
    """Items put back here, after the backend's answer."""


def carried_text(previous: str | None, style: str) -> str | None:
    """The part of a previous head that must survive the fold: its task line and its
    items that are not routine (what the retention check counts of it) (pure)."""
    if not previous:
        return None
    head = parse_head(previous)
    kept = tuple(item for item in head.items if item.kind != "routine")
    return render_head(Head(head.task, kept), style)


def carry_items(
    summarizer: Summarizer,
    previous: str | None,
    draft: str,
    text: str,
    budget: int,
    style: str,
) -> Carried:
    """``text`` (the head after the retention check), holding every item that is not
    routine of ``previous`` and of ``draft`` (the head before the check), within
    ``budget`` tokens.

    Left as it is when it already holds them all and fits: an LLM's wording stays.
    """
    earlier = parse_head(previous).items if previous else ()
    drafted = parse_head(draft)
    answer = parse_head(text)
    wanted = [*earlier, *drafted.items]
    missing = missing_items(wanted, answer.items)
    asked = 0
    if missing and earlier:
        lines = [render_item(item) for item in missing]
        try:
            repaired = summarizer.repair(text, lines, budget)
        except SummarizerError as exc:
            log.warning("carried_items_repair_failed", backend=summarizer.name, reason=str(exc))
            repaired = None
        if repaired is not None and repaired.text.strip():
            asked = len(missing)
            again = parse_head(repaired.text)
            still = missing_items(wanted, again.items)
            if len(still) < len(missing):
                text, answer, missing = repaired.text, again, still
    if not missing and estimate_text_tokens(text) <= budget:
        return Carried(text, asked, 0)
    task = answer.task or drafted.task or (parse_head(previous).task if previous else None)
    items = restored(answer.items, missing)
    head = fit(Head(task, tuple(items)), budget, style)
    return Carried(render_head(head, style), asked, len(missing))
