"""Gemini CLI chat records: ``~/.gemini/tmp/<project>/chats/session-*.jsonl`` (pure).

The first line is the session's metadata (``sessionId``, ``projectHash``, ``startTime``,
``directories``, ``kind``); then one message record per line, ``{id, timestamp, type:
user|gemini|info|error|warning, content, toolCalls, thoughts}``, where ``content`` is a
list of parts (text, function calls and responses, inline data). An updated message is
appended again under the same ``id``: the last copy wins and keeps the first one's place.
``{"$rewindTo": id}`` removes that message and every later one; ``{"$set": {...}}`` updates
the metadata and, when it holds ``messages``, restarts the session from them (a
checkpoint). Earlier versions wrote one JSON document per session (``session-*.json``,
rewritten whole), which is read here as one line holding every message
(docs/design.md#sources).
"""

from __future__ import annotations

from typing import Any

from memoryd.search.sessions.record import (
    Message,
    Record,
    joined,
    load,
    millis,
    string,
    values,
)

SOURCE = "gemini"
MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
ROLES = {"user": "user", "gemini": "assistant"}


def looks_like(value: object) -> bool:
    """True when a parsed first line (or legacy document) is one of Gemini CLI's (pure)."""
    if not isinstance(value, dict):
        return False
    if "projectHash" in value or "$set" in value or "$rewindTo" in value:
        return True
    if isinstance(value.get("sessionId"), str) and "type" not in value and "uuid" not in value:
        return True  # the metadata line of a session, whatever else it holds
    return value.get("type") in MESSAGE_TYPES and "id" in value and "content" in value


def parts_text(content: object) -> list[str]:
    """The text of a ``PartListUnion``: a string, a part, or a list of either."""
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [text for part in content for text in parts_text(part)]
    if not isinstance(content, dict):
        return []
    found: list[str] = []
    text = content.get("text")
    if isinstance(text, str):
        found.append(text)
    call = content.get("functionCall")
    if isinstance(call, dict):
        found += [str(call.get("name") or ""), *values(call.get("args"))]
    response = content.get("functionResponse")
    if isinstance(response, dict):
        found += values(response.get("response"))
    if "inlineData" in content or "fileData" in content:
        found.append("[image]")
    return found


def _tool_calls(calls: object) -> list[str]:
    found: list[str] = []
    for call in calls if isinstance(calls, list) else []:
        if isinstance(call, dict):
            found += [str(call.get("name") or ""), *values(call.get("args"))]
            found += parts_text(call.get("result"))
            display = call.get("resultDisplay")
            if isinstance(display, str):
                found.append(display)
    return found


def _thoughts(thoughts: object) -> list[str]:
    found: list[str] = []
    for thought in thoughts if isinstance(thoughts, list) else []:
        if isinstance(thought, dict):
            found += [str(thought.get("subject") or ""), str(thought.get("description") or "")]
    return found


def message(record: dict[str, Any], item: int = -1) -> Message | None:
    """The message of a record (None when it is not one)."""
    kind = record.get("type")
    ident = string(record.get("id"))
    if kind not in MESSAGE_TYPES or ident is None:
        return None
    text = joined(
        [
            *parts_text(record.get("content")),
            *_thoughts(record.get("thoughts")),
            *_tool_calls(record.get("toolCalls")),
        ]
    )
    return Message(ident, ROLES.get(str(kind), "info"), millis(record.get("timestamp")), text, item)


def _metadata(record: dict[str, Any]) -> tuple[str | None, str | None]:
    directories = record.get("directories")
    first = directories[0] if isinstance(directories, list) and directories else None
    return string(record.get("sessionId")), string(first) or string(record.get("projectHash"))


def _all(messages: object) -> tuple[Message, ...]:
    found = (
        message(record, number)
        for number, record in enumerate(messages if isinstance(messages, list) else [])
        if isinstance(record, dict)
    )
    return tuple(found_message for found_message in found if found_message is not None)


def parse(data: bytes) -> Record:
    """What one record (or a whole legacy document) says."""
    record, problem = load(data)
    if problem is not None or not isinstance(record, dict):
        return Record(problem=problem or "not a JSON object")
    rewind = record.get("$rewindTo")
    if isinstance(rewind, str):
        return Record(rewind_to=rewind)
    update = record.get("$set")
    if isinstance(update, dict):
        session, project = _metadata(update)
        if isinstance(update.get("messages"), list):
            return Record(_all(update["messages"]), session, project, reset=True)
        return Record(session=session, project=project)
    found = message(record)
    if found is not None:
        return Record((found,))
    session, project = _metadata(record)
    if isinstance(record.get("messages"), list):  # a legacy document, or its first line
        return Record(_all(record["messages"]), session, project, reset=True)
    return Record(session=session, project=project)
