"""Which old tool outputs a masking takes: only as many as bring usage to its aim, those
that lose the fewest details for the tokens they free first (pure;
docs/design.md#least-loss).

A masking that takes every old output frees far more than a job needs and leaves the
agent placeholders where a short traceback or a search's few hits would have cost
little. Each candidate line is weighed by the details its placeholder drops (file paths,
error names, ``line N``, names defined or quoted) that no line it may not mask holds,
per token it frees: a 2,000-token file listing whose placeholder names its definitions
goes before a 300-token traceback naming ten frames. Ties go to the oldest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from memoryd.compaction.masking.rules import MEDIA_BLOCKS

if TYPE_CHECKING:
    from memoryd.conversation.lines import Line


class Candidate(Protocol):
    """A line a masking may rewrite (:class:`memoryd.compaction.masking.decide.MaskedLine`)."""

    @property
    def original(self) -> Line: ...
    @property
    def line(self) -> Line: ...
    @property
    def freed(self) -> int:
        """Tokens it frees: at least one (a masking that frees none is not made)."""
        ...


C = TypeVar("C", bound=Candidate)

_PATH = re.compile(r"(?<![\w/.~-])(?:~?/?[\w.-]+/)+[\w.-]*\w\.[A-Za-z]\w{0,5}(?![\w/])")
_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
_LINE = re.compile(r"\bline \d+\b")
_DEFINED = re.compile(r"\b(?:def|class|function)[ \t]+([A-Za-z_]\w{3,})")
_QUOTED = re.compile(r"`([A-Za-z_]\w*_\w+)`")
SCAN_CHARS = 40_000
"""Characters of one message searched for details (the head of a huge output)."""


def details(text: str) -> set[str]:
    """The details a reader would note in ``text`` (pure): file paths, error names,
    ``line N``, names defined (``def``, ``class``, ``function``) or quoted. Each kind is
    looked for only where a word it needs occurs (a few substring scans, not a regex of
    alternatives at every character)."""
    text = text[:SCAN_CHARS]
    found: set[str] = set()
    if "/" in text:
        for line in text.splitlines():
            if "/" in line:
                found.update(_PATH.findall(line))
    if "Error" in text or "Exception" in text:
        found.update(_ERROR.findall(text))
    if "line " in text:
        found.update(_LINE.findall(text))
    if "def " in text or "class " in text or "function " in text:
        found.update(_DEFINED.findall(text))
    if "`" in text:
        found.update(_QUOTED.findall(text))
    return found


def message_text(message: Mapping[str, Any] | None) -> str:
    """Every string a message holds (text, tool inputs and results), one per line; never
    an image's or a document's data."""
    return "" if message is None else "\n".join(_strings(message.get("content")))


def message_details(message: Mapping[str, Any] | None) -> set[str]:
    """:func:`details` of :func:`message_text`."""
    return details(message_text(message))


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            if not (isinstance(item, Mapping) and item.get("type") in MEDIA_BLOCKS):
                yield from _strings(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)


def choose(candidates: Sequence[C], lines: Sequence[Line], needed: int) -> tuple[C, ...]:
    """The ``candidates`` to mask so that they free at least ``needed`` tokens
    (uncalibrated), fewest details lost per token freed first, oldest first among equals;
    all of them when together they free no more (pure). The result keeps their order."""
    if needed <= 0:
        return ()
    if sum(m.freed for m in candidates) <= needed:
        return tuple(candidates)
    masked = {m.original.index for m in candidates}
    kept: set[str] = set()
    for line in lines:
        if line.index not in masked:
            kept |= message_details(line.message)
    ranked = sorted(
        candidates,
        key=lambda m: (_lost(m, kept) / m.freed, m.original.index),
    )
    chosen: list[C] = []
    freed = 0
    for candidate in ranked:
        if freed >= needed:
            break
        chosen.append(candidate)
        freed += candidate.freed
    return tuple(sorted(chosen, key=lambda m: m.original.index))


def _lost(candidate: Candidate, kept: set[str]) -> int:
    """The details of ``candidate``'s original that neither its placeholder (a file's
    outline, a traceback's exception) nor a line it may not mask still says."""
    after = message_text(candidate.line.message)
    before = message_details(candidate.original.message) - kept
    return len([detail for detail in before if detail not in after])
