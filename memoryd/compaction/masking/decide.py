"""Observation masking: which old tool outputs become one-line placeholders, and what the
placeholders say (pure; docs/design.md#masking).

Before a strategy summarizes for usage, old tool outputs leave the context first, with no
LLM call: a ``tool_result`` block's content (images included), or a text-mode agent's
command output pasted back as a user message, becomes one text placeholder naming the
call, its size in tokens, its outcome (the call-line digest of
:func:`memoryd.transcript.call_lines.call_line`) and ``memoryd expand``. The
masked line keeps its ``id``, ``tool_use_id``, ``is_error`` and every other field and
gains ``"isMasked": true``; its original goes to the archive in the job's one commit.

With :class:`MaskRules`, old calls' large input fields and old user turns' media too
(:mod:`memoryd.compaction.masking.rules`). Never masked: the newest ``keep_recent`` tool
outputs (calls, user turns with media), pinned messages (``keep_first``, ``"pinned":
true``), a running call and its results, excluded tools, assistant text and thinking,
summaries, lines already masked, lines with no ``id`` and lines that are not objects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from memoryd import strict_json
from memoryd.boundaries import running_tool_call
from memoryd.commit.rewrite import Part
from memoryd.compaction.masking.choice import choose
from memoryd.compaction.masking.placeholders import placeholder_text
from memoryd.compaction.masking.rules import (
    MaskRules,
    mask_more,
    masked_words,
    old_inputs,
    old_media,
    worth,
)
from memoryd.compaction.strategies.least_loss import masking_aim
from memoryd.conversation.lines import Line
from memoryd.conversation.pins import byte_ranges, pinned_indices
from memoryd.levels import over_trigger
from memoryd.receipts.records import MaskedSpan
from memoryd.tokens import content_chars, estimate_message_tokens
from memoryd.transcript.messages import result_text
from memoryd.transcript.toolcalls import (
    ToolCall,
    fenced_commands,
    shell_call,
    tool_use_call,
)

if TYPE_CHECKING:
    from memoryd.config.settings import Settings

MASKED_FIELD = "isMasked"


@dataclass(frozen=True, slots=True)
class MaskedLine:
    """One line whose tool outputs become placeholders."""

    original: Line
    line: Line
    """The masked line: the original's index, offset and length (they name the snapshot
    bytes it replaces), its own message and tokens."""
    data: bytes
    """The masked line as written, ``\\n`` included."""
    outputs: int
    """Tool outputs masked in it."""
    inputs: int = 0
    """Tool input fields masked in it; ``media``: its images and documents masked."""
    media: int = 0

    @property
    def freed(self) -> int:
        return self.original.tokens - self.line.tokens


@dataclass(frozen=True, slots=True)
class Masking:
    """The lines a masking stage rewrites, oldest first."""

    masked: tuple[MaskedLine, ...] = ()

    @property
    def outputs(self) -> int:
        """Tool outputs masked (a line may hold several results)."""
        return sum(m.outputs for m in self.masked)

    @property
    def inputs(self) -> int:
        """Fields of tool inputs masked."""
        return sum(m.inputs for m in self.masked)

    @property
    def media(self) -> int:
        """Images and documents of user turns masked."""
        return sum(m.media for m in self.masked)

    def what(self) -> str:
        """What it masks, in words (:func:`masked_words`)."""
        return masked_words(self.outputs, self.inputs, self.media)

    @property
    def freed_tokens(self) -> int:
        """Uncalibrated tokens the masking takes out of the conversation."""
        return sum(m.freed for m in self.masked)

    def applied(self, lines: Sequence[Line]) -> list[Line]:
        """``lines`` with the masked ones in place of their originals."""
        by_index = {m.line.index: m.line for m in self.masked}
        return [by_index.get(line.index, line) for line in lines]

    def parts(self, lines: Sequence[Line]) -> list[Part]:
        """The new content of consecutive snapshot ``lines``: a masked line as its bytes,
        the others as byte ranges of the snapshot (adjacent ones merged)."""
        data = {m.line.index: m.data for m in self.masked}
        parts: list[Part] = []
        run: list[Line] = []
        for line in lines:
            if line.index in data:
                parts.extend(byte_ranges(run))
                parts.append(data[line.index])
                run = []
            else:
                run.append(line)
        parts.extend(byte_ranges(run))
        return parts

    def originals(self, lines: Sequence[Line]) -> list[tuple[int, int]]:
        """Byte ranges of the originals of the masked lines among ``lines`` (the archive's)."""
        indices = {line.index for line in lines}
        return byte_ranges([m.original for m in self.masked if m.original.index in indices])


Decision = Literal["skip", "enough", "summarize"]


def decide(
    tokens_before: int, freed: int, token_limit: int, target: float, min_freed: float
) -> Decision:
    """What a usage-triggered job does with a masking that frees ``freed`` tokens (pure):
    ``skip`` it (it frees less than ``min_freed`` of the budget: not worth busting the
    agent's prompt cache), stop after it (usage at or below ``target``: ``enough``), or
    mask and then ``summarize`` the masked conversation. Figures calibrated alike."""
    if freed <= 0 or freed < min_freed * token_limit:
        return "skip"
    if tokens_before - freed <= target * token_limit:
        return "enough"
    return "summarize"


@dataclass(frozen=True, slots=True)
class _Output:
    """One tool output: where it is and the call that made it."""

    line: int
    block: int | None
    """Index of its ``tool_result`` block; None for a whole text-mode message."""
    call: ToolCall | None


def tool_outputs(lines: Sequence[Line]) -> list[_Output]:
    """Every tool output of a conversation, oldest first, with the call that made it."""
    calls: dict[str, ToolCall] = {}
    fenced: ToolCall | None = None
    found: list[_Output] = []
    for line in lines:
        if line.message is None or line.is_summary:
            fenced = None
            continue
        if line.role == "assistant":
            fenced = None
            for block in line.blocks:
                if block.get("type") == "tool_use" and isinstance(block.get("id"), str):
                    calls[block["id"]] = tool_use_call(line.index, block)
            commands = fenced_commands(_text(line.message.get("content")))
            if commands:
                fenced = shell_call(line.index, "shell", commands[-1])
            continue
        if line.role != "user":
            continue
        results = [
            _Output(line.index, k, calls.get(str(block.get("tool_use_id"))))
            for k, block in enumerate(line.blocks)
            if block.get("type") == "tool_result"
        ]
        if results:
            found.extend(results)
        elif fenced is not None:
            found.append(_Output(line.index, None, fenced))
        fenced = None
    return found


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    return result_text(content)


def plan_masking(
    lines: Sequence[Line], keep_recent: int, pinned: frozenset[int], rules: MaskRules | None = None
) -> Masking:
    """The tool outputs to mask: every one outside the newest ``keep_recent``, the
    ``pinned`` lines and a running call's results, where the placeholder is shorter; with
    ``rules``, old calls' large inputs and old user turns' media too (pure). See the
    module docstring for what is never masked."""
    rules = rules or MaskRules()
    outputs = tool_outputs(lines)
    old = outputs[: max(0, len(outputs) - keep_recent)]
    # The results of a running turn's calls: they follow the turn, whose calls may sit on
    # lines after its first (a thinking line). An earlier result with one of those ids
    # answered an earlier call: agents reuse ids.
    running = running_tool_call(lines)
    open_lines = lines[running:] if running is not None else []
    open_ids = frozenset(i for line in open_lines for i in line.tool_use_ids)
    answers_open = {line.index for line in open_lines if line.tool_result_ids & open_ids}
    chosen: dict[int, list[_Output]] = {}
    for output in old:
        if output.call is None or output.call.name not in rules.exclude_tools:
            chosen.setdefault(output.line, []).append(output)
    inputs = old_inputs(lines, keep_recent, running, rules) if rules.tool_inputs else {}
    media = old_media(lines, keep_recent) if rules.media else {}
    masked = []
    for index in sorted(chosen.keys() | inputs.keys() | media.keys()):
        line = lines[index]
        message = line.message
        if (
            message is None
            or index in pinned
            or message.get(MASKED_FIELD) is True
            or not isinstance(message.get("id"), str)
            or index in answers_open
        ):
            continue
        found = chosen.get(index)
        result = mask_line(line, message, found) if found else None
        if index in inputs or index in media:
            more = (inputs.get(index, []), media.get(index, []))
            result = _mask_more(line, result, *more, rules.input_chars)
        if result is not None:
            masked.append(result)
    return Masking(tuple(masked))


def _mask_more(
    line: Line, result: MaskedLine | None, inputs: Sequence[int], media: Sequence[int], limit: int
) -> MaskedLine | None:
    """``result`` (or ``line``) with the large fields of its ``inputs`` calls and its
    ``media`` blocks as placeholders too; ``result`` when none is worth it."""
    current = result.line.message if result is not None else line.message
    more = mask_more(current or {}, inputs, media, limit)
    if more is None:
        return result
    outputs = result.outputs if result is not None else 0
    return _rewritten(line, *more, outputs=outputs)


def _rewritten(
    line: Line, message: dict[str, Any], inputs: int = 0, media: int = 0, *, outputs: int
) -> MaskedLine | None:
    """The masked line holding ``message``, or None when it cannot be written or frees
    nothing."""
    new_message = {**message, MASKED_FIELD: True}
    try:
        data = strict_json.dumps_line(new_message)
    except strict_json.JSONProblem:
        return None
    tokens = estimate_message_tokens(new_message)
    if tokens >= line.tokens:
        return None
    new_line = Line(line.index, line.offset, line.length, tokens, new_message, line.problem)
    return MaskedLine(line, new_line, data, outputs, inputs, media)


def mask_line(
    line: Line, message: Mapping[str, Any], found: Sequence[_Output]
) -> MaskedLine | None:
    """``line`` with its ``found`` outputs as placeholders (and its images, when it holds a
    tool result), or None when that frees nothing or cannot be written."""
    ident = str(message["id"])
    content = message.get("content")
    masked_outputs = 0
    new_content: Any
    if found[0].block is None:
        placeholder = placeholder_text(found[0].call, _text(content), False, ident)
        if not _worth(placeholder, content_chars(content)):
            return None
        new_content = placeholder if isinstance(content, str) else [_text_block(placeholder)]
        masked_outputs = 1
    else:
        blocks = list(content) if isinstance(content, list) else []
        # An output's block counts the content's objects (Line.blocks), not its items.
        objects = [k for k, block in enumerate(blocks) if isinstance(block, Mapping)]
        wanted = {objects[o.block]: o.call for o in found if o.block is not None}
        for k, block in enumerate(blocks):
            if not isinstance(block, Mapping):
                continue
            if k in wanted:
                inner = block.get("content")
                failed = block.get("is_error") is True
                placeholder = placeholder_text(wanted[k], result_text(inner), failed, ident)
                if _worth(placeholder, content_chars(inner)):
                    blocks[k] = {**block, "content": placeholder}
                    masked_outputs += 1
            elif block.get("type") == "image":
                blocks[k] = _text_block(
                    f"[image masked by memoryd; memoryd expand WORKSPACE {ident}]"
                )
        if not masked_outputs:
            return None
        new_content = blocks
    return _rewritten(line, {**message, "content": new_content}, outputs=masked_outputs)


def _worth(placeholder: str, output_chars: int) -> bool:
    """Whether masking an output of ``output_chars`` pays: it must be at least
    ``MIN_SHRINK`` times its placeholder (a short output says more than its digest)."""
    return worth(placeholder, output_chars)


def _text_block(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


@dataclass(frozen=True, slots=True)
class MaskingStage:
    """What the masking stage decided for one job."""

    masking: Masking
    decision: Decision
    freed_tokens: int
    """Calibrated tokens the masking frees."""
    aim: float
    """The usage share it aimed at."""

    @property
    def text(self) -> str:
        """HEARTBEAT.md's words for it."""
        return f"masked {self.masking.what()} (freed {self.freed_tokens:,} tokens)"

    @property
    def detail(self) -> str:
        """What it masked, after the words that say how many messages and why."""
        return f"{self.masking.outputs} tool outputs, {self.freed_tokens:,} tokens freed"

    def span(self, archive: str, summary_followed: bool) -> MaskedSpan:
        """The receipt's record of it."""
        masking = self.masking
        return MaskedSpan(
            len(masking.masked),
            masking.outputs,
            self.freed_tokens,
            archive,
            summary_followed,
            inputs=masking.inputs,
            media=masking.media,
        )


def masking_stage(
    lines: Sequence[Line],
    settings: Settings,
    tokens_before: int,
    calibration: float,
    trigger: float | None,
) -> MaskingStage | None:
    """The masking a usage-triggered job does first (usage over its strategy's
    ``trigger``), or None when masking is off, usage is not over it, or the masking would
    free too little (pure): the old outputs that bring usage to
    :func:`memoryd.compaction.strategies.least_loss.masking_aim`, fewest details lost first, or all
    of them when that is not enough."""
    config = settings.masking
    if not config.enabled or trigger is None:
        return None
    if not over_trigger(tokens_before, settings.token_limit, trigger):
        return None
    pinned = pinned_indices(lines, settings.keep_first)
    masking = plan_masking(lines, config.keep_recent, pinned, MaskRules.of(settings))
    aim = masking_aim(config.target, trigger)
    # Only the outputs it needs, those that lose least first (docs/design.md#least-loss).
    needed = math.ceil((tokens_before - aim * settings.token_limit) / calibration)
    masking = Masking(choose(masking.masked, lines, needed))
    freed = round(masking.freed_tokens * calibration)
    decision = decide(tokens_before, freed, settings.token_limit, config.target, config.min_freed)
    return None if decision == "skip" else MaskingStage(masking, decision, freed, aim)
