"""The pure core: levels, actions, events, triggers, split points and incremental counting."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from conftest import SettingsFactory, encode_lines, generated_messages, make_message
from hypothesis import given, settings
from hypothesis import strategies as st
from split_checks import lines_of

from memoryd.boundaries import assistant_turns, boundaries, running_tool_call, safe_split
from memoryd.conversation import reader as reader_module
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.reader import ConversationReader
from memoryd.levels import (
    detect_threshold,
    failure_backoff,
    get_threshold_action,
    may_retry_after_ineffective,
    over_trigger,
    should_emit_event,
    usage_ratio,
)
from memoryd.published.state import build_state
from memoryd.workspace import Workspace

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


def test_safe_split_prefers_the_earlier_boundary_on_a_tie_and_respects_bounds() -> None:
    """Equidistant valid boundaries resolve to the earlier one; out-of-range ones are ignored."""
    lines = lines_of(generated_messages(9, 50))  # users at 0, 2, 4, 6, 8
    assert safe_split(lines, 5) == 4
    assert safe_split(lines, 5, lowest=5) == 6
    # No user turn in range: the assistant message there is a boundary (a tool loop's).
    assert safe_split(lines, 5, lowest=5, highest=5) == 5
    assert safe_split(lines[:1], 0, lowest=1) is None


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
        mock.patch.object(reader_module, "READ_CHUNK", read_chunk),
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


# --- assistant turns: thinking stays with its call -------------------------------------------


def test_assistant_turns_span_blank_lines_and_no_split_falls_inside_one() -> None:
    """Claude Code's lines: thinking, blank user line, tool_use are one turn; the only
    boundaries are at its first line and at the user lines outside it."""
    thought = {"type": "thinking", "thinking": "hm", "signature": "s"}
    call = {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}
    lines = lines_of(
        [
            make_message(0, "user", "task"),
            make_message(1, "assistant", [thought]),
            make_message(2, "user", " \n"),
            make_message(3, "assistant", [call]),
            make_message(
                4, "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]
            ),
            make_message(5, "assistant", [thought]),
            make_message(6, "assistant", [{**call, "id": "t2"}]),
        ]
    )
    assert assistant_turns(lines) == [range(1, 4), range(5, 7)]
    assert [k for k, kind in enumerate(boundaries(lines)) if kind] == [0, 1, 5]
    assert running_tool_call(lines) == 5
    assert safe_split(lines, 6) == 5


def _session_loop(sessions: int, calls: int) -> list[dict[str, Any]]:
    """A task, then ``sessions`` runs of a tool loop whose ids count from 1 in each run, as
    a scripted model or a local server may number them."""
    messages = [make_message(0, "user", "task")]
    for _ in range(sessions):
        for step in range(1, calls + 1):
            ident = f"call_{step}"
            use = {"type": "tool_use", "id": ident, "name": "bash", "input": {"n": step}}
            result = {"type": "tool_result", "tool_use_id": ident, "content": "ok"}
            messages.append(make_message(len(messages), "assistant", [use]))
            messages.append(make_message(len(messages), "user", [result]))
    return messages


def test_a_loop_that_reuses_tool_ids_keeps_a_boundary_at_every_call() -> None:
    """A result pairs with the newest call of its id before it: ids reused across runs
    still leave a boundary at each call, so such a loop compacts (with pairing by id alone
    there was none past the first call)."""
    lines = lines_of(_session_loop(3, 5))
    kinds = boundaries(lines)
    assert [k for k, kind in enumerate(kinds) if kind] == [0, *range(1, len(lines), 2)]
    assert safe_split(lines, 18) == 17


@settings(max_examples=100, deadline=None)
@given(sessions=st.integers(1, 4), calls=st.integers(1, 6), split=st.integers(1, 60))
def test_property_no_boundary_parts_a_call_from_its_result_when_ids_repeat(
    sessions: int, calls: int, split: int
) -> None:
    """Wherever the kept part starts, every result in it follows its call in it."""
    messages = _session_loop(sessions, calls)
    lines = lines_of(messages)
    keep_from = safe_split(lines, min(split, len(lines) - 1))
    assert keep_from is not None
    kept = messages[keep_from:]
    for k, message in enumerate(kept):
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block["type"] == "tool_result":
                previous = kept[k - 1]["content"] if k else []
                assert any(b.get("id") == block["tool_use_id"] for b in previous), keep_from
