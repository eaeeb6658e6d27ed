"""The pure core: levels, actions, events, triggers, split points and incremental counting."""

from __future__ import annotations

import itertools
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from conftest import SettingsFactory, encode_lines, generated_messages, make_message
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd import conversation
from memoryd.config import RollingSettings
from memoryd.conversation import ConversationReader, Line, split_lines
from memoryd.policy import (
    detect_threshold,
    failure_backoff,
    get_threshold_action,
    may_retry_after_ineffective,
    over_trigger,
    safe_split,
    should_emit_event,
    usage_ratio,
    valid_boundaries,
)
from memoryd.state import build_state
from memoryd.strategies import Counts
from memoryd.strategies.narrative import narrative_split
from memoryd.strategies.rolling import rolling_due, rolling_split
from memoryd.workspace import Workspace

MAX_LINE = 8 << 20


def lines_of(
    messages: Sequence[dict[str, Any] | bytes], max_line_bytes: int = MAX_LINE
) -> list[Line]:
    """Real parsed lines, as the job hands them to the policy."""
    return list(split_lines(encode_lines(messages), max_line_bytes))


def text_of_tokens(tokens: int) -> str:
    """Content whose message estimate is exactly ``tokens`` (chars/4 rounded up, plus 4)."""
    return "x" * ((tokens - 4) * 4)


def tool_use(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": "run", "input": {"cmd": "ls"}}


def tool_result(tool_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


def text_block(text: str = "and also this") -> dict[str, Any]:
    return {"type": "text", "text": text}


def summary(index: int = 0) -> dict[str, Any]:
    return make_message(
        index,
        "assistant",
        "[Summary of earlier conversation]\n\nold",
        isSummary=True,
        summarizedCount=12,
        archive=".memoryd/archive/a.jsonl",
    )


# --- independent checkers (computed from the raw messages, not from Line properties) ---


def genuine_user_turn(message: Mapping[str, Any]) -> bool:
    """A user message that is not a summary and not only tool results."""
    if message.get("role") != "user" or message.get("isSummary") is True:
        return False
    content = message.get("content")
    if not isinstance(content, list):
        return True
    blocks = [b for b in content if isinstance(b, Mapping)]
    return not blocks or any(b.get("type") != "tool_result" for b in blocks)


def _ids(messages: Sequence[Mapping[str, Any]], kind: str, key: str) -> set[str]:
    found: set[str] = set()
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            found |= {
                str(b[key])
                for b in content
                if isinstance(b, Mapping) and b.get("type") == kind and key in b
            }
    return found


def straddling(messages: Sequence[Mapping[str, Any]], k: int) -> set[str]:
    """Tool ids whose tool_use and tool_result lie on different sides of boundary k."""
    before, after = messages[:k], messages[k:]
    return (_ids(before, "tool_use", "id") & _ids(after, "tool_result", "tool_use_id")) | (
        _ids(before, "tool_result", "tool_use_id") & _ids(after, "tool_use", "id")
    )


def boundary_ok(messages: Sequence[Mapping[str, Any]], k: int) -> bool:
    return genuine_user_turn(messages[k]) and not straddling(messages, k)


# --- levels, actions, events ----------------------------------------------------------


@pytest.mark.parametrize(
    ("ratio", "level"),
    [
        (0.0, "normal"),
        (0.6999, "normal"),
        (0.70, "warning"),
        (0.7001, "warning"),
        (0.80, "warning"),
        (0.8499, "warning"),
        (0.85, "critical"),
        (0.8501, "critical"),
        (1.0, "critical"),
        (1.7, "critical"),
    ],
)
def test_level_is_warning_from_070_and_critical_from_085_inclusive(
    ratio: float, level: str
) -> None:
    """Both thresholds are inclusive: exactly 0.70 is warning, exactly 0.85 is critical."""
    assert detect_threshold(ratio) == level


@pytest.mark.parametrize(
    ("tokens", "level"),
    [(69_999, "normal"), (70_000, "warning"), (84_999, "warning"), (85_000, "critical")],
)
def test_state_level_boundaries_hold_for_token_counts(
    tokens: int, level: str, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    """70,000 of 100,000 tokens is warning and 85,000 critical; one token less is not
    (the level is not taken from the ratio rounded for display)."""
    state = build_state(
        Workspace(tmp_path),
        make_settings(),
        messages=10,
        tokens=tokens,
        summarizing=False,
        last_summary_at=None,
        now=0.0,
    )
    assert state.level == level
    assert state.action == get_threshold_action(state.level).action
    assert state.usage_ratio == usage_ratio(tokens, 100_000)


def test_custom_thresholds_move_the_levels() -> None:
    """warning_at / critical_at are honoured instead of the defaults."""
    assert detect_threshold(0.5, warning_at=0.5, critical_at=0.6) == "warning"
    assert detect_threshold(0.6, warning_at=0.5, critical_at=0.6) == "critical"
    assert detect_threshold(0.49, warning_at=0.5, critical_at=0.6) == "normal"


@pytest.mark.parametrize(
    ("level", "action", "words"),
    [
        ("normal", "none", "continue working"),
        ("warning", "prepare_handoff", "70%"),
        ("critical", "force_return", "85%"),
    ],
)
def test_each_level_has_its_action_and_message(level: str, action: str, words: str) -> None:
    """normal -> none, warning -> prepare_handoff, critical -> force_return, each explained."""
    result = get_threshold_action(level)  # type: ignore[arg-type]
    assert result.level == level
    assert result.action == action
    assert words in result.message


def test_threshold_event_is_emitted_only_when_the_level_changes() -> None:
    """Over a series of usages, should_emit_event is true exactly at the level changes."""
    ratios = [0.1, 0.5, 0.72, 0.75, 0.86, 0.9, 0.71, 0.2, 0.2]
    previous = None
    emitted = []
    for ratio in ratios:
        level = detect_threshold(ratio)
        if should_emit_event(previous, level):
            emitted.append(level)
        previous = level
    assert emitted == ["normal", "warning", "critical", "warning", "normal"]
    assert should_emit_event("warning", "warning") is False
    assert should_emit_event(None, "normal") is True


def test_trigger_is_strictly_above_summarize_at() -> None:
    """80,000 of 100,000 tokens at 0.80 is not over the trigger; 80,001 is."""
    assert not over_trigger(80_000, 100_000, 0.80)
    assert over_trigger(80_001, 100_000, 0.80)


# --- failure back-off and ineffective jobs -------------------------------------------------


def test_failure_backoff_starts_at_max_failures_doubles_and_is_capped() -> None:
    """No wait below max_consecutive_failures; then 30 s doubling, never above the cooldown."""
    waits = [failure_backoff(n, 3, 600.0) for n in range(0, 12)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3:8] == [30.0, 60.0, 120.0, 240.0, 480.0]
    assert waits[8:] == [600.0] * 4
    assert all(a <= b for a, b in itertools.pairwise(waits))


def test_after_an_ineffective_job_retry_waits_until_the_conversation_grew() -> None:
    """No retry until tokens grew by 5% of the budget since the ineffective job."""
    assert may_retry_after_ineffective(90_000, None, 100_000)
    assert not may_retry_after_ineffective(90_000, 90_000, 100_000)
    assert not may_retry_after_ineffective(94_999, 90_000, 100_000)
    assert may_retry_after_ineffective(95_000, 90_000, 100_000)


# --- narrative split -------------------------------------------------------------------------


def test_narrative_split_keeps_the_newest_40_percent() -> None:
    """100 alternating messages: the oldest 60 are summarized, the newest 40 kept."""
    lines = lines_of(generated_messages(100, 200))
    plan = narrative_split(lines, 0.40)
    assert plan is not None
    assert plan.keep_from == 60
    assert plan.summarized_count == 60
    assert plan.summarized_tokens == sum(line.tokens for line in lines[:60])
    assert plan.kept_tokens == sum(line.tokens for line in lines[60:])
    assert not plan.folds_previous_summary


def test_narrative_split_on_an_assistant_message_moves_to_the_nearest_user_turn() -> None:
    """9 messages: 60% lands on index 5 (assistant); the split moves to index 4 (user)."""
    lines = lines_of(generated_messages(9, 100))
    plan = narrative_split(lines, 0.40)
    assert plan is not None
    assert plan.keep_from == 4
    assert lines[4].role == "user"


def test_narrative_split_skips_user_messages_that_only_carry_tool_results() -> None:
    """A user message made only of tool_result blocks is not a genuine user turn."""
    messages = generated_messages(10, 100)
    messages[5] = make_message(5, "assistant", [tool_use("t1")])
    messages[6] = make_message(6, "user", [tool_result("t1")])
    plan = narrative_split(lines_of(messages), 0.40)
    assert plan is not None
    assert plan.keep_from == 4
    assert genuine_user_turn(messages[plan.keep_from])


def test_narrative_split_never_separates_a_tool_use_from_its_tool_result() -> None:
    """A genuine user turn between a tool_use and its tool_result is not a split point."""
    messages = generated_messages(12, 100)
    # tool_use at 3, its result at 8 inside a genuine (mixed) user turn: boundaries 4..8
    # would all cut that pair.
    messages[3] = make_message(3, "assistant", [text_block("running"), tool_use("long")])
    messages[8] = make_message(8, "user", [tool_result("long"), text_block("go on")])
    # The same again at 9/10, right after the pair: boundary 10 would cut it.
    messages[9] = make_message(9, "assistant", [tool_use("t2")])
    messages[10] = make_message(10, "user", [tool_result("t2"), text_block("next")])
    lines = lines_of(messages)
    plan = narrative_split(lines, 0.40)
    assert plan is not None
    assert plan.keep_from == 2
    assert not straddling(messages, plan.keep_from)
    assert [boundary_ok(messages, k) for k in range(12)] == valid_boundaries(lines)


def test_narrative_split_caps_the_kept_tokens_by_moving_the_split_later() -> None:
    """With max_kept_tokens, a kept 40% holding more than the cap moves the split later
    (still to a user turn) until the kept part fits; the newest message always stays."""
    lines = lines_of(generated_messages(10, 396))  # 103 tokens each
    assert narrative_split(lines, 0.40, max_kept_tokens=None).keep_from == 6  # type: ignore[union-attr]
    plan = narrative_split(lines, 0.40, max_kept_tokens=250)
    assert plan is not None
    assert plan.keep_from == 8
    assert plan.kept_tokens <= 250
    tiny = narrative_split(lines, 0.40, max_kept_tokens=1)
    assert tiny is not None
    assert tiny.keep_from == 8  # the last user turn: the newest message is never summarized


def test_narrative_split_folds_a_previous_summary_at_the_head() -> None:
    """A head summary is folded in and not counted among the summarized messages."""
    messages: list[dict[str, Any]] = [summary()]
    messages += [
        make_message(i, m["role"], m["content"])
        for i, m in enumerate(generated_messages(10, 100), start=1)
    ]
    plan = narrative_split(lines_of(messages), 0.40)
    assert plan is not None
    assert plan.folds_previous_summary
    assert plan.keep_from == 7
    assert plan.summarized_count == 6


@pytest.mark.parametrize(
    "messages",
    [
        pytest.param([], id="empty"),
        pytest.param(generated_messages(1, 100), id="one-message"),
        pytest.param([summary(), make_message(1, "user", "hi")], id="summary-and-one"),
        pytest.param(
            generated_messages(8, 100, first_role="assistant")[:1]
            + [make_message(i, "assistant", "x") for i in range(1, 8)],
            id="no-user",
        ),
        pytest.param(
            [make_message(0, "user", "start"), make_message(1, "assistant", [tool_use("a")])]
            + [make_message(i, "user", [tool_result("a")]) for i in range(2, 6)]
            + [
                make_message(6, "user", [tool_result("a"), text_block()]),
                make_message(7, "assistant", [tool_use("a")]),
            ],
            id="every-user-turn-cuts-a-tool-pair",
        ),
    ],
)
def test_narrative_split_is_none_when_there_is_no_safe_split(
    messages: list[dict[str, Any]],
) -> None:
    """No genuine user turn (after the first message) that keeps tool pairs whole: None."""
    assert narrative_split(lines_of(messages), 0.40) is None


def test_safe_split_prefers_the_earlier_boundary_on_a_tie_and_respects_bounds() -> None:
    """Equidistant valid boundaries resolve to the earlier one; out-of-range ones are ignored."""
    lines = lines_of(generated_messages(9, 50))  # users at 0, 2, 4, 6, 8
    assert safe_split(lines, 5) == 4
    assert safe_split(lines, 5, lowest=5) == 6
    assert safe_split(lines, 5, lowest=5, highest=5) is None


# --- rolling trigger and split -----------------------------------------------------------------

ROLLING = RollingSettings(
    message_count_threshold=30,
    messages_to_summarize=20,
    recent_messages_to_keep=10,
    token_threshold=15_000,
)
WINDOW = {"messages_to_summarize": 20, "recent_messages_to_keep": 10}


def rolling_lines(count: int, tokens_each: int, head_summary: bool = False) -> list[Line]:
    roles = ("user", "assistant")
    messages = [make_message(i, roles[i % 2], text_of_tokens(tokens_each)) for i in range(count)]
    if head_summary:
        messages = [summary(), *messages]
    return lines_of(messages)


def rolling_is_due(lines: Sequence[Line], calibration: float = 1.0) -> bool:
    return rolling_due(Counts.of_lines(lines, calibration), ROLLING)


def test_rolling_is_not_due_at_exactly_30_messages() -> None:
    """More than 30 messages are needed, however large the oldest 20 are."""
    assert not rolling_is_due(rolling_lines(30, 2_000))
    assert rolling_is_due(rolling_lines(31, 2_000))


def test_rolling_is_not_due_when_the_oldest_20_are_exactly_15000_tokens() -> None:
    """The token condition is strict too: 20 x 750 = 15,000 tokens is not over."""
    lines = rolling_lines(31, 750)
    assert sum(line.tokens for line in lines[:20]) == 15_000
    assert not rolling_is_due(lines)


def test_rolling_token_condition_counts_calibrated_tokens() -> None:
    """The oldest 20 are weighed after calibration: 15,000 estimated x 1.01 is over."""
    lines = rolling_lines(31, 750)
    assert not rolling_is_due(lines, calibration=1.0)
    assert rolling_is_due(lines, calibration=1.01)


def test_rolling_summarizes_the_oldest_20_when_both_conditions_are_exceeded() -> None:
    """31 messages and 15,020 tokens in the oldest 20: those 20 go, 11 stay."""
    lines = rolling_lines(31, 751)
    assert rolling_is_due(lines)
    plan = rolling_split(lines, **WINDOW)
    assert plan is not None
    assert plan.keep_from == 20
    assert plan.summarized_count == 20
    assert len(lines) - plan.keep_from == 11


def test_rolling_does_not_count_a_head_summary_as_a_message() -> None:
    """A summary + 30 messages is still 30 messages: not due; the split folds the summary."""
    assert not rolling_is_due(rolling_lines(30, 2_000, head_summary=True))
    lines = rolling_lines(31, 2_000, head_summary=True)
    assert rolling_is_due(lines)
    plan = rolling_split(lines, **WINDOW)
    assert plan is not None
    assert plan.folds_previous_summary
    assert plan.summarized_count == 20


@pytest.mark.parametrize("count", [12, 15, 21, 25])
def test_rolling_always_keeps_the_newest_10(count: int) -> None:
    """Even on a short conversation, at least recent_messages_to_keep stay verbatim."""
    lines = rolling_lines(count, 100)
    plan = rolling_split(lines, **WINDOW)
    assert plan is not None
    assert len(lines) - plan.keep_from >= 10


def test_rolling_is_none_when_keeping_10_leaves_nothing_to_summarize() -> None:
    """10 messages: keeping the newest 10 leaves no split point."""
    assert rolling_split(rolling_lines(10, 100), **WINDOW) is None


# --- properties: split validity ---------------------------------------------------------------

TOOL_IDS = ("t0", "t1", "t2", "t3")
blocks = st.one_of(
    st.sampled_from(["hi", "ok", "done"]).map(text_block),
    st.sampled_from(TOOL_IDS).map(tool_use),
    st.sampled_from(TOOL_IDS).map(tool_result),
    st.just({"type": "image", "source": {"type": "base64", "data": "AA=="}}),
)
messages_strategy = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant"]),
        "content": st.one_of(st.text(max_size=30), st.lists(blocks, max_size=3)),
    }
)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Random roles, tool_use/tool_result pairs (in any order), maybe a summary at the head."""
    body = draw(st.lists(messages_strategy, max_size=30))
    messages = [make_message(i, m["role"], m["content"]) for i, m in enumerate(body, start=1)]
    if draw(st.booleans()):
        messages.insert(0, summary())
    return messages


@settings(max_examples=300, deadline=None)
@given(messages=conversations(), keep_ratio=st.floats(0.05, 0.95))
def test_property_narrative_split_is_valid_nearest_and_complete(
    messages: list[dict[str, Any]], keep_ratio: float
) -> None:
    """Any split returned starts at a genuine user turn with no tool pair across it, is
    the valid boundary nearest the 60/40 point, and None means no valid boundary exists."""
    lines = lines_of(messages)
    head = 1 if messages and messages[0].get("isSummary") else 0
    plan = narrative_split(lines, keep_ratio)
    candidates = [k for k in range(head + 1, len(messages)) if boundary_ok(messages, k)]
    if len(messages) - head < 2 or not candidates:
        assert plan is None
        return
    assert plan is not None
    k = plan.keep_from
    assert k in candidates
    assert genuine_user_turn(messages[k])
    assert not straddling(messages, k)
    proposed = head + max(1, math.floor((len(messages) - head) * (1 - keep_ratio)))
    assert min(abs(c - proposed) for c in candidates) == abs(k - proposed)
    assert plan.summarized_count == k - head >= 1
    assert plan.folds_previous_summary == (head == 1)
    assert plan.summarized_tokens + plan.kept_tokens == sum(line.tokens for line in lines)


@settings(max_examples=200, deadline=None)
@given(
    messages=conversations(),
    to_summarize=st.integers(1, 25),
    keep=st.integers(0, 12),
)
def test_property_rolling_split_is_valid_and_keeps_the_recent_messages(
    messages: list[dict[str, Any]], to_summarize: int, keep: int
) -> None:
    """A rolling split is a valid boundary and keeps at least the newest ``keep``."""
    plan = rolling_split(
        lines_of(messages), messages_to_summarize=to_summarize, recent_messages_to_keep=keep
    )
    if plan is None:
        return
    k = plan.keep_from
    assert genuine_user_turn(messages[k])
    assert not straddling(messages, k)
    assert len(messages) - k >= keep
    assert plan.summarized_count >= 1


# --- property: incremental counting equals a full recount ---------------------------------------

SMALL_MAX_LINE = 120


def _json_line(text: str, role: str) -> bytes:
    return encode_lines([{"id": "x", "role": role, "content": text}])


raw_lines = st.one_of(
    st.builds(_json_line, st.text(max_size=40), st.sampled_from(["user", "assistant"])),
    st.builds(_json_line, st.text(min_size=SMALL_MAX_LINE, max_size=200), st.just("user")),
    st.sampled_from(
        [
            b"not json at all\n",
            b"[1, 2, 3]\n",
            b'{"role": "user", "content": \n',
            b'{"role":"user","content":"bad \xff\xfe utf8"}\n',
            b"\n",
            b"\xc3\x28\n",
        ]
    ),
)


@st.composite
def appended_files(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    """File contents (lines, maybe a torn tail) and the byte offsets where appends stop."""
    data = b"".join(draw(st.lists(raw_lines, max_size=20)))
    data += draw(st.binary(max_size=30).filter(lambda b: b"\n" not in b))
    cuts = sorted(set(draw(st.lists(st.integers(0, len(data)), max_size=8))) | {len(data)})
    return data, cuts


@settings(max_examples=200, deadline=None)
@given(file=appended_files(), read_chunk=st.integers(1, 64))
def test_property_incremental_count_equals_a_full_recount(
    file: tuple[bytes, list[int]], read_chunk: int
) -> None:
    """After every append (torn tails, malformed lines, bad UTF-8, over-long lines), the
    reader's counts and lines equal split_lines over the complete prefix."""
    data, cuts = file
    with (
        tempfile.TemporaryDirectory() as folder,
        mock.patch.object(conversation, "READ_CHUNK", read_chunk),
    ):
        path = Path(folder) / "conversation.jsonl"
        path.write_bytes(b"")
        reader = ConversationReader(path, max_line_bytes=SMALL_MAX_LINE)
        seen: list[Line] = []
        written = 0
        for cut in cuts:
            with path.open("ab") as out:
                out.write(data[written:cut])
            written = cut
            update = reader.update()
            assert not update.reset
            seen.extend(update.new_lines)
            prefix = data[:cut]
            complete = prefix[: prefix.rfind(b"\n") + 1]
            full = list(split_lines(complete, SMALL_MAX_LINE))
            assert seen == full
            assert reader.offset == len(complete)
            assert reader.tally.messages == len(full)
            assert reader.tally.tokens == sum(line.tokens for line in full)
            assert reader.tally.malformed == sum(
                1 for line in full if line.problem not in (None, "opaque")
            )
