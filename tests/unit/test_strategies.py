"""The strategies: the due check from the daemon's counts and from a job's lines, each
strategy's split (pure), and the choice of strategy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest
from conftest import SettingsFactory, encode_lines, generated_messages, make_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from split_checks import (
    MAX_LINE,
    boundary_kind,
    boundary_ok,
    conversations,
    genuine_user_turn,
    lines_of,
    running_call,
    straddling,
    summary,
    text_block,
    text_of_tokens,
    tool_result,
    tool_use,
)

from memoryd.boundaries import SplitPlan, valid_boundaries
from memoryd.compaction.job.finish import ineffective_text
from memoryd.compaction.job.run import plan_job
from memoryd.compaction.strategies import STRATEGIES, Counts, strategy_for
from memoryd.compaction.strategies.checkpoint import checkpoint_split
from memoryd.compaction.strategies.narrative import narrative_split
from memoryd.compaction.strategies.protocol import usage_due
from memoryd.compaction.strategies.rolling import rolling_due, rolling_split
from memoryd.config.sections import RollingSettings
from memoryd.config.settings import Settings, load_settings
from memoryd.conversation.lines import Line
from memoryd.conversation.reader import ConversationReader


def settings_for(strategy: str, **overrides: Any) -> Settings:
    flags = {"strategy": strategy, **{k.replace("__", "."): v for k, v in overrides.items()}}
    return load_settings(overrides=flags, env={}).settings


@pytest.mark.parametrize("name", ["narrative", "rolling", "checkpoint"])
def test_strategy_for_returns_the_named_strategy_bound_to_the_settings(
    name: str, make_settings: SettingsFactory
) -> None:
    """Every configured strategy has a module, and it answers to its own name."""
    strategy = strategy_for(make_settings(strategy=name))
    assert strategy.name == name
    assert set(STRATEGIES) == {"narrative", "rolling", "checkpoint"}


def test_each_strategy_has_its_own_trigger(make_settings: SettingsFactory) -> None:
    """Narrative and rolling: summarize_at (rolling counts messages too); checkpoint:
    compact_at."""
    settings = make_settings(summarize_at=0.75, **{"checkpoint.compact_at": 0.9})
    triggers = {
        name: strategy_for(settings.model_copy(update={"strategy": name})).trigger
        for name in STRATEGIES
    }
    assert triggers == {"narrative": 0.75, "checkpoint": 0.9, "rolling": 0.75}


def counts(tokens: int) -> Counts:
    """Ten messages holding ``tokens`` in all."""
    return Counts(10, tokens, [tokens // 10] * 10, False)


def test_usage_due_is_strict_and_waits_for_growth_after_an_ineffective_job() -> None:
    """Due only strictly above the trigger; after an ineffective job at 90,000 tokens,
    not again until 5% of the budget more."""
    assert not usage_due(counts(80_000), 100_000, 0.80, None).due
    assert usage_due(counts(80_001), 100_000, 0.80, None).due
    assert not usage_due(counts(94_999), 100_000, 0.80, 90_000).due
    assert usage_due(counts(95_000), 100_000, 0.80, 90_000).due
    assert usage_due(counts(80_000), 100_000, 0.80, None).reason == (
        "usage 80% is not above the 80% trigger"
    )


def test_checkpoint_split_takes_every_message_and_nothing_after_a_lone_checkpoint() -> None:
    """The checkpoint strategy compacts the whole conversation, folding the head in;
    a conversation that is only a checkpoint has nothing to compact."""
    lines = lines_of([summary(), *generated_messages(6, 50)])
    plan = checkpoint_split(lines)
    assert plan == SplitPlan(
        keep_from=7,
        summarized_count=6,
        summarized_tokens=sum(line.tokens for line in lines),
        kept_tokens=0,
        folds_previous_summary=True,
    )
    assert checkpoint_split(lines[:1]) is None
    assert checkpoint_split([]) is None


def test_plan_job_checks_the_trigger_unless_forced(make_settings: SettingsFactory) -> None:
    """Below the trigger a job has nothing to do (and says why); forced, it splits anyway."""
    lines = lines_of(generated_messages(10, 100))
    strategy = strategy_for(make_settings(token_limit=2 * sum(line.tokens for line in lines)))
    assert plan_job(lines, strategy, force=False) == "usage 50% is not above the 80% trigger"
    plan = plan_job(lines, strategy, force=True)
    assert isinstance(plan, SplitPlan)
    assert plan.keep_from == 6


def test_ineffective_text_names_usage_the_limit_and_the_trigger() -> None:
    """What HEARTBEAT.md says after an ineffective job: the numbers, not just a word."""
    assert ineffective_text(10_500, 12_000, 0.80) == (
        "usage still above the 80% trigger: ~10,500 of 12,000 tokens (88%), trigger 9,600"
    )


# --- the daemon's counts and a job's lines give the same answer --------------------------------

message_sizes = st.lists(st.integers(1, 400), min_size=0, max_size=45)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=message_sizes,
    with_summary=st.booleans(),
    calibration=st.sampled_from([0.8, 1.0, 1.25]),
    name=st.sampled_from(sorted(STRATEGIES)),
)
def test_property_due_from_the_daemons_counts_equals_due_from_the_lines(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    with_summary: bool,
    calibration: float,
    name: str,
) -> None:
    """The incremental reader's tally and a job's full read give the same due answer, for
    every strategy: the trigger is decided in one place."""
    roles = ("user", "assistant")
    messages = [make_message(i, roles[i % 2], "w " * size) for i, size in enumerate(sizes)]
    if with_summary:
        messages.insert(0, summary())
    settings = settings_for(
        name,
        token_limit=4_000,
        rolling__message_count_threshold=10,
        rolling__messages_to_summarize=5,
        rolling__token_threshold=600,
    )
    path = tmp_path_factory.mktemp("counts") / "conversation.jsonl"
    path.write_bytes(encode_lines(messages))
    reader = ConversationReader(path, MAX_LINE)
    reader.update()
    strategy = strategy_for(settings)
    from_tally = strategy.due(Counts.of_tally(reader.tally, calibration))
    from_lines = strategy.due(Counts.of_lines(lines_of(messages), calibration))
    assert from_tally == from_lines


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
    # Only the newest message fits (nearly): it is an assistant message, which a kept part
    # may start at, and the newest message is never summarized.
    assert tiny.keep_from == 9


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
            [
                make_message(0, "user", [text_block("start"), tool_result("z")]),
                make_message(1, "assistant", [tool_use("z"), tool_use("a")]),
                make_message(2, "user", [tool_result("a"), text_block()]),
                make_message(3, "user", [tool_result("a"), text_block()]),
            ],
            id="every-turn-cuts-a-tool-pair",
        ),
    ],
)
def test_narrative_split_is_none_when_there_is_no_safe_split(
    messages: list[dict[str, Any]],
) -> None:
    """No boundary after the first message that keeps tool pairs whole: None."""
    assert narrative_split(lines_of(messages), 0.40) is None


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


def test_rolling_keeping_none_may_split_at_the_last_message() -> None:
    """With recent_messages_to_keep 0 the split may fall on the newest message: here the
    only boundary, a user turn after a run of tool exchanges."""
    messages = [make_message(0, "user", "task")]
    for step in range(4):
        ident = f"t{step}"
        messages.append(make_message(len(messages), "assistant", [tool_use(ident)]))
        messages.append(make_message(len(messages), "user", [tool_result(ident), text_block()]))
    messages.append(make_message(len(messages), "user", "and now the docs"))
    lines = lines_of(messages)
    user_turns = [k for k in range(len(messages)) if boundary_kind(messages, k) == "user"]
    assert user_turns[-1] == len(lines) - 1
    plan = rolling_split(lines, messages_to_summarize=len(lines), recent_messages_to_keep=0)
    assert plan is not None and plan.keep_from == len(lines) - 1
    assert plan.kept_tokens == lines[-1].tokens
    # Keeping two, no user turn is left in range: the nearest call starts the kept part.
    two = rolling_split(lines, messages_to_summarize=len(lines), recent_messages_to_keep=2)
    assert two is not None and two.keep_from == len(lines) - 3


def test_rolling_is_none_when_keeping_10_leaves_nothing_to_summarize() -> None:
    """10 messages: keeping the newest 10 leaves no split point."""
    assert rolling_split(rolling_lines(10, 100), **WINDOW) is None


@pytest.mark.parametrize("count", [4, 10, 20])
def test_rolling_past_its_trigger_keeps_fewer_than_10_when_they_hold_more_than_the_cap(
    count: int,
) -> None:
    """Over the usage trigger, the newest 10 yield to the kept cap (as narrative's share
    does): a short conversation of big messages still gets a split, the newest kept."""
    lines = rolling_lines(count, 1_000)
    plan = rolling_split(lines, **WINDOW, max_kept_tokens=2_500)
    assert plan is not None
    assert 1 <= len(lines) - plan.keep_from <= 2
    assert sum(line.tokens for line in lines[plan.keep_from :]) <= 2_500


def test_rolling_past_its_trigger_keeps_the_newest_10_when_they_fit_the_cap() -> None:
    lines = rolling_lines(20, 100)
    plan = rolling_split(lines, **WINDOW, max_kept_tokens=5_000)
    assert plan is not None
    assert len(lines) - plan.keep_from >= 10


# --- properties: split validity ---------------------------------------------------------------


def _expected_split(
    messages: list[dict[str, Any]], proposed: int, low: int, high: int, preferred: tuple[int, int]
) -> int | None:
    """The boundary the rules name, computed from the raw messages: user turns before
    assistant messages, the preferred range before the whole one, nearest to ``proposed``
    and earlier on a tie, never past a running tool call."""
    running = running_call(messages)
    if running is not None:
        high = min(high, running)
    ranges = [(max(low, preferred[0]), min(high, preferred[1])), (low, high)]
    for first, last in ranges:
        for kind in ("user", "assistant"):
            found = [k for k in range(first, last + 1) if boundary_kind(messages, k) == kind]
            if found:
                return min(found, key=lambda k: (abs(k - proposed), k))
    return None


@settings(max_examples=300, deadline=None)
@given(messages=conversations(), keep_ratio=st.floats(0.05, 0.95))
def test_property_narrative_split_is_valid_nearest_and_complete(
    messages: list[dict[str, Any]], keep_ratio: float
) -> None:
    """Any split returned keeps tool pairs whole, never passes a running tool call, starts
    at a genuine user turn when one lies in the preferred range (else at an assistant
    message), is the nearest such boundary to the 60/40 point, and None means no boundary
    exists."""
    lines = lines_of(messages)
    n = len(messages)
    head = 1 if messages and messages[0].get("isSummary") else 0
    plan = narrative_split(lines, keep_ratio)
    if n - head < 2:
        assert plan is None
        return
    proposed = head + max(1, math.floor((n - head) * (1 - keep_ratio)))
    expected = _expected_split(
        messages, proposed, head + 1, n - 1, (head + 1, proposed + (n - proposed) // 2)
    )
    if expected is None:
        assert plan is None
        return
    assert plan is not None
    k = plan.keep_from
    assert k == expected
    assert boundary_kind(messages, k) is not None
    assert not straddling(messages, k)
    running = running_call(messages)
    assert running is None or k <= running
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
    """A rolling split keeps tool pairs whole, never passes a running tool call, keeps at
    least the newest ``keep``, is the boundary the rules name (nearest the oldest
    ``to_summarize``), and None means no boundary lies between the head and the newest
    ``keep`` (with ``keep`` 0, the last message included)."""
    plan = rolling_split(
        lines_of(messages), messages_to_summarize=to_summarize, recent_messages_to_keep=keep
    )
    n = len(messages)
    head = 1 if messages and messages[0].get("isSummary") else 0
    highest = n - keep
    proposed = min(head + to_summarize, highest)
    expected = _expected_split(
        messages, proposed, head + 1, min(highest, n - 1), (head + 1, highest)
    )
    if plan is None:
        assert expected is None
        return
    k = plan.keep_from
    assert k == expected
    assert boundary_kind(messages, k) is not None
    assert not straddling(messages, k)
    running = running_call(messages)
    assert running is None or k <= running
    assert len(messages) - k >= keep
    assert plan.summarized_count >= 1
