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

from memoryd import strict_json
from memoryd.llm.completion import AnswerGuard, Failure, not_a_stream, read_bounded
from memoryd.llm.sse import sse_events


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


def read_stream(response: Any, guard: AnswerGuard) -> Streamed | Failure:
    """The text, usage and finish of a streamed answer, read within ``guard``'s bounds
    (raises StreamStopped past them); a Failure naming what came back when it is no
    stream at all, or an event that is not JSON."""
    content_type = str(response.headers.get("content-type", ""))
    if not content_type.startswith("text/event-stream"):
        body, more = read_bounded(response.iter_bytes(), guard.max_chars)
        return not_a_stream(content_type, body, more, "chat.completion")
    texts: list[str] = []
    refusal = False
    finish: str | None = None
    usage: Mapping[str, Any] = {}
    model: str | None = None
    for event in sse_events(response.iter_bytes(), guard):
        if event.data.strip() == "[DONE]":
            break
        try:
            chunk = strict_json.loads(event.data)
        except ValueError:
            return Failure("malformed answer: a stream event that is not JSON", True, True)
        if not isinstance(chunk, Mapping):
            return Failure("malformed answer: a stream event that is no object", True, True)
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
            return stop
    return Streamed(
        text="".join(texts),
        finish=finish,
        refusal=refusal,
        prompt_tokens=_count(usage.get("prompt_tokens")),
        completion_tokens=_count(usage.get("completion_tokens")),
        model=model or None,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
