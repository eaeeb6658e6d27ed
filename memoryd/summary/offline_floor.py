"""Never worse than offline: an LLM summary that keeps fewer details than the offline
summary of the same input gives way to it (pure; docs/design.md#retention).

A weak model (a 135M one on a laptop) writes fluent items that carry nothing ("The next
step is to provide the output of the conversation."). The offline summarizer's items are
taken from the messages themselves; when they keep more of the details the retention
check counts, they are the head, and the LLM's lines stay only where they carry a detail
the offline items lack. A model that gives no summary at all (every answer cut at
``max_tokens``, empty, or a refusal) leaves the offline items as the head in the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.summary.retention import Beside, Detail, TextIndex, score
from memoryd.tokens import estimate_text_tokens

LLM_LINES_HEADER = "From the LLM summary:"


@dataclass(frozen=True, slots=True)
class Floor:
    """The head to use instead of the LLM's, and the two shares of details kept."""

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
            return f"llm gave no summary ({self.no_summary}): offline items used"
        return f"llm summary kept {round(self.llm_score * 100)}% of details: offline items used"


def no_summary_floor(
    why: str, offline_text: str, details: Sequence[Detail], beside: Beside | None = None
) -> Floor:
    """The offline text as the head when the LLM gave no summary; ``why`` says why."""
    return Floor(offline_text, 0.0, score(details, offline_text, beside).score, 0, why)


def offline_floor(
    llm_text: str,
    offline_text: str,
    details: Sequence[Detail],
    budget: int,
    beside: Beside | None = None,
) -> Floor | None:
    """None when ``llm_text`` keeps at least the share of ``details`` that ``offline_text``
    keeps; else the offline text, followed by the LLM's lines that carry a detail it lacks,
    as many as ``budget`` tokens hold."""
    llm = score(details, llm_text, beside)
    offline = score(details, offline_text, beside)
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
