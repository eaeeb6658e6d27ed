"""Observation masking as a pure decision: which tool outputs become placeholders, what the
placeholders say, and what is never touched (memoryd/compaction/masking/decide.py)."""

from __future__ import annotations

import json
from typing import Any

from agent_shapes import TASK, agent_conversations, text_agent, tool_loop
from api_rules import request_problem, thinking_for
from conftest import encode_lines, make_message
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.boundaries import running_tool_call
from memoryd.compaction.masking.decide import (
    MASKED_FIELD,
    Masking,
    decide,
    plan_masking,
    tool_outputs,
)
from memoryd.compaction.masking.placeholders import placeholder_text
from memoryd.compaction.masking.rules import MIN_SHRINK
from memoryd.conversation.api_view import api_messages
from memoryd.conversation.lines import Line, split_lines
from memoryd.conversation.pins import pinned_indices
from memoryd.tokens import content_chars, estimate_text_tokens
from memoryd.transcript.messages import result_text
from memoryd.transcript.outcomes import PLACEHOLDER_LEAD
from memoryd.transcript.toolcalls import tool_use_call


def lines_of(messages: list[dict[str, Any]]) -> list[Line]:
    return list(split_lines(encode_lines(messages), 1 << 24))


def output_lines(lines: list[Line]) -> list[int]:
    """The index of the line of each tool output, oldest first."""
    return [output.line for output in tool_outputs(lines)]


def rewritten(lines: list[Line], masking: Masking) -> bytes:
    """The new file the masking's parts make."""
    data = encode_lines([line.message for line in lines if line.message is not None])
    return b"".join(
        part if isinstance(part, bytes) else data[part[0] : part[1]]
        for part in masking.parts(lines)
    )


def test_every_output_but_the_newest_keep_recent_becomes_a_placeholder() -> None:
    """In a tool loop, each old result's content is one text placeholder naming the
    command, its size and ``memoryd expand`` with the message id; the newest three stay."""
    lines = lines_of(tool_loop(20, 40))
    masking = plan_masking(lines, 3, frozenset())
    outputs = output_lines(lines)
    assert {m.line.index for m in masking.masked} == set(outputs[:-3])
    for masked in masking.masked:
        block = masked.line.blocks[0]
        assert isinstance(block["content"], str)
        text = block["content"]
        assert "pytest -k case_" in text
        assert "tokens" in text
        assert f"memoryd expand WORKSPACE {masked.line.message['id']}" in text  # type: ignore[index]


def test_a_masked_line_keeps_every_field_and_gains_is_masked() -> None:
    """id, tool_use_id, is_error and any other field stay; only the content changes."""
    messages = tool_loop(6, 40)
    messages[2]["content"][0]["is_error"] = True
    messages[2]["custom"] = {"agent": "x"}
    lines = lines_of(messages)
    masked = {m.line.index: m for m in plan_masking(lines, 1, frozenset()).masked}[2]
    original, new = lines[2].message, json.loads(masked.data)
    assert original is not None
    assert new[MASKED_FIELD] is True
    assert {k: v for k, v in new.items() if k not in ("content", MASKED_FIELD)} == {
        k: v for k, v in original.items() if k != "content"
    }
    block, before = new["content"][0], original["content"][0]
    assert {k: v for k, v in block.items() if k != "content"} == {
        k: v for k, v in before.items() if k != "content"
    }
    assert masked.line.message == new
    # The error flag is kept and the placeholder says the call failed; a call that did
    # not fail is not said to have.
    assert block["is_error"] is True
    assert block["content"].startswith(f"{PLACEHOLDER_LEAD}`pytest -k case_0`: failed")
    others = [json.loads(m.data)["content"][0]["content"] for m in
              plan_masking(lines, 1, frozenset()).masked if m.line.index != 2]  # fmt: skip
    assert others and not any("failed" in text for text in others)


def test_text_mode_output_and_images_are_masked() -> None:
    """A text-mode agent's pasted output becomes a placeholder string; an image inside an
    old tool result goes with the rest of its content."""
    lines = lines_of(text_agent(8, 40))
    masking = plan_masking(lines, 2, frozenset())
    assert [m.line.index for m in masking.masked] == output_lines(lines)[:-2]
    assert masking.outputs == len(masking.masked) == 6
    for m in masking.masked:
        # The command of the fence before it, the exit status, the size of the original
        # and the expand command with this message's id.
        step = (m.line.index - 2) // 2
        original = lines[m.line.index].message
        assert original is not None
        size = estimate_text_tokens(original["content"])
        assert m.line.message is not None
        assert m.line.message == {**original, "content": m.line.message["content"],
                                  MASKED_FIELD: True}  # fmt: skip
        text = m.line.message["content"]
        assert text.startswith(f"{PLACEHOLDER_LEAD}`pytest -k case_{step}`: exit 1")
        assert f"names src/app/module_{step}.py" in text
        assert text.endswith(
            f" — {size:,} tokens; the original: memoryd expand WORKSPACE {original['id']}]"
        )
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "A" * 4000},
    }
    messages = tool_loop(5, 5)
    messages[2]["content"][0]["content"] = [{"type": "text", "text": "screenshot"}, image]
    masked = plan_masking(lines_of(messages), 1, frozenset()).masked
    assert "image" not in masked[0].data.decode()


def test_pins_a_running_call_assistant_messages_and_short_outputs_stay() -> None:
    """Pinned lines, the results of a call still running, every assistant message, and an
    output shorter than twice its placeholder are never masked."""
    messages = tool_loop(12, 40, parallel=frozenset({11}))
    messages[-1]["content"] = messages[-1]["content"][:1]  # one of two parallel calls answered
    messages[4]["pinned"] = True
    messages[6]["content"][0]["content"] = "ok"
    lines = lines_of(messages)
    assert running_tool_call(lines) == len(lines) - 2
    masking = plan_masking(lines, 0, pinned_indices(lines, 1))
    masked = {m.line.index for m in masking.masked}
    assert not masked & {0, 4, 6, len(lines) - 1}
    assert all(lines[i].role == "user" for i in masked)
    # Every other output is masked: the results of steps 0, 3, 4, ... 10.
    assert masked == set(output_lines(lines)) - {4, 6, len(lines) - 1}
    assert masking.outputs == len(masked) == 9


def test_the_new_file_is_the_old_one_with_only_the_masked_lines_replaced() -> None:
    lines = lines_of(tool_loop(10, 40))
    masking = plan_masking(lines, 3, frozenset())
    new = rewritten(lines, masking).splitlines(keepends=True)
    by_index = {m.line.index: m.data for m in masking.masked}
    old = encode_lines([line.message for line in lines if line.message]).splitlines(True)
    assert new == [by_index.get(k, line) for k, line in enumerate(old)]


def test_decide_skips_a_small_masking_and_stops_at_the_target() -> None:
    assert decide(9_000, 500, 10_000, 0.6, 0.1) == "skip"
    assert decide(9_000, 3_000, 10_000, 0.6, 0.1) == "enough"
    assert decide(9_000, 2_000, 10_000, 0.6, 0.1) == "summarize"
    assert decide(9_000, 0, 10_000, 0.6, 0.0) == "skip"


@settings(max_examples=60, deadline=None)
@given(agent_conversations(), st.integers(0, 6), st.integers(0, 2), st.booleans())
def test_property_masking_keeps_what_it_must_and_the_view_stays_valid(
    messages: list[dict[str, Any]], keep_recent: int, keep_first: int, pin_one: bool
) -> None:
    """Over generated agent conversations: the newest ``keep_recent`` outputs, the pins,
    the task and a running call's results are never masked; the API view of the masked
    file is a valid request; each masked line frees tokens and keeps its id."""
    if pin_one and len(messages) > 6:
        messages[5] = {**messages[5], "pinned": True}
    lines = lines_of(messages)
    pinned = pinned_indices(lines, keep_first)
    masking = plan_masking(lines, keep_recent, pinned)
    masked = {m.line.index: m for m in masking.masked}
    outputs = tool_outputs(lines)
    kept_from = max(0, len(outputs) - keep_recent)
    for output in outputs[kept_from:]:
        if output.line in masked:  # a line of parallel results: only the older ones go
            assert output.block is not None
            new, old = masked[output.line].line.blocks, lines[output.line].blocks
            assert new[output.block] == old[output.block]
    running = running_tool_call(lines)
    # The running turn's calls may sit on the lines after its first (a thinking line).
    open_lines = lines[running:] if running is not None else []
    open_ids = frozenset(i for x in open_lines for i in x.tool_use_ids)
    answers_open = {x.index for x in open_lines if x.tool_result_ids & open_ids}
    # Every older output of a line that may be masked is a placeholder of exactly what
    # it was, or too short to be worth one.
    placeholders = 0
    for output in outputs[:kept_from]:
        line = lines[output.line]
        assert line.message is not None
        if output.line in pinned or output.line in answers_open:
            assert output.line not in masked
            continue
        if output.block is None:
            before: Any = line.message["content"]
        else:
            before = line.blocks[output.block].get("content")
        failed = output.block is not None and line.blocks[output.block].get("is_error") is True
        expected = placeholder_text(output.call, result_text(before), failed, line.message["id"])
        if output.line not in masked:
            assert content_chars(before) < MIN_SHRINK * len(expected)
            continue
        after = masked[output.line].line.message
        assert after is not None
        if output.block is None:
            now = after["content"]
        else:
            now = after["content"][output.block]["content"]
        worth = content_chars(before) >= MIN_SHRINK * len(expected)
        assert now == (expected if worth else before)
        placeholders += worth
    assert masking.outputs == placeholders
    assert not masked.keys() & pinned
    assert not masked.keys() & answers_open
    assert all(TASK not in m.data.decode() for m in masking.masked)
    for m in masking.masked:
        assert m.line.tokens < m.original.tokens
        assert json.loads(m.data)["id"] == m.original.message["id"]  # type: ignore[index]
    view = api_messages(json.loads(x) for x in rewritten(lines, masking).splitlines())
    if view:
        body: dict[str, Any] = {"model": "m", "max_tokens": 2048, "messages": view}
        if thinking_for(view):  # the agent of such a view sends with thinking on
            body["thinking"] = thinking_for(view)
        assert request_problem(body) is None
    assert masking.freed_tokens == sum(x.tokens for x in lines) - sum(
        x.tokens for x in masking.applied(lines)
    )


def test_a_genuine_user_turn_is_never_an_output() -> None:
    """A user's own message between tool calls (not after a command fence) stays."""
    messages = [
        make_message(0, "user", TASK),
        make_message(1, "assistant", "Which file should I look at first? " * 20),
        make_message(2, "user", "Start with src/app/config.py please. " * 40),
    ]
    assert plan_masking(lines_of(messages), 0, frozenset()).masked == ()


def test_a_placeholder_says_what_the_output_was() -> None:
    """The command, the exception with the frame nearest the raise, the other `line N`
    references, the size in tokens and the expand command; a file shown says what it
    defines and the paths it names."""
    traceback = (
        'Traceback (most recent call last):\n  File "/src/app/cli.py", line 17, in main\n'
        '    run()\n  File "/src/app/config.py", line 48, in load\n'
        "    raise KeyError(name)\nKeyError: 'server'\n" + "noise\n" * 400
    )
    call = tool_use_call(1, {"type": "tool_use", "id": "t", "name": "bash",
                             "input": {"command": "python -m app --check"}})  # fmt: skip
    text = placeholder_text(call, traceback, True, "msg-0002")
    assert text.startswith(PLACEHOLDER_LEAD + "`python -m app --check`")
    for part in ("KeyError", "/src/app/config.py line 48", "line 17", "tokens",
                 "memoryd expand WORKSPACE msg-0002"):  # fmt: skip
        assert part in text, part
    view = tool_use_call(1, {"type": "tool_use", "id": "v", "name": "Read",
                             "input": {"file_path": "src/app/config.py"}})  # fmt: skip
    listing = "1\timport os\n2\t\n3\tdef load(name):\n4\t    return os.environ[name]\n" * 50
    assert "defines load" in placeholder_text(view, listing, False, "msg-0004")
