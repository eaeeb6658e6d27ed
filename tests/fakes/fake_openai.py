"""A fake OpenAI-compatible chat-completions server on 127.0.0.1, with the request rules and
the failures of vLLM, llama.cpp's llama-server, Ollama and LM Studio.

``POST /v1/chat/completions`` answers a ChatCompletion, or with ``stream: true`` a stream
of ``chat.completion.chunk`` events ending in ``data: [DONE]`` (the usage in a last chunk
only with ``stream_options.include_usage``); ``GET /v1/models`` lists the one model.
Every request is recorded (path, lower-cased headers, JSON body). A request a strict
server refuses is refused with 400 naming the rule: an unknown model (404 as vLLM),
messages that are not system-first then alternating user/assistant ending with a user
turn (what open models' chat templates raise on), a field other than ``role`` and
``content`` in a message, ``stream_options`` without ``stream``, a bad ``max_tokens``.

The context: ``n_ctx`` tokens (estimated as characters / 4 times ``token_ratio``, plus a
few per message). A prompt that does not fit, with ``max_tokens`` for vLLM and without
for the others, fails in ``flavour``'s way (and a llama.cpp answer that runs into the end
of the context stops there, HTTP 200 with ``finish_reason: "length"``):

- ``vllm``: 400 ``{"error": {"message": "This model's maximum context length is N
  tokens…", "type": "BadRequestError", …}}``; ``vllm-old``: the same as ``{"object":
  "error", …}``;
- ``llamacpp``: 400 ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``;
- ``lmstudio``: HTTP 200, then an SSE ``error`` event "…context length of only N tokens…";
- ``ollama``: no error: the prompt is cut to its last ``n_ctx`` tokens, silently;
- ``generic``: 400 "context length exceeded", no number.

In tests::

    with FakeOpenAI(flavour="llamacpp", n_ctx=8192) as server:
        server.push(Reply.loading(), Reply.ok("a summary"))
        ...  # point a client at server.base_url (it ends in /v1)

As a process (benchmarks): ``python tests/fakes/fake_openai.py --port 0 --latency 0.2 --echo``
prints its base URL as the first line of stdout and serves until SIGTERM or SIGINT.

Standard library only (and tests/fakes/fake_anthropic.py, for its server plumbing and digest).
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from fake_anthropic import RecordedRequest, TextSource, _lower, _Server, echo_summary

FLAVOURS = ("vllm", "vllm-old", "llamacpp", "lmstudio", "ollama", "generic")
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build it with the class methods."""

    kind: str
    text: TextSource = ""
    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    finish: str = "stop"
    interval: float = 0.0

    @classmethod
    def ok(cls, text: TextSource = "A fake summary.", delay: float = 0) -> Reply:
        """An answer whose text is ``text`` (or ``text(request_json)``)."""
        return cls(kind="answer", text=text, delay=delay)

    @classmethod
    def length(cls, text: str = "A summary cut at its budget") -> Reply:
        """An answer that ends with ``finish_reason: "length"`` (cut at ``max_tokens``)."""
        return cls(kind="answer", text=text, finish="length")

    @classmethod
    def cache_full(cls) -> Reply:
        """llama-server when the slots' shared cache is full: HTTP 200, then an error event
        ``{"code": 500, "message": "Context size has been exceeded.", "type":
        "server_error"}`` (no number: the context itself is not too small)."""
        body = {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}
        return cls(kind="stream_error", body=body)

    @classmethod
    def trickle(cls, interval: float) -> Reply:
        """HTTP 200 and a stream that sends an empty chunk every ``interval`` seconds and
        never finishes (until the client leaves or the server stops)."""
        return cls(kind="trickle", interval=interval)

    @classmethod
    def cut(cls, text: str = "- partial summary that stops") -> Reply:
        """A stream of ``text`` that ends (the connection closed) without a finish reason
        and without ``[DONE]``."""
        return cls(kind="cut", text=text)

    @classmethod
    def runaway(cls, chars: int = 8_000_000) -> Reply:
        """A stream of ``chars`` characters whatever ``max_tokens`` says, then a finish."""
        return cls(kind="runaway", body=chars)

    @classmethod
    def plain(cls, text: str = "A fake summary.") -> Reply:
        """A plain JSON chat completion (not a stream), whatever the request asked."""
        return cls(kind="plain", text=text)

    @classmethod
    def malformed(cls) -> Reply:
        """HTTP 200, ``application/json``, with a body that is not JSON at all."""
        return cls(kind="raw", body=b'{"id": "chatcmpl-1", "choices": [{"mess')

    @classmethod
    def echo(cls, delay: float = 0) -> Reply:
        """An answer whose text is the digest of the request's transcript."""
        return cls.ok(echo_summary, delay=delay)

    @classmethod
    def error(cls, status: int, body: Any = None, retry_after: float | None = None) -> Reply:
        """An HTTP error with ``body`` (default ``{"error": {...}}`` naming the status)."""
        headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        default = {"error": {"message": "scripted", "type": "server_error", "code": status}}
        return cls(kind="error", status=status, body=body or default, headers=headers)

    @classmethod
    def loading(cls, retry_after: float | None = None) -> Reply:
        """llama.cpp while the model loads: 503 ``unavailable_error``."""
        body = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        return cls.error(503, body, retry_after)

    @classmethod
    def empty(cls) -> Reply:
        """A well-formed answer with no text at all."""
        return cls(kind="answer", text="")

    @classmethod
    def refusal(cls) -> Reply:
        """An answer with ``refusal`` text and no content."""
        return cls(kind="refusal")

    @classmethod
    def stream_error(cls, body: Any = None) -> Reply:
        """HTTP 200, a first chunk of text, then ``data: {"error": ...}``."""
        default = {"message": "scripted failure", "type": "server_error"}
        return cls(kind="stream_error", body=body or default)

    @classmethod
    def hang(cls, seconds: float) -> Reply:
        """Send nothing for ``seconds`` (cut short when the server stops), then close."""
        return cls(kind="hang", delay=seconds)


def request_problem(body: Any, model: str) -> tuple[int, str] | None:
    """(status, message) of the rule ``body`` breaks, or None for a valid request."""
    if not isinstance(body, Mapping):
        return 400, "the body must be a JSON object"
    if body.get("model") != model:
        return 404, f"The model `{body.get('model')}` does not exist."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return 400, "messages: must be a non-empty list"
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or set(message) - {"role", "content"}:
            return 400, f"messages[{index}]: only role and content are allowed"
        if message.get("role") not in ROLES:
            return 400, f"messages[{index}]: unknown role {message.get('role')!r}"
        if not isinstance(message.get("content"), str) or not message["content"]:
            return 400, f"messages[{index}]: content must be a non-empty string"
    turns = messages[1:] if messages[0]["role"] == "system" else messages
    for index, message in enumerate(turns):
        if message["role"] != ("user", "assistant")[index % 2]:
            return 400, "Conversation roles must alternate user/assistant/user/assistant/..."
    if not turns or turns[-1]["role"] != "user":
        return 400, "the last message must be a user turn"
    max_tokens = body.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        return 400, "max_tokens must be a positive integer"
    if "stream_options" in body and body.get("stream") is not True:
        return 400, "Stream options can only be defined when `stream=True`."
    return None


def _estimate(text: str, ratio: float) -> int:
    return max(1, round(len(text) / 4 * ratio))


class FakeOpenAI:
    """The fake server: ``start()``/``stop()`` or a ``with`` block; ``base_url`` once started.

    ``latency`` is added before every answer; ``default`` answers when the queue of pushed
    replies is empty; ``api_key``, when given, is required (else 401, as vLLM's
    ``--api-key``); ``n_ctx`` 0 means no context limit; ``reports_prompt_tokens``, when
    given, is the ``prompt_tokens`` of every answer (a server that under-counts).
    """

    def __init__(
        self,
        flavour: str = "vllm",
        n_ctx: int = 0,
        model: str = "local-model",
        latency: float = 0.0,
        default: Reply | None = None,
        api_key: str | None = None,
        token_ratio: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        reports_prompt_tokens: int | None = None,
    ) -> None:
        if flavour not in FLAVOURS:
            raise ValueError(f"flavour must be one of {FLAVOURS}")
        self.flavour = flavour
        self.n_ctx = n_ctx
        self.model = model
        self.latency = latency
        self.api_key = api_key
        self.token_ratio = token_ratio
        self.reports_prompt_tokens = reports_prompt_tokens
        self.host, self.port = host, port
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
        """``http://127.0.0.1:<port>/v1``, to pass as the client's ``base_url``."""
        if self._server is None:
            raise RuntimeError("the fake OpenAI server is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every chat-completions request received so far, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    def set_default(self, reply: Reply) -> None:
        with self._lock:
            self._default = reply

    def start(self) -> FakeOpenAI:
        if self._server is not None:
            raise RuntimeError("already started")
        self._stopping.clear()
        self._server = _Server((self.host, self.port), self)  # type: ignore[arg-type]
        self._server.RequestHandlerClass = _handler_class()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-openai"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._stopping.set()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        thread.join()
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAI:
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

    def next_reply(self) -> Reply:
        with self._lock:
            return self._replies.popleft() if self._replies else self._default

    def next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def wait(self, seconds: float) -> bool:
        return self._stopping.wait(seconds)

    def prompt_tokens(self, body: Mapping[str, Any]) -> int:
        """The server's count of a request's prompt."""
        return sum(_estimate(m["content"], self.token_ratio) + 4 for m in body["messages"])

    def overflow(self, body: Mapping[str, Any], prompt: int) -> tuple[int, Any] | None:
        """(status, body) of this flavour's overflow error, or None when the prompt fits."""
        if not self.n_ctx:
            return None
        asked = body.get("max_tokens") or 0
        needed = prompt + asked if self.flavour.startswith("vllm") else prompt
        if needed <= self.n_ctx or self.flavour == "ollama":
            return None
        if self.flavour.startswith("vllm"):
            message = (
                f"This model's maximum context length is {self.n_ctx} tokens. However, you "
                f"requested {needed} tokens ({prompt} in the messages, {asked} in the "
                "completion). Please reduce the length of the messages or completion."
            )
            error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
            return 400, {"object": "error", **error} if self.flavour == "vllm-old" else {
                "error": error
            }
        if self.flavour == "llamacpp":
            return 400, {
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": prompt,
                    "n_ctx": self.n_ctx,
                }
            }
        if self.flavour == "lmstudio":
            message = (
                f"Trying to keep the first {prompt} tokens when context the overflows. However, "
                f"the model is loaded with context length of only {self.n_ctx} tokens, which "
                "is not enough. Try to load the model with a larger context length, or provide "
                "a shorter input"
            )
            return 200, {"error": {"message": message}}
        return 400, {"error": {"message": "Input is too long: context length exceeded"}}

    def answer_room(self, body: Mapping[str, Any], prompt: int) -> int | None:
        """llama.cpp's room for the answer once the prompt fits (None: unbounded here)."""
        if self.flavour != "llamacpp" or not self.n_ctx or prompt > self.n_ctx:
            return None
        return self.n_ctx - prompt

    def truncated(self, body: dict[str, Any], prompt: int) -> tuple[dict[str, Any], int]:
        """Ollama's silent cut: the request as the model saw it, and its prompt tokens."""
        if self.flavour != "ollama" or not self.n_ctx or prompt <= self.n_ctx:
            return body, prompt
        keep = int(self.n_ctx * 4 / self.token_ratio)
        messages = [dict(m) for m in body["messages"]]
        messages[-1]["content"] = messages[-1]["content"][-keep:]
        return {**body, "messages": messages}, self.n_ctx


def _handler_class() -> type:
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server: Any

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests assert on recorded requests."""

        def handle(self) -> None:
            # As real servers do: each stream event leaves at once, not after the client's
            # delayed ACK of the previous one (Nagle), which would add ~40 ms per event.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.server.track(self.connection, add=True)
            try:
                super().handle()
            except (ConnectionError, TimeoutError, OSError):
                self.close_connection = True
            finally:
                self.server.track(self.connection, add=False)

        def do_GET(self) -> None:
            fake: FakeOpenAI = self.server.fake
            if self.path.split("?", 1)[0] == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
            else:
                self._json(404, {"error": {"message": f"no route for GET {self.path}"}})

        def do_POST(self) -> None:
            fake: FakeOpenAI = self.server.fake
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = None
            if self.path.split("?", 1)[0] != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"no route for POST {self.path}"}})
                return
            fake.record(
                RecordedRequest(self.path, _lower(self.headers.items()), body, time.monotonic())
            )
            if (
                fake.api_key is not None
                and self.headers.get("authorization") != f"Bearer {fake.api_key}"
            ):
                self._json(401, {"error": "Unauthorized"})
                return
            problem = request_problem(body, fake.model)
            if problem is not None:
                status, message = problem
                self._json(
                    status,
                    {
                        "error": {
                            "message": message,
                            "type": "invalid_request_error",
                            "code": status,
                        }
                    },
                )
                return
            prompt = fake.prompt_tokens(body)
            overflow = fake.overflow(body, prompt)
            if overflow is not None and (overflow[0] != 200 or body.get("stream") is not True):
                self._json(*overflow)
                return
            reply = fake.next_reply()
            if (fake.latency and fake.wait(fake.latency)) or (
                reply.delay and fake.wait(reply.delay)
            ):
                return
            if reply.kind == "hang":
                self.close_connection = True
                return
            if reply.kind == "error":
                self._json(reply.status, reply.body, reply.headers)
                return
            if reply.kind == "raw":
                self._bytes(200, reply.body, "application/json")
                return
            seen, prompt = fake.truncated(body, prompt)
            if fake.reports_prompt_tokens is not None:
                prompt = fake.reports_prompt_tokens
            text = reply.text(seen) if callable(reply.text) else reply.text
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": max(1, len(text) // 4) if text else 0,
            }
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            chunk_id = f"chatcmpl-fake-{fake.next_id()}"
            finish = reply.finish
            if finish == "length":  # cut at max_tokens: the count says so
                usage["completion_tokens"] = int(body.get("max_tokens") or 1)
                usage["total_tokens"] = prompt + usage["completion_tokens"]
            room = fake.answer_room(body, prompt)
            if room is not None and usage["completion_tokens"] > room:
                # llama.cpp stops an answer where the context ends: 200, finish "length".
                text, finish = text[: room * 4], "length"
                usage["completion_tokens"] = room
                usage["total_tokens"] = prompt + room
            if body.get("stream") is not True or reply.kind == "plain":
                answer: dict[str, Any] = {"role": "assistant", "content": text or None}
                if reply.kind == "refusal":
                    answer = {"role": "assistant", "content": None, "refusal": "I can't help."}
                self._json(
                    200,
                    {
                        "id": chunk_id,
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": fake.model,
                        "usage": usage,
                        "choices": [{"index": 0, "message": answer, "finish_reason": finish}],
                    },
                )
                return
            self._start_stream()
            if overflow is not None:  # LM Studio: the overflow as an event of a 200 stream
                self._event(overflow[1], event="error")
                self._done()
                return
            self._event(_chunk(chunk_id, fake.model, {"role": "assistant", "content": ""}))
            if reply.kind == "trickle":
                while not fake.wait(reply.interval):
                    self._event(_chunk(chunk_id, fake.model, {"content": ""}))
                return
            if reply.kind == "runaway":
                piece = "word " * 800
                for _ in range(int(reply.body) // len(piece)):
                    self._event(_chunk(chunk_id, fake.model, {"content": piece}))
                self._event(_chunk(chunk_id, fake.model, {}, finish="stop"))
                self._done()
                return
            if reply.kind == "refusal":
                self._event(_chunk(chunk_id, fake.model, {"refusal": "I can't help with that."}))
            for start in range(0, len(text), 16):
                self._event(_chunk(chunk_id, fake.model, {"content": text[start : start + 16]}))
            if reply.kind == "stream_error":
                self._event({"error": reply.body})
                self._done()
                return
            if reply.kind == "cut":
                return
            self._event(_chunk(chunk_id, fake.model, {}, finish=finish))
            options = body.get("stream_options")
            if isinstance(options, Mapping) and options.get("include_usage"):
                self._event({**_chunk(chunk_id, fake.model, None), "choices": [], "usage": usage})
            self._done()

        def _start_stream(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True

        def _event(self, payload: Any, event: str | None = None) -> None:
            head = f"event: {event}\n" if event else ""
            self.wfile.write(f"{head}data: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        def _done(self) -> None:
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

        def _bytes(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _json(
            self, status: int, payload: Any, headers: Mapping[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

    return Handler


def _chunk(
    chunk_id: str, model: str, delta: dict[str, Any] | None, finish: str | None = None
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": chunk_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT; the first stdout line is the base URL."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--flavour", choices=FLAVOURS, default="vllm")
    parser.add_argument("--n-ctx", type=int, default=0, help="the context in tokens (0: none)")
    parser.add_argument("--model", default="local-model")
    parser.add_argument("--echo", action="store_true", help="answer a digest of the transcript")
    args = parser.parse_args(argv)
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    server = FakeOpenAI(
        flavour=args.flavour,
        n_ctx=args.n_ctx,
        model=args.model,
        latency=args.latency,
        default=Reply.echo() if args.echo else Reply.ok(),
        host=args.host,
        port=args.port,
    )
    server.start()
    try:
        print(server.base_url, flush=True)
        signal.sigwait(stop_signals)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
