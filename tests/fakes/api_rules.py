"""The request rules of the Messages API, as the real API enforces them.

``request_problem(body)`` is what the fake server (``fake_anthropic.py``) answers with a
400 ``invalid_request_error``; tests import it to check a request without a server. The
messages use the API's own words where they are known ("Extra inputs are not permitted",
"`tool_use` ids were found without `tool_result` blocks immediately after", ...).

Standard library only, like the fake server; the tables are kept in step with the
installed SDK's ``MessageCreateParams`` and block params by tests/llm/test_api_rules.py.
"""

from __future__ import annotations

import re
from typing import Any

CREATE_FIELDS = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "system",
        "metadata",
        "stop_sequences",
        "stream",
        "temperature",
        "top_p",
        "top_k",
        "tools",
        "tool_choice",
        "thinking",
        "service_tier",
        "container",
        "mcp_servers",
        "context_management",
        "cache_control",
        "diagnostics",
        "inference_geo",
        "output_config",
        "speed",
    }
)
"""The top-level fields of ``POST /v1/messages``."""

COUNT_TOKENS_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "mcp_servers",
        "context_management",
        "cache_control",
        "output_config",
        "speed",
    }
)
"""The top-level fields of ``POST /v1/messages/count_tokens``."""

_SERVER_RESULT = frozenset({"type", "tool_use_id", "content", "cache_control"})
BLOCK_FIELDS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control", "citations"}),
    "image": frozenset({"type", "source", "cache_control", "transformations"}),
    "document": frozenset({"type", "source", "title", "context", "citations", "cache_control"}),
    "search_result": frozenset(
        {"type", "source", "title", "content", "citations", "cache_control"}
    ),
    "container_upload": frozenset({"type", "file_id", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    "tool_use": frozenset(
        {"type", "id", "name", "input", "cache_control", "caller", "toolset_name"}
    ),
    "tool_result": frozenset(
        {"type", "tool_use_id", "content", "is_error", "cache_control", "toolset_name"}
    ),
    "server_tool_use": frozenset({"type", "id", "name", "input", "cache_control", "caller"}),
    "web_search_tool_result": _SERVER_RESULT | {"caller"},
    "web_fetch_tool_result": _SERVER_RESULT | {"caller"},
    "code_execution_tool_result": _SERVER_RESULT,
    "bash_code_execution_tool_result": _SERVER_RESULT,
    "text_editor_code_execution_tool_result": _SERVER_RESULT,
    "tool_search_tool_result": _SERVER_RESULT,
}
"""Every content block type of a message and the fields it may carry."""

RESULT_CONTENT_FIELDS: dict[str, frozenset[str]] = {
    "text": BLOCK_FIELDS["text"],
    "image": BLOCK_FIELDS["image"],
    "document": BLOCK_FIELDS["document"],
    "search_result": BLOCK_FIELDS["search_result"],
    "tool_reference": frozenset({"type", "tool_name", "cache_control"}),
    "browser_state": frozenset({"type", "tabs", "state_changes", "cache_control"}),
}
"""The block types a ``tool_result``'s content may hold."""

REQUIRED: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "image": ("source",),
    "document": ("source",),
    "search_result": ("source", "title", "content"),
    "container_upload": ("file_id",),
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
    "tool_use": ("id", "name", "input"),
    "server_tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id",),
    "tool_reference": ("tool_name",),
    **{name: ("tool_use_id", "content") for name in BLOCK_FIELDS if name.endswith("_tool_result")},
}
ASSISTANT_ONLY = frozenset(BLOCK_FIELDS) - {
    "text",
    "image",
    "document",
    "search_result",
    "container_upload",
    "tool_result",
}
MAX_CACHE_BREAKPOINTS = 4
ID_PATTERN = re.compile(r"^[a-zA-Z0-9_-]+$")
NOT_EMPTY = (
    "messages.{}: all messages must have non-empty content except for the optional final "
    "assistant message"
)
BLANK_TEXT = "text content blocks must contain non-whitespace text"

Located = tuple[int, int, dict[str, Any]]
"""A block of a merged turn: the index of its message, its index there, the block."""


def request_problem(body: Any, count_only: bool = False) -> str | None:
    """Why the API refuses this request body (a 400 ``invalid_request_error``), or None.

    ``count_only`` checks a ``/v1/messages/count_tokens`` body (no ``max_tokens``).
    """
    if not isinstance(body, dict):
        return "body: Input should be a valid dictionary"
    allowed = COUNT_TOKENS_FIELDS if count_only else CREATE_FIELDS
    for name in body:
        if name not in allowed:
            return f"{name}: Extra inputs are not permitted"
    if "model" not in body:
        return "model: Field required"
    if not isinstance(body["model"], str) or not body["model"]:
        return "model: Input should be a non-empty string"
    if not count_only:
        if "max_tokens" not in body:
            return "max_tokens: Field required"
        max_tokens = body["max_tokens"]
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
            return "max_tokens: Input should be a valid integer"
        if max_tokens < 0:  # 0 is allowed: it fills the prompt cache and generates nothing
            return "max_tokens: Input should be greater than or equal to 0"
    if "messages" not in body:
        return "messages: Field required"
    if not isinstance(body["messages"], list):
        return "messages: Input should be a valid list"
    if not body["messages"]:
        return "messages: at least one message is required"
    return (
        _system_problem(body.get("system"))
        or _messages_problem(body["messages"])
        or _thinking_problem(body)
        or _cache_problem(body)
    )


def _system_problem(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if not isinstance(system, list):
        return "system: Input should be a valid string or a valid list"
    for index, block in enumerate(system):
        where = f"system.{index}"
        if not isinstance(block, dict) or block.get("type") != "text":
            return f"{where}: Input should be a text block"
        problem = _fields_problem(where, block, BLOCK_FIELDS["text"])
        if problem:
            return problem
        if not isinstance(block["text"], str) or not block["text"].strip():
            return "system: text content blocks must be non-empty"
    return None


def _turns(messages: list[dict[str, Any]]) -> list[tuple[str, list[Located]]]:
    """The turns the API makes of valid messages: consecutive same-role ones merged."""
    turns: list[tuple[str, list[Located]]] = []
    for index, message in enumerate(messages):
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        located = [(index, position, block) for position, block in enumerate(blocks)]
        if turns and turns[-1][0] == message["role"]:
            turns[-1][1].extend(located)
        else:
            turns.append((message["role"], located))
    return turns


def _messages_problem(messages: list[Any]) -> str | None:
    for index, message in enumerate(messages):
        problem = _message_problem(index, message, index == len(messages) - 1)
        if problem:
            return problem
    turns = _turns(messages)
    if turns[0][0] != "user":
        return 'messages: first message must use the "user" role'
    return _tool_problem(turns) or _final_problem(turns[-1])


def _message_problem(index: int, message: Any, last: bool) -> str | None:
    where = f"messages.{index}"
    if not isinstance(message, dict):
        return f"{where}: Input should be a valid dictionary"
    for name in message:
        if name not in ("role", "content"):
            return f"{where}.{name}: Extra inputs are not permitted"
    if "role" not in message:
        return f"{where}.role: Field required"
    role = message["role"]
    # The SDK also types a mid-conversation "system" turn, which only some models take:
    # refused here, as by every model that does not.
    if role not in ("user", "assistant"):
        return f"{where}.role: Input should be 'user' or 'assistant'"
    if "content" not in message:
        return f"{where}.content: Field required"
    content = message["content"]
    may_be_empty = last and role == "assistant"
    if isinstance(content, str):
        if not content and not may_be_empty:
            return NOT_EMPTY.format(index)
        return f"messages: {BLANK_TEXT}" if content and not content.strip() else None
    if not isinstance(content, list):
        return f"{where}.content: Input should be a valid string or a valid list"
    if not content and not may_be_empty:
        return NOT_EMPTY.format(index)
    for position, block in enumerate(content):
        problem = _block_problem(f"{where}.content.{position}", block, role)
        if problem:
            return problem
    return None


def _fields_problem(where: str, block: dict[str, Any], fields: frozenset[str]) -> str | None:
    kind = block["type"]
    for name in block:
        if name not in fields:
            return f"{where}.{kind}.{name}: Extra inputs are not permitted"
    for name in REQUIRED.get(kind, ()):
        if name not in block:
            return f"{where}.{kind}.{name}: Field required"
    cache_control = block.get("cache_control")
    if cache_control is not None and not isinstance(cache_control, dict):
        return f"{where}.{kind}.cache_control: Input should be a valid dictionary"
    return None


def _block_problem(
    where: str, block: Any, role: str, table: dict[str, frozenset[str]] = BLOCK_FIELDS
) -> str | None:
    if not isinstance(block, dict):
        return f"{where}: Input should be a valid dictionary"
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in table:
        expected = ", ".join(f"'{name}'" for name in table)
        return (
            f"{where}: Input tag '{kind}' found using 'type' does not match any of the "
            f"expected tags: {expected}"
        )
    problem = _fields_problem(where, block, table[kind])
    if problem:
        return problem
    if kind == "text":
        if not isinstance(block["text"], str):
            return f"{where}.text.text: Input should be a valid string"
        if not block["text"]:
            return "messages: text content blocks must be non-empty"
        if not block["text"].strip():
            return f"messages: {BLANK_TEXT}"
    if kind in ASSISTANT_ONLY and role != "assistant":
        return f"{where}: `{kind}` blocks are only allowed in assistant messages"
    if kind == "tool_result" and role != "user":
        return f"{where}: `tool_result` blocks are only allowed in user messages"
    if kind in ("tool_use", "server_tool_use"):
        return _tool_use_problem(where, block)
    if kind == "tool_result":
        return _tool_result_problem(where, block)
    return None


def _tool_use_problem(where: str, block: dict[str, Any]) -> str | None:
    kind = block["type"]
    if not isinstance(block["id"], str) or not ID_PATTERN.match(block["id"]):
        return f"{where}.{kind}.id: String should match pattern '{ID_PATTERN.pattern}'"
    if not isinstance(block["name"], str) or not block["name"]:
        return f"{where}.{kind}.name: Input should be a non-empty string"
    if not isinstance(block["input"], dict):
        return f"{where}.{kind}.input: Input should be a valid dictionary"
    return None


def _tool_result_problem(where: str, block: dict[str, Any]) -> str | None:
    ident = block["tool_use_id"]
    if not isinstance(ident, str) or not ID_PATTERN.match(ident):
        return (
            f"{where}.tool_result.tool_use_id: String should match pattern '{ID_PATTERN.pattern}'"
        )
    if "is_error" in block and not isinstance(block["is_error"], bool):
        return f"{where}.tool_result.is_error: Input should be a valid boolean"
    content = block.get("content")
    if content is None or isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"{where}.tool_result.content: Input should be a valid string or a valid list"
    for position, inner in enumerate(content):
        inner_where = f"{where}.tool_result.content.{position}"
        problem = _block_problem(inner_where, inner, "user", RESULT_CONTENT_FIELDS)
        if problem:
            return problem
    return None


def _tool_problem(turns: list[tuple[str, list[Located]]]) -> str | None:
    """Each tool_use answered in the next turn, each tool_result answering the turn
    before, tool_result blocks first in their turn, tool_use ids unique."""
    seen: set[str] = set()
    previous: set[str] = set()
    for number, (role, blocks) in enumerate(turns):
        uses = [(i, j, b["id"]) for i, j, b in blocks if b["type"] == "tool_use"]
        if role == "assistant":
            for i, j, ident in uses:
                if ident in seen:
                    return f"messages.{i}.content.{j}: `tool_use` ids must be unique"
                seen.add(ident)
            following = turns[number + 1][1] if number + 1 < len(turns) else None
            if following is not None:
                answered = {b["tool_use_id"] for _, _, b in following if b["type"] == "tool_result"}
                missing = [ident for _, _, ident in uses if ident not in answered]
                if missing:
                    return (
                        f"messages.{uses[0][0]}: `tool_use` ids were found without "
                        f"`tool_result` blocks immediately after: {', '.join(missing)}. Each "
                        "`tool_use` block must have a corresponding `tool_result` block in "
                        "the next message."
                    )
            previous = {ident for _, _, ident in uses}
            continue
        other_content = False
        for i, j, block in blocks:
            if block["type"] != "tool_result":
                other_content = True
                continue
            if other_content:
                return (
                    f"messages.{i}.content.{j}: `tool_result` blocks must come first in a "
                    "user message, before any other content"
                )
            ident = block["tool_use_id"]
            if ident not in previous:
                return (
                    f"messages.{i}.content.{j}: unexpected `tool_use_id` found in "
                    f"`tool_result` blocks: {ident}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
            previous.discard(ident)
        previous = set()
    return None


def _final_problem(turn: tuple[str, list[Located]]) -> str | None:
    role, blocks = turn
    if role != "assistant" or not blocks:
        return None
    last = blocks[-1][2]
    if last["type"] == "text" and last["text"] != last["text"].rstrip():
        return "messages: final assistant content cannot end with trailing whitespace"
    return None


THINKING_FIRST = (
    "messages.{}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns."
)
NO_THINKING = (
    "messages.{}.content.{}: When thinking is disabled, an `assistant` message in the "
    "final position cannot contain `thinking` or `redacted_thinking` blocks."
)
THINKING = ("thinking", "redacted_thinking")


def thinking_enabled(body: dict[str, Any]) -> bool:
    """Does the request turn extended thinking on (``enabled`` or ``adaptive``)?"""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _exchange(turns: list[tuple[str, list[Located]]]) -> list[Located]:
    """The assistant turn of the exchange in progress: the final turn when it is the
    assistant's, else the one the final turn's tool results answer (empty if neither)."""
    role, blocks = turns[-1]
    if role == "assistant":
        return blocks
    if len(turns) > 1 and blocks and all(b["type"] == "tool_result" for _, _, b in blocks):
        return turns[-2][1]
    return []


def thinking_for(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The ``thinking`` parameter the agent of these (valid) messages sends: on when the
    assistant turn of the exchange in progress holds thinking, else None (off)."""
    if any(b["type"] in THINKING for _, _, b in _exchange(_turns(messages))):
        return {"type": "enabled", "budget_tokens": 1024}
    return None


def _thinking_problem(body: dict[str, Any]) -> str | None:
    """With thinking on, the assistant turn of the tool-use exchange in progress (the
    final assistant turn, or the one the final tool results answer) starts with its
    thinking; with thinking off, the final assistant turn holds none."""
    turns = _turns(body["messages"])
    role, blocks = turns[-1]
    if not thinking_enabled(body):
        for i, j, block in blocks if role == "assistant" else []:
            if block["type"] in THINKING:
                return NO_THINKING.format(i, j)
        return None
    exchange = _exchange(turns)
    if not any(b["type"] == "tool_use" for _, _, b in exchange):
        return None
    index, _, first = exchange[0]
    return None if first["type"] in THINKING else THINKING_FIRST.format(index, first["type"])


def _marked(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


def _cache_problem(body: dict[str, Any]) -> str | None:
    system = body.get("system")
    marked = [*(system if isinstance(system, list) else []), *(body.get("tools") or [])]
    for message in body["messages"]:
        content = message["content"]
        for block in content if isinstance(content, list) else []:
            marked.append(block)
            inner = block.get("content") if block["type"] == "tool_result" else None
            marked.extend(inner if isinstance(inner, list) else [])
    marks = sum(map(_marked, marked))
    if marks > MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {marks}."
        )
    return None
