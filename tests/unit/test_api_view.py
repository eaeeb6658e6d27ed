"""The API view: a conversation's messages as a Messages-API ``messages`` list the API
accepts (checked with the fake server's own rules, :func:`api_rules.request_problem`),
with nothing dropped silently."""

from __future__ import annotations

import copy
import json
from typing import Any

from api_rules import request_problem, thinking_for
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.conversation.api_view import START_TURN, api_messages

SUMMARY: dict[str, Any] = {
    "id": "5b0c",
    "role": "assistant",
    "content": "[Summary of earlier conversation]\n\nThe user asked for a fix in src/app.py.",
    "timestamp": 1_700_000_000_000,
    "isSummary": True,
    "summarizedCount": 40,
    "firstId": "msg-0001",
    "lastId": "msg-0040",
    "archive": ".memoryd/archive/conversation-1.jsonl",
}
CHECKPOINT: dict[str, Any] = {
    **SUMMARY,
    "content": "[Checkpoint of earlier conversation]\n\n## Goals\n- ship v2",
    "isCheckpoint": True,
    "checkpoint": {"version": 3, "goals": ["ship v2"]},
}


def message(index: int, role: str, content: Any, **extra: Any) -> dict[str, Any]:
    return {"id": f"msg-{index:04d}", "role": role, "content": content, "timestamp": index, **extra}


def tool_use(ident: str, cmd: str = "ls") -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "bash", "input": {"cmd": cmd}}


def tool_result(ident: str, content: Any = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": content}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def accepted(view: list[dict[str, Any]]) -> bool:
    """The fake API's verdict on a request made of ``view``, with extended thinking on
    when the agent of such a view would have it on (:func:`api_rules.thinking_for`)."""
    body: dict[str, Any] = {"model": "m", "max_tokens": 2048, "messages": view}
    if thinking_for(view):
        body["thinking"] = thinking_for(view)
    problem = request_problem(body)
    assert problem is None, problem
    return True


def test_chat_turns_keep_only_role_and_content() -> None:
    conversation = [
        message(1, "user", "Hello", pinned=True),
        message(2, "assistant", "Hi! What can I do?", model="x"),
        message(3, "user", [text("Fix the build.")]),
    ]
    assert api_messages(conversation) == [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi! What can I do?"},
        {"role": "user", "content": [text("Fix the build.")]},
    ]


def test_consecutive_turns_of_one_role_are_merged_into_blocks() -> None:
    conversation = [
        message(1, "user", "Fix the build."),
        message(2, "user", [text("<system-reminder>tests are slow</system-reminder>")]),
        message(3, "assistant", "On it."),
        message(4, "assistant", "Done."),
    ]
    view = api_messages(conversation)
    assert view == [
        {
            "role": "user",
            "content": [
                text("Fix the build."),
                text("<system-reminder>tests are slow</system-reminder>"),
            ],
        },
        {"role": "assistant", "content": [text("On it."), text("Done.")]},
    ]
    assert accepted(view)


def tool_loop() -> list[dict[str, Any]]:
    """An autonomous loop: one task, then tool_use / tool_result pairs, one with two
    parallel calls."""
    return [
        message(1, "user", "Task: make tests/test_x.py pass.\n" + "Standing rules. " * 50),
        message(2, "assistant", [text("Running the tests."), tool_use("toolu_1", "pytest")]),
        message(3, "user", [tool_result("toolu_1", "FAILED test_x.py::test_a - KeyError")]),
        message(4, "assistant", [tool_use("toolu_2", "cat a.py"), tool_use("toolu_3", "cat b.py")]),
        message(
            5,
            "user",
            [tool_result("toolu_2", [text("a = 1")]), tool_result("toolu_3", "b = 2")],
        ),
        message(6, "assistant", "Fixed: the key was missing."),
    ]


def test_an_autonomous_tool_loop_passes_through_unchanged_but_for_memoryds_fields() -> None:
    conversation = tool_loop()
    view = api_messages(conversation)
    assert view == [{"role": m["role"], "content": m["content"]} for m in conversation]
    assert accepted(view)


def test_a_compacted_file_starts_with_the_summary_and_the_pinned_task_as_one_user_turn() -> None:
    task = message(1, "user", "Task: make tests/test_x.py pass.", pinned=True)
    kept = tool_loop()[3:]  # starts with the assistant's parallel tool calls
    view = api_messages([SUMMARY, task, *kept])
    assert view[0] == {
        "role": "user",
        "content": [text(SUMMARY["content"]), text("Task: make tests/test_x.py pass.")],
    }
    assert view[1] == {"role": "assistant", "content": kept[0]["content"]}
    assert [turn["role"] for turn in view] == ["user", "assistant", "user", "assistant"]
    assert accepted(view)


def test_a_checkpoint_head_becomes_a_user_turn_of_its_text() -> None:
    view = api_messages([CHECKPOINT, message(1, "assistant", "Continuing with v2.")])
    assert view == [
        {"role": "user", "content": CHECKPOINT["content"]},
        {"role": "assistant", "content": "Continuing with v2."},
    ]
    assert accepted(view)


def test_a_conversation_that_starts_with_the_assistant_gets_a_short_user_turn_first() -> None:
    view = api_messages([message(1, "assistant", "Hello, I am ready."), message(2, "user", "Go")])
    assert view[0] == {"role": "user", "content": START_TURN}
    assert view[1] == {"role": "assistant", "content": "Hello, I am ready."}
    assert accepted(view)


def test_a_tool_result_whose_call_is_not_in_the_turn_before_becomes_text_saying_so() -> None:
    conversation = [
        SUMMARY,  # the tool_use of toolu_9 was summarized away
        message(1, "user", [tool_result("toolu_9", "12 passed"), text("Go on.")]),
        message(2, "assistant", "Good."),
    ]
    view = api_messages(conversation)
    first = view[0]["content"]
    assert first[1]["type"] == "text"
    assert first[1]["text"].startswith("[tool result for toolu_9;")
    assert first[1]["text"].endswith("\n12 passed")
    assert first[2] == text("Go on.")
    assert accepted(view)


def test_an_unanswered_tool_call_becomes_text_unless_it_ends_the_conversation() -> None:
    conversation = [
        message(1, "user", "Task"),
        message(2, "assistant", [tool_use("toolu_1"), tool_use("toolu_2")]),
        message(3, "user", [tool_result("toolu_1")]),
        message(4, "assistant", [text("Next."), tool_use("toolu_3")]),
    ]
    view = api_messages(conversation)
    middle = view[1]["content"]
    assert middle[0] == tool_use("toolu_1")
    assert middle[1]["type"] == "text" and "toolu_2" in middle[1]["text"]
    assert "its result is not in the user turn right after it" in middle[1]["text"]
    assert view[3]["content"][1] == tool_use("toolu_3")  # the agent is about to answer it
    assert accepted(view)


def test_tool_results_come_first_in_a_merged_user_turn() -> None:
    conversation = [
        message(1, "user", "Task"),
        message(2, "assistant", [tool_use("toolu_1")]),
        message(3, "user", "<system-reminder>hook ran</system-reminder>"),
        message(4, "user", [tool_result("toolu_1")]),
    ]
    view = api_messages(conversation)
    assert view[2]["content"] == [
        tool_result("toolu_1"),
        text("<system-reminder>hook ran</system-reminder>"),
    ]
    assert accepted(view)


def test_blocks_keep_only_the_fields_the_api_knows_and_unknown_types_become_text() -> None:
    conversation = [
        message(
            1,
            "user",
            [
                text("look", id="b1", cache_control={"type": "ephemeral"}),
                {"type": "input_text", "text": "from another format"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                "a bare string",
                7,
                None,
            ],
        ),
    ]
    view = api_messages(conversation)
    assert view[0]["content"] == [
        text("look", cache_control={"type": "ephemeral"}),
        text("from another format"),
        text('[a image_url block] {"type": "image_url", "image_url": {"url": "https://x/y.png"}}'),
        text("a bare string"),
        text("7"),
    ]
    assert accepted(view)


def test_blocks_in_the_wrong_role_and_broken_tool_calls_become_text() -> None:
    conversation = [
        message(1, "user", [tool_use("toolu_1"), {"type": "thinking", "thinking": "hm"}]),
        message(2, "assistant", [tool_result("toolu_1"), {"type": "tool_use", "id": "a.b"}]),
    ]
    view = api_messages(conversation)
    assert [block["type"] for turn in view for block in turn["content"]] == ["text"] * 4
    assert "[a tool_use block in a user turn]" in view[0]["content"][0]["text"]
    assert "it is in an assistant turn" in view[1]["content"][0]["text"]
    assert accepted(view)


def test_empty_content_is_dropped_and_a_turn_left_empty_disappears() -> None:
    conversation = [
        message(1, "user", "Task"),
        message(2, "assistant", ""),
        message(3, "assistant", [text(""), text("  \n")]),
        message(4, "user", [text("more"), text("")]),
        message(5, "assistant", [tool_use("toolu_1")]),
        message(6, "user", [tool_result("toolu_1", [text(" ")])]),
    ]
    view = api_messages(conversation)
    assert view == [
        {"role": "user", "content": [text("Task"), text("more")]},
        {"role": "assistant", "content": [tool_use("toolu_1")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    ]
    assert accepted(view)


def test_a_message_of_another_role_becomes_a_user_turn_that_names_it() -> None:
    view = api_messages([{"role": "system", "content": "Be terse."}, {"content": "no role"}])
    assert view == [
        {
            "role": "user",
            "content": [
                text("[a message with role 'system']"),
                text("Be terse."),
                text("[a message without a role]"),
                text("no role"),
            ],
        }
    ]


def test_only_the_last_four_cache_marks_are_kept_and_the_final_assistant_text_is_trimmed() -> None:
    mark = {"cache_control": {"type": "ephemeral"}}
    conversation = [
        message(1, "user", [text(f"part {n}", **mark) for n in range(6)]),
        message(2, "assistant", "Thinking about it \n"),
    ]
    view = api_messages(conversation)
    assert ["cache_control" in block for block in view[0]["content"]] == [False] * 2 + [True] * 4
    assert view[1]["content"] == "Thinking about it"
    assert accepted(view)


THOUGHT = {"type": "thinking", "thinking": "Check the import first.", "signature": "EqQBsig=="}


def test_a_thinking_line_and_its_call_line_are_one_turn_that_starts_with_the_thinking() -> None:
    """Claude Code's one-block-per-line shape, with a blank user line and an earlier
    answer's text in between: the merged turn starts with the thinking block, unchanged,
    and the request is one the API takes with thinking on."""
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}
    conversation = [
        message(0, "user", "Fix the import."),
        message(1, "assistant", [text("Looking.")]),
        message(2, "user", "  \n"),
        message(3, "assistant", [THOUGHT, redacted]),
        message(4, "assistant", [tool_use("toolu_1")]),
        message(5, "user", [tool_result("toolu_1")]),
    ]
    view = api_messages(conversation)
    assert [turn["role"] for turn in view] == ["user", "assistant", "user"]
    assert view[1]["content"][:2] == [THOUGHT, redacted]
    assert [b["type"] for b in view[1]["content"][2:]] == ["text", "tool_use"]
    body = {"model": "m", "max_tokens": 2048, "messages": view, "thinking": THINKING_ON}
    assert request_problem(body) is None


THINKING_ON = {"type": "enabled", "budget_tokens": 1024}


def test_the_input_is_left_unchanged() -> None:
    marked = [text(f"part {n}", cache_control={"type": "ephemeral"}) for n in range(6)]
    conversation = [
        SUMMARY,
        *tool_loop()[3:],
        message(8, "user", marked),
        message(9, "assistant", [text("end ")]),
    ]
    before = copy.deepcopy(conversation)
    api_messages(conversation)
    assert conversation == before


def test_an_empty_conversation_gives_an_empty_list() -> None:
    assert api_messages([]) == []
    assert api_messages([message(1, "user", " ")]) == []


# ----- the property: any conversation gives a list the API accepts --------------------------

IDS = st.sampled_from(["toolu_1", "toolu_2", "toolu_3", "call.4", ""])
TEXTS = st.sampled_from(["", " ", "\n", "ok", "trailing \n", "[x]"]) | st.text(max_size=12)
TEXT_BLOCKS = st.builds(text, TEXTS) | st.builds(
    lambda t: text(t, cache_control={"type": "ephemeral"}, id="extra"), TEXTS
)
BLOCKS = st.one_of(
    TEXT_BLOCKS,
    st.builds(
        lambda i, n, inp: {"type": "tool_use", "id": i, "name": n, "input": inp, "ts": 1},
        IDS,
        st.sampled_from(["bash", ""]),
        st.sampled_from([{}, {"cmd": "ls"}, "not an object"]),
    ),
    st.builds(
        lambda i, c, e: {"type": "tool_result", "tool_use_id": i, "content": c, "is_error": e},
        IDS,
        TEXTS | st.lists(TEXT_BLOCKS | st.just({"type": "note"}), max_size=2),
        st.sampled_from([True, False, "no"]),
    ),
    st.fixed_dictionaries({"type": st.sampled_from(["note", "input_text"]), "text": TEXTS}),
    st.just({"type": "thinking", "thinking": "hm", "signature": "s"}),
    st.just({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}),
    st.sampled_from(["bare", 3, None]),
)
MESSAGES = st.builds(
    lambda role, content, n: {"id": f"m{n}", "role": role, "content": content, "timestamp": n},
    st.sampled_from(["user", "assistant", "user", "assistant", "system", None]),
    TEXTS | st.lists(BLOCKS, max_size=4) | st.none(),
    st.integers(0, 99),
)
HEADS = st.sampled_from([[], [SUMMARY], [CHECKPOINT]])


def strings_of(value: Any) -> list[str]:
    """The texts a conversation holds: string contents, text blocks, tool_result content."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in strings_of(item)]
    if isinstance(value, dict) and value.get("type") in ("text", "input_text", "note"):
        return strings_of(value.get("text"))
    if isinstance(value, dict) and value.get("type") == "tool_result":
        return strings_of(value.get("content"))
    if isinstance(value, dict) and "role" in value:
        return strings_of(value.get("content"))
    return []


@settings(max_examples=400, deadline=None)
@given(HEADS, st.lists(MESSAGES, max_size=12))
def test_any_conversation_gives_a_list_the_api_accepts_and_drops_no_text(
    head: list[dict[str, Any]], body: list[dict[str, Any]]
) -> None:
    conversation = head + body
    view = api_messages(conversation)
    if view:
        assert accepted(view)
    assert all(turn["content"] for turn in view)
    held = "\n".join(strings_of(view))
    for value in strings_of(conversation):
        assert value.rstrip() in held
    dumped = json.dumps(view, ensure_ascii=False)
    for block in (b for m in body if isinstance(m["content"], list) for b in m["content"]):
        if isinstance(block, dict) and block.get("type") == "tool_use" and block["id"]:
            assert block["id"] in dumped


def test_with_thinking_off_the_view_leaves_thinking_out_and_the_api_takes_it() -> None:
    """An agent that sends with extended thinking off: the API refuses thinking in the
    final assistant turn, so ``thinking=False`` leaves every thinking block out (a line
    that held nothing else disappears); the default view keeps them for thinking on."""
    conversation = [
        message(0, "user", "Fix the import."),
        message(1, "assistant", [THOUGHT]),
        message(2, "assistant", [THOUGHT, text("Running it."), tool_use("toolu_1")]),
    ]
    kept = api_messages(conversation)
    body = {"model": "m", "max_tokens": 2048, "messages": kept}
    assert request_problem(body) is not None
    assert request_problem({**body, "thinking": THINKING_ON}) is None
    view = api_messages(conversation, thinking=False)
    assert view == [
        {"role": "user", "content": "Fix the import."},
        {"role": "assistant", "content": [text("Running it."), tool_use("toolu_1")]},
    ]
    assert request_problem({**body, "messages": view}) is None
    assert conversation[1]["content"] == [THOUGHT]  # the input is left as it was
