"""The "Details kept verbatim" section: what a summary lost, put back within its cap (pure).

Details go in by priority, most recent and most mentioned first; room is made by taking
out sentences that carry no detail before anything else (docs/design.md#retention).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from memoryd.summary.retention import (
    IDENTIFIER_KINDS,
    SENTENCE_KINDS,
    VERBATIM_HEADER,
    Detail,
    TextIndex,
)
from memoryd.tokens import estimate_text_tokens


def by_priority(details: Iterable[Detail]) -> list[Detail]:
    """The task first, then most recent first, then most referenced, then identifiers
    before sentences (pure)."""
    return sorted(
        details,
        key=lambda d: (
            d.kind != "task",
            -d.position,
            -d.mentions,
            d.kind in SENTENCE_KINDS,
            d.text,
        ),
    )


_LABELS = {
    "path": "Files",
    "url": "Links",
    "issue": "Issues and PRs",
    "version": "Versions",
    "code": "Code",
    "quantity": "Figures",
    "date": "Dates",
    "command": "Commands",
    "error": "Errors",
}


def render_section(items: Sequence[Detail]) -> str:
    """The "Details kept verbatim" section for ``items`` (pure; empty for none): the task,
    the identifiers, commands and errors by kind, then the sentences."""
    if not items:
        return ""
    lines = [VERBATIM_HEADER]
    lines.extend(f"- {d.text}" for d in items if d.kind == "task")
    for kind in IDENTIFIER_KINDS:
        shown = [d.text for d in items if d.kind == kind]
        if shown:
            lines.append(f"- {_LABELS[kind]}: " + "; ".join(shown))
    lines.extend(f"- {d.text}" for d in items if d.kind in SENTENCE_KINDS and d.kind != "task")
    return "\n".join(lines)


def _trim(text: str, max_tokens: int) -> str:
    """``text`` cut at a line (else sentence) boundary to fit ``max_tokens``."""
    if estimate_text_tokens(text) <= max_tokens:
        return text
    lines = text.splitlines()
    while len(lines) > 1 and estimate_text_tokens("\n".join(lines)) > max_tokens:
        lines.pop()
    kept = "\n".join(lines)
    if estimate_text_tokens(kept) <= max_tokens:
        return kept
    return kept[: max(0, max_tokens * 4 - 1)].rstrip() + "…"


def fit(missing: Sequence[Detail], max_tokens: int) -> list[Detail]:
    """The missing details whose section fits ``max_tokens``, chosen by priority and
    listed in their original order (pure)."""
    # The section's length is counted as it grows (what render_section would produce),
    # so that thousands of details cost one pass, not one rendering each.
    chosen: set[int] = set()
    kinds: set[str] = set()
    chars = len(VERBATIM_HEADER)
    for detail in by_priority(missing):
        if detail.kind in SENTENCE_KINDS:
            extra = len("\n- ") + len(detail.text)
        elif detail.kind in kinds:
            extra = len("; ") + len(detail.text)
        else:
            extra = len(f"\n- {_LABELS[detail.kind]}: ") + len(detail.text)
        if (chars + extra + 3) // 4 <= max_tokens:
            chosen.add(id(detail))
            kinds.add(detail.kind)
            chars += extra
    return [d for d in missing if id(d) in chosen]


_SENTENCE_PARTS = re.compile(r"((?<=[.!?])[ \t]+)")
_LINES = re.compile(r"(\n+)")


def _units(text: str) -> tuple[list[str], list[str]]:
    """The units ``text`` can lose, and the separator after each: a list item's whole line
    (a command in it may hold ``. ``), else a sentence of a prose line."""
    sentences: list[str] = []
    separators: list[str] = []
    for line, newline in zip(*_split(_LINES, text), strict=True):
        if line.lstrip().startswith(("- ", "* ")):
            sentences.append(line)
            separators.append(newline)
            continue
        parts, gaps = _split(_SENTENCE_PARTS, line)
        sentences.extend(parts)
        separators.extend([*gaps[:-1], gaps[-1] + newline])
    return sentences, separators


def _split(pattern: re.Pattern[str], text: str) -> tuple[list[str], list[str]]:
    parts = pattern.split(text)
    return parts[0::2], [*parts[1::2], ""]


def _holds_any(index: TextIndex, details: Sequence[Detail]) -> bool:
    """Whether the text behind ``index`` (prepared once) carries any of ``details``."""
    return any(index.holds(d) for d in details)


def without_idle_sentences(text: str, kept: Sequence[Detail], max_tokens: int) -> str:
    """``text`` with sentences (a list item's whole line) that carry none of ``kept`` taken
    out, last first, until it fits ``max_tokens`` (pure): general statements give way
    before any detail does; a header line (ending in a colon) stays.

    Returns ``text`` unchanged when it fits already; it may still not fit after.
    """
    if estimate_text_tokens(text) <= max_tokens:
        return text
    sentences, separators = _units(text)
    idle = [
        i
        for i, sentence in enumerate(sentences)
        if sentence.strip()
        and not sentence.rstrip().endswith(":")
        and not _holds_any(TextIndex(sentence, kept), kept)
    ]
    dropped: set[int] = set()
    size = estimate_text_tokens(text)
    for index in reversed(idle):
        if size <= max_tokens:
            break
        dropped.add(index)
        size -= (len(sentences[index]) + len(separators[index])) // 4
    return "".join(
        sentence + separator
        for i, (sentence, separator) in enumerate(zip(sentences, separators, strict=True))
        if i not in dropped
    ).strip()


def with_free_room(
    text: str, missing: Sequence[Detail], max_tokens: int, kept: Sequence[Detail] = ()
) -> str:
    """``text`` followed by the missing details that fit within ``max_tokens`` (pure).

    Room is made by taking out sentences of ``text`` that carry none of the ``kept``
    details (:func:`without_idle_sentences`); a sentence that carries one is never cut.
    """
    needed = estimate_text_tokens(render_section(missing)) + 1
    body = without_idle_sentences(text, kept, max(0, max_tokens - needed))
    chosen = fit(missing, max_tokens - estimate_text_tokens(body) - 1)
    if not chosen:
        return text
    return f"{body}\n{render_section(chosen)}" if body else render_section(chosen)


def with_verbatim_section(
    text: str, missing: Sequence[Detail], max_tokens: int, kept: Sequence[Detail] = ()
) -> str:
    """``text`` followed by the missing details, the whole within ``max_tokens`` (pure).

    The details go in by priority (:func:`by_priority`) while they fit in what the text
    leaves free, or in half of the cap when the text fills it. Room is made first by
    taking out sentences that carry none of the ``kept`` details, then by cutting the
    text at a line boundary. The result is deterministic for the same input.
    """
    if not missing:
        return _trim(text, max_tokens)
    needed = estimate_text_tokens(render_section(missing)) + 1
    text = without_idle_sentences(text, kept, max(max_tokens // 2, max_tokens - needed))
    own = estimate_text_tokens(text)
    section = render_section(fit(missing, max(max_tokens - own - 1, max_tokens // 2)))
    if not section:
        return _trim(text, max_tokens)
    body = _trim(text, max(0, max_tokens - estimate_text_tokens(section) - 1))
    return f"{body}\n{section}" if body else section
