"""Least loss: with masking on, a usage job summarizes only the smallest oldest part that
brings usage to its aim, and says so (memoryd/compaction/strategies/least_loss.py,
memoryd/compaction/job/run.py, memoryd/compaction/job/finish.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_transcripts import Transcript, generate, write_workspace
from cli_helpers import cli
from conftest import SettingsFactory
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.boundaries import boundaries, plan_for
from memoryd.compaction.job.request import JobRequest, JobResult
from memoryd.compaction.job.run import plan_job, run_job
from memoryd.compaction.masking.decide import masking_stage
from memoryd.compaction.strategies import strategy_for
from memoryd.compaction.strategies.least_loss import (
    job_text,
    least_split,
    summary_aim,
    summary_ceiling,
)
from memoryd.config.settings import Settings
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.pins import apply_pins, pinned_indices
from memoryd.published.heartbeat import HeartbeatManager
from memoryd.receipts.records import read_receipts
from memoryd.workspace import Workspace

STRATEGIES = ("narrative", "rolling", "checkpoint")
MAX_LINE = 8 << 20


def read_lines(folder: Path) -> list[Line]:
    return list(split_lines((folder / "conversation.jsonl").read_bytes(), MAX_LINE))


def job(folder: Path, config: Settings, **extra: Any) -> JobResult:
    return run_job(JobRequest(folder, config, reason="trigger", **extra))


def config_for(
    make_settings: SettingsFactory, transcript: Transcript, masking: bool, **extra: Any
) -> Settings:
    """95% of the budget, the task pinned, the offline summarizer."""
    return make_settings(
        keep_first=1,
        token_limit=int(transcript.tokens / 0.95),
        **{"masking.enabled": masking, "summarizer.backend": "extractive", **extra},
    )


# The pure split -----------------------------------------------------------------------


def _loop(seed: int = 4, messages: int = 160) -> list[Line]:
    transcript = generate("autonomous", seed, messages)
    return list(split_lines(b"".join(transcript.lines), MAX_LINE))


def _left(lines: list[Line], keep_from: int, pinned: frozenset[int], head: int) -> int:
    """Tokens left after summarizing [0, keep_from): the head, the pins, the kept part."""
    pins = sum(x.tokens for x in lines[:keep_from] if x.index in pinned)
    return head + pins + sum(x.tokens for x in lines[keep_from:])


@settings(max_examples=60, deadline=None)
@given(share=st.floats(0.0, 1.0), pins=st.sets(st.integers(0, 159), max_size=6))
def test_the_least_split_is_the_smallest_boundary_that_fits_within_the_share(
    share: float, pins: set[int]
) -> None:
    """Whatever the room: the split lies on a boundary no later than the share's, leaves
    at most the room when it is not the share itself, and no earlier boundary would."""
    lines = _loop()
    pinned = frozenset(pins)
    kinds = boundaries(lines)
    total = sum(x.tokens for x in lines)
    share_plan = strategy_for_narrative_share(lines)
    head = summary_ceiling(1024)
    room = int(total * share)
    plan = least_split(lines, share_plan, pinned, room, head)
    assert plan.keep_from <= share_plan.keep_from
    if plan.keep_from < share_plan.keep_from:
        assert kinds[plan.keep_from] is not None
        assert _left(lines, plan.keep_from, pinned, head) <= room
    earlier = [k for k in range(1, plan.keep_from) if kinds[k] is not None]
    assert all(_left(lines, k, pinned, head) > room for k in earlier)


def strategy_for_narrative_share(lines: list[Line]) -> Any:
    """The seed's 60% share, as the narrative strategy splits it."""
    from memoryd.compaction.strategies.narrative import narrative_split

    plan = narrative_split(lines, 0.4)
    assert plan is not None
    return plan


def test_a_room_nothing_but_the_share_meets_gives_the_share() -> None:
    lines = _loop()
    share = strategy_for_narrative_share(lines)
    assert least_split(lines, share, frozenset(), 0, 100) == share


def test_the_split_counts_the_summary_and_keeps_pins_as_kept() -> None:
    """A room the kept part meets only once the head's own size is counted moves the
    split later; a pinned message in the prefix counts as kept."""
    lines = _loop()
    share = plan_for(lines, len(lines) - 4)
    kinds = boundaries(lines)
    total = sum(x.tokens for x in lines)
    room = total // 2
    without_head = least_split(lines, share, frozenset(), room, 0)
    with_head = least_split(lines, share, frozenset(), room, 2000)
    assert with_head.keep_from > without_head.keep_from
    assert kinds[with_head.keep_from] is not None
    big = max(range(1, without_head.keep_from), key=lambda k: lines[k].tokens)
    pinned = least_split(lines, share, frozenset({big}), room, 0)
    assert pinned.keep_from > without_head.keep_from


def test_the_aim_lies_as_far_below_the_target_as_the_trigger_above_it() -> None:
    assert summary_aim(0.6, 0.8) == pytest.approx(0.40)
    assert summary_aim(0.6, 0.9) == pytest.approx(0.30)
    assert summary_aim(0.6, 0.62) == pytest.approx(0.55)
    assert summary_aim(0.9, 0.7) == pytest.approx(0.65)
    assert summary_aim(0.3, 0.8) == pytest.approx(0.05)


def test_the_words_say_how_many_and_why() -> None:
    assert job_text(19, 6, 0.55, 0.5312) == "masked 19, then summarized 6 to reach 0.55 (now 0.53)"
    assert job_text(19, 0, 0.6, 0.41) == "masked 19 to reach 0.60 (now 0.41)"
    assert job_text(0, 48, None, 0.43) == "summarized 48, the strategy's share (now 0.43)"
    assert job_text(0, 30, 0.55, 0.62, capped=True) == (
        "summarized 30, the strategy's share, to reach 0.55 (now 0.62)"
    )


# Jobs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_job_that_masking_leaves_above_its_target_summarizes_only_what_is_left(
    strategy: str, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """Masking on, the newest 50 outputs kept (masking leaves usage near 68%, above its
    60% target): the job masks, then summarizes fewer messages than the strategy's share
    and lands at or below the 40% a summary aims at; the receipt, HEARTBEAT.md and history
    say how many and why."""
    transcript = generate("autonomous", 11, 160)
    folder = write_workspace(tmp_path / "on", transcript)
    # Rolling's share is its oldest N messages: a large N, so that the share is enough.
    share = {"rolling.messages_to_summarize": 120} if strategy == "rolling" else {}
    config = config_for(make_settings, transcript, True, strategy=strategy, **{
        "masking.keep_recent": 50, **share})  # fmt: skip
    aim = 0.3 if strategy == "checkpoint" else 0.4
    result = job(folder, config)
    assert result.outcome == "completed", result.reason
    assert result.masked_messages > 0 and result.summarized_count > 0
    assert result.tokens_after <= aim * config.token_limit
    # The strategy's share of the same masked conversation is larger.
    off = write_workspace(tmp_path / "off", transcript)
    whole = job(off, config_for(make_settings, transcript, False, strategy=strategy, **share))
    assert 0 < result.summarized_count < whole.summarized_count
    [receipt] = read_receipts(Workspace(folder))
    usage = result.tokens_after / config.token_limit
    why = (
        f"masked {result.masked_messages}, then summarized {result.summarized_count} "
        f"to reach {aim:.2f} (now {usage:.2f})"
    )
    assert receipt.why == why and receipt.aim == pytest.approx(aim)
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.last_result is not None and heartbeat.last_result.startswith(why + ": ")
    assert result.reason.startswith(why + ": ")
    code, history = cli("history", str(folder))
    assert code == 0 and why in history
    code, out = cli("history", str(folder), "--json")
    assert code == 0 and json.loads(out)["receipts"][0]["why"] == why


def test_a_job_with_masking_on_never_summarizes_more_than_the_share(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """A target no split within the share can reach: the job takes the share and says so."""
    transcript = generate("text", 5, 160)
    folder = write_workspace(tmp_path / "ws", transcript)
    config = config_for(make_settings, transcript, True, **{"masking.target": 0.02})
    lines = read_lines(folder)
    stage = masking_stage(lines, config, sum(x.tokens for x in lines), 1.0, config.summarize_at)
    assert stage is not None and stage.decision == "summarize"
    masked = stage.masking.applied(lines)
    share = plan_job(masked, strategy_for(config), True)
    assert not isinstance(share, str)
    expected = apply_pins(masked, share, pinned_indices(masked, config.keep_first)).plan
    result = job(folder, config)
    assert result.summarized_count == expected.summarized_count > 0
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.why is not None and ", the strategy's share, to reach 0.05" in receipt.why


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_with_masking_off_a_job_summarizes_the_strategys_share_as_before(
    strategy: str, tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """masking.enabled = false: the split is the strategy's own, HEARTBEAT.md's result is
    the head's words alone, the receipt aims at nothing and says it took the share."""
    transcript = generate("autonomous", 13, 160)
    folder = write_workspace(tmp_path / "ws", transcript)
    config = config_for(make_settings, transcript, False, strategy=strategy)
    lines = read_lines(folder)
    plan = plan_job(lines, strategy_for(config), True)
    assert not isinstance(plan, str)
    expected = apply_pins(lines, plan, pinned_indices(lines, config.keep_first)).plan
    result = job(folder, config)
    assert result.summarized_count == expected.summarized_count
    assert result.masked_messages == 0
    [receipt] = read_receipts(Workspace(folder))
    assert receipt.aim is None and receipt.masked is None
    usage = result.tokens_after / config.token_limit
    assert receipt.why == (
        f"summarized {result.summarized_count}, the strategy's share (now {usage:.2f})"
    )
    heartbeat = HeartbeatManager(Workspace(folder)).get_status()
    assert heartbeat.last_result == result.reason
    assert not result.reason.startswith("summarized ")


def test_a_dry_run_names_the_aim(tmp_path: Path, make_settings: SettingsFactory) -> None:
    transcript = generate("autonomous", 11, 160)
    folder = write_workspace(tmp_path / "ws", transcript)
    before = (folder / "conversation.jsonl").read_bytes()
    config = config_for(make_settings, transcript, True, **{
        "masking.keep_recent": 50, "masking.min_freed": 0.99})  # fmt: skip
    result = job(folder, config, dry_run=True)
    assert result.outcome == "dry_run"
    assert "with one summary to reach 0.40 and keep" in result.reason
    assert (folder / "conversation.jsonl").read_bytes() == before


def _long_loop(folder: Path, config: Settings, transcript: Transcript) -> list[Any]:
    """Append ``transcript`` line by line; a usage job whenever usage passes the trigger,
    as the daemon would start one. Returns the receipts."""
    conversation = folder / "conversation.jsonl"
    folder.mkdir(parents=True)
    conversation.write_bytes(b"")
    trigger = config.summarize_at * config.token_limit
    usage = 0  # the file's tokens, each line counted on its own as the daemon's reader does
    for line in transcript.lines:
        with conversation.open("ab") as file:
            file.write(line)
        usage += sum(x.tokens for x in split_lines(line, MAX_LINE))
        if usage > trigger:
            job(folder, config)
            usage = sum(x.tokens for x in read_lines(folder))  # the file the job left
    assert usage == sum(x.tokens for x in read_lines(folder))
    return read_receipts(Workspace(folder))


@pytest.mark.slow
def test_over_a_long_loop_summaries_stay_at_least_twice_as_rare_as_with_masking_off(
    tmp_path: Path, make_settings: SettingsFactory
) -> None:
    """A 300-turn tool loop under a 40,000-token budget, a job at every crossing of the
    trigger: with masking on, at most half as many jobs summarize (each summary is an LLM
    request with an LLM backend) as with masking off, and every job ends below the
    trigger."""
    transcript = generate("autonomous", 300, 601)
    counts = {}
    for masking in (True, False):
        config = make_settings(
            keep_first=1,
            token_limit=40_000,
            **{"masking.enabled": masking, "summarizer.backend": "extractive"},
        )
        receipts = _long_loop(tmp_path / str(masking), config, transcript)
        assert all(r.outcome == "completed" for r in receipts), [r.reason for r in receipts]
        counts[masking] = sum(r.summarized is not None for r in receipts)
    assert 0 < 2 * counts[True] <= counts[False], counts
