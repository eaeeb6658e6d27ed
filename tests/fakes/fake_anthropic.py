"""A fake Anthropic Messages API server on 127.0.0.1, scripted reply by reply.

It speaks enough of the real wire format for the official SDK to talk to it:
``POST /v1/messages`` answers a Message (streamed as the API's events when the request
asks for ``stream``; or an error in the API's error shape) and
``POST /v1/messages/count_tokens`` answers ``{"input_tokens": n}``. Every request is
recorded (path, lower-cased headers, JSON body) for assertions. A request the real API
refuses is refused the same way, with a 400 ``invalid_request_error`` naming the rule
(:func:`api_rules.request_problem`, which tests import from there), the rules of extended
thinking included; with ``thinking`` on, an answer starts with a signed thinking block.

In tests::

    with FakeAnthropic() as server:
        server.push(Reply.error(429, retry_after=1), Reply.ok("a summary"))
        ...  # point a client at server.base_url

As a process (end-to-end tests, benchmarks)::

    python tests/fakes/fake_anthropic.py --port 0 --latency 0.2 --echo

prints its base URL as the first line of stdout and serves until SIGTERM or SIGINT.

Standard library only, so it runs in any interpreter without the project installed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from api_rules import request_problem, thinking_enabled

TextSource = str | Callable[[Mapping[str, Any]], str]
ToolSource = Callable[[Mapping[str, Any]], tuple[str, dict[str, Any]]]

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}

_TRANSCRIPT = re.compile(r"<transcript>(.*?)</transcript>", re.DOTALL)


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build it with the class methods, not the constructor."""

    kind: str
    text: TextSource = ""
    status: int = 200
    error_type: str | None = None
    retry_after: str | None = None
    stop_reason: str | None = "end_turn"
    input_tokens: int | None = None
    output_tokens: int | None = None
    delay: float = 0.0
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    tool: ToolSource | None = None

    @classmethod
    def ok(
        cls,
        text: TextSource = "A fake summary.",
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        stop_reason: str = "end_turn",
        delay: float = 0,
    ) -> Reply:
        """A Message whose one text block is ``text`` (or ``text(request_json)``).

        Token counts default to an estimate from the request and the answer.
        """
        return cls(
            kind="message",
            text=text,
            stop_reason=stop_reason,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            delay=delay,
        )

    @classmethod
    def tool_call(cls, tool: ToolSource, text: str = "Running the next command.") -> Reply:
        """A Message with a text block and one ``tool_use`` block, ``stop_reason:
        "tool_use"``: ``tool(request_json)`` gives the tool's name and input (an agent's
        tool loop)."""
        return cls(kind="message", text=text, stop_reason="tool_use", tool=tool)

    @classmethod
    def echo(cls, delay: float = 0) -> Reply:
        """A Message whose text is :func:`echo_summary` of the request."""
        return cls.ok(echo_summary, delay=delay)

    @classmethod
    def lossy(cls, drop: float, delay: float = 0) -> Reply:
        """A summary that keeps the transcript's sentences but drops the share ``drop`` of
        those carrying a detail (see :func:`lossy_summary`); deterministic."""
        return cls.ok(lambda request: lossy_summary(request, drop), delay=delay)

    @classmethod
    def fluent(cls, delay: float = 0) -> Reply:
        """A fluent summary that keeps no detail at all, whatever it is asked."""
        return cls.ok(FLUENT_SUMMARY, delay=delay)

    @classmethod
    def error(
        cls,
        status: int,
        error_type: str | None = None,
        retry_after: float | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """An error in the API's shape; ``error_type`` defaults to the API's type for ``status``.

        ``retry_after`` is sent as the ``retry-after`` header (seconds, or an HTTP date string).
        """
        if retry_after is not None and not isinstance(retry_after, str):
            retry_after = f"{retry_after:g}"
        return cls(
            kind="error",
            status=status,
            error_type=error_type or ERROR_TYPES.get(status, "api_error"),
            retry_after=retry_after,
            headers=dict(headers or {}),
        )

    @classmethod
    def hang(cls, seconds: float) -> Reply:
        """Send nothing for ``seconds`` (cut short when the server stops), then close."""
        return cls(kind="hang", delay=seconds)

    @classmethod
    def empty(cls) -> Reply:
        """A well-formed Message with ``content: []``."""
        return cls(kind="message", text="", stop_reason="end_turn")

    @classmethod
    def refusal(cls, text: str = "") -> Reply:
        """A Message with ``stop_reason: "refusal"`` (empty content unless ``text``)."""
        return cls(kind="message", text=text, stop_reason="refusal")

    @classmethod
    def malformed(cls) -> Reply:
        """HTTP 200, ``application/json``, with a body that is not JSON at all."""
        return cls(kind="raw", body=b'{"type": "message", "content": [{"type": "te')

    @classmethod
    def plain(cls, text: str = "A fake summary.") -> Reply:
        """A plain Message as JSON, even to a request that asked for a stream (a proxy
        that drops ``stream`` does this)."""
        return cls(kind="plain", text=text, stop_reason="end_turn")

    @classmethod
    def trickle(cls, interval: float) -> Reply:
        """To a stream request: ``message_start``, then a ``ping`` every ``interval``
        seconds, never finishing (until the client leaves or the server stops)."""
        return cls(kind="trickle", delay=interval)

    @classmethod
    def cut(cls, text: str = "- partial summary that stops") -> Reply:
        """To a stream request: ``text`` streamed, then the connection closed without
        ``message_delta`` (no stop reason) and without ``message_stop``."""
        return cls(kind="cut", text=text)

    @classmethod
    def runaway(cls, chars: int = 8_000_000) -> Reply:
        """To a stream request: ``chars`` characters whatever ``max_tokens`` says, then
        ``end_turn``."""
        return cls(kind="runaway", text="runaway", body=str(chars).encode())

    @classmethod
    def not_a_message(cls) -> Reply:
        """HTTP 200 with valid JSON that is not a Message."""
        return cls(kind="raw", body=b'{"hello": "world", "content": "not a list"}')


@dataclass(frozen=True)
class RecordedRequest:
    """What the server received: path, lower-cased headers and the decoded JSON body."""

    path: str
    headers: Mapping[str, str]
    body: Any
    received_at: float

    @property
    def system(self) -> str:
        """The system prompt (a string, or the text of its blocks)."""
        system = self.body.get("system", "") if isinstance(self.body, Mapping) else ""
        return system if isinstance(system, str) else _blocks_text(system)

    @property
    def user_text(self) -> str:
        """The text of every message of the request, in order."""
        messages = self.body.get("messages") if isinstance(self.body, Mapping) else None
        if not isinstance(messages, list):
            return ""
        return "\n".join(
            _content_text(m.get("content", "")) for m in messages if isinstance(m, Mapping)
        )

    @property
    def prompt_text(self) -> str:
        """The system prompt and the messages' text: everything the model was told."""
        return f"{self.system}\n{self.user_text}"


def _content_text(content: object) -> str:
    """A message's content as text: the string, or the text of its blocks."""
    return content if isinstance(content, str) else _blocks_text(content)


def _blocks_text(blocks: object) -> str:
    if not isinstance(blocks, list):
        return ""
    return "\n".join(str(block.get("text", "")) for block in blocks if isinstance(block, Mapping))


def echo_summary(request_json: Mapping[str, Any]) -> str:
    """A deterministic short digest of the transcript in the request's last user message."""
    transcript = _request_text(request_json)
    found = _TRANSCRIPT.search(transcript)
    if found:
        transcript = found.group(1)
    transcript = transcript.strip()
    words = " ".join(transcript.split()[:3])
    return f"Summary of {len(transcript)} characters of transcript. It begins: {words}"


FLUENT_SUMMARY = (
    "The user and the assistant talked through the project at length. They reviewed how the "
    "work was going, weighed a few options, agreed on a general direction and planned the "
    "next steps together, in a friendly and constructive tone."
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_DETAIL = re.compile(
    r"\d|/|`|#|https?:|\.[a-z]{1,4}\b|\b(decided|agreed|chose|prefer|always|never|need to|"
    r"must|todo|action item|follow[- ]up|next step|deadline)\b",
    re.IGNORECASE,
)
_MISSING = re.compile(r"<missing_details>(.*?)</missing_details>", re.DOTALL)


def _dropped(sentence: str, drop: float) -> bool:
    """Whether the lossy mode drops this detail: a stable hash, so a run is repeatable."""
    digest = int.from_bytes(hashlib.sha256(sentence.encode()).digest()[:4], "big")
    return digest / 2**32 < drop


def lossy_summary(request_json: Mapping[str, Any], drop: float) -> str:
    """A summary that drops the share ``drop`` of the details it is shown.

    For a summary request: the transcript's sentences, minus ``drop`` of those carrying a
    detail (a digit, a path, a backtick, a URL, a decision, a preference, an action
    item), cut to the request's ``max_tokens``. For a repair (a follow-up listing missing
    details): the summary it gave before plus the listed details, minus the same share.
    """
    budget = max(1, int(request_json.get("max_tokens", 1024))) * 4
    messages = request_json.get("messages") or []
    repair = _MISSING.search(_request_text(request_json)) if len(messages) > 1 else None
    if repair:
        before = _content_text(messages[-2].get("content", ""))
        listed = [line[2:] for line in repair.group(1).strip().splitlines() if line[:2] == "- "]
        kept = [item for item in listed if not _dropped(item, drop)]
        return _cut("\n".join([before, *kept]), budget)
    first = _content_text(messages[0].get("content", "")) if messages else ""
    found = _TRANSCRIPT.search(first)
    transcript = found.group(1) if found else first
    kept = []
    for sentence in (s.strip() for s in _SENTENCE.split(transcript)):
        sentence = re.sub(r"^\[[a-z_]+(?: #[^\]\s]+)?\]\s*", "", sentence)
        if not sentence or (_DETAIL.search(sentence) and _dropped(sentence, drop)):
            continue
        kept.append(sentence)
    return _cut(" ".join(kept) or FLUENT_SUMMARY, budget)


def _cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(1, chars - 1)]


def _request_text(request_json: Mapping[str, Any]) -> str:
    messages = request_json.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], Mapping):
        return ""
    return _content_text(messages[-1].get("content", ""))


def _estimate_tokens(value: object) -> int:
    return max(1, len(json.dumps(value, ensure_ascii=False)) // 4)


def _prompt_units(request_json: Mapping[str, Any]) -> list[Any]:
    """The request's prompt as a flat list: system blocks, then each message's blocks."""
    units: list[Any] = []
    system = request_json.get("system")
    if isinstance(system, list):
        units.extend(system)
    elif system:
        units.append(system)
    for message in request_json.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):
            units.extend({"role": message.get("role"), **b} for b in content if isinstance(b, dict))
        else:
            units.append({"role": message.get("role"), "text": content})
    return units


def _marked(unit: Any) -> bool:
    return isinstance(unit, dict) and isinstance(unit.get("cache_control"), dict)


@dataclass(frozen=True)
class CacheUsage:
    """How the input tokens of one request split: uncached, written to and read from the cache."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: tests assert on recorded requests, not on an access log."""

    def handle(self) -> None:
        # Each stream event leaves at once, as from the real API (no Nagle delay).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.track(self.connection, add=True)
        try:
            super().handle()
        except (ConnectionError, TimeoutError, OSError):
            # The client went away (timeout, retry, shutdown): nothing to answer.
            self.close_connection = True
        finally:
            self.server.track(self.connection, add=False)

    def do_GET(self) -> None:
        self._send_error(404, "not_found_error", f"no route for GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = None
        fake = self.server.fake
        fake.record(
            RecordedRequest(self.path, _lower(self.headers.items()), body, time.monotonic())
        )
        route = self.path.split("?", 1)[0]
        if route not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._send_error(404, "not_found_error", f"no route for POST {route}")
            return
        if fake.api_key is not None and not _has_key(self.headers, fake.api_key):
            self._send_error(401, "authentication_error", "invalid x-api-key")
            return
        problem = request_problem(body, count_only=route.endswith("count_tokens"))
        if problem:
            self._send_error(400, "invalid_request_error", problem)
            return
        if route.endswith("count_tokens"):
            tokens = _estimate_tokens([body.get("system"), body.get("messages")])
            self._send_json(200, {"input_tokens": tokens})
            return
        self._answer(fake.next_reply(), body)

    def _answer(self, reply: Reply, request_json: dict[str, Any]) -> None:
        fake = self.server.fake
        if fake.latency and fake.wait(fake.latency):
            return
        if reply.delay and fake.wait(reply.delay):
            return
        if reply.kind == "hang":
            self.close_connection = True
            return
        if reply.kind == "trickle":
            self._start_stream()
            self._event("message_start", {"type": "message_start", "message": _message_shell()})
            while not fake.wait(reply.delay):
                self._event("ping", {"type": "ping"})
            return
        if reply.kind == "error":
            extra = dict(reply.headers)
            if reply.retry_after is not None:
                extra["retry-after"] = reply.retry_after
            self._send_error(reply.status, reply.error_type or "api_error", "scripted", extra)
            return
        if reply.kind == "raw":
            self._send_bytes(200, reply.body, {})
            return
        text = reply.text(request_json) if callable(reply.text) else reply.text
        cache = fake.cache_usage(request_json)
        usage: dict[str, int] = {
            "input_tokens": (
                reply.input_tokens
                if reply.input_tokens is not None
                else cache.input_tokens
                if cache is not None
                else _estimate_tokens([request_json.get("system"), request_json["messages"]])
            ),
            "output_tokens": (
                reply.output_tokens if reply.output_tokens is not None else max(1, len(text) // 4)
            ),
        }
        if cache is not None:
            usage["cache_creation_input_tokens"] = cache.cache_creation_input_tokens
            usage["cache_read_input_tokens"] = cache.cache_read_input_tokens
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        if thinking_enabled(request_json):  # as the real API: the answer starts with it
            thought = f"Thinking about step {len(request_json['messages'])}."
            signature = f"EqQBfake{fake.next_id():06d}=="
            content.insert(0, {"type": "thinking", "thinking": thought, "signature": signature})
        if reply.tool is not None:
            name, tool_input = reply.tool(request_json)
            call_id = f"toolu_fake_{fake.next_id()}"
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": tool_input})
        message = {
            "id": f"msg_fake_{fake.next_id()}",
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": request_json["model"],
            "stop_reason": reply.stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        if request_json.get("stream") is True and reply.kind != "plain":
            self._stream(message, reply)
            return
        self._send_json(200, message)

    def _stream(self, message: dict[str, Any], reply: Reply) -> None:
        """The Message as the API streams it: message_start, a content block per block
        (text in deltas), message_delta with the stop reason and output tokens,
        message_stop; a ``cut`` reply stops after the text, a ``runaway`` one goes on."""
        self._start_stream()
        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage}}
        start["usage"]["output_tokens"] = 1
        self._event("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(message["content"]):
            if block["type"] != "text":
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
                self._event("content_block_stop", {"type": "content_block_stop", "index": index})
                continue
            self._event(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            text = block["text"]
            pieces = [text[i : i + 16] for i in range(0, len(text), 16)]
            if reply.kind == "runaway":
                pieces = ["word " * 800] * (int(reply.body) // 4000)
            for piece in pieces:
                delta = {"type": "text_delta", "text": piece}
                self._event(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            if reply.kind == "cut":
                return
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        self._event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        )
        self._event("message_stop", {"type": "message_stop"})

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _event(self, name: str, payload: object) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
        self.wfile.flush()

    def _send_error(
        self, status: int, error_type: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        payload = {"type": "error", "error": {"type": error_type, "message": message}}
        self._send_json(status, payload, headers)

    def _send_json(
        self, status: int, payload: object, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send_bytes(status, json.dumps(payload).encode(), headers or {})

    def _send_bytes(self, status: int, data: bytes, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{self.server.fake.next_id()}")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def _message_shell() -> dict[str, Any]:
    """The ``message`` of a ``message_start`` event before any content."""
    return {
        "id": "msg_fake_stream",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-fake",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _lower(items: Any) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in items}


def _has_key(headers: Any, api_key: str) -> bool:
    return bool(
        headers.get("x-api-key") == api_key or headers.get("authorization") == f"Bearer {api_key}"
    )


class _Server(ThreadingHTTPServer):
    # Handler threads are joined at close; stop() first unblocks every one of them.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], fake: FakeAnthropic) -> None:
        self.fake = fake
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def track(self, connection: socket.socket, add: bool) -> None:
        with self._connections_lock:
            if add:
                self._connections.add(connection)
            else:
                self._connections.discard(connection)

    def cut_connections(self) -> None:
        """Shut down every open connection so idle keep-alive handlers return."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Client disconnects are routine here; anything else still reaches stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class FakeAnthropic:
    """The fake server: ``start()``/``stop()`` or a ``with`` block; ``base_url`` once started.

    ``latency`` is added before every ``/v1/messages`` answer; ``default`` answers when the
    queue of pushed replies is empty; ``api_key``, when given, is required (else 401).

    Prompt caching as the API does it: a prefix that ends at a block marked with
    ``cache_control`` and holds at least ``cache_min_tokens`` is written to the cache the
    first time and read from it when a later request repeats it; the usage then reports
    ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` beside the uncached
    ``input_tokens`` (estimated as JSON characters / 4).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
        default: Reply | None = None,
        api_key: str | None = None,
        cache_min_tokens: int = 1024,
    ) -> None:
        self.cache_min_tokens = cache_min_tokens
        self._cache: set[str] = set()
        self.host = host
        self.port = port
        self.latency = latency
        self.api_key = api_key
        self._default = default or Reply.ok()
        self._replies: deque[Reply] = deque()
        self._requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._counter = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, to pass as the client's ``base_url``."""
        if self._server is None:
            raise RuntimeError("the fake Anthropic server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def message_requests(self) -> list[RecordedRequest]:
        """Only the ``POST /v1/messages`` requests."""
        return [r for r in self.requests if r.path.split("?", 1)[0] == "/v1/messages"]

    def push(self, *replies: Reply) -> None:
        """Queue replies; each ``/v1/messages`` request consumes one."""
        with self._lock:
            self._replies.extend(replies)

    def set_default(self, reply: Reply) -> None:
        """The reply used once the queue is empty."""
        with self._lock:
            self._default = reply

    def start(self) -> FakeAnthropic:
        """Bind and serve in a background thread."""
        if self._server is not None:
            raise RuntimeError("already started")
        self._stopping.clear()
        self._server = _Server((self.host, self.port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-anthropic",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, end hangs and keep-alive connections, join every thread."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def cache_usage(self, request_json: Mapping[str, Any]) -> CacheUsage | None:
        """The cache's part in a request's input tokens; None when nothing is marked."""
        units = _prompt_units(request_json)
        if not any(_marked(unit) for unit in units):
            return None
        total = _estimate_tokens(units)
        read = created = 0
        with self._lock:
            for end, unit in enumerate(units, start=1):
                if not _marked(unit):
                    continue
                tokens = _estimate_tokens(units[:end])
                if tokens < self.cache_min_tokens:
                    continue
                key = hashlib.sha256(json.dumps(units[:end], sort_keys=True).encode()).hexdigest()
                if key in self._cache:
                    read = tokens
                else:
                    self._cache.add(key)
                    created = tokens
        created = max(0, created - read)
        return CacheUsage(max(0, total - read - created), created, read)

    def next_reply(self) -> Reply:
        with self._lock:
            return self._replies.popleft() if self._replies else self._default

    def next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def wait(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when cut short because the server is stopping."""
        return self._stopping.wait(seconds)


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; the first stdout line is the base URL."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    answer = parser.add_mutually_exclusive_group()
    answer.add_argument("--text", default="A fake summary.", help="the text of every answer")
    answer.add_argument("--echo", action="store_true", help="answer a digest of the transcript")
    answer.add_argument(
        "--lossy", type=float, metavar="SHARE", help="drop this share of the details shown"
    )
    answer.add_argument("--fluent", action="store_true", help="a fluent summary with no detail")
    args = parser.parse_args(argv)

    stop_signals = {signal.SIGTERM, signal.SIGINT}
    # Blocked before the server thread starts, so that thread inherits the mask and the
    # signals wait for sigwait() below instead of interrupting a handler.
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    default = (
        Reply.echo()
        if args.echo
        else Reply.lossy(args.lossy)
        if args.lossy is not None
        else Reply.fluent()
        if args.fluent
        else Reply.ok(args.text)
    )
    server = FakeAnthropic(host=args.host, port=args.port, latency=args.latency, default=default)
    server.start()
    try:
        print(server.base_url, flush=True)
        signal.sigwait(stop_signals)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
