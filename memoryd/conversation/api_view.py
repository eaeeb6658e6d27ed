"""The API view: a conversation's messages as a valid Messages-API ``messages`` list.

``conversation.jsonl`` is memoryd's record, not a request: it carries memoryd's fields and
a summary head whose role is ``assistant``. :func:`api_messages` (pure) builds what the
Messages API accepts from the same messages; :func:`messages_for_api` reads a workspace's
file first. Every rule and why is in docs/design.md#api-view.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from memoryd import strict_json
from memoryd.conversation.api_blocks import ASSISTANT_ONLY, BLOCK_FIELDS, TOOL_RESULT_CONTENT_FIELDS
from memoryd.errors import InputError
from memoryd.files.paths import check_workspace, read_in
from memoryd.workspace import Workspace

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

START_TURN = "[conversation start]"
"""The user turn put in front of a conversation whose first turn is the assistant's."""

MAX_CACHE_BREAKPOINTS = 4
THINKING = ("thinking", "redacted_thinking")
_TOOL_ID = re.compile(r"[A-Za-z0-9_-]+")


def api_messages(
    messages: Iterable[Mapping[str, Any]], thinking: bool = True
) -> list[dict[str, Any]]:
    """The Messages-API ``messages`` list for conversation ``messages`` (pure).

    Each turn keeps only ``role`` and ``content``; the summary or checkpoint head (and
    any message marked ``isSummary``) becomes a user turn; consecutive same-role turns
    are merged; the first turn is a user turn (``START_TURN`` is put in front if not);
    blank text is dropped and a turn left empty disappears; every block keeps only the
    fields the API knows for its type. A ``tool_result`` whose ``tool_use`` is not in the
    turn right before it, a ``tool_use`` not answered in the turn right after it (unless
    it ends the conversation), a block of an unknown type and a block in the wrong role
    become text blocks saying what they were: nothing is dropped silently. Only the last
    four ``cache_control`` marks are kept, and the final assistant turn loses its trailing
    whitespace. A thinking block is never edited, and in an assistant turn (a merged
    one too) the thinking blocks come first. With ``thinking`` False (an agent that sends
    its requests with extended thinking off, where the API refuses thinking in the final
    assistant turn) every thinking block is left out instead, and a message that held
    nothing else with it. An empty conversation gives an empty list
    (docs/design.md#api-view).
    """
    turns: list[_Turn] = []
    for message in messages:
        if not thinking:
            message = _without_thinking(message)
        turn = _message_turn(message)
        if turn is None:
            continue
        if turns and turns[-1].role == turn.role:
            turns[-1].merge(turn)
        else:
            turns.append(turn)
    if turns and turns[0].role != "user":
        turns.insert(0, _Turn("user", START_TURN))
    for turn in turns:
        turn.thinking_first()
    _pair_tool_blocks(turns)
    _limit_cache_breakpoints(turns)
    if turns and turns[-1].role == "assistant":
        turns[-1].strip_end()
    return [{"role": turn.role, "content": turn.content} for turn in turns]


def _without_thinking(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` without its thinking blocks (the file keeps them; the view leaves out a
    message whose content is then empty, as any other)."""
    content = message.get("content")
    if not isinstance(content, list) or not any(
        isinstance(block, Mapping) and block.get("type") in THINKING for block in content
    ):
        return message
    kept = [b for b in content if not (isinstance(b, Mapping) and b.get("type") in THINKING)]
    return {**message, "content": kept}


class _Turn:
    """One turn of the view: a string while it is one message's untouched string content,
    else a list of blocks."""

    __slots__ = ("content", "role")

    def __init__(self, role: str, content: str | list[dict[str, Any]] | None = None) -> None:
        self.role = role
        self.content: str | list[dict[str, Any]] = [] if content is None else content

    @property
    def blocks(self) -> list[dict[str, Any]]:
        if isinstance(self.content, str):
            self.content = [{"type": "text", "text": self.content}]
        return self.content

    def merge(self, other: _Turn) -> None:
        self.blocks.extend(other.blocks)

    def thinking_first(self) -> None:
        """In an assistant turn the thinking blocks go first, untouched and in their order:
        the API wants the turn to start with its thinking (docs/design.md#thinking)."""
        if self.role != "assistant" or isinstance(self.content, str):
            return
        thinking = [block for block in self.content if block["type"] in THINKING]
        if thinking:
            others = [block for block in self.content if block["type"] not in THINKING]
            self.content = thinking + others

    def strip_end(self) -> None:
        """The API refuses a final assistant turn that ends with whitespace."""
        if isinstance(self.content, str):
            self.content = self.content.rstrip()
        elif self.content and self.content[-1].get("type") == "text":
            self.content[-1]["text"] = self.content[-1]["text"].rstrip()


def _message_turn(message: Mapping[str, Any]) -> _Turn | None:
    """One message as a turn, or None when nothing of it is left to send."""
    if not isinstance(message, Mapping):
        return None
    role = message.get("role")
    label: str | None = None
    if message.get("isSummary") is True or message.get("isCheckpoint") is True:
        role = "user"
    elif role not in ("user", "assistant"):
        named = isinstance(role, str) and role.strip()
        label = f"[a message with role {role!r}]" if named else "[a message without a role]"
        role = "user"
    content = message.get("content")
    turn = _Turn(role)
    if isinstance(content, str):
        if not content.strip():
            return None
        turn.content = content
    else:
        items = content if isinstance(content, list) else [] if content is None else [content]
        blocks = [_block(item, role) for item in items]
        turn.content = [block for block in blocks if block is not None]
        if not turn.content:
            return None
    if label is not None:
        turn.blocks.insert(0, {"type": "text", "text": label})
    return turn


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


def _kept(block: Mapping[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """``block`` with only ``fields``, in its own order (the same record gives the same
    bytes, which prompt caching needs); a malformed ``cache_control`` or ``is_error`` goes."""
    kept = {name: value for name, value in block.items() if name in fields}
    if not isinstance(kept.get("cache_control", {}), Mapping):
        del kept["cache_control"]
    if not isinstance(kept.get("is_error", False), bool):
        del kept["is_error"]
    return kept


def _block(
    item: Any, role: str | None, known: Mapping[str, frozenset[str]] = BLOCK_FIELDS
) -> dict[str, Any] | None:
    """One content item as a block the API takes in a ``role`` turn (None: in a
    tool_result's content, whose ``known`` kinds differ); None when blank."""
    if not isinstance(item, Mapping):
        return _loose_item(item)
    kind = item.get("type")
    fields = known.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return _unknown_as_text(item)
    if kind == "text":
        return _text_block(item, fields)
    if role is None:
        return _kept(item, fields)
    if kind in ASSISTANT_ONLY and role != "assistant":
        return _text(f"[a {kind} block in a user turn] {_json(dict(item))}")
    if kind == "tool_use":
        return _kept(item, fields) if _is_tool_use(item) else _unknown_as_text(item)
    if kind == "tool_result":
        if role != "user":
            return _text(_tool_result_text(item, "it is in an assistant turn"))
        if not _is_tool_id(item.get("tool_use_id")):
            return _text(_tool_result_text(item, "its tool_use_id is not a valid id"))
        result = _kept(item, fields)
        content = _tool_result_content(item.get("content"))
        if content is None:
            result.pop("content", None)
        else:
            result["content"] = content
        return result
    return _kept(item, fields)


def _loose_item(item: Any) -> dict[str, Any] | None:
    """A content item that is not an object (a bare string, a number): text, or None."""
    if item is None:
        return None
    text = item if isinstance(item, str) else _json(item)
    return _text(text) if text.strip() else None


def _text_block(item: Mapping[str, Any], fields: frozenset[str]) -> dict[str, Any] | None:
    text = item.get("text")
    if not isinstance(text, str):
        return _unknown_as_text(item)
    return _kept(item, fields) if text.strip() else None


def _is_tool_id(value: Any) -> bool:
    return isinstance(value, str) and _TOOL_ID.fullmatch(value) is not None


def _is_tool_use(block: Mapping[str, Any]) -> bool:
    name = block.get("name")
    return (
        _is_tool_id(block.get("id"))
        and isinstance(name, str)
        and bool(name.strip())
        and isinstance(block.get("input"), Mapping)
    )


def _unknown_as_text(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A block the API does not take: its text if it has one, else its JSON, named."""
    text = block.get("text")
    if isinstance(text, str):
        return _text(text) if text.strip() else None
    kind = block.get("type")
    name = kind if isinstance(kind, str) and kind.strip() else "untyped"
    return _text(f"[a {name} block] {_json(dict(block))}")


def _tool_result_content(content: Any) -> str | list[dict[str, Any]] | None:
    """A tool_result's content as the API takes it; None when nothing is left."""
    if isinstance(content, str):
        return content if content.strip() else None
    items = content if isinstance(content, list) else [content]
    shown = (_block(item, None, TOOL_RESULT_CONTENT_FIELDS) for item in items)
    blocks = [block for block in shown if block is not None]
    return blocks or None


def _content_text(content: Any) -> str:
    """A tool_result's content as plain text (other blocks named by their type)."""
    if isinstance(content, str):
        return content
    items = content if isinstance(content, list) else [] if content is None else [content]
    parts = []
    for item in items:
        if isinstance(item, Mapping) and isinstance(item.get("text"), str):
            parts.append(item["text"])
        elif isinstance(item, Mapping):
            parts.append(f"[{item.get('type', 'untyped')} block]")
        elif item is not None:
            parts.append(item if isinstance(item, str) else _json(item))
    return "\n".join(parts)


def _tool_result_text(block: Mapping[str, Any], why: str) -> str:
    error = " (an error)" if block.get("is_error") is True else ""
    head = f"[tool result for {block.get('tool_use_id')!s}{error}; {why}]"
    body = _content_text(block.get("content"))
    return f"{head}\n{body}" if body.strip() else head


def _tool_use_text(block: Mapping[str, Any], why: str) -> str:
    return f"[tool call {block['name']} (id {block['id']}): {_json(block['input'])}; {why}]"


def _pair_tool_blocks(turns: list[_Turn]) -> None:
    """Make every tool_use/tool_result pair sit in adjacent turns; the rest becomes text.

    Turns alternate (user first) when this runs, so turn ``i + 1`` follows assistant
    turn ``i``. In a user turn the kept tool_result blocks come first, as the API asks.
    """
    seen: set[str] = set()
    for index, turn in enumerate(turns):
        if turn.role != "assistant" or isinstance(turn.content, str):
            continue
        following = turns[index + 1] if index + 1 < len(turns) else None
        answered = _result_ids(following) if following is not None else set()
        for position, block in enumerate(turn.content):
            if block["type"] != "tool_use":
                continue
            ident = block["id"]
            if ident in seen:
                why = "its id was used by an earlier tool call"
            elif following is not None and ident not in answered:
                why = "its result is not in the user turn right after it"
            else:
                seen.add(ident)
                continue
            turn.content[position] = _text(_tool_use_text(block, why))
    previous: set[str] = set()
    for turn in turns:
        if turn.role == "assistant":
            previous = _use_ids(turn)
            continue
        if isinstance(turn.content, str):
            previous = set()
            continue
        results, others = [], []
        for block in turn.content:
            if block["type"] == "tool_result" and block["tool_use_id"] in previous:
                previous.discard(block["tool_use_id"])
                results.append(block)
            elif block["type"] == "tool_result":
                why = "its tool_use is not in the assistant turn right before it"
                others.append(_text(_tool_result_text(block, why)))
            else:
                others.append(block)
        turn.content = results + others
        previous = set()


def _use_ids(turn: _Turn) -> set[str]:
    if isinstance(turn.content, str):
        return set()
    return {block["id"] for block in turn.content if block["type"] == "tool_use"}


def _result_ids(turn: _Turn) -> set[str]:
    if isinstance(turn.content, str):
        return set()
    return {block["tool_use_id"] for block in turn.content if block["type"] == "tool_result"}


def _limit_cache_breakpoints(turns: list[_Turn]) -> None:
    """Keep only the last ``MAX_CACHE_BREAKPOINTS`` ``cache_control`` marks (the API's cap)."""
    marked: list[dict[str, Any]] = []
    for turn in turns:
        if isinstance(turn.content, str):
            continue
        for block in turn.content:
            inner = block.get("content") if block["type"] == "tool_result" else None
            if "cache_control" in block:
                marked.append(block)
            if isinstance(inner, list):
                marked.extend(b for b in inner if "cache_control" in b)
    for block in marked[: max(0, len(marked) - MAX_CACHE_BREAKPOINTS)]:
        del block["cache_control"]


def read_messages(workspace: Path | str, left_out: list[int] | None = None) -> list[dict[str, Any]]:
    """The messages of ``workspace``'s conversation.jsonl, in order.

    Malformed lines and a last fragment without ``\\n`` (a write in progress) are left
    out; the line numbers (from 1) of the malformed ones are appended to ``left_out``.
    Raises InputError for a missing workspace or conversation, UnsafePathError for a
    conversation that is a symlink or not a regular file.
    """
    ws = Workspace(check_workspace(Path(workspace), write=False))
    try:
        data = read_in(ws.path, ws.conversation)
    except FileNotFoundError:
        raise InputError(f"{ws.path}: no conversation.jsonl in this workspace") from None
    except PermissionError:
        raise InputError(f"{ws.conversation}: permission denied") from None
    # The last piece (after the last \n) is a write in progress; every complete line is
    # parsed, however long: the view is the whole conversation. A line that is not a JSON
    # object is malformed, as for conversation.parse_line (no token estimate needed here).
    messages: list[dict[str, Any]] = []
    for number, raw in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            value = strict_json.loads(raw)
        except strict_json.JSONProblem:
            value = None
        if isinstance(value, dict):
            messages.append(value)
        elif left_out is not None:
            left_out.append(number)
    return messages


def messages_for_api(
    workspace: Path | str, left_out: list[int] | None = None, thinking: bool = True
) -> list[dict[str, Any]]:
    """``workspace``'s conversation as a Messages-API ``messages`` list: see
    :func:`api_messages` (``thinking=False`` for an agent that sends with extended thinking
    off) and :func:`read_messages` (docs/design.md#api-view)."""
    return api_messages(read_messages(workspace, left_out), thinking)
