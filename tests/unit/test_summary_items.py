"""A summary as items, folded as items: the head's text round-trips to its items, and
any sequence of folds keeps every item that is not routine until the cap holds nothing
else, then gives way resolved items first, oldest first (docs/design.md#summary-items)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.summary.checkpoint import CheckpointSummary, as_items, as_lists, render_lists
from memoryd.summary.extractive import extractive_summary
from memoryd.summary.folding import fit, fold, missing_items
from memoryd.summary.items import (
    KINDS,
    RESOLVED_BY_LATER_CALL,
    SECTIONS,
    TITLES,
    Head,
    HeadItem,
    parse_head,
    render_head,
)
from memoryd.tokens import estimate_text_tokens

WORDS = st.sampled_from(["ledger", "batch", "parser", "flag", "cache", "index", "retry", "id"])


@dataclass(frozen=True)
class Spec:
    kind: str
    words: tuple[str, ...]
    resolved: bool
    source: bool


SPECS = st.builds(
    Spec,
    kind=st.sampled_from(KINDS),
    words=st.lists(WORDS, min_size=1, max_size=6).map(tuple),
    resolved=st.booleans(),
    source=st.booleans(),
)
ROUNDS = st.lists(st.lists(SPECS, min_size=0, max_size=12), min_size=1, max_size=12)


def made(spec: Spec, number: int) -> HeadItem:
    """A distinct item: a routine one is a call (it counts in an aggregate), the others
    sentences; only failures are resolved."""
    words = " ".join(spec.words)
    if spec.kind == "routine":
        text = f"Ran `pytest tests/misc/test_mod_{number}.py` → 5 passed, {words}"
    else:
        text = f"Item {number} of kind {spec.kind}: {words}"
    resolved = RESOLVED_BY_LATER_CALL if spec.resolved and spec.kind == "failure" else None
    # A routine item's line names no message (it is the first to give way).
    source = f"msg-{number:04d}" if spec.source and spec.kind != "routine" else None
    return HeadItem(spec.kind, text, source, resolved)


@settings(max_examples=100, deadline=None)
@given(rounds=ROUNDS, budget=st.integers(60, 600), style=st.sampled_from(["narrative", "rolling"]))
def test_any_sequence_of_folds_keeps_what_is_not_routine_until_only_that_is_left(
    rounds: list[list[Spec]], budget: int, style: str
) -> None:
    text: str | None = None
    number = 0
    for specs in rounds:
        new = []
        for spec in specs:
            new.append(made(spec, number))
            number += 1
        previous = parse_head(text).items if text else ()
        merged = fold(previous, new)
        head = fit(Head("Reconcile the ledger batches", tuple(merged)), budget, style)
        text = render_head(head, style)
        assert estimate_text_tokens(text) <= budget
        # The text is the store: it reads back as the items it was written from (by
        # kind: each section keeps its items' order).
        back = parse_head(text)
        assert back.task == head.task
        for kind in KINDS:
            assert [i for i in back.items if i.kind == kind] == [
                i for i in head.items if i.kind == kind
            ]

        kept = {(i.kind, i.text) for i in head.items if not i.aggregate}
        candidates = [i for i in merged if i.kind != "routine"]
        dropped = [i for i in candidates if (i.kind, i.text) not in kept]
        routine_left = any(i.kind == "routine" for i in head.items)
        if routine_left:
            assert not dropped, "an item that is not routine gave way to a routine one"
        if not dropped:
            continue
        resolved = [i for i in candidates if i.resolved is not None]
        kept_resolved = [i for i in resolved if (i.kind, i.text) in kept]
        if any(i.resolved is None for i in dropped):
            assert not kept_resolved, "an open item gave way before a resolved one"
        age = {(i.kind, i.text): at for at, i in enumerate(merged)}
        dropped_resolved = [age[(i.kind, i.text)] for i in dropped if i.resolved is not None]
        if dropped_resolved and kept_resolved:
            assert max(dropped_resolved) < min(age[(i.kind, i.text)] for i in kept_resolved)
        open_failures = [i for i in dropped if i.kind == "failure" and i.resolved is None]
        if open_failures:
            assert all(i.kind == "failure" and i.resolved is None for i in head.items)


@given(specs=st.lists(SPECS, max_size=20), style=st.sampled_from(["narrative", "rolling"]))
def test_a_head_round_trips_through_its_text(specs: list[Spec], style: str) -> None:
    items = tuple(made(spec, n) for n, spec in enumerate(specs))
    head = Head("Fix the importer", items)
    back = parse_head(render_head(head, style))
    assert back.task == head.task
    # Sections list items by kind; within a kind the order is kept.
    for kind in KINDS:
        assert [i for i in back.items if i.kind == kind] == [i for i in items if i.kind == kind]


def test_a_failure_a_later_run_passed_is_marked_resolved_not_deleted() -> None:
    failed = HeadItem(
        "failure",
        "Ran `pytest tests/pay` → exit 1, FAILED tests/pay/test_ledger.py::test_reconcile_batch "
        "- FooBarTimeoutError",
        "msg-0003",
    )
    passed = HeadItem("routine", "Ran `pytest tests/pay` → 60 passed")
    merged = fold([failed], [passed])
    assert merged[0].resolved == RESOLVED_BY_LATER_CALL and merged[0].text == failed.text
    text = render_head(Head("Fix the ledger", tuple(merged)), "narrative")
    assert (
        "- (resolved: passed later) Ran `pytest tests/pay` → exit 1, FAILED "
        "tests/pay/test_ledger.py::test_reconcile_batch - FooBarTimeoutError (#msg-0003)"
    ) in text.splitlines()


def test_routine_calls_give_way_oldest_first_counted_in_one_line() -> None:
    runs = [
        HeadItem("routine", f"Ran `pytest tests/misc/test_mod_{n}.py` → 5 passed")
        for n in range(14)
    ]
    failure = HeadItem("failure", "Ran `pytest tests/pay` → exit 1, FooBarTimeoutError", "m3")
    head = fit(Head("Fix the ledger", (runs[0], failure, *runs[1:])), 60, "narrative")
    text = render_head(head, "narrative")
    assert estimate_text_tokens(text) <= 60
    assert "- Ran `pytest tests/pay` → exit 1, FooBarTimeoutError (#m3)" in text
    [aggregate] = [i for i in head.items if i.aggregate]
    counted = sum(count for _, count in aggregate.families)
    assert counted + sum(1 for i in head.items if i.kind == "routine" and not i.aggregate) == 14
    assert "earlier routine calls: `pytest tests/misc/*`" in text
    assert "recall 'test_mod'" in text
    # The newest routine call is the last to go.
    shown = [i.text for i in head.items if i.kind == "routine" and not i.aggregate]
    assert shown == [r.text for r in runs[14 - len(shown) :]]


def test_an_item_reworded_on_one_line_is_carried_one_split_apart_is_missing() -> None:
    carried = [HeadItem("failure", "Ran `pytest tests/pay` → exit 1, FooBarTimeoutError", "m3")]
    reworded = parse_head("Failures:\n- pytest tests/pay exited 1 with FooBarTimeoutError")
    assert missing_items(carried, reworded.items) == []
    split = parse_head("- Ran `pytest` in tests/pay.\n- Errors: FooBarTimeoutError")
    assert missing_items(carried, split.items) == carried


def test_an_older_head_without_sections_is_read_line_by_line() -> None:
    older = (
        "Key points, oldest first:\n- Task: Fix the ledger\n"
        "- Ran `pytest tests/pay` → exit 1, FooBarTimeoutError\n"
        "- User: We decided to keep the batch size at 500.\n"
        "- Edit src/pay/ledger.py\n- Ran `ls` → names src/pay"
    )
    head = parse_head(older)
    assert head.task == "Fix the ledger"
    assert [i.kind for i in head.items] == ["failure", "decision", "change", "routine"]


def test_the_offline_summary_keeps_a_first_failure_through_many_folds() -> None:
    """The shape of the issue's report: one failing run early, then many passing ones:
    after 30 folds the failure still holds its test and its error on one line."""
    text = None
    for n in range(30):
        messages = tool_round(n, failing=n == 3)
        text = extractive_summary(messages, text, 300)
        assert estimate_text_tokens(text) <= 300
    assert text is not None
    [line] = [x for x in text.splitlines() if "test_reconcile_batch" in x]
    assert "FooBarTimeoutError" in line and line.endswith("(#m3-0)")
    # The passing runs that gave way, fold after fold, are counted under one search word.
    assert "earlier routine calls: `pytest tests/misc/*`" in text
    assert "recall 'test_mod'" in text


def tool_round(n: int, failing: bool) -> list[dict[str, object]]:
    output = (
        "FAILED tests/pay/test_ledger.py::test_reconcile_batch - FooBarTimeoutError\n"
        "1 failed, 59 passed in 41.20s\nexit code 1"
        if failing
        else f"{60 + n} passed in 12.0s"
    )
    command = f"pytest tests/misc/test_mod_{n}.py" if not failing else "pytest tests/pay"
    use = {"type": "tool_use", "id": f"t{n}", "name": "bash", "input": {"command": command}}
    result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": output}
    return [
        {"id": f"m{n}-0", "role": "assistant", "content": [use]},
        {"id": f"m{n}-1", "role": "user", "content": [result]},
    ]


_LIST = st.lists(st.text(min_size=1, max_size=30), max_size=4)


@given(st.fixed_dictionaries({name: _LIST for name in SECTIONS}))
def test_a_checkpoints_lists_are_a_rendering_of_its_items(lists: dict[str, list[str]]) -> None:
    """Five lists become items of their lists' kinds, and the items give the same lists
    back, in the same order."""
    summary = CheckpointSummary(**lists)
    items = as_items(summary)
    assert {item.kind for item in items} <= set(SECTIONS)
    assert as_lists(items) == summary
    assert as_lists(reversed(items)).model_dump() == {k: v[::-1] for k, v in lists.items()}


def test_the_checkpoint_text_renders_items_list_by_list_in_the_stored_format() -> None:
    items = [
        HeadItem("decisions", "Use SQLite."),
        HeadItem("completed", "Set up the repository."),
        HeadItem("completed", "`pytest -q`: 3 passed"),
        HeadItem("blockers", "Waiting for the staging database."),
    ]
    assert render_lists(items) == (
        "Completed:\n- Set up the repository.\n- `pytest -q`: 3 passed\n"
        "In progress: none\nPending: none\n"
        "Blockers:\n- Waiting for the staging database.\n"
        "Decisions:\n- Use SQLite."
    )


def test_a_narrative_head_never_reads_as_checkpoint_items() -> None:
    """The checkpoint's kinds have no section title of a narrative head: the text of a
    checkpoint read as a head gives no item of a checkpoint's kind."""
    text = render_lists([HeadItem(name, f"An item of {name}.") for name in SECTIONS])
    head = parse_head(text)
    assert head.items and not {item.kind for item in head.items} & set(SECTIONS)
    assert not set(SECTIONS) & set(TITLES)
