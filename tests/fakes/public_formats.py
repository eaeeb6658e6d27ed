"""Public agent trajectory formats read into memoryd's ``conversation.jsonl`` lines.

Standard library only. Four formats, picked from the file's content:

- **SWE-agent** ``.traj`` (``{"history": [...], "trajectory": [...]}``): chat messages;
  a text-mode run writes its command in a fence of the assistant's text and gets the
  output back as the next user message, a function-calling run has ``tool_calls`` and
  ``tool`` messages (``tool_call_ids``). The system prompt and demonstrations
  (``is_demo``) are dropped.
- **mini-swe-agent** ``.traj.json`` (``{"messages": [...]}`` or a bare list): the same
  chat messages, ``tool_call_id`` on a ``tool`` message; the ``exit`` message is dropped.
- **OpenHands** events (a list of ``{"source", "action" | "observation", ...}``): a
  user or agent ``message`` becomes a text turn, an agent action with
  ``tool_call_metadata`` a ``tool_use`` (the actions of one model response share an
  assistant message), its observation the ``tool_result``; state changes are dropped.
- **Claude Code** session JSONL (lines of ``type`` ``user`` / ``assistant`` with
  ``message.content`` blocks): the lines of one assistant message (same
  ``message.id``) are joined, consecutive tool results become one user message;
  progress, snapshots and system events are dropped; ``isMeta`` is kept.

Function calls become ``tool_use`` / ``tool_result`` blocks with the call's id. The shape
(as in ``agent_transcripts``): ``text`` for a run without tool calls, ``interactive``
when a person wrote more than one message, else ``autonomous``. Probe facts are found
mechanically, each with the index of the first message that holds it (see :func:`facts`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from agent_transcripts import Fact, Transcript, message_text, occurs

START_MS = 1_767_000_000_000
STEP_MS = 1_000
MAX_COMMAND_CHARS = 200
"""Longer or multi-line commands are not probed (no short note can hold them)."""


def _text(content: Any) -> str:
    """A chat message's content as text (a string, or a list of text parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content
        )
    return "" if content is None else str(content)


def _arguments(raw: Any) -> dict[str, Any]:
    """A function call's arguments as a JSON object (a string that is not one is kept)."""
    if isinstance(raw, dict):
        return raw
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else None
    except json.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"arguments": raw}


def _add_result(out: list[dict[str, Any]], block: dict[str, Any]) -> None:
    """Append a tool result: to the user message of results just before, or as a new one."""
    last = out[-1] if out else None
    if (
        last is not None
        and last["role"] == "user"
        and isinstance(last["content"], list)
        and all(b.get("type") == "tool_result" for b in last["content"])
    ):
        last["content"].append(block)
    else:
        out.append({"role": "user", "content": [block]})


def from_chat(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI-style chat messages (SWE-agent, mini-swe-agent) as role/content messages."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role not in ("user", "assistant", "tool") or message.get("is_demo"):
            continue
        text = _text(message.get("content"))
        if role == "tool":
            ids = message.get("tool_call_ids") or [message.get("tool_call_id")]
            _add_result(out, {"type": "tool_result", "tool_use_id": str(ids[0]), "content": text})
            continue
        calls = (message.get("tool_calls") or []) if role == "assistant" else []
        if not calls:
            out.append({"role": role, "content": text})
            continue
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
        for call in calls:
            function = call.get("function") or {}
            blocks.append(
                {
                    "type": "tool_use",
                    "id": str(call.get("id")),
                    "name": str(function.get("name", "tool")),
                    "input": _arguments(function.get("arguments")),
                }
            )
        out.append({"role": "assistant", "content": blocks})
    return out


_OPENHANDS_BOOKKEEPING = frozenset(
    {"thought", "blocking", "hidden", "confirmation_state", "is_input", "impl_source"}
)


def from_openhands(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenHands events as role/content messages."""
    out: list[dict[str, Any]] = []
    response_of_last_call: str | None = None
    for event in events:
        meta = event.get("tool_call_metadata") or {}
        args = event.get("args") or {}
        if event.get("action") == "message" and event.get("source") in ("user", "agent"):
            role = "user" if event["source"] == "user" else "assistant"
            out.append({"role": role, "content": str(args.get("content") or event["message"])})
            response_of_last_call = None
        elif "action" in event and meta.get("tool_call_id"):
            response = str((meta.get("model_response") or {}).get("id"))
            call = {
                "type": "tool_use",
                "id": str(meta["tool_call_id"]),
                "name": str(meta.get("function_name", event["action"])),
                "input": {k: v for k, v in args.items() if k not in _OPENHANDS_BOOKKEEPING},
            }
            if response == response_of_last_call and out and out[-1]["role"] == "assistant":
                out[-1]["content"].append(call)
            else:
                thought = str(args.get("thought") or "")
                said = [{"type": "text", "text": thought}] if thought.strip() else []
                out.append({"role": "assistant", "content": [*said, call]})
            response_of_last_call = response
        elif "observation" in event and meta.get("tool_call_id"):
            text = str(event.get("content") or event.get("message") or "")
            block = {
                "type": "tool_result",
                "tool_use_id": str(meta["tool_call_id"]),
                "content": text,
            }
            _add_result(out, block)
    return out


def from_claude_code(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code session lines as role/content messages (``isMeta`` kept)."""
    out: list[dict[str, Any]] = []
    last_id: object = None
    for entry in entries:
        kind, message = entry.get("type"), entry.get("message")
        if kind not in ("user", "assistant") or not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else None
        if kind == "assistant":
            message_id = message.get("id")
            if out and out[-1]["role"] == "assistant" and message_id == last_id and blocks:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": "assistant", "content": list(blocks or []) or _text(content)})
            last_id = message_id
            continue
        last_id = None
        if blocks and all(b.get("type") == "tool_result" for b in blocks):
            for block in blocks:
                _add_result(out, block)
            continue
        extra = {"isMeta": True} if entry.get("isMeta") else {}
        out.append({"role": "user", "content": content, **extra})
    return out


def convert(raw: str, name: str) -> tuple[str, list[dict[str, Any]]]:
    """The format's name and the conversation of one transcript file (its text)."""
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError:
        data = [json.loads(line) for line in raw.splitlines() if line.strip()]
        kind, messages = "claude-code", from_claude_code(data)
    else:
        if isinstance(data, dict) and "history" in data:
            kind, messages = "swe-agent", from_chat(data["history"])
        elif isinstance(data, dict) and "messages" in data:
            kind, messages = "mini-swe-agent", from_chat(data["messages"])
        elif isinstance(data, list) and data and "source" in data[0]:
            kind, messages = "openhands", from_openhands(data)
        elif isinstance(data, list) and data and "role" in data[0]:
            kind, messages = "mini-swe-agent", from_chat(data)
        else:
            raise ValueError(f"{name}: not a trajectory format this reader knows")
    return kind, [
        {"id": f"{name}-{i:05d}", **m, "timestamp": START_MS + i * STEP_MS}
        for i, m in enumerate(messages)
    ]


def shape_of(messages: list[dict[str, Any]]) -> str:
    """``text`` without tool calls; ``interactive`` when a person wrote more than one
    message (not a hook's ``isMeta``, not a tool result); else ``autonomous``."""
    if not any(_blocks(m, "tool_use") for m in messages):
        return "text"
    people = [m for m in messages if m["role"] == "user" and not m.get("isMeta") and is_request(m)]
    return "interactive" if len(people) > 1 else "autonomous"


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = message.get("content")
    return [b for b in content if b.get("type") == kind] if isinstance(content, list) else []


def is_request(message: dict[str, Any]) -> bool:
    """A user message that is not only tool results."""
    content = message.get("content")
    return isinstance(content, str) or any(b.get("type") != "tool_result" for b in content or [])


def is_result(messages: list[dict[str, Any]], index: int, shape: str) -> bool:
    """A tool's output: a user message of tool results, or in a text-mode run a user
    message right after the assistant's command."""
    message = messages[index]
    if message["role"] != "user":
        return False
    if shape == "text":
        return index > 0 and messages[index - 1]["role"] == "assistant"
    return bool(_blocks(message, "tool_result"))


_PATH = re.compile(r"(?<![\w/.-])(?:/?[\w.-]+/)+[\w-]+\.[A-Za-z]\w{0,5}(?![\w/])")
_EXCEPTION = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b")
_LINE = re.compile(r"\bline \d+\b")
_DEFINED = re.compile(r"\b(?:def|class|function)\s+([A-Za-z_]\w{3,})")
_TICKED = re.compile(r"`([A-Za-z_]\w*(?:_\w+|[a-z][A-Z]\w*))`")
_FENCE = re.compile(r"```[\w-]*\n(.*?)\n```", re.S)
_WORDS = re.compile(r"[^\W\d_][\w'-]*")


def task_phrase(message: dict[str, Any]) -> str:
    """The first line of the task message with five words or more that does not end in a
    colon (an introduction), markup dropped, cut to its first twelve words."""
    for line in message_text(message).splitlines():
        plain = re.sub(r"<[^>]+>|[*#`]", " ", line).strip()
        if len(_WORDS.findall(plain)) >= 5 and not plain.endswith(":"):
            return " ".join(plain.split()[:12])
    return " ".join(message_text(message).split()[:12])


def _commands(message: dict[str, Any]) -> list[str]:
    """The one-line commands a message runs: a ``command`` input, a fenced block."""
    found = [str(b["input"].get("command", "")) for b in _blocks(message, "tool_use")]
    if message["role"] == "assistant" and isinstance(message["content"], str):
        found += _FENCE.findall(message["content"])
    return [c.strip() for c in found if "\n" not in c.strip() and 3 <= len(c) <= MAX_COMMAND_CHARS]


def _candidates(message: dict[str, Any]) -> list[tuple[str, str]]:
    text = message_text(message)
    found = [("path", p) for p in _PATH.findall(text)]
    found += [("command", c) for c in _commands(message)]
    found += [("exception", e) for e in _EXCEPTION.findall(text)]
    found += [("line", line) for line in _LINE.findall(text)]
    found += [("identifier", name) for name in _DEFINED.findall(text)]
    if message["role"] == "assistant":
        found += [("identifier", name) for name in _TICKED.findall(text)]
    return found


def facts(messages: list[dict[str, Any]]) -> list[Fact]:
    """The probe facts of a conversation: the task's phrase (in the first message), file
    paths, one-line commands, exception names, defined and quoted identifiers, ``line N``;
    each once, with the index of the first message that holds it as a whole."""
    found = [Fact("task", task_phrase(messages[0]), 0)] if messages else []
    seen: set[tuple[str, str]] = set()
    for index, message in enumerate(messages):
        text = message_text(message)
        for kind, value in _candidates(message):
            if (kind, value) not in seen and occurs(value, text):
                seen.add((kind, value))
                found.append(Fact(kind, value, index))
    return found


def transcripts(
    messages: list[dict[str, Any]], shape: str, seed: int
) -> tuple[Transcript, Transcript]:
    """The conversation up to its last tool output, as written and with that output
    withheld (the tool still running), with their facts."""
    ends = [i + 1 for i in range(len(messages)) if is_result(messages, i, shape)]
    if not ends or ends[-1] < 3:
        raise ValueError("no tool output after the task")
    kept = messages[: ends[-1]]
    probes = facts(kept)
    task = probes[0].text
    done = Transcript(shape, seed, tuple(kept), tuple(probes), task)
    running = Transcript(
        shape,
        seed,
        tuple(kept[:-1]),
        tuple(f for f in probes if f.index < len(kept) - 1),
        task,
        pending=kept[-1],
    )
    return done, running
