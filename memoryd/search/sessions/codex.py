"""Codex CLI rollout lines: ``~/.codex/sessions/YYYY/MM/DD/rollout-<ts>-<uuid>.jsonl`` (pure).

Since mid-2025 each line is ``{timestamp, type, payload}``: ``session_meta`` (the session
id and cwd), ``turn_context`` (cwd, model), ``response_item`` (what the model saw: a
``message`` of ``input_text``/``output_text`` parts, ``function_call`` and
``function_call_output`` paired by ``call_id``, ``custom_tool_call``, ``local_shell_call``,
``reasoning`` with readable summaries and usually encrypted content), ``event_msg`` (what
the UI showed: copies of the messages, token counts; not indexed, it would double every
hit) and ``compacted`` (a compaction summary). Earlier rollouts wrote a bare first line
``{id, timestamp, instructions}`` and then bare items, with ``record_type: state`` lines
between them. Codex CLI 0.1.x wrote ``sessions/rollout-YYYY-MM-DD-<uuid>.json``: one JSON
document ``{"session": {timestamp, id, instructions}, "items": [...]}``, rewritten whole,
whose items are those of the Responses API or chat messages (``role``, ``content``,
``reasoning``, ``tool_calls``; a tool's output with ``role: tool``) (docs/design.md#sources).
"""

from __future__ import annotations

from typing import Any

from memoryd.search.sessions.record import (
    Message,
    Record,
    arguments,
    joined,
    load,
    millis,
    string,
    values,
)

SOURCE = "codex"
ITEM_TYPES = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "local_shell_call",
        "reasoning",
        "web_search_call",
    }
)
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


LINE_TYPES = ("session_meta", "response_item", "turn_context", "event_msg", "compacted")


def is_document(value: object) -> bool:
    """True for a Codex CLI 0.1.x rollout: ``{"session": {...}, "items": [...]}`` (pure)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("session"), dict)
        and isinstance(value.get("items"), list)
    )


def looks_like(value: object) -> bool:
    """True when a parsed first line (or a 0.1.x document) is one of Codex CLI's (pure)."""
    if not isinstance(value, dict):
        return False
    if value.get("type") in LINE_TYPES:
        return isinstance(value.get("payload"), dict)
    if is_document(value) or value.get("type") in ITEM_TYPES or "record_type" in value:
        return True
    return "instructions" in value and isinstance(value.get("id"), str)


def _parts_text(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    found = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text")
            found.append(text if isinstance(text, str) else "")
    return found


def _output(output: object) -> list[str]:
    """A tool's output: a string, ``{content: ...}`` (earlier versions) or a list of parts."""
    if isinstance(output, dict):
        return _parts_text(output.get("content"))
    return _parts_text(output)


def _chat(item: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The role and text parts of a chat message (``role``, ``content``, the ``reasoning``
    a chat-completions provider returns beside it, ``tool_calls``)."""
    role = item.get("role")
    parts = _parts_text(item.get("content"))
    reasoning = item.get("reasoning")
    if isinstance(reasoning, str):
        parts.append(reasoning)
    for call in item.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts += [str(function.get("name") or ""), *arguments(function.get("arguments"))]
    return (role if isinstance(role, str) else None), parts


def _item(item: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The role and text parts of one response item (or chat message)."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return _chat(item)
    if kind == "message":
        role = item.get("role")
        return (role if isinstance(role, str) else None), _parts_text(item.get("content"))
    if kind == "function_call":
        return "assistant", [str(item.get("name") or ""), *arguments(item.get("arguments"))]
    if kind == "custom_tool_call":
        return "assistant", [str(item.get("name") or ""), *values(item.get("input"))]
    if kind == "local_shell_call":
        action = item.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        return "assistant", [" ".join(values(command))]
    if kind in OUTPUTS:
        return "tool", _output(item.get("output"))
    if kind == "reasoning":
        return "assistant", [*_parts_text(item.get("summary")), *_parts_text(item.get("content"))]
    if kind == "web_search_call":
        return "assistant", values(item.get("action"))
    return None, []


def _ident(item: dict[str, Any]) -> str | None:
    call = string(item.get("call_id")) or string(item.get("tool_call_id"))
    if (item.get("type") in OUTPUTS or item.get("role") == "tool") and call:
        return f"{call}:output"
    calls = item.get("tool_calls")
    if not call and isinstance(calls, list) and calls and isinstance(calls[0], dict):
        call = string(calls[0].get("id"))  # a chat message's first tool call
    return string(item.get("id")) or call


def _document(value: dict[str, Any]) -> Record:
    """Every item of a Codex CLI 0.1.x rollout, each a message numbered by its place."""
    session = value["session"]
    stamp = millis(session.get("timestamp"))
    found = []
    for number, item in enumerate(value["items"]):
        if isinstance(item, dict):
            role, parts = _item(item)
            text = joined(parts)
            if text:
                found.append(Message(_ident(item), role, stamp, text, number))
    return Record(tuple(found), string(session.get("id")), string(session.get("cwd")))


def parse(data: bytes) -> Record:
    """The message of one rollout line, if it holds one, with the session and cwd."""
    line, problem = load(data)
    if problem is not None or not isinstance(line, dict):
        return Record(problem=problem or "not a JSON object")
    if is_document(line):
        return _document(line)
    stamp = millis(line.get("timestamp"))
    kind, payload = line.get("type"), line.get("payload")
    if not isinstance(payload, dict):
        if kind in ITEM_TYPES or (kind is None and "role" in line):  # the item is the line
            kind, payload = "response_item", line
        elif "instructions" in line or ("record_type" not in line and "id" in line):
            return Record(session=string(line.get("id")))
        else:
            return Record()
    if kind == "session_meta":
        return Record(session=string(payload.get("id")), project=string(payload.get("cwd")))
    if kind == "turn_context":
        return Record(project=string(payload.get("cwd")))
    if kind == "compacted":
        text = joined([str(payload.get("message") or "")])
        return Record((Message(None, "summary", stamp, text),) if text else ())
    if kind != "response_item":
        return Record()
    role, parts = _item(payload)
    text = joined(parts)
    if not text:
        return Record()
    return Record((Message(_ident(payload), role, stamp, text),))
