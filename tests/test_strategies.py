"""The strategy protocol: the due check from the daemon's counts and from a job's lines,
each strategy's split, and the choice of strategy (all pure)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SettingsFactory, encode_lines, generated_messages, make_message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memoryd.config import Settings, load_settings
from memoryd.conversation import ConversationReader, Line, split_lines
from memoryd.job import ineffective_text, plan_job
from memoryd.policy import SplitPlan
from memoryd.strategies import STRATEGIES, Counts, strategy_for
from memoryd.strategies.checkpoint import checkpoint_split
from memoryd.strategies.protocol import usage_due

MAX_LINE = 8 << 20


def lines_of(messages: list[dict[str, Any]]) -> list[Line]:
    return list(split_lines(encode_lines(messages), MAX_LINE))


def head_summary() -> dict[str, Any]:
    return make_message(0, "assistant", "[Summary of earlier conversation]\n\nold", isSummary=True)


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
    """Narrative: summarize_at; checkpoint: compact_at; rolling counts messages (None)."""
    settings = make_settings(summarize_at=0.75, **{"checkpoint.compact_at": 0.9})
    triggers = {
        name: strategy_for(settings.model_copy(update={"strategy": name})).trigger
        for name in STRATEGIES
    }
    assert triggers == {"narrative": 0.75, "checkpoint": 0.9, "rolling": None}


def test_usage_due_is_strict_and_waits_for_growth_after_an_ineffective_job() -> None:
    """Due only strictly above the trigger; after an ineffective job at 90,000 tokens,
    not again until 5% of the budget more."""

    def counts(tokens: int) -> Counts:
        return Counts(10, tokens, [tokens // 10] * 10, False)

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
    lines = lines_of([head_summary(), *generated_messages(6, 50)])
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
        messages.insert(0, head_summary())
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
