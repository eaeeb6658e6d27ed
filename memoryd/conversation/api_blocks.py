"""What the Messages API accepts in a content block: the fields of each block type, and
which blocks only the model writes (pure data, after the SDK's ``ContentBlockParam``).
The API view keeps only these fields (docs/design.md#api-view).
"""

from __future__ import annotations

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
"""The fields the Messages API knows for each content block type (anthropic's
``ContentBlockParam``); any other field is refused."""

TOOL_RESULT_CONTENT_FIELDS: dict[str, frozenset[str]] = {
    "text": BLOCK_FIELDS["text"],
    "image": BLOCK_FIELDS["image"],
    "document": BLOCK_FIELDS["document"],
    "search_result": BLOCK_FIELDS["search_result"],
    "tool_reference": frozenset({"type", "tool_name", "cache_control"}),
    "browser_state": frozenset({"type", "tabs", "state_changes", "cache_control"}),
}
"""The block types (and their fields) a ``tool_result``'s content may hold."""

ASSISTANT_ONLY = frozenset(BLOCK_FIELDS) - {
    "text",
    "image",
    "document",
    "search_result",
    "container_upload",
    "tool_result",
}
"""Blocks only the model writes: in a user turn they become text."""
