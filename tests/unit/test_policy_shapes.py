"""The split rules over unusual shapes and at their exact limits (memoryd/boundaries.py):
reused tool ids, system, blank and malformed lines, orphan results, a split at the last
index, and the small figures (usage ratio, regrowth, kept tokens) at their edges."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from conftest import make_message
from hypothesis import given, settings
from hypothesis import strategies as st
from split_checks import (
    boundary_kind,
    conversations,
    lines_of,
    running_call,
    summary,
    text_of_tokens,
    tool_result,
    tool_use,
)

from memoryd.boundaries import (
    Boundary,
    SplitPlan,
    _nearest,
    boundaries,
    earliest_within,
    head_summary_count,
    inside_turn,
    plan_for,
    running_tool_call,
    safe_split,
    valid_boundaries,
)
from memoryd.levels import detect_threshold, may_retry_after_ineffective, usage_ratio


@dataclass(frozen=True)
class Thresholds:
    warning_at: float
    critical_at: float


def test_the_levels_come_from_a_config_unless_given_explicitly() -> None:
    config = Thresholds(0.5, 0.6)
    assert detect_threshold(0.55, config) == "warning"
    assert detect_threshold(0.6, config) == "critical"
    assert detect_threshold(0.45, config) == "normal"
    assert detect_threshold(0.55, config, warning_at=0.56) == "normal"
    assert detect_threshold(0.65, config, critical_at=0.7) == "warning"


def test_usage_ratio_is_rounded_to_four_places_and_zero_without_a_budget() -> None:
    assert usage_ratio(1, 3) == 0.3333
    assert usage_ratio(2, 3) == 0.6667
    assert usage_ratio(150, 100) == 1.5
    assert usage_ratio(1, 1) == 1.0
    assert usage_ratio(5, 0) == 0.0
    assert usage_ratio(5, -10) == 0.0


def test_a_retry_after_an_ineffective_job_needs_at_least_one_token_of_growth() -> None:
    """With a budget so small that 5% of it is no token, one more token is enough."""
    assert may_retry_after_ineffective(101, 100, 10)
    assert not may_retry_after_ineffective(100, 100, 10)
    assert may_retry_after_ineffective(121, 100, 400)
    assert not may_retry_after_ineffective(119, 100, 400)


def test_earliest_within_at_its_exact_limits() -> None:
    """Three messages of 10 tokens: a cap of 20 keeps the newest two, 19 the newest one,
    30 all, 9 none (the newest alone is over)."""
    lines = lines_of([make_message(k, "user", text_of_tokens(10)) for k in range(3)])
    assert [x.tokens for x in lines] == [10, 10, 10]
    assert earliest_within(lines, 30) == 0
    assert earliest_within(lines, 29) == 1
    assert earliest_within(lines, 20) == 1
    assert earliest_within(lines, 19) == 2
    assert earliest_within(lines, 10) == 2
    assert earliest_within(lines, 9) == 3
    assert earliest_within([], 0) == 0


def test_a_plan_keeping_everything_after_the_head_folds_it() -> None:
    lines = lines_of([summary(), make_message(1, "user", "a"), make_message(2, "assistant", "b")])
    assert head_summary_count(lines) == 1
    assert plan_for(lines, 1) == SplitPlan(
        keep_from=1,
        summarized_count=0,
        summarized_tokens=lines[0].tokens,
        kept_tokens=lines[1].tokens + lines[2].tokens,
        folds_previous_summary=True,
    )
    plain = lines[1:]
    assert head_summary_count(plain) == 0 and head_summary_count([]) == 0
    assert plan_for(plain, 1).folds_previous_summary is False
    assert plan_for(plain, 1).summarized_count == 1


def odd_lines() -> list[dict[str, Any] | bytes]:
    """A task, a system line, an exchange, a malformed line, an orphan result, a blank
    line, a summary in the middle, another exchange, a user turn."""
    return [
        make_message(0, "user", "task"),
        make_message(1, "system", "You are careful."),
        make_message(2, "assistant", [tool_use("a")]),
        make_message(3, "user", [tool_result("a")]),
        b"{not json\n",
        make_message(5, "user", [tool_result("gone")]),
        make_message(6, "user", "   "),
        make_message(7, "assistant", "[Summary]", isSummary=True),
        make_message(8, "assistant", [tool_use("b")]),
        make_message(9, "user", [tool_result("b")]),
        make_message(10, "user", "go on"),
    ]


def test_system_malformed_orphan_and_summary_lines_are_no_split_points() -> None:
    """Only genuine user turns (the blank one included: it is the user's) and calls that
    are not summaries may start the kept part; a system line, a line that is not JSON,
    an orphan result and a summary may not, nor a result parted from its call."""
    lines = lines_of(odd_lines())
    assert boundaries(lines) == [
        "user", None, "assistant", None, None, None, "user", None, "assistant", None, "user",
    ]  # fmt: skip
    assert valid_boundaries(lines) == [k in (0, 6, 10) for k in range(11)]
    assert running_tool_call(lines) is None
    assert safe_split(lines, 4) == 6
    assert safe_split(lines, 4, highest=5) == 2
    assert safe_split(lines, 4, lowest=3, highest=5) is None


def test_a_split_may_fall_on_the_last_message() -> None:
    """The last index is in range by default and when ``highest`` names it or passes it."""
    lines = lines_of(odd_lines())
    assert safe_split(lines, 10, lowest=9) == 10
    assert safe_split(lines, 10, lowest=9, highest=10) == 10
    assert safe_split(lines, 10, lowest=9, highest=50) == 10
    assert safe_split(lines, 10, lowest=9, highest=9) is None


def test_the_nearest_boundary_is_found_at_any_distance() -> None:
    kinds: list[Boundary | None] = [None, None, None, "user"]
    assert _nearest(kinds, "user", 0, 0, 3) == 3
    assert _nearest(kinds, "user", 3, 0, 3) == 3
    assert _nearest(kinds[::-1], "user", 3, 0, 3) == 0
    assert _nearest(kinds, "assistant", 0, 0, 3) is None


def test_a_running_call_with_a_reused_id_is_still_running() -> None:
    """Calls numbered from 1 in each run: an older result of ``call_1`` does not answer
    the newest call of that id."""
    messages = [make_message(0, "user", "task")]
    for _ in range(2):
        messages.append(make_message(len(messages), "assistant", [tool_use("call_1")]))
        messages.append(make_message(len(messages), "user", [tool_result("call_1")]))
    messages.append(make_message(len(messages), "assistant", [tool_use("call_1")]))
    lines = lines_of(messages)
    assert running_tool_call(lines) == 5
    assert safe_split(lines, 5) == 5
    messages.append(make_message(len(messages), "user", [tool_result("call_1")]))
    assert running_tool_call(lines_of(messages)) is None


def test_a_turn_is_answered_only_when_each_of_its_calls_is() -> None:
    """Two calls answered on two lines: not running; one of them answered: running."""
    messages = [
        make_message(0, "user", "task"),
        make_message(1, "assistant", [tool_use("a"), tool_use("b")]),
        make_message(2, "user", [tool_result("a")]),
        make_message(3, "user", [tool_result("b")]),
    ]
    assert running_tool_call(lines_of(messages)) is None
    assert running_tool_call(lines_of(messages[:3])) == 1
    assert running_tool_call(lines_of([*messages[:2], messages[3]])) == 1
    assert running_tool_call(lines_of(messages[:1])) is None


def test_a_turn_spans_blank_lines_but_a_system_line_ends_it() -> None:
    thought = {"type": "thinking", "thinking": "hm", "signature": "s"}
    messages = [
        make_message(0, "user", "task"),
        make_message(1, "assistant", [thought]),
        make_message(2, "user", ""),
        make_message(3, "assistant", [tool_use("a")]),
        make_message(4, "system", "note"),
        make_message(5, "assistant", "done"),
    ]
    lines = lines_of(messages)
    assert inside_turn(lines) == [False, False, True, True, False, False]
    assert boundaries(lines) == ["user", "assistant", None, None, None, "assistant"]


def with_odd_lines(data: st.DataObject, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with system lines, blank user lines and orphan results inserted."""
    extra: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
        [
            {"role": "system", "content": "note"},
            {"role": "user", "content": "  "},
            {"role": "user", "content": [tool_result("orphan")]},
            {"role": "assistant", "content": ""},
        ]
    )
    for _ in range(data.draw(st.integers(0, 4))):
        at = data.draw(st.integers(0, len(messages)))
        messages.insert(at, {"id": f"odd-{at}", **data.draw(extra)})
    return messages


@settings(max_examples=200, deadline=None)
@given(data=st.data(), messages=conversations())
def test_property_boundaries_and_running_calls_match_the_rules(
    data: st.DataObject, messages: list[dict[str, Any]]
) -> None:
    """Over random conversations with reused ids, system lines, blank lines and orphan
    results: each index's boundary kind and the running call are the ones the rules name,
    computed from the raw messages."""
    messages = with_odd_lines(data, messages)
    lines = lines_of(messages)
    assert json.loads(json.dumps(messages)) == [x.message for x in lines]
    assert boundaries(lines) == [boundary_kind(messages, k) for k in range(len(messages))]
    assert running_tool_call(lines) == running_call(messages)
