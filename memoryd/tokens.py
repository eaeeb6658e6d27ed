"""Token estimates: about characters / 4 of a message's content, images and documents as
the Messages API counts them (:mod:`memoryd.media`), plus a constant; and the tokens an
LLM call used, as the API reported them.

See docs/design.md#counting.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from memoryd.media import measure
from memoryd.value import Value

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Final

MESSAGE_OVERHEAD = 4
"""Tokens added per message for its role and framing."""

CALIBRATION_BOUNDS = (0.5, 2.0)
"""A workspace's calibration factor never leaves these bounds."""


def content_chars(content: Any) -> int:
    """Characters of a message's content as the estimate counts them: text as it is, an
    image or document as four characters a token of its API cost (:func:`memoryd.media.
    measure`; its base64 is not text the model reads), in a tool result too, other blocks
    as their JSON."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(_block_chars(block) for block in content)
    if content is None:
        return 0
    return _json_chars(content)


def _block_chars(block: Any) -> int:
    if not isinstance(block, Mapping):
        return _json_chars(block)
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        return len(text) if isinstance(text, str) else 0
    media = measure(block)
    if media is not None:
        return 4 * media.tokens
    inner = block.get("content")
    if kind == "tool_result" and isinstance(inner, list):
        found = [measure(item) if isinstance(item, Mapping) else None for item in inner]
        if any(found):  # its media at their cost, the rest as its JSON (as any block)
            rest = [{} if media else item for item, media in zip(inner, found, strict=True)]
            costs = sum(4 * media.tokens for media in found if media)
            return _json_chars({**block, "content": rest}) + costs
    return _json_chars(block)


def _json_chars(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def estimate_message_tokens(message: Mapping[str, Any]) -> int:
    """The estimated tokens of one message (pure)."""
    return (content_chars(message.get("content")) + 3) // 4 + MESSAGE_OVERHEAD


def estimate_text_tokens(text: str) -> int:
    """The estimated tokens of a plain text (pure)."""
    return (len(text) + 3) // 4


def calibrate(previous: float, estimated: int, measured: int) -> float:
    """A new calibration factor from one measurement, smoothed and bounded (pure).

    ``estimated`` is what memoryd guessed for a text, ``measured`` what the API billed.
    """
    if estimated <= 0 or measured <= 0:
        return previous
    low, high = CALIBRATION_BOUNDS
    observed = min(high, max(low, measured / estimated))
    return round(min(high, max(low, 0.7 * previous + 0.3 * observed)), 4)


_USAGE_FIELDS = (
    "calls",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
)


class LLMUsage(Value):
    """What a job asked of the LLM, as the API reported it (zeros for the extractive backend).

    ``input_tokens`` are the uncached input tokens. A value written out rather than a
    dataclass, as :class:`memoryd.workspace.Workspace` (docs/design.md#startup)."""

    __slots__ = _USAGE_FIELDS

    def __init__(
        self,
        calls: int = 0,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cache_read_tokens: int = 0,
        cache_creation_tokens: int = 0,
    ) -> None:
        self.calls: Final = calls
        self.input_tokens: Final = input_tokens
        self.output_tokens: Final = output_tokens
        self.cache_read_tokens: Final = cache_read_tokens
        self.cache_creation_tokens: Final = cache_creation_tokens

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_creation_tokens + other.cache_creation_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_creation_tokens
        )

    def to_record(self) -> dict[str, Any]:
        return dict(zip(_USAGE_FIELDS, self._values(), strict=True))

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> LLMUsage:
        return cls(*(int(record.get(name) or 0) for name in _USAGE_FIELDS))
