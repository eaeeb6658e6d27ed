"""A summary as items (pure; docs/design.md#summary-items).

A narrative or rolling head is a task line, then sections of one-line items, each of a
kind (failure, decision, change, finding, next step, routine call) and, where it has
one, the id of the archived message it came from (``(#msg-0007)``). A checkpoint's items
have a list's name for kind (:data:`SECTIONS`); its five lists are their rendering
(:mod:`memoryd.summary.checkpoint`). The text is the
store: :func:`parse_head` reads a head back into items and :func:`render_head` writes
them, so a fold (:mod:`memoryd.summary.folding`) merges items instead of summarizing
the text again. A head without sections (an older one, an LLM's prose) is read line by
line, each line's kind guessed from its words (:func:`classify`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memoryd.transcript.cues import DECISION
from memoryd.transcript.outcomes import changes_files

KINDS = ("failure", "decision", "change", "finding", "next", "routine")
"""The kinds of item below the task line, in the order their sections are shown."""
TITLES = {
    "failure": "Failures:",
    "decision": "Decisions:",
    "change": "Changes:",
    "finding": "Findings:",
    "next": "Next steps:",
    "routine": "Routine:",
}
SECTIONS = ("completed", "in_progress", "pending", "blockers", "decisions")
"""The kinds of a checkpoint's items, one per list, in the order the lists are shown;
not in :data:`TITLES`, so a narrative or rolling head never reads one."""
HEADERS = {"narrative": "Key points, oldest first:", "rolling": "Earlier, in brief:"}
VERBATIM_TITLE = "Details kept verbatim:"
"""The retention check's section (:mod:`memoryd.summary.verbatim`): read as routine."""
RESOLVED_BY_LATER_CALL = "passed later"
OTHER = ""

_SOURCE = re.compile(r" \(#(?P<id>[\w.:-]{1,64})\)$")
_RESOLVED = re.compile(r"^\(resolved(?::\s*(?P<why>[^)]*))?\)\s*")
_AGGREGATE = re.compile(
    r"^(?P<count>\d+) earlier routine (?:calls|items)(?:: (?P<families>.*?))?"
    r"(?: and (?P<remarks>\d+) remarks?)?(?:; recall '(?P<recall>[^']*)')?$"
)
_FAMILY = re.compile(r"(?:`(?P<family>[^`]+)`|(?P<other>other)) \((?P<count>\d+)\)")
_TICKED = re.compile(r"`([^`]+)`")
_TIMES = re.compile(r" \(\d+ times\)")
_USED = re.compile(r"^(?:The assistant (?:used |ran )?)")
_FAILURE_HINT = re.compile(
    r"\bexit [1-9]\d*\b|\bFAILED\b|\bTraceback\b|\b[A-Z]\w*(?:Error|Exception)\b"
    r"|\bfail(?:s|ed|ing|ure)\b",
)
_CHANGE_HINT = re.compile(
    r"^(?:The assistant used )?(?:Edit|Write|MultiEdit|apply_?patch|str_replace_editor (?:create"
    r"|str_replace|insert))\b|\b(?:edited|wrote|created|renamed|changed|modified)\b",
    re.I,
)
_NEXT_HINT = re.compile(r"\b(next step|next,? (?:i|we)|i will|i'?ll|we will|todo|to-do)\b", re.I)
_FINDING_HINT = re.compile(
    r"\b(root cause|turns out|caused by|found that|the (?:bug|issue|problem|cause|fix) (?:is|was)"
    r"|fixed|resolved|now passes|tests? pass(?:es|ed)?)\b",
    re.I,
)
CALL_LEAD = re.compile(r"^(?:The assistant )?(?:ran |Ran )?`")


@dataclass(frozen=True, slots=True)
class HeadItem:
    """One item of a head. Aggregates (``families``/``remarks`` set) stand for the
    routine items that gave way, counted."""

    kind: str
    text: str
    source: str | None = None
    resolved: str | None = None
    """None while open; the reason ("" for none given) once a later call resolved it."""
    families: tuple[tuple[str, int], ...] = ()
    remarks: int = 0
    recall: str = ""

    @property
    def aggregate(self) -> bool:
        return bool(self.families or self.remarks)

    @property
    def key(self) -> str:
        """What makes two items the same one: a call's label, else the text."""
        return item_key(self.text)


@dataclass(frozen=True, slots=True)
class Head:
    """A head as items: the task (one line, may be None) and the items, oldest first."""

    task: str | None
    items: tuple[HeadItem, ...]


def item_key(text: str) -> str:
    """A call's label (its first backticked span, or what comes before its outcome, with
    no repeat count), else the case-folded text (pure)."""
    ticked = _TICKED.search(text) if CALL_LEAD.match(text) else None
    if ticked:
        return ticked[1].casefold()
    head = _USED.sub("", _TIMES.sub("", text.split(" → ", 1)[0]))
    return " ".join(head.casefold().split())


def classify(text: str) -> str:
    """The kind of a line that says none (an older head, an LLM's prose) (pure): a call
    whose outcome says it failed is a failure, one whose command changes files
    (:func:`memoryd.transcript.outcomes.changes_files`) a change."""
    if (_FAILURE_HINT.search(text) and "→" in text) or text.startswith(("FAILED", "Failed")):
        return "failure"
    if DECISION.search(text):
        return "decision"
    ticked = _TICKED.search(text) if CALL_LEAD.match(text) else None
    if _CHANGE_HINT.search(text) or (ticked is not None and changes_files(ticked[1])):
        return "change"
    if _FINDING_HINT.search(text):
        return "finding"
    if _NEXT_HINT.search(text):
        return "next"
    if _FAILURE_HINT.search(text):
        return "failure"
    return "routine"


def render_item(item: HeadItem) -> str:
    """An item's line, without its bullet (pure)."""
    if item.aggregate:
        return aggregate_text(item)
    text = item.text
    if item.resolved is not None:
        text = (f"(resolved: {item.resolved}) " if item.resolved else "(resolved) ") + text
    if item.source and item.kind != "routine":
        text += f" (#{item.source})"
    return text


def aggregate_text(item: HeadItem) -> str:
    """``14 earlier routine calls: `pytest tests/misc/*` (14); recall 'test_mod'`` (pure)."""
    calls = sum(count for _, count in item.families)
    text = f"{calls + item.remarks} earlier routine " + ("calls" if not item.remarks else "items")
    if item.families:
        text += ": " + ", ".join(
            f"other ({count})" if name == OTHER else f"`{name}` ({count})"
            for name, count in item.families
        )
    if item.remarks:
        text += f" and {item.remarks} remark" + ("s" if item.remarks > 1 else "")
    if item.recall:
        text += f"; recall '{item.recall}'"
    return text


def render_head(head: Head, style: str) -> str:
    """The head's text: its header, the task line, then one section per kind (pure)."""
    lines = [HEADERS["rolling" if style == "rolling" else "narrative"]]
    if head.task:
        lines.append(f"- Task: {head.task}")
    for kind in KINDS:
        shown = [item for item in head.items if item.kind == kind]
        if shown:
            lines.append(TITLES[kind])
            # An aggregate stands for the oldest routine items: it comes first.
            shown.sort(key=lambda item: not item.aggregate)
            lines.extend(f"- {render_item(item)}" for item in shown)
    return "\n".join(lines)


def parse_line(text: str, kind: str | None) -> HeadItem | None:
    """One item from its line (bullet taken off); ``kind`` from its section, or None to
    guess it (:func:`classify`) (pure)."""
    text = text.strip()
    if len(text) < 2:
        return None
    aggregate = _AGGREGATE.match(text)
    if aggregate:
        families = tuple(
            (m["family"] or OTHER, int(m["count"]))
            for m in _FAMILY.finditer(aggregate["families"] or "")
        )
        remarks = int(aggregate["remarks"] or 0)
        if not families and not remarks:
            remarks = int(aggregate["count"])
        return HeadItem("routine", "", None, None, families, remarks, aggregate["recall"] or "")
    source = _SOURCE.search(text)
    if source:
        text = text[: source.start()]
    resolved = _RESOLVED.match(text)
    why = None
    if resolved:
        why = (resolved["why"] or "").strip()
        text = text[resolved.end() :]
    return HeadItem(kind or classify(text), text, source["id"] if source else None, why)


def parse_head(text: str | None) -> Head:
    """A head's items from its text (pure): sections give their kind; the lines of a head
    without sections (an older one, an LLM's prose) are classified one by one; the
    retention check's verbatim lines are routine."""
    if not text:
        return Head(None, ())
    task: str | None = None
    items: list[HeadItem] = []
    kind: str | None = None
    titles = {title: name for name, title in TITLES.items()}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line in HEADERS.values():
            continue
        if line in titles:
            kind = titles[line]
            continue
        if line == VERBATIM_TITLE:
            kind = "routine"
            continue
        bullet = line.startswith(("- ", "* "))
        body = line[2:].strip() if bullet else line
        if body.startswith("Task:") and task is None:
            task = body.removeprefix("Task:").strip() or None
            continue
        pieces = [body] if bullet or kind else _sentences(body)
        for piece in pieces:
            item = parse_line(piece, kind)
            if item is not None:
                items.append(item)
    return Head(task, tuple(items))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
