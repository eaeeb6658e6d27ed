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

from memoryd.summarizers.items import (
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


def _recall_term(items: Sequence[HeadItem]) -> str:
    """A word to search the archive for the routine items given way: the longest common
    start of their labels' last words, when it says something, else the first word."""
    ends = [item_key(i.text).split()[-1].rsplit("/", 1)[-1] for i in items if item_key(i.text)]
    if not ends:
        return ""
    common = ends[0]
    for end in ends[1:]:
        while not end.startswith(common):
            common = common[:-1]
    common = common.rstrip("_.-")
    if len(common) >= 4:
        return common
    return item_key(items[-1].text).split()[0] if item_key(items[-1].text) else ""


def _absorb(aggregate: HeadItem | None, dropped: Sequence[HeadItem]) -> HeadItem:
    calls = [item for item in dropped if CALL_LEAD.match(item.text) or "→" in item.text]
    remarks = len(dropped) - len(calls)
    counts = Counter(family(item.text) for item in calls)
    new = HeadItem("routine", "", None, None, _families(counts), remarks, _recall_term(calls))
    return new if aggregate is None else _combined(aggregate, new)


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


def fit(head: Head, budget: int, style: str) -> Head:
    """``head`` within ``budget`` tokens, items carried whole or given way in order (pure):
    routine items oldest first, counted in the aggregate; then the aggregate; then resolved
    items oldest first; then open ones by :data:`DROP_ORDER`, oldest first. The task line
    is shortened to fit, never dropped."""
    room = budget * 4 - 3
    task = head.task
    if task:
        task = _shorten(task, max(MIN_TASK_CHARS, room // 8))
    items = list(head.items)
    current = Head(task, tuple(items))
    if head_chars(current, style) <= room:
        return current
    aggregate = next((item for item in items if item.aggregate), None)
    plain = [item for item in items if not item.aggregate]
    routine = [item for item in plain if item.kind == "routine"]
    others = [item for item in plain if item.kind != "routine"]
    dropped: list[HeadItem] = []
    while routine:
        dropped.append(routine.pop(0))
        candidate = Head(task, (_absorb(aggregate, dropped), *routine, *others))
        if head_chars(candidate, style) <= room:
            return _ordered(candidate, items)
    if dropped or aggregate is not None:
        with_aggregate = Head(task, (_absorb(aggregate, dropped), *others))
        if head_chars(with_aggregate, style) <= room:
            return _ordered(with_aggregate, items)
    for victim in _victims(others):
        others.remove(victim)
        candidate = Head(task, tuple(others))
        if head_chars(candidate, style) <= room:
            return _ordered(candidate, items)
    if task and head_chars(Head(task, ()), style) > room:
        task = _shorten(task, max(8, room - len(HEADERS["narrative"]) - 10))
    return Head(task, ())


def _victims(items: Sequence[HeadItem]) -> Iterable[HeadItem]:
    """The order open and resolved items give way in (see :func:`fit`)."""
    yield from [item for item in items if item.resolved is not None]
    for kind in DROP_ORDER:
        yield from [item for item in items if item.resolved is None and item.kind == kind]


def _ordered(head: Head, original: Sequence[HeadItem]) -> Head:
    """``head`` with its items in the order of ``original`` (the aggregate first)."""
    rank = {id(item): index for index, item in enumerate(original)}
    items = sorted(head.items, key=lambda item: -1 if item.aggregate else rank.get(id(item), -1))
    return Head(head.task, tuple(items))


def _shorten(text: str, limit: int) -> str:
    one = " ".join(text.split())
    if len(one) <= limit:
        return one
    cut = one[: max(1, limit - 1)]
    if " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(",;: ") + "…"


def missing_items(carried: Sequence[HeadItem], answer: Sequence[HeadItem]) -> list[HeadItem]:
    """The items of ``carried`` that are not routine and that no item of ``answer`` holds
    (pure): by its message's id, by its key, or by most of its words on one line (an LLM
    may reword; a failure's command and its error must still share a line)."""
    sources = {item.source for item in answer if item.source}
    keys = {item.key for item in answer}
    lines = [_words(render_item(item)) for item in answer]
    missing = []
    for item in carried:
        if item.kind == "routine" or item.aggregate:
            continue
        if (item.source and item.source in sources) or item.key in keys:
            continue
        words = _words(item.text)
        if words and any(len(words & line) >= SAME_ITEM_SHARE * len(words) for line in lines):
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


def _words(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.casefold())).difference(_STOP)
