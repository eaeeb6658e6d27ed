"""Reading an OpenAI-compatible chat-completions stream into one answer (pure over the
response's bytes; docs/design.md#openai-compatible).

The events are ``chat.completion.chunk`` objects (``data: {...}``), ending with ``data:
[DONE]``; an error may arrive as ``data: {"error": ...}`` or as an ``error`` event (LM
Studio), after HTTP 200. What the answer means (a summary, a cut, an overflow) is the
backend's to judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memoryd.llm.completion import AnswerGuard
from memoryd.llm.sse import StreamStopped, json_events, usage_count


@dataclass(frozen=True, slots=True)
class Streamed:
    """What a stream said: the text, how it finished (None: it did not say), the usage,
    and the error event that ended it, if one did."""

    text: str
    finish: str | None
    refusal: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    model: str | None
    error: Mapping[str, Any] | None = None


def read_stream(response: Any, guard: AnswerGuard) -> Streamed:
    """The text, usage and finish of a streamed answer, read within ``guard``'s bounds
    (:func:`~memoryd.llm.sse.json_events`: raises StreamStopped past them, or for what is
    no stream of JSON objects)."""
    texts: list[str] = []
    refusal = False
    finish: str | None = None
    usage: Mapping[str, Any] = {}
    model: str | None = None
    for event, chunk in json_events(response, guard, "chat.completion", end="[DONE]"):
        if event.name == "error" or "error" in chunk:
            return Streamed("".join(texts), finish, refusal, None, None, model, error=chunk)
        model = chunk.get("model") if isinstance(chunk.get("model"), str) else model
        if isinstance(chunk.get("usage"), Mapping):
            usage = chunk["usage"]
        added = 0
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping):
                continue
            delta = choice.get("delta")
            delta = delta if isinstance(delta, Mapping) else {}
            content = delta.get("content")
            if isinstance(content, str):
                texts.append(content)
                added += len(content)
            refusal = refusal or bool(delta.get("refusal"))
            reason = choice.get("finish_reason")
            finish = reason if isinstance(reason, str) and reason else finish
        stop = guard.check(added)
        if stop is not None:
            raise StreamStopped(stop)
    return Streamed(
        text="".join(texts),
        finish=finish,
        refusal=refusal,
        prompt_tokens=usage_count(usage.get("prompt_tokens")),
        completion_tokens=usage_count(usage.get("completion_tokens")),
        model=model or None,
    )
