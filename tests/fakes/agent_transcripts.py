"""Realistic agent transcripts in memoryd's format, made up, seeded and deterministic.

Standard library only. Three shapes, after the public trajectory formats of coding agents:

- ``autonomous``: an unattended tool loop (SWE-bench style). ONE user message, the task
  inside kilobytes of standing instructions; then only assistant messages (a short thought
  and one, sometimes several parallel, ``tool_use`` blocks: ``bash`` and a
  ``str_replace_editor`` that views, creates and edits files) and user messages holding
  only their ``tool_result`` blocks.
- ``interactive``: a coding CLI with a person at the keyboard: follow-up requests now and
  then, hook feedback and system reminders as user messages (``isMeta``) or as text after
  the tool results, tools named ``Bash``, ``Read``, ``Edit``, ``Write``, ``Grep``.
- ``text``: a text-mode agent: the command in a fenced ``bash`` block of the assistant's
  text, its output pasted back as the next user message (plain string) with its return
  code.

Each line is ``{"id", "role", "content", "timestamp"}`` (plus ``isMeta`` on hook
messages); content is a string or Messages-API blocks. A complete transcript ends with a
tool result; ``running=True`` withholds that last result (the tool is still running) and
keeps it as :attr:`Transcript.pending`. :attr:`Transcript.facts` are mechanical probe
facts (the task's phrase, paths, commands, exception names, identifiers, ``line N``),
each with the index of the first message it was planted in.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agent_outputs as out
import agent_texts as texts
from agent_outputs import Project
from agent_steps import Focus, Step, carry_out, pick_focus, plan

SHAPES = ("autonomous", "interactive", "text")
TEXT_OUTPUT_LIMIT = 10_000
"""A text-mode harness shows longer outputs as their head and tail only."""
START_MS = 1_767_000_000_000


@dataclass(frozen=True, slots=True)
class Fact:
    """A probe fact: its kind, its exact text, the index of the message it lies in."""

    kind: str
    text: str
    index: int


@dataclass(frozen=True)
class Transcript:
    """One generated conversation and the facts planted in it."""

    shape: str
    seed: int
    messages: tuple[dict[str, Any], ...]
    facts: tuple[Fact, ...]
    task: str
    """The distinctive phrase of the task (in the first message)."""
    pending: dict[str, Any] | None = None
    """With ``running``: the tool result not yet appended (the tool is still running)."""

    @property
    def lines(self) -> list[bytes]:
        """The lines of ``conversation.jsonl``, each ending in ``\\n``."""
        return [encode(message) for message in self.messages]

    @property
    def tokens(self) -> int:
        """The estimated tokens of the whole conversation (memoryd's estimate)."""
        return sum(estimate_tokens(message) for message in self.messages)


def encode(message: Mapping[str, Any]) -> bytes:
    """One conversation line."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """About characters / 4 of the content plus 4, as memoryd counts (docs/design.md#counting)."""
    content = message.get("content")
    chars = 0
    if isinstance(content, str):
        chars = len(content)
    elif isinstance(content, list):
        for block in content:
            if block.get("type") == "text":
                chars += len(block.get("text", ""))
            else:
                chars += len(json.dumps(block, ensure_ascii=False, separators=(",", ":")))
    return (chars + 3) // 4 + 4


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def message_text(message: Mapping[str, Any]) -> str:
    """The readable text of a message: its text, tool names and inputs, tool results."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            parts += [str(block.get("name", "")), *_strings(block.get("input"))]
        elif kind == "tool_result":
            parts += list(_strings(block.get("content")))
    return "\n".join(parts)


def occurs(fact: str, text: str) -> bool:
    """True when ``fact`` is in ``text`` as a whole: not inside a longer word or number
    (``line 14`` is not in ``line 140``)."""
    if fact not in text:
        return False
    return re.search(rf"(?<!\w){re.escape(fact)}(?!\w)", text) is not None


def is_result(message: Mapping[str, Any]) -> bool:
    """True for a user message that carries tool results (or a text-mode tool output)."""
    content = message.get("content")
    if message.get("role") != "user":
        return False
    if isinstance(content, str):
        return content.startswith("<returncode>")
    return any(block.get("type") == "tool_result" for block in content or [])


class _Conversation:
    """Messages as they are appended, with their ids, times and facts."""

    def __init__(self, shape: str, seed: int) -> None:
        self.shape = shape
        self.seed = seed
        self.ids = random.Random(f"{shape}:{seed}:ids")
        self.messages: list[dict[str, Any]] = []
        self.facts: list[Fact] = []
        self.seen: set[tuple[str, str]] = set()
        self.now = START_MS + seed * 86_400_000

    def content_rng(self) -> random.Random:
        """The randomness of the next message's text: independent of the output sizes."""
        return random.Random(f"{self.shape}:{self.seed}:{len(self.messages)}")

    def tool_id(self) -> str:
        alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
        return "toolu_01" + "".join(self.ids.choice(alphabet) for _ in range(22))

    def add(
        self, role: str, content: Any, facts: list[tuple[str, str]], pause_ms: int, **extra: Any
    ) -> None:
        self.now += pause_ms
        uid = str(uuid.UUID(int=self.ids.getrandbits(128), version=4))
        message = {"id": uid, "role": role, "content": content, "timestamp": self.now, **extra}
        text = message_text(message)
        for kind, fact in facts:
            if (kind, fact) not in self.seen and occurs(fact, text):
                self.seen.add((kind, fact))
                self.facts.append(Fact(kind, fact, len(self.messages)))
        self.messages.append(message)


def _text_output(returncode: int, text: str) -> str:
    """A text-mode harness's observation: return code, output, long outputs cut."""
    if len(text) > TEXT_OUTPUT_LIMIT:
        half = TEXT_OUTPUT_LIMIT // 2
        text = (
            "<warning>\nThe output was too long to show in full; narrow the command (head, "
            "tail, grep) to see the rest.\n</warning>\n"
            f"<output_head>\n{text[:half]}\n</output_head>\n"
            f"<elided_chars>\n{len(text) - TEXT_OUTPUT_LIMIT} characters elided\n</elided_chars>\n"
            f"<output_tail>\n{text[-half:]}\n</output_tail>"
        )
        return f"<returncode>{returncode}</returncode>\n{text}"
    return f"<returncode>{returncode}</returncode>\n<output>\n{text}\n</output>"


def _thought(rng: random.Random, step: Step, previous: list[tuple[str, str]]) -> str:
    now = texts.thought(rng, step.kind, step.module, step.function)
    return f"{texts.finding(rng, previous)} {now}" if previous and rng.random() < 0.6 else now


def _tool_turn(
    conv: _Conversation, project: Project, steps: list[Step], previous: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """An assistant message with a thought and one tool call per step, then the results."""
    rng = conv.content_rng()
    shape = conv.shape
    done = [carry_out(rng, project, step, shape) for step in steps]
    ids = [conv.tool_id() for _ in done]
    calls = [
        {"type": "tool_use", "id": tid, "name": d.tool, "input": d.arguments}
        for tid, d in zip(ids, done, strict=True)
    ]
    thought = {"type": "text", "text": _thought(rng, steps[0], previous)}
    call_facts = [fact for d in done for fact in d.call_facts]
    conv.add("assistant", [thought, *calls], call_facts, rng.randint(2_000, 40_000))
    results: list[dict[str, Any]] = []
    for tid, d in zip(ids, done, strict=True):
        text = d.output.text or ("No matches found" if d.tool == "Grep" else "(no output)")
        if shape == "autonomous" and d.tool == "bash":
            text += f"\n[exit code {d.returncode}]"
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid}
        block["content"] = text if shape == "interactive" else [{"type": "text", "text": text}]
        if d.returncode and shape == "interactive":
            block["is_error"] = True
        results.append(block)
    if shape == "interactive" and rng.random() < 0.12:
        results.append({"type": "text", "text": texts.hook_message(rng, steps[0].module)})
    output_facts = [fact for d in done for fact in d.output.facts]
    conv.add("user", results, output_facts, rng.randint(200, 60_000))
    return output_facts


def _text_turn(
    conv: _Conversation, project: Project, step: Step, previous: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """A text-mode turn: the command in a fenced block, its output as the next message."""
    rng = conv.content_rng()
    done = carry_out(rng, project, step, "text")
    content = f"THOUGHT: {_thought(rng, step, previous)}\n\n```bash\n{done.command}\n```"
    facts = [("command", done.command), *done.call_facts]
    conv.add("assistant", content, facts, rng.randint(2_000, 40_000))
    observation = _text_output(done.returncode, done.output.text)
    conv.add("user", observation, done.output.facts, rng.randint(200, 60_000))
    return done.output.facts


def _autonomous(
    conv: _Conversation,
    rng: random.Random,
    project: Project,
    target: int,
    scale: float,
    focus: Focus,
) -> None:
    """Episodes, the first on the task's function, until the loop is past ``target``."""
    previous: list[tuple[str, str]] = []
    next_focus: Focus | None = focus
    while len(conv.messages) <= target:
        for steps in plan(rng, project, scale, next_focus):
            if conv.shape == "text":
                for step in steps:
                    previous = _text_turn(conv, project, step, previous)
            else:
                previous = _tool_turn(conv, project, steps, previous)
        next_focus = None


def _interactive(
    conv: _Conversation,
    rng: random.Random,
    project: Project,
    target: int,
    scale: float,
    focus: Focus,
) -> None:
    """Turns of a person and the agent: episodes, a closing answer, now and then a hook's
    feedback or a reminder, then the person's next request (the next turn's focus)."""
    previous: list[tuple[str, str]] = []
    while len(conv.messages) <= target:
        for episode in range(rng.randint(1, 3)):
            for steps in plan(rng, project, scale, focus if episode == 0 else None):
                previous = _tool_turn(conv, project, steps, previous)
        module, function = focus
        text_rng = conv.content_rng()
        answer = [{"type": "text", "text": texts.final_answer(text_rng, module, function)}]
        conv.add("assistant", answer, [], text_rng.randint(2_000, 20_000))
        if rng.random() < 0.25:
            hook = texts.hook_message(conv.content_rng(), module)
            conv.add("user", hook, [], 500, isMeta=True)
            previous = _tool_turn(conv, project, [Step("test", module, function, 10)], [])
            answer = [{"type": "text", "text": texts.final_answer(text_rng, module, function)}]
            conv.add("assistant", answer, [], text_rng.randint(2_000, 20_000))
        if rng.random() < 0.3:
            reminder = texts.hook_message(conv.content_rng(), module)
            conv.add("user", reminder, [], 1_000, isMeta=True)
        focus = pick_focus(rng, project)
        request = texts.follow_up(conv.content_rng(), *focus)
        facts = [("identifier", focus[1].name), ("path", focus[0].path)]
        conv.add("user", request, facts, text_rng.randint(20_000, 900_000))


def _build(shape: str, seed: int, target: int, scale: float) -> tuple[_Conversation, str]:
    """The conversation of ``shape`` and ``seed`` grown past ``target`` messages."""
    rng = random.Random(f"{shape}:{seed}")
    root = {"autonomous": "/testbed", "interactive": "/home/dev/work", "text": "/repo"}[shape]
    project = out.make_project(rng, root)
    focus = pick_focus(rng, project)
    conv = _Conversation(shape, seed)
    text_rng = conv.content_rng()
    issue, phrase = texts.problem(text_rng, project, *focus)
    if shape == "interactive":
        ask = f"{issue}\n\nCan you find the cause and fix it? Run the tests when you are done."
        content: Any = [
            {"type": "text", "text": texts.project_memory(text_rng, project)},
            {"type": "text", "text": ask},
        ]
        conv.add("user", content, [("task", phrase)], 0)
        _interactive(conv, rng, project, target, scale, focus)
    else:
        content = texts.task_message(text_rng, project, issue, shape == "text")
        conv.add("user", content, [("task", phrase)], 0)
        _autonomous(conv, rng, project, target, scale, focus)
    return conv, phrase


def _cut(messages: list[dict[str, Any]], target: int) -> int:
    """The longest prefix of at most ``target`` messages that ends with a tool result."""
    for length in range(min(target, len(messages)), 1, -1):
        if is_result(messages[length - 1]):
            return length
    raise ValueError(f"no tool result within the first {target} messages")


def _resized(
    shape: str, seed: int, messages: int, length: int, tokens: int
) -> tuple[_Conversation, str]:
    """The same conversation with its outputs scaled until its first ``length`` messages
    hold about ``tokens`` tokens. The messages, their order and roles do not change with
    the scale (see :func:`agent_steps.plan`), so neither does ``length``."""
    scale = 1.0
    conv, phrase = _build(shape, seed, messages, scale)
    for _ in range(8):
        total = sum(estimate_tokens(m) for m in conv.messages[:length])
        if abs(total - tokens) <= 0.02 * tokens:
            break
        scale = min(64.0, max(0.02, scale * tokens / total))
        conv, phrase = _build(shape, seed, messages, scale)
    return conv, phrase


def generate(
    shape: str,
    seed: int,
    messages: int = 120,
    *,
    tokens: int | None = None,
    running: bool = False,
) -> Transcript:
    """A transcript of ``shape`` with about ``messages`` messages (at most that many; it
    ends with a tool result) and, when ``tokens`` is given, about that many tokens (the
    tool outputs grow or shrink; within a few percent where the outputs allow: a text-mode
    harness cuts each output at 10,000 characters, a file view ends with its file).

    With ``running`` the last tool result is withheld (:attr:`Transcript.pending`): the
    last message is then an assistant message whose tool call is still running.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)} (got {shape!r})")
    if messages < 3:
        raise ValueError(f"a transcript needs at least 3 messages (got {messages})")
    conv, phrase = _build(shape, seed, messages, 1.0)
    length = _cut(conv.messages, messages)
    if tokens is not None:
        conv, phrase = _resized(shape, seed, messages, length, tokens)
    kept = length - 1 if running else length
    return Transcript(
        shape=shape,
        seed=seed,
        messages=tuple(conv.messages[:kept]),
        facts=tuple(fact for fact in conv.facts if fact.index < kept),
        task=phrase,
        pending=conv.messages[length - 1] if running else None,
    )


def write_workspace(folder: Path, transcript: Transcript) -> Path:
    """Write ``transcript`` as ``folder/conversation.jsonl`` (folder created); the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conversation.jsonl").write_bytes(b"".join(transcript.lines))
    return folder
