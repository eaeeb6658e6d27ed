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


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StreamStopped(
            Failure("malformed answer: a stream line that is not UTF-8", True, bad_answer=True)
        ) from None
