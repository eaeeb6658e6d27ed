"""Claude Code session lines: ``~/.claude/projects/<project>/<session-uuid>.jsonl`` (pure).

One JSON object per line with ``type`` (``user``, ``assistant``, ``system``, ``summary``,
``file-history-snapshot``, ``progress``, ``queue-operation``, ...), ``uuid``,
``sessionId``, ``timestamp`` and ``cwd``; the Messages-API message in ``message``. One API
response is split over several lines (one per content block) sharing ``message.id``, each
line with its own ``uuid``: each is a message here. A tool's output is a ``user`` line
holding ``tool_result`` blocks (role ``tool`` here); a compaction summary is a ``user``
line with ``isCompactSummary`` (role ``summary``). Lines of bookkeeping (snapshots,
progress, queue operations) hold nothing to search (docs/design.md#sources).
"""

from __future__ import annotations

from typing import Any

from memoryd.search.history import content_text
from memoryd.search.sessions.record import Message, Record, joined, load, millis, safe_text, string

SOURCE = "claude-code"
LINE_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "summary",
        "file-history-snapshot",
        "progress",
        "queue-operation",
        "attachment",
        "custom-title",
    }
)


def looks_like(value: object) -> bool:
    """True when a parsed first line is one of Claude Code's (pure): a ``type`` (one of
    those known, or a later version's) beside an id of Claude Code's."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        return False
    return any(key in value for key in ("uuid", "sessionId", "leafUuid", "messageId"))


def _role(line: dict[str, Any], message: dict[str, Any]) -> str | None:
    if line.get("isCompactSummary") is True:
        return "summary"
    role = message.get("role", line.get("type"))
    content = message.get("content")
    if role == "user" and isinstance(content, list) and content:
        kinds = {block.get("type") for block in content if isinstance(block, dict)}
        if kinds == {"tool_result"}:
            return "tool"
    return role if isinstance(role, str) else None


def parse(data: bytes) -> Record:
    """The message of one line, if it holds one, with the session and cwd it names."""
    line, problem = load(data)
    if problem is not None or not isinstance(line, dict):
        return Record(problem=problem or "not a JSON object")
    kind = line.get("type")
    session, project = string(line.get("sessionId")), string(line.get("cwd"))
    ident = string(line.get("uuid"))
    stamp = millis(line.get("timestamp"))
    text = ""
    role: str | None = None
    if kind in ("user", "assistant"):
        message = line.get("message")
        if isinstance(message, dict):
            role = _role(line, message)
            text = safe_text(content_text(message.get("content")))
    elif kind == "summary":
        # Its leafUuid names another line (often in another session): not its own id.
        role, text = "summary", joined([str(line.get("summary") or "")])
    elif kind == "system":
        content = line.get("content")
        role, text = "info", safe_text(content) if isinstance(content, str) else ""
    if not text:
        return Record(session=session, project=project)
    return Record((Message(ident, role, stamp, text),), session, project)
