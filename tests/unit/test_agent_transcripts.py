"""The agent-transcript generator: deterministic, true to its three shapes, honest facts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agent_transcripts import (
    SHAPES,
    Transcript,
    estimate_tokens,
    generate,
    is_result,
    message_text,
    occurs,
    write_workspace,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.tokens import estimate_message_tokens


def blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = message["content"]
    return [b for b in content if b["type"] == kind] if isinstance(content, list) else []


def use_ids(message: dict[str, Any]) -> set[str]:
    return {b["id"] for b in blocks(message, "tool_use")}


def result_ids(message: dict[str, Any]) -> set[str]:
    return {b["tool_use_id"] for b in blocks(message, "tool_result")}


def genuine_user_messages(transcript: Transcript) -> list[int]:
    """Indices of user messages that are neither tool results nor hook messages."""
    return [
        i
        for i, m in enumerate(transcript.messages)
        if m["role"] == "user" and not is_result(m) and not m.get("isMeta")
    ]


@pytest.mark.parametrize("shape", SHAPES)
def test_the_same_shape_and_seed_give_the_same_bytes_and_facts(shape: str) -> None:
    first = generate(shape, 11, 90, tokens=30_000)
    again = generate(shape, 11, 90, tokens=30_000)
    other = generate(shape, 12, 90, tokens=30_000)
    assert first.lines == again.lines
    assert first.facts == again.facts
    assert first.lines != other.lines


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), count=st.integers(50, 260), running=st.booleans())
def test_an_autonomous_loop_has_one_user_message_then_only_tool_calls_and_results(
    seed: int, count: int, running: bool
) -> None:
    """One genuine user message (the task, first); every assistant message is a short
    thought and one or more tool calls; every other user message holds only results."""
    transcript = generate("autonomous", seed, count, running=running)
    assert genuine_user_messages(transcript) == [0]
    for message in transcript.messages[1:]:
        content = message["content"]
        if message["role"] == "assistant":
            assert content[0]["type"] == "text" and len(content[0]["text"]) < 400
            assert [b["type"] for b in content[1:]] == ["tool_use"] * (len(content) - 1)
            assert len(content) >= 2
        else:
            assert {b["type"] for b in content} == {"tool_result"}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(SHAPES[:2]), running=st.booleans())
def test_every_tool_use_has_its_result_in_the_next_message_but_a_running_last_one(
    seed: int, shape: str, running: bool
) -> None:
    transcript = generate(shape, seed, 120, running=running)
    messages = transcript.messages
    for index, message in enumerate(messages):
        if use_ids(message) and index + 1 < len(messages):
            assert result_ids(messages[index + 1]) == use_ids(message), index
        if result_ids(message):
            assert result_ids(message) == use_ids(messages[index - 1]), index
    last = messages[-1]
    if running:
        assert transcript.pending is not None
        assert last["role"] == "assistant" and use_ids(last)
        assert result_ids(transcript.pending) == use_ids(last)
    else:
        assert transcript.pending is None and is_result(last)


def test_an_interactive_session_has_follow_up_requests_and_hook_messages() -> None:
    transcript = generate("interactive", 5, 300)
    assert len(genuine_user_messages(transcript)) >= 3
    hooks = [m for m in transcript.messages if m.get("isMeta")]
    assert hooks and all(m["role"] == "user" and isinstance(m["content"], str) for m in hooks)
    tools = {b["name"] for m in transcript.messages for b in blocks(m, "tool_use")}
    assert {"Bash", "Read", "Edit", "Grep"} <= tools


@pytest.mark.parametrize("running", [False, True])
def test_a_text_mode_agent_fences_its_command_and_gets_the_output_back_as_text(
    running: bool,
) -> None:
    transcript = generate("text", 8, 150, running=running)
    messages = transcript.messages
    assert all(isinstance(m["content"], str) for m in messages)
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + [
        "user"
    ] * (len(messages) % 2)
    for message in messages[1:]:
        if message["role"] == "assistant":
            assert "\n```bash\n" in message["content"] and message["content"].endswith("```")
        else:
            assert message["content"].startswith("<returncode>")
    assert messages[-1]["role"] == ("assistant" if running else "user")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(SHAPES), running=st.booleans())
def test_every_fact_occurs_in_the_message_it_names(seed: int, shape: str, running: bool) -> None:
    transcript = generate(shape, seed, 100, running=running)
    kinds = {fact.kind for fact in transcript.facts}
    assert {"task", "path", "command", "identifier"} <= kinds
    assert transcript.facts[0].kind == "task" and transcript.facts[0].index == 0
    assert transcript.facts[0].text == transcript.task
    for fact in transcript.facts:
        assert fact.index < len(transcript.messages)
        assert occurs(fact.text, message_text(transcript.messages[fact.index])), fact


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("count", "tokens"), [(50, 12_000), (200, 60_000), (400, 160_000)])
def test_sizes_come_out_as_asked(shape: str, count: int, tokens: int) -> None:
    """At most ``count`` messages and at least two fewer; tokens within 5% (memoryd's own
    estimate agrees with the generator's)."""
    transcript = generate(shape, 3, count, tokens=tokens)
    assert count - 2 <= len(transcript.messages) <= count
    assert abs(transcript.tokens - tokens) <= 0.05 * tokens
    assert transcript.tokens == sum(
        estimate_message_tokens(json.loads(line)) for line in transcript.lines
    )
    assert all(estimate_tokens(m) > 4 for m in transcript.messages)


def test_a_workspace_holds_the_transcript_byte_for_byte(tmp_path: Path) -> None:
    transcript = generate("interactive", 2, 60)
    folder = write_workspace(tmp_path / "ws", transcript)
    assert (folder / "conversation.jsonl").read_bytes() == b"".join(transcript.lines)
    assert [json.loads(line) for line in transcript.lines] == list(transcript.messages)


def test_a_fact_occurs_only_as_a_whole() -> None:
    assert occurs("line 14", "File x.py, line 14, in f")
    assert not occurs("line 14", "File x.py, line 140, in f")
    assert occurs("pytest tests/a.py -q", "$ pytest tests/a.py -q\n")
    assert not occurs("pytest tests/a.py -q", "pytest tests/a.py -qx")


def test_an_unknown_shape_or_too_few_messages_is_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        generate("chat", 1)
    with pytest.raises(ValueError, match="at least 3"):
        generate("text", 1, 2)
