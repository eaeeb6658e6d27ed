"""The offline summarizer: deterministic, no network.

It keeps the sentences that carry decisions, facts, preferences and action items,
in their original order, within the summary budget. A previous summary's points are
candidates like any others, so the result stays one summary of bounded size.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memoryd.summarizers.prompts import render_transcript
from memoryd.tokens import estimate_text_tokens

CUES: tuple[tuple[int, re.Pattern[str]], ...] = tuple(
    (weight, re.compile(pattern, re.IGNORECASE))
    for weight, pattern in (
        (6, r"\b(decided|decision|agreed|we'?ll go with|going with|settled on|chose|choose)\b"),
        (5, r"\b(action item|todo|to-do|follow[- ]up|next step|deadline|due)\b"),
        (4, r"\b(prefer|preference|always|never|please (use|keep|avoid|don'?t))\b"),
        (3, r"\b(must|need to|needs to|should|will|remember|important|note that|key)\b"),
        (3, r"\b(because|so that|reason)\b"),
        (2, r"\b(is|are|was|uses?|runs?|lives? in|located)\b"),
        (2, r"\d"),
        (1, r"[/._][A-Za-z0-9]"),
    )
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
ROLE_LINE = re.compile(r"^\[(?P<role>[a-z_]+)\]\s*", re.IGNORECASE)
MAX_SENTENCE_CHARS = 400
PREVIOUS_BONUS = 4
MIN_SCORE = 1


@dataclass(frozen=True, slots=True)
class Candidate:
    """A sentence that may enter the summary."""

    position: int
    speaker: str
    text: str
    score: int


def score(sentence: str) -> int:
    """How much a sentence carries: the weights of the cue families it matches (pure)."""
    return sum(weight for weight, pattern in CUES if pattern.search(sentence))


def sentences(text: str) -> list[str]:
    """Split a text into trimmed sentences (pure)."""
    parts = (part.strip() for part in SENTENCE_END.split(text))
    return [
        p if len(p) <= MAX_SENTENCE_CHARS else p[: MAX_SENTENCE_CHARS - 1] + "…" for p in parts if p
    ]


def candidates(
    messages: Sequence[Mapping[str, Any]], previous_summary: str | None
) -> list[Candidate]:
    """Every sentence of the previous summary and of the messages, scored (pure)."""
    found: list[Candidate] = []
    if previous_summary:
        for sentence in sentences(_strip_bullets(previous_summary)):
            found.append(Candidate(len(found), "", sentence, score(sentence) + PREVIOUS_BONUS))
    for message in messages:
        rendered = render_transcript([message])
        match = ROLE_LINE.match(rendered)
        speaker = match["role"].lower() if match else "message"
        body = rendered[match.end() :] if match else rendered
        for sentence in sentences(body):
            found.append(Candidate(len(found), speaker, sentence, score(sentence)))
    return found


HEADERS = {"narrative": "Key points, oldest first:", "rolling": "Earlier, in brief:"}


def _strip_bullets(text: str) -> str:
    lines = [re.sub(r"^\s*[-*]\s+", "", line) for line in text.splitlines()]
    return "\n".join(line for line in lines if line and line not in HEADERS.values())


def _phrase(candidate: Candidate, style: str) -> str:
    if not candidate.speaker:
        return candidate.text
    if style == "rolling":
        who = {"user": "The user", "assistant": "The assistant"}.get(candidate.speaker, "A message")
        return f"{who} said: {candidate.text}"
    return f"{candidate.speaker.capitalize()}: {candidate.text}"


def extractive_summary(
    messages: Sequence[Mapping[str, Any]],
    previous_summary: str | None,
    max_summary_tokens: int,
    style: str = "narrative",
) -> str:
    """A deterministic summary of ``messages`` (and the summary before them) (pure).

    Picks the highest-scoring sentences, earlier ones first on a tie, until the budget
    of ``max_summary_tokens`` is reached, then lists them in conversation order.
    """
    header = HEADERS["rolling" if style == "rolling" else "narrative"]
    budget = max(1, max_summary_tokens - estimate_text_tokens(header) - 1)
    pool = candidates(messages, previous_summary)
    seen: set[str] = set()
    unique: list[Candidate] = []
    # A sentence that matches no cue ("Sounds good.") carries nothing worth the budget.
    informative = [c for c in pool if c.score >= MIN_SCORE] or pool
    for candidate in informative:
        key = _phrase(candidate, style).casefold()
        if key not in seen:
            seen.add(key)
            unique.append(candidate)
    chosen: list[tuple[Candidate, str]] = []
    used = 0
    for candidate in sorted(unique, key=lambda c: (-c.score, c.position)):
        line = "- " + _phrase(candidate, style)
        cost = estimate_text_tokens(line) + 1
        if used + cost > budget:
            continue
        chosen.append((candidate, line))
        used += cost
    if not chosen and unique:
        first = unique[0]
        room = max(8, budget * 4 - 8)
        chosen.append((first, "- " + _phrase(first, style)[:room]))
    chosen.sort(key=lambda pair: pair[0].position)
    return "\n".join([header, *(line for _, line in chosen)])
