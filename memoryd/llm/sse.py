"""Reading a server-sent event stream within bounds (pure over the bytes it is given;
docs/design.md#summarizers).

Both LLM backends stream their answers. An SDK's own stream reader hands back events only,
and skips some (Anthropic's ``ping``): a server that sends nothing else, or that trickles
the bytes of one event, would keep a call waiting past its deadline. This reader sees
every chunk of bytes as it arrives, so the :class:`~memoryd.llm.completion.AnswerGuard`
is asked at each one: the call's deadline, and a bound on the bytes read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from memoryd import strict_json
from memoryd.llm.completion import AnswerGuard, Failure


class StreamStopped(Exception):
    """Reading stopped: ``failure`` says why (the deadline, a bound, bytes not UTF-8)."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.reason)
        self.failure = failure


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its name (None when the stream names none) and its data lines joined."""

    name: str | None
    data: str


def sse_events(chunks: Iterable[bytes], guard: AnswerGuard) -> Iterator[Event]:
    """The events of an SSE stream arriving as ``chunks``; raises StreamStopped when the
    guard stops the reading (checked at every chunk, before it is parsed)."""
    buffer = b""
    name: str | None = None
    data: list[str] = []
    for chunk in chunks:
        stop = guard.check_bytes(len(chunk))
        if stop is not None:
            raise StreamStopped(stop)
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for raw in lines:
            line = _text(raw.rstrip(b"\r"))
            if not line:
                if data:
                    yield Event(name, "\n".join(data))
                name, data = None, []
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
    last = _text(buffer.rstrip(b"\r"))
    if last.startswith("data:"):
        data.append(last[5:].removeprefix(" "))
    if data:
        yield Event(name, "\n".join(data))


def json_events(
    response: Any, guard: AnswerGuard, expected: str, end: str | None = None
) -> Iterator[tuple[Event, dict[str, Any]]]:
    """The events of a streamed answer (an HTTP response), each with its data as a JSON
    object, up to an event whose data is ``end``. Raises StreamStopped when the response
    is no stream at all (naming what came instead: ``expected`` is the kind of a plain
    answer), when an event is no JSON object, and when the guard stops the reading."""
    content_type = str(response.headers.get("content-type", ""))
    if not content_type.startswith("text/event-stream"):
        body, more = read_bounded(response.iter_bytes(), guard.max_chars)
        raise StreamStopped(not_a_stream(content_type, body, more, expected))
    for event in sse_events(response.iter_bytes(), guard):
        if end is not None and event.data.strip() == end:
            return
        try:
            data = strict_json.loads(event.data)
        except ValueError:
            raise StreamStopped(
                Failure("malformed answer: a stream event that is not JSON", True, True)
            ) from None
        if not isinstance(data, dict):
            raise StreamStopped(
                Failure("malformed answer: a stream event that is no object", True, True)
            )
        yield event, data


def usage_count(value: object) -> int | None:
    """A token count of a stream's usage, or None (absent, or not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def not_a_stream(content_type: str, body: bytes, truncated: bool, expected: str) -> Failure:
    """The failure naming what a server sent instead of a stream: its content type, its
    size, and whether it is JSON (and which kind: an error, or ``expected``, a plain answer
    to a request that asked for a stream). Never the body's text."""
    kind = content_type.split(";", 1)[0].strip() or "no content type"
    size = f"{len(body):,}{'+' if truncated else ''} bytes"
    try:
        value = strict_json.loads(body) if not truncated else None
    except ValueError:
        value = None
    if isinstance(value, dict) and value.get("object", value.get("type")) == expected:
        what = f"a plain {expected} (JSON, {size}) instead of a stream"
    elif isinstance(value, dict) and "error" in value:
        what = f"an error object (JSON, {size}) instead of a stream"
    elif value is not None:
        what = f"JSON that is no {expected} ({size}) instead of a stream"
    else:
        what = f"{size} of {kind} that is not JSON, instead of a stream"
    return Failure(f"malformed answer: {what}", retryable=True, bad_answer=True)


def read_bounded(chunks: Iterable[bytes], limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of ``chunks``, and whether there was more."""
    data = bytearray()
    for chunk in chunks:
        data += chunk
        if len(data) > limit:
            return bytes(data[:limit]), True
    return bytes(data), False


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamStopped(
            Failure("malformed answer: a stream line that is not UTF-8", True, bad_answer=True)
        ) from None
