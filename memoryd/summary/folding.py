"""Folding items: the previous head's items merged with the new ones, and fitted to the
summary's cap (pure; docs/design.md#summary-items).

An item is carried whole or not at all. When the cap forces a choice, routine items go
first, oldest first, counted in one aggregate line; then the aggregate; then resolved
items, oldest first; then open next steps, findings, changes, decisions and failures, in
that order, oldest first. A failure that a later call of the same command resolved is
marked resolved, not deleted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace

from memoryd.summary.items import (
    CALL_LEAD,
    HEADERS,
    OTHER,
    RESOLVED_BY_LATER_CALL,
    TITLES,
    Head,
    HeadItem,
    item_key,
    render_item,
)
from memoryd.transcript.messages import shorten

DROP_ORDER = ("next", "finding", "change", "decision", "failure")
"""Open items that are not routine, the first to give way first (once nothing routine and
nothing resolved is left)."""
MAX_FAMILIES = 3
"""Families an aggregate names; the rest are counted as ``other``."""
MIN_TASK_CHARS = 60
_PATHY = re.compile(r"[\w.-]*/[\w./*-]*")


def fold(previous: Sequence[HeadItem], new: Sequence[HeadItem]) -> list[HeadItem]:
    """The previous items with the new ones after them, oldest first (pure).

    A new item replaces an earlier one with the same kind and key (the newer state of the
    same call, or the same sentence again); aggregates add up. An open failure is marked
    resolved when a later call with its key did not fail."""
    merged: dict[tuple[str, str], HeadItem] = {}
    aggregate: HeadItem | None = None
    for item in [*previous, *new]:
        if item.aggregate:
            aggregate = item if aggregate is None else _combined(aggregate, item)
            continue
        slot = ("failure" if item.kind == "failure" else item.kind, item.key)
        if item.kind != "failure":
            open_failure = merged.get(("failure", item.key))
            if (
                open_failure is not None
                and open_failure.resolved is None
                and item.kind
                in (
                    "routine",
                    "change",
                )
            ):
                merged[("failure", item.key)] = replace(
                    open_failure, resolved=RESOLVED_BY_LATER_CALL
                )
        merged.pop(slot, None)
        merged[slot] = item
    items = list(merged.values())
    return [aggregate, *items] if aggregate is not None else items


def _combined(a: HeadItem, b: HeadItem) -> HeadItem:
    counts: Counter[str] = Counter(dict(a.families))
    counts.update(dict(b.families))
    recall = b.recall or a.recall
    return HeadItem("routine", "", None, None, _families(counts), a.remarks + b.remarks, recall)


def _families(counts: Counter[str]) -> tuple[tuple[str, int], ...]:
    """The :data:`MAX_FAMILIES` largest families, the rest counted as ``other`` (pure)."""
    other = counts.pop(OTHER, 0)
    ranked = sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))
    other += sum(count for _, count in ranked[MAX_FAMILIES:])
    return (*ranked[:MAX_FAMILIES], *(((OTHER, other),) if other else ()))


def family(text: str) -> str:
    """What a routine call is counted under in an aggregate (pure): its command's first
    word and the folder of its first path (``pytest tests/misc/*``), or its first words."""
    label = item_key(text)
    words = label.split()
    if not words:
        return "…"
    path = next((w for w in words[1:] if _PATHY.fullmatch(w)), None)
    if path is not None:
        folder = path.rsplit("/", 1)[0] if "/" in path.strip("/") else path
        return f"{words[0]} {folder}/*"
    return " ".join(words[:2])[:40]


class _Recall:
    """The word to search the archive for the routine calls given way, grown one call at
    a time: for the family with the most calls, the longest common start of their labels'
    last words when it says something (four characters or more, ``test_mod``), else that
    family's command."""

    def __init__(self, known: str = "") -> None:
        self.common: dict[str, str] = {}
        self.known = known

    def add(self, item: HeadItem, name: str) -> None:
        words = item_key(item.text).split()
        if not words:
            return
        end = words[-1].rsplit("/", 1)[-1]
        # The earlier aggregate's word, when it names these too, is where the start is.
        start = _common_start(self.known, end)
        common = self.common.setdefault(name, start if len(start) >= 4 else end)
        while not end.startswith(common):
            common = common[:-1]
        self.common[name] = common

    def term(self, counts: Counter[str]) -> str:
        named = [name for name, _ in counts.most_common() if name in self.common]
        if not named:
            return self.known
        common = self.common[named[0]].rstrip("_.-")
        return common if len(common) >= 4 else named[0].split()[0]


def _common_start(a: str, b: str) -> str:
    """The longest start ``a`` and ``b`` share, character by character (pure)."""
    at = 0
    while at < min(len(a), len(b)) and a[at] == b[at]:
        at += 1
    return a[:at]


def head_chars(head: Head, style: str) -> int:
    """Characters of :func:`render_head`'s text, without rendering it (pure)."""
    header = HEADERS["rolling" if style == "rolling" else "narrative"]
    chars = len(header)
    if head.task:
        chars += len("\n- Task: ") + len(head.task)
    kinds = {item.kind for item in head.items}
    chars += sum(len(TITLES[kind]) + 1 for kind in kinds)
    chars += sum(len(render_item(item)) + 3 for item in head.items)
    return chars


class _Budget:
    """The characters a head takes, kept up to date as items give way (one pass)."""

    def __init__(self, task: str | None, items: Sequence[HeadItem], style: str) -> None:
        header = HEADERS["rolling" if style == "rolling" else "narrative"]
        self.base = len(header) + (len("\n- Task: ") + len(task) if task else 0)
        self.kinds: Counter[str] = Counter(item.kind for item in items)
        self.items = sum(len(render_item(item)) + 3 for item in items)
        self.aggregate = 0

    @property
    def chars(self) -> int:
        titles = sum(len(TITLES[kind]) + 1 for kind, count in self.kinds.items() if count)
        return self.base + titles + self.items + self.aggregate

    def remove(self, item: HeadItem) -> None:
        self.kinds[item.kind] -= 1
        self.items -= len(render_item(item)) + 3


def fit(head: Head, budget: int, style: str) -> Head:
    """``head`` within ``budget`` tokens, items carried whole or given way in order (pure):
    routine items oldest first, counted in the aggregate; then the aggregate; then resolved
    items oldest first; then open ones by :data:`DROP_ORDER`, oldest first. The task line
    is shortened to fit, never dropped."""
    room = budget * 4 - 3
    task = head.task
    if task:
        task = shorten(task, max(MIN_TASK_CHARS, room // 8))
    items = list(head.items)
    if head_chars(Head(task, tuple(items)), style) <= room:
        return Head(task, tuple(items))
    earlier = next((item for item in items if item.aggregate), None)
    plain = [item for item in items if not item.aggregate]
    sizes = _Budget(task, plain, style)
    counts: Counter[str] = Counter(dict(earlier.families) if earlier else {})
    counts.pop(OTHER, None)
    other = dict(earlier.families).get(OTHER, 0) if earlier else 0
    remarks = earlier.remarks if earlier else 0
    recall = _Recall(earlier.recall if earlier else "")
    aggregate = earlier
    if aggregate is not None:
        sizes.kinds["routine"] += 1
        sizes.aggregate = len(render_item(aggregate)) + 3
    gone: set[int] = set()
    for item in plain:
        if sizes.chars <= room:
            break
        if item.kind != "routine":
            continue
        gone.add(id(item))
        sizes.remove(item)
        if CALL_LEAD.match(item.text) or "→" in item.text:
            name = family(item.text)
            counts[name] += 1
            recall.add(item, name)
        else:
            remarks += 1
        if aggregate is None:
            sizes.kinds["routine"] += 1
        merged = Counter(counts)
        merged[OTHER] += other
        term = recall.term(counts)
        aggregate = HeadItem("routine", "", None, None, _families(merged), remarks, term)
        sizes.aggregate = len(render_item(aggregate)) + 3
    if sizes.chars > room and aggregate is not None:
        aggregate = None
        sizes.kinds["routine"] -= 1
        sizes.aggregate = 0
    for victim in _victims([item for item in plain if id(item) not in gone]):
        if sizes.chars <= room:
            break
        gone.add(id(victim))
        sizes.remove(victim)
    kept = [item for item in plain if id(item) not in gone]
    if sizes.chars > room and task:
        task = shorten(task, max(8, room - len(HEADERS["narrative"]) - 10))
    return Head(task, (aggregate, *kept) if aggregate is not None else tuple(kept))


def _victims(items: Sequence[HeadItem]) -> Iterable[HeadItem]:
    """The order open and resolved items give way in (see :func:`fit`)."""
    yield from [item for item in items if item.resolved is not None]
    for kind in DROP_ORDER:
        yield from [item for item in items if item.resolved is None and item.kind == kind]


def missing_items(carried: Sequence[HeadItem], answer: Sequence[HeadItem]) -> list[HeadItem]:
    """The items of ``carried`` that are not routine and that no item of ``answer`` holds
    (pure): by its message's id, by its key, or by most of its words on one line (an LLM
    may reword; a failure's command and its error must still share a line)."""
    # Only an item that is not routine counts: a decision copied into the retention
    # check's verbatim lines is still lost as a decision (it would be the first to go).
    answer = [item for item in answer if item.kind != "routine"]
    sources = {item.source for item in answer if item.source}
    keys = {item.key for item in answer}
    shown = [render_item(item) for item in answer]
    lines = [(_words(line), line.casefold()) for line in shown]
    missing = []
    for item in carried:
        if item.kind == "routine" or item.aggregate:
            continue
        if (item.source and item.source in sources) or item.key in keys:
            continue
        words = _words(item.text)
        # A call is held only by a line that names its command: the same error of
        # another command is another item.
        label = item.key if CALL_LEAD.match(item.text) else ""
        if words and any(
            label in text and len(words & line) >= SAME_ITEM_SHARE * len(words)
            for line, text in lines
        ):
            continue
        missing.append(item)
    return missing


SAME_ITEM_SHARE = 0.6
"""Share of an item's words one line of a new head must hold to count as that item."""
_WORD = re.compile(r"[a-z0-9][a-z0-9_'./-]*")
_STOP_TEXT = (
    "a an the and or but to of in on at by for with from as is are was were be it its this that "
    "we i you he she they not no do did will would should can has have had then so also"
)
_STOP = frozenset(_STOP_TEXT.split())


def restored(answer: Sequence[HeadItem], missing: Sequence[HeadItem]) -> list[HeadItem]:
    """The answer's items with the ``missing`` ones put back before them (they are
    older), less the routine lines that only repeated one of them (pure)."""
    if not missing:
        return list(answer)
    back = [_words(item.text) for item in missing]
    kept = [
        item
        for item in answer
        if item.kind != "routine"
        or item.aggregate
        or not any(
            words and len(words & _words(item.text)) >= SAME_ITEM_SHARE * len(words)
            for words in back
        )
    ]
    return fold(missing, kept)


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.casefold())).difference(_STOP)
