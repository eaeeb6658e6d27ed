"""What a transcript holds for a summary (pure; docs/design.md#summarizers).

Agents write conversations in three shapes: a tool loop (one task, then assistant
messages with ``tool_use`` blocks and user messages with ``tool_result`` blocks), an
interactive session (user turns now and then, hook and reminder blocks, long tool
outputs), and a text-mode agent (commands in shell code fences, their output pasted back
as the next user message). :func:`read_messages` reads any of them as one
:class:`MessageView` per message: what the person or the agent wrote, the tool calls it
made (each paired with its outcome, :mod:`memoryd.transcript.toolcalls`), and the error
names its tool output reports. Tool output is never a statement.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from memoryd.transcript.toolcalls import (
    ToolCall,
    error_names,
    fenced_commands,
    outcome_of,
    shell_call,
    tool_use_call,
    without_fences,
)

SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
MAX_SENTENCE_CHARS = 400
MAX_TASK_CHARS = 160
TASK_READ_CHARS = 2_000
STANDING_MIN_CHARS = 24
STANDING_MAX_CHARS = 1_000
STANDING_EDGE_LINES = 20
"""A line of 24 to 1,000 characters written in two user messages or more (in what the
user wrote, or in the first or last 20 lines of tool output, where harnesses add their
reminders) is a standing instruction (a system prompt pasted into every turn), not
something said once."""

_HOOK_BLOCK = re.compile(
    r"<(?P<tag>system-reminder|[a-z-]*hook[a-z-]*|command-[a-z]+|local-command-[a-z]+)\b[^>]*>"
    r".*?</(?P=tag)>",
    re.S,
)
"""What a harness adds to a user turn (reminders, hook output, slash-command echoes)."""
_TASK_BLOCK = re.compile(
    r"<(?P<tag>[A-Za-z_-]*(?:task|issue|problem|description|request|question|ticket)"
    r"[A-Za-z_-]*)>(?P<body>.*?)</(?P=tag)>",
    re.S | re.I,
)
_TASK_LINE = re.compile(r"^\s*(?:#+\s*)?\**task\**\s*:\s*(?P<task>\S.*)$", re.I | re.M)
_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
_NOISE_LINE = re.compile(
    r"^\s*(?:\|.*\||(?:[^|\n]*\|){3}|L?\d+\s*[|:\t→]|\d+\s{2,}\S|[\[{]\s*[\"\[{]"
    r"|\[[^\]\n]*\]\s*$|[-=*_#`~]{3,}\s*$)"
)
"""A table row, a line of a numbered listing, JSON, a lone ``[marker]``, a rule, a fence."""
_LEAD = re.compile(
    r"^\s*(?:[-*•>]+\s+|\d+[.)]\s+|#+\s+)?(?:\*\*|__)?(?:(?i:thought|discussion)\s*:\s*)?"
)
"""What leads a sentence without being part of it: a bullet, a number, a heading mark,
emphasis, a text-mode agent's ``THOUGHT:``."""
_TWO_WORD_CHARS = re.compile(r"\w\W*\w")


class MessageView(NamedTuple):
    """One message as a summary reads it (a named tuple: thousands are made per job)."""

    position: int
    speaker: str
    """``user``, ``assistant`` or the message's own role."""
    text: str
    """What the person or the agent wrote: a user turn without its hook blocks, an
    assistant's text without its code fences; "" for tool output."""
    calls: tuple[ToolCall, ...] = ()
    output_errors: tuple[str, ...] = ()
    """Exception names and error codes that the tool output in this message reports."""
    genuine: bool = False
    """A user turn that someone wrote (not only tool results, not pasted command output)."""
    output: str = ""
    """The tool output the message carries (results, or a text-mode agent's pasted output)."""


@dataclass(slots=True)
class _Reader:
    outcomes: bool
    views: list[MessageView] = field(default_factory=list)
    open_calls: dict[str, tuple[int, int]] = field(default_factory=dict)
    """tool_use id -> (index of the view, index of the call in it)."""
    fenced_from: int | None = None
    """The view whose last shell fence waits for its output (a text-mode agent)."""

    def settle(self, view: int, call: int, output: str, failed: bool) -> None:
        if not self.outcomes:
            return
        before = self.views[view]
        calls = list(before.calls)
        made = calls[call]
        calls[call] = replace(
            made, outcome=outcome_of(output, failed, made.command is not None, made.command)
        )
        self.views[view] = before._replace(calls=tuple(calls))


def read_messages(
    messages: Sequence[Mapping[str, Any]], outcomes: bool = True
) -> list[MessageView]:
    """Every message as a :class:`MessageView`, each call paired with its outcome (pure);
    ``outcomes=False`` leaves the outcomes out, for a reader that needs none."""
    reader = _Reader(outcomes=outcomes)
    for position, message in enumerate(messages):
        role = message.get("role")
        speaker = role if isinstance(role, str) and role else "unknown"
        content = message.get("content")
        calls: list[ToolCall]
        errors: list[str]
        if isinstance(content, str):
            written, output, calls, errors = content, "", [], []
        else:
            written, output, calls, errors = _read_blocks(reader, position, content)
        if speaker == "assistant":
            fences = fenced_commands(written) if "```" in written else None
            if fences is not None:
                calls.extend(
                    call
                    for call in (shell_call(position, "shell", body) for body in fences)
                    if call is not None
                )
                written = without_fences(written)
            reader.fenced_from = len(reader.views) if fences else None
            reader.views.append(
                MessageView(position, speaker, written.strip(), tuple(calls) if calls else ())
            )
            continue
        if speaker == "user" and reader.fenced_from is not None and not output:
            # A text-mode agent's command output, pasted back as the next user turn.
            origin = reader.fenced_from
            if reader.views[origin].calls:
                reader.settle(origin, len(reader.views[origin].calls) - 1, written, False)
            reader.fenced_from = None
            errors = error_names(written)
            reader.views.append(
                MessageView(position, speaker, "", (), tuple(errors), output=written)
            )
            continue
        reader.fenced_from = None
        said = (_HOOK_BLOCK.sub("", written) if "<" in written else written).strip()
        reader.views.append(
            MessageView(
                position,
                speaker,
                said,
                tuple(calls) if calls else (),
                tuple(errors) if errors else (),
                speaker == "user" and bool(said),
                output,
            )
        )
    return reader.views


def _read_blocks(
    reader: _Reader, position: int, content: object
) -> tuple[str, str, list[ToolCall], list[str]]:
    """The text, the tool output, the calls and the error names of the tool output of a
    list of content blocks; each result settles the call it answers."""
    texts: list[str] = []
    outputs: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    for block in content if isinstance(content, list) else ():
        if isinstance(block, str):
            texts.append(block)
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            if isinstance(block.get("id"), str):
                reader.open_calls[block["id"]] = (len(reader.views), len(calls))
            calls.append(tool_use_call(position, block))
        elif kind == "tool_result":
            output = result_text(block.get("content"))
            outputs.append(output or "[no output]")
            errors.extend(error_names(output))
            opened = reader.open_calls.pop(str(block.get("tool_use_id")), None)
            if opened is not None and opened[0] < len(reader.views):
                reader.settle(*opened, output, block.get("is_error") is True)
    return "\n".join(texts), "\n".join(outputs), calls, errors


def result_text(content: object) -> str:
    """The text of a ``tool_result``'s content: a string, or its text blocks (pure)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b["text"])
            for b in content
            if isinstance(b, Mapping) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
    return ""


def line_key(line: str) -> str:
    """A line as standing-instruction detection compares it: case-folded, spaces collapsed."""
    return " ".join(line.casefold().split())


def standing_lines(views: Sequence[MessageView]) -> frozenset[str]:
    """Keys of the long lines that two user messages or more repeat word for word, in
    what the user wrote or at the start or end of tool output (pure)."""
    counts: Counter[str] = Counter()
    for view in views:
        lines: list[str] = []
        if view.genuine and "\n" in view.text:
            lines = view.text.splitlines()
        if view.output:
            output = view.output.splitlines()
            edges = (
                output
                if len(output) <= 2 * STANDING_EDGE_LINES
                else (output[:STANDING_EDGE_LINES] + output[-STANDING_EDGE_LINES:])
            )
            lines.extend(edges)
        if lines:
            counts.update(
                {line_key(x) for x in lines if STANDING_MIN_CHARS <= len(x) <= STANDING_MAX_CHARS}
            )
    return frozenset(key for key, seen in counts.items() if seen >= 2)


def without_standing(text: str, standing: frozenset[str]) -> str:
    """``text`` without its standing-instruction lines (pure)."""
    if not standing:
        return text
    return "\n".join(line for line in text.splitlines() if line_key(line) not in standing)


def task_view(views: Sequence[MessageView]) -> MessageView | None:
    """The task: the first user turn, when no assistant message comes before it and one
    comes after it (pure)."""
    for at, view in enumerate(views):
        if view.genuine:
            later = (v.speaker == "assistant" for v in views[at + 1 :])
            return view if any(later) else None
        if view.speaker == "assistant":
            return None
    return None


def task_body(text: str) -> str:
    """What the task message says of the task (pure): the body of its ``<task>``- or
    ``<issue>``-like block when it has one (the rest is instructions), else all of it."""
    block = _TASK_BLOCK.search(text) if "<" in text else None
    return block["body"] if block else text


def task_phrase(text: str, standing: frozenset[str] = frozenset()) -> str | None:
    """The task in one short line (pure): a ``<task>``/``<issue>``-like block's first
    sentence, a ``Task:`` line, else the first sentence of three words or more that is
    not a standing instruction, table or markup, nor an introduction ending in a colon."""
    # The task is stated at the start: a long message is not read to its end.
    body = without_standing(task_body(text)[:TASK_READ_CHARS], standing)
    named = _TASK_LINE.search(body)
    if named:
        return shorten(_TAG.sub("", named["task"]).strip(), MAX_TASK_CHARS) or None
    said = [s for s in iter_sentences(body) if len(s.split()) >= 3]
    # "Consider the following PR description:" introduces the task; it does not state it.
    first = next((s for s in said if not s.endswith(":")), said[0] if said else None)
    return shorten(first, MAX_TASK_CHARS) if first else None


def previous_task(summary: str) -> str | None:
    """The ``Task:`` line of a summary, as it states it (pure)."""
    for line in summary.splitlines():
        stripped = line.strip().removeprefix("- ").strip()
        if stripped.startswith("Task:") and len(stripped) > len("Task:") + 1:
            return stripped.removeprefix("Task:").strip()
    return None


def sentences(text: str) -> list[str]:
    """The sentences of a person's or an agent's text (pure): no table, numbered listing,
    JSON, lone marker or markup line; tags, bullets and emphasis taken off; at least two
    words and two letters or digits each, at most 400 characters."""
    return list(iter_sentences(text))


def iter_sentences(text: str) -> Iterator[str]:
    """:func:`sentences`, one at a time."""
    for line in text.splitlines():
        if not line.strip() or _NOISE_LINE.match(line):
            continue
        if "<" in line:
            line = _TAG.sub(" ", line)
        for part in SENTENCE_END.split(line):
            sentence = _LEAD.sub("", part.strip()).strip().strip("*_").strip()
            if " " not in sentence or not _TWO_WORD_CHARS.search(sentence):
                continue
            if len(sentence) > MAX_SENTENCE_CHARS:
                sentence = shorten(sentence, MAX_SENTENCE_CHARS)
            yield sentence


def shorten(text: str, limit: int) -> str:
    """``text`` cut before the word that ``limit`` characters would split (a path is
    whole or left out), with an ellipsis; a text of one long word is cut in it (pure)."""
    one = " ".join(text.split())
    if len(one) <= limit:
        return one
    cut = one[: limit - 1]
    if one[limit - 1] != " " and " " in cut:
        cut = cut[: cut.rfind(" ")]
    return cut.rstrip(",;: ") + "…"
