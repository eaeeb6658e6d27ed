"""The reconcile step: what the summarizer answered, turned into the head the file will hold
(docs/design.md#retention).

One function takes the draft and decides, in this order and scoring each candidate text
once: a repair request when the draft kept less than ``min_retention`` of the details;
never worse than offline (the offline items replace an LLM summary that keeps fewer
details than they do, with its lines that add one); the "Details kept verbatim" section
(:mod:`memoryd.summary.verbatim`) for what is still missing; and the carried items
(docs/design.md#summary-items): every item of the previous head and of the draft that is
not routine is in the head, or is put back and the head fitted to its cap by the item
rules of :func:`~memoryd.summary.folding.fit`. A checkpoint's items go through the same
repair and the same scoring (:func:`reconcile_lists`); what they still lose is kept
verbatim beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from memoryd.errors import NoSummaryAnswer, SummarizerError
from memoryd.receipts.records import RetentionFigures
from memoryd.summary.backends import Summarizer
from memoryd.summary.folding import fit, missing_items, restored
from memoryd.summary.items import Head, HeadItem, parse_head, render_head, render_item
from memoryd.summary.retention import Beside, Detail, RetentionScore, TextIndex, score
from memoryd.summary.verbatim import fit as fit_details
from memoryd.summary.verbatim import with_free_room, with_verbatim_section
from memoryd.tokens import estimate_text_tokens

log = structlog.get_logger()
T = TypeVar("T")

LLM_LINES_HEADER = "From the LLM summary:"


@dataclass(frozen=True, slots=True)
class Floor:
    """The offline head used instead of the LLM's, and the two shares of details kept."""

    text: str
    llm_score: float
    offline_score: float
    llm_lines: int
    no_summary: str | None = None
    """Why the LLM gave no summary at all (its answers, in a few words), or None."""

    @property
    def note(self) -> str:
        """``llm summary kept 38% of details: offline items used``, or ``llm gave no
        summary (the answer was cut at max_tokens (256), 2 attempts): offline items
        used``."""
        if self.no_summary is not None:
            return no_summary_note(self.no_summary)
        return f"llm summary kept {round(self.llm_score * 100)}% of details: offline items used"


def no_summary_note(why: str) -> str:
    """The job's note when the LLM gave no summary at all and the offline items were used."""
    return f"llm gave no summary ({why}): offline items used"


def or_offline(
    summarizer: Summarizer, answer: Callable[[], T], offline: Callable[[], T]
) -> tuple[T, str | None]:
    """``answer()``, or, when the model gave no summary at all (every answer cut at
    ``max_tokens``, empty, a refusal), ``offline()`` and why: never worse than offline.
    The offline summarizer's own failure is raised."""
    try:
        return answer(), None
    except NoSummaryAnswer as exc:
        if summarizer.backend is None:
            raise
        log.warning("llm_gave_no_summary", backend=summarizer.name, requests=summarizer.requests)
        return offline(), exc.why


@dataclass(frozen=True, slots=True)
class Reconciled:
    """The head's final text, the retention figures of the whole step, and the Floor when
    the offline items were used."""

    text: str
    retention: RetentionFigures
    floor: Floor | None


class _Scores:
    """:func:`~memoryd.summary.retention.score` of each candidate text, computed once."""

    def __init__(self, details: Sequence[Detail], beside: Beside | None) -> None:
        self.details = details
        self.beside = beside
        self.known: dict[str, RetentionScore] = {}

    def __call__(self, text: str) -> RetentionScore:
        found = self.known.get(text)
        if found is None:
            found = self.known[text] = score(self.details, text, self.beside)
        return found


def carried_text(previous: str | None, style: str) -> str | None:
    """The part of a previous head that must survive the fold: its task line and its
    items that are not routine (what the retention check counts of it) (pure)."""
    if not previous:
        return None
    head = parse_head(previous)
    kept = tuple(item for item in head.items if item.kind != "routine")
    return render_head(Head(head.task, kept), style)


def reconcile(
    draft: str,
    details: Sequence[Detail],
    beside: Beside | None,
    budget: int,
    min_retention: float,
    *,
    summarizer: Summarizer | None = None,
    offline: Callable[[], str] | None = None,
    previous: str | None = None,
    style: str = "narrative",
    no_summary: str | None = None,
) -> Reconciled:
    """The head for ``draft``, within ``budget`` tokens, and its retention figures.

    A detail that the messages kept ``beside`` the summary carry (the pinned messages,
    the kept part) counts as kept: the figures are measured on what the file holds after
    the commit, and nothing is repaired or kept verbatim twice.

    Below ``min_retention`` the ``summarizer`` is asked once to repair the draft (None,
    or a backend that cannot be asked, is not); a repair that fails, keeps less, or
    exceeds the budget is not used. Never worse than offline: when the head, repaired or
    not, still keeps fewer details than ``offline()`` (the offline summary of the same
    input, made only when the head lost a detail), the offline items replace it, with its
    lines that add a detail. ``no_summary`` (why the LLM gave none) says the draft is
    already the offline summary. If still below the threshold, the missing details are
    appended as a verbatim section, the head cut at a line to make room; at or above it,
    they take only the room left free once sentences that carry no detail are taken out.
    A threshold of 0 switches these repairs off; the score is still measured.

    Last, the items of ``previous`` (the head this one folds) and of the draft that are
    not routine must be in the head: the summarizer is asked once to put back what is
    missing (not when the offline items were used), then what is still missing is put
    back here and the head fitted to ``budget``. A head that holds them all and fits is
    left as it is written.
    """
    scores = _Scores(details, beside)
    first = current = scores(draft)
    text = draft
    floor = Floor(draft, 0.0, first.score, 0, no_summary) if no_summary is not None else None
    if min_retention > 0:
        if first.score < min_retention:
            lost = [d.text for d in first.missing]
            answer = _asked(summarizer, text, lost, budget, "summary_repair_failed")
            if answer is not None:
                candidate = scores(answer)
                if candidate.score >= first.score and estimate_text_tokens(answer) <= budget:
                    text, current = answer, candidate
        if offline is not None and current.missing:
            floor = _offline_floor(text, current, offline(), scores, budget)
            if floor is not None:
                log.info(
                    "llm_summary_below_offline",
                    llm_retention=floor.llm_score,
                    offline_retention=floor.offline_score,
                    llm_lines_kept=floor.llm_lines,
                )
                text, current = floor.text, scores(floor.text)
        if current.missing:
            gone = {id(d) for d in current.missing}
            kept = [d for d in details if id(d) not in gone]
            verbatim = with_verbatim_section if current.score < min_retention else with_free_room
            text = verbatim(text, current.missing, budget, kept)
    drafted = floor.text if floor is not None else draft
    asker = summarizer if floor is None else None
    text = _with_carried_items(asker, previous, drafted, text, budget, style)
    final = scores(text)
    return Reconciled(text, RetentionFigures(first.score, final.score, len(final.missing)), floor)


def _asked(
    summarizer: Summarizer | None, text: str, missing: list[str], budget: int, event: str
) -> str | None:
    """The summarizer's repaired ``text``, asked to keep ``missing``; None when it cannot
    be asked, fails or answers nothing."""
    if summarizer is None:
        return None
    asked = summarizer
    repaired = _answer(lambda: asked.repair(text, missing, budget), asked.name, event)
    return repaired.text if repaired is not None and repaired.text.strip() else None


def _answer(ask: Callable[[], T | None], backend: str, event: str) -> T | None:
    """What ``ask`` returns; None when the request failed: the text in hand is valid, so a
    failed repair is logged as ``event``, never fatal."""
    try:
        return ask()
    except SummarizerError as exc:
        log.warning(event, backend=backend, reason=str(exc))
        return None


def _offline_floor(
    llm_text: str,
    llm: RetentionScore,
    offline_text: str,
    scores: Callable[[str], RetentionScore],
    budget: int,
) -> Floor | None:
    """None when ``llm_text`` keeps at least the share of details that ``offline_text``
    keeps; else the offline text, followed by the LLM's lines that carry a detail it lacks,
    as many as ``budget`` tokens hold."""
    offline = scores(offline_text)
    if llm.score >= offline.score:
        return None
    lacking = list(offline.missing)
    adding: list[str] = []
    for line in llm_text.splitlines():
        stripped = line.strip()
        if not stripped or not lacking:
            continue
        index = TextIndex(stripped, lacking)
        held = [detail for detail in lacking if index.holds(detail)]
        if held:
            adding.append(stripped if stripped.startswith("- ") else f"- {stripped}")
            lacking = [detail for detail in lacking if detail not in held]
    text = offline_text
    used = 0
    for line in adding:
        head = "" if used else f"\n\n{LLM_LINES_HEADER}"
        candidate = f"{text}{head}\n{line}"
        if estimate_text_tokens(candidate) > budget:
            break
        text, used = candidate, used + 1
    return Floor(text, llm.score, offline.score, used)


def _with_carried_items(
    summarizer: Summarizer | None,
    previous: str | None,
    draft: str,
    text: str,
    budget: int,
    style: str,
) -> str:
    """``text`` holding every item that is not routine of ``previous`` and of ``draft``
    (the head before the retention repairs), within ``budget`` tokens."""
    earlier = parse_head(previous) if previous else Head(None, ())
    drafted = parse_head(draft)
    answer = parse_head(text)
    wanted = [*earlier.items, *drafted.items]
    missing = missing_items(wanted, answer.items)
    if missing and earlier.items:
        lines = [render_item(item) for item in missing]
        repaired = _asked(summarizer, text, lines, budget, "carried_items_repair_failed")
        if repaired is not None:
            again = parse_head(repaired)
            still = missing_items(wanted, again.items)
            if len(still) < len(missing):
                text, answer, missing = repaired, again, still
    if not missing and estimate_text_tokens(text) <= budget:
        return text
    task = answer.task or drafted.task or earlier.task
    head = fit(Head(task, tuple(restored(answer.items, missing))), budget, style)
    return render_head(head, style)


def lists_text(items: Sequence[HeadItem]) -> str:
    """A checkpoint's items, one a line, as the retention check reads them (pure)."""
    return "\n".join(item.text for item in items)


def reconcile_lists(
    lists: list[HeadItem],
    details: Sequence[Detail],
    beside: Beside | None,
    min_retention: float,
    room: Callable[[Sequence[HeadItem]], int],
    summarizer: Summarizer | None = None,
) -> tuple[list[HeadItem], list[str], RetentionFigures]:
    """The same step over a checkpoint's items: the items, the details they lost to keep
    verbatim beside them, and the figures.

    Below ``min_retention`` the ``summarizer`` is asked once for the lists again, keeping
    what they lost; the answer is used when it keeps more. What is still missing is kept
    verbatim while it fits in ``room(items)`` tokens (a longer missing path stands for the
    shorter ones it holds); 0 switches the repairs off (docs/design.md#retention).
    """
    scores = _Scores(details, beside)
    text = lists_text(lists)
    first = current = scores(text)
    if min_retention <= 0 or not first.missing:
        return lists, [], RetentionFigures(first.score, first.score, len(first.missing))
    if first.score < min_retention and summarizer is not None:
        asked, lost = summarizer, [d.text for d in first.missing]
        repaired = _answer(
            lambda: asked.repair_checkpoint(lists, lost), asked.name, "checkpoint_repair_failed"
        )
        if repaired is not None and scores(lists_text(repaired)).score > first.score:
            lists, text = repaired, lists_text(repaired)
            current = scores(text)
    if not current.missing:
        return lists, [], RetentionFigures(first.score, current.score, 0)
    paths = [d.key for d in current.missing if d.kind == "path"]
    uncovered = [
        d
        for d in current.missing
        if d.kind != "path" or not any(d.key != other and d.key in other for other in paths)
    ]
    chosen = [d.text for d in fit_details(uncovered, room(lists))]
    final = scores("\n".join([text, *chosen]))
    return lists, chosen, RetentionFigures(first.score, final.score, len(final.missing))
