"""What masking takes beyond old tool outputs, as the API's own context editing can: the
large string fields of old calls' inputs, and the images and documents of old genuine
user turns; and the tools it never touches (pure; docs/design.md#masking).

An input field becomes a placeholder string (``[tool input masked by memoryd: content,
12,345 characters (~3,087 tokens); the original: memoryd expand WORKSPACE ID]``) inside
an input that stays the same object, every other field and their order as they were: the
call still reads as the call it was. An image or document becomes a text block naming
its kind, size and tokens (``[image 1382x1090 png, ~1,533 tokens: memoryd expand
WORKSPACE ID]``). :mod:`memoryd.compaction.masking.decide` puts them in the masked line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memoryd.conversation.lines import Line
from memoryd.media import Media, measure
from memoryd.tokens import estimate_text_tokens
from memoryd.transcript.output_places import definitions, named_paths

if TYPE_CHECKING:
    from memoryd.config.settings import Settings

INPUT_NAMES = 8
"""Names a masked input's placeholder lists of what its code defines."""
INPUT_PATHS = 3
"""File paths a masked input's placeholder names (the first ones)."""
MIN_SHRINK = 2
"""An output, input field or medium is masked only when it is at least this many times
its placeholder (characters; a medium counts four a token of its API cost)."""
INPUT_PLACEHOLDER_LEAD = "[tool input masked by memoryd: "
MEDIA_BLOCKS = ("image", "document")


def worth(placeholder: str, chars: int) -> bool:
    """Whether replacing ``chars`` characters by ``placeholder`` pays (see
    :data:`MIN_SHRINK`)."""
    return chars >= MIN_SHRINK * len(placeholder)


@dataclass(frozen=True, slots=True)
class MaskRules:
    """What a masking takes beyond old tool outputs, and the tools it leaves alone
    (``[masking]``). The defaults mask outputs only, as :func:`plan_masking` always has;
    :meth:`of` gives the configuration's."""

    tool_inputs: bool = False
    input_chars: int = 1000
    """A string field of a call's input longer than this is masked."""
    media: bool = False
    exclude_tools: frozenset[str] = frozenset()
    """Tools whose calls and results are never masked."""

    @classmethod
    def of(cls, settings: Settings) -> MaskRules:
        config = settings.masking
        return cls(
            tool_inputs=config.tool_inputs,
            input_chars=config.tool_input_chars,
            media=config.media,
            exclude_tools=frozenset(config.exclude_tools),
        )


def masked_words(outputs: int, inputs: int, media: int) -> str:
    """What a masking masks, in words: ``3 tool outputs, 2 tool inputs, 1 images or
    documents`` (outputs always named, as the reports always have)."""
    words = [f"{outputs} tool outputs"]
    words += [f"{inputs} tool inputs"] if inputs else []
    words += [f"{media} images or documents"] if media else []
    return ", ".join(words)


def old_inputs(
    lines: Sequence[Line], keep_recent: int, running: int | None, rules: MaskRules
) -> dict[int, list[int]]:
    """The ``tool_use`` blocks whose inputs may be masked, by line index: every call
    outside the newest ``keep_recent``, none of the running turn (the lines from
    ``running`` on), none of an excluded tool."""
    calls = [
        (line.index, k, block)
        for line in lines
        if line.role == "assistant" and not line.is_summary
        for k, block in enumerate(line.blocks)
        if block.get("type") == "tool_use"
    ]
    found: dict[int, list[int]] = {}
    for index, k, block in calls[: max(0, len(calls) - keep_recent)]:
        if running is not None and index >= running:
            continue
        if block.get("name") in rules.exclude_tools or not isinstance(block.get("input"), Mapping):
            continue
        found.setdefault(index, []).append(k)
    return found


def old_media(lines: Sequence[Line], keep_recent: int) -> dict[int, list[int]]:
    """The image and document blocks that may be masked, by line index: those of every
    genuine user turn with media but the newest ``keep_recent`` such turns."""
    turns = [
        (line.index, [k for k, b in enumerate(line.blocks) if b.get("type") in MEDIA_BLOCKS])
        for line in lines
        if line.is_genuine_user_turn
    ]
    with_media = [(index, ks) for index, ks in turns if ks]
    return dict(with_media[: max(0, len(with_media) - keep_recent)])


def mask_more(
    message: Mapping[str, Any], inputs: Sequence[int], media: Sequence[int], limit: int
) -> tuple[dict[str, Any], int, int] | None:
    """``message`` with the large input fields of its ``tool_use`` blocks ``inputs`` and
    its image and document blocks ``media`` as placeholders, and how many input fields and
    media that masked; None when none is worth it."""
    content = message.get("content")
    blocks = list(content) if isinstance(content, list) else []
    ident = str(message.get("id"))
    inputs_masked, media_masked = mask_blocks(blocks, inputs, media, limit, ident)
    if not (inputs_masked or media_masked):
        return None
    return {**message, "content": blocks}, inputs_masked, media_masked


def mask_blocks(
    blocks: list[Any], inputs: Sequence[int], media: Sequence[int], limit: int, message_id: str
) -> tuple[int, int]:
    """Mask, in place, the large input fields of the ``tool_use`` blocks ``inputs`` and
    the image and document blocks ``media`` of a message's ``blocks``; returns how many
    input fields and media it masked."""
    inputs_masked = media_masked = 0
    for k in inputs:
        block = blocks[k] if k < len(blocks) else None
        if isinstance(block, Mapping) and isinstance(block.get("input"), Mapping):
            new_input, count = mask_input(block["input"], limit, message_id)
            if count:
                blocks[k] = {**block, "input": new_input}
                inputs_masked += count
    for k in media:
        block = blocks[k] if k < len(blocks) else None
        found = measure(block) if isinstance(block, Mapping) else None
        if found is not None:
            placeholder = media_placeholder(found, message_id)
            if worth(placeholder, 4 * found.tokens):
                blocks[k] = {"type": "text", "text": placeholder}
                media_masked += 1
    return inputs_masked, media_masked


def mask_input(
    tool_input: Mapping[str, Any], limit: int, message_id: str
) -> tuple[dict[str, Any], int]:
    """``tool_input`` with each string field longer than ``limit`` characters, where its
    placeholder is shorter, as a placeholder string; and how many it masked. The other
    fields and the order of all stay as they were."""
    new_input = dict(tool_input)
    masked = 0
    for name, value in tool_input.items():
        if not isinstance(value, str) or len(value) <= limit:
            continue
        placeholder = input_placeholder(str(name), value, message_id)
        if worth(placeholder, len(value)):
            new_input[name] = placeholder
            masked += 1
    return new_input, masked


def input_placeholder(field: str, value: str, message_id: str) -> str:
    """What a masked input field says: its name, its size, what the code it holds
    defines and the files it names (a script written by a heredoc, an edit's new text),
    and ``memoryd expand``."""
    notes = ""
    defined = definitions(value, INPUT_NAMES)
    named = named_paths(value)[:INPUT_PATHS]
    notes += f"; defines {', '.join(defined)}" if defined else ""
    notes += f"; names {', '.join(named)}" if named else ""
    return (
        f"{INPUT_PLACEHOLDER_LEAD}{field}, {len(value):,} characters "
        f"(~{estimate_text_tokens(value):,} tokens){notes}; "
        f"the original: memoryd expand WORKSPACE {message_id}]"
    )


def media_placeholder(media: Media, message_id: str) -> str:
    """What a masked image or document says: its kind, size, tokens and ``memoryd
    expand``."""
    return f"[{media.label()}, ~{media.tokens:,} tokens: memoryd expand WORKSPACE {message_id}]"
