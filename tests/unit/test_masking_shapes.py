"""Observation masking over unusual shapes and at its exact limits, and every part a
placeholder promises (memoryd/compaction/masking/decide.py): reused tool ids, summary heads that
hold a command fence, lines without ids, system, blank and malformed lines, orphan results,
an image beside a tool result, ``keep_recent`` at and past the number of outputs."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import pytest
from agent_shapes import TASK, text_agent, tool_loop
from api_rules import request_problem
from conftest import SettingsFactory, make_message
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.boundaries import running_tool_call
from memoryd.compaction.masking.decide import (
    MASKED_FIELD,
    Masking,
    MaskingStage,
    decide,
    masking_stage,
    plan_masking,
    tool_outputs,
)
from memoryd.compaction.masking.placeholders import (
    MAX_LINE_REFERENCES,
    MAX_LISTING_PATHS,
    placeholder_text,
)
from memoryd.compaction.masking.rules import MIN_SHRINK
from memoryd.compaction.strategies.least_loss import masking_aim
from memoryd.conversation.api_view import api_messages
from memoryd.conversation.lines import Line, split_lines
from memoryd.receipts.records import MaskedSpan
from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.outcomes import PLACEHOLDER_LEAD, read_failure
from memoryd.transcript.toolcalls import ToolCall, tool_use_call

OUTPUT = "src/app/config.py:12: ok\n" + "collected output line\n" * 60


def lines_of(messages: Sequence[dict[str, Any] | bytes]) -> list[Line]:
    data = b"".join(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n" for m in messages)
    return list(split_lines(data, 1 << 24))


def call(ident: str, command: str = "pytest -x") -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "bash", "input": {"command": command}}


def result(ident: str, output: str = OUTPUT, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": output, **extra}


def exchange(index: int, ident: str, command: str = "pytest -x") -> list[dict[str, Any]]:
    """An assistant call at ``index`` and its result at ``index + 1``."""
    return [
        make_message(index, "assistant", [call(ident, command)]),
        make_message(index + 1, "user", [result(ident)]),
    ]


def masked_indices(masking: Masking) -> list[int]:
    return [m.line.index for m in masking.masked]


def expand_line(ident: str) -> str:
    return f"the original: memoryd expand WORKSPACE {ident}]"


# --- shapes ---------------------------------------------------------------------------------


def test_reused_ids_pair_each_result_with_the_call_before_it() -> None:
    """An agent numbering its calls from 1 in each run: every result names the command of
    the newest call of its id before it, not the first or the last call of that id."""
    messages = [make_message(0, "user", TASK)]
    for run, command in enumerate(("pytest -x", "ruff check .", "mypy src")):
        messages += exchange(len(messages), "call_1", f"{command} # run {run}")
    lines = lines_of(messages)
    found = [(o.line, o.call.label if o.call else None) for o in tool_outputs(lines)]
    assert found == [
        (2, "pytest -x # run 0"),
        (4, "ruff check . # run 1"),
        (6, "mypy src # run 2"),
    ]


def test_a_running_call_keeps_its_results_but_not_older_ones_of_a_reused_id() -> None:
    """The newest call (id ``call_1``) has one of its two results: that result stays, while
    the older results that answered earlier calls named ``call_1`` are masked."""
    messages = [make_message(0, "user", TASK)]
    for _ in range(3):
        messages += exchange(len(messages), "call_1")
    messages.append(make_message(7, "assistant", [call("call_1"), call("call_2")]))
    messages.append(make_message(8, "user", [result("call_1")]))
    lines = lines_of(messages)
    assert running_tool_call(lines) == 7
    masking = plan_masking(lines, 0, frozenset())
    assert masked_indices(masking) == [2, 4, 6]


def test_the_answered_results_of_a_running_turn_stay() -> None:
    """Claude Code's lines: a thinking line, then two calls on lines of their own; one has
    its result, the other is still running. That result stays (the turn's calls are on
    the lines after its first), the older results are masked."""
    thought = {"type": "thinking", "thinking": "hm " * 50, "signature": "sig"}
    messages = [make_message(0, "user", TASK), *exchange(1, "a"), *exchange(3, "b")]
    messages += [
        make_message(5, "assistant", [thought]),
        make_message(6, "assistant", [call("c")]),
        make_message(7, "assistant", [call("d")]),
        make_message(8, "user", [result("c")]),
    ]
    lines = lines_of(messages)
    assert running_tool_call(lines) == 5
    assert masked_indices(plan_masking(lines, 0, frozenset())) == [2, 4]


def test_a_summary_head_holding_a_command_fence_makes_no_output() -> None:
    """A summary that ends with a command in a fence is not a command run: the user
    message after it stays verbatim, and masking goes on after the head."""
    head = make_message(
        0, "assistant", "[Summary of earlier conversation]\n\n```bash\npytest -x\n```",
        isSummary=True,
    )  # fmt: skip
    reply = make_message(1, "user", "Here is what I think of the plan. " * 40)
    messages = [head, reply, *text_agent(4, 40)[1:]]
    messages = [{**m, "id": f"msg-{k:04d}"} for k, m in enumerate(messages)]
    lines = lines_of(messages)
    assert [o.line for o in tool_outputs(lines)] == [3, 5, 7, 9]
    assert masked_indices(plan_masking(lines, 1, frozenset())) == [3, 5, 7]


def test_masking_goes_on_after_every_summary_head_and_checkpoint() -> None:
    """Summary lines (a head, then a later one) end a text-mode fence but not the scan:
    outputs after each of them are still found."""
    summary = make_message(0, "user", "[Summary]\n\nold", isSummary=True)
    later = make_message(3, "user", "[Checkpoint]", isSummary=True)
    messages = [summary, *exchange(1, "a"), later, *exchange(4, "b"), *exchange(6, "c")]
    lines = lines_of(messages)
    assert [o.line for o in tool_outputs(lines)] == [2, 5, 7]
    assert masked_indices(plan_masking(lines, 0, frozenset())) == [2, 5, 7]


def test_system_blank_and_malformed_lines_do_not_stop_the_scan() -> None:
    """A system line, a blank user line and a line that is not JSON between exchanges:
    none is an output, and the outputs after them are found and masked."""
    messages: list[dict[str, Any] | bytes] = [make_message(0, "user", TASK), *exchange(1, "a")]
    messages.append(make_message(3, "system", "You are a careful agent. " * 30))
    messages += exchange(4, "b")
    messages.append(b"this line is not JSON " + b"x" * 300 + b"\n")
    messages += exchange(7, "c")
    messages.append(make_message(9, "user", "   "))
    messages += exchange(10, "d")
    lines = lines_of(messages)
    assert [o.line for o in tool_outputs(lines)] == [2, 5, 8, 11]
    assert masked_indices(plan_masking(lines, 1, frozenset())) == [2, 5, 8]


def test_a_fence_before_a_system_line_still_names_the_output_after_it() -> None:
    """A text-mode agent's command, a system line, then its output: the output is the
    command's (a system line is no user turn)."""
    messages = text_agent(1, 40)
    messages.insert(2, make_message(9, "system", "note"))
    lines = lines_of(messages)
    [output] = tool_outputs(lines)
    assert output.line == 3 and output.block is None
    assert output.call is not None and output.call.label == "pytest -k case_0"


def test_an_assistant_message_without_a_fence_ends_the_text_mode_command() -> None:
    """Output pasted after an assistant message with no fence is a user's message."""
    messages = text_agent(2, 40)
    messages.insert(2, make_message(9, "assistant", "Let me think about that first."))
    lines = lines_of(messages)
    assert [o.line for o in tool_outputs(lines)] == [5]


def test_a_fenced_command_is_answered_by_the_next_user_message_only() -> None:
    """Two user messages after one fence: only the first is the command's output."""
    messages = text_agent(1, 40)
    messages.append(make_message(3, "user", "And one more thing. " * 40))
    lines = lines_of(messages)
    assert [o.line for o in tool_outputs(lines)] == [2]


def test_an_orphan_result_is_an_output_of_an_unknown_tool() -> None:
    """A tool_result whose call is not in the file (summarized away) is still an output,
    masked as a tool's, never as another call's."""
    messages = [
        make_message(0, "user", TASK),
        make_message(1, "user", [result("gone", "E: disk full\n" * 60, is_error=True)]),
        *exchange(2, "a"),
    ]
    lines = lines_of(messages)
    assert [(o.line, o.call) for o in tool_outputs(lines)][:1] == [(1, None)]
    [masked] = plan_masking(lines, 1, frozenset()).masked
    text = masked.line.blocks[0]["content"]
    assert text.startswith(f"{PLACEHOLDER_LEAD}a tool (error)")
    assert text.endswith(expand_line("msg-0001"))


def test_lines_without_a_string_id_are_never_masked() -> None:
    """expand could not find a line with no id (or an id that is not a string): such an
    output stays, the others are masked, and planning never fails on them."""
    messages = [make_message(0, "user", TASK), *exchange(1, "a"), *exchange(3, "b"),
                *exchange(5, "c"), *exchange(7, "d")]  # fmt: skip
    del messages[2]["id"]
    messages[4]["id"] = 4
    lines = lines_of(messages)
    assert masked_indices(plan_masking(lines, 1, frozenset())) == [6]


def test_a_masked_line_a_pinned_line_and_a_malformed_line_stay() -> None:
    messages: list[dict[str, Any] | bytes] = [make_message(0, "user", TASK)]
    messages += exchange(1, "a")
    messages += exchange(3, "b")
    messages += exchange(5, "c")
    messages += exchange(7, "d")
    messages[2] = {**messages[2], MASKED_FIELD: True}  # type: ignore[dict-item]
    lines = lines_of(messages)
    assert masked_indices(plan_masking(lines, 0, frozenset({4}))) == [6, 8]
    assert masked_indices(plan_masking(lines, 0, frozenset())) == [4, 6, 8]


def test_an_image_beside_a_tool_result_becomes_a_text_block() -> None:
    """An image block next to a masked result becomes a text block naming expand (never
    null); the view stays a valid request."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "A" * 4000}}  # fmt: skip
    messages = [make_message(0, "user", TASK), *exchange(1, "a"), *exchange(3, "b")]
    messages[2]["content"] = [result("a"), image]
    lines = lines_of(messages)
    [masked] = plan_masking(lines, 1, frozenset()).masked
    written = json.loads(masked.data)
    assert written["content"][1] == {
        "type": "text",
        "text": "[image masked by memoryd; memoryd expand WORKSPACE msg-0002]",
    }
    assert written["content"][0]["content"].startswith(PLACEHOLDER_LEAD + "`pytest -x`")
    assert masked.outputs == 1
    view = api_messages([*(x.message for x in lines[:2] if x.message), written,
                         *(x.message for x in lines[3:] if x.message)])  # fmt: skip
    body = {"model": "m", "max_tokens": 100, "messages": view}
    assert request_problem(body) is None


def test_an_image_beside_a_short_result_stays_with_it() -> None:
    """When the result itself is too short to mask, the line is left whole, image too."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "A" * 4000}}  # fmt: skip
    messages = [make_message(0, "user", TASK), *exchange(1, "a"), *exchange(3, "b")]
    messages[2]["content"] = [result("a", "ok"), image]
    assert plan_masking(lines_of(messages), 1, frozenset()).masked == ()


def test_a_text_mode_output_in_blocks_becomes_one_text_block() -> None:
    """A pasted output written as content blocks becomes one text block holding the
    placeholder, with the real message id."""
    messages = text_agent(2, 40)
    messages[2]["content"] = [{"type": "text", "text": messages[2]["content"]}]
    lines = lines_of(messages)
    [masked] = plan_masking(lines, 1, frozenset()).masked
    [block] = json.loads(masked.data)["content"]
    assert block["type"] == "text" and set(block) == {"type", "text"}
    assert block["text"].startswith(f"{PLACEHOLDER_LEAD}`pytest -k case_0`: exit 1")
    assert block["text"].endswith(expand_line("msg-0002"))


def test_a_short_text_mode_output_stays() -> None:
    messages = text_agent(2, 40)
    messages[2]["content"] = "ok"
    assert plan_masking(lines_of(messages), 0, frozenset()).masked[0].line.index == 4


# --- exact limits -----------------------------------------------------------------------------


@pytest.mark.parametrize(("keep_recent", "masked"), [(0, 5), (4, 1), (5, 0), (6, 0), (50, 0)])
def test_keep_recent_at_and_past_the_number_of_outputs(keep_recent: int, masked: int) -> None:
    """Five outputs: keep_recent 4 masks only the oldest, 5 or more mask none."""
    lines = lines_of(tool_loop(5, 40))
    masking = plan_masking(lines, keep_recent, frozenset())
    assert masked_indices(masking) == [2, 4, 6, 8, 10][:masked]
    assert masking.outputs == masked


def test_parallel_results_on_one_line_count_one_output_each() -> None:
    """A line holding two results of parallel calls is one masked line of two outputs;
    when only the older of its results is old enough, only that one is masked."""
    lines = lines_of(tool_loop(3, 40, parallel=frozenset({0})))
    masking = plan_masking(lines, 2, frozenset())
    assert [(m.line.index, m.outputs) for m in masking.masked] == [(2, 2)]
    assert masking.outputs == 2
    partly = plan_masking(lines, 3, frozenset())
    [line] = partly.masked
    assert line.outputs == 1 and partly.outputs == 1
    assert line.line.blocks[0]["content"].startswith(PLACEHOLDER_LEAD)
    assert line.line.blocks[1] == lines[2].blocks[1]


def test_decide_at_its_exact_limits() -> None:
    """Freeing exactly min_freed of the budget is worth it; ending exactly at the target
    is enough; nothing freed is always skipped."""
    assert decide(9_000, 1_000, 10_000, 0.8, 0.1) == "enough"
    assert decide(9_000, 999, 10_000, 0.6, 0.1) == "skip"
    assert decide(9_000, 1_000, 10_000, 0.6, 0.1) == "summarize"
    assert decide(9_000, 3_000, 10_000, 0.6, 0.1) == "enough"
    assert decide(9_000, 2_999, 10_000, 0.6, 0.1) == "summarize"
    assert decide(9_000, 0, 10_000, 0.6, 0.0) == "skip"
    assert decide(9_000, -5, 10_000, 0.6, 0.0) == "skip"
    assert decide(9_000, 1, 10_000, 0.9, 0.0) == "enough"


# --- what a placeholder says ------------------------------------------------------------------


def shell(command: str) -> ToolCall:
    return tool_use_call(1, call("t", command))


def test_a_placeholder_names_the_call_outcome_size_and_expand() -> None:
    """Every part in its place: the opening words, the command in backticks, the outcome, the
    size with thousands separated, the expand command with the real id."""
    output = "boom\n" + "x" * 8000 + "\nexit status 3\n"
    size = estimate_text_tokens(output)
    assert size >= 1000
    text = placeholder_text(shell("make build"), output, False, "msg-0042")
    assert text.startswith(f"{PLACEHOLDER_LEAD}`make build`: exit 3")
    assert text.endswith(f" — {size:,} tokens; {expand_line('msg-0042')}")
    assert text.count(" — ") == 1


def test_a_placeholder_says_a_call_failed_only_when_it_did() -> None:
    output = "collected output line\n" * 40
    failed = placeholder_text(shell("pytest -x"), output, True, "m")
    passed = placeholder_text(shell("pytest -x"), output, False, "m")
    assert failed.startswith(f"{PLACEHOLDER_LEAD}`pytest -x`: failed")
    assert passed.startswith(f"{PLACEHOLDER_LEAD}`pytest -x` — ") and "fail" not in passed
    anonymous = placeholder_text(None, output, True, "m")
    assert anonymous.startswith(f"{PLACEHOLDER_LEAD}a tool (error)")
    assert placeholder_text(None, output, False, "m").startswith(f"{PLACEHOLDER_LEAD}a tool — ")


def test_notes_follow_the_call_they_never_replace_it() -> None:
    """Line references of a tool's output come after the call's name, the last
    MAX_LINE_REFERENCES distinct ones in their order, those the digest already says left
    out."""
    read = tool_use_call(1, {"type": "tool_use", "id": "r", "name": "Read",
                             "input": {"file_path": "src/a.py"}})  # fmt: skip
    lines = "".join(f"see line {n}\n" for n in (1, 2, 2, 3, 4, 5, 6, 7, 8, 9, 10)) + "x\n" * 40
    text = placeholder_text(read, lines, False, "m")
    wanted = ", ".join(f"line {n}" for n in range(11 - MAX_LINE_REFERENCES, 11))
    assert text.startswith(f"{PLACEHOLDER_LEAD}read src/a.py; {wanted} — ")
    failed = placeholder_text(read, "see line 4 and line 9\n" + "x\n" * 40, True, "m")
    assert failed.startswith(f"{PLACEHOLDER_LEAD}read src/a.py: see line 4 and line 9")
    anonymous = placeholder_text(None, "at line 7\n" + "x\n" * 40, False, "m")
    assert anonymous.startswith(f"{PLACEHOLDER_LEAD}a tool; line 7 — ")


def test_a_file_shown_says_what_it_defines_and_at_most_three_paths_it_names() -> None:
    view = tool_use_call(1, {"type": "tool_use", "id": "v", "name": "Read",
                             "input": {"file_path": "src/app/config.py"}})  # fmt: skip
    listing = (
        "1\timport os\n2\tfrom src.app import a  # see src/app/a.py, src/app/b.py,"
        " src/app/c.py, src/app/d.py\n3\tdef load(name):\n4\t    return os.environ[name]\n"
        "5\tclass Config:\n6\t    pass\n"
    ) * 20
    text = placeholder_text(view, listing, False, "m")
    notes = text[len(PLACEHOLDER_LEAD) : text.index(" — ")].split("; ")
    assert notes[0].startswith("read src/app/config.py")
    assert notes[1] == "defines load, Config"
    assert MAX_LISTING_PATHS == 3
    assert notes[2] == "names src/app/a.py, src/app/b.py, src/app/c.py"
    assert len(notes) == 3


# --- the masking, the stage, the receipt ------------------------------------------------------


def test_the_masking_applies_frees_and_archives_exactly_its_lines() -> None:
    lines = lines_of(tool_loop(6, 40))
    masking = plan_masking(lines, 2, frozenset())
    assert masked_indices(masking) == [2, 4, 6, 8]
    applied = masking.applied(lines)
    # A masked line stands for the bytes of its original: same index, offset and length.
    assert [(x.index, x.offset, x.length) for x in applied] == [
        (x.index, x.offset, x.length) for x in lines
    ]
    assert [x is y for x, y in zip(applied, lines, strict=True)] == [
        k not in (2, 4, 6, 8) for k in range(len(lines))
    ]
    assert masking.freed_tokens == sum(m.original.tokens - m.line.tokens for m in masking.masked)
    assert all(m.freed == m.original.tokens - m.line.tokens > 0 for m in masking.masked)
    assert masking.originals(lines) == [(x.offset, x.end) for x in lines if x.index in (2, 4, 6, 8)]
    assert masking.originals(lines[5:]) == [(lines[6].offset, lines[6].end),
                                            (lines[8].offset, lines[8].end)]  # fmt: skip
    assert masking.originals(lines[:2]) == []
    parts = masking.parts(lines)
    assert parts[:3] == [(lines[0].offset, lines[1].end), masking.masked[0].data,
                         (lines[3].offset, lines[3].end)]  # fmt: skip
    assert parts[-1] == (lines[9].offset, lines[-1].end)
    assert Masking().outputs == Masking().freed_tokens == 0


def test_the_stage_reports_its_outputs_tokens_and_archive() -> None:
    lines = lines_of(tool_loop(6, 40, parallel=frozenset({0})))
    masking = plan_masking(lines, 1, frozenset())
    assert len(masking.masked) == 5 and masking.outputs == 6
    stage = MaskingStage(masking, "enough", 12_345, 0.5)
    assert stage.text == "masked 6 tool outputs (freed 12,345 tokens)"
    assert stage.span(".memoryd/archive/a.jsonl", True) == MaskedSpan(
        5, 6, 12_345, ".memoryd/archive/a.jsonl", True
    )
    assert stage.span("x", False).summary_followed is False


@pytest.mark.parametrize("calibration", [0.5, 1.0, 1.3])
def test_the_stage_frees_calibrated_tokens(
    calibration: float, make_settings: SettingsFactory
) -> None:
    """What the stage frees is the masking's estimate times the calibration, enough to
    bring usage to its aim, and the decision is taken on that figure."""
    lines = lines_of(tool_loop(8, 400))
    tokens = sum(x.tokens for x in lines)
    before = round(tokens * calibration)
    limit = round(before / 0.7)  # every old output would free twice what the aim needs
    config = make_settings(token_limit=limit, **{"masking.enabled": True,
                                                 "masking.keep_recent": 2})  # fmt: skip
    stage = masking_stage(lines, config, before, calibration, 0.65)
    assert stage is not None and stage.aim == pytest.approx(masking_aim(0.6, 0.65))
    assert stage.freed_tokens == round(stage.masking.freed_tokens * calibration)
    assert before - stage.freed_tokens <= stage.aim * limit
    assert stage.decision == decide(
        before, stage.freed_tokens, limit, config.masking.target, config.masking.min_freed
    )
    old = [2, 4, 6, 8, 10, 12]
    assert set(masked_indices(stage.masking)) <= set(old)
    every = plan_masking(lines, 2, frozenset({0}))
    assert masked_indices(every) == old and len(stage.masking.masked) < len(every.masked)


def test_the_stage_is_none_when_off_or_not_worth_it(make_settings: SettingsFactory) -> None:
    lines = lines_of(tool_loop(8, 40))
    tokens = sum(x.tokens for x in lines)
    off = make_settings(token_limit=tokens, **{"masking.enabled": False})
    assert masking_stage(lines, off, tokens, 1.0, 0.8) is None
    small = make_settings(token_limit=tokens, **{"masking.enabled": True,
                                                 "masking.min_freed": 0.99})  # fmt: skip
    assert masking_stage(lines, small, tokens, 1.0, 0.8) is None
    kept = make_settings(token_limit=tokens, **{"masking.enabled": True,
                                                "masking.keep_recent": 8})  # fmt: skip
    assert masking_stage(lines, kept, tokens, 1.0, 0.8) is None


@settings(max_examples=40, deadline=None)
@given(
    runs=st.integers(1, 4),
    calls=st.integers(1, 4),
    keep_recent=st.integers(0, 6),
    running=st.booleans(),
    extras=st.lists(st.sampled_from(["system", "blank", "orphan", "no-id", "bad"]), max_size=4),
)
def test_property_reused_ids_and_odd_lines_keep_the_rules(
    runs: int, calls: int, keep_recent: int, running: bool, extras: list[str]
) -> None:
    """Runs whose call ids count from 1 again, with odd lines between them: the newest
    ``keep_recent`` outputs, a running call's results, lines without an id and every
    assistant line stay; every other result is a placeholder of its own call."""
    messages: list[dict[str, Any] | bytes] = [make_message(0, "user", TASK)]
    for run in range(runs):
        for step in range(calls):
            messages += exchange(len(messages), f"call_{step}", f"make step{step} # {run}")
        for extra in extras:
            k = len(messages)
            if extra == "system":
                messages.append(make_message(k, "system", "reminder " * 40))
            elif extra == "blank":
                messages.append(make_message(k, "user", " \n"))
            elif extra == "orphan":
                messages.append(make_message(k, "user", [result(f"gone_{k}")]))
            elif extra == "no-id":
                messages.append({"role": "user", "content": [result(f"x_{k}")]})
            else:
                messages.append(b"{not json\n")
    if running:
        messages.append(make_message(len(messages), "assistant", [call("call_0")]))
    lines = lines_of(messages)
    masking = plan_masking(lines, keep_recent, frozenset())
    outputs = tool_outputs(lines)
    old = outputs[: max(0, len(outputs) - keep_recent)]
    by_line = {m.line.index: m for m in masking.masked}
    assert all(lines[i].role == "user" for i in by_line)
    for output in outputs[len(old) :]:
        assert output.line not in by_line
    for output in old:
        line = lines[output.line]
        assert line.message is not None and output.block is not None
        if not isinstance(line.message.get("id"), str):
            assert output.line not in by_line
            continue
        text = by_line[output.line].line.blocks[output.block]["content"]
        assert text.endswith(expand_line(line.message["id"]))
        if output.call is None:
            assert text.startswith(f"{PLACEHOLDER_LEAD}a tool — ")
        else:
            made, which = output.call.label.split()[1], output.call.label.split()[-1]
            assert text.startswith(f"{PLACEHOLDER_LEAD}`make {made} # {which}`")
            assert line.blocks[output.block]["tool_use_id"] == f"call_{made[4:]}"
            assert lines[output.line - 1].tool_use_ids == {f"call_{made[4:]}"}
    with_ids = [o for o in old if isinstance((lines[o.line].message or {}).get("id"), str)]
    assert masking.outputs == len(with_ids)


def test_an_item_that_is_not_an_object_does_not_shift_the_results() -> None:
    """A stray string among the blocks (the API would refuse it; the file may hold it):
    each result still gets its own call's placeholder, the stray item stays."""
    messages = [
        make_message(0, "user", TASK),
        make_message(1, "assistant", [call("a", "make alpha"), call("b", "make beta")]),
        make_message(2, "user", ["stray", result("a"), result("b")]),
        *exchange(3, "c"),
    ]
    lines = lines_of(messages)
    [masked] = plan_masking(lines, 1, frozenset()).masked
    content = json.loads(masked.data)["content"]
    assert content[0] == "stray"
    assert content[1]["content"].startswith(f"{PLACEHOLDER_LEAD}`make alpha`")
    assert content[2]["content"].startswith(f"{PLACEHOLDER_LEAD}`make beta`")
    assert masked.outputs == 2


def test_an_output_exactly_twice_its_placeholder_is_masked() -> None:
    """The shrink rule at its limit: an output of exactly MIN_SHRINK times its
    placeholder's length is masked, one character less is not."""
    sizes = [
        n
        for n in range(200, 1200)
        if n == MIN_SHRINK * len(placeholder_text(None, "y" * n, False, "msg-0001"))
    ]
    assert sizes
    for size, masked in ((sizes[0], True), (sizes[0] - 1, False)):
        messages = [
            make_message(0, "user", TASK),
            make_message(1, "user", [result("gone", "y" * size)]),
            *exchange(2, "a"),
        ]
        plan = plan_masking(lines_of(messages), 1, frozenset())
        assert [m.line.index for m in plan.masked] == ([1] if masked else [])


def test_a_text_mode_output_is_not_said_to_have_failed() -> None:
    """Pasted output with no exit status says no outcome: text mode has no error flag."""
    messages = text_agent(2, 40)
    messages[2]["content"] = "plain output line\n" * 40
    [masked] = plan_masking(lines_of(messages), 1, frozenset()).masked
    assert masked.line.message is not None
    assert masked.line.message["content"].startswith(f"{PLACEHOLDER_LEAD}`pytest -k case_0` — ")


def test_a_file_that_defines_nothing_gets_no_definitions_note() -> None:
    view = tool_use_call(1, {"type": "tool_use", "id": "v", "name": "Read",
                             "input": {"file_path": "notes.txt"}})  # fmt: skip
    listing = "".join(f"{n}\tjust some prose here\n" for n in range(1, 80))
    text = placeholder_text(view, listing, False, "m")
    assert "defines" not in text
    assert text.startswith(f"{PLACEHOLDER_LEAD}read notes.txt — ")


def test_a_result_after_a_running_turn_for_another_id_is_masked() -> None:
    """Only the results of the running turn's own calls stay; a stray result after it
    (its call summarized away) is masked like any old output."""
    messages = [make_message(0, "user", TASK), *exchange(1, "a")]
    messages += [
        make_message(3, "assistant", [call("c"), call("d")]),
        make_message(4, "user", [result("c")]),
        make_message(5, "user", [result("zzz")]),
    ]
    lines = lines_of(messages)
    assert running_tool_call(lines) == 3
    assert masked_indices(plan_masking(lines, 0, frozenset())) == [2, 5]


def test_only_a_tool_use_block_is_a_call() -> None:
    """A text block that carries an id (some agents give every block one) is no call: a
    result naming that id is an unknown tool's."""
    messages = [
        make_message(0, "user", TASK),
        make_message(1, "assistant", [{"type": "text", "text": "running", "id": "a"}]),
        make_message(2, "user", [result("a")]),
        *exchange(3, "b"),
    ]
    lines = lines_of(messages)
    assert [(o.line, o.call) for o in tool_outputs(lines)][:1] == [(2, None)]
    [masked] = plan_masking(lines, 1, frozenset()).masked
    assert masked.line.blocks[0]["content"].startswith(f"{PLACEHOLDER_LEAD}a tool — ")


def test_a_failure_note_says_the_error_flag_when_the_output_names_no_error() -> None:
    """A result flagged as an error whose output says nothing of it: the placeholder's
    failure note names the flag, for a known call and an unknown one alike."""
    output = "collected output line\n" * 40
    for call_made, digest in (
        (shell("pytest -x"), "`pytest -x`: failed"),
        (None, "a tool (error)"),
    ):
        text = placeholder_text(call_made, output, True, "m")
        assert text.startswith(f"{PLACEHOLDER_LEAD}{digest}; failure: error flag — ")
        assert "failure" not in placeholder_text(call_made, output, False, "m")


def test_a_file_shown_is_not_read_as_the_tools_own_failure() -> None:
    """``cat`` of a log that holds a test failure: the command showed a file and did not
    fail, so the placeholder has no failure note; the same words from a test run do."""
    log = "FAILED tests/test_pay.py::test_total - AssertionError\n" + "log line\n" * 80
    shown = placeholder_text(shell("cat build.log"), log, False, "m")
    assert shown.startswith(f"{PLACEHOLDER_LEAD}`cat build.log`")
    assert "failure:" not in shown
    run = placeholder_text(shell("pytest tests/test_pay.py"), log, False, "m")
    assert "; failure: FAILED tests/test_pay.py::test_total" in run


def test_the_failure_note_is_what_the_classifier_reads_back() -> None:
    """The note holds the line the outcome reader found the failure on (for a traceback,
    not the exception the digest names), and reading the placeholder gives it back; a
    tool that failed with an error line or with nothing to show says that much."""
    traceback = (
        'Traceback (most recent call last):\n  File "/src/app/config.py", line 48, in load\n'
        "    raise KeyError(name)\nKeyError: 'server'\n" + "noise\n" * 400
    )
    found = read_failure(traceback, "python -m app")
    assert found is not None
    text = placeholder_text(shell("python -m app"), traceback, False, "m")
    assert f"; failure: {found.line} — " in text and text.count("failure:") == 1
    back = read_failure(text)
    assert back is not None and back.line == found.line
    read = tool_use_call(1, {"type": "tool_use", "id": "r", "name": "Read",
                             "input": {"file_path": "a.py"}})  # fmt: skip
    denied = placeholder_text(read, "Permission denied: a.py\n" + "x\n" * 40, True, "m")
    assert "; failure: Permission denied: a.py — " in denied
    blank = placeholder_text(read, "   \n" * 50, True, "m")
    assert blank.startswith(f"{PLACEHOLDER_LEAD}read a.py: failed; failure: error flag — ")


def test_a_deep_traceback_names_where_it_was_raised_and_the_frame_before() -> None:
    """Where the exception was raised, the frame that called it, then references, the
    placeholder's ``line N`` no more than MAX_LINE_REFERENCES in all."""
    frames = "".join(
        f'  File "/src/app/{name}.py", line {n}, in {name}\n    call()\n'
        for name, n in (("a", 11), ("b", 22), ("c", 33), ("d", 44))
    )
    traceback = f"Traceback (most recent call last):\n{frames}KeyError: 1\n" + "noise\n" * 300
    text = placeholder_text(shell("python -m app"), traceback, False, "m")
    assert text.startswith(f"{PLACEHOLDER_LEAD}`python -m app`: KeyError at /src/app/d.py line 44")
    assert "; via /src/app/c.py line 33;" in text
    assert len(re.findall(r"\bline \d+\b", text)) == MAX_LINE_REFERENCES


def test_references_fill_only_the_room_the_digest_leaves() -> None:
    """One frame names a line; of the output's other references only as many as fit in
    MAX_LINE_REFERENCES follow, the last ones."""
    output = (
        'Traceback (most recent call last):\n  File "/src/app/d.py", line 44, in d\n'
        "    call()\nKeyError: 1\nsee line 5, line 6 and line 7\n" + "noise\n" * 300
    )
    text = placeholder_text(shell("python -m app"), output, False, "m")
    found = re.findall(r"\bline \d+\b", text)
    assert len(found) == MAX_LINE_REFERENCES
    assert found[0] == "line 44" and found[-1] == "line 7"
