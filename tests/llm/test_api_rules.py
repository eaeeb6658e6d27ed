"""The fake Messages API refuses what the real one refuses: each invalid request shape gets a
400 ``invalid_request_error`` naming the rule, through the real SDK; valid ones get 200.
Its field tables (and memoryd's API view's) match the installed SDK's request types."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import Message, content_block_param, tool_result_block_param
from anthropic.types.message_count_tokens_params import MessageCountTokensParams
from anthropic.types.message_create_params import MessageCreateParamsBase
from api_rules import (
    BLOCK_FIELDS,
    COUNT_TOKENS_FIELDS,
    CREATE_FIELDS,
    RESULT_CONTENT_FIELDS,
    request_problem,
)
from fake_anthropic import FakeAnthropic

from memoryd.conversation import api_blocks

MODEL = "claude-test"
HEADER_PARAMS = {"user_profile_id", "workspace_id"}
"""Parameters of ``messages.create`` that the SDK sends as headers, not in the body."""


def _type_name(param: Any) -> str:
    literal = typing.get_type_hints(param)["type"]
    while typing.get_args(literal) and not isinstance(typing.get_args(literal)[0], str):
        literal = typing.get_args(literal)[0]  # Required[Literal["text"]]
    name: str = typing.get_args(literal)[0]
    return name


def sdk_fields(union: Any) -> dict[str, frozenset[str]]:
    """Each block type of an SDK union of block params, with its fields."""
    return {_type_name(param): frozenset(param.__annotations__) for param in typing.get_args(union)}


def test_the_top_level_fields_cover_the_sdks_request_parameters() -> None:
    assert set(MessageCreateParamsBase.__annotations__) - HEADER_PARAMS <= CREATE_FIELDS
    assert "stream" in CREATE_FIELDS
    assert set(MessageCountTokensParams.__annotations__) - HEADER_PARAMS <= COUNT_TOKENS_FIELDS
    assert "max_tokens" not in COUNT_TOKENS_FIELDS


def test_the_block_tables_match_the_sdks_block_params() -> None:
    """The fake and memoryd's API view each hold their own table (the view must not be
    checked against itself); both are the SDK's."""
    blocks = sdk_fields(content_block_param.ContentBlockParam)
    inner = sdk_fields(tool_result_block_param.Content)
    assert blocks == BLOCK_FIELDS == api_blocks.BLOCK_FIELDS
    assert inner == RESULT_CONTENT_FIELDS == api_blocks.TOOL_RESULT_CONTENT_FIELDS


@pytest.fixture(scope="module")
def client() -> Iterator[anthropic.Anthropic]:
    with (
        FakeAnthropic() as server,
        anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0) as sdk,
    ):
        yield sdk


def create(client: anthropic.Anthropic, messages: Any, **options: Any) -> Message:
    """``messages.create`` with plain dicts, invalid ones included: the SDK sends them as
    they are (its request types are for the type checker only)."""
    reply: Message = client.messages.create(
        model=MODEL, messages=messages, **{"max_tokens": 16, **options}
    )
    return reply


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def tool_use(ident: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": "bash", "input": {"cmd": "ls"}, **extra}


def tool_result(ident: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": ident, "content": content, **extra}


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


TASK = user("Fix the failing test in tests/test_x.py.")
MARK = {"cache_control": {"type": "ephemeral"}}

REFUSED: dict[str, tuple[list[dict[str, Any]], str]] = {
    "a memoryd field on a message": (
        [{**TASK, "id": "m1", "timestamp": 1}],
        "messages.0.id: Extra inputs are not permitted",
    ),
    "an unknown role": ([{"role": "system", "content": "hi"}], "messages.0.role"),
    "no content": ([{"role": "user"}], "messages.0.content: Field required"),
    "the first turn the assistant's": (
        [assistant("[Summary of earlier conversation]\n\nx"), TASK],
        'first message must use the "user" role',
    ),
    "the first turn the assistant's after merging": (
        [assistant("a"), assistant("b"), TASK],
        'first message must use the "user" role',
    ),
    "an empty string": ([TASK, assistant("ok"), user("")], "must have non-empty content"),
    "an empty list": ([TASK, assistant("ok"), user([])], "must have non-empty content"),
    "an empty text block": ([user([text("")])], "text content blocks must be non-empty"),
    "a blank text block": ([user([text(" \n")])], "must contain non-whitespace text"),
    "an unknown block type": ([user([{"type": "note", "text": "x"}])], "Input tag 'note'"),
    "an unknown field on a text block": (
        [user([text("x", timestamp=1)])],
        "messages.0.content.0.text.timestamp: Extra inputs are not permitted",
    ),
    "an unknown field on a tool_use": (
        [TASK, assistant([tool_use("t1", status="done")])],
        "tool_use.status: Extra inputs are not permitted",
    ),
    "a tool_use without input": (
        [TASK, assistant([{"type": "tool_use", "id": "t1", "name": "bash"}])],
        "tool_use.input: Field required",
    ),
    "a tool id with a dot": ([TASK, assistant([tool_use("call.1")])], "should match pattern"),
    "a tool_use in a user turn": ([user([tool_use("t1")])], "only allowed in assistant"),
    "a tool_result in an assistant turn": (
        [TASK, assistant([tool_result("t1")])],
        "only allowed in user messages",
    ),
    "a tool_result with no tool_use before it": (
        [TASK, assistant("ok"), user([tool_result("t9")])],
        "unexpected `tool_use_id` found in `tool_result` blocks: t9",
    ),
    "a tool_result answering an older turn": (
        [
            TASK,
            assistant([tool_use("t1")]),
            user([tool_result("t1")]),
            assistant([tool_use("t2")]),
            user([tool_result("t2"), tool_result("t1")]),
        ],
        "unexpected `tool_use_id` found in `tool_result` blocks: t1",
    ),
    "a tool_use left unanswered before a user turn": (
        [TASK, assistant([tool_use("t1"), tool_use("t2")]), user([tool_result("t1")])],
        "`tool_use` ids were found without `tool_result` blocks immediately after: t2",
    ),
    "a tool_use answered only after a text turn": (
        [TASK, assistant([tool_use("t1")]), user("wait"), assistant("ok")],
        "`tool_use` ids were found without `tool_result` blocks immediately after: t1",
    ),
    "text before the tool_result": (
        [TASK, assistant([tool_use("t1")]), user([text("here:"), tool_result("t1")])],
        "`tool_result` blocks must come first",
    ),
    "a repeated tool_use id": (
        [
            TASK,
            assistant([tool_use("t1")]),
            user([tool_result("t1")]),
            assistant([tool_use("t1")]),
        ],
        "`tool_use` ids must be unique",
    ),
    "an unknown field in a tool_result's content": (
        [TASK, assistant([tool_use("t1")]), user([tool_result("t1", [text("x", id=3)])])],
        "tool_result.content.0.text.id: Extra inputs are not permitted",
    ),
    "trailing whitespace ending the final assistant turn": (
        [TASK, assistant("Let me look \n")],
        "final assistant content cannot end with trailing whitespace",
    ),
    "five cache_control marks": (
        [user([text(f"part {n}", **MARK) for n in range(5)])],
        "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_fake_refuses_an_invalid_conversation_through_the_sdk(
    client: anthropic.Anthropic, case: str
) -> None:
    messages: Any
    messages, rule = REFUSED[case]
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(client, messages)
    assert caught.value.status_code == 400
    body: Any = caught.value.body
    assert body["error"]["type"] == "invalid_request_error"
    assert rule in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model=MODEL, messages=messages)


@pytest.mark.parametrize(
    ("extra", "rule"),
    [
        ({"frobnicate": 1}, "frobnicate: Extra inputs are not permitted"),
        ({"max_tokens": -1}, "max_tokens: Input should be greater than or equal to 0"),
        ({"max_tokens": "16"}, "max_tokens: Input should be a valid integer"),
        ({"messages": []}, "messages: at least one message is required"),
        ({"system": [text("")]}, "system: text content blocks must be non-empty"),
    ],
)
def test_the_fake_refuses_invalid_top_level_fields_through_the_sdk(
    client: anthropic.Anthropic, extra: dict[str, Any], rule: str
) -> None:
    with pytest.raises(anthropic.BadRequestError, match=rule):
        create(client, [TASK], extra_body=extra)


def test_count_tokens_refuses_max_tokens(client: anthropic.Anthropic) -> None:
    messages: Any = [TASK]
    with pytest.raises(anthropic.BadRequestError, match="max_tokens: Extra inputs"):
        client.messages.count_tokens(model=MODEL, messages=messages, extra_body={"max_tokens": 9})


ACCEPTED: dict[str, list[dict[str, Any]]] = {
    "a chat": [TASK, assistant("Which test?"), user("test_x")],
    "consecutive user turns (merged by the API)": [TASK, user("and be quick")],
    "a tool loop with parallel calls": [
        TASK,
        assistant([text("Looking."), tool_use("t1"), tool_use("t2")]),
        user([tool_result("t1", "a.py"), tool_result("t2", [text("b.py")], is_error=False)]),
        assistant([tool_use("t3")]),
        user([tool_result("t3", "")]),
        assistant("Done."),
    ],
    "a tool_result followed by a reminder in the same turn": [
        TASK,
        assistant([tool_use("t1")]),
        user([tool_result("t1")]),
        user("<system-reminder>keep going</system-reminder>"),
    ],
    "a final assistant tool_use awaiting its result": [TASK, assistant([tool_use("t1")])],
    "an empty final assistant turn": [TASK, assistant("")],
    "four cache_control marks": [user([text(f"part {n}", **MARK) for n in range(4)])],
    "a system message turned into a user turn's text": [
        user([text("[a message with role 'system']"), text("Be terse.")])
    ],
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_the_fake_accepts_a_valid_conversation_through_the_sdk(
    client: anthropic.Anthropic, case: str
) -> None:
    messages: Any = ACCEPTED[case]
    assert create(client, messages).type == "message"
    assert client.messages.count_tokens(model=MODEL, messages=messages).input_tokens > 0


THINKING = {"type": "enabled", "budget_tokens": 1024}
THOUGHT = {"type": "thinking", "thinking": "The test imports x.", "signature": "EqQBsig=="}


@pytest.mark.parametrize(
    ("messages", "rule"),
    [
        (
            [TASK, assistant([text("Running it."), tool_use("t1")]), user([tool_result("t1")])],
            "a final `assistant` message must start with a thinking block",
        ),
        (
            [TASK, assistant([text("Hm."), THOUGHT, tool_use("t1")])],
            "Expected `thinking` or `redacted_thinking`, but found `text`",
        ),
    ],
)
def test_with_thinking_on_the_call_in_progress_must_start_with_its_thinking(
    client: anthropic.Anthropic, messages: list[dict[str, Any]], rule: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(client, messages, max_tokens=2048, thinking=THINKING)
    body: Any = caught.value.body
    assert rule in body["error"]["message"]


def test_with_thinking_off_a_final_assistant_turn_may_not_hold_thinking(
    client: anthropic.Anthropic,
) -> None:
    messages = [TASK, assistant([THOUGHT]), assistant([tool_use("t1")])]
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(client, messages)
    body: Any = caught.value.body
    assert "When thinking is disabled" in body["error"]["message"]


@pytest.mark.parametrize(
    "messages",
    [
        [TASK, assistant([THOUGHT, tool_use("t1")]), user([tool_result("t1")])],
        [TASK, assistant([THOUGHT]), assistant([text("x"), tool_use("t1")])],
        [TASK, assistant([text("An older answer, thinking left out.")]), user("Go on.")],
    ],
)
def test_with_thinking_on_a_call_that_starts_with_its_thinking_is_accepted(
    client: anthropic.Anthropic, messages: list[dict[str, Any]]
) -> None:
    reply = create(client, messages, max_tokens=2048, thinking=THINKING)
    assert reply.type == "message"


def test_request_problem_names_the_rule_without_a_server() -> None:
    assert request_problem({"model": MODEL, "max_tokens": 1, "messages": [TASK]}) is None
    assert request_problem({"model": MODEL, "messages": [TASK]}) == "max_tokens: Field required"
    assert request_problem({"model": MODEL, "messages": [TASK]}, count_only=True) is None
    assert request_problem([TASK]) == "body: Input should be a valid dictionary"
